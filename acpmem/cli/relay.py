"""The client side of the read server (``acpmem.cli.readserver``): a per-turn read handed to a warm process.

A hook or a model runs ``acp memory show|surface|list|recall|score|stats|hook`` every turn, and most of such a process's
time is Python importing acpmem (about twice the command's own work at 1,000 entries). So ``acp`` first asks the
read server of this user and this installation — a process that imported everything once — to run the command line
in a child it forks: the command runs there exactly as it would here (the same ``main``), in this process's folder,
environment and umask, on this process's own standard input, output and error (their descriptors are passed over
the socket), and this process exits with its exit code. Everything but the command itself is this module: the
standard library's ``_socket``, ``os`` and ``sys``, nothing of acpmem.

It is asked only where ``ACPMEM_READ_SERVER=1`` is set (by the person, or in the environment a host runs ``acp`` in):
a server outlives the command that started it, which nobody should find running without having asked. When there is no
server (or it is another installation's, or its code changed since it started, or anything fails before the command
began) the command runs here as before, and a server is started in the background for the next one; it ends after
``ACPMEM_READ_SERVER_IDLE`` seconds without a request (600). A server that has not started a command ``START_WAIT_S``
after it was sent (stopped, stuck) never starts it — the client runs it here, and marks the socket
(``<socket>.unanswered``), so that clients run their commands here without asking for ten minutes. The socket lives in
a folder only this user can enter (``$XDG_RUNTIME_DIR/acpmem``, else ``/tmp/acpmem-<uid>``); a folder that anyone else
owns or can enter is not used, and the server answers only its own user (``SO_PEERCRED``).
"""
import os
import sys

# what the server runs: the reads, and the hook of Claude Code, Codex and Gemini CLI (`hook claude-code`: a
# session's frozen index, a prompt's surfacing), which writes only what `list` and `surface` write (a session's state)
READS = frozenset({"show", "surface", "list", "recall", "score", "stats", "hook"})
PROTOCOL = b"acpmem-read-2"
# the variables that decide how the interpreter sets up its standard streams: a server serves only clients with
# the same ones (they are part of its identity)
STREAM_VARS = ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONLEGACYWINDOWSSTDIO")
FAILED_WAIT_S = 600   # after a server failed to start, clients start no other for this long
START_WAIT_S = 10.0   # how long a client waits for the server to start its command; then it runs it itself
ASK_AGAIN_AFTER_S = 600.0   # after a server left a client waiting in vain, clients run their commands themselves
IDLE_S = 600.0        # a server ends after this long without a request (``ACPMEM_READ_SERVER_IDLE``)
MAX_IDLE_S = 7 * 24 * 3600


def standard_descriptors() -> None:
    """A process started with descriptor 0, 1 or 2 closed gets /dev/null there, before anything else is opened: else
    the next file opened (the index, an entry) would take that number, and what git or Python writes to "standard
    output" would land in it. Standard output itself stays closed to the commands (``acpmem.cli.output``)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                os.open(os.devnull, os.O_RDWR)   # the lowest free number: this one
            except OSError:
                pass


def command_of(argv: list[str], prog: str) -> str | None:
    """The memory command this command line names (``show``, ``remember``, ``serve``, …), or None."""
    rest = argv[1:] if prog == "acp" and argv[:1] == ["memory"] else argv if prog == "acpmem" else []
    while rest[:1] == ["--vault"] or rest[:1] and rest[0].startswith("--vault="):   # the group's one option
        rest = rest[2:] if rest[0] == "--vault" else rest[1:]
    return rest[0] if rest else None


def is_read(argv: list[str], prog: str) -> bool:
    """Whether this command line is one of the reads the server runs (``READS``)."""
    return command_of(argv, prog) in READS


def wanted(argv: list[str], prog: str) -> bool:
    """Whether this command line is a read the server runs, and the server is not turned off."""
    return is_read(argv, prog) and os.environ.get("ACPMEM_READ_SERVER", "").lower() in ("1", "on", "true", "yes")


_NAMESPACES = ("mnt", "pid", "user", "net", "ipc", "uts", "cgroup")


def confinement(pid: str = "self") -> str | None:
    """What confines process ``pid`` (Linux /proc): its namespaces, its security label, whether it may gain
    privileges and its seccomp mode. None when it cannot be read, or when the process is sandboxed (no new
    privileges, a seccomp filter): a sandboxed command must run inside its own sandbox, never be handed to a
    process outside it (and a server started inside one would carry that sandbox to every other caller)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read()
        ns = [os.readlink(f"/proc/{pid}/ns/{n}") for n in _NAMESPACES]
    except OSError:
        return None
    if b"\nNoNewPrivs:\t0\n" not in status or b"\nSeccomp:\t0\n" not in status:
        return None
    try:
        with open(f"/proc/{pid}/attr/current", "rb") as f:
            label = f.read().decode("utf-8", "replace").strip()
    except OSError:
        label = ""
    return " ".join(ns) + " " + label


