"""A session's frozen resident index on disk: where it is, and reading it without loading anything else.

Every later turn of a session asks for the same bytes, so this path is the hottest in acpmem: one file read, and
only the discovery module imported (``acpmem.read.resident`` writes the snapshot).
"""
from __future__ import annotations

from pathlib import Path

from acpmem.vault.discovery import session_folder

SNAPSHOT = "index.txt"


def frozen_index(state_dir: Path, session: str) -> str | None:
    """A session's frozen index if one was stored, else None."""
    try:
        return (session_folder(state_dir, session) / SNAPSHOT).read_text("utf-8")
    except FileNotFoundError:
        return None
