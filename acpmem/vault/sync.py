"""Sync: exchange the vault with a git remote — commit what is pending, fetch, integrate, push, retry.

Each attempt runs under the vault lock, so no acpmem write interleaves with the exchange:

1. finish an interrupted change, commit valid human edits and fold the local read log (``Vault.apply`` with no
   writes does exactly that);
2. ``git fetch REMOTE``;
3. integrate ``REMOTE/BRANCH``:

   * nothing local to send: fast-forward;
   * only acpmem's own commits to send (each made by acpmem, with its ``Acpmem-Kind`` trailer, no merge among
     them) and none touching a file the remote changed in a way that conflicts: **replay** them on top of the
     remote, in memory (libgit2's three-way merge of each commit's change; nothing half-done can be left in the
     work tree), then move the work tree and the branch there in one ``git reset --keep``. MEMORY.md is not
     merged: it is regenerated from the entries and amended into the last replayed commit, so an exchange adds
     no commit of its own. The replayed commits get new ids (their messages, trailers, authors and dates stay);
   * anything else — a person's own commit, a merge, a conflict, no libgit2: a **merge**, committed once with
     MEMORY.md regenerated inside it. When both sides changed the same entry, the merge is left in progress with
     both versions in the file between git's conflict markers — nothing is lost and nothing is pushed — and
     ``SyncConflict`` says exactly what to do: edit the file(s), then run ``acp memory sync`` again, which checks
     them, finishes the merge and pushes (``git merge --abort`` backs out instead);
4. ``git push REMOTE HEAD:BRANCH``. Rejected because another clone pushed first (or two pushes raced inside the
   server): the lock is let go, sync waits a growing, jittered time and starts again at 2, for at most
   ``[git] sync_seconds``; then it stops with the real cause, everything kept here.

Read bookkeeping never conflicts: each clone writes only ``reads/<clone-id>.tsv`` (see ``reads``).
"""
from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Callable

from acpmem.core.entryfile import MAX_FILE_BYTES, has_conflict_markers, parse_entry_bytes
from acpmem.core.errors import EntryInvalid, GitStateError, SyncConflict
from acpmem.core.layout import ENTRIES_DIR, LAYER_USER, MEMORY_FILE, PROPOSALS_DIR, STATE_DIRNAME
from acpmem.core.redact import REDACTED_RE, find_secrets
from acpmem.core.render import memory_md
from acpmem.core.values import Value
from acpmem.infra import progress as shown_progress
from acpmem.infra.files import NotRegularFile, atomic_write, read_exact, read_regular
from acpmem.search.catalog import secret_kind
from acpmem.vault.gitrun import error_text, git
from acpmem.vault.writer import KIND_READS, KIND_SYNC, Vault

MAX_GREP_PATHS = 1000   # more outgoing files than this: the conflict-marker check greps the whole tree
MARKER_SCAN_BYTES = 64_000_000   # a file is searched for conflict markers this far (a merge brings text files)
BACKOFF_FIRST = 0.25    # seconds before the second attempt; doubled each time, up to BACKOFF_MAX
BACKOFF_MAX = 4.0
# git's words for "the remote moved between this clone's fetch and its push" (or two pushes raced in the server)
# how a sync integrated, for its result: the most telling step of its attempts
_RANK = {"fast-forward": 1, "replay": 2, "merge": 3, "first-push": 4, "finished-merge": 5}
_MOVED = ("fetch first", "non-fast-forward", "cannot lock ref", "failed to update ref", "incorrect old value",
          "stale info", "but expected")


class SyncResult(Value):
    remote: str
    branch: str
    local_commits: tuple[str, ...]   # commits made before the exchange (human edits, the read log)
    incoming: int                    # commits received from the remote
    outgoing: int                    # commits the remote did not have before the push
    merge: str                       # up-to-date | fast-forward | replay | merge | finished-merge | first-push
    merge_commit: str | None
    regenerated: str | None          # a commit of its own that regenerated MEMORY.md, if one was needed
    pushed: bool
    head: str
    attempts: int = 1                # pushes tried (more than one: the remote moved meanwhile)

    def to_json(self) -> dict:
        return {"remote": self.remote, "branch": self.branch, "local_commits": list(self.local_commits),
                "incoming": self.incoming, "outgoing": self.outgoing, "merge": self.merge,
                "merge_commit": self.merge_commit, "regenerated": self.regenerated, "pushed": self.pushed,
                "head": self.head, "attempts": self.attempts}


