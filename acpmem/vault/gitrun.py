"""Git through the ``git`` executable: every call a short-lived child that is always waited for, so a long-running
host never accumulates git processes or file descriptors (``docs/design.md`` gives the measurements behind this
choice over GitPython).
"""
from __future__ import annotations

import os
from pathlib import Path

from acpmem.core.errors import GitStateError
from acpmem.core.values import Value


class GitResult(Value):
    code: int
    out: str
    err: str


def git(root: Path, *args: str, input: str | None = None, check: bool = True, env: dict | None = None) -> GitResult:
    """Run ``git -C root ARGS``: output captured, never a prompt, the C locale. ``check`` raises ``GitStateError``
    with git's first line when it fails."""
    full_env = dict(os.environ)
    full_env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"})
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        full_env.pop(k, None)
    if env:
        full_env.update(env)
    try:
        import subprocess  # here, not at start-up: the per-turn read paths never run git

        p = subprocess.run(["git", "-C", str(root), *args], input=input, capture_output=True, text=True,
                           encoding="utf-8", errors="replace", env=full_env, stdin=None if input else subprocess.DEVNULL)
    except FileNotFoundError:
        raise GitStateError("git is not installed", "install git (e.g. apt-get install git)") from None
    res = GitResult(p.returncode, p.stdout, p.stderr)
    if check and p.returncode != 0:
        first = (p.stderr.strip() or p.stdout.strip() or "failed").splitlines()[0]
        raise GitStateError(f"git {args[0]} failed: {first}", "run `acp memory doctor` to check the vault")
    return res
