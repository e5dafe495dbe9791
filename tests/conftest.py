"""Shared fixtures: an isolated git identity, a pinned clock, fresh vaults made from the template, and the fake
OpenAI-compatible server (a real HTTP server on 127.0.0.1)."""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

# the helpers shared by several test files live in tests/support/ (``from openai_server import fake_openai``)
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "support"))

import rewrite_once  # noqa: E402
from openai_server import openai_server_fixture  # noqa: E402

PINNED = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)
REPO = Path(__file__).resolve().parents[1]

openai_server = pytest.fixture(openai_server_fixture)


# A test run started in the background of a non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored, and so
# would every acp it starts: the Ctrl-C tests would see their SIGINT ignored. Python's own handler again, so the
# processes the tests start get the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The read server (``acpmem.cli.relay``) is off unless asked for; a person's setting must not turn it on for the
# processes the tests start (a server outlives its command). Its own tests turn it on, each in a folder of its own.
os.environ.pop("ACPMEM_READ_SERVER", None)

@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    """Every test gets its own HOME (so the default user vault, ~/.acp-memory, is a fresh folder that does not
    exist — the real one is never read or written) and git identity, and no ambient vault or model settings."""
    home = tmp_path_factory.mktemp("home")
    if not _TEMPLATE_BASE:
        _TEMPLATE_BASE.append(tmp_path_factory.getbasetemp())   # where ``fresh_vault`` keeps its templates
    cfg = home / ".gitconfig"
    cfg.write_text("[user]\n\tname = Test User\n\temail = test@example.invalid\n[init]\n\tdefaultBranch = main\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("ACPMEM_VAULT", "ACPMEM_USER_VAULT", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "ACPMEM_SESSION", "EDITOR",
                "XDG_CONFIG_HOME", "XDG_CACHE_HOME",
                "VISUAL"):
        monkeypatch.delenv(var, raising=False)
    _seed_dictionary(home, tmp_path_factory)
    yield


_DICTIONARY: list[Path] = []


def _seed_dictionary(home: Path, tmp_path_factory) -> None:
    """The dictionary's SQLite copy (``acpmem.search.cedict.store``) in the fresh HOME's cache folder, as on a machine
    where acpmem ran before: built once a test process and linked (it is only ever replaced whole, never written in
    place), instead of ~0.14 s to build it in every test that recalls across scripts, consolidates or imports. Building
    it, and a cache that cannot be written, are ``tests/test_cedict.py``'s, in cache folders of their own."""
    from acpmem.search import cedict

    if not _DICTIONARY:
        built = tmp_path_factory.getbasetemp() / "dictionary.sqlite"
        cedict._build(built)
        _DICTIONARY.append(built)
    cache = home / ".cache" / "acpmem"
    cache.mkdir(parents=True)
    try:
        os.link(_DICTIONARY[0], cache / cedict.cache_path().name)
    except OSError:   # another file system: the test builds its own, as before
        pass


@pytest.fixture
def clock():
    return lambda: PINNED


def fresh_vault(where: Path, clock, *, example: bool = False, seed: int = 7, workspace: bool = False):
    """A vault as ``init_vault(where, example=…, clock=clock, rng=random.Random(seed))`` leaves it — the same files,
    repository, index and state, and an rng in the same state — copied from one this test process made with
    ``init_vault`` the first time (``cp -a``: ~2 ms, against 11 ms for ``init`` and 26 ms with the example entries,
    each five git processes). Only the history differs from a vault ``init`` makes then: its first commit (the
    random vault id in it, its time) is the template's. With ``workspace``, ``where`` is a git workspace (``git
    init``) and the vault its ``.acp-memory``, made by ``init_vault(None, cwd=where)`` (the workspace's
    ``.git/info/exclude`` naming it); the vault is returned. ``init`` itself is ``test_vault.py``'s and the CLI
    tests'."""
    from acpmem.vault.create import init_vault
    from acpmem.vault.writer import Vault
    from helpers_proc import copy_tree

    key = (example, seed, workspace, clock())
    made = _TEMPLATES.get(key)
    if made is None:   # (in a test: the templates go in pytest's temporary folder, set by ``_isolated_env``)
        base = _TEMPLATE_BASE[0] / f"template-{len(_TEMPLATES)}"
        if workspace:
            base.mkdir(parents=True)
            subprocess.run(["git", "init", "-q", str(base)], check=True)
            v = init_vault(None, cwd=base, example=example, clock=clock, rng=random.Random(seed))
        else:
            v = init_vault(base, example=example, clock=clock, rng=random.Random(seed))
        made = _TEMPLATES[key] = (base, v.root.relative_to(base) if workspace else Path("."), v.rng.getstate())
        v.close()
    base, rel, state = made
    where.parent.mkdir(parents=True, exist_ok=True)
    copy_tree(base, where)
    rng = random.Random()
    rng.setstate(state)
    v = Vault(where / rel, clock=clock, rng=rng)
    v.load()   # the caches keyed by a file's inode and ctime (the settings, the catalog) fresh, as init leaves them
    return v


