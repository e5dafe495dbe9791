"""The read server: one warm process per user and installation that runs the per-turn reads for ``acp``
(``acpmem.cli.relay`` is its client, and says why).

``python -P -m acpmem.cli.readserver SOCKET``, started detached by a client that found none. It takes ``SOCKET.lock``
(one server per socket; a second exits), imports every module the reads use, binds the socket and waits. For each
connection it checks the peer is its own user, confined as it is (``relay.confinement``), reads the request
(``relay.request``) and, when the client's identity is its own and no module it loaded has changed on disk since it
started (``Installation``), forks: the child takes the client's folder, environment and umask and tells the client its
pid (``S``); once the client says go (``G``), passing its standard descriptors, it runs ``acpmem.cli.main.main`` on
the command line, tells the client its exit code (``X``) at the end, and exits. A client that gave up waiting for the
``S`` (``relay.START_WAIT_S``: a server stopped or stuck) closes instead of saying go and runs the command itself, so
a command runs in one place only, even when the server takes the request late. A changed module (an upgrade, an edit
of an editable install) answers ``R`` — the client runs the command itself — and ends the server. It ends after
``ACPMEM_READ_SERVER_IDLE`` seconds (600) without a request; an error on the way up is written to ``SOCKET.log`` and
marks ``SOCKET.failed`` (clients start no other server for ten minutes). When no request waits, it holds what its
children read of each vault (``acpmem.search.held``), and lets go, before each fork, of any vault the kernel reported
a change in.
"""
from __future__ import annotations

import gc
import io
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

from acpmem.cli import relay

_LOCK: list[int] = []   # the server's lock descriptor, which its children close
MAX_REQUEST = 8 * 1024 * 1024   # a recall's query or a surface --prompt on the command line fits many times over
GO_WAIT_S = 60.0   # a child waits this long for its client's go; then it ends without running the command
# what the reads import as they run (each lazily, to keep a process's start-up short): imported once here
WARM = ("acpmem.cli.main", "acpmem.cli.fast", "acpmem.cli.hot", "acpmem.cli.reads", "acpmem.cli.progress",
        "acpmem.read.prompted", "acpmem.vault.reader",
        "acpmem.vault.readlog", "acpmem.vault.discovery", "acpmem.vault.projectgit", "acpmem.vault.branches",
        "acpmem.vault.proposals", "acpmem.read.layers", "acpmem.read.resident", "acpmem.read.retrieval",
        "acpmem.read.snapshot", "acpmem.read.citecheck", "acpmem.read.sources", "acpmem.core.render",
        "acpmem.core.score", "acpmem.search.catalog", "acpmem.search.store", "acpmem.search.query",
        "acpmem.search.watch", "acpmem.search.held", "acpmem.infra.db", "acpmem.infra.detach",
        "acpmem.read.sessions", "acpmem.integrations.claude_code",
        "http.client")   # a recall's embeddings or rerank call imports it where it makes one


def warm() -> None:
    """Import what the reads import, and build the caches of static data they build on first use (a query's word
    lists and aliases, the stemmer, the CJK pattern, the TLS context of an HTTPS embeddings or rerank call): pure
    functions of the installed package and the server's environment, never of a vault (nothing here opens a file a
    child would share). Not the CJK segmenter: jieba's dictionary is two thirds of the server's memory, and a fork
    copies the page tables of all of it (0.8 against 0.4 ms), and most vaults never segment a word: a query is split
    by the dictionary's headwords, and only an entry's text (as it is indexed) and its tags go through jieba. A
    child that loads it says so, and the server loads it then (``acpmem.search.held``); without the reports (no
    inotify), the server loads it when it starts serving."""
    import importlib

    for name in WARM:
        importlib.import_module(name)
    from acpmem.core import limits
    from acpmem.search import ranking, similar

    ranking.prepare(segment=False)   # the CJK segmenter once a child needs it (``acpmem.search.held``), or now below
    similar.prepare()
    limits.prepare()
    from acpmem.core import lazyre

    lazyre.compile_all()   # the patterns each module compiles on first use: once here, not in every reader
    from acpmem.infra import embedclient

    try:   # the TLS context of a recall's HTTPS embeddings or rerank call, made once for every reader
        embedclient.tls_context()
    except OSError:
        pass   # a CA store that cannot be read: each such call says so itself


