"""Finding the vault: ``--vault PATH`` > ``$ACPMEM_VAULT`` > the nearest ``.acp-memory/`` walking up; and the
folder of a session's local state.

Kept apart from the reader and the writer (which pull in sqlite, git and the file-tree helpers) so the per-turn
commands (``list``, ``commit``, the hook) can find the vault, and a session's frozen index, without those imports.
"""
from __future__ import annotations

import os
from pathlib import Path

from acpmem.core.errors import UsageError, VaultNotFound
from acpmem.core.fasthash import sha256
from acpmem.core.layout import (ENTRIES_DIR, ENV_USER_VAULT, ENV_VAULT, SESSIONS_DIR, SETTINGS_FILE, STATE_DIRNAME,
                                USER_VAULT_DEFAULT, VAULT_DIRNAME)
from acpmem.core.limits import clip, name_safe, session_problem
from acpmem.infra.files import expand_home, home_folder


def _is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except (OSError, ValueError):   # a name too long, a NUL: no vault there
        return False


def _is_file(p: Path) -> bool:
    try:
        return p.is_file()
    except (OSError, ValueError):
        return False


def _exists(p: Path) -> bool:
    try:
        return p.exists()
    except (OSError, ValueError):
        return False


def discover(explicit: str | os.PathLike | None = None, *, cwd: Path | None = None,
             env: dict | None = None) -> Path:
    """``--vault PATH`` > ``ACPMEM_VAULT`` > the nearest ``.acp-memory/`` walking up from cwd > an error."""
    env = os.environ if env is None else env
    for source, value in (("--vault", explicit), (ENV_VAULT, env.get(ENV_VAULT))):
        if value:
            p = expand_home(value, source)
            if not p.is_absolute():
                p = (cwd or Path.cwd()) / p
            if _is_dir(p / VAULT_DIRNAME) and not _is_dir(p / ENTRIES_DIR):
                p = p / VAULT_DIRNAME
            if not _is_dir(p / ENTRIES_DIR):
                raise VaultNotFound(f"{source} {value} is not an acpmem vault (no entries/ folder)",
                                    f"create one with `acp memory init {value}`")
            return p.resolve()
    here = (cwd or Path.cwd()).resolve()
    # The user vault is never a project vault found by walking up (~/.acp-memory is above every project under
    # home): a project without a vault of its own must not write its decisions into the vault every project reads.
    user, _ = user_vault_location(None, env)
    user = _resolved(user) if user is not None else None
    for d in (here, *here.parents):
        cand = d / VAULT_DIRNAME
        if _is_dir(cand / ENTRIES_DIR) and (user is None or _resolved(cand) != user):
            return cand
        if _is_dir(d / ENTRIES_DIR) and _is_file(d / SETTINGS_FILE) and (
                _exists(d / ".git") or _is_dir(d / STATE_DIRNAME)):
            # we are inside a vault that has another name (e.g. a team vault cloned as team-memory/), or one that
            # lost its .git (reads work; a write says what to do)
            return d
    if user is not None and any(_resolved(d / VAULT_DIRNAME) == user for d in (here, *here.parents)):
        raise VaultNotFound(f"no project vault found here or in any parent folder ({user} is your user vault, "
                            "read beside a project's vault, not instead of it)",
                            "run `acp memory init` to create this project's .acp-memory/ here, or pass "
                            f"--vault {user} to work on the user vault itself")
    raise VaultNotFound("no vault found here or in any parent folder",
                        "run `acp memory init` to create .acp-memory/ here, or pass --vault PATH")


def _resolved(p: Path) -> Path:
    try:
        return p.resolve()
    except (OSError, RuntimeError, ValueError):
        return p


def user_vault_location(configured: str | None, env: dict | None = None) -> tuple[Path | None, bool]:
    """Where the user vault is, and whether that place was named explicitly: ``$ACPMEM_USER_VAULT`` > ``[layers]
    user_vault`` (``configured``: the effective settings, whose value is the person's — ``acpmem.core.trust``; None:
    read from the person's own config) > ``~/.acp-memory``. ``none`` (either way) turns it off: ``(None, True)``.

    Explicit matters for the warnings (``acpmem.read.layers``): a default user vault that was never created is
    silent, a named one that is missing or broken is said."""
    env = os.environ if env is None else env
    if configured is None:   # no vault's settings at hand: the person's own config (a vault never decides it)
        # lazy: the frozen `list --format prompt --session` does not need it (measured +11 ms to its start-up)
        from acpmem.vault.config import person_settings

        configured = person_settings(env).get("layers", {}).get("user_vault")
    for value, source in ((env.get(ENV_USER_VAULT), ENV_USER_VAULT), (configured, "[layers] user_vault")):
        if value is None or value == "":
            continue
        if value.strip().lower() == "none":
            return None, True
        return expand_home(value, source), True
    return expand_home(USER_VAULT_DEFAULT, "the user vault's default folder"), False


def user_vault_problem(path: Path) -> str | None:
    """Why ``path`` cannot serve as the user vault (missing, unreadable, not a vault, not a git repository), or
    None. Only stats: it runs on every turn."""
    if not _exists(path):
        return "does not exist"
    if not _is_dir(path):
        return "is not a folder"
    if not os.access(path, os.R_OK | os.X_OK):
        return "cannot be read (permission denied)"
    entries = path / ENTRIES_DIR
    if not _is_dir(entries):
        return "is not an acpmem vault (no entries/ folder)"
    if not os.access(entries, os.R_OK | os.X_OK):
        return "cannot be read (permission denied)"
    if not _exists(path / ".git"):
        return "is not a git repository"
    return None


def check_session(session: str) -> None:
    """Refuse what is not a session id (``limits.session_problem``): one line naming the next step."""
    why = session_problem(session)
    if why:
        raise UsageError(f"a session id {why}, got {clip(session)}", "pass the host's session id")


def session_folder(state_dir: Path, session: str) -> Path:
    """Where a session's local state lives (its frozen index, surfacing ledger): ``.acpmem/sessions/<name>-<hash>``,
    a readable and safe folder name for any session id."""
    check_session(session)
    safe = name_safe(session)[:48].strip(".") or "s"
    return state_dir / SESSIONS_DIR / f"{safe}-{sha256(session.encode('utf-8')).hexdigest()[:12]}"


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK | os.X_OK)


def state_location(root: Path) -> tuple[Path, bool]:
    """Where the vault's derived local state lives, and whether the vault is read-only.

    Normally ``.acpmem/`` inside the vault. When the vault cannot be written (a read-only mount, a folder of
    someone else's), reads still work: the derived state (catalog, index, session snapshots, read log) goes to a
    folder of this user's — ``$XDG_CACHE_HOME/acpmem/vaults/<name>-<hash>`` — and writes refuse with one line."""
    local = root / STATE_DIRNAME
    for _ in range(3):   # asked of .acpmem/ first: one another process deletes meanwhile is never "read-only"
        if _writable(local):
            return local, False
        if not local.is_dir():   # no .acpmem/ (never made, or deleted a moment ago): the vault's folder decides
            if _writable(root):
                return local, False
            break
        # there and not writable for this user — unless another process made it between the two looks: again
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(home_folder("XDG_CACHE_HOME"), ".cache")
    real = os.path.realpath(root)
    name = name_safe(Path(real).name)[:32].strip(".") or "vault"
    return Path(base) / "acpmem" / "vaults" / f"{name}-{sha256(real.encode('utf-8', 'surrogateescape')).hexdigest()[:12]}", True
