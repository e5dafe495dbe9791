"""The read server (``acpmem.cli.relay``, ``acpmem.cli.readserver``): a per-turn read run by a warm process prints
what the same command prints run on its own — bytes, errors, exit codes — in the caller's folder, environment and
standard input; writes never go there; a changed installation, an unsafe socket folder, an idle server and a folder
holding someone else's ``acpmem`` package are each handled as the modules say. Real processes throughout: the
process is the point."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import run_cli
from helpers_proc import queued_on

pytestmark = pytest.mark.real_process("the read server is a process of its own, its clients console scripts")

ACP = str(Path(sys.executable).parent / "acp")
SERVER = b"acpmem.cli.readserver"
TIMES = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def servers(under: Path) -> list[int]:
    """The live read servers whose socket is under ``under`` (Linux /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if SERVER in argv and state != "Z" and any(str(under).encode() in a for a in argv):
            out.append(int(d))
    return out


def wait_for(what, timeout: float = 60.0):
    """Poll ``what()`` until it is true (never a fixed sleep: a loaded machine only makes this slower)."""
    end = time.monotonic() + timeout
    while True:
        got = what()
        if got or time.monotonic() > end:
            return got
        time.sleep(0.05)


@pytest.fixture
def run_dir(tmp_path):
    """A private XDG_RUNTIME_DIR for this test's servers; every server there is ended afterwards."""
    d = tmp_path / "run"
    d.mkdir(mode=0o700)
    yield d
    for pid in servers(d):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert wait_for(lambda: not servers(d)), "a read server outlived its test"


def env_for(run_dir: Path, **extra) -> dict:
    env = dict(os.environ, ACPMEM_READ_SERVER="1", XDG_RUNTIME_DIR=str(run_dir), ACPMEM_READ_SERVER_IDLE="120",
               ACPMEM_READ_SERVER_CPU_LOG=str(run_dir.parent / "served.log"))
    env.update(extra)
    return env


def acp(*args, env: dict, cwd=None, input: str | None = None, exe: str = ACP) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *map(str, args)], env=env, cwd=cwd, input=input, capture_output=True, text=True,
                          timeout=120)


def served(run_dir: Path) -> int:
    log = run_dir.parent / "served.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def socket_of(run_dir: Path) -> list[Path]:
    return list((run_dir / "acpmem").glob("read-*.sock")) if (run_dir / "acpmem").is_dir() else []


def started(run_dir: Path, env: dict, vault: Path) -> None:
    """The first read runs in its own process and starts the server; wait until it listens."""
    r = acp("memory", "--vault", vault, "list", env=env)
    assert r.returncode == 0, r.stderr
    assert wait_for(lambda: socket_of(run_dir)), "no read server started"


def _vault_with_entries(root: Path, env: dict) -> tuple[Path, list[str]]:
    """A vault of three entries, made in this process (``main``, as ``acp`` runs it): the vault is not what these
    tests are about, the server is."""
    alone = {k: v for k, v in env.items() if k.startswith("ACPMEM_")} | {"ACPMEM_READ_SERVER": "0"}
    r = run_cli("memory", "init", str(root), env=alone)
    assert r.returncode == 0, r.stderr
    ids = []
    for title in ("Deploys go through the staging gateway first", "Retries back off to 30 s on HTTP 429",
                  "会议记录用中文写，代码注释用英文"):
        r = run_cli("memory", "--vault", str(root), "remember", title, "--type", "decision", "--importance", "7",
                    "--json", env=alone)
        assert r.returncode == 0, r.stderr
        ids.append(re.search(r'"id": "([^"]+)"', r.stdout).group(1))
    return root, ids


