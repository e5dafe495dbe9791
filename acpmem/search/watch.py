"""The watcher: for a large vault, one small process that keeps the catalog and the search index in step with the
entry files through Linux inotify, so that a recall does not have to look at every file.

Why: the index must notice any change to the files, including an edit that keeps the size and the mtime, which only
the ctime shows. Finding it by ``stat`` costs a system call per file: about 6 µs here, 0.6 s at 100,000 entries, more
than a whole recall may take. The kernel can instead report every change as it happens, but only to a process that
keeps asking, hence a watcher.

Protocol. A reader (``fresh``) connects to ``.acpmem/watch.sock`` and sends ``sync <identity>``; the watcher reads
every inotify event queued so far (the kernel queues them inside the writing system call, so every change made before
the request is there), applies them to the catalog and the index (``catalog.refresh_paths``, ``store.update``; a
full ``catalog.refresh`` after a queue overflow or when ``entries/`` itself was replaced) and answers ``ok``. Any
other answer, no answer within the timeout, or no watcher at all, and the reader scans every file itself, as it does
for a small vault. A watcher that gave no answer in time (stopped, stuck, or applying a checkout too large to wait
for) is marked (``.acpmem/watch.unanswered``, its mtime): readers then scan without asking it for
``ASK_AGAIN_AFTER_S``, so it costs one reader one wait, not every read one; the first "ok" after that removes the
mark. The identity names the database file (device and inode) and the code's index version, so a
watcher never vouches for a database it does not hold (deleted and rebuilt, or built by another acpmem version):
it answers ``no`` and exits.

Life cycle. A reader that had to scan a vault of at least ``index.watch_min_entries`` files starts a watcher
(``posix_spawn``, its own session, holding ``.acpmem/locks/watch.flock`` so there is only ever one per vault). The
watcher registers its inotify watches, does one full refresh, and only then listens. It exits after
``index.watch_idle_minutes`` without a request, when the vault's folders go away, when the database is replaced, and
on any error (logged to ``.acpmem/watch.log``); readers then scan, and start another watcher once ten minutes have
passed since the error (``.acpmem/watch.failed``). ``index.watch = false`` or ``ACPMEM_NO_WATCH=1`` turns it off.
Other systems than Linux have no inotify: readers always scan there.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

from acpmem.core import layout
from acpmem.core.settings import Settings
from acpmem.infra import db, locks
from acpmem.infra.inotify import (ENTRY_EVENTS, IN_DELETE, IN_DELETE_SELF, IN_IGNORED, IN_MOVE_SELF, IN_MOVED_FROM,
                                   IN_Q_OVERFLOW, IN_UNMOUNT, ROOT_EVENTS, Inotify, sees_every_change)
from acpmem.search import catalog, held, store

SOCK = layout.WATCH_SOCK
LOCK = "watch.flock"
LOG = "watch.log"
FAILED = "watch.failed"    # when the last watcher stopped on an error (its mtime)
RETRY_AFTER_S = 600.0
MAX_LOG_BYTES = 256 * 1024
DEBOUNCE_S = 0.2         # changes are applied this long after they stop coming, so a recall finds them done
UNANSWERED = "watch.unanswered"   # when a reader last waited for the watcher in vain (its mtime)
ASK_AGAIN_AFTER_S = 600.0
SYNC_TIMEOUT_S = 10.0     # a watcher applying a large checkout may take a while; then the reader scans itself
MAX_REQUEST = 4 * 1024 * 1024   # a ``near`` request carries a query vector

_MAX_ADDR = 100           # an AF_UNIX address holds 108 bytes; longer paths go through /proc/self/fd


def _sock_path(state_dir: Path, dir_fd: int | None = None) -> str:
    """The socket's address: its path, or through /proc when the path is longer than an AF_UNIX address can be."""
    path = str(Path(state_dir) / SOCK)
    if len(path.encode()) < _MAX_ADDR or dir_fd is None:
        return path
    return f"/proc/self/fd/{dir_fd}/{SOCK}"


def identity(db_path: Path) -> str:
    """What a watcher must hold to vouch for a database: the file (device, inode) and the code's index version."""
    st = os.stat(db_path)
    return f"{st.st_dev}:{st.st_ino}:{catalog.SCHEMA_VERSION}:{store.index_version()}"