def sync(vault: Vault, remote: str | None = None, *,
         progress: Callable[[str], None] = lambda _msg: None,
         clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
         rng: random.Random | None = None) -> SyncResult:
    """Exchange ``vault`` with ``remote`` (default: acpmem.toml [git] remote, "origin"). Raises ``SyncConflict``
    when both sides changed the same entry (the merge is left for a person), ``GitStateError`` for a missing
    remote, a detached HEAD, a failing git command or a remote that kept moving for ``[git] sync_seconds``."""
    remote = remote or vault.settings.git.remote
    with shown_progress.task(f"sync with {remote}", 3, unit="steps") as shown:   # fetch, merge, push (cli.progress)
        def say(msg: str) -> None:
            shown.describe(msg)
            progress(msg)

        res = _sync(vault, remote, say, shown, clock, sleep, rng)
    if res.incoming:   # a teammate's acpmem.toml: what of it is ignored, or that it does not load, is said now
        vault.reload_settings()
    return res


def _sync(vault: Vault, remote: str, progress: Callable[[str], None], shown, clock, sleep, rng) -> SyncResult:
    rng = rng or random.Random()
    budget = vault.settings.git.sync_seconds
    started = clock()
    state = _Exchange(shown)
    rejections = 0
    while True:
        with vault.lock():
            if rejections == 0:
                state.begin(vault, remote, progress)
            res = state.attempt(vault, remote, progress)
            if isinstance(res, SyncResult):
                shown.update(3)
                return res
            outgoing = state.outgoing
        reason = push_reason(res)
        if not moved(res):
            raise GitStateError(f"git push to {remote} failed: {reason}",
                                f"{_push_hint(res, vault, remote)}; your {outgoing} commit(s) are kept here — "
                                f"then run {again(vault)} again")
        rejections += 1
        delay = backoff(rejections, rng)
        spent = clock() - started
        if spent + delay > budget:
            raise GitStateError(
                f"{remote} kept moving: {rejections} push(es) were rejected in {spent:.0f} s because other clones "
                f"pushed first (git: {reason}); your {outgoing} commit(s) are kept here, safe",
                f"run {again(vault)} again in a minute, when the others are done (or raise [git] sync_seconds, "
                f"now {budget:g})")
        progress(f"{remote} moved meanwhile; trying again in {delay:.1f} s")
        sleep(delay)
        state.attempts += 1


def backoff(rejections: int, rng: random.Random) -> float:
    """The wait after the n-th rejected push: doubling from ``BACKOFF_FIRST`` up to ``BACKOFF_MAX``, the upper half
    jittered, so that clones that collided once do not collide again in step, and none waits much longer than the
    others (a clone that lost many times is not pushed behind one that just started)."""
    ceiling = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (rejections - 1))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def moved(res) -> bool:
    """Did the push fail because the remote moved (so fetching, integrating and pushing again can succeed)?"""
    text = f"{res.out}\n{res.err}"
    return any(w in text for w in _MOVED)


def push_reason(res) -> str:
    """Why git refused a push, on one line, whichever stream it came on: ``--porcelain`` puts the per-ref status
    (``!\tHEAD:refs/heads/main\t[rejected] (fetch first)``) on standard output and the rest on standard error."""
    refs = []
    for line in res.out.splitlines():
        parts = line.split("\t")
        if line.startswith("!") and len(parts) >= 3:
            refs.append(" ".join(parts[2:]).strip())
    said = error_text(res) if res.err.strip() else ""
    if said.startswith("failed to push some refs"):
        said = ""
    return "; ".join(dict.fromkeys(x for x in (*refs, said) if x)) or f"git exited with {res.code}"


def _push_hint(res, vault: Vault, remote: str) -> str:
    text = f"{res.out}\n{res.err}".lower()
    if any(w in text for w in ("permission", "denied", "authentication", "access", "could not read from remote",
                               "unable to access", "not found", "does not appear to be a git repository")):
        return f"check access to the remote (`git -C {vault.root} push {remote}`)"
    if "hook declined" in text or "protected branch" in text:
        return "the remote refused the push by its own rule (a hook or a protected branch): ask its owner"
    return f"see what git says with `git -C {vault.root} push {remote}`"


