"""A real OpenAI-compatible ``POST /v1/embeddings`` server on 127.0.0.1 for tests, with deterministic vectors.

Not a test file: tests import it. A text's vector is a hashed bag of words: each lower-cased word (after
``synonyms`` maps it to a concept word, so a test decides which paraphrases mean the same) adds 1 to one of ``dim``
coordinates chosen by its SHA-256. Texts sharing concepts are similar; others are nearly orthogonal.

    with embeddings_server(synonyms={"alive": "persist"}) as srv:
        ...  # [embeddings] base_url = srv.base_url, model = "hash-64"
        srv.delay = 2.0          # answer late (a timeout)
        srv.hang_over = 1        # never answer a batch of more than 1 text (until the client gives up)
        srv.status = 500         # answer an error
        srv.dim_override = 8     # answer vectors of the wrong length
        srv.dim = 32             # another model behind the same name (a request's "dimensions" is honoured)

It records every request body (``srv.requests``) and the number of texts embedded (``srv.texts``).

It also answers ``POST /v1/rerank`` as rerank servers do (Jina/Cohere shape; ``srv.rerank_shape = "tei"`` for
text-embeddings-inference's bare list, ``"bad"`` for one score too few): a document's relevance is the number of
the query's concepts it shares, unless ``srv.rerank_scores`` (document text → score) says otherwise. Requests go
to ``srv.rerank_requests``; ``srv.rerank_delay`` and ``srv.rerank_status`` script a late or failing model.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

STOP = frozenset("a an the of to in on for and or is are was with across by at it its this that".split())


def vector(text: str, dim: int, synonyms: dict[str, str]) -> list[float]:
    v = [0.0] * dim
    for w in re.findall(r"[a-z0-9]+", text.lower()):
        if w in STOP:
            continue
        w = synonyms.get(w, w)
        v[int.from_bytes(hashlib.sha256(w.encode()).digest()[:4], "big") % dim] += 1.0
    if not any(v):
        v[0] = 1e-3
    return v


class EmbeddingsServer:
    def __init__(self, dim: int, synonyms: dict[str, str]) -> None:
        self.dim, self.synonyms = dim, synonyms
        self.delay = 0.0
        self.hang_over: int | None = None
        self.closing = threading.Event()
        self.status = 200
        self.dim_override: int | None = None
        self.requests: list[dict] = []
        self.texts = 0
        self.rerank_scores: dict[str, float] = {}
        self.rerank_delay = 0.0
        self.rerank_status = 200
        self.rerank_shape = "cohere"
        self.rerank_requests: list[dict] = []
        self._httpd: ThreadingHTTPServer | None = None
        self.scheme = "http"

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"{self.scheme}://{host}:{port}/v1"

    def answer(self, body: dict) -> tuple[int, dict]:
        self.requests.append(body)
        if self.delay:
            time.sleep(self.delay)
        n = len(body.get("input")) if isinstance(body.get("input"), list) else 1
        if self.hang_over is not None and n > self.hang_over:
            self.closing.wait(120)       # no answer: the client's timeout ends it
            return 503, {"error": {"message": "hung", "type": "server_error"}}
        if self.status != 200:
            return self.status, {"error": {"message": "scripted failure", "type": "server_error"}}
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        self.texts += len(texts)
        dim = self.dim_override or int(body.get("dimensions") or 0) or self.dim   # as OpenAI's text-embedding-3
        data = [{"object": "embedding", "index": i, "embedding": vector(t, dim, self.synonyms)}
                for i, t in enumerate(texts)]
        tokens = sum(len(t.split()) for t in texts)
        return 200, {"object": "list", "data": data, "model": body.get("model"),
                     "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


    def concepts(self, text: str) -> set[str]:
        return {self.synonyms.get(w, w) for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP}

    def rerank(self, body: dict) -> tuple[int, object]:
        self.rerank_requests.append(body)
        if self.rerank_delay:
            time.sleep(self.rerank_delay)
        if self.rerank_status != 200:
            return self.rerank_status, {"error": {"message": "scripted failure"}}
        q = self.concepts(body["query"])
        scores = [float(self.rerank_scores.get(d, len(q & self.concepts(d)))) for d in body["documents"]]
        order = sorted(range(len(scores)), key=lambda i: -scores[i])    # servers answer best first
        if self.rerank_shape == "tei":
            return 200, [{"index": i, "score": scores[i]} for i in order]
        results = [{"index": i, "relevance_score": scores[i]} for i in order]
        if self.rerank_shape == "bad":
            results = results[:-1]
        return 200, {"id": "rr", "model": body.get("model"), "results": results,
                     "usage": {"total_tokens": sum(len(d.split()) for d in body["documents"])}}


@contextmanager
def embeddings_server(dim: int = 64, synonyms: dict[str, str] | None = None, *, tls: tuple | None = None
                      ) -> Iterator[EmbeddingsServer]:
    """``tls``: (certificate, key) files — the server speaks HTTPS with them."""
    srv = EmbeddingsServer(dim, dict(synonyms or {}))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.rstrip("/") in ("/v1/embeddings", "/embeddings"):
                status, payload = srv.answer(json.loads(raw))
            elif self.path.rstrip("/") in ("/v1/rerank", "/rerank"):
                status, payload = srv.rerank(json.loads(raw))
            else:
                status, payload = 404, {"error": {"message": "not found"}}
            out = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
            except (BrokenPipeError, ConnectionResetError):
                pass    # the client gave up (a timeout)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    if tls is not None:
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        srv.scheme = "https"
    srv._httpd = httpd
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.closing.set()
        httpd.shutdown()
        httpd.server_close()
