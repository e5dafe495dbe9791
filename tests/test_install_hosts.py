"""``integrations/install-hosts.sh`` installs each host from its lockfile once: run again, it leaves a host whose
``node_modules`` it installed from the same ``package.json`` and ``package-lock.json`` as it is, and installs again
one whose lockfile changed, whose ``node_modules`` is gone, or whose last install failed; the hosts install at
once, and one that fails is named while the others finish.

The script runs for real (bash, the machine's node for its version check) on a copy of its folder with small
packages; ``npm`` is a stand-in on ``PATH`` that records where it ran and makes ``node_modules`` as ``npm ci`` does
(the real one, from the registry, is what ``.ci/run`` and every host test use)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_process("a shell script is the point")

SCRIPT = Path(__file__).resolve().parent.parent / "integrations" / "install-hosts.sh"
HOSTS = ("dsh", "pi", "codex", "gemini", "claude-code")
NPM = """#!/usr/bin/env bash
# records each call, then does what `npm ci` does to the folder: node_modules removed and made again
echo "$PWD $*" >> "$NPM_LOG"
[ -e "$PWD/npm-fails" ] && exit 1
rm -rf node_modules && mkdir node_modules && echo installed > node_modules/marker
"""


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "integrations"
    root.mkdir()
    shutil.copy(SCRIPT, root / "install-hosts.sh")
    for host in (*HOSTS, "dsh/tools/node22"):
        d = root / host
        d.mkdir(parents=True, exist_ok=True)
        (d / "package.json").write_text(f'{{"name": "{host.replace("/", "-")}", "private": true}}\n')
        (d / "package-lock.json").write_text('{"lockfileVersion": 3, "packages": {}}\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "npm").write_text(NPM)
    (bin_dir / "npm").chmod(0o755)
    return root, bin_dir, tmp_path / "npm.log"


def _run(tree) -> tuple[subprocess.CompletedProcess, set[str]]:
    root, bin_dir, log = tree
    log.unlink(missing_ok=True)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", NPM_LOG=str(log))
    p = subprocess.run(["bash", str(root / "install-hosts.sh")], capture_output=True, text=True, env=env,
                       cwd="/", timeout=120)
    ran = {Path(line.split(" ", 1)[0]).relative_to(root).as_posix() for line in log.read_text().splitlines()} \
        if log.exists() else set()
    assert all(line.split(" ", 1)[1].startswith("ci ") for line in (log.read_text().splitlines()
                                                                   if log.exists() else [])), log.read_text()
    return p, ran - {"dsh/tools/node22"}   # (installed only where the machine's node is older than 22.19)


def test_a_host_is_installed_again_only_when_its_lockfile_changed_its_modules_went_or_its_install_failed(tree):
    root, _, _ = tree
    p, ran = _run(tree)
    assert p.returncode == 0, p.stderr
    assert ran == set(HOSTS)                                  # a fresh tree: every host
    assert all((root / h / "node_modules" / "marker").exists() for h in HOSTS)
    p, ran = _run(tree)
    assert (p.returncode, ran) == (0, set())                  # again: nothing to do
    (root / "pi" / "package-lock.json").write_text('{"lockfileVersion": 3, "packages": {"x": {}}}\n')
    (root / "codex" / "package.json").write_text('{"name": "codex", "version": "2.0.0"}\n')
    shutil.rmtree(root / "gemini" / "node_modules")
    p, ran = _run(tree)
    assert (p.returncode, ran) == (0, {"pi", "codex", "gemini"})
    # an install that fails (the hosts install at once): the script fails naming it, the others finish, and the
    # failed host alone is installed again by the next run
    (root / "claude-code" / "package-lock.json").write_text('{"lockfileVersion": 3, "packages": {"y": {}}}\n')
    (root / "claude-code" / "npm-fails").touch()
    (root / "dsh" / "package-lock.json").write_text('{"lockfileVersion": 3, "packages": {"z": {}}}\n')
    p, ran = _run(tree)
    assert p.returncode != 0 and ran == {"claude-code", "dsh"}
    assert "installing integrations/claude-code failed" in p.stderr and "integrations/dsh" not in p.stderr
    (root / "claude-code" / "npm-fails").unlink()
    p, ran = _run(tree)
    assert (p.returncode, ran) == (0, {"claude-code"})
    p, ran = _run(tree)
    assert (p.returncode, ran) == (0, set())
