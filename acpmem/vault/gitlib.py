"""The write path's git steps in-process, through libgit2 (pygit2): the status of the work tree and the commit of
exactly the given paths — what ``git status`` and ``git add`` + ``git commit --only -- PATHS`` do, without starting a
process per step (``docs/design.md``, "Measured choices", has the figures behind this).

Used by ``acpmem.vault.writer`` for a write's own commit, and only when it gives the same result as the ``git``
executable; otherwise the writer runs ``git`` as before (``head_readable``, ``doctor``'s first look at HEAD, leaves
every case it cannot read to ``git`` the same way):

* pygit2 is missing, or ``ACPMEM_GIT=exe`` asks for the executable;
* this process runs one command and ends (``acpmem.infra.proc.one_command``, set by the console scripts) and has
  not loaded pygit2: loading it (~60 ms of CPU) costs more than the few git processes of its commits;
* the repository has a ``post-commit`` hook (``git commit --no-verify`` runs it; libgit2 runs no hook) or
  ``commit.gpgsign`` set (libgit2 does not sign);
* git knows no identity (``git var``: the executable path then supplies one and retries, as always);
* libgit2 cannot read the repository (a split index, an extension it lacks) or fails on the way: the commit steps
  are idempotent, so the executable finishes what was started.

The identity is git's own: ``git var -l`` before an open vault's first commit (not per write; a command that only
reads the status, ``doctor`` say, starts none), and the strict ``git var GIT_AUTHOR_IDENT`` as well unless the
identity shown is exactly the configured ``user.name`` and ``user.email``, so
``GIT_AUTHOR_*``/``GIT_COMMITTER_*``, ``GIT_CONFIG_*`` and every config scope count exactly as for ``git commit``.
The hook, signing and identity reasons send only the commits to the executable; the status is libgit2's still.
Never imported on the read path.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from acpmem.core.errors import GitStateError
from acpmem.infra import proc
from acpmem.vault.gitrun import git, require_git, tracked


class Unusable(Exception):
    """This repository (or this moment) needs the ``git`` executable."""


def _parts(value: str) -> tuple[str, str]:
    """``Name <email> 1700000000 +0100`` (``git var``) → (name, email), as written."""
    name, _, rest = value.partition(" <")
    return name, rest.partition(">")[0]


def _ident(value: str):
    """``Name <email> 1700000000 +0100`` (``git var``) → (name, email)."""
    name, email = _parts(value)
    if not name.strip() or not email.strip():
        raise Unusable("no identity")
    return name.strip(), email.strip()


def head_readable(root: Path) -> bool:
    """True where libgit2 reads HEAD's commit and its tree — what ``git rev-parse --verify HEAD^{tree}`` answers,
    without starting a process. False where it cannot say (the executable is to be used, no commit yet, anything it
    fails to open or read): the caller asks git, whose answer and words count there."""
    try:
        return InProcess(root).read_head()
    except (Unusable, GitStateError):
        return False


def tracked_under(root: Path, folder: str) -> list[str] | None:
    """The files git's index holds at ``folder`` or under it (relative to the vault ``root``; ``.gitignore`` does not
    hide a tracked file): ``[]`` where ``root`` is no repository, None where neither libgit2 nor git can say. Read
    in process where libgit2 reads the index (no git process: ``doctor`` asks on every run), else by
    ``git ls-files`` (``gitrun.tracked``)."""
    if not (Path(root) / ".git").exists():
        return []
    folder = folder.rstrip("/")
    prefix = folder + "/"
    try:
        lib = InProcess(root)
    except (Unusable, GitStateError):
        return tracked(root, folder)
    try:
        return [e.path for e in lib.repo.index if e.path == folder or e.path.startswith(prefix)]
    except (lib.pygit2.GitError, OSError, UnicodeDecodeError):   # an index libgit2 cannot read: git says
        return tracked(root, folder)


class InProcess:
    """One vault's repository opened through libgit2. Raises ``Unusable`` when the executable must be used (opening:
    for everything; ``commit``: for the commits)."""

    def __init__(self, root: Path) -> None:
        if os.environ.get("ACPMEM_GIT", "").lower() == "exe":
            raise Unusable("ACPMEM_GIT=exe")
        if proc.one_command and "pygit2" not in sys.modules:
            # one command, then the process ends: importing pygit2 (~60 ms of CPU) costs more than the three git
            # processes a commit takes (a `remember`: 296 → 231 ms of CPU, at 1,000 entries 351 → 293)
            raise Unusable("one command: the executable costs less than loading pygit2")
        try:
            # lazy: pygit2 is heavy, never imported at start-up
            import pygit2
        except ImportError:
            raise Unusable("pygit2 is not installed") from None
        require_git()   # a write fails here, before it changes anything, as with the executable
        self.pygit2 = pygit2
        self.root = Path(root)
        self._committer: tuple | Unusable | None = None   # ``_commit_ready``'s answer, once asked
        try:
            # this folder's own repository, never one libgit2 would find above it (a vault has its own .git)
            self.repo = pygit2.Repository(str(self.root), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
        except pygit2.GitError as exc:
            raise Unusable(str(exc)) from None

    def _commit_ready(self) -> tuple:
        """(author, committer) as git would record them, asked of git before this repository's first commit here;
        raises ``Unusable`` where the executable must commit (signed commits, a post-commit hook, no identity)."""
        if self._committer is None:
            try:
                self._committer = self._ask_git()
            except Unusable as exc:
                self._committer = exc   # asked once: every commit of this vault here goes to the executable
        if isinstance(self._committer, Unusable):
            raise Unusable(str(self._committer))
        return self._committer

    def _ask_git(self) -> tuple:
        res = git(self.root, "var", "-l", check=False)
        if res.code != 0:
            raise Unusable("git var failed")
        values: dict[str, str] = {}
        for line in res.out.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip().lower()] = value   # the most specific scope comes last
        if values.get("commit.gpgsign", "false").lower() in ("true", "yes", "on", "1"):
            raise Unusable("commits are signed")
        hooks = Path(values["core.hookspath"]) if values.get("core.hookspath") else self.root / ".git" / "hooks"
        if not hooks.is_absolute():
            hooks = self.root / hooks
        if os.access(hooks / "post-commit", os.X_OK):
            raise Unusable("a post-commit hook")
        if "git_author_ident" not in values or "git_committer_ident" not in values:
            raise Unusable("no identity")
        # `git var -l` shows a made-up identity where `git commit` would refuse (user.useConfigOnly, no domain): the
        # strict form says whether git would commit — asked unless both identities are exactly the configured
        # user.name and user.email (given explicitly, as git writes them unchanged: the strict form then succeeds)
        configured = (values.get("user.name"), values.get("user.email"))
        if not (all(configured) and _parts(values["git_author_ident"]) == configured
                == _parts(values["git_committer_ident"])) \
                and git(self.root, "var", "GIT_AUTHOR_IDENT", check=False).code != 0:
            raise Unusable("no identity")
        return _ident(values["git_author_ident"]), _ident(values["git_committer_ident"])

    # ----------------------------------------------------------------- reading HEAD
    def head_file(self, rel: str) -> bytes | None:
        """The blob of ``rel`` in HEAD, as ``git show HEAD:REL`` prints it (no filter applied), or None when HEAD
        has no such file (or there is no HEAD yet)."""
        pygit2 = self.pygit2
        try:
            if self.repo.head_is_unborn:
                return None
            tree = self.repo.head.peel(pygit2.Commit).tree
            try:
                obj = tree[rel]
            except KeyError:
                return None
            return obj.data if obj.type == pygit2.enums.ObjectType.BLOB else None
        except (pygit2.GitError, OSError) as exc:
            raise Unusable(str(exc)) from None

    def read_head(self) -> bool:
        """Whether HEAD names a commit, whose commit and tree libgit2 then reads (False: no commit yet); raises
        ``Unusable`` where reading them fails."""
        try:
            if self.repo.head_is_unborn:
                return False
            self.repo.head.peel(self.pygit2.Commit).tree
            return True
        except (self.pygit2.GitError, KeyError, ValueError) as exc:
            raise Unusable(str(exc)) from None

    # ----------------------------------------------------------------- status
    def status(self) -> list[tuple[str, str]]:
        """(porcelain-like code, path) of every change: ``??`` untracked, ``A`` added, ``D`` deleted, ``M`` else —
        as ``git status --porcelain --untracked-files=all --no-renames`` reports them."""
        fs = self.pygit2.enums.FileStatus
        out = []
        # libgit2 compares with an empty tree where HEAD's commit cannot be read (a damaged pack), and would call
        # every file added; git refuses, and says why
        self.read_head()
        try:
            found = self.repo.status(untracked_files="all", ignored=False)
        except self.pygit2.GitError as exc:
            raise Unusable(str(exc)) from None
        for path, flags in found.items():
            if flags & (fs.INDEX_DELETED | fs.WT_DELETED):
                code = "D"
            elif flags & fs.INDEX_NEW:
                code = "A"
            elif flags & fs.WT_NEW:
                code = "??"
            else:
                code = "M"
            out.append((code, path))
        return out

    # ----------------------------------------------------------------- commit
    def commit(self, on_disk: list[str], gone: list[str], message: str) -> str | None:
        """Stage ``on_disk`` (their content now, through the repository's filters) and remove ``gone`` in the index,
        then commit HEAD's tree with exactly those paths changed — other staged changes stay staged, uncommitted, as
        with ``git commit --only``. Returns the new commit, or None when the tree is HEAD's (nothing to commit).

        The index is written first and the commit made from it: killed in between, the journal's replay finds the
        paths staged and commits them (the same order ``git commit`` keeps)."""
        pygit2 = self.pygit2
        repo = self.repo
        ident = self._commit_ready()   # before anything is staged: the executable then does every step
        try:
            index = repo.index
            index.read(False)
            # The index's record of each file's stat, brought up to date where a file's stat changed and its content
            # did not (libgit2 writes the index only then). A vault copied, restored from a backup or moved to
            # another disk has new inodes and ctimes on every file; libgit2's status never writes back what it
            # learns, so without this every later write hashed every file again (40 ms at 1,000 entries, against
            # 3 ms), until a person ran `git status` there. Costs one look at the work tree, as a status does.
            sys.audit("acpmem.git", "index.refresh", str(self.root))
            index.diff_to_workdir(flags=pygit2.enums.DiffOption.UPDATE_INDEX)
            for p in on_disk:
                index.add(p)
            for p in gone:
                if p in index:
                    index.remove(p)
            sys.audit("acpmem.git", "index.write", str(self.root))   # libgit2's steps raise no audit event of
            index.write()                                              # their own: the crash-point tests stop here
            if repo.head_is_unborn:
                parents, base = [], None
            else:
                head = repo.head.peel(pygit2.Commit)
                parents, base = [head.id], head.tree
            work = pygit2.Index()
            if base is not None:
                work.read_tree(base)
            for p in on_disk:
                entry = index[p]
                work.add(pygit2.IndexEntry(p, entry.id, entry.mode))
            for p in gone:
                if p in work:
                    work.remove(p)
            sys.audit("acpmem.git", "write-tree", str(self.root))
            tree = work.write_tree(repo)
            if base is not None and tree == base.id:
                return None
            author = pygit2.Signature(*ident[0])
            committer = pygit2.Signature(*ident[1])
            sys.audit("acpmem.git", "commit", str(self.root))
            oid = repo.create_commit("HEAD", author, committer, message, tree, parents)
            return str(oid)
        except (pygit2.GitError, KeyError, OSError) as exc:
            raise Unusable(str(exc)) from None