def test_every_read_prints_the_same_bytes_served_as_run_alone(tmp_path, run_dir):
    env = env_for(run_dir)
    base, ids = _vault_with_entries(tmp_path / "v", env)
    twin = tmp_path / "twin"
    shutil.copytree(base, twin, symlinks=True)   # the same vault, read by the commands run alone
    started(run_dir, env, base)
    (twin / ".acpmem" / "sessions").mkdir(exist_ok=True)   # (the first list above made no session state)
    lines = [
        ("memory", "show", ids[0]), ("memory", "show", ids[1], "--json"), ("memory", "show", "zzzzzz"),
        ("memory", "show", ""), ("memory", "list"), ("memory", "list", "--json"),
        ("memory", "list", "--format", "prompt", "--session", "s1"),
        ("memory", "recall", "gateway retries"), ("memory", "recall", "中文 注释", "--json"),
        ("memory", "surface", "--session", "s2", "--seed", "3"), ("memory", "score", "--seed", "4"), ("memory", "stats", "--json"),
        ("memory", "list", "--format", "nope"), ("memory", "recall"),
    ]
    before = served(run_dir)
    for line in lines:
        a = acp(*line, "--vault", base, env=env)
        b = acp(*line, "--vault", twin, env=dict(env, ACPMEM_READ_SERVER="0"))
        strip = (lambda s: TIMES.sub("T", s.replace(str(base), "V").replace(str(twin), "V")))
        if line[1] == "stats":   # the sizes on disk of two folders differ (the index's pages): what it counts
            a.stdout, b.stdout = (json.dumps(json.loads(x.stdout)["entries"]) for x in (a, b))
        assert (a.returncode, strip(a.stdout), strip(a.stderr)) == (b.returncode, strip(b.stdout), strip(b.stderr)), line
    # every one of them ran in the server (the client logs each command the server ran)
    assert served(run_dir) - before == len(lines)
    # standard input, the folder and the environment are the caller's
    prompt = "which gateway do deploys go through?"
    a = acp("memory", "surface", "--session", "s3", "--prompt", "-", env=env, cwd=base, input=prompt)
    b = acp("memory", "surface", "--session", "s3", "--prompt", "-", env=dict(env, ACPMEM_READ_SERVER="0"),
            cwd=twin, input=prompt)
    assert a.returncode == b.returncode == 0 and a.stdout == b.stdout and "staging gateway" in a.stdout, a.stderr
    a = acp("memory", "recall", "中文", env=dict(env, ACPMEM_VAULT=str(base)), cwd=tmp_path)
    assert a.returncode == 0 and "会议记录" in a.stdout, a.stderr
    # the hook of Claude Code, Codex and Gemini CLI: a session's start and a prompt, the event on standard input
    for event in ({"hook_event_name": "SessionStart", "source": "startup"},
                  {"hook_event_name": "UserPromptSubmit", "prompt": prompt}):
        event = json.dumps({**event, "session_id": "s4", "transcript_path": str(tmp_path / "t.jsonl")})
        a = acp("memory", "hook", "claude-code", "--vault", base, env=env, input=event)
        b = acp("memory", "hook", "claude-code", "--vault", twin, env=dict(env, ACPMEM_READ_SERVER="0"), input=event)
        strip = (lambda s: s.replace(str(base), "V").replace(str(twin), "V"))
        assert (a.returncode, strip(a.stdout), a.stderr) == (b.returncode, strip(b.stdout), b.stderr), event
        assert a.returncode == 0 and "additionalContext" in a.stdout, (a.stdout, a.stderr)
    assert "staging gateway" in a.stdout   # the prompt's surfacing
    assert served(run_dir) - before == len(lines) + 4


def assert_run_alone(tmp_path: Path, run_dir: Path, env: dict) -> None:
    """Two reads in ``env`` answer, and no server was started or asked."""
    root, ids = _vault_with_entries(tmp_path / "v", env)
    for _ in range(2):
        r = acp("memory", "--vault", root, "show", ids[0], env=env)
        assert r.returncode == 0 and ids[0] in r.stdout, r.stderr
    assert not socket_of(run_dir) and not servers(run_dir) and served(run_dir) == 0


def test_no_server_unless_asked_for(tmp_path, run_dir):
    env = env_for(run_dir)
    del env["ACPMEM_READ_SERVER"]
    assert_run_alone(tmp_path, run_dir, env)


def test_writes_run_in_their_own_process_and_reads_run_at_once(tmp_path, run_dir):
    env = env_for(run_dir)
    root, ids = _vault_with_entries(tmp_path / "v", env)
    started(run_dir, env, root)
    before = served(run_dir)
    r = acp("memory", "--vault", root, "remember", "Fridays have no deploys", "--type", "decision", env=env)
    assert r.returncode == 0, r.stderr
    assert served(run_dir) == before   # a write is never the server's
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: acp("memory", "--vault", root, "show", ids[i % 3], "--json", env=env), range(16)))
    assert all(g.returncode == 0 and ids[i % 3] in g.stdout for i, g in enumerate(got)), [g.stderr for g in got]
    assert served(run_dir) == before + 16
    assert len(servers(run_dir)) == 1


