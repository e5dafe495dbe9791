"""A real OpenAI Responses API server on 127.0.0.1 for tests of hosts that speak it (Codex), scripted turn by turn.

Not a test file: tests import it. It serves ``POST /v1/responses`` (and ``/responses``) as a stream of server-sent
events (``response.created``, ``response.output_item.added``/``done`` for each output item, ``response.completed``),
``GET /v1/models`` as an empty list, and records every request (path, headers, parsed JSON body).

    from responses_server import responses_server, say, call

    def turn(body):                       # a function of the request body: what the model answers
        if not outputs(body):             # no function_call_output yet: call a tool
            return [call("mcp__acpmem__memory_recall", {"query": "upload limit"})]
        return [say("done")]

    with responses_server(turn) as srv:
        ...  # a Codex model_provider with base_url = srv.base_url, wire_api = "responses"
        assert srv.requests[0].body["tools"]

Items: ``say(text)`` an assistant message, ``call(name, args)`` a function call (arguments as JSON text). A turn
function that raises answers HTTP 500 with the error's text, so a script that did not expect a request fails loudly.
"""
from __future__ import annotations

import itertools
import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator

_ids = itertools.count(1)


@dataclass(frozen=True)
class Recorded:
    """One request as received: method, path, lower-cased headers, parsed JSON body (None if not JSON)."""

    method: str
    path: str
    headers: dict
    body: object


def say(text: str) -> dict:
    """An assistant message item."""
    return {"type": "message", "role": "assistant", "id": f"msg_{next(_ids)}", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def call(name: str, arguments: dict | str, call_id: str | None = None, namespace: str | None = None) -> dict:
    """A function call item; ``namespace`` for a tool offered inside a namespace (Codex's ``mcp__<server>``)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    n = next(_ids)
    item = {"type": "function_call", "id": f"fc_{n}", "call_id": call_id or f"call_{n}", "name": name,
            "arguments": args, "status": "completed"}
    if namespace is not None:
        item["namespace"] = namespace
    return item


def outputs(body: dict) -> list[dict]:
    """The ``function_call_output`` items of a request's input, oldest first."""
    return [i for i in body.get("input") or () if isinstance(i, dict) and i.get("type") == "function_call_output"]


def input_text(body: dict) -> str:
    """Every piece of text in a request (instructions and input items), joined: what the model was shown."""
    parts = [body.get("instructions") or ""]
    for item in body.get("input") or ():
        if not isinstance(item, dict):
            continue
        content = item.get("content")
        if isinstance(content, str):
            parts.append(content)
        for c in content if isinstance(content, list) else ():
            if isinstance(c, dict) and isinstance(c.get("text"), str):
                parts.append(c["text"])
        if isinstance(item.get("output"), str):
            parts.append(item["output"])
        if isinstance(item.get("arguments"), str):
            parts.append(item["arguments"])
    return "\n".join(parts)


class ResponsesServer:
    def __init__(self, turn: Callable[[dict], list[dict]]) -> None:
        self.turn = turn
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @property
    def bodies(self) -> list:
        return [r.body for r in self.requests if r.path.rstrip("/").endswith("/responses")]


def _handler(server: ResponsesServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _record(self, body: object) -> None:
            with server.lock:
                server.requests.append(Recorded(self.command, self.path,
                                                {k.lower(): v for k, v in self.headers.items()}, body))

        def _json(self, status: int, doc: object) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._record(None)
            if self.path.split("?")[0].rstrip("/").endswith("/models"):
                self._json(200, {"object": "list", "data": [], "models": []})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            self._record(body)
            if not self.path.split("?")[0].rstrip("/").endswith("/responses") or not isinstance(body, dict):
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                items = server.turn(body)
            except Exception as exc:   # the script did not expect this request: fail it loudly
                self._json(500, {"error": {"message": f"script: {type(exc).__name__}: {exc}"}})
                return
            self._stream(items)

        def _stream(self, items: list[dict]) -> None:
            rid = f"resp_{next(_ids)}"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self._event({"type": "response.created", "response": {"id": rid, "status": "in_progress", "output": []}})
            for i, item in enumerate(items):
                self._event({"type": "response.output_item.added", "output_index": i, "item": item})
                if item.get("type") == "message":
                    text = "".join(c.get("text", "") for c in item["content"])
                    self._event({"type": "response.output_text.delta", "item_id": item["id"], "output_index": i,
                                 "content_index": 0, "delta": text})
                self._event({"type": "response.output_item.done", "output_index": i, "item": item})
            usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
                     "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 110}
            self._event({"type": "response.completed",
                         "response": {"id": rid, "status": "completed", "output": items, "usage": usage}})
            self.wfile.flush()
            self.close_connection = True

        def _event(self, doc: dict) -> None:
            self.wfile.write(f"event: {doc['type']}\ndata: {json.dumps(doc)}\n\n".encode())

    return Handler


@contextmanager
def responses_server(turn: Callable[[dict], list[dict]]) -> Iterator[ResponsesServer]:
    srv = ResponsesServer(turn)
    thread = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()
