"""Small file helpers shared by the read and write sides, without importing the write machinery (``acpmem.vault``)."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path


def atomic_write(path: Path, data: str | bytes, *, durable: bool = True) -> None:
    """Write through a temp file in the same folder, fsync, rename; the old content stays intact on any error.
    ``durable=False`` skips the fsyncs, for files acpmem regenerates anyway (MEMORY.md): still atomic, and a
    killed process never leaves them half-written."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(raw)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if durable:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if not durable:
        return
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