def test_a_changed_installation_ends_the_server_and_the_read_runs_alone(tmp_path, run_dir):
    """An upgrade (or an edit of an editable install) changes a module the server loaded: the next read is answered
    by the new code in its own process, and the server ends; the read after that starts a new one."""
    import acpmem

    copy = tmp_path / "site"
    shutil.copytree(Path(acpmem.__file__).parent, copy / "acpmem", ignore=shutil.ignore_patterns("__pycache__"))
    env = env_for(run_dir, PYTHONPATH=str(copy))
    root, ids = _vault_with_entries(tmp_path / "v", env)
    started(run_dir, env, root)
    first = servers(run_dir)
    assert len(first) == 1
    r = acp("memory", "--vault", root, "show", ids[0], env=env)
    assert r.returncode == 0 and served(run_dir) == 1, r.stderr
    render = copy / "acpmem" / "core" / "render.py"
    st = render.stat()
    os.utime(render, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    r = acp("memory", "--vault", root, "show", ids[0], env=env)
    assert r.returncode == 0 and ids[0] in r.stdout and served(run_dir) == 1, r.stderr   # run alone
    assert wait_for(lambda: not any(p in servers(run_dir) for p in first)), "the stale server did not end"
    acp("memory", "--vault", root, "list", env=env)
    assert wait_for(lambda: socket_of(run_dir) and servers(run_dir))
    r = acp("memory", "--vault", root, "show", ids[0], env=env)
    assert r.returncode == 0 and served(run_dir) == 2, r.stderr


def test_a_socket_folder_others_can_enter_is_never_used(tmp_path, run_dir):
    (run_dir / "acpmem").mkdir()
    (run_dir / "acpmem").chmod(0o777)
    env = env_for(run_dir)
    assert_run_alone(tmp_path, run_dir, env)


def test_an_idle_server_ends_by_itself(tmp_path, run_dir):
    env = env_for(run_dir, ACPMEM_READ_SERVER_IDLE="0.5")
    root, ids = _vault_with_entries(tmp_path / "v", env)
    acp("memory", "--vault", root, "list", env=env)
    assert wait_for(lambda: not servers(run_dir) and not socket_of(run_dir)), "an idle server stayed"


def test_the_callers_folder_is_not_on_the_import_path_of_what_acpmem_starts(tmp_path, run_dir):
    """A command run in a folder holding an `acpmem` package (a clone of someone's project) starts the read server
    and the vault's helpers from the installed acpmem, never from that folder."""
    hostile = tmp_path / "project"
    (hostile / "acpmem").mkdir(parents=True)
    marker = tmp_path / "ran-from-the-folder"
    (hostile / "acpmem" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = env_for(run_dir)
    root, ids = _vault_with_entries(tmp_path / "v", env)
    r = acp("memory", "--vault", root, "list", env=env, cwd=hostile)
    assert r.returncode == 0, r.stderr
    assert wait_for(lambda: socket_of(run_dir))
    r = acp("memory", "--vault", root, "show", ids[0], env=env, cwd=hostile)
    assert r.returncode == 0 and served(run_dir) == 1, r.stderr
    # a detached helper of a vault (the extraction worker, the watcher, the embedder), started in that folder
    code = ("import os, sys\nfrom pathlib import Path\nfrom acpmem.infra import detach, locks\n"
            f"os.chdir({str(hostile)!r})\n"
            f"fd = locks.try_lock(Path({str(tmp_path / 'h.lock')!r}))\n"
            f"pid = detach.spawn(fd, 'import acpmem.core.layout', Path({str(tmp_path / 'h.log')!r}), 4096)\n"
            "os.waitpid(pid, 0)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "h.log").read_text() == "", r.stderr + (tmp_path / "h.log").read_text()
    assert not marker.exists()


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="util-linux's setpriv is not installed")
def test_a_sandboxed_caller_runs_its_reads_itself_and_the_server_never_serves_one(tmp_path, run_dir):
    """A sandboxed process (here: no new privileges, what every seccomp or Landlock sandbox sets) must not have its
    command run by a process outside its sandbox: its own client does not ask, and a caller that asks anyway (that
    says it is not sandboxed) is refused on what the kernel says of it."""
    env = env_for(run_dir)
    root, ids = _vault_with_entries(tmp_path / "v", env)
    r = subprocess.run(["setpriv", "--no-new-privs", ACP, "memory", "--vault", str(root), "show", ids[0]], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and ids[0] in r.stdout, r.stderr
    assert not servers(run_dir) and not socket_of(run_dir), "a sandboxed caller started a server"
    started(run_dir, env, root)
    r = acp("memory", "--vault", root, "show", ids[0], env=env)
    assert r.returncode == 0 and served(run_dir) == 1, r.stderr
    lying = ("import sys\nfrom acpmem.cli import relay\n"
             "free = relay.confinement()\n"
             "relay.confinement = lambda pid='self': 'x' if pid == 'self' else free\n"
             f"print(relay.try_server(['memory', '--vault', {str(root)!r}, 'show', {ids[0]!r}], 'acp'))\n")
    r = subprocess.run(["setpriv", "--no-new-privs", sys.executable, "-c", lying], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "None", r.stdout + r.stderr
    assert served(run_dir) == 1


def test_a_ctrl_c_after_the_go_is_passed_on_to_the_command():
    """A Ctrl-C that lands after the client told the command to go, while it waits for the end, reaches the command:
    the client forwards it to the pid the server named, and ends with the command's own exit code."""
    import socket
    import threading

    from acpmem.cli import relay

    command = subprocess.Popen(["sleep", "60"])   # stands for the served command, a real process of its own
    try:
        ours, server = socket.socketpair()
        with ours, server:
            server.sendall(b"S" + command.pid.to_bytes(4, "big"))

            seen = []

            def the_server():   # once told to go: Ctrl-C lands on the client, then the command's end is reported
                try:
                    seen.append(server.recv(1))
                    os.kill(os.getpid(), signal.SIGINT)
                    seen.append(command.wait(timeout=60))
                    if seen == [b"G", -signal.SIGINT]:
                        server.sendall(b"X" + (130).to_bytes(4, "big", signed=True) + (0).to_bytes(8, "big"))
                finally:
                    server.shutdown(socket.SHUT_RDWR)   # else the client's wait ends at once (no exit code)

            t = threading.Thread(target=the_server)
            t.start()
            try:
                assert relay._answer(ours, ["memory", "show", "x"], "/nonexistent/read.sock", None) == 130
            finally:
                t.join(timeout=60)
            assert seen == [b"G", -signal.SIGINT]
    finally:
        command.kill()


def test_ctrl_c_reaches_the_served_command(tmp_path, run_dir):
    """The command runs in the server's session, away from the caller's terminal: Ctrl-C on the caller is passed on,
    and the caller ends as the command does (the one line every interrupted command prints, exit 130)."""
    env = env_for(run_dir)
    root, ids = _vault_with_entries(tmp_path / "v", env)
    started(run_dir, env, root)
    (server,) = servers(run_dir)
    # `--prompt -` reads the message from standard input: the command waits there until we interrupt it
    p = subprocess.Popen([ACP, "memory", "--vault", str(root), "surface", "--session", "s1", "--prompt", "-"], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        children = Path(f"/proc/{server}/task/{server}/children")
        ours = os.readlink(f"/proc/{p.pid}/fd/0")   # the pipe the command reads: passed to the child it runs in

        def running() -> bool:   # a child of the server holds it (any other child, a holder's read, is not ours)
            for child in children.read_text().split():
                try:
                    if os.readlink(f"/proc/{child}/fd/0") == ours:
                        return True
                except OSError:
                    continue
            return False

        assert wait_for(running), "the server forked no child for the command"
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)   # standard input stays open: the command ends by the interrupt, not by its end
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 130 and "nterrupted" in err, (p.returncode, err)
    assert served(run_dir) == 1




def test_a_stopped_server_costs_one_wait_and_never_runs_a_command_its_client_ran(tmp_path, run_dir):
    """A server stopped (SIGSTOP) takes connections into its queue and answers none. A client interrupted while it
    waits ends as an interrupted command; the next waits ``START_WAIT_S``, runs the command itself and marks the
    server; the ones after run theirs at once, without connecting. Resumed, the server takes the queued requests,
    and their commands never run there (each client closed without the go): each read is in the read log once. Once
    the mark is old, a read is served again and the mark goes; a mark naming a server killed since is not heeded."""
    env = env_for(run_dir)
    root, ids = _vault_with_entries(tmp_path / "v", env)
    started(run_dir, env, root)
    (server,) = servers(run_dir)
    (sock,) = socket_of(run_dir)
    show = ("memory", "--vault", root, "show", ids[0])
    alone = acp(*show, env=dict(env, ACPMEM_READ_SERVER="0"))
    assert alone.returncode == 0 and ids[0] in alone.stdout, alone.stderr

    def as_alone(r) -> bool:   # what the command printed run on its own (its "last read" time aside)
        return (r.returncode, TIMES.sub("T", r.stdout), r.stderr) == (0, TIMES.sub("T", alone.stdout), alone.stderr)

    first = acp(*show, env=env)
    assert as_alone(first) and served(run_dir) == 1, first
    log = root / ".acpmem" / "reads.log"
    lines = len(log.read_text().splitlines())
    children = Path(f"/proc/{server}/task/{server}/children")
    # the listener alone: the connections the server answered are closed (a child may hold one a moment longer)
    assert wait_for(lambda: queued_on(sock) == 1 and not children.read_text().split()), "the server is still busy"
    os.kill(server, signal.SIGSTOP)
    try:
        p = subprocess.Popen([ACP, *map(str, show)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert wait_for(lambda: queued_on(sock) == 2), "the client did not connect"
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=120)
        finally:
            p.kill()
        assert p.returncode == 130 and out == "" and "nterrupted" in err, (p.returncode, out, err)
        waited = acp(*show, env=env)             # waits for the start in vain, then runs it here
        assert as_alone(waited), waited
        mark = Path(str(sock) + ".unanswered")
        assert mark.read_text() == f"{server}\n" and queued_on(sock) == 3   # the server that did not answer
        for _ in range(2):
            at_once = acp(*show, env=env)        # marked: not asked
            assert as_alone(at_once), at_once
        assert queued_on(sock) == 3 and served(run_dir) == 1
    finally:
        os.kill(server, signal.SIGCONT)
    assert wait_for(lambda: queued_on(sock) == 1), "the server did not take the queued requests"
    assert wait_for(lambda: not children.read_text().split()), "the queued requests' children did not end"
    assert len(log.read_text().splitlines()) == lines + 3   # the three reads that ran here; none ran there
    old = time.time() - 3600
    os.utime(mark, (old, old))
    again = acp(*show, env=env)
    assert as_alone(again), again
    assert served(run_dir) == 2 and not mark.exists()
    assert len(log.read_text().splitlines()) == lines + 4
    # marked just now, and then the server is killed: the next client asks, finds none, starts another (which
    # removes the mark), and the one after is served
    mark.write_text(f"{server}\n")
    os.kill(server, signal.SIGKILL)

    def gone() -> bool:   # no process, or a zombie (its command line reads empty while it is torn down: not yet)
        try:
            return Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True

    assert wait_for(gone), "the server did not end"
    assert as_alone(acp(*show, env=env))
    assert wait_for(lambda: servers(run_dir) and not mark.exists()), "no new server, or the mark stayed"
    assert wait_for(lambda: queued_on(sock) == 1), "the new server does not listen"
    assert as_alone(acp(*show, env=env)) and served(run_dir) == 3


def test_a_mark_left_by_a_client_that_never_connected_is_heeded_for_its_time(tmp_path):
    """A client whose connection the server never took (its queue full) marks the socket without a pid: the mark's
    time alone decides (a pid of 0 would read as a server gone, and every client would wait again)."""
    import socket

    from acpmem.cli import relay

    path = str(tmp_path / "read-test.sock")
    never = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)   # not connected: no peer to name
    with never:
        relay._mark_unanswered(path, never)
    assert Path(path + ".unanswered").read_bytes() == b""
    assert relay.unanswered(path) == "lately"
    old = time.time() - relay.ASK_AGAIN_AFTER_S - 1
    os.utime(path + ".unanswered", (old, old))
    assert relay.unanswered(path) == "once"


@pytest.mark.parametrize("json_flag", [False, True])
def test_an_interrupt_before_the_served_command_handles_it_is_said_as_one(tmp_path, json_flag):
    """The caller passes Ctrl-C on as soon as it has the child's pid, which can be before the command's own handling
    is in place: the child still ends as an interrupted command (the line, exit 130), never with 70 and nothing
    said (CI saw that once). The interrupt is made to land at that point."""
    answer, got = _in_the_child(tmp_path, "early", "memory", "list", *(["--json"] if json_flag else []))
    assert got["status"] == 0, got
    assert answer[:1] == b"S" and answer[5:6] == b"X", answer
    assert int.from_bytes(answer[6:10], "big", signed=True) == 130
    if json_flag:
        assert json.loads(got["err"])["error"]["code"] == "interrupted", got["err"]
    else:
        assert got["err"] == "Interrupted.\n", got["err"]


_IN_THE_CHILD = r"""
import json, os, resource, signal, socket, sys
from acpmem.cli import readserver, relay
import acpmem.cli.main as entry

mode, argv = sys.argv[1], sys.argv[2:]
real = resource.getrusage

def command(argv, prog):
    if mode == "nogo":    # must never run: the client did not say go
        open("ran", "w").close()
        return 0
    if mode == "early":   # Ctrl-C lands before the command's own handling is in place
        raise KeyboardInterrupt
    if mode == "env":     # what the command sees: the mapping, and what a process it starts inherits
        import subprocess
        seen = subprocess.run(["env", "-0"], capture_output=True).stdout.split(b"\0")
        os.write(2, json.dumps([dict(os.environ), sorted(x.decode("utf-8", "surrogateescape") for x in seen if x)]
                               ).encode())
        return 0
    return 2**40 + 7 if mode == "odd-code" else 0

def interrupted_as_it_reports(who):   # Ctrl-C passed on just as the child reports the command's end
    os.kill(os.getpid(), signal.SIGINT)
    return real(who)

entry.main = command
if mode == "interrupt":
    readserver.resource = type("R", (), {"getrusage": staticmethod(interrupted_as_it_reports),
                                         "RUSAGE_SELF": resource.RUSAGE_SELF,
                                         "RUSAGE_CHILDREN": resource.RUSAGE_CHILDREN})
if mode == "env":   # the caller's environment differs from the server's: one more, one less, two changed
    os.environ.update(ONLY_THE_CALLERS="1", BOTH_HAVE="the caller's")
    os.environb[b"NOT_UTF8"] = b"caf\xe9"   # (bytes that are not UTF-8, as an environment may hold)
    os.environ.pop("ONLY_THE_SERVERS", None)
callers = dict(os.environ)
items = readserver._unpack(relay.request(argv, "acp")[4:])
if mode == "env":
    del os.environ["ONLY_THE_CALLERS"]
    os.environ.update(BOTH_HAVE="the server's", ONLY_THE_SERVERS="1", NOT_UTF8="cafe")
mine, theirs = socket.socketpair()
err_r, err_w = os.pipe()
fds = [os.open(os.devnull, os.O_RDONLY), os.open(os.devnull, os.O_WRONLY), err_w]
pid = os.fork()
if pid == 0:
    mine.close()
    for fd in fds:
        os.close(fd)
    try:
        readserver.run_child(theirs, items)
    finally:   # reached only if the child did not end there (it would run on as a copy of the server)
        os.write(2, b"RAN ON\n")
        os._exit(3)
theirs.close()
answer = b""
while len(answer) < 5 and (chunk := mine.recv(5 - len(answer))):
    answer += chunk
if mode == "nogo":   # a client that gave up waiting for the start just as it came: it closes, saying no go
    mine.close()
elif answer[:1] == b"S":   # the client's go, with its descriptors
    mine.sendmsg([b"G"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, b"".join(
        fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds))])
for fd in fds:
    os.close(fd)
while mode != "nogo" and (chunk := mine.recv(64)):
    answer += chunk
_, status = os.waitpid(pid, 0)
err = b""
while chunk := os.read(err_r, 4096):
    err += chunk
print(json.dumps({"answer": answer.hex(), "err": err.decode(), "status": status, "callers": callers}))
"""


def _in_the_child(tmp_path, mode: str, *argv: str) -> tuple[bytes, dict]:
    """Run ``run_child`` for ``argv`` in a forked child, the command replaced as ``mode`` says: (what the child
    answered on the socket, all it said)."""
    r = subprocess.run([sys.executable, "-c", _IN_THE_CHILD, mode, *argv], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    return bytes.fromhex(got["answer"]), got


def test_a_command_the_client_did_not_say_go_to_never_runs(tmp_path):
    """The race a client's wait for the start leaves: the server's child says its pid just as the client gives up
    and runs the command itself. The child then waits for a go that never comes (the client closed), and ends
    without running the command, writing nothing and answering nothing more."""
    answer, got = _in_the_child(tmp_path, "nogo", "memory", "list")
    assert answer[:1] == b"S" and len(answer) == 5, answer
    assert got["status"] == 0 and got["err"] == "", got
    assert not (tmp_path / "ran").exists()


def test_the_served_command_sees_the_callers_environment_exactly(tmp_path):
    """The child takes the caller's environment over the server's, changing only what differs: a variable only the
    caller has, one only the server has (gone), one both have with other values — in ``os.environ`` and in what a
    process the command starts inherits."""
    answer, got = _in_the_child(tmp_path, "env", "memory", "list")
    assert got["status"] == 0 and int.from_bytes(answer[6:10], "big", signed=True) == 0, got
    mapping, inherited = json.loads(got["err"])
    want = got["callers"]
    assert want["ONLY_THE_CALLERS"] == "1" and want["BOTH_HAVE"] == "the caller's" and "ONLY_THE_SERVERS" not in want
    assert want["NOT_UTF8"] == "caf\udce9"
    assert mapping == want
    assert inherited == sorted(f"{k}={v}" for k, v in want.items())


@pytest.mark.parametrize("mode", ["interrupt", "odd-code"])
def test_the_served_command_ends_where_it_reports_its_end_whatever_lands_then(tmp_path, mode):
    """After the command, the child reports its exit code and ends. A Ctrl-C the caller passes on at that moment,
    or an exit code past 32 bits, kept it from ending: it ran on as a copy of the server (which removes the
    server's socket on its way out) and printed a traceback on the caller's terminal. Now the interrupt changes
    nothing (the command had ended: its code is reported) and an odd code is reported as a process reports it."""
    answer, got = _in_the_child(tmp_path, mode, "memory", "list")
    assert got["status"] == 0 and got["err"] == "", got
    assert answer[:1] == b"S" and answer[5:6] == b"X", answer
    assert int.from_bytes(answer[6:10], "big", signed=True) == (7 if mode == "odd-code" else 0)


@pytest.mark.parametrize("idle", ["abc", "0", "-5", "nan", "inf", "1e300"])
def test_an_idle_time_that_is_not_seconds_is_said_and_the_read_runs_alone(tmp_path, run_dir, idle):
    env = env_for(run_dir, ACPMEM_READ_SERVER_IDLE=idle)
    root, ids = _vault_with_entries(tmp_path / "v", env)
    r = acp("memory", "--vault", root, "show", ids[0], env=env)
    assert r.returncode == 0 and ids[0] in r.stdout, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Warning: ACPMEM_READ_SERVER_IDLE must be seconds"), r.stderr
    r = acp("memory", "--vault", root, "show", ids[0], "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stderr)["warning"]["message"].startswith("ACPMEM_READ_SERVER_IDLE")
    assert not socket_of(run_dir) and not servers(run_dir) and served(run_dir) == 0


def _watches(pid: int) -> int:
    """The inotify watches process ``pid`` holds (Linux /proc fdinfo)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            n += Path(f"/proc/{pid}/fdinfo/{fd}").read_text().count("inotify wd:")
        except OSError:
            pass
    return n


def test_a_vault_the_server_holds_is_read_anew_after_every_change(tmp_path, run_dir):
    """The server holds a listing of the vault its commands read (``acpmem.search.held``); every kind of change
    before a read — an edit that keeps the size and the mtime, a new entry, a removed one — is in that read."""
    env = env_for(run_dir)
    root, ids = _vault_with_entries(tmp_path / "v", env)
    alone = dict(env, ACPMEM_READ_SERVER="0")
    started(run_dir, env, root)
    pids = wait_for(lambda: servers(run_dir))
    assert len(pids) == 1
    first = next((root / "entries").glob(f"{ids[0]}*.md"))

    def holds():
        """A served read (its child says what it read), then a second for the server to hold it: a vault written
        a moment ago is held only once its files have settled (``catalog.RACY_NS``), at a later read."""
        for _ in range(120):
            assert acp("memory", "--vault", root, "list", env=env).returncode == 0
            if wait_for(lambda: _watches(pids[0]) >= 2, timeout=1.0):
                return True
        return False

    def agree(*line):
        before = served(run_dir)
        a = acp("memory", "--vault", root, *line, env=env)
        b = acp("memory", "--vault", root, *line, env=alone)
        assert served(run_dir) == before + 1, "not served"
        assert (a.returncode, TIMES.sub("T", a.stdout), a.stderr) == (b.returncode, TIMES.sub("T", b.stdout), b.stderr)
        return a.stdout

    assert wait_for(holds), "the server holds no vault"
    st = first.stat()
    first.write_text(first.read_text().replace("staging gateway", "STAGING GATEWAY"))   # same size, same mtime
    os.utime(first, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert first.stat().st_size == st.st_size
    assert "STAGING GATEWAY" in agree("list", "--json")
    assert "STAGING GATEWAY" in agree("show", ids[0])

    assert wait_for(holds), "the server holds the vault again"
    r = acp("memory", "--vault", root, "remember", "Logs are kept for seven days", "--type", "fact", env=alone)
    assert r.returncode == 0, r.stderr
    assert "Logs are kept for seven days" in agree("list", "--json")
    r = acp("memory", "--vault", root, "surface", "--session", "s-new", "--json", env=env)
    assert r.returncode == 0 and "Logs are kept for seven days" in r.stdout, r.stderr

    assert wait_for(holds)
    first.unlink()
    out = agree("list", "--json")
    assert ids[0] not in out and ids[1] in out
    assert "no entry" in agree("show", ids[0]) + acp("memory", "--vault", root, "show", ids[0], env=env).stderr


def test_a_served_read_imports_neither_re_nor_acpmems_commands_in_the_callers_process(tmp_path, run_dir):
    """The client side of a served read is the interpreter, ``acp`` itself and the relay: not ``re`` (which the
    console scripts pip generates import first, 5 ms of a 10 ms start-up), nothing of the commands, nothing the
    relay does not use."""
    env = env_for(run_dir)
    root, _ = _vault_with_entries(tmp_path / "v", env)
    started(run_dir, env, root)
    before = served(run_dir)
    r = acp("memory", "--vault", root, "list", env=dict(env, PYTHONPROFILEIMPORTTIME="1"))   # (-X importtime)
    assert r.returncode == 0 and "Deploys go through" in r.stdout, r.stderr
    assert served(run_dir) == before + 1
    base = subprocess.run([sys.executable, "-c", "pass"], env=dict(env, PYTHONPROFILEIMPORTTIME="1"),
                          capture_output=True, text=True, timeout=120)

    def imported(err: str) -> set[str]:
        return {line.rsplit("|", 1)[1].strip() for line in err.splitlines() if line.startswith("import time:")}

    # (an editable install's finder imports `re` into every start-up, `python -c pass` included: not ours)
    ours = imported(r.stderr) - imported(base.stderr)
    assert "acpmem.cli.relay" in ours
    assert not ours & {"re", "acpmem.cli.fast", "acpmem.vault.reader", "sqlite3"}, sorted(ours)


def test_what_the_client_of_a_served_read_imports_is_the_relay_alone():
    """Whatever the installation imports at start-up (an editable install's finder brings ``re`` and
    ``importlib``), ``acp``'s own imports before it hands a read over are the relay's few: not ``importlib`` with
    ``warnings`` (0.3 ms; only the package's lazy names need it), not ``__future__``, not ``re``."""
    import acpmem

    parent = str(Path(acpmem.__file__).parents[1])
    code = ("import sys\nbefore = set(sys.modules)\nsys.path.insert(0, sys.argv[1])\nimport acpmem.cli.main\n"
            "print(' '.join(sorted(set(sys.modules) - before)))")
    p = subprocess.run([sys.executable, "-S", "-c", code, parent], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    started_by_site = {"os", "os.path", "posixpath", "genericpath", "stat", "_stat", "_collections_abc"}
    assert set(p.stdout.split()) - started_by_site == {"acpmem", "acpmem.cli", "acpmem.cli.relay",
                                                       "acpmem.cli.main"}, p.stdout



def test_the_socket_is_named_for_the_installation_without_importing_anything():
    """The socket's short name (``relay.socket_path``) is the same in every process of one interpreter, package,
    stream settings and protocol, differs when any of them differs (the server checks the whole identity), and
    finding it imports nothing: ``zlib`` (a shared library) took 0.2–0.6 ms of every served read."""
    import acpmem

    parent = str(Path(acpmem.__file__).parents[1])
    code = ("import sys\nsys.path.insert(0, sys.argv[1])\nfrom acpmem.cli import relay\nbefore = set(sys.modules)\n"
            "relay.PROTOCOL = sys.argv[2].encode() or relay.PROTOCOL\n"
            "print(relay.socket_path('/run/x'))\nprint(' '.join(sorted(set(sys.modules) - before)))")

    def name(protocol: str = "", **env: str) -> tuple[str, str]:
        clean = {k: v for k, v in os.environ.items() if k not in ("LANG", "LC_ALL", "PYTHONIOENCODING")}
        p = subprocess.run([sys.executable, "-S", "-c", code, parent, protocol], capture_output=True, text=True,
                           timeout=120, env={**clean, **env})
        assert p.returncode == 0, p.stderr
        path, _, new = p.stdout.partition("\n")
        return path, new.strip()

    first, imported = name()
    assert imported == "" and first.startswith("/run/x/read-") and first.endswith(".sock"), (first, imported)
    assert len(first.rsplit("read-", 1)[1]) == len("01234567.sock")
    assert name() == (first, "")
    others = {name(PYTHONIOENCODING="latin-1")[0], name(LANG="C")[0], name(LANG="C.UTF-8")[0],
              name("acpmem-read-1")[0]}   # a client of another protocol asks another server
    assert first not in others and len(others) == 4

def test_the_server_compiles_the_patterns_its_reads_would_each_compile_again():
    """What a served read would compile on first use (the limits on session ids and citations, the session folder's
    name) is compiled once by the server before it forks: a child compiling it again pays ~0.2 ms a pattern."""
    code = ("import re, sys\nfrom pathlib import Path\nfrom acpmem.cli import readserver\nreadserver.warm()\n"
            "from acpmem.core import limits\nfrom acpmem.vault import discovery\n"
            "before = dict(re._cache)\n"
            "limits.has_control('a\\x01b'); limits.session_problem('s 1'); limits.valid_seq('m12')\n"
            "discovery.session_folder(Path('/tmp'), 'a session/with odd:chars')\n"
            "sys.exit(0 if dict(re._cache) == before else 1)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def _segmenter_in(pid: int) -> bool:
    """Whether the process ``pid`` has loaded jieba (its extension module is mapped)."""
    return "rjieba" in Path(f"/proc/{pid}/maps").read_text()


def test_the_server_loads_the_cjk_segmenter_only_once_a_child_needed_it(tmp_path, run_dir):
    """The server starts without jieba (most vaults never segment a word, and a fork copies the page tables of all
    the server holds); a served read that had to segment — indexing a Chinese entry a person wrote by hand — says
    so, the server loads it for the next ones, and they answer as the command run alone does."""
    from acpmem.core.entryfile import new_entry_text
    from helpers_proc import make_entry

    env = env_for(run_dir)
    alone = {**env, "ACPMEM_READ_SERVER": "0"}
    vault = tmp_path / "v"
    assert run_cli("memory", "init", str(vault), env=alone).returncode == 0
    for title in ("Deploys go through the staging gateway first", "Retries back off to 30 s on HTTP 429"):
        r = run_cli("memory", "--vault", str(vault), "remember", title, "--type", "decision", env=alone)
        assert r.returncode == 0, r.stderr
    started(run_dir, env, vault)
    [pid] = servers(run_dir)
    before = served(run_dir)
    for args in (("list",), ("recall", "staging gateway"), ("surface", "--session", "s1", "--prompt", "retries")):
        assert acp("memory", "--vault", vault, *args, env=env).returncode == 0
    assert served(run_dir) == before + 3
    assert not _segmenter_in(pid), "the server loaded jieba though no read segmented a word"
    (vault / "entries" / "zh0001-notes.md").write_text(new_entry_text(make_entry(
        "zh0001", "部署流程的约定", "- 部署之前先在预发布环境验证网关的重试配置。")))
    got = acp("memory", "--vault", vault, "recall", "网关", "--json", env=env)
    assert got.returncode == 0 and served(run_dir) == before + 4, got.stderr
    assert wait_for(lambda: _segmenter_in(pid)), "the server did not load jieba after a child needed it"
    again = acp("memory", "--vault", vault, "recall", "部署", "--json", env=env)
    assert served(run_dir) == before + 5
    alone_said = acp("memory", "--vault", vault, "recall", "部署", "--json", env=alone)
    # the same answer (each read marks the entries read: the times are the moment of each)
    assert (again.returncode, TIMES.sub("T", again.stdout)) == (0, TIMES.sub("T", alone_said.stdout))
    assert "zh0001" in again.stdout


INSTALLATION_PROBE = """
import os, sys
from pathlib import Path
from acpmem.cli import readserver
if sys.argv[2] == "stat":   # no inotify to be had: the server stats every file it loaded
    from acpmem.infra import inotify
    def refused(*a, **k):
        raise OSError(24, "too many open files")
    inotify.Inotify.__init__ = refused
readserver.warm()
inst = readserver.Installation()
pkg = Path(readserver.__file__).parent.parent
if not str(pkg).startswith(sys.argv[3]):   # never the package the tests run
    sys.exit(f"acpmem was imported from {pkg}, not from the copy")
said = [inst.ino is not None, inst.changed()]
render = pkg / "core" / "render.py"
render.read_text(); (pkg / "search").iterdir().__next__()   # reading changes nothing
said.append(inst.changed())
what = sys.argv[1]
if what == "utime":
    st = render.stat(); os.utime(render, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
elif what == "write":
    with open(render, "a") as f:
        f.write("# changed\\n")
elif what == "create":
    (pkg / "search" / "new_module.py").write_text("")
elif what == "remove":
    (pkg / "search" / "held.py").unlink()
said += [inst.changed(), inst.changed()]
inst.close()
print(said)
"""


@pytest.mark.parametrize("how", ["inotify", "stat"])
def test_the_server_sees_any_change_to_the_package_it_loaded(tmp_path, how):
    """Whether a module the server loaded changed since it started (``readserver.Installation``): the kernel's
    reports on the package's folders, or, without inotify, a ``stat`` of every file — the same answer either way,
    for a changed time, a write, a new file and a removed one, and none for reading the files; once stale, stale."""
    import acpmem

    for what in ("utime", "write", "create", "remove"):
        copy = tmp_path / what / "site"
        shutil.copytree(Path(acpmem.__file__).parent, copy / "acpmem", ignore=shutil.ignore_patterns("__pycache__"))
        p = subprocess.run([sys.executable, "-c", INSTALLATION_PROBE, what, how, str(copy)], capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1"),
                           cwd=tmp_path, timeout=120)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == str([how == "inotify", False, False, True, True]), (what, p.stdout)
