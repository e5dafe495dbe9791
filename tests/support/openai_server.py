"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests, scripted answer by answer.

Not a test file: tests import it. It serves ``POST /v1/chat/completions`` (and ``/chat/completions``) in the OpenAI wire
format from a queue of scripted replies, and ``GET /v1/models`` from ``models``; it records every request (path,
headers, parsed JSON body).

    from openai_server import fake_openai, reply

    with fake_openai([reply.rate_limited(retry_after=2), reply.writes(reply.write("- uses pnpm", title="pnpm"))]) as srv:
        ...  # point the client at srv.base_url
        assert srv.requests[0].body["model"] == "m"

Builders (``reply.*``): ``writes(*calls, usage=...)`` a reply whose message calls tools (``write(...)`` builds one
``memory_write`` call, ``call(name, args)`` any tool, ``malformed(...)`` one with broken JSON arguments); ``text(s)`` a plain
answer with no tool call (default: the fork's documented "nothing to keep"); ``props`` what ``GET /props`` answers;
``rate_limited(retry_after=...)`` a 429; ``server_error(status)`` a 5xx; ``slow(seconds, then)``
a reply sent after a delay; ``streamed(r, hold_after=, gate=, tick=, cut=)`` how ``r`` streams (any completion is
sent as SSE chunks to a request with ``stream: true``); ``plain(r)`` JSON even then; ``held(event, then)`` a reply sent once the test sets ``event`` (a
``threading.Event``); ``always(r)`` a reply repeated forever (never leaves the queue); ``usage(prompt, completion,
cached)`` the usage block; ``raw(bytes)`` any body. An empty queue answers 500 "script exhausted", so an unexpected extra
call fails loudly — unless ``srv.responder`` (a function of the request body returning a ``Reply``) is set: then it
answers every call the script does not.

For pytest, ``openai_server_fixture`` is a generator to register in tests/conftest.py:

    from openai_server import openai_server_fixture
    openai_server = pytest.fixture(openai_server_fixture)

It yields a running server with an empty script; tests call ``srv.enqueue(...)``.
"""
from __future__ import annotations

import itertools
import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

_ids = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    """One scripted answer: an HTTP status, headers, a JSON body (or raw bytes), and a delay before sending."""

    status: int = 200
    body: object = None
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0
    raw: bytes | None = None
    repeat: bool = False
    gate: threading.Event | None = None   # held until the test sets it (or the server stops)
    stream: "Streamed | None" = None      # how a streamed answer is sent (``reply.streamed``)
    plain: bool = False                   # sent as JSON even to a request that asks for a stream


@dataclass(frozen=True)
class Streamed:
    """How a completion is streamed: after ``hold_after`` chunks it waits for ``gate`` (sending an empty token
    chunk every ``tick`` seconds meanwhile, when ``tick`` is set: tokens that keep arriving), and ``cut`` closes
    the connection after that many chunks without finishing."""

    hold_after: int | None = None
    gate: threading.Event | None = None
    tick: float | None = None
    cut: int | None = None


@dataclass(frozen=True)
class Recorded:
    """One request as received: method, path, lower-cased headers, parsed JSON body (None if not JSON), raw bytes,
    and the client's end of the connection it came on (host, port)."""

    method: str
    path: str
    headers: dict
    body: object
    raw: bytes
    peer: tuple | None = None


class _Builders:
    """The builder API for scripted answers, exposed as ``reply``."""

    @staticmethod
    def usage(prompt: int = 100, completion: int = 20, cached: int | None = 0) -> dict:
        u: dict = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        if cached is not None:
            u["prompt_tokens_details"] = {"cached_tokens": cached}
        return u

    @staticmethod
    def call(name: str, arguments: dict | str, call_id: str | None = None) -> dict:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        return {"id": call_id or f"call_{next(_ids):06d}", "type": "function",
                "function": {"name": name, "arguments": args}}

    @classmethod
    def write(cls, content: str, title: str | None = None, supersedes: list[str] | None = None,
              call_id: str | None = None) -> dict:
        args: dict = {"content": content}
        if title is not None:
            args["title"] = title
        if supersedes is not None:
            args["supersedes"] = supersedes
        return cls.call("memory_write", args, call_id)

    @classmethod
    def malformed(cls, name: str = "memory_write", arguments: str = '{"content": "- unterminated',
                  call_id: str | None = None) -> dict:
        return cls.call(name, arguments, call_id)

    @classmethod
    def completion(cls, message: dict, *, model: str = "fake-model", usage: dict | None = None,
                   finish_reason: str = "stop") -> dict:
        return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1764424991, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
                "usage": usage if usage is not None else cls.usage()}

    @classmethod
    def writes(cls, *calls: dict, model: str = "fake-model", usage: dict | None = None,
               text: str | None = None) -> Reply:
        message = {"role": "assistant", "content": text, "tool_calls": list(calls)}
        return Reply(body=cls.completion(message, model=model, usage=usage, finish_reason="tool_calls"))

    @classmethod
    def text(cls, content: str = "nothing to keep", *, model: str = "fake-model",
             usage: dict | None = None) -> Reply:
        return Reply(body=cls.completion({"role": "assistant", "content": content}, model=model, usage=usage))

    @staticmethod
    def error(status: int, message: str, *, headers: dict | None = None, kind: str = "server_error") -> Reply:
        return Reply(status=status, body={"error": {"message": message, "type": kind, "code": None}},
                     headers=tuple((headers or {}).items()))

    @classmethod
    def rate_limited(cls, retry_after: float | None = None, retry_after_ms: float | None = None) -> Reply:
        headers = {}
        if retry_after is not None:
            headers["retry-after"] = f"{retry_after:g}"
        if retry_after_ms is not None:
            headers["retry-after-ms"] = f"{retry_after_ms:g}"
        return cls.error(429, "Rate limit reached", headers=headers, kind="rate_limit_error")

    @classmethod
    def server_error(cls, status: int = 500, message: str = "The server had an error") -> Reply:
        return cls.error(status, message)

    @staticmethod
    def slow(seconds: float, then: Reply) -> Reply:
        return Reply(then.status, then.body, then.headers, seconds, then.raw, then.repeat)

    @staticmethod
    def held(gate: threading.Event, then: Reply) -> Reply:
        """``then``, sent only once the test sets ``gate``: the answer is held for as long as the test needs."""
        return Reply(then.status, then.body, then.headers, then.delay, then.raw, then.repeat, gate)

    @staticmethod
    def always(r: Reply) -> Reply:
        return Reply(r.status, r.body, r.headers, r.delay, r.raw, True)

    @staticmethod
    def streamed(r: Reply, *, hold_after: int | None = None, gate: threading.Event | None = None,
                 tick: float | None = None, cut: int | None = None) -> Reply:
        """``r`` (a completion) streamed as SSE chunks, held or cut as ``Streamed`` says. Any completion is
        streamed to a request that asks for it; this only says how."""
        return Reply(r.status, r.body, r.headers, r.delay, r.raw, r.repeat, r.gate,
                     Streamed(hold_after, gate, tick, cut))

    @staticmethod
    def plain(r: Reply) -> Reply:
        """``r`` sent as one JSON answer even when the request asked for a stream (a server that ignores it)."""
        return Reply(r.status, r.body, r.headers, r.delay, r.raw, r.repeat, r.gate, None, True)

    @staticmethod
    def raw(data: bytes, status: int = 200, content_type: str = "application/json") -> Reply:
        return Reply(status=status, raw=data, headers=(("content-type", content_type),))


