"""Extraction budgets: ``[extraction] max_tokens_per_day`` (prompt + completion tokens of the fork's model calls in
any 24 hours) and ``max_requests_per_hour`` (model calls in any hour), measured on the cost ledger
(``acpmem.write.costs``). Both windows slide, so "when does it free" has one answer: the moment enough of the oldest
calls in the window fall out of it. 0 means no limit. The offline extractor costs nothing and is never held back.

Over budget, a request is not sent: it stays pending with the reason and the time the budget frees
(``requests.defer``), the acknowledgement says so, and ``stats`` and ``doctor`` show it (``docs/design.md``,
"Extraction budgets").
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from acpmem.core.clock import parse_iso, utc_iso
from acpmem.core.limits import MAX_INT, int_between
from acpmem.core.values import Value
from acpmem.write import costs

DAY = timedelta(days=1)
HOUR = timedelta(hours=1)


class BudgetState(Value):
    """Where the budgets stand at ``now``: the use in each window, the limits (0 = none), and when over, why and
    when it frees (ISO)."""

    tokens_24h: int
    calls_1h: int
    max_tokens_per_day: int
    max_requests_per_hour: int
    over: bool = False
    reason: str | None = None
    frees_at: str | None = None

    def to_json(self) -> dict:
        return {"tokens_24h": self.tokens_24h, "calls_1h": self.calls_1h,
                "max_tokens_per_day": self.max_tokens_per_day, "max_requests_per_hour": self.max_requests_per_hour,
                "over": self.over, "reason": self.reason, "frees_at": self.frees_at}


def limited(extraction) -> bool:
    """Whether any budget is set (otherwise the ledger need not be read at all)."""
    return bool(extraction.max_tokens_per_day or extraction.max_requests_per_hour)


def _tokens(rec: Mapping) -> int:
    n = 0
    for key in ("prompt_tokens", "completion_tokens"):
        v = rec.get(key)
        n += v if int_between(v, 0, MAX_INT) else 0
    return n


def _calls(records, now: datetime, window: timedelta) -> list[tuple[datetime, int]]:
    """(time, tokens) of the ledger's model calls within ``window`` before ``now``, oldest first. A line whose time
    does not parse (a hand edit) is skipped."""
    since = now - window
    out = []
    for rec in records:
        if rec.get("kind") == "embeddings":      # the embedding channel's calls are not extraction's
            continue
        try:
            at = parse_iso(str(rec.get("at", "")))
        except ValueError:
            continue
        if since < at <= now:
            out.append((at, _tokens(rec)))
    out.sort(key=lambda x: x[0])
    return out


def state(records, now: datetime, extraction) -> BudgetState:
    """The budgets at ``now`` over the ledger ``records`` (``costs.read``)."""
    max_tok, max_req = extraction.max_tokens_per_day, extraction.max_requests_per_hour
    day = _calls(records, now, DAY) if max_tok else []
    hour = _calls(records, now, HOUR) if max_req else []
    used = sum(t for _, t in day)
    reasons, frees = [], []
    if max_tok and used >= max_tok:
        # frees once the oldest calls have left the window and what remains is under the limit
        left = used
        for at, t in day:
            left -= t
            if left < max_tok:
                frees.append(at + DAY)
                break
        reasons.append(f"{used:,} of max_tokens_per_day {max_tok:,} tokens used in the last 24 hours")
    if max_req and len(hour) >= max_req:
        frees.append(hour[len(hour) - max_req][0] + HOUR)
        reasons.append(f"{len(hour)} of max_requests_per_hour {max_req} model calls made in the last hour")
    return BudgetState(used, len(hour), max_tok, max_req, bool(reasons), "; ".join(reasons) or None,
                       utc_iso(max(frees)) if frees else None)


def current(state_dir, now: datetime, extraction) -> BudgetState | None:
    """The budgets now, from the vault's ledger; None when no budget is set."""
    if not limited(extraction):
        return None

    return state(costs.read(state_dir), now, extraction)
