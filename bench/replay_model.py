"""Serve a recorded model again: an OpenAI-compatible endpoint on 127.0.0.1 that answers each chat-completions
request with the answer a real model gave to the same request, from a folder ``--record`` wrote
(``bench/efficacy.py --record DIR``, ``bench/real_model.py --record DIR``).

    python bench/replay_model.py RECORD_DIR [--port 8090] [--upstream http://127.0.0.1:8088/v1]
    python bench/efficacy.py --base-url http://127.0.0.1:8090/v1 ...   # the same settings as the recorded run

A run's extraction is then reproduced in seconds, without the model, and a change made after the model answered —
how answers become entries, what is kept beside them, how recall ranks them — is measured on the same answers.
Requests are matched by their messages, response format and tools (not the model name or the streaming options);
one asked again gets the recorded answers in order, the last one repeated. A request the record does not hold is
answered 404 with a one-line reason, so a run whose prompts changed fails loudly rather than scoring other answers —
or, with ``--upstream URL``, asked of that endpoint (the real model) and added to the record, so a change that alters
some prompts costs only the model time of those.
A streamed request gets the recorded answer as server-sent events (its text, its tool calls, its usage).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def request_key(body: dict) -> str:
    """What makes two requests the same question: messages, response format and tools."""
    asked = {k: body.get(k) for k in ("messages", "response_format", "tools")}
    return hashlib.sha256(json.dumps(asked, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def next_answer_path(folder: Path) -> Path:
    """Where a record's next answer goes: after the highest number in ``folder``, so a record with gaps (answers
    removed by hand) or a resumed run's record is added to, never overwritten."""
    n = max((int(f.stem[7:]) for f in folder.glob("answer-*.json") if f.stem[7:].isdigit()), default=0)
    return folder / f"answer-{n + 1:03d}.json"


def load_record(folder: Path) -> tuple[dict[str, list[dict]], str]:
    """The recorded answers by request key, in the order they were recorded, and the model they came from."""
    files = sorted(folder.glob("answer-*.json"))
    if not files:
        raise ValueError(f"no answer-*.json in {folder} — pass the folder a --record run wrote")
    by_key: dict[str, list[dict]] = {}
    model = ""
    for f in files:
        try:
            rec = json.loads(f.read_text("utf-8"))
        except ValueError:
            raise ValueError(f"{f} is not valid JSON — remove it or record the run again") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("request"), dict) or rec.get("status") != 200:
            continue   # an error answer is not replayed: the request is asked again of whoever serves it
        by_key.setdefault(request_key(rec["request"]), []).append(rec["response"])
        model = model or str(rec["request"].get("model") or "")
    return by_key, model


class Replay:
    def __init__(self, folder: Path, port: int = 0, upstream: str | None = None) -> None:
        self.folder, self.upstream = folder, (upstream or "").rstrip("/") or None
        self.answers, self.model = load_record(folder)
        self.asked = 0
        self.served: dict[str, int] = {}
        self.missed = 0
        self.lock = threading.Lock()
        replay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _json(self, status: int, doc: dict) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    return self._json(200, {"object": "list", "data": [{"id": replay.model, "object": "model"}]})
                self._json(404, {"error": {"message": f"{self.path}: not served by a replay"}})

            def do_POST(self):
                n = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(n) or b"null")
                except ValueError:
                    return self._json(400, {"error": {"message": "the request is not JSON"}})
                if not self.path.rstrip("/").endswith("/chat/completions") or not isinstance(body, dict):
                    return self._json(404, {"error": {"message": f"{self.path}: not served by a replay"}})
                answer = replay.next_answer(body)
                if answer is None and replay.upstream:
                    try:
                        answer = replay.ask_upstream(body)
                    except (OSError, ValueError) as exc:   # not answering, or an answer that is not JSON
                        return self._json(502, {"error": {"message": f"--upstream did not answer: {exc}"}})
                if answer is None:
                    with replay.lock:
                        replay.missed += 1
                    return self._json(404, {"error": {"message": "this request is not in the record (its prompt "
                                                      "changed since the run was recorded)"}})
                if body.get("stream"):
                    return self._stream(answer)
                self._json(200, {"id": "replay", "object": "chat.completion", "created": 0,
                                 "model": answer.get("model") or replay.model,
                                 "choices": answer.get("choices") or [], "usage": answer.get("usage") or {}})

            def _stream(self, answer: dict) -> None:
                choice = (answer.get("choices") or [{}])[0]
                msg = choice.get("message") or {}
                delta: dict = {"role": "assistant", "content": msg.get("content") or ""}
                if msg.get("tool_calls"):
                    delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(msg["tool_calls"])]
                base = {"id": "replay", "object": "chat.completion.chunk", "created": 0,
                        "model": answer.get("model") or replay.model}
                events = [dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": None}]),
                          dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason")
                                               or "stop"}]),
                          dict(base, choices=[], usage=answer.get("usage") or {})]
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                for e in events:
                    self.wfile.write(f"data: {json.dumps(e, ensure_ascii=False)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True

    def next_answer(self, body: dict) -> dict | None:
        key = request_key(body)
        with self.lock:
            got = self.answers.get(key)
            if not got:
                return None
            n = self.served.get(key, 0)
            self.served[key] = n + 1
            return got[min(n, len(got) - 1)]

    def ask_upstream(self, body: dict) -> dict:
        """The request asked of ``--upstream`` (not streamed), its answer recorded beside the others as a
        ``--record`` run writes it, and served."""
        import time
        import urllib.request

        asked = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        req = urllib.request.Request(self.upstream + "/chat/completions", data=json.dumps(asked).encode(),
                                     headers={"Content-Type": "application/json"})
        t0 = time.monotonic()
        with urllib.request.urlopen(req, timeout=3600) as r:
            answer = json.loads(r.read())
        with self.lock:
            self.asked += 1
            rec = {"request": body, "status": 200, "response": answer, "wall_s": round(time.monotonic() - t0, 2)}
            next_answer_path(self.folder).write_text(json.dumps(rec, ensure_ascii=False, indent=1), "utf-8")
            key = request_key(body)
            self.answers.setdefault(key, []).append(answer)
            self.served[key] = len(self.answers[key])
        return answer

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def start(self) -> "Replay":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("record", type=Path, help="a folder of answer-*.json that a --record run wrote")
    def port(text: str) -> int:
        n = int(text)
        if not 0 <= n <= 65535:
            raise ValueError(text)
        return n

    def url(text: str) -> str:
        if not text.startswith(("http://", "https://")):
            raise ValueError(text)
        return text

    port.__name__, url.__name__ = "port (0-65535)", "http(s) URL"   # what argparse's error names
    p.add_argument("--port", type=port, default=8090, help="port on 127.0.0.1 (0: any free one)")
    p.add_argument("--upstream", type=url, help="ask this OpenAI-compatible endpoint what the record does not hold, and add "
                                      "its answers to the record")
    a = p.parse_args(argv)
    try:
        replay = Replay(a.record, a.port, a.upstream)
    except (ValueError, OSError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(f"replaying {sum(len(v) for v in replay.answers.values())} recorded answers of {replay.model or '?'} "
          f"at {replay.base_url}", flush=True)
    def stop(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)   # stopped as a background job is (SIGINT is ignored there): say what it did
    try:
        replay.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        print(f"{sum(replay.served.values()) - replay.asked} answered from the record, {replay.asked} asked of "
              f"--upstream, {replay.missed} not in the record", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