reply = _Builders()


@dataclass
class FakeOpenAI:
    """The running server: ``base_url`` (ends in /v1), ``requests`` as received, and the remaining ``script``."""

    host: str
    port: int
    script: list[Reply] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    models: list[str] = field(default_factory=lambda: ["fake-model"])   # what GET /v1/models lists
    props: dict | None = None       # what GET /props answers (llama-server's); None: 404, as OpenAI's does
    props_requests: int = 0         # GET /props asked (kept out of ``requests``: those are the model calls)
    responder: object = None        # body -> Reply: answers a chat call when the script is empty (a model stand-in)
    chunks_sent: int = 0            # streamed chunks written, over all answers
    held_s: float = 0.0             # how long the current streamed answer has been held, by the server's clock
    scheme: str = "http"            # "https" where the server speaks TLS (``fake_openai(tls=...)``)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closing: threading.Event = field(default_factory=threading.Event)

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}/v1"

    @property
    def bodies(self) -> list:
        return [r.body for r in self.requests]

    def enqueue(self, *replies: Reply) -> "FakeOpenAI":
        with self._lock:
            self.script.extend(replies)
        return self

    def _next(self) -> Reply:
        with self._lock:
            if not self.script:
                return reply.server_error(500, "script exhausted: the test did not expect this call")
            return self.script[0] if self.script[0].repeat else self.script.pop(0)


