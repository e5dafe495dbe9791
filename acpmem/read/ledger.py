"""A session's surfacing ledger (``.acpmem/sessions/<session>/surfaced.json``): the entries surfaced and recalled
in it and the bytes surfaced so far. ``acpmem.read.retrieval`` keeps it; ``stats`` reads it.
"""
from __future__ import annotations

import json
from pathlib import Path

from acpmem.core.ids import ID_RE
from acpmem.core.limits import MAX_INT

LEDGER = "surfaced.json"


def read_ledger(sdir: Path) -> dict:
    """A session's surfacing ledger: the ids surfaced and recalled in it, and the bytes surfaced so far."""
    try:
        data = json.loads((sdir / LEDGER).read_text("utf-8"))
        if isinstance(data, dict):
            used = int(data.get("used_bytes", 0))
            lists = data.get("surfaced", []), data.get("recalled", [])
            if not 0 <= used <= MAX_INT or not all(isinstance(ids, list) for ids in lists):
                raise ValueError(used)
            # entry ids only: the ledger is written back, and anything else (a lone surrogate) could not be
            surfaced, recalled = ([i for i in ids if isinstance(i, str) and ID_RE.match(i)] for ids in lists)
            return {"surfaced": surfaced, "recalled": recalled, "used_bytes": used}
    except (OSError, ValueError, TypeError, OverflowError):
        pass  # missing or unreadable: a fresh ledger (worst case an entry is shown once more)
    return {"surfaced": [], "recalled": [], "used_bytes": 0}


def write_ledger(sdir: Path, ledger: dict) -> None:
    """Write a session's ledger back: atomic (a reader sees the old one or the new one), not fsynced — a ledger lost
    to a power cut costs at most an entry shown once more in that session, and the per-turn commands that write it
    (``surface``, ``recall``) would otherwise wait on the disk every turn."""
    from acpmem.infra.files import atomic_write

    atomic_write(sdir / LEDGER, json.dumps(ledger, ensure_ascii=False, indent=1), durable=False)


__all__ = ["LEDGER", "read_ledger", "write_ledger"]