class _Exchange:
    """What one sync learns across its attempts."""

    def __init__(self, shown) -> None:
        self.shown = shown   # the count of steps on a terminal (``acpmem.infra.progress.Task``)
        self.local: list[str] = []
        self.branch = ""
        self.finishing = False
        self.merge_commit: str | None = None
        self.how: str | None = None
        self.incoming = 0
        self.outgoing = 0
        self.regenerated: str | None = None
        self.attempts = 1

    def begin(self, vault: Vault, remote: str, progress) -> None:
        root = vault.root
        _check_remote(vault, remote)
        self.branch = _branch(vault)
        upstream = f"{remote}/{self.branch}"
        self.finishing = (root / ".git" / "MERGE_HEAD").exists()
        if self.finishing:
            progress("Finishing the merge you resolved")
            self.merge_commit = _finish_merge(vault, upstream)
            self.how = "finished-merge"
        else:
            progress("Committing pending changes")
            before = _head(vault)
            _commit_generated(vault, "record reads before sync",
                              "Folded the local read log so the exchange carries it.", KIND_READS)
            self.local = git(root, "rev-list", "--reverse", f"{before}..HEAD").out.split()

    def result(self, remote: str, pushed: bool, vault: Vault) -> SyncResult:
        return SyncResult(remote, self.branch, tuple(self.local), self.incoming, self.outgoing if pushed else 0,
                          self.how or "up-to-date", self.merge_commit, self.regenerated, pushed, _head(vault),
                          self.attempts)

    def attempt(self, vault: Vault, remote: str, progress):
        """Fetch, integrate and push once. Returns the ``SyncResult`` when done, else git's rejected push."""
        root = vault.root
        branch = self.branch
        upstream = f"{remote}/{branch}"
        progress(f"Fetching from {remote}")
        self.shown.update(0)
        _git(vault, "fetch", "--quiet", "--no-tags", remote)
        self.shown.update(1)
        has_remote_branch = git(root, "rev-parse", "--verify", "-q", f"refs/remotes/{upstream}",
                                check=False).code == 0
        if has_remote_branch:
            _refuse_shared_state(vault, upstream, since=git(root, "merge-base", "HEAD", upstream,
                                                            check=False).out.strip() or None)
            incoming_now = _count(vault, f"HEAD..{upstream}")
            if incoming_now:
                self.incoming += incoming_now
                progress(f"Integrating {incoming_now} commit(s) from {upstream}")
                step, sha, regen = _integrate(vault, upstream)
                if _RANK.get(step, 0) > _RANK.get(self.how, 0):
                    self.how = step
                self.merge_commit = sha or self.merge_commit
                self.regenerated = regen or self.regenerated
            self.shown.update(2)
            self.outgoing = _count(vault, f"{upstream}..HEAD")
            if not self.outgoing:
                return self.result(remote, False, vault)
        else:
            self.how = self.how or "first-push"
            self.outgoing = _count(vault, "HEAD")
            self.shown.update(2)
        _refuse_shared_state(vault, "HEAD")
        _refuse_markers(vault, upstream if has_remote_branch else None)
        _refuse_unsafe(vault, remote, branch, upstream if has_remote_branch else None)
        progress(f"Pushing {self.outgoing} commit(s) to {upstream}")
        res = git(root, "push", "--quiet", "--porcelain", remote, f"HEAD:refs/heads/{branch}", check=False)
        if res.code == 0:
            if git(root, "config", f"branch.{branch}.remote", check=False).code != 0:
                git(root, "branch", "--quiet", f"--set-upstream-to={upstream}", check=False)
            return self.result(remote, True, vault)
        return res


# --------------------------------------------------------------------------------------------- steps

def again(vault) -> str:
    """The command that runs this sync again: ``acp memory sync``, with ``--user`` for the user vault."""
    return "`acp memory sync --user`" if vault.layer == LAYER_USER else "`acp memory sync`"


def _git(vault: Vault, *args: str):
    res = git(vault.root, *args, check=False)
    if res.code != 0:
        raise GitStateError(f"git {args[0]} failed: {error_text(res)}",
                            f"check the remote and the network (`git -C {vault.root} {args[0]}`), then run "
                            f"{again(vault)} again")
    return res


def _check_remote(vault: Vault, remote: str) -> None:
    names = git(vault.root, "remote").out.split()
    if remote in names:
        return
    root = vault.root
    if names:
        raise GitStateError(f"the vault has no git remote named '{remote}' (it has: {', '.join(names)})",
                            f"pass --remote {names[0]}, or add it: git -C {root} remote add {remote} URL")
    raise GitStateError("the vault has no git remote to sync with",
                        f"add one: git -C {root} remote add {remote} URL  (then {again(vault)})")