def _handler(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/props":
                with server._lock:
                    server.props_requests += 1
                if server.props is None:
                    return self._send(reply.error(404, "no route /props", kind="invalid_request_error"))
                return self._send(Reply(body=server.props))
            with server._lock:
                server.requests.append(Recorded("GET", self.path, {k.lower(): v for k, v in self.headers.items()},
                                                None, b""))
            if self.path.rstrip("/") not in ("/v1/models", "/models"):
                return self._send(reply.error(404, f"no route {self.path}", kind="invalid_request_error"))
            self._send(Reply(body={"object": "list", "data": [{"id": m, "object": "model", "owned_by": "test"}
                                                              for m in server.models]}))

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            with server._lock:
                server.requests.append(Recorded("POST", self.path, {k.lower(): v for k, v in self.headers.items()},
                                                body, raw, peer=self.client_address))
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                return self._send(reply.error(404, f"no route {self.path}", kind="invalid_request_error"))
            with server._lock:
                answer = server.responder if not server.script else None
            r = answer(body) if answer is not None else server._next()
            if r.delay and server._closing.wait(r.delay):
                return
            while r.gate is not None and not r.gate.is_set():
                if server._closing.wait(0.05):
                    return
            if isinstance(body, dict) and body.get("stream") is True and not r.plain and r.raw is None \
                    and r.status == 200 and isinstance(r.body, dict) and r.body.get("choices"):
                return self._stream(r)
            self._send(r)

        def _stream(self, r: Reply) -> None:
            how = r.stream or Streamed()
            try:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                for i, chunk in enumerate(sse_chunks(r.body)):
                    if how.cut is not None and i >= how.cut:
                        break
                    if how.hold_after is not None and i == how.hold_after:
                        start = time.monotonic()
                        while how.gate is not None and not how.gate.is_set():
                            if server._closing.wait(how.tick or 0.05):
                                return
                            with server._lock:
                                server.held_s = time.monotonic() - start
                            if how.tick:
                                self._event(_token_chunk(r.body, ""))
                    self._event(chunk)
                else:
                    self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _event(self, chunk: dict) -> None:
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
            with server._lock:
                server.chunks_sent += 1

        def _send(self, r: Reply) -> None:
            data = r.raw if r.raw is not None else json.dumps(r.body).encode()
            try:
                self.send_response(r.status)
                headers = dict(r.headers)
                headers.setdefault("content-type", "application/json")
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its timeout): nothing to answer

    return Handler


def _token_chunk(completion: dict, content: str | None = None, **delta) -> dict:
    d = dict(delta)
    if content is not None:
        d["content"] = content
    return {"id": completion.get("id"), "object": "chat.completion.chunk", "created": completion.get("created"),
            "model": completion.get("model"), "choices": [{"index": 0, "delta": d, "finish_reason": None}]}


def sse_chunks(completion: dict, piece: int = 7) -> list[dict]:
    """A completion as the chunks a streaming server sends: the role, the text in pieces of ``piece`` characters,
    each tool call's id and name and then its arguments in pieces, the finish reason, and the usage last."""
    message = completion["choices"][0]["message"]
    out = [_token_chunk(completion, role="assistant")]
    text = message.get("content") or ""
    out += [_token_chunk(completion, text[i:i + piece]) for i in range(0, len(text), piece)]
    for n, call in enumerate(message.get("tool_calls") or ()):
        fn = call["function"]
        out.append(_token_chunk(completion, tool_calls=[{"index": n, "id": call["id"], "type": "function",
                                                         "function": {"name": fn["name"], "arguments": ""}}]))
        args = fn["arguments"]
        out += [_token_chunk(completion, tool_calls=[{"index": n, "function": {"arguments": args[i:i + piece]}}])
                for i in range(0, len(args), piece)]
    last = _token_chunk(completion)
    last["choices"][0]["finish_reason"] = completion["choices"][0].get("finish_reason")
    out.append(last)
    if completion.get("usage"):
        out.append({**_token_chunk(completion), "choices": [], "usage": completion["usage"]})
    return out


@contextmanager
def fake_openai(script: list[Reply] | tuple[Reply, ...] = (), *, tls: tuple[Path, Path] | None = None
                ) -> Iterator[FakeOpenAI]:
    """Start the server on an ephemeral port of 127.0.0.1 with ``script``; stop it (and any slow reply) on exit.
    ``tls``: (certificate, key) files — the server speaks HTTPS with them."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = FakeOpenAI("127.0.0.1", httpd.server_address[1], list(script))
    if tls is not None:
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        state.scheme = "https"
    httpd.RequestHandlerClass = _handler(state)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state._closing.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def openai_server_fixture() -> Iterator[FakeOpenAI]:
    """Pytest fixture body: a running fake server with an empty script (register it in conftest.py)."""
    with fake_openai() as srv:
        yield srv


def wait_for_requests(srv: FakeOpenAI, n: int, timeout: float = 10.0) -> list[Recorded]:
    """Wait (bounded) until the server has received ``n`` requests — for callers that run in another process."""
    deadline = time.monotonic() + timeout
    while len(srv.requests) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return list(srv.requests)
