"""A client for rerank endpoints: ``POST {base_url}/rerank`` with a query and documents, one relevance score back
per document.

The shape is the one Jina and Cohere defined and most servers speak: vLLM, llama.cpp's server, Infinity, LocalAI,
gateways (``{"model", "query", "documents": [...], "top_n"}`` → ``{"results": [{"index", "relevance_score"}]}``);
only those four fields are sent, the ones every one of them takes. A bare list of ``{"index", "score"}`` (the
answer of Hugging Face's text-embeddings-inference, behind a gateway that renames its request) is read too. The
answer is checked strictly: every document scored once, finite numbers. The HTTP call is
``embedclient.post_json`` (plain ``http.client``: recall's budget is short).

Where the endpoint is: ``[rerank] base_url``, else ``OPENAI_BASE_URL`` (a gateway that serves both); the key is the
variable named by ``[rerank] api_key_env``. The stage is on only when ``[rerank] model`` names a model.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

from acpmem.core.values import Value
from acpmem.infra.embedclient import locate, post_json


class RerankFailed(Exception):
    """The endpoint could not be reached in time, refused, or answered something that is not one score per text."""


class RerankEndpoint(Value):
    base_url: str          # "" when neither [rerank] base_url nor OPENAI_BASE_URL is set
    model: str
    api_key: str | None

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/rerank"


class Reranked(Value):
    scores: tuple[float, ...]     # one per document, in the order they were sent
    latency_s: float


def resolve(section: Mapping, env: Mapping[str, str] | None = None) -> RerankEndpoint | None:
    """The endpoint of a ``[rerank]`` section, or None when no model is configured (the stage is off)."""
    model = str(section.get("model") or "").strip()
    if not model:
        return None
    base, key = locate(section, env)
    return RerankEndpoint(base_url=base, model=model, api_key=key)


def rerank(endpoint: RerankEndpoint, query: str, documents: Sequence[str], timeout: float) -> Reranked:
    """The relevance of each of ``documents`` to ``query`` (one request). Raises ``RerankFailed`` with one line."""
    if not endpoint.base_url:
        raise RerankFailed("the rerank stage has no endpoint: set [rerank] base_url (or OPENAI_BASE_URL)")
    body = {"model": endpoint.model, "query": query, "documents": list(documents), "top_n": len(documents)}
    raw, latency = post_json(endpoint.url, endpoint.base_url, body, endpoint.api_key, timeout, "rerank",
                             RerankFailed)
    return parse(raw, len(documents), latency)


def parse(raw: bytes, n: int, latency: float = 0.0) -> Reranked:
    """Check a rerank answer for ``n`` documents strictly: ``{"results": [...]}`` or a bare list, each item an
    ``index`` in range, seen once, with a finite ``relevance_score`` (or ``score``)."""
    try:
        data = json.loads(raw)
        items = data["results"] if isinstance(data, dict) else data
        if not isinstance(items, list) or len(items) != n:
            raise ValueError(f"{len(items) if isinstance(items, list) else 'no'} scores for {n} texts")
        scores: list[float | None] = [None] * n
        for item in items:
            index = item["index"]
            score = item["relevance_score"] if "relevance_score" in item else item["score"]
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n or scores[index] is not None:
                raise ValueError(f"a result's index is not one of the texts sent once: {str(index)[:40]}")
            if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
                raise ValueError("a relevance score is not a finite number")
            scores[index] = float(score)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        raise RerankFailed(f"the rerank endpoint answered something else than one score per text "
                           f"({str(exc)[:120]})") from None
    return Reranked(scores=tuple(scores), latency_s=latency)   # type: ignore[arg-type]  (all set: n unique indexes)


__all__ = ["RerankEndpoint", "Reranked", "RerankFailed", "resolve", "rerank", "parse"]
