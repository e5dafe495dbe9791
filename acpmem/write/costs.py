"""The local cost ledger (``.acpmem/costs.jsonl``): one line per model call of the fork — tokens, cache hits,
latency, outcome — appended whole by concurrent writers (``acpmem.infra.files.append_record``), read by ``extract``
and ``stats``.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from acpmem.core.errors import ExtractionError
from acpmem.core.limits import MAX_INT, int_between, is_number
from acpmem.infra.files import append_record, read_records

TYPE_CHECKING = False   # typing costs a few ms at start-up (``stats`` runs per turn); annotations only
if TYPE_CHECKING:
    from typing import Any

    from acpmem.write.llm import ChatResult

COSTS_FILE = "costs.jsonl"


def record(result: ChatResult | None, *, at: str, request: str | None = None, session: str | None = None,
           entries: int | None = None, error: ExtractionError | None = None, model: str | None = None) -> dict:
    """One ledger line for a fork: its tokens, latency and outcome. ``at`` is an ISO 8601 UTC string from the caller."""
    rec: dict[str, Any] = {"at": at, "request": request, "session": session,
                           "model": result.model if result else model, "ok": error is None and result is not None}
    if result is not None:
        rec.update(prompt_tokens=result.prompt_tokens, cached_tokens=result.cached_tokens,
                   completion_tokens=result.completion_tokens, latency_s=round(result.latency_s, 3),
                   attempts=result.attempts)
    if entries is not None:
        rec["entries"] = entries
    if error is not None:
        rec.update(error=error.message, reason=error.data.get("reason"), attempts=error.data.get("attempts"))
        if result is None and error.data.get("latency_s") is not None:
            rec["latency_s"] = error.data["latency_s"]   # a timeout took its time too
    return rec


def append(state_dir: Path, rec: Mapping[str, Any]) -> None:
    """Add one record to the vault's ledger."""
    append_record(Path(state_dir) / COSTS_FILE, dict(rec))


def read(state_dir: Path) -> list[dict]:
    """Every record of the vault's ledger, oldest first (lines a crash cut short are skipped)."""
    return read_records(Path(state_dir) / COSTS_FILE)


def summarize(records: list[Mapping[str, Any]], since: str | None = None) -> dict:
    """Totals over ledger records (optionally only those ``at >= since``, ISO strings compare in time order): calls,
    failures, tokens, the cache-hit share of prompt tokens, latency, and the same per model."""
    def empty() -> dict:
        return {"calls": 0, "failed": 0, "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0,
                "latency_s": 0.0}

    total, by_model = empty(), {}
    for rec in records:
        if since is not None and str(rec.get("at", "")) < since:
            continue
        if rec.get("kind") == "embeddings":     # the embedding channel's calls: ``summarize_embeddings``
            continue
        for bucket in (total, by_model.setdefault(str(rec.get("model") or "?"), empty())):
            bucket["calls"] += 1
            bucket["failed"] += 0 if rec.get("ok", True) else 1
            for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
                bucket[key] += _int(rec.get(key))
            lat = rec.get("latency_s")
            bucket["latency_s"] += float(lat) if is_number(lat) and 0 <= lat <= 86_400 else 0.0
    for bucket in (total, *by_model.values()):
        bucket["latency_s"] = round(bucket["latency_s"], 3)
        bucket["cache_hit_rate"] = round(bucket["cached_tokens"] / bucket["prompt_tokens"], 4) \
            if bucket["prompt_tokens"] else 0.0
    total["by_model"] = by_model
    return total


def summarize_embeddings(records: list[Mapping[str, Any]]) -> dict:
    """Totals over the embedding channel's ledger lines (``kind: "embeddings"``, written by its background pass):
    calls, failures, texts embedded, prompt tokens, latency, and the same per model."""
    def empty() -> dict:
        return {"calls": 0, "failed": 0, "texts": 0, "prompt_tokens": 0, "latency_s": 0.0}

    total, by_model = empty(), {}
    for rec in records:
        if rec.get("kind") != "embeddings":
            continue
        for bucket in (total, by_model.setdefault(str(rec.get("model") or "?"), empty())):
            bucket["calls"] += 1
            bucket["failed"] += 0 if rec.get("ok", True) else 1
            bucket["texts"] += _int(rec.get("texts")) if rec.get("ok", True) else 0
            bucket["prompt_tokens"] += _int(rec.get("prompt_tokens"))
            lat = rec.get("latency_s")
            bucket["latency_s"] += float(lat) if is_number(lat) and 0 <= lat <= 86_400 else 0.0
    for bucket in (total, *by_model.values()):
        bucket["latency_s"] = round(bucket["latency_s"], 3)
    total["by_model"] = by_model
    return total


def _int(value: object) -> int:
    return value if int_between(value, 0, MAX_INT) else 0
