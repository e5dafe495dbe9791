"""Memory that follows the code's branches: which project branch an entry was learned on, and whether the checkout
in hand holds that branch's work (``docs/branches.md``).

An entry written while the project is on a branch other than its default one (types chosen by ``[branches]
scoped``) records ``branch`` and ``commit`` (the project's HEAD then); when that HEAD was still a commit of the
default branch (the branch had no commit of its own yet, the work not committed) it adds ``anchor: next``: the
branch's work is its first commit after ``commit``. The entry is seen where

* the checkout is on its branch (by name: a clone of the project on the same branch sees it too), or
* the checkout's HEAD holds its anchor: ``git merge-base --is-ancestor`` (the branch, its children, and any branch
  it was merged into), or the anchor's change is in HEAD under other commits: a rebase or a cherry-pick (every
  commit of the branch up to the anchor has an equal patch in HEAD: ``git cherry``) or a squash merge (every file
  the branch changed up to the anchor, or up to the branch's tip while it exists, reads in HEAD as it does there).

Cost per turn: HEAD and the branch are read from the ref files, the branch-scoped rows from the catalog (one
query); the verdicts are cached per HEAD in ``.acpmem/branches.json``, so a turn at an unchanged HEAD runs no git.
When HEAD moved, git runs once per distinct anchor (entries learned in one session share theirs), never per entry.
"""
from __future__ import annotations

import json
from pathlib import Path

from acpmem.core.entry import COMMIT_RE
from acpmem.core.errors import UsageError
from acpmem.core.layout import LAYER_PROJECT
from acpmem.core.values import Value
from acpmem.infra.files import atomic_write
from acpmem.vault.projectgit import current_branch, git_dirs, project_head, read_ref

# {head, in: {anchor: true | false | null (unknown)}, next: {"<commit> <branch>": [tip, next]},
#  tips: {"<anchor> <branch>": the branch's last tip seen here}, files: {anchor: the files its change is about},
#  older: {head: its "in", for the last HEADs left}}
CACHE = "branches.json"
MAX_CHECKS = 256          # anchors checked at most per call; the rest stay hidden until the next call
DETACHED = "HEAD"         # ``branch:`` of an entry learned on a detached HEAD: seen by ancestry only
SCOPES = ("branch", "global")


# --------------------------------------------------------------------------------------------- git facts

def default_branch(root: Path, remote: str = "origin") -> str | None:
    """The project's default branch: what ``refs/remotes/<remote>/HEAD`` points at, else ``init.defaultBranch``
    when that branch exists, else ``main``, else ``master`` (when they exist); None when none of them does."""
    dirs = git_dirs(root)
    if dirs is None:
        return None
    try:
        text = (dirs[1] / "refs" / "remotes" / remote / "HEAD").read_text("ascii").strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    prefix = f"ref: refs/remotes/{remote}/"
    if text.startswith(prefix) and len(text) > len(prefix):
        return text[len(prefix):]
    # lazy: `list --format prompt` does not need it (measured +7.1 ms to its start-up)
    from acpmem.vault.gitrun import git

    r = git(root, "config", "--get", "init.defaultBranch", check=False)
    names = [r.out.strip()] if r.code == 0 and r.out.strip() else []
    for name in (*names, "main", "master"):
        if read_ref(root, f"refs/heads/{name}") or read_ref(root, f"refs/remotes/{remote}/{name}"):
            return name
    return None


def branch_tip(root: Path, branch: str, remote: str = "origin") -> str | None:
    """The commit a branch name points at here: the local branch, else the remote's branch of that name."""
    return read_ref(root, f"refs/heads/{branch}") or read_ref(root, f"refs/remotes/{remote}/{branch}")


def is_ancestor(root: Path, a: str, b: str) -> bool | None:
    """Whether commit ``a`` is in ``b``'s history; None when git does not know one of them."""
    # lazy: `list --format prompt` does not need it (measured +7.1 ms to its start-up)
    from acpmem.vault.gitrun import git

    if a == b:
        return True
    r = git(root, "merge-base", "--is-ancestor", a, b, check=False)
    return True if r.code == 0 else False if r.code == 1 else None


def git_lines(root: Path, *args: str) -> list[str] | None:
    """The non-empty lines git prints, or None when it fails."""
    # lazy: `list --format prompt` does not need it (measured +7.1 ms to its start-up)
    from acpmem.vault.gitrun import git

    r = git(root, *args, check=False)
    return [x for x in r.out.splitlines() if x.strip()] if r.code == 0 else None


def _changed(root: Path, base: str, tip: str) -> list[str]:
    return git_lines(root, "diff", "--name-only", "--no-renames", base, tip) or []


