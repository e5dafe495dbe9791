"""A command's process collects garbage less often (``acpmem.cli.startup.collect_less``): the console scripts,
``python -m acpmem`` and the read server (whose forked readers inherit it) raise the collector's first threshold
before the modules load; a program that imports acpmem keeps its own. Real processes: the process's start is the point.

What the collector does is seen through a ``sitecustomize`` module on ``PYTHONPATH``, imported at start-up before
acpmem: a collector callback that writes a line per collection, and a fork handler that writes the threshold a
forked reader starts with.

And ``pathlib`` is loaded without ``urllib.parse`` (``acpmem.cli.startup.lighter_pathlib``): seen in an interpreter
started with ``-I -S``, so that no ``.pth`` file (an editable install's finder) has loaded pathlib before the script
runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acpmem.cli.startup import FIRST_GENERATION

pytestmark = pytest.mark.real_process("the process's own start is the point")

BIN = Path(sys.executable).parent

SITE = """
import gc, os, sys
_path = os.environ["MARK"]
def _note(phase, info, _open=open, _path=_path):
    if phase == "stop":   # a collection, and whether acpmem's command line had begun to load
        with _open(_path, "a") as f:
            f.write(f"collect {os.getpid()} {int('acpmem.cli.main' in sys.modules)}\\n")
