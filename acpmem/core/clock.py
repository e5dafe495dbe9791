"""The clock: UTC times as the ISO strings acpmem writes, and the default "now".

Library code never reads the time itself: a ``clock`` (a function returning an aware datetime) is passed in, and
``now_utc`` is only its default, so tests pin it.
"""
from __future__ import annotations

from datetime import datetime, timezone


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


def utc_iso(dt: datetime) -> str:
    """An aware datetime as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return dt.astimezone(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


_PARSED: dict[str, datetime] = {}   # every listing parses the same few thousand times again (datetimes are immutable)
_PARSED_MAX = 50_000      # (about 6 MB at the most)


def parse_iso(value: str) -> datetime:
    dt = _PARSED.get(value) if type(value) is str else None
    if dt is None:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if not dt.tzinfo:
            dt = dt.replace(tzinfo=timezone.utc)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[value] = dt
    return dt
