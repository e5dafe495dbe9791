"""The library's read-side operations over a vault: listing, the frozen resident index, scores, show, doctor.

Adapters (CLI, MCP server, hooks) call these and render the result; none of them reads files or git itself.
"""
from __future__ import annotations

import contextlib
import os
from datetime import datetime
from pathlib import Path

from acpmem import render
from acpmem.catalog import Problem
from acpmem.discovery import session_folder
from acpmem.errors import UsageError
from acpmem.model import Entry, parse_iso
from acpmem.score import Scored, rank, salt_for
from acpmem.vault import Vault, atomic_write


def list_entries(vault: Vault, *, include_superseded: bool = False,
                 light: bool = False) -> tuple[list[Entry], list[Problem]]:
    """The entries (and the files that do not parse). ``light``: index fields only, no body — for listings."""
    loaded = vault.load(light=light)
    entries = loaded.entries if include_superseded else loaded.live()
    return entries, loaded.problems


def scores(vault: Vault, *, at: datetime | None = None, seed: int | None = None, session: str | None = None,
           top_n: int | None = None) -> list[Scored]:
    at = at or vault.clock()
    entries, _ = list_entries(vault, light=True)
    return rank(entries, at, salt_for(seed, session), vault.settings.score, top_n)


def session_dir(vault: Vault, session: str) -> Path:
    """Per-session local state (ledgers, the frozen index) under .acpmem/sessions/, named safely."""
    return session_folder(vault.state_dir, session)


def resident_index(vault: Vault, *, session: str | None = None, refresh: bool = False, at: datetime | None = None,
                   seed: int | None = None, budget_tokens: int | None = None) -> str:
    """The resident index text (SPEC §6.1). With a session id it is frozen: the first call stores the text and
    every later call in that session returns the same bytes, until ``refresh``."""
    snap_path = session_dir(vault, session) / "index.txt" if session else None
    if snap_path is not None and not refresh:
        with contextlib.suppress(FileNotFoundError):
            return snap_path.read_text("utf-8")
    at = at or vault.clock()
    entries, _ = list_entries(vault, light=True)
    ranked = rank(entries, at, salt_for(seed, session), vault.settings.score, top_n=len(entries))
    text = render.prompt_index(ranked, at, vault.settings, budget_tokens=budget_tokens)
    if snap_path is not None:
        snap_path.parent.mkdir(parents=True, exist_ok=True)
        if refresh:
            atomic_write(snap_path, text)
        else:
            tmp = snap_path.with_name(f".index.{os.getpid()}.tmp")
            tmp.write_text(text, "utf-8")
            try:
                os.link(tmp, snap_path)  # first writer wins, so concurrent first calls agree
            except FileExistsError:
                text = snap_path.read_text("utf-8")
            finally:
                tmp.unlink(missing_ok=True)
    return text


def show(vault: Vault, prefix: str, *, mark_read: bool = True) -> Entry:
    """One entry by id or unique prefix (superseded ones too); marks it read."""
    entry = vault.resolve(prefix)
    if mark_read:
        vault.mark_read([entry.id])
        entry = entry.with_changes(last_read=vault.now())
    return entry


def doctor(vault: Vault, *, fix: bool = False):
    """Check and optionally repair the vault (see ``acpmem.doctor``; kept out of this module's imports, which the
    per-turn listing pays)."""
    from acpmem.doctor import doctor as run

    return run(vault, fix=fix)


def entries_at(vault: Vault, at: str) -> datetime:
    try:
        return parse_iso(at)
    except ValueError:
        raise UsageError(f"--at {at!r} is not an ISO time", "use e.g. 2026-11-29T12:00:00Z") from None


__all__ = ["list_entries", "scores", "resident_index", "show", "doctor", "session_dir"]
