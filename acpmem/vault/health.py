"""``acp memory doctor``: check every entry, the git state, locks, pending work and the derived index; with ``fix``,
repair what is safe — finish an interrupted change, commit valid human edits, remove what a killed acpmem process
left (never a lock a live process holds), drop empty object files a crash left, rebuild a corrupt index.
"""
from __future__ import annotations

from pathlib import Path

from acpmem.core.errors import AcpmemError
from acpmem.core.values import Value
from acpmem.infra import locks
from acpmem.vault.gitrun import git
from acpmem.vault.writer import Vault


class Finding(Value):
    level: str      # error | warning | info | fixed
    what: str
    fix: str | None = None

    def to_json(self) -> dict:
        return {"level": self.level, "what": self.what, "fix": self.fix}


class Report(Value):
    findings: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        return not any(f.level == "error" for f in self.findings)


def git_problems(root: Path) -> list[str]:
    """What is wrong with the vault's git repository: not one, an operation in progress, no HEAD, fsck errors."""
    problems = []
    if not (root / ".git").is_dir():
        return [f"{root} is not a git repository"]
    for name in ("MERGE_HEAD", "REBASE_HEAD", "CHERRY_PICK_HEAD"):
        if (root / ".git" / name).exists():
            problems.append(f"a git {name.split('_')[0].lower()} is in progress")
    if (root / ".git" / "rebase-merge").exists() or (root / ".git" / "rebase-apply").exists():
        problems.append("a git rebase is in progress")
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
    object files a crash left behind, rebuild the index. ``more``: further checks ``check(vault, add)`` to run."""
    found: list[Finding] = []

    def add(level: str, what: str, fix_: str | None = None) -> None:
        found.append(Finding(level, what, fix_))

    root = vault.root
    holder = locks.holder(vault.lock_path)
    if holder is not None:
        add("warning", f"the vault lock is held right now by process {holder or '?'}", "wait for it to finish")
    index_lock = root / ".git" / "index.lock"
    objects = root / ".git" / "objects"
    journal = vault.journal_path
    if fix:
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
                if journal.exists():
                    sha = vault.recover()
                    add("fixed", f"finished an interrupted change{' as commit ' + sha[:12] if sha else ''}")
                edits_before = [h for h in vault.human_edits() if h.problem is None]
                sha = vault.commit_human_edits()
                if sha:
                    add("fixed", f"committed {len(edits_before)} human edit(s) as {sha[:12]}")
    else:
        if index_lock.exists():
            add("error", ".git/index.lock exists (a git command is running, or one was killed)",
                "let a running git finish; `acp memory doctor --fix` removes it if a killed acpmem process left "
                "it, otherwise delete it yourself once no git runs")
        junk = _crash_objects(objects)
        if junk:
            add("error", f"{len(junk)} empty or temporary git object file(s) left by a crash",
                "run `acp memory doctor --fix`")
        if journal.exists():
            add("error", "a change was interrupted before its commit (a journal is pending)",
                "run `acp memory doctor --fix` to finish it")
    for w in vault.warnings:
        add("warning", w)
    vault.warnings.clear()
    if not fix:
        for h in vault.human_edits():
            if h.problem:
                add("error", f"uncommitted human edit {h.path} is invalid: {h.problem}",
                    f"fix the file, or `git -C {root} checkout -- {h.path}` to drop the edit")
            else:
                add("warning", f"uncommitted human edit: {h.path} ({h.status})",
                    "it is committed before acpmem's next commit, or now with `acp memory doctor --fix`")
    for p in git_problems(root):
        add("error", p, "resolve it with git in the vault folder, then run `acp memory doctor` again")
    loaded = vault.load()  # a corrupt derived cache is rebuilt there; a busy one is left alone
    for prob in loaded.problems:
        add("error", f"{prob.path}: {('field ' + repr(prob.field) + ' ') if prob.field else ''}{prob.reason}",
            f"fix it with `acp memory edit {prob.path}` (or any editor) — it is kept out of the index until then")
    add("info", f"{len(loaded.entries)} valid entries, {len(loaded.problems)} invalid file(s)")
    _check_watcher(vault, add)
    for check in more:   # the layers above add theirs (pending extraction requests: acpmem.write.checkup)
        check(vault, add)
    return Report(tuple(found))


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