def enabled(settings=None) -> bool:
    if not sys.platform.startswith("linux") or os.environ.get("ACPMEM_NO_WATCH"):
        return False
    return settings is None or bool(settings.index.watch)


def sync(state_dir: Path, db_path: Path, *, heed_mark: bool = True) -> bool:
    """Ask the vault's watcher to apply every change made so far. True when it did: the catalog and the index are
    then as current as a full scan would make them. False when there is no watcher, it cannot vouch, or it did not
    answer within ``SYNC_TIMEOUT_S`` — or, with ``heed_mark``, did not answer a reader in the last
    ``ASK_AGAIN_AFTER_S`` (``unanswered_since``): then it is not asked."""
    if not os.path.exists(Path(state_dir) / SOCK):
        return False              # no watcher (the common case for a small vault): no socket to import
    marked = unanswered_since(state_dir)
    if heed_mark and _lately(marked):
        return False
    try:
        ident = identity(db_path)
    except OSError:
        return False
    if _ask(state_dir, f"sync {ident}\n".encode(), SYNC_TIMEOUT_S) != b"ok\n":
        return False
    if marked is not None:        # it answers again: readers ask it again
        with contextlib.suppress(OSError):
            os.unlink(Path(state_dir) / UNANSWERED)
    return True


def unanswered_since(state_dir: Path) -> float | None:
    """When a reader last waited for the vault's watcher in vain (a time as ``time.time()`` gives it), or None."""
    try:
        return os.stat(Path(state_dir) / UNANSWERED).st_mtime
    except OSError:
        return None


def _lately(marked: float | None, within: float = ASK_AGAIN_AFTER_S) -> bool:
    """Whether a mark made at ``marked`` (an mtime) is younger than ``within`` seconds (one from the future, a clock
    set back, is not)."""
    return marked is not None and 0 <= time.time() - marked < within


def _ask(state_dir: Path, request: bytes, timeout: float) -> bytes:
    """One request to the vault's watcher and its one-line answer (empty when there is no answer). No answer within
    ``timeout`` marks the watcher as not answering (``UNANSWERED``)."""
    import _socket   # the C module: socket.py's enum wrappers cost a few ms a recall does not need

    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    dir_fd = None
    try:
        s.settimeout(timeout)
        if len(str(Path(state_dir) / SOCK).encode()) >= _MAX_ADDR:
            dir_fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY)
        s.connect(_sock_path(state_dir, dir_fd))
        s.sendall(request)
        reply = b""
        while not reply.endswith(b"\n") and len(reply) < MAX_REQUEST:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply
    except TimeoutError:          # connected (or queued) and no answer: stopped, stuck, or busy for too long
        _mark_unanswered(state_dir)
        return b""
    except OSError:
        return b""
    finally:
        s.close()
        if dir_fd is not None:
            os.close(dir_fd)


def _mark_unanswered(state_dir: Path) -> None:
    """Stamp ``UNANSWERED`` with the time now (created, or its mtime set); never fails a read."""
    path = Path(state_dir) / UNANSWERED
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        try:
            os.utime(fd)
        finally:
            os.close(fd)


def near(state_dir: Path, index: sqlite3.Connection, model: str, query, types, include_superseded: bool,
         top: int):
    """The embedding channel's exact search, answered by the vault's watcher, which keeps the current vectors of a
    model in memory (a recall process would import numpy and read every vector for each query): the same answer
    as ``acpmem.search.vectors.nearest`` computes itself, or None when no watcher answers."""
    if not os.path.exists(Path(state_dir) / SOCK):
        return None
    if _lately(unanswered_since(state_dir)):
        return None               # it did not answer a reader lately: computed here instead
    # lazy: `surface` does not need them (measured +5.5 ms to its start-up)
    import base64
    from array import array

    from acpmem.search.vectors import VectorStatus

    try:
        ident = identity(Path(state_dir) / catalog.DB_NAME)
    except OSError:
        return None
    params = {"model": model, "types": types, "sup": include_superseded, "top": top,
              "q": base64.b64encode(array("f", query).tobytes()).decode()}
    reply = _ask(state_dir, f"near {ident} {base64.b64encode(json.dumps(params).encode()).decode()}\n".encode(),
                 SYNC_TIMEOUT_S)
    if not reply.startswith(b"ok "):
        return None
    try:
        got = json.loads(reply[3:])
        return ({int(k): float(v) for k, v in got["top"]},
                VectorStatus(model, int(got["present"]), int(got["missing"])))
    except (ValueError, KeyError, TypeError):
        return None


