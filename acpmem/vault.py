"""The vault: init, atomic writes, the repository lock and every git commit, on top of the reading side
(``acpmem.api.VaultReader``: settings, the catalog, the entries), which the per-turn read paths use without this module.

Only this module (with its helpers ``api``, ``catalog`` and ``reads``) touches the vault's files and git. Git is driven
through the ``git`` executable with ``subprocess``: every call is a short-lived child that is always waited for,
so a long-running host never accumulates git processes or file descriptors.

Every change goes through ``Vault.apply`` under one repository-level lock (``fcntl.flock`` on
``.acpmem/locks/repo.lock``; the kernel releases it when a process dies, even by ``kill -9``):

1. finish a change a killed process left half-done (its journal is replayed and committed);
2. wait a bounded time for a foreign ``.git/index.lock`` (a person running git) — never delete it;
3. commit pending human edits separately, marked as human edits;
4. write a journal, write the files atomically (temp file, fsync, rename), fold the read log, regenerate MEMORY.md;
5. one ``git commit`` of exactly those paths with a message that says what and why, plus trailers;
6. delete the journal.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from collections.abc import Callable, Iterator

from acpmem import catalog, reads
from acpmem.api import Loaded, VaultReader, now_utc  # noqa: F401 (the reading side; Loaded re-exported)
from acpmem.discovery import STATE_DIRNAME, VAULT_DIRNAME, discover  # noqa: F401 (acpmem.discover)
from acpmem.files import atomic_write  # noqa: F401 (re-exported: acpmem.vault.atomic_write)
from acpmem.errors import (AcpmemError, EntryInvalid, EntryNotFound, GitStateError, LockTimeout, SettingsError,
                           UsageError, VaultExists)
from acpmem.model import Entry, new_entry_text, parse_entry_bytes, slugify, validate_id
from acpmem.settings import SETTINGS_FILE, load_settings

TEMPLATE_DIR = Path(__file__).parent / "vault_template"
ID_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"
GENERATED = ("MEMORY.md",)

# Commit kinds, written as the ``Acpmem-Kind`` trailer and shown by ``log``.
KIND_INIT = "init"
KIND_FORK = "fork-write"
KIND_HUMAN = "human-edit"
KIND_EDIT = "edit"
KIND_FORGET = "forget"
KIND_SUPERSEDE = "supersede"
KIND_READS = "reads"
KIND_SYNC = "sync"
KIND_RECOVER = "recover"


# --------------------------------------------------------------------------------------------- small file helpers

def _inside(root: Path, rel: str) -> Path:
    """Resolve a vault-relative path, refusing anything that leaves the vault."""
    if not rel or "\x00" in rel or os.path.isabs(rel) or ".." in Path(rel).parts:
        raise UsageError(f"path {rel!r:.60} leaves the vault", "paths are relative to the vault, without '..'")
    p = root / rel
    parent = p.parent.resolve()
    if parent != root.resolve() and root.resolve() not in parent.parents:
        raise UsageError(f"path {rel!r:.60} leads out of the vault through a symlink", "remove the symlink")
    if p.is_symlink():
        raise UsageError(f"{rel} is a symlink; acpmem does not write through symlinks", "replace it with a file")
    return p


# --------------------------------------------------------------------------------------------- git

@dataclass(frozen=True)
class GitResult:
    code: int
    out: str
    err: str


def git(root: Path, *args: str, input: str | None = None, check: bool = True, env: dict | None = None) -> GitResult:
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


# --------------------------------------------------------------------------------------------- init

def init_vault(path: str | os.PathLike | None = None, *, example: bool = False, cwd: Path | None = None,
               clock: Callable[[], datetime] = now_utc, rng=None) -> "Vault":
    """Create a vault from the template: its own git repository and a first commit (SPEC §3)."""
    base = Path(path).expanduser() if path else (cwd or Path.cwd())
    if not base.is_absolute():
        base = (cwd or Path.cwd()) / base
    # PATH names the vault itself when it is new, empty or called .acp-memory; an existing folder with other
    # content (a project) gets its vault in PATH/.acp-memory, like `init` without PATH does in the current folder.
    if path and (base.name == VAULT_DIRNAME or not base.exists() or (base.is_dir() and not any(base.iterdir()))):
        root = base
    else:
        root = base / VAULT_DIRNAME
    if (root / "entries").is_dir() or (root / ".git").exists():
        raise VaultExists(f"a vault already exists at {root}", "use it, or pass another PATH")
    if root.exists() and any(root.iterdir()):
        raise VaultExists(f"{root} exists and is not empty", "pick an empty or new folder")
    import shutil

    shutil.copytree(TEMPLATE_DIR, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "entries").mkdir(exist_ok=True)
    (root / reads.READS_DIR).mkdir(exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", git(root, "config", "user.name", check=False).out.strip() or "acpmem")
    git(root, "config", "user.email", git(root, "config", "user.email", check=False).out.strip() or "acpmem@localhost")
    git(root, "config", "core.quotepath", "off")
    git(root, "config", "gc.autoDetach", "false")  # an automatic gc never runs beside acpmem's next commit
    vault = Vault(root, clock=clock, rng=rng)
    vault.ensure_state()
    _exclude_from_workspace(root)
    git(root, "add", "-A")
    git(root, "commit", "-q", "--no-verify", "-F", "-",
        # a random vault id makes every vault's history its own, even two created from the same template by the
        # same person in the same second (their first commits would otherwise be identical)
        input="acpmem: init: create the vault\n\nCreated from the vault template.\n\nAcpmem-Kind: init\n"
              f"Acpmem-Vault: {os.urandom(8).hex()}\n")
    if example:
        from acpmem.examples import example_entries
        entries = example_entries(vault, clock())
        vault.write_entries(entries, subject=f"add {len(entries)} example entries",
                            why="Seeded by `acp memory init --example` so a newcomer sees the vault at work.",
                            kind=KIND_FORK, trailers={"Acpmem-Extractor": "example"})
    return vault


def _exclude_from_workspace(root: Path) -> None:
    """Inside a git workspace, list the vault in the workspace's .git/info/exclude (never commit into it)."""
    parent = root.parent
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


