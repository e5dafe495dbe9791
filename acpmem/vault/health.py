"""``acp memory doctor``: check every entry, the git state, locks, pending work and the derived index; with ``fix``,
repair what is safe — finish an interrupted change, commit valid human edits, remove what a killed acpmem process
left (never a lock a live process holds), drop empty object files a crash left, rebuild a corrupt index.
"""
from __future__ import annotations

import os
from pathlib import Path

from acpmem.core.errors import AcpmemError
from acpmem.core.values import Value
from acpmem.infra import locks
from acpmem.infra.files import disk_full
from acpmem.vault.gitrun import git, index_corrupt, no_repository, writes_blocked
from acpmem.vault.writer import Vault


class Finding(Value):
    level: str      # error | warning | info | fixed
    what: str
    fix: str | None = None
    layer: str = "project"   # the vault it is about: project, or user (``acpmem.write.checkup``)

    def to_json(self) -> dict:
        return {"level": self.level, "what": self.what, "fix": self.fix, "layer": self.layer}


class Report(Value):
    findings: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        return not any(f.level == "error" for f in self.findings)


def git_problems(root: Path) -> list[str]:
    """What is wrong with the vault's git repository: not one, an operation in progress, no HEAD, fsck errors."""
    problems = []
    if not (root / ".git").exists():
        return [no_repository(root).message]
    for name in ("MERGE_HEAD", "REBASE_HEAD", "CHERRY_PICK_HEAD"):
        if (root / ".git" / name).exists():
            problems.append(f"a git {name.split('_')[0].lower()} is in progress")
    if (root / ".git" / "rebase-merge").exists() or (root / ".git" / "rebase-apply").exists():
        problems.append("a git rebase is in progress")
    blocked = writes_blocked(root)
    if blocked is not None and "detached HEAD" in blocked.message:
        problems.append(f"{blocked.message}; writes are refused and pending requests wait")
    if git(root, "rev-parse", "--verify", "-q", "HEAD", check=False).code != 0:
        problems.append("HEAD does not point to a commit")
    res = git(root, "fsck", "--no-dangling", "--no-progress", check=False)
    if res.code != 0:
        problems.append("git fsck: " + (res.err.strip() or res.out.strip()).splitlines()[0])
    return problems


def _crash_objects(objects: Path) -> list[Path]:
    """Loose object files a killed git left: empty (never valid) or temporary."""
    return [p for p in objects.glob("??/*") if p.is_file() and p.stat().st_size == 0] + \
        list(objects.glob("??/tmp_obj_*"))