def idle_seconds() -> float | None:
    """``ACPMEM_READ_SERVER_IDLE`` (seconds, more than 0 and at most a week; 600 when unset), or None when it is not
    such a number."""
    raw = os.environ.get("ACPMEM_READ_SERVER_IDLE", "").strip()
    if not raw:
        return IDLE_S
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if 0 < value <= MAX_IDLE_S else None   # (NaN compares false: refused too)


def package_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def identity() -> bytes:
    """What a client and its server must share: this interpreter, this acpmem, the variables of the streams."""
    parts = [sys.executable, package_dir()] + [f"{k}={os.environ.get(k, '')}" for k in STREAM_VARS]
    return "\0".join(parts).encode("utf-8", "surrogateescape")


def socket_dir() -> str | None:
    """This user's private folder for the socket, created if missing; None when it is not private (then no server:
    the command runs in this process)."""
    uid = os.getuid()
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = os.path.join(runtime, "acpmem") if runtime and os.path.isabs(runtime) else f"/tmp/acpmem-{uid}"
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(base)
    except OSError:
        return None
    # a folder (not a link), this user's, nobody else's to enter
    if (st.st_mode & 0o170000) != 0o040000 or st.st_uid != uid or st.st_mode & 0o077:
        return None
    return base


def socket_path(base: str) -> str:
    """The socket's path: a short name per installation and protocol (FNV-1a of ``PROTOCOL`` and ``identity``; the
    server checks the whole identity). The protocol is in it so that after an upgrade that changes it, clients start
    a server of their own at once rather than asking the old one, which could not read their requests (and so
    would never see that its code changed) and ends when idle. Not ``zlib.crc32``: importing zlib, a shared library,
    took 0.2–0.6 ms of every served read."""
    h = 0x811C9DC5
    for byte in PROTOCOL + b"\0" + identity():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return os.path.join(base, f"read-{h:08x}.sock")


def _pack(items: list[bytes]) -> bytes:
    return b"".join(len(x).to_bytes(4, "big") + x for x in items)


def request(argv: list[str], prog: str) -> bytes:
    """The request: protocol, identity, program, folder, umask, the arguments and the environment."""
    mask = os.umask(0o022)
    os.umask(mask)
    env = [k + b"=" + v for k, v in os.environb.items()]
    items = [PROTOCOL, identity(), prog.encode(), os.getcwdb(), str(mask).encode(), str(len(argv)).encode(),
             *(os.fsencode(a) for a in argv), *env]
    body = _pack(items)
    return len(body).to_bytes(4, "big") + body


def try_server(argv: list[str], prog: str) -> int | None:
    """Run the command line in the read server: its exit code, or None when it did not run there (then run it here;
    a server is started for the next command when there was none)."""
    if not wanted(argv, prog) or not sys.platform.startswith("linux") or confinement() is None:
        return None
    if idle_seconds() is None:
        return _bad_idle(argv)
    base = socket_dir()
    if base is None:
        return None
    path = socket_path(base)
    marked = unanswered(path)
    if marked == "lately":   # the server left a client waiting in vain lately (stopped, stuck): not asked
        return None
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(START_WAIT_S)   # until the command starts there; it may then take as long as it takes
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            start_server(path)
            return None
        except TimeoutError:   # its queue of connections is full: it takes none
            _mark_unanswered(path, sock)
            return None
        except OSError:
            return None
        try:
            sock.sendall(request(argv, prog))
        except TimeoutError:
            _mark_unanswered(path, sock)
            return None
        except OSError:
            return None
        return _answer(sock, argv, path, marked)
    except KeyboardInterrupt:   # the command has not started (``_answer`` passes on a Ctrl-C after): it never will
        return report_interrupt(argv)
    finally:
        sock.close()


def unanswered(path: str) -> str | None:
    """Whether a client waited in vain for the server of the socket ``path`` to start its command: "lately" (within
    ``ASK_AGAIN_AFTER_S``, and that server is still alive), "once" (a mark to remove when it answers), or None. The
    mark (``<socket>.unanswered``) holds the server's pid, so that a server killed since is asked (and replaced)
    at once; one from the future (a clock set back) counts as old."""
    import time   # (built in, and loaded at start-up: free)

    try:
        fd = os.open(path + ".unanswered", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        age = time.time() - os.fstat(fd).st_mtime
        pid = os.read(fd, 32).strip()
    except OSError:
        return "once"
    finally:
        os.close(fd)
    if not (0 <= age < ASK_AGAIN_AFTER_S):
        return "once"
    if pid.isdigit():
        try:   # its state (the field after the name); a zombie, not yet reaped, is gone too
            with open(b"/proc/" + pid + b"/stat", "rb") as f:
                state = f.read().rpartition(b")")[2].split()[:1]
        except OSError:
            return "once"      # that server is gone: ask (a new one removes the mark)
        if state == [b"Z"]:
            return "once"
    return "lately"


def _mark_unanswered(path: str, sock) -> None:
    """Write ``<socket>.unanswered``: the pid of the server that left this client waiting, stamped with the time now;
    never fails the command (which then runs here)."""
    try:
        import _socket

        creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)   # (pid, uid, gid) of the listener
        pid = int.from_bytes(creds[:4], sys.byteorder, signed=True)   # 0 where the connection was never made
        fd = os.open(path + ".unanswered", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, b"%d\n" % pid if pid > 0 else b"")   # no pid: the mark's time alone decides
        finally:
            os.close(fd)
    except OSError:
        pass


