"""``acp memory doctor``, in one place: check every entry, the git state, locks, pending work and the derived index; with ``fix``,
repair what is safe — finish an interrupted change, commit valid human edits, remove what a killed acpmem process
left (never a lock a live process holds), drop empty object files a crash left, rebuild a corrupt index.
"""
from __future__ import annotations

import os
from pathlib import Path

from acpmem.core import trust
from acpmem.core.errors import AcpmemError, GitStateError, SettingsError
from acpmem.core.layout import ENTRIES_DIR, STATE_DIRNAME
from acpmem.core.render import problem_line, quote_path
from acpmem.core.values import Value
from acpmem.infra import locks
from acpmem.infra.files import disk_full
from acpmem.read import reranking
from acpmem.read.citecheck import check_entries
from acpmem.read.embedding import channel_status
from acpmem.search import watch
from acpmem.upkeep.branchreview import orphans
from acpmem.vault.config import person_config_path, vault_settings
from acpmem.vault.gitlib import head_readable, tracked_under
from acpmem.vault.gitrun import error_text, fsck_options, git, index_corrupt, no_repository, writes_blocked
from acpmem.vault.projectgit import checks_on, stale_map
from acpmem.vault.proposals import proposals
from acpmem.vault.sync import unresolved
from acpmem.vault.writer import Vault, storage_error
from acpmem.write import budget, requests, worker


class Finding(Value):
    level: str      # error | warning | info | fixed
    what: str
    fix: str | None = None
    layer: str = "project"   # the vault it is about: project, or user (``acpmem.upkeep.doctor``)

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
    head = head_problem(root)
    if head:
        problems.append(head)
    res = git(root, *fsck_options(root / ".git"), "fsck", "--no-dangling", "--no-progress", check=False)
    if res.code != 0:
        said = (res.err.strip() or res.out.strip()).splitlines()
        problems.append("git fsck: " + (said[0] if said else error_text(res)))   # git may die saying nothing
    return problems


HEAD_UNREADABLE = ("HEAD's commit cannot be read: the repository's object store is damaged (what the files are "
                   "compared with is unknown, so nothing is committed)")


def head_problem(root: Path) -> str | None:
    """What is wrong with HEAD, or None where git reads its commit and tree: no commit at all, or one git cannot
    read (a damaged pack or object — a status then compares the files with nothing, and a commit fails). Where
    libgit2 reads both, no process is started; where it cannot, git says."""
    if head_readable(root):
        return None
    if git(root, "rev-parse", "--verify", "-q", "HEAD^{tree}", check=False).code == 0:
        return None
    if git(root, "rev-parse", "--verify", "-q", "HEAD", check=False).code == 0:   # it names one: unreadable
        return HEAD_UNREADABLE
    return "HEAD does not point to a commit"


def _crash_objects(objects: Path) -> list[Path]:
    """Loose object files a killed git left: temporary (``tmp_obj_*``) or empty (never valid), each once. One pass
    over the object folders (a stat only for an object's file): ~5× fewer system calls and Python path objects than
    two globs, on a vault with thousands of loose objects too; a file that a running git removes meanwhile is not
    junk."""
    junk: list[Path] = []
    try:
        folders = [d.path for d in os.scandir(objects) if len(d.name) == 2 and d.is_dir()]
    except OSError:
        return junk
    for folder in folders:
        try:
            with os.scandir(folder) as files:
                for f in files:
                    try:
                        if f.name.startswith("tmp_obj_") or f.is_file() and f.stat().st_size == 0:
                            junk.append(Path(f.path))
                    except OSError:
                        continue
        except OSError:
            continue
    return junk


