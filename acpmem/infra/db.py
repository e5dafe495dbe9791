"""The derived SQLite database (``.acpmem/index.sqlite``): opened in WAL mode with a busy timeout, its schema
created when its version differs, and deleted and rebuilt when it cannot be read — it is a cache of the files, so
nothing is lost. A *busy* database (another process holds it) is never deleted: that is ``LockTimeout``.

``with_rebuild`` is the one place that decides between the two.
"""
from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from acpmem.core.errors import LockTimeout

BUSY_TIMEOUT_MS = 30_000


def is_full(exc: BaseException) -> bool:
    """A write refused for want of space (``SQLITE_FULL``, or ENOSPC from the file system)."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc).lower()


def is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    """A database error that deleting and rebuilding the cache can cure; not a busy or locked database, which
    another process is using (deleting it then would pull the file from under that process), nor a full disk."""
    if isinstance(exc, sqlite3.OperationalError):
        msg = str(exc).lower()
        return not ("locked" in msg or "busy" in msg or is_full(exc))
    return True


def memory_connection(create: Callable[[sqlite3.Connection], None]) -> sqlite3.Connection:
    """A database of the same schema in memory, for a read that cannot update the one on disk (the disk is full):
    built from the files, used once, never written anywhere."""
    con = sqlite3.connect(":memory:", isolation_level=None)
    create(con)
    return con


def busy_error(exc: sqlite3.DatabaseError) -> LockTimeout:
    return LockTimeout(f"the vault's index is busy ({exc})",
                       "another acpmem process is rebuilding it; run the command again in a moment")


def delete(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(str(path) + suffix)


BUSY_RETRIES = (0.05, 0.1, 0.2, 0.4, 0.8)   # seconds before each new attempt after an immediate "locked"


def with_rebuild(path: Path, attempt: Callable[[], object], reset: Callable[[], None] = lambda: None):
    """``attempt()``; if it fails because the database at ``path`` cannot be read, ``reset()`` (close what holds
    it), delete the database and try once more. A busy database is tried again a few times, then raises
    ``LockTimeout``: SQLite waits out an ordinary lock itself (the busy timeout), but answers "locked" at once
    where waiting could not help that transaction — a write after a read whose snapshot another process has since
    moved past, a journal-mode switch while others read, several processes creating one fresh database — and
    a new attempt, a moment later, starts from the state the other process left."""
    rebuilt, waits = False, list(BUSY_RETRIES)
    while True:
        try:
            return attempt()
        except sqlite3.DatabaseError as exc:
            with contextlib.suppress(Exception):
                reset()
            if is_full(exc):   # waiting or rebuilding cannot help: the caller decides (``VaultReader.with_db``)
                raise
            if not is_corrupt(exc):
                if not waits:
                    raise busy_error(exc) from None
                time.sleep(waits.pop(0))
                continue
            if rebuilt:
                raise
            rebuilt = True
            delete(path)


def rollback(con: sqlite3.Connection) -> None:
    """Undo the open transaction, if there still is one: SQLite ends it by itself when a statement or the COMMIT
    fails for a full disk (``SQLITE_FULL``), and a ROLLBACK then would replace the real error ("database or disk is
    full") with "cannot rollback - no transaction is active"."""
    if con.in_transaction:
        con.execute("ROLLBACK")


def connect(path: Path, version: int, create: Callable[[sqlite3.Connection], None], *,
            probe: str | None = None) -> sqlite3.Connection:
    """Open the database; ``create(con)`` (in a write transaction) when its ``user_version`` is not ``version``,
    else run ``probe`` (a cheap query that reads a page of the main table). An unreadable file is deleted and
    created anew."""
    con: sqlite3.Connection | None = None

    def attempt() -> sqlite3.Connection:
        nonlocal con
        con = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        con.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if con.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        if con.execute("PRAGMA user_version").fetchone()[0] != version:
            con.execute("BEGIN IMMEDIATE")
            try:
                if con.execute("PRAGMA user_version").fetchone()[0] != version:  # another process may have done it
                    create(con)
                    con.execute(f"PRAGMA user_version={int(version)}")
                con.execute("COMMIT")
            except BaseException:
                rollback(con)
                raise
        elif probe:
            con.execute(probe).fetchone()
        return con

    def reset() -> None:
        if con is not None:
            con.close()

    return with_rebuild(path, attempt, reset)
