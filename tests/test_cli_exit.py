"""How a read's process ends (``acpmem.cli.main.leave``): at once, without the interpreter's teardown, with its whole
output written and its exit code; the usual way when something is left for the teardown to do — an exit handler, a
thread still running — and for every command that is not a read. Real processes: the process's end is the point.

What the teardown does is seen through a ``sitecustomize`` module on ``PYTHONPATH`` (the interpreter imports it at
start-up, before acpmem): an object whose finaliser writes a file only the teardown calls, an exit handler, a thread."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_process("how a process ends is the point")

ACP = str(Path(sys.executable).parent / "acp")

FINALISER = """
import os
class _Mark:
    def __del__(self, _open=open, _path=os.environ["MARK"]):   # what it needs, kept: the teardown clears modules
        with _open(_path, "a") as f:
            f.write("teardown\\n")
_mark = _Mark()
"""
EXIT_HANDLER = """
import atexit, os
atexit.register(lambda: open(os.environ["MARK"], "a").write("exit handler\\n"))
"""
THREAD = """
import os, threading, time
def _late():
    time.sleep(0.3)
    open(os.environ["MARK"], "a").write("thread\\n")
threading.Thread(target=_late).start()
"""


def _run(tmp_path: Path, site: str | None, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    mark = tmp_path / "mark"
    mark.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("ACPMEM_READ_SERVER", "PYTHONPATH")}
    env.update(MARK=str(mark), ACPMEM_READ_SERVER="0")
    if site is not None:
        d = tmp_path / "site"
        d.mkdir(exist_ok=True)
        (d / "sitecustomize.py").write_text(site)
        env["PYTHONPATH"] = str(d)
    p = subprocess.run([ACP, "memory", *args], capture_output=True, text=True, env=env, timeout=120)
    return p, mark.read_text() if mark.exists() else ""


@pytest.fixture
def vault(tmp_path):
    root = tmp_path / "v"
    p = subprocess.run([ACP, "memory", "init", "--example", str(root)], capture_output=True, text=True,
                       env={**os.environ, "ACPMEM_READ_SERVER": "0"}, timeout=120)
    assert p.returncode == 0, p.stderr
    return root


def test_a_read_ends_without_the_teardown_and_with_all_its_output(tmp_path, vault):
    v = ("--vault", str(vault))
    # the whole listing, past a pipe's buffer, and the same as a process that ends the usual way would print
    big, said = _run(tmp_path, FINALISER, "list", "--json", "--all", *v)
    assert big.returncode == 0, big.stderr
    assert said == "", "a read ran the interpreter's teardown"
    listed = json.loads(big.stdout)
    assert len(big.stdout) > 1000 and listed["entries"]
    first = listed["entries"][0]["id"]
    shown, said = _run(tmp_path, FINALISER, "show", first, *v)
    assert (shown.returncode, said) == (0, "") and first in shown.stdout
    # an error: its one line and exit code
    missing, said = _run(tmp_path, FINALISER, "show", "zzzzzz", *v)
    assert (missing.returncode, said, missing.stdout) == (1, "", "")
    assert missing.stderr.startswith("Error: no entry with id 'zzzzzz'") and missing.stderr.count("\n") == 1
    # a usage error goes through the full parser and ends the same way
    usage, said = _run(tmp_path, FINALISER, "recall", "deploy", "--limit", "abc", *v)
    assert (usage.returncode, said) == (2, "") and "Invalid value for '--limit'" in usage.stderr


def test_a_read_with_an_exit_handler_or_a_running_thread_ends_the_usual_way(tmp_path, vault):
    v = ("--vault", str(vault))
    for site, want in ((EXIT_HANDLER, "exit handler\n"), (THREAD, "thread\n"),
                       (FINALISER + EXIT_HANDLER, "exit handler\nteardown\n")):
        p, said = _run(tmp_path, site, "list", *v)
        assert p.returncode == 0 and p.stdout, p.stderr
        assert said == want, (site, said)


def test_a_command_that_is_not_a_read_ends_the_usual_way(tmp_path, vault):
    p, said = _run(tmp_path, FINALISER, "remember", "A marker for the ending of a write.", "--type", "fact",
                   "--vault", str(vault))
    assert p.returncode == 0, p.stderr
    assert said == "teardown\n"
    p, said = _run(tmp_path, FINALISER, "--version")
    assert said == "teardown\n"