def check_vault(vault: Vault, *, fix: bool = False, more=()) -> Report:
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
    _check_settings(vault, add)
    for w in vault.warnings:
        if not (full and w.startswith("the disk holding")):   # said once, above, with the next step
            add("warning", w)
    vault.warnings.clear()
    corrupt = index_corrupt(root)
    if corrupt:
        add("error", f"the vault's git index {root / '.git' / 'index'} is corrupt",
            "run `acp memory doctor --fix` to rebuild it from the last commit (every file in the folder is kept)")
    problems = git_problems(root)
    to_resolve: set[str] = set()
    if merging and not corrupt:
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
    elif (not fix or not repaired) and not corrupt and HEAD_UNREADABLE not in problems:
        for h in _human_edits(vault, add):   # not repaired: what is still to do is said
            shown = quote_path(h.path)
            if h.problem and h.status == "added":   # a new file: git has no version of it to go back to
                add("error", f"uncommitted new file {shown} is invalid: {h.problem}",
                    f"fix the file, or take it out of the vault: `git -C {root} rm -q --cached --ignore-unmatch -- "
                    f"{shown} && mv {quote_path(str(root / h.path))} /tmp/`")
            elif h.problem:
                add("error", f"uncommitted human edit {shown} is invalid: {h.problem}",
                    f"fix the file, or `git -C {root} checkout -- {shown}` to drop the edit")
            else:
                add("warning", f"uncommitted human edit: {shown} ({h.status})",
                    "it is committed before acpmem's next commit, or now with `acp memory doctor --fix`")
    for p in problems:
        if merging and p == "a git merge is in progress":
            continue  # said above, with the files and the next step
        blocked = writes_blocked(root) if "detached HEAD" in p else None
        add("error", p, blocked.hint if blocked is not None else
            "resolve it with git in the vault folder, then run `acp memory doctor` again")
    _check_local_state(vault, add)
    _check_entries(vault, add, to_resolve)
    for w in vault.warnings:   # what reading the entries found (the index could not be updated on a full disk)
        if not (full and w.startswith("the disk holding")):
            add("warning", w)
    vault.warnings.clear()
    _check_watcher(vault, add)
    _check_embeddings(vault, add)
    _check_rerank(vault, add)
    for check in more:   # the layers above add theirs (pending extraction requests: acpmem.upkeep.doctor)
        check(vault, add)
    return Report(tuple(found))


def _check_local_state(vault: Vault, add) -> None:
    """``.acpmem/`` is this clone's own, kept out of commits by the vault's ``.gitignore``: files of it that git
    tracks came with a commit (a teammate's ``git add -f``, taken in by a plain ``git pull``). acpmem never takes a
    request from there, and ``sync`` refuses such commits; the person is told, with the way out."""
    root = vault.root
    shared = tracked_under(root, STATE_DIRNAME)
    if shared:
        add("error", f"git tracks {len(shared)} file(s) under {STATE_DIRNAME}/, which is each clone's own state "
            f"(a commit brought them: `git -C {root} log --format='%h %an %s' -- {STATE_DIRNAME}` shows whose); "
            "no request among them is run, and `acp memory sync` refuses to integrate or push such commits",
            f"take them out of git and of the folder, and share that: `git -C {root} rm -r -q {STATE_DIRNAME} && "
            f"git -C {root} commit -q -m 'untrack local state'`, then `acp memory sync` (what this clone made "
            f"there itself and git does not track stays; the index and a session's frozen index are made again)")


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
            elif head_problem(root) == HEAD_UNREADABLE:   # a damaged object store: nothing is committed; said below
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


def _human_edits(vault: Vault, add) -> list:
    """The person's uncommitted edits, or none and the reason where git cannot say (a damaged repository)."""
    try:
        return vault.human_edits()
    except GitStateError as exc:
        add("error", exc.message, "resolve it with git in the vault folder, then run `acp memory doctor` again")
        return []


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
    _check_encoding(vault, add, [p.path for p in loaded.problems if "NUL" in p.reason or "UTF-8" in p.reason])
    for prob in loaded.problems:
        if prob.path in reported:
            continue
        shown = quote_path(prob.path)
        fix = f"remove it (rm {quote_path(str(vault.root / prob.path))})" if "not a regular file" in prob.reason \
            else f"fix it with `acp memory edit {shown}` (or any editor) — it is kept out of the index until then"
        add("error", problem_line(prob.path, prob.field, prob.reason), fix)
    add("info", f"{len(loaded.entries)} valid entries, {len(loaded.problems)} invalid file(s)")