def fresh(con: sqlite3.Connection, root: Path, state_dir: Path, settings: Settings | None = None):
    """Bring the catalog and the index in step with the files: through the watcher when one answers, else by a full
    scan (and then start a watcher if the vault is large enough). Returns what ``store.update`` did here, with
    ``via`` set to ``"held"`` (a read server's child, ``acpmem.search.held``), ``"watcher"`` or ``"scan"``."""
    settings = settings or Settings()
    db_path = Path(state_dir) / catalog.DB_NAME
    if held.current(str(root), str(db_path)):   # (a read server's child: the server refreshed it, unchanged since)
        return store.update(con).with_changes(via="held")
    # a read-only vault keeps its state elsewhere (acpmem.vault.discovery.state_location): it scans, no watcher
    use = enabled(settings) and Path(state_dir) == Path(root) / layout.STATE_DIRNAME
    if use and sync(state_dir, db_path):
        # the watcher has done the work; this is cheap when nothing is marked, and covers rows another process
        # refreshed without updating the index
        return store.update(con).with_changes(via="watcher")
    catalog.refresh(con, root)
    res = store.update(con)
    held.loaded(str(root), str(db_path), tuple(settings.types), held.ROWS)
    if use and con.execute("SELECT count(*) FROM files").fetchone()[0] >= settings.index.watch_min_entries:
        start(root, state_dir, settings.index.watch_idle_minutes * 60)
    return res


def open_fresh(state_dir: Path, root: Path, settings: Settings | None = None):
    """Connect to the vault's database and bring it in step with the files (``fresh``): (connection, what the
    update did). A database that cannot be read is deleted and rebuilt once (``acpmem.infra.db``)."""
    path = state_dir / catalog.DB_NAME
    con = None

    def attempt():
        nonlocal con
        con = catalog.connect(path)
        return con, fresh(con, root, state_dir, settings)

    return db.with_rebuild(path, attempt, lambda: con is not None and con.close())


# --------------------------------------------------------------------------------------------- starting

def _lock_path(state_dir: Path) -> Path:
    return Path(state_dir) / layout.LOCKS_DIR / LOCK


def running_pid(state_dir: Path) -> int | None:
    """The pid of the vault's watcher if one holds the lock (0 if it holds it but the pid is unknown), else None."""
    return locks.holder(_lock_path(state_dir))


def start(root: Path, state_dir: Path, idle_seconds: float) -> int | None:
    """Start a detached watcher (``acpmem.detach``) unless one holds the lock, one failed in the last
    ``RETRY_AFTER_S`` (an inotify limit reached, say: every recall would otherwise pay for a watcher that cannot
    start), or the vault is on a network file system (inotify would miss another machine's changes); its pid, or
    None."""
    # lazy: `surface` does not need it (measured +0.1 ms to its start-up)
    from acpmem.infra.detach import reap, spawn

    reap()
    with contextlib.suppress(OSError):
        if _lately(os.stat(Path(state_dir) / FAILED).st_mtime, RETRY_AFTER_S):
            return None
    if not sees_every_change(root):   # a network file system: another machine's changes would go unseen
        return None
    try:
        fd = locks.try_lock(_lock_path(state_dir))
        if fd is None:
            return None
        return spawn(fd, f"from acpmem.search.watch import main; main({str(root)!r}, {{fd}}, {float(idle_seconds)!r})",
                     Path(state_dir) / LOG, MAX_LOG_BYTES)
    except OSError:
        return None


