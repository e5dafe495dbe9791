"""The selection formula: one score for visibility and shelf life.

    score = importance + min(days_since_last_read / 30, 5) + uniform(0, 0.5)

A never-read entry counts from ``created``. Weights and caps come from ``[score]`` in ``acpmem.toml``. The jitter
of each entry is a hash-derived uniform draw keyed by (seed or session id, entry id): it is stable within one session
(the resident index must not change under the prompt cache), differs between sessions (so the same few entries
do not hold the top slots forever), and does not shift when other entries are added. Pure: the time and the seed
are passed in.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from acpmem.core.fasthash import sha256
from acpmem.core.clock import parse_iso
from acpmem.core.entry import Entry
from acpmem.core.values import Value

TYPE_CHECKING = False  # typing costs ~5 ms at start-up; annotations only
if TYPE_CHECKING:
    from acpmem.core.settings import ScoreSettings


class Scored(Value):
    entry: Entry
    importance: float      # weighted importance
    days_since_read: float
    anti_recency: float    # min(days / divisor, cap)
    jitter: float
    total: float
    selected: bool = False

    def to_json(self) -> dict:
        return {"id": self.entry.id, "title": self.entry.title, "type": self.entry.type,
                "importance": self.entry.importance, "days_since_read": round(self.days_since_read, 4),
                "anti_recency": round(self.anti_recency, 6), "jitter": round(self.jitter, 6),
                "total": round(self.total, 6), "selected": self.selected,
                "last_read": self.entry.last_read, "created": self.entry.created}


def jitter_for(entry_id: str, salt: str, jitter_max: float) -> float:
    """uniform(0, jitter_max) from the first 64 bits of sha256(salt, id): a uniformly distributed, reproducible
    draw per (salt, entry) that costs one hash."""
    digest = sha256(f"{salt}\x1f{entry_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64 * jitter_max


def _components(entry: Entry, at: datetime, salt: str, cfg: ScoreSettings) -> tuple[float, float, float, float]:
    since = parse_iso(entry.last_read or entry.created)
    days = max((at - since).total_seconds() / 86400.0, 0.0)
    anti = min(days / cfg.recency_divisor_days, cfg.recency_cap)
    jit = jitter_for(entry.id, salt, cfg.jitter_max) if cfg.jitter_max > 0 else 0.0
    return entry.importance * cfg.importance_weight, days, anti, jit


def score_entry(entry: Entry, at: datetime, salt: str, cfg: ScoreSettings) -> Scored:
    imp, days, anti, jit = _components(entry, at, salt, cfg)
    return Scored(entry, imp, days, anti, jit, imp + anti + jit)


def rank(entries: list[Entry], at: datetime, salt: str, cfg: ScoreSettings, top_n: int | None = None) -> list[Scored]:
    """All entries by score, highest first; ties broken by importance, then id. The first ``top_n`` are selected."""
    return list(rank_iter(entries, at, salt, cfg, top_n))


def rank_iter(entries: list[Entry], at: datetime, salt: str, cfg: ScoreSettings,
              top_n: int | None = None) -> Iterator[Scored]:
    """``rank`` as an iterator: every entry is scored and sorted at once, the ``Scored`` values are made as they are
    taken (the resident index stops at its token budget)."""
    n = cfg.top_n if top_n is None else top_n
    rows = []
    for e in entries:
        imp, days, anti, jit = _components(e, at, salt, cfg)
        rows.append((-(imp + anti + jit), -e.importance, e.id, e, imp, days, anti, jit))
    rows.sort(key=lambda r: r[:3])
    for i, (_, _, _, e, imp, days, anti, jit) in enumerate(rows):
        yield Scored(e, imp, days, anti, jit, imp + anti + jit, i < n)


def salt_for(seed: int | None, session: str | None) -> str | None:
    """The jitter salt: an explicit seed wins, else the session id; None with neither (the caller draws one)."""
    if seed is not None:
        return f"seed:{seed}"
    if session:
        return f"session:{session}"
    return None
