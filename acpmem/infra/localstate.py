"""Where the local state that is not derived lives: the acknowledged requests, the journal of a change being
written, the log of finished requests and the worker's locks — ``acpmem/`` in the vault's git folder
(``.git/acpmem/``). ``.acpmem/`` beside it holds derived state only and may be deleted at any moment, even while
writers run (``docs/design.md``, "The request queue").
"""
from __future__ import annotations

from pathlib import Path

from acpmem.core.layout import GIT_STATE_DIRNAME, STATE_DIRNAME
from acpmem.infra.files import read_regular


def queue_home(state_dir: Path) -> Path:
    """``.git/acpmem/`` of the vault whose derived state is ``state_dir`` (a linked worktree's own git folder).
    Never committed, never synced, and kept when a person deletes ``.acpmem/``. Without a git folder (no
    repository yet, or a read-only vault whose state lives in the user's cache): ``state_dir`` itself."""
    state = Path(state_dir)
    if state.name != STATE_DIRNAME:
        return state
    dotgit = state.parent / ".git"
    try:
        if dotgit.is_dir():
            return dotgit / GIT_STATE_DIRNAME
        text = read_regular(dotgit, 4097).decode("utf-8", "replace")   # a linked worktree: "gitdir: PATH"
    except (OSError, ValueError):
        return state
    if text.startswith("gitdir:") and len(text) <= 4096:
        gd = Path(text[len("gitdir:"):].strip())
        gd = gd if gd.is_absolute() else state.parent / gd
        if gd.is_dir():
            return gd / GIT_STATE_DIRNAME
    return state
