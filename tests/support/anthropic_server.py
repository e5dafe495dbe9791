"""A real Anthropic Messages API server on 127.0.0.1 for tests, answering from a script of our own.

Not a test file: tests import it. It serves ``POST /v1/messages`` — streamed as server-sent events
(``message_start``, ``content_block_start``/``_delta``/``_stop`` with ``text_delta`` and ``input_json_delta``,
``message_delta``, ``message_stop``) when the request says ``"stream": true``, else one JSON message — and
``POST /v1/messages/count_tokens``. Every request is recorded (path, lower-cased headers, parsed body) before it is
answered, so a test can assert on exactly what the client sent.

The answers come from ``responder``, a function of the request body returning the assistant's content blocks
(``text(...)``, ``tool_use(...)``); the stop reason is ``tool_use`` when a block calls a tool, else ``end_turn``.

    from anthropic_server import fake_anthropic, text, tool_use

    with fake_anthropic(lambda body: [text("hello")]) as srv:
        ...  # ANTHROPIC_BASE_URL=srv.base_url
        assert srv.requests[0].body["model"]
"""
from __future__ import annotations

import itertools
import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator

_ids = itertools.count(1)


def text(s: str) -> dict:
    return {"type": "text", "text": s}


def tool_use(name: str, arguments: dict, ident: str | None = None) -> dict:
    return {"type": "tool_use", "id": ident or f"toolu_{next(_ids):04d}", "name": name, "input": arguments}


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict
    body: object


@dataclass
class FakeAnthropic:
    host: str
    port: int
    responder: Callable[[dict], list[dict]]
    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def messages(self) -> list[dict]:
        """The bodies of the ``/v1/messages`` requests, in arrival order."""
        return [r.body for r in self.requests if r.path.split("?")[0] == "/v1/messages"]


def message(blocks: list[dict], model: str) -> dict:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {"id": f"msg_{next(_ids):04d}", "type": "message", "role": "assistant", "model": model, "content": blocks,
            "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0}}


def sse_events(msg: dict, piece: int = 16) -> list[tuple[str, dict]]:
    """The events that stream ``msg``: text in pieces of ``piece`` characters, tool input as partial JSON."""
    head = {**msg, "content": [], "stop_reason": None, "usage": {**msg["usage"], "output_tokens": 1}}
    out: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": head})]
    for i, b in enumerate(msg["content"]):
        if b["type"] == "text":
            out.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": {"type": "text", "text": ""}}))
            for k in range(0, len(b["text"]), piece):
                out.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                    "delta": {"type": "text_delta", "text": b["text"][k:k + piece]}}))
        else:
            out.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                "type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}}))
            raw = json.dumps(b["input"])
            for k in range(0, len(raw), piece):
                out.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                    "type": "input_json_delta", "partial_json": raw[k:k + piece]}}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": msg["stop_reason"],
                                                                     "stop_sequence": None},
                                  "usage": {"output_tokens": msg["usage"]["output_tokens"]}}))
    out.append(("message_stop", {"type": "message_stop"}))
    return out


def _handler(state: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _json(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            with state.lock:
                state.requests.append(Recorded("POST", self.path, {k.lower(): v for k, v in self.headers.items()},
                                               body))
            path = self.path.split("?")[0]
            if path == "/v1/messages/count_tokens":
                return self._json(200, {"input_tokens": 100})
            if path != "/v1/messages" or not isinstance(body, dict):
                return self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": path}})
            try:
                msg = message(state.responder(body), body.get("model") or "claude-test")
            except Exception as exc:   # a script error: loud, as an API error the client shows
                return self._json(500, {"type": "error", "error": {"type": "api_error", "message": repr(exc)}})
            if not body.get("stream"):
                return self._json(200, msg)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for name, data in sse_events(msg):
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()
            self.close_connection = True

    return Handler


@contextmanager
def fake_anthropic(responder: Callable[[dict], list[dict]]) -> Iterator[FakeAnthropic]:
    """Start the server on an ephemeral port of 127.0.0.1; stop it on exit."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = FakeAnthropic("127.0.0.1", httpd.server_address[1], responder)
    httpd.RequestHandlerClass = _handler(state)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