_TEMPLATES: dict[tuple, tuple[Path, Path, tuple]] = {}
_TEMPLATE_BASE: list[Path] = []


@pytest.fixture
def vault(tmp_path, clock):
    v = fresh_vault(tmp_path / "vault", clock)
    yield v
    v.close()


@pytest.fixture
def example_vault(tmp_path, clock):
    v = fresh_vault(tmp_path / "vault", clock, example=True)
    yield v
    v.close()


def run_cli(*args: str, cwd: Path | None = None, input: str | None = None, env: dict | None = None,
            prog: str = "acp", process: bool = False) -> subprocess.CompletedProcess:
    """Run one command line and capture its output, as a ``CompletedProcess``: in this process through
    ``acpmem.cli.main.main`` (what the console scripts call), or with ``process=True`` as the real console script in a
    separate process — for the tests where the process is the point (``real_process``)."""
    if process:
        return run_cli_process(*args, cwd=cwd, input=input, env=env, prog=prog)
    return run_cli_inprocess(*args, cwd=cwd, input=input, env=env, prog=prog)


def run_cli_process(*args: str, cwd: Path | None = None, input: str | None = None, env: dict | None = None,
                    prog: str = "acp") -> subprocess.CompletedProcess:
    """The real console script, as a separate process."""
    exe = Path(sys.executable).parent / prog
    cmd = [str(exe), *args] if exe.exists() else [sys.executable, "-m", "acpmem", *(args[1:] if args[:1] == ("memory",) else args)]
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, text=True, env=full_env, timeout=120)


def run_cli_inprocess(*args: str, cwd: Path | None = None, input: str | None = None, env: dict | None = None,
                      prog: str = "acp") -> subprocess.CompletedProcess:
    """``main(argv, prog)`` in this process, with what a process of its own would have: ``env`` over the current
    environment, ``cwd`` as the current folder, ``input`` (or nothing) on a standard input that is not a terminal,
    standard output and error as bytes in the interpreter's encoding (``PYTHONIOENCODING`` honoured), the exit code of
    ``sys.exit`` or of an uncaught exception (its traceback on standard error). All of it is restored afterwards."""
    import io
    import traceback

    from acpmem.cli.main import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_std = sys.stdin, sys.stdout, sys.stderr
    os.environ.update(env or {})
    encoding, _, errors = (os.environ.get("PYTHONIOENCODING") or "utf-8").partition(":")
    out, err = io.BytesIO(), io.BytesIO()
    streams = (io.TextIOWrapper(io.BytesIO((input or "").encode("utf-8")), encoding="utf-8"),
               io.TextIOWrapper(out, encoding=encoding or "utf-8", errors=errors or "strict", write_through=True),
               io.TextIOWrapper(err, encoding=encoding or "utf-8", errors="backslashreplace", write_through=True))
    sys.stdin, sys.stdout, sys.stderr = streams
    try:
        if cwd is not None:
            os.chdir(cwd)
        try:
            code = main([os.fspath(a) for a in args], prog)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                sys.stderr.write(f"{exc.code}\n")
        except KeyboardInterrupt:
            traceback.print_exc()
            code = 130
        except Exception:
            traceback.print_exc()
            code = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_std
        for stream in streams:    # detached: closing a wrapper must not close the bytes we read
            try:
                stream.flush()
            except (ValueError, OSError):
                pass
            stream.detach()
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)

    def text(data: bytes) -> str:   # what ``text=True`` makes of a pipe: UTF-8, universal newlines
        return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()

    return subprocess.CompletedProcess([prog, *map(os.fspath, args)], code, text(out.getvalue()), text(err.getvalue()))


@pytest.fixture
def cli(request):
    """``run_cli``: in this process, or as a real process for a test marked ``real_process``."""
    if request.node.get_closest_marker("real_process") is not None:
        return run_cli_process
    return run_cli


@pytest.hookimpl(optionalhook=True)   # pytest-xdist's hook: -p no:xdist runs without it
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: two workers per core (at most four more than the cores), not one. Much of the suite waits on
    real processes — git, the hosts, killed writes — and a worker waiting leaves its core idle; and on a machine
    another job keeps busy, the scheduler shares the cores by runnable process, so more workers get the suite a
    larger share. Measured on 2 cores with both held by llama-server: 10 min 30 s on 2 workers, 8 min 26 s on 4
    (``docs/performance.md``). ``PYTEST_XDIST_AUTO_NUM_WORKERS`` or ``-n N`` still decide where given."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or config.option.numprocesses != "auto":
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return min(2 * cores, cores + 4)


def pytest_configure(config):
    config.addinivalue_line("markers", "real_process(why): its command lines run as real console-script processes "
                                       "(the process itself is the point: a kill, a signal, concurrency, a worker)")
    _temp_in_memory(config)
    _node_compile_cache(config)
    config._acpmem_rewritten = rewrite_once.prepare(config)   # the test modules' asserts rewritten once a run
    rewrite_once.point_worker(config)


def pytest_unconfigure(config):
    rewrite_once.finish(getattr(config, "_acpmem_rewritten", None))
    made = getattr(config, "_acpmem_node_cache", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)


