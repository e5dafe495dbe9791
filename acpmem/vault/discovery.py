"""Finding the vault: ``--vault PATH`` > ``$ACPMEM_VAULT`` > the nearest ``.acp-memory/`` walking up; and the
folder of a session's local state.

Kept apart from the reader and the writer (which pull in sqlite, git and the file-tree helpers) so the per-turn
commands (``list``, ``commit``, the hook) can find the vault, and a session's frozen index, without those imports.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from acpmem.core.errors import UsageError, VaultNotFound
from acpmem.core.fasthash import sha256
from acpmem.core.layout import ENTRIES_DIR, ENV_VAULT, SESSIONS_DIR, SETTINGS_FILE, VAULT_DIRNAME
from acpmem.core.limits import clip, session_problem


def discover(explicit: str | os.PathLike | None = None, *, cwd: Path | None = None,
             env: dict | None = None) -> Path:
    """``--vault PATH`` > ``ACPMEM_VAULT`` > the nearest ``.acp-memory/`` walking up from cwd > an error."""
    env = os.environ if env is None else env
    for source, value in (("--vault", explicit), (ENV_VAULT, env.get(ENV_VAULT))):
        if value:
            p = Path(value).expanduser()
            if not p.is_absolute():
                p = (cwd or Path.cwd()) / p
            if (p / VAULT_DIRNAME).is_dir() and not (p / ENTRIES_DIR).is_dir():
                p = p / VAULT_DIRNAME
            if not (p / ENTRIES_DIR).is_dir():
                raise VaultNotFound(f"{source} {value} is not an acpmem vault (no entries/ folder)",
                                    f"create one with `acp memory init {value}`")
            return p.resolve()
    here = (cwd or Path.cwd()).resolve()
    for d in (here, *here.parents):
        cand = d / VAULT_DIRNAME
        if (cand / ENTRIES_DIR).is_dir():
            return cand
        if (d / ENTRIES_DIR).is_dir() and (d / SETTINGS_FILE).is_file() and (d / ".git").exists():
            return d  # we are inside a vault that has another name (e.g. a team vault cloned as team-memory/)
    raise VaultNotFound("no vault found here or in any parent folder",
                        "run `acp memory init` to create .acp-memory/ here, or pass --vault PATH")


def session_folder(state_dir: Path, session: str) -> Path:
    """Where a session's local state lives (its frozen index, surfacing ledger): ``.acpmem/sessions/<name>-<hash>``,
    a readable and safe folder name for any session id."""
    why = session_problem(session)
    if why:
        raise UsageError(f"a session id {why}, got {clip(session)}", "pass the host's session id")
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", session)[:48].strip(".") or "s"
    return state_dir / SESSIONS_DIR / f"{safe}-{sha256(session.encode('utf-8')).hexdigest()[:12]}"