def loaded_files() -> dict[str, int]:
    """Every acpmem module file loaded, and every folder of the package, with its mtime: what a change on disk
    (an upgrade, an edit) alters."""
    out: dict[str, int] = {}
    root = relay.package_dir()
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if f and f.startswith(root + os.sep):
            out[f] = os.stat(f).st_mtime_ns
            d = os.path.dirname(f)
            if d not in out:
                out[d] = os.stat(d).st_mtime_ns
    return out


def changed(files: dict[str, int]) -> bool:
    for f, mtime in files.items():
        try:
            if os.stat(f).st_mtime_ns != mtime:
                return True
        except OSError:
            return True
    return False


class Installation:
    """Whether a module the server loaded, or a folder of the package, changed on disk since it started: the
    kernel's reports on the package's folders (inotify: one read per request), checked against the files once after
    the watches were set (a change between the imports and the watches); where inotify is not to be had (or the
    package is on a network file system), a ``stat`` of every file per request (~0.2 ms)."""

    def __init__(self) -> None:
        self.files = loaded_files()
        self.ino = None
        self.stale = False
        try:
            from acpmem.infra import inotify

            folders = sorted({f for f in self.files if os.path.isdir(f)})
            if folders and all(inotify.sees_every_change(d) for d in folders):
                ino = inotify.Inotify()
                try:
                    for d in folders:
                        ino.add(d, inotify.ENTRY_EVENTS)
                except OSError:
                    ino.close()
                    raise
                self.ino = ino
        except (OSError, AttributeError):
            self.ino = None
        self.stale = changed(self.files)

    def changed(self) -> bool:
        if not self.stale:
            if self.ino is None:
                self.stale = changed(self.files)
            else:
                try:
                    self.stale = bool(self.ino.read())
                except OSError:
                    self.stale = changed(self.files)
        return self.stale

    def close(self) -> None:
        if self.ino is not None:
            self.ino.close()
            self.ino = None


def _unpack(body: bytes) -> list[bytes]:
    items, i = [], 0
    while i < len(body):
        n = int.from_bytes(body[i:i + 4], "big")
        items.append(body[i + 4:i + 4 + n])
        i += 4 + n
    return items


def _passed(anc) -> list[int]:
    """The descriptors an ``SCM_RIGHTS`` message carried (``recvmsg``'s ancillary data)."""
    fds: list[int] = []
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += list(struct.unpack(f"{len(raw) // 4}i", raw[:len(raw) - len(raw) % 4]))
    return fds


def receive(conn: socket.socket) -> list[bytes] | None:
    """The request's items, or None when it is not a whole request (descriptors come with the go, not with it: any
    sent with it are closed, and the request refused)."""
    data, anc, _, _ = conn.recvmsg(4096, socket.CMSG_SPACE(3 * 4))
    fds = _passed(anc)
    for fd in fds:
        os.close(fd)
    if len(data) < 4 or fds:
        return None
    size = int.from_bytes(data[:4], "big")
    if size > MAX_REQUEST:
        return None
    body = data[4:]
    while len(body) < size:
        chunk = conn.recv(min(65536, size - len(body)))
        if not chunk:
            return None
        body += chunk
    return _unpack(body)


def _go(conn: socket.socket) -> list[int] | None:
    """The client's go and its standard input, output and error, passed with it; None when the client closed (it
    gave up waiting for the start, or went away), sent anything else, or nothing within ``GO_WAIT_S``."""
    try:
        conn.settimeout(GO_WAIT_S)
        data, anc, _, _ = conn.recvmsg(1, socket.CMSG_SPACE(3 * 4))
        conn.settimeout(None)
    except OSError:
        return None
    fds = _passed(anc)
    if data != b"G" or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    return fds


