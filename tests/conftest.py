"""Shared fixtures: an isolated git identity, a pinned clock, fresh vaults made from the template, and the fake
OpenAI-compatible server (a real HTTP server on 127.0.0.1)."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from openai_server import openai_server_fixture  # noqa: E402

PINNED = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)
REPO = Path(__file__).resolve().parents[1]

openai_server = pytest.fixture(openai_server_fixture)


# A test run started in the background of a non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored, and so
# would every acp it starts: the Ctrl-C tests would see their SIGINT ignored. Python's own handler again, so the
# processes the tests start get the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    """Every test gets its own HOME (so the default user vault, ~/.acp-memory, is a fresh folder that does not
    exist — the real one is never read or written) and git identity, and no ambient vault or model settings."""
    home = tmp_path_factory.mktemp("home")
    cfg = home / ".gitconfig"
    cfg.write_text("[user]\n\tname = Test User\n\temail = test@example.invalid\n[init]\n\tdefaultBranch = main\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("ACPMEM_VAULT", "ACPMEM_USER_VAULT", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "ACPMEM_SESSION", "EDITOR",
                "XDG_CONFIG_HOME",
                "VISUAL"):
        monkeypatch.delenv(var, raising=False)
    yield


@pytest.fixture
def clock():
    return lambda: PINNED


@pytest.fixture
def vault(tmp_path, clock):
    from acpmem.vault.create import init_vault

    v = init_vault(tmp_path / "vault", clock=clock, rng=random.Random(7))
    yield v
    v.close()


@pytest.fixture
def example_vault(tmp_path, clock):
    from acpmem.vault.create import init_vault

    v = init_vault(tmp_path / "vault", example=True, clock=clock, rng=random.Random(7))
    yield v
    v.close()


def run_cli(*args: str, cwd: Path | None = None, input: str | None = None, env: dict | None = None,
            prog: str = "acp") -> subprocess.CompletedProcess:
    """Run the real console script (as a separate process) and capture its output."""
    exe = Path(sys.executable).parent / prog
    cmd = [str(exe), *args] if exe.exists() else [sys.executable, "-m", "acpmem", *(args[1:] if args[:1] == ("memory",) else args)]
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, text=True, env=full_env, timeout=120)


@pytest.fixture
def cli():
    return run_cli


# CI runs the property tests on Hypothesis's fixed seed: a run of a clean clone is reproducible, and an example found
# there is found again by the same command. Elsewhere they draw fresh examples each run, to find new ones.
from hypothesis import settings as _hsettings  # noqa: E402

_hsettings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    _hsettings.load_profile("ci")


# The longest tests first (longest-processing-time-first scheduling): run last on one of the workers, a minute-long
# test would leave the others idle at the end. Files by their measured time, the rest in their usual order.
_FIRST = ("test_team_model.py", "test_team_sync.py", "test_crash_points.py", "test_reliability.py", "test_journal.py",
          "test_json_output.py", "test_readme.py", "test_fuzz_boundaries.py", "test_vector_model.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(_FIRST)))
