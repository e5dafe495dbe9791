"""A client for OpenAI-compatible ``POST /v1/embeddings`` endpoints (OpenAI, Ollama, vLLM, LM Studio, gateways).

Plain ``http.client``: a recall embeds its query within a budget of about half a second, and importing the ``openai``
package alone costs more than that on a cold start (``urllib.request`` costs 31 ms to import, ``http.client`` 14). The answer is checked strictly: as many vectors as texts, in
order, finite numbers, all of one length (the configured ``dimensions`` when set).

Where the endpoint is: ``[embeddings] base_url``, else ``OPENAI_BASE_URL``, else OpenAI's; the key is the variable
named by ``[embeddings] api_key_env`` (default ``OPENAI_API_KEY``) — the same fallbacks as extraction. The channel
is on only when ``[embeddings] model`` names a model.
"""
from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from acpmem.core.values import Value

DEFAULT_BASE_URL = "https://api.openai.com/v1"
MAX_ANSWER_BYTES = 256 * 1024 * 1024


class EmbeddingFailed(Exception):
    """The endpoint could not be reached in time, refused, or answered something that is not embeddings.
    ``timed_out``: it did not answer in time (a smaller batch may)."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class Endpoint(Value):
    base_url: str
    model: str
    api_key: str | None
    dimensions: int = 0
    query_prefix: str = ""
    document_prefix: str = ""

    @property
    def vector_key(self) -> str:
        """What entry vectors are stored under: the model, the prefix its documents were embedded with and the
        dimensions asked for — a change of either makes other vectors, as a changed model does."""
        parts = [self.model]
        if self.document_prefix or self.dimensions:
            parts.append(self.document_prefix)
        if self.dimensions:
            parts.append(str(self.dimensions))
        return "\t".join(parts)

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/embeddings"

    def describe(self) -> dict:
        return {"base_url": self.base_url, "model": self.model, "dimensions": self.dimensions or None,
                "api_key": "set" if self.api_key else "not set"}


class Embedded(Value):
    vectors: tuple[tuple[float, ...], ...]
    tokens: int
    latency_s: float


def resolve(section: Mapping, env: Mapping[str, str] | None = None) -> Endpoint | None:
    """The endpoint of an ``[embeddings]`` section, or None when no model is configured (the channel is off)."""
    model = str(section.get("model") or "").strip()
    if not model:
        return None
    base, key = locate(section, env, DEFAULT_BASE_URL)
    return Endpoint(base_url=base, model=model, api_key=key, dimensions=int(section.get("dimensions") or 0),
                    query_prefix=str(section.get("query_prefix") or ""),
                    document_prefix=str(section.get("document_prefix") or ""))


def locate(section: Mapping, env: Mapping[str, str] | None = None, default: str = "") -> tuple[str, str | None]:
    """(base URL, key) of a model section (``[embeddings]``, ``[rerank]``): ``base_url``, else ``OPENAI_BASE_URL``,
    else ``default``; the key from the variable ``api_key_env`` names (default ``OPENAI_API_KEY``)."""
    e = os.environ if env is None else env
    base = str(section.get("base_url") or "").strip() or e.get("OPENAI_BASE_URL", "").strip() or default
    return base.rstrip("/"), e.get(str(section.get("api_key_env") or "OPENAI_API_KEY")) or None


def embed(endpoint: Endpoint, texts: Sequence[str], timeout: float) -> Embedded:
    """The vectors of ``texts`` (one request). Raises ``EmbeddingFailed`` with a one-line reason."""
    body: dict = {"model": endpoint.model, "input": list(texts), "encoding_format": "float"}
    if endpoint.dimensions:
        body["dimensions"] = endpoint.dimensions
    raw, latency = post_json(endpoint.url, endpoint.base_url, body, endpoint.api_key, timeout, "embeddings",
                             EmbeddingFailed)
    return parse(raw, len(texts), endpoint.dimensions, latency)


_TLS_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE")   # what a default TLS context reads when it is made
_TLS_CONTEXTS: dict[tuple, object] = {}


def tls_context():
    """The TLS context of this process's HTTPS calls (``http.client``'s default: the system's CA store, or the one
    ``SSL_CERT_FILE``/``SSL_CERT_DIR`` name), made once for each value of the variables it reads: making one reads
    and parses the CA store, ~17 ms of CPU that every call to an HTTPS endpoint paid. The read server makes it
    before it forks its readers, so a recall through an HTTPS embeddings or rerank endpoint does not. Raises
    ``OSError`` (``ssl.SSLError``) where the CA store cannot be read."""
    key = tuple(os.environ.get(k) for k in _TLS_ENV)
    ctx = _TLS_CONTEXTS.get(key)
    if ctx is None:
        import ssl

        ctx = _TLS_CONTEXTS.setdefault(key, ssl.create_default_context())
    return ctx


def post_json(url: str, base_url: str, body: dict, api_key: str | None, timeout: float, what: str,
              failed: type[Exception]) -> tuple[bytes, float]:
    """POST ``body`` as JSON to ``url`` within ``timeout`` seconds; the answer's bytes and the latency. Any failure
    raises ``failed`` with one line naming ``what`` endpoint (``embeddings``, ``rerank``)."""
    # lazy: a write imports this module for its duplicate check, which calls an endpoint only where one is set
    # (http.client, with the ssl and email modules it brings: +17 ms of CPU to every `remember`, measured)
    import http.client

    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"

    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise failed(f"the {what} endpoint is not an http(s) URL: {base_url[:200]}")
    t0 = time.monotonic()
    try:
        conn = http.client.HTTPSConnection(u.hostname, u.port, timeout=timeout, context=tls_context()) \
            if u.scheme == "https" else http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        try:
            conn.request("POST", u.path + (f"?{u.query}" if u.query else ""),
                         json.dumps(body, ensure_ascii=False).encode("utf-8"), headers)
            resp = conn.getresponse()
            if resp.status != 200:
                raise failed(f"the {what} endpoint answered HTTP {resp.status}")
            raw = resp.read(MAX_ANSWER_BYTES + 1)
        finally:
            conn.close()
    except (OSError, http.client.HTTPException, ValueError) as exc:
        timed_out = isinstance(exc, TimeoutError) or "timed out" in str(exc)
        why = "timed out" if timed_out else str(exc) or type(exc).__name__
        exc_out = failed(f"the {what} endpoint could not be reached ({why[:200]})")
        exc_out.timed_out = timed_out
        raise exc_out from None
    if len(raw) > MAX_ANSWER_BYTES:
        raise failed(f"the {what} endpoint answered more than 256 MB")
    return raw, time.monotonic() - t0


def parse(raw: bytes, n: int, dimensions: int, latency: float = 0.0) -> Embedded:
    """Check an ``/embeddings`` answer for ``n`` texts strictly."""
    try:
        data = json.loads(raw)
        items = data["data"]
        if not isinstance(items, list) or len(items) != n:
            raise ValueError(f"{len(items) if isinstance(items, list) else 'no'} vectors for {n} texts")
        order = sorted(range(n), key=lambda i: items[i].get("index", i) if isinstance(items[i], dict) else i)
        vectors = []
        for i in order:
            vec = items[i]["embedding"]
            if not isinstance(vec, list) or not vec or not all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in vec):
                raise ValueError("an embedding is not a list of finite numbers")
            vectors.append(tuple(float(x) for x in vec))
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        raise EmbeddingFailed(f"the embeddings endpoint answered something else than embeddings ({str(exc)[:120]})") \
            from None
    dims = {len(v) for v in vectors}
    if len(dims) > 1 or (dimensions and dims != {dimensions}):
        got = ", ".join(str(d) for d in sorted(dims))
        raise EmbeddingFailed(f"the embeddings endpoint returned vectors of {got} dimensions"
                              + (f", not the {dimensions} configured" if dimensions else ""))
    usage = data.get("usage") if isinstance(data, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    tokens = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and 0 <= tokens < 2**53 else 0
    return Embedded(vectors=tuple(vectors), tokens=tokens, latency_s=latency)


__all__ = ["Endpoint", "Embedded", "EmbeddingFailed", "resolve", "locate", "embed", "parse", "post_json",
           "tls_context"]
