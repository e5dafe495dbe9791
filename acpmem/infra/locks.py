"""The one lock of acpmem: ``flock`` on a lock file, waited for with one policy, released by the kernel when the
holder dies (even by ``kill -9``), and handed to a detached child by passing the open descriptor
(``acpmem.infra.detach``).

The waiting policy: try without blocking, sleep a little (1 ms growing to 8 ms, jittered so waiters do not move in
step), try again, until the timeout; then ``LockTimeout`` says what was busy and what to do. A short poll rather
than a blocking ``flock``: a blocking call cannot be bounded without signals, which a host process owns.

Lock files stay on disk (their content, when written, is the holder's pid, for ``doctor`` and for people); only
the ``flock`` says whether they are held.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from acpmem.core.errors import LockTimeout

FIRST_WAIT_S = 0.001
MAX_WAIT_S = 0.008


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise


def try_fd(fd: int) -> bool:
    """Take the lock of an open descriptor if nobody holds it, without waiting; whether it was taken."""
    return _try(fd)


def flock_fd(fd: int, timeout: float = 30.0, *, what: str, hint: str = "retry in a moment") -> None:
    """Take the lock of an open descriptor, waiting up to ``timeout`` seconds by the policy above."""
    if _try(fd):
        return
    deadline = time.monotonic() + timeout
    wait = FIRST_WAIT_S
    while True:
        if time.monotonic() > deadline:
            raise LockTimeout(f"{what} for over {timeout:.0f} s", hint)
        time.sleep(wait * (0.5 + os.urandom(1)[0] / 255))
        wait = min(MAX_WAIT_S, wait * 1.5)
        if _try(fd):
            return


def _open(path: Path) -> int:
    path = Path(path)
    for attempt in range(5):
        try:
            # its folder (under .acpmem/, derived state) may be deleted at any moment, even between mkdir's own
            # steps (FileExistsError, then gone): made again (files.ensure_dir's loop; files imports this module)
            path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except (FileNotFoundError, FileExistsError):
            if attempt == 4 or (path.parent.exists() and not path.parent.is_dir()):
                raise
    raise AssertionError("unreachable")


def try_lock(path: Path) -> int | None:
    """The lock file's descriptor, now held, if nobody held it; else None. Closing the descriptor releases it."""
    fd = _open(path)
    try:
        if _try(fd):
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def acquire(path: Path, timeout: float, *, what: str, hint: str = "retry in a moment") -> int:
    """The lock file's descriptor, held; waits up to ``timeout`` seconds, then ``LockTimeout``."""
    fd = _open(path)
    try:
        flock_fd(fd, timeout, what=what, hint=hint)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def held(path: Path, timeout: float, *, what: str, hint: str = "retry in a moment",
         record_pid: bool = False) -> Iterator[int]:
    """Hold the lock for the ``with`` block; ``record_pid`` writes this process's pid into the file."""
    fd = acquire(path, timeout, what=what, hint=hint)
    try:
        if record_pid:
            write_holder(fd, os.getpid())
        yield fd
    finally:
        os.close(fd)


def write_holder(fd: int, pid: int) -> None:
    """Name the holder in the lock file (informative only: the disk may be full)."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{pid}\n".encode(), 0)


def holder(path: Path) -> int | None:
    """The pid written in a held lock file (0 if it is held but names no pid), or None when nobody holds it."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        if _try(fd):
            return None
    finally:
        os.close(fd)
    # lazy: `surface` does not need it (measured +0.1 ms to its start-up)
    from acpmem.infra.proc import read_pid

    pid = read_pid(path)
    return 0 if pid is None else pid
