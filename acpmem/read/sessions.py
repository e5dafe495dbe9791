"""A session's read state ages out: the frozen index and the surfacing ledger of a session nobody has used for
``KEEP_DAYS`` are removed when a new session begins.

Why: every session a host starts leaves a folder under ``.acpmem/sessions/`` (its frozen index, about as large as
the index itself, and its ledger), and nothing ended them: a vault used every day gathered thousands, and ``stats``
(a per-turn read) reads every one of them.

What goes: only the state the reads derive (``SNAPSHOT``, ``LEDGER``) and the temporary files an interrupted write
left (``files.stale_temp_files``); when nothing else is left, the ledger's lock file and the folder too. What stays: the records a session keeps
for good (where its transcript lives, which file a commit named: ``acpmem.read.sources``), which ``show --source``
needs for as long as an entry cites the session.

When: once, in the process that makes a session's folder (its first frozen index, ledger or transcript record),
over every other session's folder, by the folder's own modification time. Every write of a session's state
replaces a file in its folder (a new name, then a rename), and that moves the folder's time: it says when the
session last wrote anything, one ``stat`` a folder. A session whose folder's lock is held (surfacing at that
moment) is left alone. A session that comes back after that long starts again: a new frozen index (one change to
its prompt's prefix) and an empty ledger (entries it saw may be surfaced once more). Everything removed here is
derived state, which the reads make again (as after a person deletes ``.acpmem/``).
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from acpmem.read.ledger import LEDGER
from acpmem.read.snapshot import SNAPSHOT

KEEP_DAYS = 30
LOCK = "surface.lock"                 # the session's ledger lock (``acpmem.read.retrieval.session_lock``)
DERIVED = (SNAPSHOT, LEDGER)          # what the reads make again
_AGED: set[str] = set()               # the sessions folders this process aged out already


def folder(vault, session: str) -> Path:
    """``vault``'s folder for ``session``'s state (the id checked, ``VaultReader.session_dir``), for a command that
    may write there; when it is not there yet (a session begins), the others' state ages out first."""
    sdir = vault.session_dir(session)
    if not sdir.is_dir():
        begin(sdir, vault.clock().timestamp())
    return sdir


def begin(sdir: Path, now: float) -> None:
    """Before ``sdir``, a new session's folder, is made: age out the other sessions' state (once a process).
    ``now``: the vault's clock, in seconds."""
    parent = str(sdir.parent)
    if parent in _AGED:
        return
    _AGED.add(parent)
    age_out(sdir.parent, now, keep=sdir.name)


def age_out(sessions_dir: Path, now: float, *, keep: str | None = None, days: float = KEEP_DAYS) -> list[str]:
    """Remove the derived state of every session folder under ``sessions_dir`` (but ``keep``) whose time is more
    than ``days`` before ``now``; the names of the folders it emptied or removed. Never raises for I/O: a folder
    that cannot be read or removed is left as it is."""
    cutoff = now - days * 86400
    done = []
    try:
        listing = list(os.scandir(sessions_dir))
    except OSError:
        return done
    for d in listing:
        try:
            if d.name == keep or not d.is_dir(follow_symlinks=False) or d.stat(follow_symlinks=False).st_mtime > cutoff:
                continue
        except OSError:
            continue
        if _clear(Path(d.path)):
            done.append(d.name)
    return done


def _clear(sdir: Path) -> bool:
    """Remove the derived state of one session's folder, unless its lock is held; the folder too when nothing else
    is left in it. Whether anything was removed."""
    # lazy: only where a folder ages out (once a session)
    from acpmem.infra import locks
    from acpmem.infra.files import stale_temp_files

    lock = sdir / LOCK
    try:
        fd = os.open(lock, os.O_RDWR)   # never made here: a folder without one has no holder
    except FileNotFoundError:
        fd = None
    except OSError:
        return False
    try:
        if fd is not None and not locks.try_fd(fd):
            return False   # in use now: a session that came back
        removed = False
        for path in [sdir / name for name in DERIVED] + stale_temp_files(sdir):   # (a live writer's temp file stays)
            try:
                os.unlink(path)
                removed = True
            except OSError:
                pass
        left = set(os.listdir(sdir)) - {LOCK}
        if not left:
            if fd is not None:
                os.unlink(lock)
            try:
                os.rmdir(sdir)
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            removed = True
        return removed
    except OSError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


__all__ = ["KEEP_DAYS", "age_out", "begin", "folder"]
