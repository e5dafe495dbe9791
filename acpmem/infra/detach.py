"""Detached helper processes of a vault (the extraction worker, the index watcher): at most one of each, because each
holds a lock (``acpmem.infra.locks``) for its whole life; started with ``posix_spawn`` in a session of its own,
/dev/null as stdin, a size-capped log as stdout and stderr, and the locked descriptor as its only inherited one.

``posix_spawn`` rather than ``subprocess``: importing subprocess is a tenth of a commit's start-up.
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from acpmem.infra import files
from acpmem.infra.locks import write_holder

_spawned: list[int] = []


def reap() -> None:
    """Collect the helpers this process started that have exited (a long-lived caller must not gather zombies)."""
    for pid in list(_spawned):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _spawned.remove(pid)


def spawn(lock_fd: int, code: str, log_path: Path, max_log_bytes: int) -> int:
    """Run ``python -c code`` detached, handing it ``lock_fd`` (``{fd}`` in ``code`` names the descriptor); the lock
    file then names the child's pid (for ``doctor`` and for people). Closes our copy of the descriptor."""
    reap()
    try:
        with contextlib.suppress(FileNotFoundError):
            if log_path.stat().st_size > max_log_bytes:
                log_path.replace(log_path.with_name(log_path.name + ".1"))
        for attempt in range(3):
            try:
                log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                break
            except FileNotFoundError:   # its folder (.acpmem/, derived state) was deleted meanwhile: made again
                if attempt == 2:
                    raise
                files.ensure_dir(log_path.parent)
        try:
            os.set_inheritable(lock_fd, True)
            actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                       (os.POSIX_SPAWN_DUP2, log, 1), (os.POSIX_SPAWN_DUP2, log, 2)]
            # -P: the folder the command ran in is not on the helper's import path (a folder holding an `acpmem`
            # package of someone else's would otherwise be what the helper runs)
            pid = os.posix_spawn(sys.executable, [sys.executable, "-P", "-c", code.format(fd=lock_fd)], os.environ,
                                 file_actions=actions, setsid=True)
        finally:
            os.close(log)
        _spawned.append(pid)
        write_holder(lock_fd, pid)
    finally:
        os.close(lock_fd)   # the child holds the lock through its own copy of the descriptor
    return pid