def _reads_same(root: Path, files: list[str], tip: str, head: str) -> bool:
    """Whether every one of ``files`` (at least one) reads in ``head`` as it does in ``tip``."""
    # lazy: `list --format prompt` does not need it (measured +7.1 ms to its start-up)
    from acpmem.vault.gitrun import git

    return bool(files) and git(root, "diff", "--quiet", "--no-renames", tip, head, "--", *files,
                               check=False).code == 0


def equal_change(root: Path, anchor: str, head: str, tip: str | None = None) -> tuple[bool, list[str]]:
    """For an ``anchor`` not in ``head``'s history: whether its branch's change is in ``head`` under other
    commits — equal patches (a rebase or cherry-pick, ``git cherry``: every commit since the merge base has its
    equal in ``head``), or equal content (a squash merge: the files the branch changed since the merge base read
    the same, at ``anchor`` or at the branch's ``tip``). Also the files it compared: a later HEAD that changes none
    of them cannot change the answer."""
    base = git_lines(root, "merge-base", anchor, head)
    if not base:
        return False, []   # no common history at all
    files = _changed(root, base[0], anchor)
    if _reads_same(root, files, anchor, head):
        return True, files
    if tip and tip != anchor and is_ancestor(root, anchor, tip):
        tip_base = git_lines(root, "merge-base", tip, head)
        more = _changed(root, tip_base[0], tip) if tip_base else []
        files = sorted(set(files) | set(more))
        if _reads_same(root, more, tip, head):
            return True, files
    cherry = git_lines(root, "cherry", head, anchor, base[0])   # last: it reads every patch on HEAD's side
    return bool(cherry) and all(x.startswith("-") for x in cherry), files


def change_in(root: Path, anchor: str, head: str, tip: str | None = None) -> bool | None:
    """Whether the branch's work up to ``anchor`` is in ``head``: by ancestry, else as an equal change
    (``equal_change``). None: ``anchor`` is not in this clone."""
    known = is_ancestor(root, anchor, head)
    return known if known is not False else equal_change(root, anchor, head, tip)[0]


def next_commit(root: Path, commit: str, tip: str) -> str | None:
    """The first commit after ``commit`` on the way to ``tip`` (the branch's first own commit), or None."""
    if tip == commit:
        return None
    got = git_lines(root, "rev-list", "--reverse", "--ancestry-path", f"{commit}..{tip}")
    return got[0] if got else None


# --------------------------------------------------------------------------------------------- at write

def scope_for(vault, type: str, choice: str | None = None) -> dict:
    """The frontmatter an entry of ``type`` written now gets: ``{branch, commit}`` (and ``anchor: next`` when the
    branch has no commit of its own yet), or ``{}`` (global). ``choice``: ``branch`` or ``global`` overrides the
    ``[branches] scoped`` default. Only project-layer entries in a git project are ever scoped; a user preference
    is only when asked. Runs git (the default branch, one ancestry check): a write path, not a per-turn read."""
    if choice not in (None, *SCOPES):
        raise UsageError(f"a scope is branch or global, got {choice!r}", "pass --branch or --global")
    if choice == "global" or getattr(vault, "layer", LAYER_PROJECT) != LAYER_PROJECT:
        return {}
    cfg = vault.settings.branches
    if choice is None and (type not in cfg.scoped_types() or type == "user-preference"):
        return {}
    ph = project_head(vault)
    if ph is None:
        return {}
    root, head = ph
    here = current_branch(root)
    default = default_branch(root, cfg.remote)
    if choice is None and here is not None and here == default:
        return {}
    tip = branch_tip(root, default, cfg.remote) if default else None
    on_default = bool(tip) and is_ancestor(root, head, tip) is True
    if choice is None and here is None and on_default:
        return {}   # a detached HEAD in the default branch's history (a bisect, a tag): what is true there is global
    out = {"branch": here or DETACHED, "commit": head}
    if on_default and here != default:
        out["anchor"] = "next"
    return out


def with_scope(entry, fields: dict):
    """``entry`` with the scope ``fields`` (``scope_for``) in its frontmatter; the files' ``commit`` (staleness)
    is the same HEAD, so one key serves both."""
    if not fields:
        return entry
    return entry.with_changes(extra={**(entry.extra or {}), **fields})


# --------------------------------------------------------------------------------------------- at read

class Hidden(Value):
    """The branch-scoped entries a checkout does not see: their ids, and how many are waiting for their branch's
    first commit (``pending``) among them."""

    ids: frozenset = frozenset()
    pending: int = 0
    branch: str | None = None

    def line(self, lang: str = "en") -> str:
        """The one line the resident index and ``list`` say about them ('' when none)."""
        n = len(self.ids)
        if not n:
            return ""
        if lang == "zh":
            return f"（另有 {n} 条在其他分支上学到的记忆未列出：本检出不含其分支的工作；`acp memory list --all-branches` 可查看。）"
        return (f"({n} {'entry' if n == 1 else 'entries'} learned on other branches hidden: "
                f"{'its' if n == 1 else 'their'} work is not in this checkout; `acp memory list --all-branches` "
                "shows them)")