def _node_compile_cache(config) -> None:
    """One V8 compile cache (``NODE_COMPILE_CACHE``, Node >= 22.1) for every node process of this run, made here
    before the workers start so that they share it, removed at the end: pi (0.8 s of CPU a start without it) compiles
    its modules once a run instead of once a process (``tests/test_pi_plugin.py``: 28.6 → 24.3 s of CPU). What the
    hosts do is unchanged; a cache node cannot use it recompiles. Where one is set already, that one."""
    if hasattr(config, "workerinput") or os.environ.get("NODE_COMPILE_CACHE"):
        return
    import tempfile

    config._acpmem_node_cache = tempfile.mkdtemp(prefix="acpmem-tests-node-cache-")
    os.environ["NODE_COMPILE_CACHE"] = config._acpmem_node_cache


def _temp_in_memory(config) -> None:
    """pytest's temporary folders (``tmp_path``: numbered, the last run's kept, ``tmp_path_retention_count``) on a RAM
    file system where there is one with room to spare (``/dev/shm`` with 4 GiB free): the suite makes and removes
    thousands of vaults and fsyncs their files, and on a disk mounted with ``discard`` that costs it more than the
    commands run in them (three of its files: 17% less CPU time and half the wall time on ``/dev/shm``). Where there
    is none, or ``--basetemp`` or ``PYTEST_DEBUG_TEMPROOT`` says where, pytest's usual place."""
    shm = "/dev/shm"
    if config.option.basetemp or os.environ.get("PYTEST_DEBUG_TEMPROOT") or not os.path.isdir(shm) \
            or not os.access(shm, os.W_OK | os.X_OK):
        return
    st = os.statvfs(shm)
    if st.f_bavail * st.f_frsize >= 4 << 30:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = shm


_HELPERS = ("from acpmem.write.worker import", "from acpmem.search.watch import", "from acpmem.read.embedding import")
_SERVER = b"acpmem.cli.readserver"


@pytest.fixture(autouse=True)
def _end_helpers(tmp_path_factory):
    """A test that starts a vault's detached helper (the extraction worker, the watcher, the embedder) or a read server
    ends it: after the test, every helper started on a folder of this test run (a server: its socket in one) is
    stopped, and the ones this process started are collected."""
    yield
    base = str(tmp_path_factory.getbasetemp())
    me = os.getuid()
    stopped = []
    mark = base.encode("utf-8", "surrogateescape")
    for name in os.listdir("/proc"):    # after every test: one read a process, the owner asked only of a match
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                raw = f.read()
            if mark not in raw or os.stat(f"/proc/{name}").st_uid != me:
                continue
        except OSError:
            continue
        argv = raw.split(b"\0")
        if len(argv) >= 4 and argv[1:3] == [b"-P", b"-c"] or len(argv) >= 5 and argv[2:4] == [b"-m", _SERVER]:
            code = argv[3].decode("utf-8", "replace")
            if code.startswith(_HELPERS) and base in code or argv[3] == _SERVER and base in argv[4].decode(
                    "utf-8", "replace"):
                try:
                    os.kill(int(name), signal.SIGKILL)
                    stopped.append(int(name))
                except OSError:
                    pass
    for pid in stopped:   # ours (started in this process): collected, no zombie left
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    if stopped:
        from acpmem.infra.detach import reap

        reap()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failure whose message or captured output holds a lone surrogate (a fuzzer's file name, bytes decoded with
    surrogateescape) is reported with it escaped: pytest-xdist cannot send such text from a worker, and the worker
    crashed instead, the failure itself unsaid (one full run here: "strings must be utf-8 encodable")."""
    outcome = yield
    report = outcome.get_result()
    if report.passed:
        return

    def clean(text: str) -> str:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")

    if report.longrepr is not None and not isinstance(report.longrepr, tuple):
        text = str(report.longrepr)
        if clean(text) != text:
            report.longrepr = clean(text)
    report.sections = [(clean(title), clean(content)) for title, content in report.sections]


# CI runs the property tests on Hypothesis's fixed seed: a run of a clean clone is reproducible, and an example found
# there is found again by the same command. Elsewhere they draw fresh examples each run, to find new ones.
from hypothesis import settings as _hsettings  # noqa: E402

_hsettings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    _hsettings.load_profile("ci")


# The longest tests first (longest-processing-time-first scheduling): run last on one of the workers, a minute-long
# test would leave the others idle at the end. Files by their measured time, the rest in their usual order. With
# pytest-xdist's default schedule they all go to the first worker's share, which ends a run alone for ~15 s; a
# schedule that shares them out (``worksteal``, ``loadgroup``) costs more than that: a module's fixtures (forking
# servers, templates) are then set up on every worker that runs part of it (docs/performance.md).
_FIRST = ("test_team_model.py", "test_team_sync.py", "test_crash_points.py", "test_reliability.py", "test_journal.py",
          "test_json_output.py", "test_readme.py", "test_fuzz_boundaries.py", "test_vector_model.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(_FIRST)))
