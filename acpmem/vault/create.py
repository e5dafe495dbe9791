"""``acp memory init``: a vault created from the template, as its own git repository with a first commit, excluded
from a surrounding git workspace.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from acpmem.core import layout
from acpmem.core.clock import now_utc
from acpmem.core.errors import AcpmemError, SettingsError, UsageError, VaultExists
from acpmem.core.limits import clip, path_problem
from acpmem.infra.files import expand_home
from acpmem.vault.discovery import user_vault_location
from acpmem.vault.examples import example_entries
from acpmem.vault.gitrun import git, no_repository
from acpmem.vault.writer import KIND_FORK, KIND_INIT, Vault


def init_vault(path: str | os.PathLike | None = None, *, example: bool = False, cwd: Path | None = None,
               clock: Callable[[], datetime] = now_utc, rng=None) -> "Vault":
    """Create a vault from the template: its own git repository and a first commit."""
    why = None if path is None else path_problem(path)
    if why:
        raise UsageError(f"the vault path {why}, got {clip(path)}", "pass the folder to create the vault in")
    base = expand_home(path, "the vault folder") if path else (cwd or Path.cwd())
    if not base.is_absolute():
        base = (cwd or Path.cwd()) / base
    try:
        root = _new_root(base, named=bool(path))
    except (OSError, ValueError) as exc:   # a name too long for the system, a NUL, a folder we may not look into
        raise AcpmemError(f"cannot create the vault at {base}: {getattr(exc, 'strerror', None) or exc}",
                          "pick a folder you can write (or pass PATH)") from None
    existed = root.exists()
    try:
        return _create(root, example=example, clock=clock, rng=rng)
    except BaseException as exc:
        _remove_what_we_made(root, existed)   # no half-made vault is left behind
        if isinstance(exc, OSError):
            raise AcpmemError(f"cannot create the vault at {root}: {exc.strerror or exc}",
                              "pick a folder you can write (or pass PATH)") from None
        raise


def init_user_vault(*, example: bool = False, clock: Callable[[], datetime] = now_utc, rng=None) -> "Vault":
    """Create the user vault where ``$ACPMEM_USER_VAULT`` says, else at ``~/.acp-memory``: a vault like any other
    (its own git repository, syncable), read beside every project's vault."""
    path, _ = user_vault_location(None)
    if path is None:
        raise SettingsError("ACPMEM_USER_VAULT is none: the user vault is turned off",
                         "unset it (for ~/.acp-memory) or set it to the folder to create the user vault in")
    v = init_vault(path, example=example, clock=clock, rng=rng)
    v.layer = layout.LAYER_USER
    return v


def _enclosing_vault(base: Path) -> Path | None:
    """The vault whose folders ``base`` is inside (a folder above it holding entries/ and acpmem.toml), or None."""
    try:
        real = base.resolve()
    except (OSError, RuntimeError):
        real = base
    for d in real.parents:
        if (d / layout.ENTRIES_DIR).is_dir() and (d / layout.SETTINGS_FILE).is_file():
            return d
    return None


def _new_root(base: Path, *, named: bool) -> Path:
    """Where the new vault goes, or ``VaultExists`` saying why not there."""
    outer = _enclosing_vault(base)
    if outer is not None:   # a vault nested in another's folders would be committed into it, entry by entry
        raise VaultExists(f"{base} is inside the vault at {outer}",
                          f"use that vault, or run `acp memory init` in a folder outside {outer}")
    # PATH names the vault itself when it is new, empty or called .acp-memory; an existing folder with other
    # content (a project) gets its vault in PATH/.acp-memory, like `init` without PATH does in the current folder.
    if (base / layout.ENTRIES_DIR).is_dir() and (base / layout.SETTINGS_FILE).is_file():
        if not (base / ".git").exists():  # a vault that lost its repository: a new vault inside it helps nobody
            err = no_repository(base)
            raise VaultExists(err.message, err.hint)
        raise VaultExists(f"{base} is already a vault", "use it, or pass another PATH")
    if named and (base.name == layout.VAULT_DIRNAME or not base.exists() or (base.is_dir() and not any(base.iterdir()))):
        root = base
    else:
        root = base / layout.VAULT_DIRNAME
    if (root / layout.ENTRIES_DIR).is_dir() or (root / ".git").exists():
        raise VaultExists(f"a vault already exists at {root}", "use it, or pass another PATH")
    for d in (root, *root.parents):
        if d.exists():
            if not d.is_dir():
                raise VaultExists(f"{d} is a file, not a folder", "pass a folder to create the vault in")
            break
    if root.exists() and any(root.iterdir()):
        raise VaultExists(f"{root} exists and is not empty", "pick an empty or new folder")
    return root


def _remove_what_we_made(root: Path, existed: bool) -> None:
    if not existed:
        shutil.rmtree(root, ignore_errors=True)
    elif root.is_dir():
        for child in root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def _create(root: Path, *, example: bool, clock, rng) -> Vault:
    shutil.copytree(layout.TEMPLATE_DIR, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    (root / layout.ENTRIES_DIR).mkdir(exist_ok=True)
    (root / layout.READS_DIR).mkdir(exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    vault = Vault(root, clock=clock, rng=rng)
    vault.ensure_state()
    vault.setup_git(fresh=True)  # core.quotepath, gc.autoDetach (the same as a clone's)
    _exclude_from_workspace(root)
    git(root, "add", "-A")
    git(root, "commit", "-q", "--no-verify", "-F", "-",
        # a random vault id makes every vault's history its own, even two created from the same template by the
        # same person in the same second (their first commits would otherwise be identical)
        input=f"acpmem: {KIND_INIT}: create the vault\n\nCreated from the vault template.\n\nAcpmem-Kind: {KIND_INIT}\n"
              f"Acpmem-Vault: {os.urandom(8).hex()}\n")
    vault.identity_taken()   # git knows no identity: the commit said who it is, and the person is told how to set one
    if example:
        entries = example_entries(vault, clock())
        vault.write_entries(entries, subject=f"add {len(entries)} example entries",
                            why="Seeded by `acp memory init --example` so a newcomer sees the vault at work.",
                            kind=KIND_FORK, trailers={"Acpmem-Extractor": "example"})
    return vault


def _exclude_from_workspace(root: Path) -> None:
    """Inside a git workspace, list the vault in the workspace's .git/info/exclude (never commit into it)."""
    parent = root.parent
    real = parent.resolve()   # where git looks from, after it changes into the folder
    if not any(os.path.lexists(d / ".git") for d in (real, *real.parents)):
        return   # no folder above holds a .git: git would find no workspace (a process fewer for every init)
    res = git(parent, "rev-parse", "--show-toplevel", "--git-common-dir", check=False)
    if res.code != 0:
        return
    top, common = res.out.strip().splitlines()[:2]
    common_dir = (parent / common).resolve() if not os.path.isabs(common) else Path(common)
    try:
        rel = root.resolve().relative_to(Path(top).resolve())
    except ValueError:
        return
    exclude = common_dir / "info" / "exclude"
    line = f"/{rel.as_posix()}/"
    existing = exclude.read_text("utf-8") if exclude.exists() else ""
    if line not in existing.splitlines():
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with open(exclude, "a", encoding="utf-8") as fh:
            if existing and not existing.endswith("\n"):
                fh.write("\n")
            fh.write(f"# acpmem vault (its own git repository)\n{line}\n")