def _peer_is_me(conn: socket.socket, mine: str) -> bool:
    """Whether the caller is this user, confined as this server is (``relay.confinement``: the kernel's word on
    the caller's process, not the caller's)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return uid == os.getuid() and pid > 0 and relay.confinement(str(pid)) == mine


def run_child(conn: socket.socket, items: list[bytes]) -> None:
    """In the forked child: become the client's process (folder, environment, umask), say its pid, and once the
    client says go (passing its descriptors) run the command line on them and answer its exit code. Never
    returns; ends without running anything when the client does not say go."""
    code = 70
    try:
        for fd in _LOCK:   # the lock is the server's: a command still running must not keep it held
            os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)   # the server's reaping is not the command's
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        prog = items[2].decode()
        cwd, mask, n = items[3], int(items[4]), int(items[5])
        argv = [os.fsdecode(a) for a in items[6:6 + n]]
        env = dict(kv.partition(b"=")[::2] for kv in items[6 + n:])
        os.chdir(cwd)
        os.umask(mask)
        # the client's environment, as bytes: only what differs from this process's is changed (decoding every
        # variable, clearing them all and setting each again cost ~0.8 ms of every read; the two are mostly alike)
        here = os.environb   # (``os.environ`` itself, keyed by bytes)
        for k in [k for k in here if k not in env]:
            del here[k]
        for k, v in env.items():
            if here.get(k) != v:
                here[k] = v
        sys.argv = [prog] + argv
        from acpmem.search import analysis, held

        segmented = analysis.segmenter_loaded()   # (a child that has to load it says so when it is done)
        # the client's go, with its descriptors: one that gave up waiting for the start (or went away) closes
        # instead and runs the command itself; then it never starts here. A Ctrl-C the client passes on once it
        # said go waits (blocked) until the command's streams are the client's, and then ends it as an interrupted
        # command, wherever it lands (before the command's own handling is in place, or after it)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            conn.sendall(b"S" + os.getpid().to_bytes(4, "big"))
        except OSError:
            os._exit(0)
        fds = _go(conn)
        if fds is None:
            os._exit(0)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _fresh_streams()
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            from acpmem.cli.main import main

            code = main(argv, prog)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except KeyboardInterrupt:
            code = relay.report_interrupt(argv)
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except (OSError, ValueError):
                pass
        if not segmented and analysis.segmenter_loaded():
            held.segmenter_loaded()
    finally:
        # the command has ended: a Ctrl-C the caller passes on now changes nothing, and nothing here may keep this
        # process from ending (it would run on as a copy of the server, and remove the server's socket on its way
        # out); an exit code past 32 bits is taken as a process takes it (its low byte)
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            cpu = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                      for f in ("ru_utime", "ru_stime"))
            status = int(code) if -2**31 <= int(code) < 2**31 else int(code) & 0xFF
            conn.sendall(b"X" + status.to_bytes(4, "big", signed=True) + int(cpu * 1e6).to_bytes(8, "big"))
        except BaseException:
            pass
        finally:
            os._exit(0)


def _fresh_streams() -> None:
    """Standard streams over the client's descriptors, set up as the interpreter sets them up at start (line
    buffered on a terminal); the encoding is the server's, which the identity makes the client's."""
    enc_out, err_out = sys.stdout.encoding, sys.stdout.errors
    enc_in, err_in = sys.stdin.encoding, sys.stdin.errors
    sys.stdin = io.TextIOWrapper(io.open(0, "rb", closefd=False), encoding=enc_in, errors=err_in)
    sys.stdout = io.TextIOWrapper(io.open(1, "wb", closefd=False), encoding=enc_out, errors=err_out,
                                  line_buffering=os.isatty(1))
    sys.stderr = io.TextIOWrapper(io.open(2, "wb", closefd=False), encoding=sys.stderr.encoding,
                                  errors="backslashreplace", line_buffering=True)


def _holder():
    """The listings held for the children (``acpmem.search.held``) and the pipe their reports come on; (None, -1)
    where inotify is not to be had (the children then list every vault the long way, as before)."""
    from acpmem.search import held
    from acpmem.vault import readlog

    try:
        holder = held.Holder(reads_of=readlog.reads_state)
    except (OSError, AttributeError):
        return None, -1
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    held.REPORT_FD[:] = [w]
    return holder, r


def serve(path: str, idle: float) -> None:
    installed = Installation()
    me = relay.identity()
    mine = relay.confinement()
    if mine is None:
        raise RuntimeError("this process is sandboxed (or /proc cannot be read): it serves nobody")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(path)   # a dead server's (the lock says none is alive)
    except FileNotFoundError:
        pass
    listener.bind(path)
    listener.listen(64)
    try:
        os.unlink(path + ".unanswered")   # a new server answers: clients ask it
    except OSError:   # none (or not a file: then it is never heeded for long, see relay.unanswered)
        pass
    ino = os.stat(path).st_ino
    listener.settimeout(idle)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # children reaped by the kernel
    holder, reports = _holder()
    if holder is None:   # no child can say it needed the segmenter: load it now
        from acpmem.search.analysis import segmenter

        segmenter()
    gc.freeze()   # what the children share with this process is left out of their collections (fewer copied pages)
    deadline = time.monotonic() + idle
    try:
        while True:
            if holder is not None:   # wait for a request or a child's report; hold what was reported meanwhile
                left = deadline - time.monotonic()
                ready = select.select([listener, reports], [], [], max(left, 0))[0] if left > 0 else []
                if not ready:
                    return
                if reports in ready:
                    holder.read_reports(reports)
                    if listener not in ready:
                        holder.hold_wanted()
                        gc.freeze()
                        continue
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                return
            deadline = time.monotonic() + idle
            with conn:
                conn.settimeout(30)
                try:
                    if not _peer_is_me(conn, mine):
                        continue
                    items = receive(conn)
                except OSError:
                    continue
                if items is None:
                    continue
                stale = installed.changed()
                if len(items) < 6 or items[0] != relay.PROTOCOL or items[1] != me or stale:
                    try:
                        conn.sendall(b"R")
                    except OSError:
                        pass
                    if stale:
                        return
                    continue
                if holder is not None:
                    try:
                        holder.drain()   # every change made before this request: a changed vault is let go
                    except OSError:      # the reports cannot be read: nothing is held from now on
                        holder.close()
                        holder = None
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    installed.close()
                    if holder is not None:
                        os.close(reports)
                        holder.ino.close()
                    conn.settimeout(None)
                    run_child(conn, items)
    finally:
        installed.close()
        if holder is not None:
            holder.close()
        try:
            if os.stat(path).st_ino == ino:   # still ours: a newer server may have bound the path since
                os.unlink(path)
        except OSError:
            pass


def main(path: str) -> None:
    from acpmem.infra import locks
    from pathlib import Path

    lock = locks.try_lock(Path(path + ".lock"))
    if lock is None:
        return   # another server holds this socket
    _LOCK.append(lock)
    try:
        idle = relay.idle_seconds() or relay.IDLE_S   # (a client checked it before it started this server)
        warm()
        serve(path, idle)
    except Exception as exc:   # noqa: BLE001 — written down, and clients stop starting servers for a while
        try:
            with open(path + ".log", "a", encoding="utf-8") as log:
                log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} [{os.getpid()}] "
                          f"{type(exc).__name__}: {exc}\n")
            open(path + ".failed", "w").close()
        except OSError:
            pass
    finally:
        os.close(lock)


if __name__ == "__main__":
    from acpmem.cli.startup import collect_less

    collect_less()   # for the readers it forks, which inherit it
    main(sys.argv[1])