def _log(msg: str) -> None:
    sys.stderr.write(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + f" [{os.getpid()}] {msg}\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------------------------- the watcher

class Watcher:
    """The watcher's state: the watches, what changed since the last apply, the database it keeps current."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state_dir = root / layout.STATE_DIRNAME
        self.db_path = self.state_dir / catalog.DB_NAME
        self.ino = Inotify()
        self.root_wd = self.ino.add(root, ROOT_EVENTS)
        self.entries_wd: int | None = None
        self.pending: set[str] = set()
        self.full = True           # the first apply is a full refresh
        self.gone = False          # set when the watcher can no longer vouch: it then says no and exits
        self._watch_entries()
        self.con = catalog.connect(self.db_path)
        self.ident = identity(self.db_path)
        self.generation = 0        # applies so far (its own commits do not change the connection's data_version)
        self.matrices: dict = {}   # (model, dim, types, superseded) → (stamp, vectors.Matrix)

    def _watch_entries(self) -> None:
        try:
            self.entries_wd = self.ino.add(self.root / layout.ENTRIES_DIR, ENTRY_EVENTS)
        except OSError:
            self.entries_wd = None     # no entries/ (yet): the root watch tells when it appears
            if os.path.lexists(self.root / layout.ENTRIES_DIR):
                self.gone = True       # there but not watchable (e.g. a symlink): we could not vouch for it
        self.full = True

    def drain(self) -> None:
        for wd, mask, name in self.ino.read():
            if mask & IN_Q_OVERFLOW:
                self.full = True
            elif wd == self.root_wd:
                if mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED | IN_UNMOUNT):
                    self.gone = True
                elif name == layout.ENTRIES_DIR:             # created, removed or renamed: watch whatever is there now
                    self._watch_entries()
                elif name == layout.STATE_DIRNAME and mask & (IN_DELETE | IN_MOVED_FROM):
                    self.gone = True
            elif wd == self.entries_wd:
                if mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED | IN_UNMOUNT):
                    self.entries_wd = None
                    self.full = True
                    if mask & IN_IGNORED and (self.root / layout.ENTRIES_DIR).is_dir():
                        self._watch_entries()
                elif name.endswith(".md") and not name.startswith("."):
                    self.pending.add(layout.ENTRIES_DIR + "/" + name)
        if not self.root.is_dir() or not self.state_dir.is_dir():
            self.gone = True

    def apply(self) -> None:
        """Apply what ``drain`` collected (everything, after an overflow or a new ``entries/``)."""
        if self.full:
            self.full = False
            self.pending.clear()
            catalog.refresh(self.con, self.root)
        elif self.pending:
            paths, self.pending = self.pending, set()
            catalog.refresh_paths(self.con, self.root, paths)
        done = store.update(self.con)
        if done.indexed or done.dropped or done.rebuilt:
            self.generation += 1

    def answer(self, request: bytes) -> bytes:
        parts = request.decode("utf-8", "replace").split()
        if len(parts) == 3 and parts[0] == "near":
            answer = self.answer(f"sync {parts[1]}".encode())
            return self.near(parts[2]) if answer == b"ok\n" else answer
        if len(parts) != 2 or parts[0] != "sync":
            return b"no request\n"
        try:
            current = identity(self.db_path)
        except OSError:
            current = None
        if parts[1] != self.ident or current != self.ident:
            self.gone = True      # a replaced database or another version of acpmem: let a new watcher take over
            return b"no identity\n"
        self.drain()
        if self.gone:
            return b"no gone\n"
        self.apply()
        return b"ok\n"

    def near(self, payload: str) -> bytes:
        """The top vector matches of a query (``near``), from a matrix kept while neither the index nor the vectors
        change."""
        # lazy: `surface` does not need them (measured +5.5 ms to its start-up)
        import base64
        from array import array

        from acpmem.search import vectors

        try:
            p = json.loads(base64.b64decode(payload, validate=True))
            query = array("f", base64.b64decode(p["q"], validate=True)).tolist()
            types = None if p["types"] is None else tuple(str(t) for t in p["types"])
            model, sup, top = str(p["model"]), bool(p["sup"]), int(p["top"])
        except (ValueError, KeyError, TypeError):
            return b"no request\n"
        if not query or not 0 < top <= 10_000:
            return b"no request\n"
        try:
            attached = any(r[1] == "vx" for r in self.con.execute("PRAGMA database_list"))
            stamp = (self.generation, self.con.execute("PRAGMA data_version").fetchone()[0],
                     self.con.execute("PRAGMA vx.data_version").fetchone()[0] if attached else None)
            key = (model, len(query), types, sup)
            cached = self.matrices.get(key)
            if cached is None or cached[0] != stamp or not attached:
                m = vectors.load_matrix(self.con, self.state_dir, model, len(query), types=types,
                                        include_superseded=sup)
                attached = any(r[1] == "vx" for r in self.con.execute("PRAGMA database_list"))
                stamp = stamp[:2] + ((self.con.execute("PRAGMA vx.data_version").fetchone()[0]
                                      if attached else None),)
                self.matrices = {key: (stamp, m)}      # one model and filter kept: the memory of one matrix
            else:
                m = cached[1]
            found = m.top(query, top)
        except (ImportError, sqlite3.Error) as exc:
            _log(f"near: {exc}")
            return b"no vectors\n"
        return b"ok " + json.dumps({"present": m.n, "missing": m.total - m.n,
                                    "top": [[k, v] for k, v in found.items()]}).encode() + b"\n"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.con.close()
        with contextlib.suppress(OSError):
            self.ino.close()


def serve(root: Path, idle_seconds: float) -> str:
    """Watch ``root`` until idle for ``idle_seconds`` or the vault is gone; returns why it stopped."""
    # lazy: `surface` does not need them (measured +2.3 ms to its start-up)
    import select
    import socket

    w = Watcher(root)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dir_fd = os.open(w.state_dir, os.O_RDONLY | os.O_DIRECTORY)
    addr = _sock_path(w.state_dir, dir_fd)
    try:
        if w.gone:
            return "entries/ cannot be watched (a symlink?)"
        w.apply()                               # the initial full refresh, before anyone is told "ok"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(addr)                     # a dead watcher's socket (we hold the lock, so it is not live)
        listener.bind(addr)
        listener.listen(16)
        for mark in (FAILED, UNANSWERED):     # a new watcher answers: readers ask it
            with contextlib.suppress(OSError):
                (w.state_dir / mark).unlink()
        listener.setblocking(False)
        last = time.monotonic()
        due = None        # when the changes seen so far are applied without waiting for a request
        while True:
            now = time.monotonic()
            left = idle_seconds - (now - last)
            if left <= 0:
                return "idle"
            wait = min(left, 60.0) if due is None else max(0.0, due - now)
            readable, _, _ = select.select([listener, w.ino.fd], [], [], wait)
            if w.ino.fd in readable:
                w.drain()
                if (w.pending or w.full) and due is None:
                    due = time.monotonic() + DEBOUNCE_S
            if due is not None and time.monotonic() >= due and not w.gone:
                w.apply()
                due = None
            if listener in readable:
                while True:
                    try:
                        conn, _ = listener.accept()
                    except BlockingIOError:
                        break
                    last = time.monotonic()
                    with conn:
                        conn.settimeout(5.0)
                        try:
                            req = conn.recv(65536)
                            while req and not req.endswith(b"\n") and len(req) < MAX_REQUEST:
                                more = conn.recv(65536)
                                if not more:
                                    break
                                req += more
                            conn.sendall(w.answer(req))
                        except OSError:
                            pass
                    if not (w.pending or w.full):
                        due = None          # the request applied them
            if w.gone:
                return "vault or database gone"
    finally:
        with contextlib.suppress(OSError):
            os.unlink(addr)         # ours: we still hold the lock, no other watcher can have bound it
        listener.close()
        os.close(dir_fd)
        w.close()


class _Terminated(Exception):
    pass


def _terminate(signum, frame) -> None:
    raise _Terminated()


def main(root: str, lock_fd: int | None = None, idle_seconds: float = 1800.0) -> None:
    """The detached watcher process (started by ``start``, holding the lock through ``lock_fd``)."""
    with contextlib.suppress(OSError):
        os.chdir("/")     # never keep the caller's folder busy
    path = Path(root)
    state_dir = path / layout.STATE_DIRNAME
    if lock_fd is None:
        lock_fd = locks.try_lock(_lock_path(state_dir))
        if lock_fd is None:
            return
    # lazy: `surface` does not need it (measured +0.5 ms to its start-up)
    import signal

    signal.signal(signal.SIGTERM, _terminate)
    try:
        _log(f"watching {root} (exits after {idle_seconds:.0f} s without a request)")
        why = serve(path, idle_seconds)
        _log(f"stopped: {why}")
    except _Terminated:
        _log("stopped: terminated")
    except Exception as exc:   # the readers scan without us; a new watcher is tried after RETRY_AFTER_S
        _log(f"stopped on error: {type(exc).__name__}: {exc}")
        with contextlib.suppress(OSError):
            (state_dir / FAILED).write_text(f"{type(exc).__name__}: {exc}\n")
    finally:
        os.close(lock_fd)