def _fill(sock, n: int, buf: bytearray) -> bool:
    """Read into ``buf`` until it holds ``n`` bytes; False at the end of the stream. A Ctrl-C between reads loses
    nothing: what was read is in ``buf``."""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return False
        buf += chunk
    return True


def _interrupt(pid: int) -> None:
    try:
        os.kill(pid, 2)   # SIGINT
    except OSError:
        pass


def _answer(sock, argv: list[str], path: str, marked: str | None) -> int | None:
    """``S`` + the child's pid when the server has forked the command's process, which waits for this client's
    ``G`` (with the descriptors) to run it; then ``X`` + its exit code + the CPU microseconds it used. ``R`` (or
    nothing) before ``S``, or no ``S`` within ``START_WAIT_S`` (the server is then marked): not run, and never will
    be — run it here. So a command runs in exactly one place: there once told to go, else here. Ctrl-C before the
    go ends this process as it would have ended the command (``try_server``); from the go on, it is the command's:
    held (SIGINT blocked) while the go is sent, then passed on to the command, which runs in the server's session,
    away from this terminal."""
    buf = bytearray()
    try:
        if not _fill(sock, 5, buf) or buf[:1] != b"S":
            return None
    except TimeoutError:   # stopped, stuck, or too busy to start it: it never will now (no G)
        _mark_unanswered(path, sock)
        return None
    except OSError:
        return None
    pid = int.from_bytes(buf[1:5], "big")
    del buf[:5]
    import _signal
    import _socket

    _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT})
    try:   # the go, and this process's standard input, output and error for the command: only now, so that a server
        # that never starts the command holds none of them (a caller reading them to their end would wait on it)
        sock.settimeout(None)
        sock.sendmsg([b"G"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, b"".join(
            fd.to_bytes(4, sys.byteorder, signed=True) for fd in (0, 1, 2)))])
    except OSError:   # it did not get the go: it ends without running the command (a Ctrl-C held: raised here)
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGINT})
        return None
    if marked is not None:   # it answers again: clients ask it again
        try:
            os.unlink(path + ".unanswered")
        except OSError:
            pass
    held = True
    while True:
        try:
            if held:   # a Ctrl-C that came meanwhile is raised here, and passed on
                held = False
                _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGINT})
            if not _fill(sock, 13, buf) or buf[:1] != b"X":
                break
            return _exit_code(bytes(buf))
        except KeyboardInterrupt:
            _interrupt(pid)
        except OSError:
            break
    os.write(2, b"Error: the read server's command ended without an exit code - run it again; "
                b"ACPMEM_READ_SERVER=0 runs it in this process\n")
    return 1


def report_interrupt(argv: list[str]) -> int:
    """Say that the command was interrupted, as every command does (``Interrupted.``, or the JSON error): 130."""
    # lazy: only a Ctrl-C before the command started needs them (measured +4 ms to the client's start-up)
    from acpmem.cli.output import interrupted, json_errors, wants_json

    with json_errors(wants_json(argv)):
        return interrupted()


def _bad_idle(argv: list[str]) -> None:
    """Say once per command that the idle time is not a number of seconds; the command runs in its own process."""
    # lazy: only a bad setting needs them (measured +4 ms to the client's start-up)
    from acpmem.cli.output import json_errors, wants_json, warn

    value = os.environ.get("ACPMEM_READ_SERVER_IDLE", "")
    with json_errors(wants_json(argv)):
        warn(f"Warning: ACPMEM_READ_SERVER_IDLE must be seconds, more than 0 and at most {MAX_IDLE_S}, got "
             f"{value[:40]!r} — the read server is not used; fix or unset it")
    return None


def _exit_code(tail: bytes) -> int:
    """The exit code of the ``X`` answer; its CPU time goes to ``ACPMEM_READ_SERVER_CPU_LOG`` when that is set."""
    log = os.environ.get("ACPMEM_READ_SERVER_CPU_LOG")
    if log:   # for bench/read_speed.py: the command's CPU time is the server's child's, not this process's
        try:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.write(fd, b"%d\n" % int.from_bytes(tail[5:13], "big"))
            os.close(fd)
        except OSError:
            pass
    return int.from_bytes(tail[1:5], "big", signed=True)


def start_server(path: str) -> None:
    """Start the server in its own session, its streams on /dev/null; not again within ``FAILED_WAIT_S`` of a
    start that failed (the server writes ``<socket>.failed``)."""
    import time

    try:
        if time.time() - os.stat(path + ".failed").st_mtime < FAILED_WAIT_S:
            return
    except OSError:
        pass
    try:
        null = os.open(os.devnull, os.O_RDWR)
        try:
            os.posix_spawn(sys.executable, [sys.executable, "-P", "-m", "acpmem.cli.readserver", path], os.environ,
                           file_actions=[(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1),
                                         (os.POSIX_SPAWN_DUP2, null, 2)], setsid=True)
        finally:
            os.close(null)
    except OSError:
        pass
