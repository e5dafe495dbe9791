"""A real Gemini API server on 127.0.0.1 for tests of Gemini CLI, scripted turn by turn.

Not a test file: tests import it. It serves ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` as one
server-sent event (and ``:generateContent`` as JSON, ``:countTokens``), and records every request. Gemini CLI is
pointed at it with ``GOOGLE_GEMINI_BASE_URL`` (plain http is allowed on 127.0.0.1) and any ``GEMINI_API_KEY``.

    def turn(body):                        # a function of the request body: the model's parts
        if not responses(body):
            return [text("calling"), function_call("mcp_acpmem_memory_recall", {"query": "upload"})]
        return [text("done")]

    with gemini_server(turn) as srv:
        ...  # GOOGLE_GEMINI_BASE_URL=srv.base_url
        srv.bodies[0]["tools"]

A turn function that raises answers HTTP 500 with the error's text, so an unexpected request fails loudly.
"""
from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator


def text(s: str) -> dict:
    return {"text": s}


def function_call(name: str, args: dict) -> dict:
    return {"functionCall": {"name": name, "args": args}}


def responses(body: dict) -> list[dict]:
    """The ``functionResponse`` parts of a request's contents, oldest first."""
    return [p["functionResponse"] for c in body.get("contents") or () for p in c.get("parts") or ()
            if isinstance(p, dict) and "functionResponse" in p]


def declarations(body: dict) -> dict:
    """{name: function declaration} of the tools a request offers."""
    return {f["name"]: f for t in body.get("tools") or () for f in t.get("functionDeclarations") or ()}


class GeminiServer:
    def __init__(self, turn: Callable[[dict], list[dict]]) -> None:
        self.turn = turn
        self.requests: list[tuple[str, object]] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def bodies(self) -> list:
        """The bodies of the model calls (generateContent, streamed or not), in order."""
        return [b for p, b in self.requests if "enerateContent" in p]


def _handler(server: GeminiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, data: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            with server.lock:
                server.requests.append((self.path, None))
            self._send(200, b'{"models": []}', "application/json")

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            with server.lock:
                server.requests.append((self.path, body))
            if ":countTokens" in self.path:
                self._send(200, b'{"totalTokens": 100}', "application/json")
                return
            if "enerateContent" not in self.path or not isinstance(body, dict):
                self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}).encode(),
                           "application/json")
                return
            try:
                parts = server.turn(body)
            except Exception as exc:
                self._send(500, json.dumps({"error": {"code": 500, "message": f"script: {exc!r}"}}).encode(),
                           "application/json")
                return
            answer = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP",
                                      "index": 0}],
                      "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10,
                                        "totalTokenCount": 110},
                      "modelVersion": "scripted"}
            if "alt=sse" in self.path:
                self._send(200, f"data: {json.dumps(answer)}\r\n\r\n".encode(), "text/event-stream")
            else:
                self._send(200, json.dumps(answer).encode(), "application/json")

    return Handler


@contextmanager
def gemini_server(turn: Callable[[dict], list[dict]]) -> Iterator[GeminiServer]:
    srv = GeminiServer(turn)
    thread = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()
