"""``tests/support/launcher.py`` holds to what its tests rely on: a command run through its ``acp`` is a process of
its own that behaves as the installed ``acp`` — same output, exit code, folder, environment, umask and standard
input — a signal sent to it reaches the command, a script killed takes its command with it, and a caller whose
streams would be set up otherwise, or whose server went away before it had the whole request, gets the installed
``acp`` itself."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import launcher
from helpers_proc import wait_until

REAL = str(Path(sys.executable).parent / "acp")


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except OSError:
                pass
    return out


def _both(*args: str, **kw) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    return tuple(subprocess.run([exe, *args], capture_output=True, text=True, **kw)
                 for exe in (launcher.acp(), REAL))


def test_a_command_through_the_launcher_says_and_exits_as_the_installed_acp(tmp_path):
    vault = tmp_path / "v"
    made = subprocess.run([launcher.acp(), "memory", "init", str(vault)], capture_output=True, text=True)
    assert made.returncode == 0 and (vault / "acpmem.toml").exists(), made.stderr
    # standard input, the folder and the environment are the caller's
    said = subprocess.run([launcher.acp(), "memory", "remember", "-", "--type", "fact", "--importance", "4"],
                          input="Deploys go out on Tuesdays.\n", capture_output=True, text=True, cwd=vault)
    assert said.returncode == 0 and said.stdout.startswith("Remembered #"), said.stderr
    for args, kw in ((("memory", "list", "--json"), {"env": dict(os.environ, ACPMEM_VAULT=str(vault))}),
                     (("memory", "list"), {"cwd": vault}),
                     (("memory", "nosuch"), {}),
                     (("memory", "--vault", str(tmp_path / "none"), "list"), {}),
                     (("memory", "remember", "--importance", "99", "x"), {"cwd": vault})):
        ours, real = _both(*args, **kw)
        assert (ours.returncode, ours.stdout, ours.stderr) == (real.returncode, real.stdout, real.stderr), args
    assert [e["title"] for e in json.loads(_both("memory", "list", "--json", cwd=vault)[0].stdout)["entries"]] == \
        ["Deploys go out on Tuesdays."]
    # the umask is the caller's: what a write creates has the modes the installed acp gives it, under either mask
    modes = {}
    for mask in ("077", "022"):
        for who, exe in (("ours", launcher.acp()), ("real", REAL)):
            where = tmp_path / f"{who}{mask}"
            subprocess.run(["sh", "-c", f'umask {mask} && "{exe}" memory init "{where}" && cd "{where}" && '
                                        f'"{exe}" memory remember "A fact written under umask {mask}." --type fact '
                                        f'--importance 3'], check=True, capture_output=True)
            modes[who, mask] = sorted((p.name if p.name.startswith(".") else "an entry", p.stat().st_mode & 0o777)
                                      for p in (where / "entries").iterdir())
    assert modes["ours", "077"] == modes["real", "077"] and modes["ours", "022"] == modes["real", "022"]
    assert modes["real", "077"] != modes["real", "022"]   # the mask shows in what is written


def test_a_signal_reaches_the_command_and_a_killed_script_takes_it_with_it(vault):
    launcher.bin_dir()
    server = launcher._STATE["proc"].pid
    before = set(_children(server))
    for sig, code in ((signal.SIGTERM, -signal.SIGTERM), (signal.SIGKILL, -signal.SIGKILL)):
        p = subprocess.Popen([launcher.acp(), "memory", "--vault", str(vault.root), "serve"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()
            + b"\n")
        p.stdin.flush()
        assert json.loads(p.stdout.readline())["id"] == 1     # the command runs: the server answered
        running = set(_children(server)) - before
        assert len(running) == 1
        (pid,) = running
        assert os.getpgid(pid) == pid   # a group of its own (off a terminal): killed with what it started
        p.send_signal(sig)
        assert p.wait(timeout=60) == code
        wait_until(lambda: not set(_children(server)) & running, timeout=60)   # the command ended too
        p.stdin.close()
        p.stdout.close()


def test_a_caller_whose_streams_differ_gets_the_installed_acp(vault):
    p = subprocess.Popen([launcher.acp(), "memory", "--vault", str(vault.root), "serve"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         env=dict(os.environ, PYTHONIOENCODING="latin-1"))
    try:
        deadline = time.monotonic() + 60
        while True:   # the script replaced itself by the installed one (its command line names it)
            cmd = Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0")
            if REAL.encode() in cmd or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert REAL.encode() in cmd, cmd
    finally:
        p.stdin.close()
        assert p.wait(timeout=60) == 0
        p.stdout.close()


def test_a_server_gone_before_it_has_the_whole_request_gets_the_installed_acp(tmp_path, vault):
    """A request larger than the socket holds is sent in two parts; a server that closes the connection before the
    second (it ended, or could not read it) never started the command, so the script runs the installed ``acp``,
    which says what it would have said — never a traceback (an empty second send once raised BrokenPipeError after
    the command had run)."""
    import socket
    import threading

    sock = tmp_path / "s"
    lis = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lis.bind(str(sock))
    lis.listen(1)

    def gone() -> None:   # reads the first bytes, then leaves
        conn, _ = lis.accept()
        conn.recv(16)
        conn.close()
    t = threading.Thread(target=gone)
    t.start()
    script = tmp_path / "acp"
    script.write_text(launcher.SCRIPT.format(python=sys.executable, sock=str(sock), real=REAL, prog="acp",
                                             streams={k: os.environ.get(k) for k in launcher.SAME_VARS},
                                             forwarded=launcher.FORWARDED))
    script.chmod(0o755)
    # an environment larger than the socket's send buffer (wmem_default, ~200 KB), within exec's limit (ARG_MAX,
    # 2 MB here; 128 KB a string)
    buffer = int(Path("/proc/sys/net/core/wmem_default").read_text())
    fill = max(1_000_000, 3 * buffer)
    if fill > os.sysconf("SC_ARG_MAX") // 2:
        pytest.skip(f"this kernel's socket buffer ({buffer} bytes) holds more than a process's environment may")
    env = dict(os.environ, **{f"ACPMEM_TEST_FILL{i}": "x" * 100_000 for i in range(fill // 100_000 + 1)})
    args = ("memory", "--vault", str(vault.root), "list")
    ours = subprocess.run([str(script), *args], capture_output=True, text=True, env=env, timeout=60)
    t.join(timeout=60)
    lis.close()
    real = subprocess.run([REAL, *args], capture_output=True, text=True, env=env, timeout=60)
    assert (ours.returncode, ours.stdout, ours.stderr) == (real.returncode, real.stdout, real.stderr)
    assert "Traceback" not in ours.stderr and real.returncode == 0