def _branch(vault: Vault) -> str:
    res = git(vault.root, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    if res.code != 0 or not res.out.strip():
        raise GitStateError("the vault is not on a branch (detached HEAD)",
                            f"check out its branch first: git -C {vault.root} checkout main")
    return res.out.strip()


def _count(vault: Vault, spec: str) -> int:
    return int(git(vault.root, "rev-list", "--count", spec).out.strip() or 0)


def _head(vault: Vault) -> str:
    return git(vault.root, "rev-parse", "HEAD").out.strip()


def _integrate(vault: Vault, upstream: str) -> tuple[str, str | None, str | None]:
    """Bring ``upstream``'s commits into HEAD. Returns (fast-forward | replay | merge, the merge commit if one was
    made, a separate MEMORY.md commit if one was needed). Leaves a conflicted merge in place and raises
    ``SyncConflict``."""
    root = vault.root
    local = git(root, "rev-list", "--reverse", f"{upstream}..HEAD").out.split()
    if not local:
        res = git(root, "merge", "--ff-only", "--quiet", "--no-stat", upstream, check=False)
        if res.code != 0:
            raise GitStateError(f"git merge --ff-only {upstream} failed: {error_text(res)}",
                                f"run `acp memory doctor` to see what is uncommitted in {root}, fix or remove it, "
                                f"then {again(vault)} again")
        return "fast-forward", None, _regenerate(vault, upstream)
    replayed = _replay(vault, upstream, local)
    if replayed is not None:
        return "replay", None, None
    return _merge(vault, upstream)


def _replay(vault: Vault, upstream: str, local: list[str]) -> str | None:
    """Put acpmem's own unpushed commits on top of ``upstream`` (what ``git rebase`` does, without its stops: each
    commit's change is merged in memory; the work tree and the branch move once, at the end). Returns the new HEAD,
    or None — nothing changed — when a merge is the right way: a commit a person made with git (no ``Acpmem-Kind``
    trailer), a merge commit, a change that conflicts with the remote's, libgit2 missing or unable."""
    try:
        # lazy: pygit2 is heavy, never imported at start-up
        import pygit2
    except ImportError:
        return None
    root = vault.root
    try:
        repo = pygit2.Repository(str(root))
        commits = [repo[c] for c in local]
        if any(len(c.parents) != 1 or "\nAcpmem-Kind: " not in c.message for c in commits):
            return None
        cur = repo.revparse_single(f"refs/remotes/{upstream}").peel(pygit2.Commit)
        for c in commits:
            merged = repo.merge_trees(c.parents[0].tree, cur.tree, c.tree)
            clashing = {e.path for trio in (merged.conflicts or ()) for e in trio if e is not None}
            if clashing - {MEMORY_FILE}:
                return None
            # MEMORY.md is derived: keep the remote's until it is regenerated below, never a merge of two versions
            if clashing:
                del merged.conflicts[MEMORY_FILE]
            if MEMORY_FILE in cur.tree:
                theirs = cur.tree[MEMORY_FILE]
                merged.add(pygit2.IndexEntry(MEMORY_FILE, theirs.id, theirs.filemode))
            elif MEMORY_FILE in merged:
                merged.remove(MEMORY_FILE)
            tree = merged.write_tree(repo)
            if tree == cur.tree.id:
                continue   # the remote already has this change
            cur = repo[repo.create_commit(None, c.author, c.committer, c.message, tree, [cur.id])]
    except (pygit2.GitError, KeyError, ValueError):
        return None
    new = str(cur.id)
    # One step moves the index, the work tree and the branch; it refuses (and changes nothing) if a file it must
    # change has a change of its own in the work tree (an invalid human edit, kept there): then merge instead.
    if git(root, "reset", "--quiet", "--keep", new, check=False).code != 0:
        return None
    _amend_memory(vault, upstream)
    return vault.head()


def _memory_text(vault: Vault) -> str:
    return memory_md(vault.load(with_reads=False, light=True).entries, vault.settings)


def _amend_memory(vault: Vault, upstream: str) -> None:
    """MEMORY.md regenerated from the replayed entries, in the last replayed commit (not yet pushed) — an exchange
    makes no commit of its own. Killed before the amend, the file is merely out of date: the next write commits
    it."""
    root = vault.root
    text = _memory_text(vault)
    mp = root / MEMORY_FILE
    if read_exact(mp) == text:   # never a FIFO's read (read_exact: regular files only)
        return
    if _count(vault, f"{upstream}..HEAD") == 0:   # every change was already upstream: nothing of ours to amend
        _regenerate(vault, upstream)
        return
    atomic_write(mp, text, durable=False)
    who = git(root, "log", "-1", "--format=%cn%x00%ce").out.strip().split("\0")
    ident = ("-c", f"user.name={who[0]}", "-c", f"user.email={who[1]}") if len(who) == 2 and all(who) else ()
    git(root, *ident, "commit", "--quiet", "--no-verify", "--amend", "--no-edit", "--", MEMORY_FILE)


def _merge(vault: Vault, upstream: str) -> tuple[str, str | None, str | None]:
    """Merge ``upstream`` into HEAD, one commit with MEMORY.md regenerated in it. Leaves a conflicted merge in
    place and raises ``SyncConflict``."""
    root = vault.root
    message = (f"acpmem: {KIND_SYNC}: merge {upstream}\n\nIntegrated the changes of another clone of the vault.\n\n"
               f"Acpmem-Kind: {KIND_SYNC}\n")
    res = git(root, "merge", "--no-verify", "--no-commit", "--no-ff", "--no-stat", upstream, check=False)
    if res.code == 0 and (root / ".git" / "MERGE_HEAD").exists():
        text = _memory_text(vault)
        mp = root / MEMORY_FILE
        if read_exact(mp) != text:
            atomic_write(mp, text, durable=False)
        git(root, "add", "--", MEMORY_FILE)
        # Killed here, the merge is in progress with nothing unmerged: the next sync commits it.
        git(root, "commit", "--quiet", "--no-verify", "-F", "-", input=message)
        return "merge", _head(vault), None
    if res.code == 0:
        return "fast-forward", None, _regenerate(vault, upstream)
    if "unrelated histories" in res.err:
        raise GitStateError(f"{upstream} holds a vault with a different history (it was created separately, not "
                            "cloned from this one)",
                            "to share one vault, clone the remote (`git clone URL .acp-memory`) and use that clone")
    conflicted = _unmerged(vault)
    if not conflicted or not (root / ".git" / "MERGE_HEAD").exists():
        raise GitStateError(f"git merge {upstream} failed: {error_text(res)}",
                            f"run `acp memory doctor` to see what is uncommitted in {root}, fix or remove it, then "
                            f"{again(vault)} again")
    raise _conflict(vault, upstream, conflicted)


def _unmerged(vault: Vault) -> dict[str, str]:
    """Unmerged paths and their two-letter status (UU/AA: both changed it; UD/DU/AU/UA/DD: one side deleted or
    added it)."""
    out = git(vault.root, "status", "--porcelain=v1", "-z", "--untracked-files=no", "--no-renames").out
    found = {}
    for item in filter(None, out.split("\0")):
        code, rel = item[:2], item[3:]
        if "U" in code or code in ("AA", "DD"):
            found[rel] = code
    return dict(sorted(found.items()))


def _conflict(vault: Vault, upstream: str, unmerged: dict[str, str]) -> SyncConflict:
    root = vault.root
    both = [p for p, c in unmerged.items() if c in ("UU", "AA")]
    gone = [p for p in unmerged if p not in both]

    def names(paths: list[str]) -> str:
        return ", ".join(paths[:6]) + (f" and {len(paths) - 6} more" if len(paths) > 6 else "")

    what, todo = [], []
    if both:
        what.append(f"{len(both)} file(s) changed both here and on {upstream}: {names(both)} — both versions are in "
                    f"each file, between '<<<<<<< HEAD' (this clone) and '>>>>>>> {upstream}'")
        todo.append("edit each file to keep what is right and delete the marker lines")
    if gone:
        what.append(f"{len(gone)} file(s) deleted (forgotten) on one side and changed on the other: {names(gone)} — "
                    "the changed version is in the folder")
        todo.append(f"for each, keep it with `git -C {root} add FILE` or drop it with `git -C {root} rm FILE`")
    return SyncConflict(
        "; ".join(what) + ". The merge is left in progress and nothing was pushed",
        " and ".join(todo) + f", then run {again(vault)} again to finish the merge and push (or back out with: "
        f"git -C {root} merge --abort)",
        paths=list(unmerged), upstream=upstream, vault=str(root))


def _finish_merge(vault: Vault, upstream: str) -> str:
    """Commit a merge a person resolved: files both sides changed must be free of markers (and valid entries), and
    so must every file of the merge a person marked resolved with `git add`; a file one side deleted needs the
    person's explicit `git add` or `git rm`."""
    root = vault.root
    pending = _unmerged(vault)
    still = {rel: code for rel, code in pending.items() if code not in ("UU", "AA") or _marked(vault, rel)}
    if still:
        raise _conflict(vault, upstream, still)
    added = [rel for rel in _merge_changes(vault) if rel not in pending and _marked(vault, rel)]
    if added:
        raise _markers_left(vault, added)
    for rel in pending:
        p = root / rel
        if os.path.lexists(p) and rel.startswith(ENTRIES_DIR + "/") and rel.endswith(".md"):
            try:
                parse_entry_bytes(read_regular(p, MAX_FILE_BYTES + 1), rel, vault.settings.types)
            except EntryInvalid as exc:
                raise SyncConflict(f"the resolved file is not a valid entry: {exc.message}",
                                   f"fix it, then run {again(vault)} again", paths=[rel]) from None
            except NotRegularFile as exc:   # a FIFO would wait for a writer for ever: never opened
                raise SyncConflict(f"the resolved file {rel} {exc.strerror}",
                                   f"put the resolved entry there as a plain file, then run {again(vault)} again",
                                   paths=[rel]) from None
    for rel in pending:
        git(root, "add", "--", rel)
    message = (f"acpmem: {KIND_SYNC}: merge {upstream} (conflicts resolved by hand)\n\n"
               f"Resolved: {', '.join(pending) or 'nothing left unmerged'}.\n\nAcpmem-Kind: {KIND_SYNC}\n")
    git(root, "commit", "--quiet", "--no-verify", "-F", "-", input=message)
    _regenerate(vault, upstream)
    return _head(vault)


def unresolved(vault: Vault) -> dict[str, str]:
    """While a sync merge is in progress: the files a person still has to resolve and why — ``markers`` (changed on
    both sides, markers left, whether or not `git add` marked it resolved) or ``deleted`` (deleted on one side: it
    needs `git add` or `git rm`)."""
    pending = _unmerged(vault)
    out = {rel: "markers" if code in ("UU", "AA") else "deleted" for rel, code in pending.items()
           if code not in ("UU", "AA") or _marked(vault, rel)}
    out.update({rel: "markers" for rel in _merge_changes(vault) if rel not in pending and _marked(vault, rel)})
    return dict(sorted(out.items()))


def _merge_changes(vault: Vault) -> list[str]:
    """Tracked files that differ from HEAD, staged or not: during a merge, every file the merge brings or changes."""
    out = git(vault.root, "diff", "-z", "--name-only", "HEAD", "--").out
    return [rel for rel in out.split("\0") if rel]


def _marked(vault: Vault, rel: str) -> bool:
    try:
        data = read_regular(vault.root / rel, MARKER_SCAN_BYTES)
    except OSError:   # gone, a symlink, a FIFO or a device: holds no markers of a text file
        return False
    return has_conflict_markers(data.decode("utf-8", errors="replace"))


def _markers_left(vault: Vault, paths: list[str]) -> SyncConflict:
    names = ", ".join(paths[:6]) + (f" and {len(paths) - 6} more" if len(paths) > 6 else "")
    return SyncConflict(f"{len(paths)} file(s) marked resolved with `git add` still hold conflict markers "
                        f"('<<<<<<<' … '>>>>>>>' lines): {names}; nothing was committed or pushed",
                        "edit each file to keep what is right and delete the marker lines, then run `acp memory "
                        f"sync` again (or back out with: git -C {vault.root} merge --abort)",
                        paths=list(paths), vault=str(vault.root))


def _refuse_markers(vault: Vault, upstream: str | None) -> None:
    """Nothing with conflict markers leaves this clone: the files this clone's outgoing commits change (all of HEAD
    on a first push) are searched in HEAD for a '<<<<<<<' and a '>>>>>>>' line."""
    root = vault.root
    if upstream:
        changed = [p for p in git(root, "diff", "-z", "--name-only", "--no-renames", "--diff-filter=AM", upstream,
                                  "HEAD", "--").out.split("\0") if p]
        if not changed:
            return
    else:
        changed = []
    paths = changed if 0 < len(changed) <= MAX_GREP_PATHS else []
    res = git(root, "grep", "-l", "-z", "-I", "--all-match", "-E", "-e", "^<{7}( |$)", "-e", "^>{7}( |$)", "HEAD",
              "--", *paths, check=False)
    found = [p.split(":", 1)[1] for p in res.out.split("\0") if p.startswith("HEAD:")]
    if changed:
        found = [p for p in found if p in set(changed)]
    if found:
        raise GitStateError(
            f"{', '.join(found[:6])}{' and more' if len(found) > 6 else ''} as committed in this clone hold conflict "
            "markers ('<<<<<<<' … '>>>>>>>' lines); nothing was pushed",
            f"edit each file to keep what is right and delete the marker lines, then run {again(vault)} again (it "
            "commits the corrected files first)")


# --------------------------------------------------------------------------------------------- the pre-push check

def _refuse_shared_state(vault: Vault, rev: str, since: str | None = None) -> None:
    """``.acpmem/`` is each clone's own derived state (frozen indexes, ledgers, requests, the index): a commit that
    tracks it (``git add -f``) would hand every clone a teammate's files there — a frozen index a session reads into
    its prompt as it is. Neither taken from the remote (``rev`` = the upstream, before anything is integrated: what
    it adds or changes there since ``since``, the common base, so a clone that untracked it merges the removal) nor
    sent to it (``rev`` = HEAD, before the push); raises ``GitStateError`` with the way out."""
    if since is None:
        found = git(vault.root, "ls-tree", "-z", "--name-only", rev, "--", STATE_DIRNAME).out
    else:
        found = git(vault.root, "diff", "-z", "--name-only", "--no-renames", "--diff-filter=AMT", since, rev, "--",
                    STATE_DIRNAME).out
    if not found.strip("\0"):
        return
    untrack = f"`git rm -r -q --cached {STATE_DIRNAME} && git commit -m 'untrack local state'`"
    if rev == "HEAD":
        raise GitStateError(f"this clone's HEAD tracks {STATE_DIRNAME}/, each clone's own local state, which is "
                            "never shared; nothing was pushed", f"run {untrack}, then {again(vault)} again")
    raise GitStateError(f"the remote's {rev} tracks {STATE_DIRNAME}/, each clone's own local state, which is never "
                        "taken from a teammate; nothing was integrated or pushed",
                        f"whoever committed it runs {untrack} in their clone and pushes; then {again(vault)} again")


def _refuse_unsafe(vault: Vault, remote: str, branch: str, upstream: str | None) -> None:
    """Nothing leaves this clone that `doctor` would flag: an entry file (``entries/``, ``proposals/``) as committed
    in HEAD must be a valid entry, and no version of one in the outgoing commits may hold a secret (a push sends
    every commit, not only the last). Committed by hand (``git commit -a``), such a file gets past acpmem's own
    checks; here it stops the push. The commits before the first one that brought such a file are pushed when they
    form a safe prefix of HEAD's history; else nothing is. Raises ``GitStateError`` naming the files."""
    root = vault.root
    not_upstream = ["--not", upstream] if upstream else []
    if upstream:
        changed = [rel for rel in git(root, "diff", "-z", "--name-only", "--no-renames", "--diff-filter=AM",
                                      upstream, "HEAD", "--", ENTRIES_DIR, PROPOSALS_DIR).out.split("\0") if rel]
    else:
        changed = [rel for rel in git(root, "ls-tree", "-r", "-z", "--name-only", "HEAD", "--", ENTRIES_DIR,
                                      PROPOSALS_DIR).out.split("\0") if rel]
    heads = {rel: f"HEAD:{rel}" for rel in changed if rel.endswith(".md")}
    # every blob the outgoing commits bring (older versions too), with the path it was first seen at
    blobs = {}
    for line in git(root, "rev-list", "--objects", "HEAD",
                    *not_upstream, "--", ENTRIES_DIR, PROPOSALS_DIR).out.splitlines():
        sha, _, rel = line.partition(" ")
        if rel.endswith(".md") and rel.startswith((ENTRIES_DIR + "/", PROPOSALS_DIR + "/")):
            blobs[sha] = rel
    found: dict[str, str] = {}   # path -> why
    bad_blobs: list[tuple[str, str]] = []   # (path, blob)
    head_data = _blobs(vault, list(heads.values()))
    for rel, spec in heads.items():
        why = _entry_problem(vault, head_data.get(spec), rel, secrets=False)
        if why:
            found[rel] = why
            bad_blobs.append((rel, git(root, "rev-parse", spec).out.strip()))
    data = _blobs(vault, list(blobs))
    for sha, rel in blobs.items():
        why = _entry_problem(vault, data.get(sha), rel, secrets=True, validity=False)
        if why:
            found[rel] = why   # a secret is said before a broken field: its next step also mends the history
            bad_blobs.append((rel, sha))
    if not found:
        return
    pushed = _push_safe_prefix(vault, remote, branch, not_upstream, bad_blobs)
    names = "; ".join(f"{rel} {why}" for rel, why in sorted(found.items())[:6])
    more = f" and {len(found) - 6} more file(s)" if len(found) > 6 else ""
    done = f"pushed only the {pushed[1]} commit(s) before it (up to {pushed[0][:12]})" if pushed else \
        "nothing was pushed"
    if any("secret" in why for why in found.values()):
        base = pushed[0][:12] if pushed else upstream
        how = f"`git -C {root} reset --soft {base}`" if base else f"`git -C {root} rebase -i --root`"
        todo = (f"drop the local commits that hold it, keeping their changes ({how}), remove the secret from the "
                f"file if it is still there, then run {again(vault)} again (it commits the files anew)")
    else:
        todo = f"fix the file (`acp memory edit FILE`; `acp memory doctor` says what is wrong), then run " \
               f"{again(vault)} again"
    raise GitStateError(f"{names}{more}, as committed in this clone (`acp memory doctor` flags it); {done}", todo,
                        paths=sorted(found))


def _blobs(vault: Vault, specs: list[str]) -> dict[str, bytes]:
    """The contents of the git objects ``specs`` (``HEAD:path`` or a blob id), in one ``git cat-file --batch``."""
    if not specs:
        return {}
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    p = subprocess.run(["git", "-C", str(vault.root), "cat-file", "--batch"], input="\n".join(specs).encode() + b"\n",
                       capture_output=True, check=False, env={**env, "LC_ALL": "C"})
    out, pos, got = p.stdout, 0, {}
    for spec in specs:
        end = out.find(b"\n", pos)
        if end < 0:
            break
        head = out[pos:end].split()
        pos = end + 1
        if len(head) != 3 or head[1] != b"blob":
            continue
        size = int(head[2])
        got[spec] = out[pos:pos + size]
        pos += size + 1
    return got


def _entry_problem(vault: Vault, data: bytes | None, rel: str, *, secrets: bool, validity: bool = True) -> str | None:
    """Why `doctor` would flag this version of an entry file: not a valid entry of this vault, or a secret."""
    if data is None:
        return None
    try:
        entry = parse_entry_bytes(data, rel, vault.settings.types)
    except EntryInvalid as exc:
        if validity:
            return f"is not a valid entry ({exc.message})"

        text = data.decode("utf-8", errors="replace")
        kinds = [f.kind for f in find_secrets(text) if not REDACTED_RE.search(text[f.start:f.end])] if secrets else []
        return f"holds what looks like a secret ({kinds[0]})" if kinds else None
    if secrets:
        kind = secret_kind(entry)
        if kind:
            return f"holds what looks like a secret ({kind})"
    return None


def _push_safe_prefix(vault: Vault, remote: str, branch: str, not_upstream: list[str],
                      bad_blobs: list[tuple[str, str]]) -> tuple[str, int] | None:
    """Push the newest commit of HEAD's first-parent line none of whose outgoing ancestors brought a flagged file
    version; (that commit, how many outgoing commits it carries), or None when there is none or the push failed."""
    root = vault.root
    bad: set[str] = set()
    for rel, blob in bad_blobs:   # the outgoing commits whose tree holds the flagged version of the file
        for sha in git(root, "rev-list", "HEAD", *not_upstream, "--", rel).out.split():
            if git(root, "rev-parse", "-q", "--verify", f"{sha}:{rel}", check=False).out.strip() == blob:
                bad.add(sha)
    tainted = set(bad)
    for b in bad:
        tainted.update(git(root, "rev-list", "--ancestry-path", f"{b}..HEAD").out.split())
    target = None
    for sha in git(root, "rev-list", "--first-parent", "--reverse", "HEAD", *not_upstream).out.split():
        if sha in tainted:
            break
        target = sha
    if target is None:
        return None
    # a commit off the first-parent line (a merged side branch) may be tainted too: the prefix must hold none
    carried = git(root, "rev-list", target, *not_upstream).out.split()
    if tainted & set(carried):
        return None
    res = git(root, "push", "--quiet", "--porcelain", remote, f"{target}:refs/heads/{branch}", check=False)
    return (target, len(carried)) if res.code == 0 else None


def _regenerate(vault: Vault, upstream: str) -> str | None:
    """MEMORY.md after a merge: union-merged lines are regenerated from the entries and committed."""
    return _commit_generated(vault, f"regenerate MEMORY.md after merging {upstream}",
                             "MEMORY.md is generated from the entries; the merge combined both sides' versions.",
                             KIND_SYNC)


def _commit_generated(vault: Vault, subject: str, why: str, kind: str) -> str | None:
    """One ``Vault.apply`` with no writes: it commits pending human edits (their own commit), folds the read log and
    regenerates MEMORY.md. Returns the new HEAD, or None when nothing was committed."""
    before = _head(vault)
    vault.apply({}, [], subject=subject, why=why, kind=kind)
    after = _head(vault)
    return after if after != before else None


__all__ = ["sync", "SyncResult", "unresolved"]