gc.callbacks.append(_note)
os.register_at_fork(after_in_child=lambda: open(_path, "a").write(f"fork {os.getpid()} {gc.get_threshold()[0]}\\n"))
"""


def _env(tmp_path: Path, **extra) -> dict:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITE)
    env = {k: v for k, v in os.environ.items() if k not in ("ACPMEM_READ_SERVER", "PYTHONPATH")}
    env.update(MARK=str(tmp_path / "mark"), PYTHONPATH=str(site), ACPMEM_READ_SERVER="0", ACPMEM_USER_VAULT="none")
    env.update(extra)
    return env


def _lines(tmp_path: Path) -> list[list[str]]:
    mark = tmp_path / "mark"
    out = [line.split() for line in mark.read_text().splitlines()] if mark.exists() else []
    mark.unlink(missing_ok=True)
    return out


@pytest.fixture
def vault(tmp_path):
    root = tmp_path / "v"
    p = subprocess.run([str(BIN / "acp"), "memory", "init", "--example", str(root)], capture_output=True, text=True,
                       env={**os.environ, "ACPMEM_READ_SERVER": "0"}, timeout=120)
    assert p.returncode == 0, p.stderr
    return root


def test_every_entry_point_collects_rarely_while_its_modules_load(tmp_path, vault):
    env = _env(tmp_path)
    runs = {"acp": [str(BIN / "acp"), "memory"], "acpmem": [str(BIN / "acpmem")],
            "python -m acpmem": [sys.executable, "-m", "acpmem"]}
    for name, cmd in runs.items():
        _lines(tmp_path)
        p = subprocess.run([*cmd, "--vault", str(vault), "list", "--json", "--all"], capture_output=True, text=True,
                           env=env, timeout=120)
        assert p.returncode == 0 and '"entries"' in p.stdout, (name, p.stderr)
        # raised before acpmem's modules load: not once while they load and the command runs (at the default
        # threshold, the control below, several times). `python -m` may collect before that, in its own machinery.
        late = [x for x in _lines(tmp_path) if x[0] == "collect" and x[2] == "1"]
        assert late == [], (name, late)
    # the control: the same command through a program that imports acpmem and keeps the default collector
    control = subprocess.run([sys.executable, "-c", "import sys\nfrom acpmem.cli.main import acp_main\n"
                              "sys.argv[0] = 'acp'\nsys.exit(acp_main())", "memory", "--vault", str(vault),
                              "list", "--json", "--all"], capture_output=True, text=True, env=env, timeout=120)
    assert control.returncode == 0, control.stderr
    assert len([x for x in _lines(tmp_path) if x[0] == "collect" and x[2] == "1"]) >= 3


def test_importing_acpmem_leaves_the_programs_collector_alone(tmp_path):
    code = ("import gc\nbefore = gc.get_threshold()\n"
            "import acpmem, acpmem.cli, acpmem.cli.main, acpmem.cli.readserver\nfrom acpmem import VaultReader\n"
            "assert gc.get_threshold() == before, (before, gc.get_threshold())\n"
            "import acpmem.cli.startup as c\nc.collect_less()\nassert gc.get_threshold()[0] == c.FIRST_GENERATION\n"
            "gc.set_threshold(90000)\nc.collect_less()\nassert gc.get_threshold()[0] == 90000   # never lowered\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_the_read_servers_readers_start_with_the_raised_threshold(tmp_path, vault):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env = _env(tmp_path, ACPMEM_READ_SERVER="1", XDG_RUNTIME_DIR=str(run), ACPMEM_READ_SERVER_IDLE="120")
    cmd = [str(BIN / "acp"), "memory", "--vault", str(vault), "list"]
    try:
        first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        assert first.returncode == 0, first.stderr
        forks: list[list[str]] = []
        end = time.monotonic() + 60
        while not forks and time.monotonic() < end:   # the first read started the server; served reads fork
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
            assert p.returncode == 0 and p.stdout == first.stdout, p.stderr
            forks = [x for x in _lines(tmp_path) if x[0] == "fork"]
            if not forks:
                time.sleep(0.05)
        assert forks, "no read was served"
        assert all(int(x[2]) == FIRST_GENERATION for x in forks), forks
    finally:
        for d in os.listdir("/proc"):
            try:
                argv = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if b"acpmem.cli.readserver" in argv and str(run).encode() in argv:
                os.kill(int(d), 9)


ROOT = Path(__file__).resolve().parent.parent
SITE_PACKAGES = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p))


def _clean(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``code`` in an interpreter that loaded nothing but the standard library's start-up (``-I -S``: no site, no .pth file,
    no PYTHON* variable), with the checkout and the installed packages on its path."""
    pre = f"import sys\nsys.path[:0] = [{str(ROOT)!r}, {SITE_PACKAGES!r}]\n"
    return subprocess.run([sys.executable, "-I", "-S", "-c", pre + code, *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_pathlib_loads_without_urllib_and_as_uri_still_works():
    code = (
        "from acpmem.cli.startup import lighter_pathlib\n"
        "assert 'pathlib' not in sys.modules and 'urllib.parse' not in sys.modules\n"
        "lighter_pathlib()\n"
        "assert 'pathlib' in sys.modules\n"
        "assert 'urllib.parse' not in sys.modules and 'ipaddress' not in sys.modules, sorted(sys.modules)\n"
        "import pathlib\n"
        "assert pathlib.PurePosixPath('/a b/\u00fc%').as_uri() == 'file:///a%20b/%C3%BC%25'\n"
        "import urllib.parse\n"   # the real module now, for everyone
        "assert urllib.parse.__file__ and urllib.parse.urlsplit('http://h/p').netloc == 'h'\n"
        "assert sys.modules['urllib.parse'] is urllib.parse and urllib.parse.quote_from_bytes(b'a b') == 'a%20b'\n"
        "lighter_pathlib()\n"   # loaded already: nothing more happens
        "assert sys.modules['urllib.parse'] is urllib.parse\n")
    p = _clean(code)
    assert p.returncode == 0, p.stderr
    # urllib.parse loaded first (as a program that imports acpmem may have it): left as it is
    p = _clean("import urllib.parse as real\nfrom acpmem.cli.startup import lighter_pathlib\nlighter_pathlib()\n"
               "import pathlib\nassert sys.modules['urllib.parse'] is real\n"
               # Python 3.11 and 3.12 take the function at import (3.13 imports it where as_uri needs it)
               "assert getattr(pathlib, 'urlquote_from_bytes', real.quote_from_bytes) is real.quote_from_bytes\n")
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("script", ["acp", "acpmem"])
def test_the_console_scripts_per_turn_reads_never_load_urllib(tmp_path, vault, script):
    env = {k: v for k, v in os.environ.items() if k != "ACPMEM_READ_SERVER"}
    env.update(ACPMEM_READ_SERVER="0", ACPMEM_USER_VAULT="none")
    listed = subprocess.run([str(BIN / "acp"), "memory", "--vault", str(vault), "list", "--json"],
                            capture_output=True, text=True, env=env, timeout=120)
    ident = json.loads(listed.stdout)["entries"][0]["id"]
    group = ["memory"] if script == "acp" else []
    event = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s-hook", "cwd": str(vault),
                        "prompt": "which branches do staging deploys run from"})
    reads = [(["show", ident], ""), (["list", "--format", "prompt", "--session", "s-imports"], ""),
             (["surface", "--session", "s-imports", "--prompt", "how do we deploy"], ""),
             (["recall", "deploy"], ""), (["hook", "claude-code"], event)]
    run = f"sys.argv = [{script!r}] + sys.argv[1:]\nexec(compile(open({str(ROOT / 'scripts' / script)!r}).read(), " \
          f"{script!r}, 'exec'))\n"
    for argv, stdin in reads:
        p = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", "-c",
                            f"import sys\nsys.path[:0] = [{str(ROOT)!r}, {SITE_PACKAGES!r}]\n" + run,
                            *group, "--vault", str(vault), *argv], input=stdin, capture_output=True, text=True,
                           env=env, timeout=120)
        loaded = {line.rsplit("|", 1)[1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")}
        assert p.returncode == 0 and p.stdout.strip(), (argv, p.stderr[-2000:])
        assert "pathlib" in loaded and "acpmem.cli.main" in loaded, argv   # what was observed is the command
        assert not loaded & {"urllib.parse", "ipaddress"}, argv
        if argv[0] in ("show", "list"):   # nor what only the read server's holder needs (inotify, with struct)
            assert "acpmem.search.held" in loaded and "acpmem.infra.inotify" not in loaded, argv
        if argv[0] == "show":             # nor a session's files
            assert "acpmem.read.sessions" not in loaded, argv


def test_a_write_scans_with_detect_secrets_but_loads_neither_requests_nor_http(tmp_path, vault):
    """``remember`` scans with detect-secrets' plugins (their ``verify``, which sends a secret away to check it, is
    never called) and checks duplicates without an embeddings endpoint: neither ``requests`` nor ``http.client`` is
    imported, and a secret only detect-secrets knows is still refused."""
    env = {k: v for k, v in os.environ.items() if k != "ACPMEM_READ_SERVER"}
    env.update(ACPMEM_READ_SERVER="0", ACPMEM_USER_VAULT="none")
    run = f"sys.argv = ['acp'] + sys.argv[1:]\nexec(compile(open({str(ROOT / 'scripts' / 'acp')!r}).read(), " \
          "'acp', 'exec'))\n"
    twilio = "SK" + "0123456789abcdef" * 2
    for text, code in ((f"The twilio api key {twilio} is in the env.", 1), ("Deploys go out on Tuesdays.", 0)):
        p = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", "-c",
                            f"import sys\nsys.path[:0] = [{str(ROOT)!r}, {SITE_PACKAGES!r}]\n" + run,
                            "memory", "--vault", str(vault), "remember", text, "--type", "fact", "--json"],
                           capture_output=True, text=True, env=env, timeout=120)
        loaded = {line.rsplit("|", 1)[1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")}
        assert p.returncode == code, p.stderr[-2000:]
        assert "detect_secrets.core.plugins.util" in loaded and "acpmem.write.remember" in loaded
        assert not loaded & {"requests", "http.client", "urllib3"}, sorted(loaded & {"requests", "http.client"})
        if code:   # found by detect-secrets alone (the regex layer has no twilio rule): refused, nothing written
            said = json.loads(p.stderr.splitlines()[-1])["error"]   # the last line, after -X importtime's
            assert said["code"] == "secret_refused" and "twilio-key" in said["message"], said
        else:
            assert "Tuesdays" in (vault / json.loads(p.stdout)["path"]).read_text()
