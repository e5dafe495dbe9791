"""Files written so that a reader or a crash never sees half of them: atomic replacement, exclusive creation,
whole-line appends, and the temp files a killed writer leaves behind.

Every file acpmem writes goes through here (``docs/design.md``, "Guarantees").
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
from pathlib import Path

from acpmem.core.errors import AcpmemError
from acpmem.core.lazyre import compile_later

# atomic_write's temp files: .NAME.PID.RANDOM.tmp, in the folder of the file they become
TEMP_RE = compile_later(r"^\..+\.(\d+)\.[0-9a-f]{8}\.tmp$")


def _write_all(fd: int, raw: bytes) -> None:
    view = memoryview(raw)
    while view:
        view = view[os.write(fd, view):]


def ensure_dir(path: Path | str) -> Path:
    """``mkdir -p`` that survives a person deleting the folder (or a parent) while it runs: ``Path.mkdir`` with
    ``exist_ok`` raises ``FileExistsError`` when the folder vanishes between its ``mkdir`` and its ``is_dir`` check."""
    path = Path(path)
    attempts = 100          # each lost race is a deletion that happened meanwhile; only a file in the way is final
    for attempt in range(attempts):
        try:
            path.mkdir(parents=True, exist_ok=True)
            return path
        except (FileExistsError, FileNotFoundError):
            if path.is_dir():
                return path
            if attempt == attempts - 1 or (os.path.lexists(path) and not path.is_dir()):
                raise   # a file, or a link to nothing, in the way
    return path


def move_durably(old: Path, new: Path, limit: int) -> None:
    """Move a regular file of at most ``limit`` bytes to ``new``, replacing what is there: a rename where both are
    on one file system, else a durable copy first and the old file removed after it; the move made durable either
    way. ``FileNotFoundError`` when ``old`` is gone (moved by another process meanwhile)."""
    ensure_dir(new.parent)
    try:
        os.replace(old, new)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        atomic_write(new, read_regular(old, limit))
        old.unlink()
    fsync_dir(new.parent)


def fsync_dir(path: Path) -> None:
    """Make a rename or an unlink in ``path`` durable (best effort: some file systems refuse a directory fsync)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            sys.audit("acpmem.fsync", str(path))   # a step the crash-point tests can stop at (os.fsync raises none)
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: Path, data: str | bytes, *, durable: bool = True, replace: bool = True) -> None:
    """Write through a temp file in the same folder, fsync, rename; the old content stays intact on any error.

    ``durable=False`` skips the fsyncs, for files acpmem regenerates anyway (MEMORY.md): still atomic, and a killed
    process never leaves them half-written. ``replace=False`` creates the file or raises ``FileExistsError``,
    never replacing what another writer put there (a hard link of the finished temp file)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    path = Path(path)
    for attempt in range(3):
        try:
            _atomic_write(path, raw, durable, replace)
            return
        except FileNotFoundError:
            # the folder was deleted meanwhile (a person removing .acpmem/, derived state): made again, once more
            if attempt == 2:
                raise


def _atomic_write(path: Path, raw: bytes, durable: bool, replace: bool) -> None:
    ensure_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _write_all(fd, raw)
        if durable:
            sys.audit("acpmem.fsync", str(tmp))
            os.fsync(fd)
        os.close(fd)
        fd = -1
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if not replace:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    if durable:
        fsync_dir(path.parent)


DISK_FULL_BYTES = 256 * 1024   # less free than this: too little for a commit (a journal, an entry, git objects)


def disk_full(path: Path) -> bool:
    """Whether the file system holding ``path`` is full for acpmem's purposes: under ``DISK_FULL_BYTES`` free for
    this user, or no inode left. False when it cannot be asked."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < DISK_FULL_BYTES or (bool(st.f_files) and st.f_favail == 0)