NONE = Hidden()


def scoped_rows(vault, con=None) -> list[tuple[str, str, str | None, str | None]]:
    """(id, branch, commit, anchor) of every live branch-scoped entry, from the catalog."""
    def q(c):
        return c.execute("SELECT entry_id, json_extract(data, '$.branch'), json_extract(data, '$.commit'),"
                         " json_extract(data, '$.anchor') FROM files WHERE json_extract(data, '$.branch') IS NOT NULL"
                         " AND ok AND superseded_by IS NULL").fetchall()   # through the files_branch index

    rows = sorted(q(con) if con is not None else vault.with_db(q), key=lambda r: (r[0] or "", r[1] or ""))
    return [(i, b, c if isinstance(c, str) and COMMIT_RE.match(c) else None, a) for i, b, c, a in rows
            if isinstance(b, str)]


def _load(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _save(path: Path, doc: dict) -> None:
    try:
        atomic_write(path, json.dumps(doc, sort_keys=True), durable=False)
    except OSError:
        pass   # a read-only state folder: computed again next time


KEEP_HEADS = 4            # the verdicts of the last HEADs left are kept for a checkout back to one of them
ANCESTRY_SPAN = 20_000    # commits of HEAD's history listed at once to answer ancestry for every anchor


class Checker:
    """The verdicts at one HEAD, cached in ``CACHE``; git only for what the cache does not hold.

    When HEAD moved forward (a commit, a pull: the old HEAD is in the new one's history), the old verdicts carry
    over: what was in stays in, an anchor among the new commits comes in, and one that was out is looked at again
    only when the new commits changed a file its change is about — three git runs, whatever the number of
    entries. Otherwise one ``git rev-list`` answers ancestry for every anchor at once. ``per_head`` False
    (``diff``, ``orphans``: another HEAD than the checkout's) keeps its verdicts to itself and shares only what
    holds for good: the first commits found, the files of each anchor's change and the branch tips seen."""

    def __init__(self, vault, root: Path, head: str, per_head: bool = True) -> None:
        self.root, self.head, self.remote = root, head, vault.settings.branches.remote
        self.path = Path(vault.state_dir) / CACHE
        self.per_head = per_head
        doc = _load(self.path)
        keep = {k: doc[k] if isinstance(doc.get(k), dict) else {} for k in ("next", "tips", "files", "older")}
        verdicts = doc["in"] if per_head and isinstance(doc.get("in"), dict) else {}
        self.dirty = False
        if per_head and doc.get("head") != head:
            older = keep["older"]
            if isinstance(doc.get("head"), str) and verdicts:   # kept for a checkout back to it
                older = {k: v for k, v in older.items() if k != doc["head"]}
                older = dict(list(older.items())[-(KEEP_HEADS - 1):]) if KEEP_HEADS > 1 else {}
                older[doc["head"]] = verdicts
            back = older.pop(head, None)
            keep["older"] = older
            verdicts = back if isinstance(back, dict) else self._carried(doc.get("head"), verdicts, keep["files"])
            self.dirty = True
        self.doc = {"head": head, "in": verdicts, **keep}
        self.ancestry: dict[str, bool | None] = {}
        self.budget = MAX_CHECKS

    def _carried(self, old, verdicts: dict, files: dict) -> dict:
        if not (isinstance(old, str) and COMMIT_RE.match(old) and verdicts):
            return {}
        if is_ancestor(self.root, old, self.head) is not True:
            return {}   # another branch, a rebase, a reset: looked at afresh
        new = git_lines(self.root, "rev-list", f"--max-count={ANCESTRY_SPAN}", self.head, f"^{old}")
        if new is None or len(new) >= ANCESTRY_SPAN:
            return {}
        new_set = set(new)
        touched = set(_changed(self.root, old, self.head)) if new else set()
        out = {}
        for a, v in verdicts.items():
            if v is True or a in new_set:
                out[a] = True
            elif v is False and isinstance(files.get(a), list) and not touched.intersection(files[a]):
                out[a] = False
        return out

    def prime(self, anchors) -> None:
        """Ancestry of every anchor not decided yet, in one ``git rev-list`` of HEAD's recent history (and one
        ``git cat-file`` to tell an anchor this clone lacks from one outside that history)."""
        missing = [a for a in dict.fromkeys(anchors) if a not in self.doc["in"] and a not in self.ancestry]
        if not missing:
            return
        if len(missing) == 1:
            return   # one ``merge-base --is-ancestor`` (in ``holds``) is cheaper than the listing
        listed = git_lines(self.root, "rev-list", f"--max-count={ANCESTRY_SPAN}", self.head)
        if listed is None:
            return
        seen, complete = set(listed), len(listed) < ANCESTRY_SPAN
        out_of = [a for a in missing if len(a) == 40 and a not in seen]
        for a in missing:
            if a in seen:
                self.ancestry[a] = True
        if complete and out_of:
            # lazy: `list --format prompt` does not need it (measured +7.1 ms to its start-up)
            from acpmem.vault.gitrun import git

            r = git(self.root, "cat-file", "--batch-check", input="\n".join(out_of) + "\n", check=False)
            there = {line.split()[0] for line in r.out.splitlines() if line.split()[1:2] == ["commit"]} \
                if r.code == 0 else set()
            for a in out_of:
                self.ancestry[a] = False if a in there else None

    def tip(self, anchor: str, branch: str) -> str | None:
        """The branch's tip now, else the last one seen here (kept: a squash-merged branch is often deleted, and
        what it changed after the anchor is still how its merge is recognised)."""
        key = f"{anchor} {branch}"
        now = branch_tip(self.root, branch, self.remote) if branch != DETACHED else None
        if now is not None:
            if self.doc["tips"].get(key) != now:
                self.doc["tips"][key] = now
                self.dirty = True
            return now
        kept = self.doc["tips"].get(key)
        return kept if isinstance(kept, str) and COMMIT_RE.match(kept) else None

    def anchor(self, branch: str, commit: str, anchor: str | None) -> str | None:
        """The commit whose presence means the branch's work is here: ``commit``, or for ``anchor: next`` the
        branch's first commit after it (found through the branch's ref, then kept for good), or None yet."""
        if anchor != "next":
            return commit
        key = f"{commit} {branch}"
        got = self.doc["next"].get(key)
        if isinstance(got, list) and len(got) == 2 and isinstance(got[1], str):
            return got[1]
        tip = branch_tip(self.root, branch, self.remote) if branch != DETACHED else None
        if tip is None or (isinstance(got, list) and got[:1] == [tip]):
            return None   # no branch to look at, or no new commit on it since last looked
        if self.budget <= 0:
            return None
        self.budget -= 1
        first = next_commit(self.root, commit, tip)
        self.doc["next"][key] = [tip, first]
        self.dirty = True
        return first

    def holds(self, anchor: str, branch: str) -> bool:
        verdict = self.doc["in"].get(anchor, "?")
        if verdict == "?":
            if self.budget <= 0:
                return False
            self.budget -= 1
            known = self.ancestry[anchor] if anchor in self.ancestry else is_ancestor(self.root, anchor, self.head)
            if known is False:
                known, files = equal_change(self.root, anchor, self.head, self.tip(anchor, branch))
                self.doc["files"][anchor] = files
            verdict = known
            self.doc["in"][anchor] = verdict
            self.dirty = True
        return verdict is True

    def save(self) -> None:
        if not self.dirty:
            return
        if self.per_head:
            _save(self.path, self.doc)
            return
        doc = _load(self.path)   # the checkout's own verdicts stay as they are
        for k in ("next", "tips", "files"):
            doc[k] = {**(doc[k] if isinstance(doc.get(k), dict) else {}), **self.doc[k]}
        _save(self.path, doc)


def visible_here(vault, rows, checker: Checker, here: str | None) -> tuple[set[str], int]:
    """(the ids among ``rows`` this checkout does not see, how many of them wait for their branch's first commit)."""
    hidden: set[str] = set()
    pending = 0
    todo = []
    for ident, branch, commit, anchor in rows:
        if here is not None and branch == here:
            continue
        if commit is None:
            hidden.add(ident)
            continue
        a = checker.anchor(branch, commit, anchor)
        if a is None:
            hidden.add(ident)
            pending += 1
        else:
            todo.append((ident, branch, a))
    checker.prime(a for _, _, a in todo)
    for ident, branch, a in todo:
        if not checker.holds(a, branch):
            hidden.add(ident)
    return hidden, pending


def hidden(vault, con=None) -> Hidden:
    """The live entries of this project vault that the checked-out project does not see (``Hidden``). Nothing
    is hidden outside a git project (no checkout to compare with) nor in the user layer."""
    if getattr(vault, "layer", LAYER_PROJECT) != LAYER_PROJECT:
        return NONE
    rows = scoped_rows(vault, con)
    if not rows:
        return NONE
    ph = project_head(vault)
    if ph is None:
        return NONE
    root, head = ph
    here = current_branch(root)
    checker = Checker(vault, root, head)
    ids, pending = visible_here(vault, rows, checker, here)
    checker.save()
    return Hidden(frozenset(ids), pending, here)


__all__ = ["Hidden", "Checker", "default_branch", "branch_tip", "change_in", "equal_change", "git_lines", "scope_for",
           "scoped_rows", "visible_here", "with_scope", "hidden", "SCOPES", "DETACHED"]
