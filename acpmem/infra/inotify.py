"""Linux inotify through libc (the standard library has none): the kernel reports each change to a watched folder's
files inside the system call that makes it — on a local file system only (``sees_every_change``). Used by the watcher (``acpmem.search.watch``) and by the listings the
read server holds (``acpmem.search.held``)."""
from __future__ import annotations

import os
import struct
from pathlib import Path

# inotify(7)
IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_UNMOUNT, IN_Q_OVERFLOW, IN_IGNORED = 0x400, 0x800, 0x2000, 0x4000, 0x8000
IN_ONLYDIR, IN_DONT_FOLLOW = 0x01000000, 0x02000000
ENTRY_EVENTS = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
                | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
ROOT_EVENTS = IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
_EVENT = struct.Struct("iIII")


# File systems where the kernel sees every change, so inotify reports it. Not a network file system (NFS, SMB,
# 9p, FUSE): a change made on another machine is never reported there, and a vault on one is listed the long way.
LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "zfs", "f2fs", "bcachefs",
                               "reiserfs", "jfs", "overlay", "vfat", "exfat", "ntfs3", "hfsplus", "nilfs2"})


def filesystem_of(path: str, mountinfo: str | None = None) -> str | None:
    """The type of the file system ``path`` lies on (Linux ``/proc/self/mountinfo``: the longest mount point above
    it, the last mounted there), or None when it cannot be told."""
    # lazy: asked once per vault by the read server and the watcher; `re` is 5 ms of a start-up
    import re

    try:
        real = os.path.realpath(path)
        if mountinfo is None:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
                mountinfo = f.read()
    except (OSError, ValueError):
        return None
    best, kind = "", None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split(" ")
        if not sep or len(fields) < 5 or not right:
            continue
        mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, right.split(" ", 1)[0]
    return kind


def sees_every_change(path: str | os.PathLike) -> bool:
    """Whether inotify reports every change under ``path``: it is on a local file system (``LOCAL_FILESYSTEMS``)."""
    return filesystem_of(os.fspath(path)) in LOCAL_FILESYSTEMS


class Inotify:
    """The three inotify calls through libc (the standard library has none)."""

    def __init__(self) -> None:
        # lazy: `surface` does not need it (measured +1.4 ms to its start-up)
        import ctypes

        self._libc = ctypes.CDLL(None, use_errno=True)
        fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"inotify_init1: {os.strerror(e)}")
        self.fd = fd
        self._ctypes = ctypes

    def add(self, path: Path, mask: int) -> int:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(str(path)), mask)
        if wd < 0:
            e = self._ctypes.get_errno()
            raise OSError(e, f"inotify_add_watch {path}: {os.strerror(e)}")
        return wd

    def remove(self, wd: int) -> None:
        """Stop watching ``wd`` (nothing when the kernel already dropped it)."""
        self._libc.inotify_rm_watch(self.fd, wd)

    def read(self) -> list[tuple[int, int, str]]:
        """Every queued event as (watch, mask, name), without waiting."""
        out = []
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return out
            i = 0
            while i < len(buf):
                wd, mask, _cookie, n = _EVENT.unpack_from(buf, i)
                name = buf[i + 16:i + 16 + n].rstrip(b"\0")
                out.append((wd, mask, os.fsdecode(name)))
                i += 16 + n

    def close(self) -> None:
        os.close(self.fd)


__all__ = ["Inotify", "ENTRY_EVENTS", "ROOT_EVENTS", "IN_Q_OVERFLOW", "LOCAL_FILESYSTEMS", "filesystem_of",
           "sees_every_change"]