class NotRegularFile(OSError):
    """A path that is not a regular file (a FIFO, a socket, a device, a folder): never opened for reading, since
    reading a FIFO waits for a writer that may never come and a device may never end."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes of the regular file at ``path`` (a caller that must refuse what is too long asks for
    one byte more than it takes). Anything else — a FIFO, a socket, a device, a symlink — raises ``NotRegularFile``
    without blocking: the path is checked with ``lstat``, opened non-blocking without following a symlink, and
    checked again on the open descriptor (it may have been swapped in between)."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(errno.EINVAL, f"is {_kind(st.st_mode)}, not a regular file", str(path))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, f"is {_kind(st.st_mode)}, not a regular file", str(path))
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_bounded(stream, limit: int) -> bytes:
    """At most ``limit`` bytes from a binary stream (stdin, a file a person names: a pipe or ``/dev/zero`` too)."""
    chunks, left = [], limit
    while left > 0:
        chunk = stream.read(min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_exact(path: Path) -> str | None:
    """A file's exact text (CRLF kept, unlike ``read_text``), or None when it is gone, not UTF-8, not a regular file
    (``read_regular``) or over 256 MB."""
    limit = 256_000_000
    try:
        data = read_regular(Path(path), limit + 1)
        return data.decode("utf-8") if len(data) <= limit else None
    except (FileNotFoundError, NotADirectoryError, NotRegularFile, UnicodeDecodeError):
        return None


def append_bytes(path: Path, data: bytes) -> None:
    """Append with one ``write`` on an O_APPEND descriptor: small appends from many processes never interleave
    within a write on a local file system. No lock."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def append_line(path: Path, line: str) -> None:
    """Append one whole line under a short ``flock`` of the file itself (``acpmem.infra.locks``): concurrent writers
    interleave by whole lines, and a line a crashed writer left half-written is ended first, so it spoils only
    itself (readers skip lines that do not parse)."""
    # lazy: `list --format prompt` does not need it (measured +0.9 ms to its start-up)
    from acpmem.infra.locks import flock_fd

    path = Path(path)
    ensure_dir(path.parent)
    if not line.endswith("\n"):
        line += "\n"
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        flock_fd(fd, what=f"{path.name} is being written by another process")
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = "\n" + line   # a previous writer died mid-line: start ours on a fresh one
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)   # releases the lock


def stale_temp_files(folder: Path) -> list[Path]:
    """``atomic_write`` temp files in ``folder`` whose writing process is gone (a killed writer's leftovers; never
    this process's own, which another thread may be writing)."""
    # lazy: `list --format prompt` does not need it (measured +0.1 ms to its start-up)
    from acpmem.infra.proc import pid_alive

    out = []
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            m = TEMP_RE.match(name)
            if m and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1))):
                out.append(Path(folder) / name)
    return out


def append_record(path: Path, record: dict) -> None:
    """Append one JSON object as a line (``append_line``): a ledger many processes write."""
    append_line(path, json.dumps(record, ensure_ascii=False, separators=(",", ":")))


def read_records(path: Path) -> list[dict]:
    """Every JSON object line of a ledger, oldest first; a missing file is empty, and so is anything at its path that
    is not a regular file (a folder, a FIFO: never opened, so never waited on); lines that do not parse (a writer
    killed mid-line) are skipped."""
    try:
        data = read_regular(path, 1 << 62)   # no bound but the file's own length, as a plain read
    except (FileNotFoundError, NotRegularFile):
        return []
    out = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):   # a line cut short, a 5,000-digit number, nesting past the stack
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def expand_home(path: str | Path, what: str) -> Path:
    """``path`` with a leading ``~`` or ``~USER`` replaced by that home folder, as a shell does; ``what`` names where
    the path came from (``--vault``, ``ACPMEM_USER_VAULT``, …) for the one error there is: a ``~USER`` naming no
    user, or a ``~`` where no home folder is known (no ``HOME``, and this user has no entry in the password
    database). ``pathlib`` raises a bare ``RuntimeError`` there."""
    text = os.fspath(path)
    if not text.startswith("~"):
        return Path(text)
    try:
        out = os.path.expanduser(text)
    except ValueError:   # a NUL in the user name: no user has it
        out = text
    if not out.startswith("~"):
        return Path(out)
    head = text.split("/", 1)[0]
    if head == "~":
        raise AcpmemError(f"{what} {text!r} starts with ~, and no home folder is known (HOME is not set and this "
                          f"user has no entry in the password database)", "set HOME, or give the full path",
                          code="no_home")
    raise AcpmemError(f"{what} {text!r} starts with {head}, and there is no user {head[1:]!r} to take the home folder "
                      f"of", "give the full path (or ~/… for your own home folder)", code="no_home")


def home_folder(instead: str) -> str:
    """The person's home folder (``HOME``, else the password database's entry for this user); one clear error where
    neither knows one — never a folder named ``~`` under the current one (a project's ``~/.config/acpmem`` would
    have been read as the person's own settings). ``instead``: the variable that names the folder wanted instead."""
    home = os.path.expanduser("~")
    if home.startswith("~"):
        raise AcpmemError("no home folder is known (HOME is not set and this user has no entry in the password "
                          "database)", f"set HOME, or {instead}", code="no_home")
    return home
