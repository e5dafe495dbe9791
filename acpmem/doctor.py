"""``acp memory doctor``: check every entry, the git state, locks, pending work and the derived index; with ``fix``,
repair what is safe — finish an interrupted change, commit valid human edits, remove what a killed acpmem process
left (never a lock a live process holds), drop empty object files a crash left, rebuild a corrupt index.
"""
from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass, field

from acpmem.errors import AcpmemError
from acpmem.vault import Vault


@dataclass
class Finding:
    level: str      # error | warning | info | fixed
    what: str
    fix: str | None = None

    def to_json(self) -> dict:
        return {"level": self.level, "what": self.what, "fix": self.fix}


@dataclass
class DoctorReport:
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.level == "error" for f in self.findings)

    def add(self, level: str, what: str, fix: str | None = None) -> None:
        self.findings.append(Finding(level, what, fix))


def doctor(vault: Vault, *, fix: bool = False) -> DoctorReport:
    """Check every entry, the git state, locks, pending work and the derived index; with ``fix``, repair what
    is safe: finish an interrupted change, commit valid human edits, remove our own stale locks, drop empty
    object files a crash left behind, rebuild the index."""
    rep = DoctorReport()
    root = vault.root
    # the repository lock
    lock_path = vault.state_dir / "locks" / "repo.lock"
    if lock_path.exists():
        fd = os.open(lock_path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                holder = lock_path.read_text().strip() or "?"
                rep.add("warning", f"the vault lock is held right now by process {holder}", "wait for it to finish")
        finally:
            os.close(fd)
    index_lock = root / ".git" / "index.lock"
    objects = root / ".git" / "objects"
    journal = vault.state_dir / "journal.json"
    if fix:
        with vault.lock():
            vault._clear_own_leftovers()  # our own stale git locks, temp files and half-written objects
            for w in vault.warnings:
                rep.add("fixed", w)
            vault.warnings.clear()
            junk = [p for p in objects.glob("??/*") if p.is_file() and p.stat().st_size == 0] + \
                list(objects.glob("??/tmp_obj_*"))
            for p in junk:  # an empty loose object is never valid: git would read it as corrupt
                p.unlink(missing_ok=True)
            if junk:
                rep.add("fixed", f"removed {len(junk)} empty or temporary git object file(s) left by a crash")
            try:
                vault._wait_for_index_lock()
            except AcpmemError as exc:
                rep.add("error", exc.message, exc.hint)
            else:
                if journal.exists():
                    sha = vault.recover()
                    rep.add("fixed", f"finished an interrupted change{' as commit ' + sha[:12] if sha else ''}")
                edits_before = [h for h in vault.human_edits() if h.problem is None]
                sha = vault.commit_human_edits()
                if sha:
                    rep.add("fixed", f"committed {len(edits_before)} human edit(s) as {sha[:12]}")
    else:
        if index_lock.exists():
            rep.add("error", ".git/index.lock exists (a git command is running, or one was killed)",
                    "let a running git finish; `acp memory doctor --fix` removes it if a killed acpmem process left "
                    "it, otherwise delete it yourself once no git runs")
        junk = [p for p in objects.glob("??/*") if p.is_file() and p.stat().st_size == 0] + \
            list(objects.glob("??/tmp_obj_*"))
        if junk:
            rep.add("error", f"{len(junk)} empty or temporary git object file(s) left by a crash",
                    "run `acp memory doctor --fix`")
        if journal.exists():
            rep.add("error", "a change was interrupted before its commit (a journal is pending)",
                    "run `acp memory doctor --fix` to finish it")
    for w in vault.warnings:
        rep.add("warning", w)
    vault.warnings.clear()
    if not fix:
        for h in vault.human_edits():
            if h.problem:
                rep.add("error", f"uncommitted human edit {h.path} is invalid: {h.problem}",
                        f"fix the file, or `git -C {root} checkout -- {h.path}` to drop the edit")
            else:
                rep.add("warning", f"uncommitted human edit: {h.path} ({h.status})",
                        "it is committed before acpmem's next commit, or now with `acp memory doctor --fix`")
    for p in vault.git_problems():
        rep.add("error", p, "resolve it with git in the vault folder, then run `acp memory doctor` again")
    loaded = vault.load()  # a corrupt derived cache is rebuilt there; a busy one is left alone
    for prob in loaded.problems:
        rep.add("error", f"{prob.path}: {('field ' + repr(prob.field) + ' ') if prob.field else ''}{prob.reason}",
                "fix it by hand (`acp memory edit`) — it is kept out of the index until then")
    rep.add("info", f"{len(loaded.entries)} valid entries, {len(loaded.problems)} invalid file(s)")
    _check_watcher(vault, rep)
    return rep


def _check_watcher(vault: Vault, rep: DoctorReport) -> None:
    """The search index's watcher (``acpmem.watch``): running or not, and whether it answers."""
    from acpmem import catalog, watch

    pid = watch.running_pid(vault.state_dir)
    if pid is None:
        if watch.enabled(vault.settings):
            rep.add("info", "no index watcher is running (recall checks every entry file; one starts by itself "
                            f"from {vault.settings.index.watch_min_entries} entries on)")
        return
    if watch.sync(vault.state_dir, vault.state_dir / catalog.DB_NAME, timeout=10.0):
        rep.add("info", f"the index watcher (process {pid}) is running and answers")
    else:
        rep.add("warning", f"the index watcher (process {pid}) does not answer; recall checks every file meanwhile",
                f"see {vault.state_dir / watch.LOG}; `kill {pid}` stops it, the next recall starts another")