def doctor(vault: Vault, *, fix: bool = False, more=()) -> Report:
    """Check every entry, the git state, locks, pending work and the derived index; with ``fix``, repair what
    is safe: finish an interrupted change, commit valid human edits, remove our own stale locks, drop empty
    object files a crash left behind, rebuild a corrupt git index or derived index. During a sync merge nothing is
    committed or staged: the files left to resolve are named. ``more``: further checks ``check(vault, add)``."""
    found: list[Finding] = []

    def add(level: str, what: str, fix_: str | None = None) -> None:
        found.append(Finding(level, what, fix_))

    root = vault.root
    if not (root / ".git").exists():
        if fix:
            raise no_repository(root)   # nothing to repair without the repository: the one line every write gives
        err = no_repository(root)
        add("error", err.message, err.hint)
        _check_entries(vault, add, set())
        return Report(tuple(found))
    full = _check_disk(vault, add)
    holder = locks.holder(vault.lock_path)
    if holder is not None:
        add("warning", f"the vault lock is held right now by process {holder or '?'}", "wait for it to finish")
    index_lock = root / ".git" / "index.lock"
    objects = root / ".git" / "objects"
    journal = vault.pending_journal()
    merging = (root / ".git" / "MERGE_HEAD").exists()
    repaired = not fix
    if fix:
        try:
            _fix(vault, add, objects, journal, merging)
            repaired = True
        except (AcpmemError, OSError) as exc:   # a full disk above all: said, and the checks below still run
            if isinstance(exc, OSError):
                from acpmem.vault.writer import storage_error

                exc = storage_error(exc, "nothing more was repaired")
            if not exc.message.startswith(("the disk is full", "the vault cannot be written")):
                raise exc from None   # read-only, locked, …: the one line every write gives
            if not (full and "disk is full" in exc.message):
                add("error", exc.message, exc.hint)
    else:
        if index_lock.exists():
            add("error", ".git/index.lock exists (a git command is running, or one was killed)",
                "let a running git finish; `acp memory doctor --fix` removes it if a killed acpmem process left "
                "it, otherwise delete it yourself once no git runs")
        junk = _crash_objects(objects)
        if junk:
            add("error", f"{len(junk)} empty or temporary git object file(s) left by a crash",
                "run `acp memory doctor --fix`")
        if journal is not None:
            bad = vault.journal_problem()
            if bad:
                add("error", f"the journal of an interrupted change {journal} is malformed ({bad})",
                    "run `acp memory doctor --fix` to set it aside (nothing of it is replayed)")
            else:
                add("error", "a change was interrupted before its commit (a journal is pending)",
                    "run `acp memory doctor --fix` to finish it")
    for w in vault.warnings:
        if not (full and w.startswith("the disk holding")):   # said once, above, with the next step
            add("warning", w)
    vault.warnings.clear()
    corrupt = index_corrupt(root)
    if corrupt:
        add("error", f"the vault's git index {root / '.git' / 'index'} is corrupt",
            "run `acp memory doctor --fix` to rebuild it from the last commit (every file in the folder is kept)")
    to_resolve: set[str] = set()
    if merging and not corrupt:
        from acpmem.vault.sync import unresolved

        left = unresolved(vault)
        to_resolve = set(left)
        if left:
            todo = []
            if "markers" in left.values():
                todo.append("keep what is right in each file and delete the conflict marker lines ('<<<<<<<', "
                            "'=======', '>>>>>>>')")
            if "deleted" in left.values():
                todo.append(f"a file deleted on one side needs `git -C {root} add FILE` (keep) or "
                            f"`git -C {root} rm FILE` (drop)")
            add("error", "a sync is in progress: edit these files, then `acp memory sync`: " + ", ".join(left),
                "; ".join(todo) + f"; or back out with `git -C {root} merge --abort`")
        else:
            add("error", "a sync is in progress and its conflicts are resolved",
                "run `acp memory sync` to finish the merge and push it")
    elif (not fix or not repaired) and not corrupt:   # not repaired: what is still to do is said
        for h in vault.human_edits():
            if h.problem:
                add("error", f"uncommitted human edit {h.path} is invalid: {h.problem}",
                    f"fix the file, or `git -C {root} checkout -- {h.path}` to drop the edit")
            else:
                add("warning", f"uncommitted human edit: {h.path} ({h.status})",
                    "it is committed before acpmem's next commit, or now with `acp memory doctor --fix`")
    for p in git_problems(root):
        if merging and p == "a git merge is in progress":
            continue  # said above, with the files and the next step
        blocked = writes_blocked(root) if "detached HEAD" in p else None
        add("error", p, blocked.hint if blocked is not None else
            "resolve it with git in the vault folder, then run `acp memory doctor` again")
    _check_entries(vault, add, to_resolve)
    for w in vault.warnings:   # what reading the entries found (the index could not be updated on a full disk)
        if not (full and w.startswith("the disk holding")):
            add("warning", w)
    vault.warnings.clear()
    _check_watcher(vault, add)
    _check_embeddings(vault, add)
    _check_rerank(vault, add)
    for check in more:   # the layers above add theirs (pending extraction requests: acpmem.write.checkup)
        check(vault, add)
    return Report(tuple(found))


def _fix(vault: Vault, add, objects: Path, journal: Path | None, merging: bool) -> None:
    """``doctor --fix``'s repairs, under the lock."""
    root = vault.root
    with vault.lock():
        vault.clear_own_leftovers()  # our own stale git locks, temp files and half-written objects
        for w in vault.warnings:
            add("fixed", w)
        vault.warnings.clear()
        junk = _crash_objects(objects)
        for p in junk:  # an empty loose object is never valid: git would read it as corrupt
            p.unlink(missing_ok=True)
        if junk:
            add("fixed", f"removed {len(junk)} empty or temporary git object file(s) left by a crash")
        try:
            vault.wait_for_index_lock()
        except AcpmemError as exc:
            add("error", exc.message, exc.hint)
        else:
            if index_corrupt(root):
                add("fixed", _rebuild_index(root))
            blocked = writes_blocked(root)
            if merging:
                pass  # a merge is committed by `sync` once its files are resolved, never here
            elif blocked is not None:   # a rebase, a detached HEAD: a commit now would be lost; said below
                pass
            else:
                if journal is not None:
                    sha = vault.recover()
                    how = {"already committed": " (its commit existed already; its journal is removed)",
                           "dropped": " by dropping it (a file it changes was changed since; see the warning)",
                           "set aside": " by setting its malformed journal aside (see the warning)"}
                    add("fixed", f"finished an interrupted change{' as commit ' + sha[:12] if sha else ''}"
                                 f"{how.get(vault.recovery, '')}")
                edits_before = [h for h in vault.human_edits() if h.problem is None]
                sha = vault.commit_human_edits()
                if sha:
                    add("fixed", f"committed {len(edits_before)} human edit(s) as {sha[:12]}")


