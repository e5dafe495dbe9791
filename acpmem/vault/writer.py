"""The write side of a vault: ``Vault`` adds the repository lock, ids, human edits, the journal and every git commit
to the reading side (``acpmem.vault.reader.VaultReader``), which the per-turn read paths use without this module.

Only the vault layer touches the vault's files and git. Every change goes through ``Vault.apply`` under one
repository-level lock (``acpmem.infra.locks`` on ``.git/acpmem-repo.flock``; the kernel releases it when a process
dies, even by ``kill -9``):

1. finish a change a killed process left half-done, exactly once (``recover``: its journal is replayed and committed
   unless its commit exists already or a file it changes was changed since);
2. wait a bounded time for a foreign ``.git/index.lock`` (a person running git) — never delete it;
3. commit pending human edits separately, marked as human edits;
4. write a journal, write the files atomically (temp file, fsync, rename), fold the read log, regenerate MEMORY.md;
5. one ``git commit`` of exactly those paths with a message that says what and why, plus trailers;
6. delete the journal.

``docs/design.md`` ("The write path", "Guarantees") explains why each step is there.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from acpmem.core import layout
from acpmem.core.entry import Entry, validate_id
from acpmem.core.entryfile import (CONFLICT_REASON, MAX_FILE_BYTES, dump_entry, has_conflict_markers, new_entry_text,
                                   parse_entry_bytes, slugify)
from acpmem.core.errors import AcpmemError, EntryInvalid, GitStateError, SettingsError, UsageError
from acpmem.core.ids import random_id
from acpmem.core.render import memory_md
from acpmem.core.values import Value
from acpmem.infra import files, locks
from acpmem.infra.files import NotRegularFile, atomic_write, move_durably, read_exact, read_regular, stale_temp_files
from acpmem.infra.localstate import queue_home
from acpmem.infra.proc import held_open, pid_alive, read_pid
from acpmem.search.catalog import secret_kind
from acpmem.vault import gitlib, readlog
from acpmem.vault.config import vault_settings
from acpmem.vault.gitlib import Unusable
from acpmem.vault.gitrun import (FALLBACK_IDENTITY, failure, git, identity_warning, no_repository, took_fallback,
                                 writes_blocked)
from acpmem.vault.journal import (JOURNAL, JOURNAL_MAX_BYTES, JOURNAL_TRAILER, UNKNOWN, BadJournal, file_hash,
                                  hash_bytes, inside, parse_journal)
from acpmem.vault.reader import VaultReader

GENERATED = (layout.MEMORY_FILE,)
REPO_LOCK = "repo.lock"
REPO_FLOCK = "acpmem-repo.flock"   # in .git/: not *.lock, which git and acpmem's clean-up take for leftovers
GIT_MARKER = "git-running"
GIT_SETUP = "git-setup"   # under .acpmem: this clone's git config is set up (``setup_git``)

# Commit kinds, written as the ``Acpmem-Kind`` trailer and shown by ``log``.
KIND_INIT = "init"
KIND_FORK = "fork-write"
KIND_HUMAN = "human-edit"
KIND_EDIT = "edit"
KIND_FORGET = "forget"
KIND_SUPERSEDE = "supersede"
KIND_READS = "reads"
KIND_SYNC = "sync"
KIND_PROPOSE = "proposal"        # the fork's entries under ``[write] policy = "review"``, in proposals/
KIND_REVIEW = "human-review"     # a person's decision in ``review`` (accept, edit, reject)
KIND_REMEMBER = "human-write"    # a person's entry, verbatim (``remember``)
KIND_CONSOLIDATE = "consolidate"  # one merged entry superseding a cluster (``consolidate``)
KIND_IMPORT = "import"           # entries brought from another harness's memory (``import``)


# --------------------------------------------------------------------------------------------- paths


# --------------------------------------------------------------------------------------------- git

_REPO_CONFIG = {"core.quotepath": "off", "gc.autodetach": "false"}
_FALSE = {"off", "false", "no", "0"}
SETUP_VERSION = "2\n"   # 2: no identity is written into the config (one an older acpmem wrote there is taken out)


def setup_git(root: Path, *, fresh: bool = False) -> None:
    """What every vault repository needs in its own config, set by ``init`` and, before the first commit, in a
    clone made with plain ``git clone``: ``core.quotepath off`` and ``gc.autoDetach false`` (an automatic gc never
    runs beside acpmem's next commit). No identity: where git knows none, each commit is given the fallback on its
    command line (``gitrun.FALLBACK_IDENTITY``); the one an older acpmem wrote into this vault's own config is
    taken out, so the person's own identity counts from the moment there is one. ``fresh``: a repository ``init``
    has just made, where no older acpmem wrote anything: both keys are set, without asking first (two processes,
    not four)."""
    have: dict[str, str] = {}
    if not fresh:
        res = git(root, "config", "--get-regexp", r"^(core\.quotepath|gc\.autodetach)$", check=False)
        for line in res.out.splitlines():
            key, _, value = line.partition(" ")
            have[key.lower()] = value.strip()   # the most specific scope comes last
    for key, value in _REPO_CONFIG.items():
        if have.get(key, "").lower() not in _FALSE:
            git(root, "config", key, value)
    if fresh:
        return
    local = git(root, "config", "--local", "--get-regexp", r"^user\.(name|email)$", check=False).out.splitlines()
    if sorted(line.lower() for line in local) == sorted(f"{k} {v}" for k, v in FALLBACK_IDENTITY.items()):
        for key in FALLBACK_IDENTITY:
            git(root, "config", "--local", "--unset-all", key, check=False)


class HumanEdit(Value):
    path: str
    status: str            # modified | added | deleted
    problem: str | None    # why it cannot be committed (invalid entry), or None


class Vault(VaultReader):
    """An open vault: the reading side (``VaultReader``: settings, the catalog, entries, reads) plus the write
    machinery (ids, the repository lock, human edits, the journal and every commit)."""

    _lock_depth = 0
    _inproc = None    # acpmem.vault.gitlib.InProcess once opened; False when this vault needs the git executable
    asks_watcher = False   # a write's listings look at every file, as they always have (never a watcher's word)

    # ----------------------------------------------------------------- ids
    def new_id(self, taken: set[str] | None = None) -> str:
        """A fresh id: 6 random characters, after ``u-`` in the user vault (ids stay unique across the layers,
        ``acpmem.read.layers``); none of ``taken`` (default: this vault's ids) nor a prefix of one."""
        taken = taken if taken is not None else {e.id for e in self.load(with_reads=False, light=True).entries}
        self.user   # noqa: B018 - opening the user vault tells whether this vault is the user vault itself
        pre = layout.USER_ID_PREFIX if self.layer == layout.LAYER_USER else ""
        existing = {pre + p.name[len(pre):].split("-")[0].split(".")[0]
                    for d in (self.entries_dir, self.root / layout.PROPOSALS_DIR) for p in d.glob("*.md")
                    if p.name.startswith(pre)}
        for _ in range(1000):
            ident = pre + random_id(self.rng, 6)
            if ident not in taken and ident not in existing and not any(
                    t.startswith(ident) or ident.startswith(t) for t in taken):
                return ident
        raise AcpmemError("could not find a free entry id", "the vault is unusually full; report this")

    def path_for(self, ident: str, title: str, folder: str = layout.ENTRIES_DIR) -> str:
        """Where a new entry goes: ``entries/`` (or ``proposals/`` for a proposal), named by id and title."""
        slug = slugify(title)
        return f"{folder}/{ident}-{slug}.md" if slug else f"{folder}/{ident}.md"

    # ----------------------------------------------------------------- the lock
    @contextlib.contextmanager
    def lock(self, timeout: float | None = None) -> Iterator[None]:
        """The repository-level lock (``acpmem.infra.locks``, naming this process as its holder). Re-entrant
        within one Vault object."""
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        if not (self.root / ".git").exists():
            # never let git find a repository around the vault (a project the vault sits in) and write there
            raise no_repository(self.root)
        self.require_writable()
        self.ensure_state()
        timeout = self.settings.git.lock_timeout_seconds if timeout is None else timeout
        with locks.held(self.lock_path, timeout, what="the vault is locked by another acpmem process",
                        hint="retry later; `acp memory doctor` shows who holds it", record_pid=True):
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0

    @property
    def lock_path(self) -> Path:
        """The repository lock's file: in ``.git/``, so that deleting ``.acpmem/`` (derived state) while writers run
        never lets a second writer take a fresh lock beside the one still held; under ``.acpmem/locks/`` only where
        ``.git`` is not a folder (a linked worktree)."""
        gd = self.root / ".git"
        if gd.is_dir():
            return gd / REPO_FLOCK
        return self.state_dir / layout.LOCKS_DIR / REPO_LOCK

    def wait_for_index_lock(self) -> None:
        """A foreign .git/index.lock is waited for, within a bound, and never deleted. Our own stale one (a git
        child of ours was killed) is recognised by the marker we leave while git runs, and removed."""
        index_lock = self.root / ".git" / "index.lock"
        self.clear_own_leftovers()
        deadline = time.monotonic() + self.settings.git.foreign_lock_wait_seconds
        while index_lock.exists():
            if time.monotonic() > deadline:
                raise GitStateError(
                    f"git is busy: {index_lock} has existed for over "
                    f"{self.settings.git.foreign_lock_wait_seconds:.0f} s (someone is running git in the vault)",
                    "wait for that git command to finish; if none is running, delete the lock file yourself")
            time.sleep(0.05)

    def clear_own_leftovers(self) -> None:
        """Remove what a killed acpmem process left behind (call under the lock): its temp files; and, when the
        marker written while git runs names a process that is gone, git's lock files and empty or temporary
        object files from that moment. A file counts as ours only if nobody holds it open: a person's git started
        since then (or an orphaned git child of ours still finishing) keeps its files open."""
        for d in (self.root, self.entries_dir, self.root / layout.READS_DIR, self.root / layout.PROPOSALS_DIR,
                  self.root / layout.REVIEWS_DIR, self.state_dir, queue_home(self.state_dir),
                  queue_home(self.state_dir) / layout.PENDING_DIR):
            for p in stale_temp_files(d):
                p.unlink(missing_ok=True)
        marker = self.state_dir / layout.LOCKS_DIR / GIT_MARKER
        try:
            mark_m = marker.stat().st_mtime
        except FileNotFoundError:
            return
        if pid_alive(read_pid(marker)):
            return
        gd = self.root / ".git"
        candidates = [gd / "index.lock", gd / "HEAD.lock", gd / "objects" / "maintenance.lock",
                      *gd.glob("next-index-*.lock"), *(gd / "refs" / "heads").glob("*.lock"),
                      *(gd / "objects").glob("??/tmp_obj_*")]
        removed = 0
        for p in candidates:
            with contextlib.suppress(FileNotFoundError):
                if mark_m - 1 <= p.stat().st_mtime <= mark_m + 120 and not held_open(p):
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
        marker.unlink(missing_ok=True)   # its process is gone and its leftovers are cleared: the marker is done

    def setup_git(self, *, fresh: bool = False) -> None:
        """``setup_git`` once per clone (a marker under .acpmem remembers it)."""
        marker = self.state_dir / GIT_SETUP
        if read_exact(marker) == SETUP_VERSION:
            return
        setup_git(self.root, fresh=fresh)
        atomic_write(marker, SETUP_VERSION, durable=False)

    def identity_taken(self) -> None:
        """Say so (in ``warnings``, once) when a commit was just recorded with the fallback identity."""
        said = identity_warning(self.root)
        if took_fallback(self.root) and said not in self.warnings:
            self.warnings.append(said)

    @contextlib.contextmanager
    def _git_running(self) -> Iterator[None]:
        marker = self.state_dir / layout.LOCKS_DIR / GIT_MARKER
        try:
            for attempt in range(3):
                try:
                    marker.write_text(f"{os.getpid()}\n")
                    break
                except FileNotFoundError:   # .acpmem/ deleted meanwhile (derived state): made again
                    if attempt == 2:
                        raise
                    files.ensure_dir(marker.parent)
            yield
        finally:
            marker.unlink(missing_ok=True)

    def in_process(self):
        """The in-process git of the write path (``acpmem.vault.gitlib``), or None when this vault needs the ``git``
        executable (no pygit2, a post-commit hook, signed commits, …). Opened once per Vault."""
        if self._inproc is None:
            self.setup_git()
            try:
                self._inproc = gitlib.InProcess(self.root)
            except gitlib.Unusable:
                self._inproc = False
        return self._inproc or None

    def close(self) -> None:
        super().close()
        if self._inproc:
            self._inproc.repo.free()   # the packs and the index libgit2 keeps open
        self._inproc = None

    def _status(self) -> list[tuple[str, str]]:
        """(code, path) of every uncommitted change (``git status --porcelain`` codes)."""
        inproc = self.in_process()
        if inproc is not None:
            try:
                return inproc.status()
            except Unusable:
                pass
        res = git(self.root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
        return [(item[:2], item[3:]) for item in filter(None, res.out.split("\0"))]

    # ----------------------------------------------------------------- human edits
    def human_edits(self) -> list[HumanEdit]:
        """Uncommitted changes to the vault that acpmem did not make, each validated."""
        out: list[HumanEdit] = []
        journal = self._journal_paths()
        for code, rel in self._status():
            if rel in journal or rel.startswith(layout.STATE_DIRNAME + "/"):
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
        # read only as a regular file (``read_regular``): git calls a FIFO in place of a tracked file modified
        # (libgit2: deleted), and opening one waits for a writer for ever
        if rel.startswith((layout.ENTRIES_DIR + "/", layout.PROPOSALS_DIR + "/")) and rel.endswith(".md"):
            try:
                e = parse_entry_bytes(read_regular(p, MAX_FILE_BYTES + 1), rel, self.settings.types)
            except EntryInvalid as exc:   # the reason alone: the caller names the path ("not committed: PATH: …")
                return f"field '{exc.field}' {exc.reason}" if exc.field else exc.reason
            except OSError as exc:
                return f"cannot be read ({exc.strerror})"

            kind = secret_kind(e)  # what acpmem redacted itself does not count
            if kind:
                return f"contains what looks like a secret ({kind}); remove it before it is committed"
            why = self.id_problem(rel, e.id, self._committed_id(rel) if status == "modified" else None)
            if why:
                return why
        else:
            try:
                text = read_regular(p, sys.maxsize).decode("utf-8", errors="replace")
            except OSError as exc:
                return f"cannot be read ({exc.strerror})"
            if has_conflict_markers(text):
                return CONFLICT_REASON
            if rel == layout.SETTINGS_FILE:
                try:
                    vault_settings(self.root, None)
                except SettingsError as exc:
                    return exc.message.removeprefix(f"{self.root / rel}: ").removeprefix(f"{rel}: ")
        return None

    def id_problem(self, rel: str, new_id: str, old_id: str | None) -> str | None:
        """Why the entry file ``rel`` may not carry ``new_id``, or None — the one check of an id a person wrote, for
        `acp memory edit` and for hand edits committed as human edits alike: an entry's id (``old_id``: what the
        file had) never changes, since citations and supersede chains refer to it; a new file (or one that did
        not parse) may not take an id another file has."""
        if old_id is not None:
            if new_id != old_id:
                return f"field 'id' must stay '{old_id}' (ids are stable; citations refer to them)"
            return None
        loaded = self.load(with_reads=False, light=True)
        if any(e.path == rel and e.id == new_id for e in loaded.entries):
            return None   # of two new files with one id, the index keeps the one changed first: so does this check
        clash = [e.path for e in loaded.entries if e.id == new_id and e.path != rel]
        clash += [p.path for p in loaded.problems if p.field == "id" and p.path != rel
                  and p.reason.startswith(f"duplicate id '{new_id}'")]
        if clash:
            return f"field 'id': '{new_id}' is already the id of {clash[0]}"
        return None

    def _committed_id(self, rel: str) -> str | None:
        """The id of the entry file ``rel`` as HEAD has it, or None (not committed, or not a valid entry there)."""
        data: bytes | None = None
        inproc = self.in_process()
        if inproc is not None:
            try:
                data = inproc.head_file(rel)
            except Unusable:
                inproc = None
        if inproc is None:
            res = git(self.root, "show", f"HEAD:{rel}", check=False)
            data = res.out.encode("utf-8", "surrogateescape") if res.code == 0 else None
        if data is None:
            return None
        try:
            return parse_entry_bytes(data, rel, None).id
        except (EntryInvalid, ValueError):
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
    @property
    def journal_path(self) -> Path:
        """Where a change is described before its files are written (``recover`` finishes it): beside the request
        queue in the vault's git folder (``.git/acpmem/journal.json``), never in ``.acpmem/``, which a person may
        delete at any moment: a journal lost between a fork's files and its commit would write the entries twice."""
        return queue_home(self.state_dir) / JOURNAL

    def pending_journal(self) -> Path | None:
        """The journal of an interrupted change, where it is (one an older acpmem left in ``.acpmem/`` included),
        or None."""
        if os.path.lexists(self.journal_path):
            return self.journal_path
        return self._old_journal()

    def _old_journal(self) -> Path | None:
        """The journal an older acpmem left in ``.acpmem/``, or None — and None for one git tracks: that came with
        a commit (a teammate's ``git add -f``, taken in by a plain ``git pull``), and replaying it would commit
        their files under this person's name (``doctor`` names it). Where git cannot say, it is not taken."""
        old = self.state_dir / JOURNAL
        if old == self.journal_path or not os.path.lexists(old):
            return None
        rel = os.path.relpath(old, self.root)
        return old if gitlib.tracked_under(self.root, rel) == [] else None

    def _adopt_old_journal(self) -> None:
        """Move the journal an older acpmem left in ``.acpmem/`` to where it lives now (under the lock; never over
        a journal there: that one is finished first, and this one on the next write)."""
        old, new = self._old_journal(), self.journal_path
        if old is None or os.path.lexists(new):
            return
        with contextlib.suppress(FileNotFoundError, NotRegularFile):   # a FIFO across file systems stays
            move_durably(old, new, JOURNAL_MAX_BYTES)

    def _journal_paths(self) -> set[str]:
        jp = self.pending_journal()
        if jp is None:
            return set()
        try:
            j = json.loads(read_regular(jp, JOURNAL_MAX_BYTES))
            return set(j.get("writes", {})) | set(j.get("deletes", []))
        except (OSError, ValueError, AttributeError, TypeError):
            return set()

    def recover(self) -> str | None:
        """Finish a change that a killed process left half-done, exactly once (call under the lock). Returns the
        commit it made, or None; what it decided otherwise is said in ``self.warnings``.

        The journal names the change (``Acpmem-Journal`` trailer) and holds the hash of every file before and after
        it. Its commit found in the history: the change is done, the journal is removed and no file is touched (what
        a person edited or committed since stays). Not found: it is replayed only when every file still holds what
        the journal expects (its old or its new content); a file that holds anything else was changed by someone
        since, and that change wins — the files this change had written already are put back, and the journal is
        dropped with a note (a fork request stays pending and is extracted again). A journal that is not one acpmem
        writes is set aside (``journal.json.bad-TIME``) with its path said, never replayed."""
        self._adopt_old_journal()
        jp = self.journal_path
        try:
            raw = read_regular(jp, JOURNAL_MAX_BYTES)
        except FileNotFoundError:
            return None
        except NotRegularFile as exc:   # a FIFO would hang the read: set aside like any journal acpmem did not write
            raw = exc
        except OSError as exc:
            raise storage_error(exc, "the interrupted change is kept pending") from None
        try:
            if isinstance(raw, NotRegularFile):
                raise BadJournal(raw.strerror)
            j = parse_journal(raw, self.root)
        except BadJournal as exc:
            aside = jp.with_name(f"{JOURNAL}.bad-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}")
            os.replace(jp, aside)
            self.recovery = "set aside"
            self.warnings.append(f"set aside the malformed journal {jp} ({exc}) as {aside}; nothing of it was "
                                 "replayed")
            return None
        ident = j.get("id")
        if ident and self._committed_journal(ident):
            jp.unlink(missing_ok=True)   # killed after its commit: done, and newer changes stay as they are
            self.recovery = "already committed"
            return None
        changed = []
        for rel in list(j["writes"]) + list(j["deletes"]):
            cur = file_hash(self.root / rel)
            after = j["after"].get(rel, UNKNOWN)
            before = j["before"].get(rel, UNKNOWN)
            if cur == after or cur == before:
                continue
            if before is UNKNOWN and (cur is None if rel in j["writes"] else cur == self._head_hash(rel)):
                continue   # an older journal (no hashes): a file not written yet, one still as committed
            changed.append(rel)
        if changed:
            self._undo(j)
            jp.unlink(missing_ok=True)
            self.warnings.append(
                f"dropped an interrupted change ({_one_line(j['subject'])[:80]}): "
                f"{', '.join(changed[:3])}{' …' if len(changed) > 3 else ''} changed since it was killed, and that "
                "change is kept")
            self.recovery = "dropped"
            return None
        for rel, text in j["writes"].items():
            if file_hash(self.root / rel) != j["after"].get(rel):
                atomic_write(inside(self.root, rel), text)
        for rel in j["deletes"]:
            with contextlib.suppress(FileNotFoundError):
                inside(self.root, rel).unlink()
        trailers = dict(j["trailers"])
        if ident:
            trailers[JOURNAL_TRAILER] = ident
        sha = self._commit(list(j["writes"]) + list(j["deletes"]), j["subject"], j["why"], trailers,
                           fold_reads=True, regen=True)
        jp.unlink(missing_ok=True)
        self.recovery = "replayed"
        return sha

    recovery: str | None = None   # what the last ``recover`` did: replayed, already committed, dropped, set aside

    def journal_problem(self) -> str | None:
        """Why the pending journal cannot be replayed as it is (malformed), or None (none, or a sound one)."""
        jp = self.pending_journal()
        if jp is None:
            return None
        try:
            parse_journal(read_regular(jp, JOURNAL_MAX_BYTES), self.root)
        except NotRegularFile as exc:
            return exc.strerror
        except OSError:
            return None
        except BadJournal as exc:
            return str(exc)
        return None

    def finish_interrupted(self) -> str | None:
        """Take the lock and finish (or drop) what a killed process left half-done (``recover``): before an
        operation decides whether its own work was already done (a fork request's commit, a consolidate cluster)."""
        if self.pending_journal() is None or self.read_only or not (self.root / ".git").exists():
            return None
        with self.lock():
            if (self.root / ".git" / "MERGE_HEAD").exists():
                return None
            self.wait_for_index_lock()
            return self.recover()

    def _committed_journal(self, ident: str) -> bool:
        res = git(self.root, "log", "--format=%H", "-n1", f"--grep=^{JOURNAL_TRAILER}: {ident}$", check=False)
        return res.code == 0 and bool(res.out.strip())

    def _head_blob(self, rel: str) -> bytes | None:
        """The bytes HEAD holds at ``rel``, or None."""
        env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
        env.update(LC_ALL="C", GIT_OPTIONAL_LOCKS="0")
        p = subprocess.run(["git", "-C", str(self.root), "cat-file", "blob", f"HEAD:{rel}"], capture_output=True,
                           env=env, stdin=subprocess.DEVNULL)
        return p.stdout if p.returncode == 0 else None

    def _head_hash(self, rel: str) -> str | None:
        blob = self._head_blob(rel)
        return None if blob is None else hash_bytes(blob)

    def _undo(self, j: dict) -> None:
        """Put back the files an interrupted, dropped change had already written (those that hold its new content):
        to their old content where HEAD has it, removed where they did not exist before."""
        for rel in list(j["writes"]) + list(j["deletes"]):
            p = self.root / rel
            before = j["before"].get(rel, UNKNOWN)
            if before is UNKNOWN or file_hash(p) != j["after"].get(rel, UNKNOWN) or before == j["after"][rel]:
                continue
            if before is None:
                p.unlink(missing_ok=True)
                continue
            blob = self._head_blob(rel)
            if blob is not None and hash_bytes(blob) == before:
                atomic_write(inside(self.root, rel), blob)

    def apply(self, writes: dict[str, str], deletes: list[str], *, subject: str, why: str, kind: str,
              trailers: dict[str, str] | None = None, check: Callable[["Vault"], None] | None = None) -> str:
        """Write and delete files and record it all in one commit. Returns the commit id.

        ``check`` runs under the lock, after human edits are committed and before anything is written; it may
        raise to refuse the change (e.g. the entry it updates has changed meanwhile)."""
        for rel in list(writes) + list(deletes):
            inside(self.root, rel)
        trailers = {"Acpmem-Kind": kind, **(trailers or {})}
        journaled = False
        try:
            with self.lock():
                blocked = writes_blocked(self.root)   # a merge, a rebase, a detached HEAD: a commit would be lost
                if blocked is not None:
                    raise blocked
                self.wait_for_index_lock()
                self.recover()
                self.commit_human_edits()
                if check is not None:
                    check(self)
                ident = os.urandom(8).hex()
                paths = list(writes) + list(deletes)
                journal = {"version": 2, "id": ident, "writes": writes, "deletes": list(deletes),
                           "subject": subject, "why": why, "trailers": trailers,
                           "before": {rel: file_hash(self.root / rel) for rel in paths},
                           "after": {**{rel: None for rel in deletes},
                                     **{rel: hash_bytes(text.encode("utf-8")) for rel, text in writes.items()}}}
                trailers = {**trailers, JOURNAL_TRAILER: ident}
                atomic_write(self.journal_path, json.dumps(journal, ensure_ascii=False))
                journaled = True
                for rel, text in writes.items():
                    atomic_write(self.root / rel, text)
                for rel in deletes:
                    with contextlib.suppress(FileNotFoundError):
                        (self.root / rel).unlink()
                sha = self._commit(list(writes) + list(deletes), subject, why, trailers, fold_reads=True,
                                   regen=True)
                self.journal_path.unlink(missing_ok=True)
                return sha
        except (OSError, sqlite3.OperationalError) as exc:
            if not isinstance(exc, OSError) and "full" not in str(exc):
                raise
            raise storage_error(exc, "the change is kept pending and is finished by the next write or `acp memory "
                                      "doctor --fix` once the vault can be written" if journaled
                                 else "nothing was changed") from None

    def _commit(self, paths: list[str], subject: str, why: str, trailers: dict[str, str], *, fold_reads: bool,
                regen: bool) -> str | None:
        paths = list(dict.fromkeys(paths))
        claimed = None
        if fold_reads:
            folded = readlog.fold(self.root, self.state_dir)
            if folded:
                rel, text, claimed = folded
                atomic_write(inside(self.root, rel), text)  # reads/ could be a symlink out of a cloned vault
                paths.append(rel)
        if regen:
            snap = self.load(with_reads=False, light=True)  # MEMORY.md needs the index fields only
            text = memory_md(snap.entries, self.settings)
            mp = self.root / layout.MEMORY_FILE
            if read_exact(mp) != text:   # a FIFO there is replaced, never read (read_exact: regular files)
                atomic_write(mp, text, durable=False)
            paths.append(layout.MEMORY_FILE)  # also when unchanged on disk: a killed commit can leave it uncommitted
        trailer_text = "".join(f"{k}: {_one_line(v)}\n" for k, v in trailers.items() if v not in (None, ""))
        message = f"acpmem: {trailers.get('Acpmem-Kind', 'change')}: {_one_line(subject)}\n\n{why.strip()}\n\n" \
                  f"{trailer_text}"
        self.setup_git()
        # Idempotent, so that replaying a journal finishes whatever part of the change git already has: a file on
        # disk is added (again); a file gone from disk is committed as deleted only while git still knows it (in
        # the index or in HEAD) — a deletion already staged needs no add, one already committed nothing at all.
        on_disk = [p for p in paths if os.path.lexists(self.root / p)]
        gone = [p for p in paths if p not in set(on_disk)]
        with self._git_running():
            if gone:
                known = self._known_to_git(gone)
                gone = [p for p in gone if p in known]
            inproc = self.in_process() if on_disk or gone else None
            if inproc is not None:
                try:
                    sha = inproc.commit(on_disk, gone, message)
                except Unusable:
                    pass   # the git executable below finishes what was started (every step is idempotent)
                else:
                    if claimed:
                        claimed.unlink(missing_ok=True)
                    return sha
            if not on_disk and not gone:
                res = None
            else:
                if on_disk:
                    added = self._git_waiting("add", "-A", "--", *on_disk)
                    if added.code != 0:
                        raise failure(self.root, ("add",), added)
                commit = ("commit", "-q", "--no-verify", "-F", "-", "--", *on_disk, *gone)
                res = self._git_waiting(*commit, input=message)   # the fallback identity if need be
                self.identity_taken()
            if res is None or res.code != 0:
                if res is None or "nothing to commit" in res.out + res.err or "no changes added" in res.out + res.err:
                    if claimed:
                        claimed.unlink(missing_ok=True)
                    return None
                raise failure(self.root, ("commit",), res)
        if claimed:
            claimed.unlink(missing_ok=True)
        return self.head()

    def _git_waiting(self, *args: str, input: str | None = None):
        """``git ARGS`` (unchecked), run again while it fails on a ``.git/index.lock`` that is not ours — a person's
        git started after ``wait_for_index_lock`` looked — for up to ``[git] foreign_lock_wait_seconds``, as that
        check waits; never deleting the lock."""
        deadline = None
        index_lock = self.root / ".git" / "index.lock"
        while True:
            res = git(self.root, *args, input=input, check=False)
            said = res.err + res.out
            if res.code == 0 or "index.lock" not in said:
                return res
            if "File exists" not in said and not index_lock.exists():
                return res   # the lock could not be made at all (a full disk): no one's git to wait for
            now = time.monotonic()
            deadline = deadline if deadline is not None else now + self.settings.git.foreign_lock_wait_seconds
            if now > deadline:
                return res
            while index_lock.exists() and time.monotonic() <= deadline:
                time.sleep(0.05)

    def _known_to_git(self, paths: list[str]) -> set[str]:
        """Which of ``paths`` are in the index or in HEAD (what ``git commit -- PATHS`` accepts)."""
        res = git(self.root, "ls-files", "-z", "--with-tree=HEAD", "--", *paths, check=False)
        if res.code != 0:  # no HEAD yet
            res = git(self.root, "ls-files", "-z", "--", *paths)
        return set(filter(None, res.out.split("\0")))

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
            if has_conflict_markers(writes[rel]):  # it would be refused when read: never written
                raise EntryInvalid(rel, None, CONFLICT_REASON, "indent or remove the marker lines")
        for e in updates or ():
            writes[e.path] = dump_entry(e) if e.raw is not None else ""  # without its text: built under the lock
        for rel, text in writes.items():   # what acpmem writes must read back as a valid entry of this vault
            if text:
                parse_entry_bytes(text.encode("utf-8", "surrogatepass"), rel, self.settings.types)
        originals = {e.path: e for e in updates or ()}

        def unchanged_since_read(v: "Vault") -> None:
            for rel, e in originals.items():
                cur = read_exact(v.root / rel)
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
                    # a supersede another writer set meanwhile (an overlapping consolidate or fork write) is a
                    # change too: this one would mark the entry a second time
                    if same and disk.superseded_by not in (None, e.superseded_by):
                        same = False
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
        return self.replace_file_text(entry.path, text, subject=subject, why=why, kind=kind, entry_id=entry.id,
                                      base=entry.raw if base is None else base)

    def replace_file_text(self, rel: str, text: str, *, subject: str, why: str, kind: str, entry_id: str,
                          base: str | None) -> str:
        """Commit new text for the entry file ``rel`` — also one that does not parse yet, which this repairs. If the
        file no longer holds ``base`` once the lock is taken, the change is refused rather than overwriting the other
        change."""
        def unchanged_since_read(v: "Vault") -> None:
            if read_exact(v.root / rel) != base:
                raise AcpmemError(f"{rel} changed while acpmem was updating it",
                                  "run the command again; the other change was kept")

        return self.apply({rel: text}, [], subject=subject, why=why, kind=kind, trailers={"Acpmem-Entry": entry_id},
                          check=unchanged_since_read if base is not None else None)


def storage_error(exc: Exception, outcome: str) -> AcpmemError:
    full = getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or "full" in str(exc)
    what = "the disk is full" if full else f"the vault cannot be written ({getattr(exc, 'strerror', None) or exc})"
    return AcpmemError(f"{what}: {outcome}", "free some space (or fix the file system), then run the command again")


def _one_line(value: object) -> str:
    return re.sub(r"\s+", " ", str(value)).strip()