# --------------------------------------------------------------------------------------------- the vault

@dataclass(frozen=True)
class HumanEdit:
    path: str
    status: str            # modified | added | deleted
    problem: str | None    # why it cannot be committed (invalid entry), or None


@dataclass(frozen=True)
class LogItem:
    commit: str
    date: str
    author: str
    kind: str
    subject: str
    paths: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"commit": self.commit, "date": self.date, "author": self.author, "kind": self.kind,
                "subject": self.subject, "paths": list(self.paths)}


class Vault(VaultReader):
    """An open vault: the reading side (``acpmem.api.VaultReader``: settings, the catalog, entries, reads) plus
    the write machinery (ids, the repository lock, human edits, the journal and every commit)."""

    @property
    def rng(self):
        """The random generator (ids, lock back-off); injectable for tests, created on first use."""
        if self._rng is None:
            import random

            self._rng = random.Random()
        return self._rng

    # ----------------------------------------------------------------- ids
    def new_id(self, taken: set[str] | None = None) -> str:
        taken = taken if taken is not None else {e.id for e in self.load(with_reads=False, light=True).entries}
        existing = {p.name.split("-")[0].split(".")[0] for p in self.entries_dir.glob("*.md")}
        for _ in range(1000):
            ident = "".join(self.rng.choice(ID_ALPHABET) for _ in range(6))
            if ident not in taken and ident not in existing and not any(
                    t.startswith(ident) or ident.startswith(t) for t in taken):
                return ident
        raise AcpmemError("could not find a free entry id", "the vault is unusually full; report this")

    def path_for(self, ident: str, title: str) -> str:
        slug = slugify(title)
        return f"entries/{ident}-{slug}.md" if slug else f"entries/{ident}.md"

    # ----------------------------------------------------------------- the lock
    @contextlib.contextmanager
    def lock(self, timeout: float | None = None) -> Iterator[None]:
        """The repository-level lock. Re-entrant within one Vault object."""
        if getattr(self, "_lock_depth", 0):
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        self.ensure_state()
        timeout = self.settings.git.lock_timeout_seconds if timeout is None else timeout
        fd = os.open(self.state_dir / "locks" / "repo.lock", os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() > deadline:
                        raise LockTimeout(f"the vault is locked by another acpmem process for over {timeout:.0f} s",
                                          "retry later; `acp memory doctor` shows who holds it") from None
                    time.sleep(0.002 + self.rng.random() * 0.004)
            with contextlib.suppress(OSError):  # who holds it, for doctor: informative only (the disk may be full)
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0
        finally:
            os.close(fd)  # closing releases the flock

    def _wait_for_index_lock(self) -> None:
        """A foreign .git/index.lock is waited for, within a bound, and never deleted. Our own stale one (a git
        child of ours was killed) is recognised by the marker we leave while git runs, and removed."""
        index_lock = self.root / ".git" / "index.lock"
        self._clear_own_leftovers()
        deadline = time.monotonic() + self.settings.git.foreign_lock_wait_seconds
        while index_lock.exists():
            if time.monotonic() > deadline:
                raise GitStateError(
                    f"git is busy: {index_lock} has existed for over "
                    f"{self.settings.git.foreign_lock_wait_seconds:.0f} s (someone is running git in the vault)",
                    "wait for that git command to finish; if none is running, delete the lock file yourself")
            time.sleep(0.05)

    def _clear_own_leftovers(self) -> None:
        """Remove what a killed acpmem process left behind (call under the lock): its temp files; and, when the
        marker written while git runs names a process that is gone, git's lock files and empty or temporary
        object files from that moment. A file counts as ours only if nobody holds it open: a person's git started
        since then (or an orphaned git child of ours still finishing) keeps its files open."""
        for d in (self.root, self.entries_dir, self.root / reads.READS_DIR, self.state_dir):
            with contextlib.suppress(OSError):
                for name in os.listdir(d):
                    m = _TEMP_RE.match(name)
                    if m and not _pid_alive(int(m.group(1))):
                        (d / name).unlink(missing_ok=True)
        marker = self.state_dir / "locks" / "git-running"
        try:
            mark_m = marker.stat().st_mtime
        except FileNotFoundError:
            return
        if _pid_alive(_read_pid(marker)):
            return
        gd = self.root / ".git"
        candidates = [gd / "index.lock", gd / "HEAD.lock", gd / "objects" / "maintenance.lock",
                      *gd.glob("next-index-*.lock"), *(gd / "refs" / "heads").glob("*.lock"),
                      *(gd / "objects").glob("??/tmp_obj_*")]
        removed = 0
        for p in candidates:
            with contextlib.suppress(FileNotFoundError):
                if mark_m - 1 <= p.stat().st_mtime <= mark_m + 120 and not _held_open(p):
                    p.unlink()
                    removed += 1
        for p in (gd / "objects").glob("??/*"):
            with contextlib.suppress(FileNotFoundError):
                st = p.stat()
                if st.st_size == 0 and mark_m - 1 <= st.st_mtime <= mark_m + 120:
                    p.unlink()  # an object git was killed while writing: empty, it would pass for the real one
                    removed += 1
        if removed:
            self.warnings.append(f"removed {removed} stale git lock or object file(s) left by a killed acpmem process")

    @contextlib.contextmanager
    def _git_running(self) -> Iterator[None]:
        marker = self.state_dir / "locks" / "git-running"
        try:
            marker.write_text(f"{os.getpid()}\n")
            yield
        finally:
            marker.unlink(missing_ok=True)

    # ----------------------------------------------------------------- human edits
    def human_edits(self) -> list[HumanEdit]:
        """Uncommitted changes to the vault that acpmem did not make, each validated."""
        res = git(self.root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
        out: list[HumanEdit] = []
        journal = self._journal_paths()
        for item in filter(None, res.out.split("\0")):
            code, rel = item[:2], item[3:]
            if rel in journal or rel.startswith(STATE_DIRNAME + "/"):
                continue
            status = "deleted" if "D" in code else "added" if code == "??" or "A" in code else "modified"
            out.append(HumanEdit(rel, status, self._validate_human(rel, status)))
        return out

    def _validate_human(self, rel: str, status: str) -> str | None:
        if status == "deleted":
            return None
        p = self.root / rel
        if p.is_symlink():
            return "a symlink (acpmem does not commit symlinks)"
        if rel.startswith("entries/") and rel.endswith(".md"):
            try:
                e = parse_entry_bytes(p.read_bytes(), rel, self.settings.types)
            except EntryInvalid as exc:
                return str(exc.message)
            kind = catalog.secret_kind(e)  # what acpmem redacted itself does not count
            if kind:
                return f"contains what looks like a secret ({kind}); remove it before it is committed"
        elif rel == SETTINGS_FILE:
            try:
                load_settings(self.root, None)
            except SettingsError as exc:
                return exc.message
        return None

    def commit_human_edits(self) -> str | None:
        """Commit valid pending human edits in their own commit (call under the lock). Invalid ones stay as they
        are, uncommitted, and are reported in ``self.warnings``."""
        edits = [h for h in self.human_edits() if h.path not in GENERATED]
        good = [h for h in edits if h.problem is None]
        for h in edits:
            if h.problem:
                self.warnings.append(f"not committed: {h.path}: {h.problem}")
        if not good:
            return None
        paths = [h.path for h in good]
        names = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
        trailers = {"Acpmem-Kind": KIND_HUMAN}
        return self._commit(paths, f"human edit: {names}",
                            "Changes made by hand outside acpmem, validated and recorded before acpmem's next "
                            "own commit.", trailers, fold_reads=False, regen=True)

    # ----------------------------------------------------------------- writing
    def _journal_path(self) -> Path:
        return self.state_dir / "journal.json"

    def _journal_paths(self) -> set[str]:
        try:
            j = json.loads(self._journal_path().read_text("utf-8"))
            return set(j.get("writes", {})) | set(j.get("deletes", []))
        except (OSError, ValueError):
            return set()

    def recover(self) -> str | None:
        """Finish a change that a killed process left half-done. Call under the lock."""
        jp = self._journal_path()
        try:
            j = json.loads(jp.read_text("utf-8"))
        except FileNotFoundError:
            return None
        except ValueError:
            jp.unlink(missing_ok=True)  # the journal itself was cut short: nothing was written after it
            return None
        for rel, text in j["writes"].items():
            atomic_write(_inside(self.root, rel), text)
        for rel in j["deletes"]:
            with contextlib.suppress(FileNotFoundError):
                _inside(self.root, rel).unlink()
        sha = self._commit(list(j["writes"]) + list(j["deletes"]), j["subject"], j["why"], j["trailers"],
                           fold_reads=True, regen=True)
        jp.unlink(missing_ok=True)
        return sha

    def apply(self, writes: dict[str, str], deletes: list[str], *, subject: str, why: str, kind: str,
              trailers: dict[str, str] | None = None, check: Callable[["Vault"], None] | None = None) -> str:
        """Write and delete files and record it all in one commit. Returns the commit id.

        ``check`` runs under the lock, after human edits are committed and before anything is written; it may
        raise to refuse the change (e.g. the entry it updates has changed meanwhile)."""
        for rel in list(writes) + list(deletes):
            _inside(self.root, rel)
        trailers = {"Acpmem-Kind": kind, **(trailers or {})}
        journaled = False
        try:
            with self.lock():
                if (self.root / ".git" / "MERGE_HEAD").exists():
                    raise GitStateError("a sync merge is unfinished in the vault (an entry changed on both sides)",
                                        "edit the conflicted entries and run `acp memory sync` again, or "
                                        f"`git -C {self.root} merge --abort`; pending writes are kept until then")
                self._wait_for_index_lock()
                self.recover()
                self.commit_human_edits()
                if check is not None:
                    check(self)
                journal = {"writes": writes, "deletes": list(deletes), "subject": subject, "why": why,
                           "trailers": trailers}
                atomic_write(self._journal_path(), json.dumps(journal, ensure_ascii=False))
                journaled = True
                for rel, text in writes.items():
                    atomic_write(self.root / rel, text)
                for rel in deletes:
                    with contextlib.suppress(FileNotFoundError):
                        (self.root / rel).unlink()
                sha = self._commit(list(writes) + list(deletes), subject, why, trailers, fold_reads=True,
                                   regen=True)
                self._journal_path().unlink(missing_ok=True)
                return sha
        except (OSError, catalog.sqlite3.OperationalError) as exc:
            if not isinstance(exc, OSError) and "full" not in str(exc):
                raise
            raise _storage_error(exc, "the change is kept pending and is finished by the next write or `acp memory "
                                      "doctor --fix` once the vault can be written" if journaled
                                 else "nothing was changed") from None

    def _commit(self, paths: list[str], subject: str, why: str, trailers: dict[str, str], *, fold_reads: bool,
                regen: bool) -> str | None:
        paths = list(dict.fromkeys(paths))
        claimed = None
        if fold_reads:
            folded = reads.fold(self.root, self.state_dir)
            if folded:
                rel, text, claimed = folded
                atomic_write(_inside(self.root, rel), text)  # reads/ could be a symlink out of a cloned vault
                paths.append(rel)
        if regen:
            from acpmem.render import memory_md
            snap = self.load(with_reads=False, light=True)  # MEMORY.md needs the index fields only
            text = memory_md(snap.entries, self.settings)
            mp = self.root / "MEMORY.md"
            old = mp.read_text("utf-8") if mp.exists() else None
            if old != text:
                atomic_write(mp, text, durable=False)
            paths.append("MEMORY.md")  # also when unchanged on disk: a killed commit can leave it uncommitted
        trailer_text = "".join(f"{k}: {_one_line(v)}\n" for k, v in trailers.items() if v not in (None, ""))
        message = f"acpmem: {trailers.get('Acpmem-Kind', 'change')}: {_one_line(subject)}\n\n{why.strip()}\n\n" \
                  f"{trailer_text}"
        with self._git_running():
            git(self.root, "add", "-A", "--", *paths)
            res = git(self.root, "commit", "-q", "--no-verify", "-F", "-", "--", *paths, input=message, check=False)
            if res.code != 0:
                if "nothing to commit" in res.out + res.err or "no changes added" in res.out + res.err:
                    if claimed:
                        claimed.unlink(missing_ok=True)
                    return None
                first = (res.err.strip() or res.out.strip() or "failed").splitlines()[0]
                raise GitStateError(f"git commit failed: {first}", "run `acp memory doctor` to check the vault")
        if claimed:
            claimed.unlink(missing_ok=True)
        return self.head()

    def head(self) -> str:
        """The commit HEAD points to, read from the ref file (one git process fewer per write)."""
        gd = self.root / ".git"
        try:
            ref = (gd / "HEAD").read_text("ascii").strip()
            if ref.startswith("ref: "):
                sha = (gd / ref[5:]).read_text("ascii").strip()
            else:
                sha = ref
            if len(sha) == 40:
                return sha
        except (OSError, UnicodeDecodeError):
            pass
        return git(self.root, "rev-parse", "HEAD").out.strip()

    # ----------------------------------------------------------------- entry-level operations
    def write_entries(self, entries: list[Entry], *, subject: str, why: str, kind: str = KIND_FORK,
                      trailers: dict[str, str] | None = None, updates: list[Entry] | None = None) -> str:
        """Write new entries (and updated existing ones, e.g. marked superseded) in one commit."""
        writes: dict[str, str] = {}
        for e in entries:
            validate_id(e.id)
            rel = e.path or self.path_for(e.id, e.title)
            if (self.root / rel).exists():
                raise AcpmemError(f"{rel} already exists", "entries are never overwritten; this is a bug")
            writes[rel] = new_entry_text(e)
        from acpmem.model import dump_entry
        for e in updates or ():
            writes[e.path] = dump_entry(e) if e.raw is not None else ""  # without its text: built under the lock
        originals = {e.path: e for e in updates or ()}

        def unchanged_since_read(v: "Vault") -> None:
            for rel, e in originals.items():
                cur = _read_text(v.root / rel)
                if e.raw is not None:
                    same = cur == e.raw
                else:
                    # An entry from the catalog carries no text: only the marking fields may differ from the file
                    # as it is now, and the file's own formatting is kept.
                    try:
                        disk = parse_entry_bytes(cur.encode("utf-8"), rel, v.settings.types) if cur else None
                    except EntryInvalid:
                        disk = None
                    marks = {k: getattr(e, k) for k in ("superseded_by", "supersedes", "last_read")}
                    same = disk is not None and disk.with_changes(**marks) == e
                    if same:
                        writes[rel] = dump_entry(e.with_changes(raw=cur))
                if not same:
                    raise AcpmemError(f"{rel} changed while acpmem was updating it",
                                      "run the command again; the other change was kept")

        trailers = dict(trailers or {})
        trailers.setdefault("Acpmem-Entry", " ".join(e.id for e in entries + list(updates or ())))
        return self.apply(writes, [], subject=subject, why=why, kind=kind, trailers=trailers,
                          check=unchanged_since_read if originals else None)

    def forget(self, prefix: str, reason: str) -> tuple[Entry, str]:
        reason = (reason or "").strip()
        if not reason:
            raise UsageError("forget needs --reason", "say why, e.g. --reason 'superseded by the new API'")
        entry = self.resolve(prefix)
        sha = self.apply({}, [entry.path], subject=f"forget #{entry.id} {entry.title}", why=reason,
                         kind=KIND_FORGET, trailers={"Acpmem-Entry": entry.id, "Acpmem-Reason": reason})
        return entry, sha

    def replace_entry_text(self, entry: Entry, text: str, *, subject: str, why: str, kind: str,
                           base: str | None = None) -> str:
        """Commit new text for an existing entry (``edit``), validated first. ``base`` (default ``entry.raw``) is
        the text the new one was made from: if the file no longer holds it once the lock is taken, the change is
        refused rather than silently overwriting the other change."""
        new = parse_entry_bytes(text.encode("utf-8"), entry.path, self.settings.types)
        if new.id != entry.id:
            raise EntryInvalid(entry.path, "id", f"must stay '{entry.id}' (ids are stable; citations refer to them)")
        base = entry.raw if base is None else base

        def unchanged_since_read(v: "Vault") -> None:
            if _read_text(v.root / entry.path) != base:
                raise AcpmemError(f"{entry.path} changed while acpmem was updating it",
                                  "run the command again; the other change was kept")

        return self.apply({entry.path: text}, [], subject=subject, why=why, kind=kind,
                          trailers={"Acpmem-Entry": entry.id}, check=unchanged_since_read if base is not None else None)

    # ----------------------------------------------------------------- history
    def log(self, prefix: str | None = None, limit: int = 50) -> list[LogItem]:
        args = ["log", f"-n{limit}", "--name-only",
                "--format=%x1e%H%x1f%aI%x1f%an%x1f%s%x1f%(trailers:key=Acpmem-Kind,valueonly,separator=%x2c)"]
        if prefix:
            entry = self._resolve_any(prefix)
            args += ["--follow", "--", entry]
        res = git(self.root, *args, check=False)
        if res.code != 0:
            if "does not have any commits" in res.err:
                return []
            raise GitStateError(f"git log failed: {res.err.strip()[:200]}", "run `acp memory doctor`")
        items = []
        for rec in res.out.split("\x1e")[1:]:
            head, _, files = rec.partition("\n")
            parts = head.split("\x1f")
            if len(parts) < 5:
                continue
            sha, date, author, subject, kind = parts[:5]
            kind = kind.strip() or ("human-edit (git)" if not subject.startswith("acpmem:") else "change")
            items.append(LogItem(sha[:12], date, author, kind, subject,
                                 tuple(f for f in files.strip().splitlines() if f)))
        return items

    def _resolve_any(self, prefix: str) -> str:
        """The path of an entry by id prefix — including forgotten entries, found in history."""
        try:
            return self.resolve(prefix).path
        except EntryNotFound:
            res = git(self.root, "log", "--all", "--format=", "--name-only", "--diff-filter=D", "--",
                      f"entries/{prefix}*", check=False)
            hits = sorted({p for p in res.out.splitlines() if p.strip()})
            if len(hits) == 1:
                return hits[0]
            raise

    # ----------------------------------------------------------------- health
    def git_problems(self) -> list[str]:
        problems = []
        if not (self.root / ".git").is_dir():
            return [f"{self.root} is not a git repository"]
        for name in ("MERGE_HEAD", "REBASE_HEAD", "CHERRY_PICK_HEAD"):
            if (self.root / ".git" / name).exists():
                problems.append(f"a git {name.split('_')[0].lower()} is in progress")
        if (self.root / ".git" / "rebase-merge").exists() or (self.root / ".git" / "rebase-apply").exists():
            problems.append("a git rebase is in progress")
        if git(self.root, "rev-parse", "--verify", "-q", "HEAD", check=False).code != 0:
            problems.append("HEAD does not point to a commit")
        res = git(self.root, "fsck", "--no-dangling", "--no-progress", check=False)
        if res.code != 0:
            problems.append("git fsck: " + (res.err.strip() or res.out.strip()).splitlines()[0])
        return problems


_TEMP_RE = re.compile(r"^\..+\.(\d+)\.[0-9a-f]{8}\.tmp$")  # atomic_write's temp files: .NAME.PID.RANDOM.tmp


def _storage_error(exc: Exception, outcome: str) -> AcpmemError:
    full = getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or "full" in str(exc)
    what = "the disk is full" if full else f"the vault cannot be written ({getattr(exc, 'strerror', None) or exc})"
    return AcpmemError(f"{what}: {outcome}", "free some space (or fix the file system), then run the command again")


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text("ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _pid_alive(pid: int | None) -> bool:
    """Whether a process runs with this pid (a zombie, killed but not yet reaped, counts as gone)."""
    if not pid or pid == os.getpid():
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _held_open(path: Path) -> bool:
    """Whether any process has ``path`` open (Linux /proc; elsewhere: unknown, say no)."""
    target = os.path.realpath(path)
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return False
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return True
            except OSError:
                continue
    return False


def _read_text(path: Path) -> str | None:
    """A file's exact text (CRLF kept, unlike ``read_text``), or None when it is gone or not UTF-8."""
    try:
        return path.read_bytes().decode("utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def _one_line(value: object) -> str:
    return re.sub(r"\s+", " ", str(value)).strip()