def _check_disk(vault: Vault, add) -> bool:
    """A full disk, said first and plainly: nothing can be written, reads go on from the files. True when full."""
    seen, full = set(), False
    for path in (vault.root, vault.state_dir):
        try:
            st = os.statvfs(path)
            dev = os.stat(path).st_dev
        except OSError:
            continue
        if dev in seen:
            continue
        seen.add(dev)
        if disk_full(path):
            full = True
            left = "no inodes" if st.f_files and st.f_favail == 0 else f"{st.f_bavail * st.f_frsize // 1024} KB"
            add("error", f"the disk is full: the file system holding {path} has {left} free — writes, requests "
                         "and index updates there fail (entries are still read from their files)",
                f"free some space on it, then run `acp memory doctor` again (`df -h {path}` shows it)")
    return full


def _check_entries(vault: Vault, add, reported: set[str]) -> None:
    loaded = vault.load()  # a corrupt derived cache is rebuilt there; a busy one is left alone
    for prob in loaded.problems:
        if prob.path in reported:
            continue
        fix = f"remove it (rm {vault.root / prob.path})" if "not a regular file" in prob.reason else \
            f"fix it with `acp memory edit {prob.path}` (or any editor) — it is kept out of the index until then"
        add("error", f"{prob.path}: {('field ' + repr(prob.field) + ' ') if prob.field else ''}{prob.reason}", fix)
    add("info", f"{len(loaded.entries)} valid entries, {len(loaded.problems)} invalid file(s)")


def _rebuild_index(root: Path) -> str:
    """Replace a corrupt .git/index with one read from HEAD (call under the lock, with no index.lock). The files
    in the folder are untouched: what was staged shows as changed again and is committed as a human edit."""
    index = root / ".git" / "index"
    aside = root / ".git" / "index.corrupt"
    index.replace(aside)
    if git(root, "rev-parse", "--verify", "-q", "HEAD", check=False).code == 0:
        git(root, "read-tree", "HEAD")
    return f"rebuilt the corrupt git index from the last commit (the old one is kept as {aside})"


def _check_embeddings(vault: Vault, add) -> None:
    """The embedding channel, when on: the endpoint answers (one short probe), and how many entries lack vectors."""
    if not vault.settings.embeddings.model:
        return
    from acpmem.vault.embedding import channel_status

    st = channel_status(vault)
    where = f"model {st['model']} at {st['base_url']}"
    if not st["reachable"]:
        add("warning", f"the embeddings endpoint ({where}) does not answer: {st['error']}; recall is lexical "
                       "meanwhile", "check [embeddings] base_url, model and the key in the variable api_key_env names")
    else:
        add("info", f"the embeddings endpoint ({where}) answers")
    if st["missing"]:
        add("info", f"{st['missing']} of {st['present'] + st['missing']} entries have no vector of {st['model']} yet "
                    "(the background pass makes them; the next recall starts it)")
    else:
        add("info", f"all {st['present']} entries have a vector of {st['model']}")


def _check_rerank(vault: Vault, add) -> None:
    """The rerank stage, when on: the endpoint answers (one short probe)."""
    if not vault.settings.rerank.model:
        return
    from acpmem.vault.reranking import status

    st = status(vault.settings)
    where = f"model {st['model']} at {st['base_url'] or '(no base_url)'}"
    if st["reachable"]:
        add("info", f"the rerank endpoint ({where}) answers; recall reorders its best {st['candidates']} with it")
    else:
        add("warning", f"the rerank endpoint ({where}) does not answer: {st['error']}; recall keeps its own order "
                       "meanwhile", "check [rerank] base_url, model and the key in the variable api_key_env names")


def _check_watcher(vault: Vault, add) -> None:
    """The search index's watcher (``acpmem.search.watch``): running or not, and whether it answers."""
    from acpmem.search import watch

    pid = watch.running_pid(vault.state_dir)
    if pid is None:
        if watch.enabled(vault.settings):
            add("info", "no index watcher is running (recall checks every entry file; one starts by itself "
                        f"from {vault.settings.index.watch_min_entries} entries on)")
        return
    if watch.sync(vault.state_dir, vault.db_path, timeout=10.0):
        add("info", f"the index watcher (process {pid}) is running and answers")
    else:
        add("warning", f"the index watcher (process {pid}) does not answer; recall checks every file meanwhile",
            f"see {vault.state_dir / watch.LOG}; `kill {pid}` stops it, the next recall starts another")
