"""``acp`` as a real process without a fresh interpreter: for the tests whose point is a command run by something
else — a shell running a page's blocks, ten agents syncing at once, an MCP client starting ``acp memory serve`` —
and not the interpreter's start-up or the console script itself (those keep the installed ``acp``: the console-script
tests, the MCP handshake, everything killed or timed).

``bin_dir()`` is a folder holding an ``acp`` and an ``acpmem``: small scripts (Python without ``site``, ~10 ms) that
hand their command line, environment, folder, umask and standard descriptors over a Unix socket to this test
process's launch server — a process that imported acpmem (and the ``mcp`` package) once — which forks a child that
becomes the caller's process in all of these and runs the console script's own entry point (``acp_main`` /
``acpmem_main``). The script exits as the child did (its code, or the same signal); a signal sent to the script
(SIGINT, SIGTERM, SIGHUP, …) is passed on to the child, and a script that dies (SIGKILL) takes the child with it —
and the processes the child started: off a terminal the child leads a process group of its own, as a command a
shell starts does.
Where the caller's environment would make Python set up its streams or find its modules otherwise than the server's
(``LANG``, ``LC_ALL``, ``PYTHONIOENCODING``, ``PYTHONPATH``, …) or there is no server, the script runs the installed
``acp`` instead.

Put ``bin_dir()`` first on ``PATH`` (``path_env()``) or name ``acp()`` as the command.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from crashpoints import PRELOAD

# what decides how Python sets up its standard streams, and which code it loads: a caller with other values than the
# server's gets the installed `acp`
SAME_VARS = ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONUNBUFFERED", "PYTHONPATH",
             "PYTHONHOME")
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")

# The script in bin_dir(): standard library only (it runs with -I -S). Formatted with the socket's path, the
# installed script it falls back to, the program name, the server's stream variables and the signals passed on.
SCRIPT = r'''#!{python} -IS
import array, os, signal, socket, sys
SOCK, REAL, PROG, STREAMS = {sock!r}, {real!r}, {prog!r}, {streams!r}
def fallback():
    os.execv(REAL, [REAL, *sys.argv[1:]])
if any(os.environ.get(k) != v for k, v in STREAMS.items()):
    fallback()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(SOCK)
except OSError:
    fallback()
def item(b):
    return len(b).to_bytes(4, "big") + b
mask = os.umask(0)
os.umask(mask)
args = [os.fsencode(a) for a in sys.argv]
env = [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in os.environ.items()]
body = b"".join(item(x) for x in [PROG.encode(), os.fsencode(os.getcwd()), str(mask).encode(),
                                  str(len(args)).encode(), *args, *env])
data = len(body).to_bytes(4, "big") + body
sent = s.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]).tobytes())])
if sent < len(data):   # never an empty send: once the server has it all, the command may be done and the server
    try:                 # gone from the connection, and a send of nothing to a closed peer is EPIPE
        s.sendall(data[sent:])
    except OSError:      # the server went away before it had the whole request: it never started the command
        fallback()
def forward(n, frame):
    try:
        s.send(bytes([n]))
    except OSError:
        pass
for name in {forwarded!r}:
    signal.signal(getattr(signal, name), forward)
got = b""
while len(got) < 4:
    chunk = s.recv(4 - len(got))
    if not chunk:
        sys.stderr.write("acp (test launcher): the launch server ended before the command did\n")
        sys.exit(70)
    got += chunk
status = int.from_bytes(got, "big")
if os.WIFSIGNALED(status):
    n = os.WTERMSIG(status)
    signal.signal(n, signal.SIG_DFL)
    os.kill(os.getpid(), n)
sys.exit(os.WEXITSTATUS(status))
'''

# The launch server, run as ``python -c SERVER SOCKET`` by ``_start``: what the crash points' forking server imports
# and builds (``crashpoints.PRELOAD``, here with the integrations and ``mcp``), then its loop; it ends when its
# standard input closes (the test process that started it ended), killing any child still running.
SERVER = "_WITH_INTEGRATIONS = True\n" + PRELOAD + r'''
import contextlib, selectors, signal, socket, struct, traceback
from acpmem.cli.readserver import _fresh_streams as fresh_streams


def receive(conn):
    data, anc, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(3 * 4))
    fds = []
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += list(struct.unpack(f"{len(raw) // 4}i", raw[:len(raw) - len(raw) % 4]))
    size = int.from_bytes(data[:4], "big")
    body = data[4:]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            break
        body += chunk
    items, i = [], 0
    while i < len(body):
        n = int.from_bytes(body[i:i + 4], "big")
        items.append(body[i + 4:i + 4 + n])
        i += 4 + n
    return items, fds


def child(items, fds, own):
    code = 1
    try:
        for fd in own:   # the server's socket, its selector and every other caller's connection
            try:
                os.close(fd)
            except OSError:
                pass
        for name in ("SIGCHLD", "SIGTERM", "SIGINT", "SIGPIPE"):
            signal.signal(getattr(signal, name), signal.SIG_DFL if name != "SIGINT" else signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)   # as the interpreter sets it at start
        prog, cwd, mask, n = items[0].decode(), items[1], int(items[2]), int(items[3])
        argv = [os.fsdecode(a) for a in items[4:4 + n]]
        env = dict(os.fsdecode(kv).partition("=")[::2] for kv in items[4 + n:])
        os.chdir(cwd)
        os.umask(mask)
        os.environ.clear()
        os.environ.update(env)
        if not any(os.isatty(fd) for fd in fds):
            os.setpgid(0, 0)   # its own group, as a command a shell starts: killed with its children (the server too)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        fresh_streams()   # as the interpreter sets them up at start (the read server's own, for its children)
        git_config_from(os.environ.get("HOME", ""))
        sys.argv = argv
        try:
            (acpmem.cli.main.acp_main if prog == "acp" else acpmem.cli.main.acpmem_main)()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
        except KeyboardInterrupt:
            code = 128 + signal.SIGINT
        except BaseException:
            traceback.print_exc()
            code = 1
        import atexit
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    finally:
        os._exit(code & 0xFF)


def main(path):
    import gc
    gc.freeze()   # what the children share with this process stays out of their collections: fewer pages copied
    lis = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lis.bind(path)
    lis.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(lis, selectors.EVENT_READ, ("accept",))
    sel.register(sys.stdin, selectors.EVENT_READ, ("stdin",))
    jobs = {}   # pid -> (its caller's connection, a descriptor of the process, whether it leads its own group)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in sel.select():
            what = key.data
            if what[0] == "stdin":
                if not os.read(0, 4096):
                    for pid, (_, _, group) in jobs.items():
                        try:
                            (os.killpg if group else os.kill)(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    return
            elif what[0] == "accept":
                conn, _ = lis.accept()
                try:
                    items, fds = receive(conn)
                except OSError:
                    conn.close()
                    continue
                own = [lis.fileno(), sel.fileno() if hasattr(sel, "fileno") else -1, conn.fileno()]
                own += [fd for c, p, _ in jobs.values() for fd in (c.fileno(), p)]
                group = not any(os.isatty(fd) for fd in fds)
                pid = os.fork()
                if pid == 0:
                    child(items, fds, own)
                if group:
                    try:
                        os.setpgid(pid, pid)   # (the child does too: whichever runs first)
                    except OSError:
                        pass
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                jobs[pid] = (conn, pidfd, group)
                sel.register(conn, selectors.EVENT_READ, ("conn", pid))
                sel.register(pidfd, selectors.EVENT_READ, ("exit", pid))
            elif what[0] == "conn":
                conn, _, group = jobs[what[1]]
                try:
                    data = conn.recv(64)
                except OSError:
                    data = b""
                if not data:   # the caller's script died: so does its command, with the processes it started
                    sel.unregister(conn)
                    try:
                        (os.killpg if group else os.kill)(what[1], signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                for n in data:
                    try:
                        os.kill(what[1], n)
                    except ProcessLookupError:
                        pass
            else:
                pid = what[1]
                _, status = os.waitpid(pid, 0)
                conn, pidfd, _ = jobs.pop(pid)
                sel.unregister(pidfd)
                os.close(pidfd)
                try:
                    sel.unregister(conn)
                except KeyError:
                    pass
                try:
                    conn.sendall(status.to_bytes(4, "big"))
                except OSError:
                    pass
                conn.close()


main(sys.argv[1])
'''

_STATE: dict = {}


def _start() -> Path:
    import atexit
    import shutil
    import subprocess
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="acpmem-launch-"))
    sock = folder / "s"
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-c", SERVER, str(sock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         env=env, cwd=str(folder))
    assert p.stdout.readline() == b"ready\n", "the launch server did not start"
    bin_ = folder / "bin"
    bin_.mkdir()
    streams = {k: os.environ.get(k) for k in SAME_VARS}
    for prog in ("acp", "acpmem"):
        real = str(Path(sys.executable).parent / prog)
        f = bin_ / prog
        f.write_text(SCRIPT.format(python=sys.executable, sock=str(sock), real=real, prog=prog, streams=streams,
                                   forwarded=FORWARDED))
        f.chmod(0o755)

    def stop() -> None:
        p.stdin.close()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
        shutil.rmtree(folder, ignore_errors=True)
    atexit.register(stop)
    _STATE.update(bin=bin_, proc=p)
    return bin_


def bin_dir() -> Path:
    """The folder with this test process's ``acp`` and ``acpmem`` scripts (the server started on first use)."""
    p = _STATE.get("proc")
    if p is None or p.poll() is not None:
        return _start()
    return _STATE["bin"]


def acp() -> str:
    """The ``acp`` script's path, to name as a command."""
    return str(bin_dir() / "acp")


def path_env(env: dict | None = None) -> str:
    """``PATH`` with the scripts first (before the virtual environment's own ``acp``)."""
    base = (env if env is not None else os.environ).get("PATH", "")
    return f"{bin_dir()}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{base}"
