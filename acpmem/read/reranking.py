"""The optional rerank stage of recall: a rerank model reorders recall's best entries.

Off unless ``[rerank] model`` is set (``acpmem.infra.rerankclient.resolve``); then nothing of it is imported by a
recall without it. Recall ranks as always (words, and meaning when the embedding channel is on), hands the query
and the text of its best ``[rerank] candidates`` entries to the model in one call within ``timeout_seconds``, and
merges the two orders by reciprocal rank (k = 60): the model's reading of query and entry together, and recall's
own signals (citation neighbours, tags, dates, the duplicate step-back) that the model does not see. Measured on
LoCoMo (docs/design.md). Entries past the candidates keep their place.

The queries recall answers by construction keep its order, as they get no vector share: an identifier, a misspelt
word, a query in a script the model is not set for (``[rerank] languages``). So does a one-word query: a rerank
model is trained to relate a question to a passage, and with one word there is nothing to relate — which entry is
most about that word is what the term scores, tags and title weigh (on the kernel corpus the stage moved
"authentication", "upload" and "cache" down). A model that fails or is late leaves recall's order, with a
warning; recall never fails because of it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from acpmem.infra import rerankclient
from acpmem.search.analysis import has_cjk

RRF_K = 60                # the reciprocal-rank constant (the usual one; not fitted)
MAX_TEXT_CHARS = 2000     # of each entry sent: title and body, cut (a cross-encoder reads 512 tokens at most)


def endpoint(settings, env: Mapping[str, str] | None = None) -> rerankclient.RerankEndpoint | None:
    return rerankclient.resolve(dict(settings.rerank), env)


def merge(scores: Sequence[float]) -> list[int]:
    """Positions 0..n-1 (recall's order) reordered by the sum of their reciprocal ranks in recall's order and in
    the model's (``scores``, higher first); ties keep recall's order."""
    n = len(scores)
    fused = [1.0 / (RRF_K + 1 + i) for i in range(n)]
    for r, i in enumerate(sorted(range(n), key=lambda j: (-scores[j], j))):
        fused[i] += 1.0 / (RRF_K + 1 + r)
    return sorted(range(n), key=lambda j: (-fused[j], j))


def rerank(settings, query: str, texts: Sequence[str], sure: bool, words: int = 2,
           env: Mapping[str, str] | None = None) -> tuple[list[int] | None, dict]:
    """The new order of ``texts`` (recall's best, best first) or None to keep it, and what to report (model,
    candidates, used, and ``skipped`` or ``warning``). ``sure``: recall answers this query by construction;
    ``words``: how many words it searched for."""
    ep = endpoint(settings, env)
    report: dict = {"model": ep.model if ep else "", "candidates": len(texts), "used": False}
    if ep is None or len(texts) < 2:
        return None, report
    cfg = settings.rerank
    languages = {x.strip() for x in cfg.languages.split(",")}
    if sure:
        report["skipped"] = "the query is an identifier or has a misspelt word: recall's order is kept"
        return None, report
    if words < 2:
        report["skipped"] = "a one-word query: recall's order is kept"
        return None, report
    if has_cjk(query) and "zh" not in languages:
        report["skipped"] = "the query is Chinese and the rerank model is set for " + ", ".join(sorted(languages))
        return None, report
    try:
        got = rerankclient.rerank(ep, query, [t[:MAX_TEXT_CHARS] for t in texts], cfg.timeout_seconds)
    except rerankclient.RerankFailed as exc:
        report["warning"] = f"{exc}; recall kept its own order"
        return None, report
    report["used"] = True
    return merge(got.scores), report


def status(settings, env: Mapping[str, str] | None = None, *, probe: bool = True) -> dict | None:
    """For ``doctor`` and ``stats``: the model, the endpoint and whether it answers (one short probe). None when
    the stage is off."""
    ep = endpoint(settings, env)
    if ep is None:
        return None
    out: dict = {"model": ep.model, "base_url": ep.base_url, "candidates": settings.rerank.candidates}
    if probe:
        try:
            rerankclient.rerank(ep, "ping", ["ping", "pong"], max(settings.rerank.timeout_seconds, 2.0))
            out["reachable"] = True
        except rerankclient.RerankFailed as exc:
            out["reachable"] = False
            out["error"] = str(exc)
    return out


__all__ = ["RRF_K", "endpoint", "merge", "rerank", "status"]