def _check_encoding(vault: Vault, add, paths: list[str]) -> None:
    """Entry files unreadable as UTF-8 because git re-encodes them (a committed ``working-tree-encoding`` attribute:
    every clone then writes them in, say, UTF-16): said once, naming the attribute and where it is set, with the
    steps that write the entries out as UTF-8 again."""
    if not paths:
        return
    got = git(vault.root, "check-attr", "working-tree-encoding", "--", *paths[:200], check=False)
    hit = [(ln.rsplit(": ", 1)[-1], ln.split(": ", 1)[0]) for ln in got.out.splitlines()
           if ln.rsplit(": ", 1)[-1] not in ("unspecified", "unset", "set", "")]
    if not hit:
        return
    where = [w for w in (".gitattributes", f"{ENTRIES_DIR}/.gitattributes", ".git/info/attributes")
             if "working-tree-encoding" in _read_text(vault.root / w)] or [".gitattributes"]
    root = vault.root
    add("error", f"{len(hit)} entry file(s) are written by git in {hit[0][0]}, not UTF-8: the attribute "
                 f"working-tree-encoding={hit[0][0]} in {', '.join(where)} applies to them (e.g. {hit[0][1]})",
        f"remove the working-tree-encoding line from {where[0]} and commit it (`git -C {root} commit -m "
        f"'entries are UTF-8' -- {where[0]}`), then `git -C {root} rm -r -q --cached {ENTRIES_DIR} && git -C {root} "
        f"checkout HEAD -- {ENTRIES_DIR}` writes the entries out as UTF-8")


def _read_text(path: Path) -> str:
    try:
        return path.read_text("utf-8", errors="replace")
    except OSError:
        return ""


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

    st = reranking.status(vault.settings)
    where = f"model {st['model']} at {st['base_url'] or '(no base_url)'}"
    if st["reachable"]:
        add("info", f"the rerank endpoint ({where}) answers; recall reorders its best {st['candidates']} with it")
    else:
        add("warning", f"the rerank endpoint ({where}) does not answer: {st['error']}; recall keeps its own order "
                       "meanwhile", "check [rerank] base_url, model and the key in the variable api_key_env names")


def _check_watcher(vault: Vault, add) -> None:
    """The search index's watcher (``acpmem.search.watch``): running or not, and whether it answers."""
    pid = watch.running_pid(vault.state_dir)
    if pid is None:
        if watch.enabled(vault.settings):
            add("info", "no index watcher is running (recall checks every entry file; one starts by itself "
                        f"from {vault.settings.index.watch_min_entries} entries on)")
        return
    if watch.sync(vault.state_dir, vault.db_path, heed_mark=False):
        add("info", f"the index watcher (process {pid}) is running and answers")
    else:
        add("warning", f"the index watcher (process {pid}) does not answer; recall checks every file meanwhile",
            f"see {vault.state_dir / watch.LOG}; `kill {pid}` stops it, the next recall starts another")


def _check_settings(vault, add) -> None:
    """The vault's acpmem.toml: one that does not load (read as the last good settings meanwhile) is an error; the
    person-only settings it sets and the person did not trust (ignored, ``acpmem.core.trust``) are listed."""
    s = vault.settings
    path = str(vault.root / "acpmem.toml")
    said = s.trust_warning(path)
    vault.warnings[:] = [w for w in vault.warnings if w != said and not (s.broken and w.startswith(s.broken))]
    if s.broken:
        add("error", f"{s.broken} (the last good settings are used meanwhile)",
            "fix the file and commit it, or `acp memory sync` to take in a teammate's fix")
    if s.ignored:
        try:
            found = trust.claims(vault_settings(vault.root, vault.state_dir))
        except SettingsError:
            found = {}
        listed = ", ".join(f"{k} = {found[k]!r}" if k in found else k for k in s.ignored)
        add("warning", f"{path} sets what only you decide, ignored (untrusted): {listed}",
            f"set your own in {person_config_path()}, or adopt these values with `acp memory trust` once you have "
            "read them")


# The whole vault: the checks above, the pending extraction work (requests) and staleness, in both layers.

def doctor(vault, *, fix: bool = False) -> Report:
    """Check (and with ``fix`` repair what is safe in) the vault, its git state, the index and the pending work —
    and the same in the user vault read beside it. The user vault's findings carry ``layer = "user"`` and are never
    errors of the project: an error there is reported as a warning (the project vault works without it)."""
    user = vault.user if vault.layer == "project" else None
    theirs = set(user.warnings) if user is not None else set()
    rep = check_vault(vault, fix=fix, more=(check_requests, check_staleness, check_branches))
    found = [f.with_changes(layer="user" if f.what.startswith("the user vault ") else vault.layer)
             for f in rep.findings if not (f.level == "warning" and f.what in theirs)]   # said below, as its own
    if user is not None:
        found += user_findings(user, fix=fix)
    return Report(tuple(found))


def user_findings(user, *, fix: bool = False) -> list[Finding]:
    """The user vault's doctor findings, labelled ``user``, its errors demoted to warnings (``error`` → ``warning``
    with "user vault:" in front, so the text says what it is about)."""
    try:
        rep = check_vault(user, fix=fix, more=(check_requests,))
        found = list(rep.findings)
    except AcpmemError as exc:   # e.g. --fix in a user vault whose repository is broken
        found = [Finding("error", exc.message, exc.hint)]
    return [f.with_changes(level="warning" if f.level == "error" else f.level, what=f"user vault: {f.what}",
                           layer="user") for f in found]


def check_requests(vault, add) -> None:
    """Pending work: requests whose extraction failed (and when they are tried again), those that failed for
    good, and request files that do not parse."""
    reqs, broken = requests.list_requests(vault.state_dir)
    pending = requests.pending_dir(vault.state_dir)
    for name in broken:
        add("error", f"{pending / name} is not a valid request file",
            "fix it by hand, or delete it to drop that request")
    waiter = worker.retry_waiter(vault.state_dir)
    for r in reqs:
        last = (r.last_error or {}).get("message", "")
        if r.status == "failed":
            add("error", f"request {r.id} failed for good after {r.attempts} attempts: {last}",
                f"fix the cause, then `acp memory extract {r.id}` (or `--failed` for all); delete "
                f"{pending / (r.id + '.json')} to drop it")
        elif r.attempts:
            when = f"tried again at {r.next_attempt}" if r.next_attempt else "tried again by the next worker"
            who = f" (process {waiter} waits for it)" if waiter else ""
            add("warning", f"request {r.id} failed {r.attempts} time(s) ({last}); {when}{who}",
                f"`acp memory extract {r.id}` tries it now")
    deferred = [r for r in reqs if r.status == "pending" and r.deferred]
    if deferred:
        st = budget.current(vault.state_dir, vault.clock(), vault.settings.extraction)
        why = st.reason if st is not None and st.over else deferred[0].deferred
        add("warning", f"{len(deferred)} request(s) deferred: over the extraction budget ({why}); they are "
            f"extracted from {min(r.next_attempt or '' for r in deferred)} on",
            "wait, or raise [extraction] max_tokens_per_day / max_requests_per_hour in acpmem.toml")

    good, bad = proposals(vault)
    for rel, why in bad:
        add("error", f"{rel} is not a valid proposal: {why}", f"fix it by hand, or `git -C {vault.root} rm {rel}`")
    if good:
        add("info", f"{len(good)} proposal(s) wait for review", "`acp memory review`")
    waiting = [r for r in reqs if r.status == "pending" and not r.attempts and not r.deferred]
    if waiting:
        add("info", f"{len(waiting)} request(s) waiting for extraction")


def check_staleness(vault, add) -> None:
    """Entries whose project files changed since they were written (``acpmem.vault.projectgit``), and entries whose
    cited transcript is gone, changed or unreadable (``acpmem.read.citecheck``). Said only when there are some."""
    if not checks_on():
        return
    entries = vault.load(with_reads=False).live()
    stale = stale_map(vault)
    if stale:
        ids = ", ".join(f"#{i}" for i in sorted(stale)[:5]) + (" …" if len(stale) > 5 else "")
        add("info", f"{len(stale)} {'entry' if len(stale) == 1 else 'entries'} may be stale: project files "
            f"{'it is' if len(stale) == 1 else 'they are'} about changed since written ({ids})",
            "`acp memory stale` names the commits; `acp memory review --stale` confirms or forgets each")
    checked = check_entries(vault, entries)
    for status, said in (("gone", "a transcript that is gone"), ("changed", "turns that changed since written"),
                         ("unreadable", "a transcript that does not read")):
        ids = sorted(i for i, c in checked.items() if c.status == status)
        if ids:
            add("warning", f"{len(ids)} {'entry cites' if len(ids) == 1 else 'entries cite'} {said} "
                f"({', '.join('#' + i for i in ids[:5])}{' …' if len(ids) > 5 else ''})",
                "`acp memory show ID` says which citation; the entry is still served, marked")


def check_branches(vault, add) -> None:
    """Entries learned on a branch that died unmerged: no branch holds them, so no checkout sees them until a
    person decides (``acpmem.vault.branches.orphans``). Said only when there are some."""
    left = orphans(vault)
    if left:
        ids = ", ".join(f"#{s.id}" for s in left[:5]) + (" …" if len(left) > 5 else "")
        n = len(left)
        add("warning", f"{n} {'entry was' if n == 1 else 'entries were'} learned on a branch that is gone unmerged "
            f"and no checkout sees {'it' if n == 1 else 'them'} ({ids})",
            "`acp memory review --branches` lists them; `review keep ID --global` or `review drop ID` decides")
