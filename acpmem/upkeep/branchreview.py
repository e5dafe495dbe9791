"""What a person does with memory that follows the code's branches (``docs/branches.md``): what a merge brings
(``diff BASE..BRANCH``), the entries of branches that died unmerged (``doctor``, ``review --branches``), and the
decision on one (``review keep ID --global``, ``review drop ID``). The verdicts are ``acpmem.vault.branches``'s;
these run git per distinct anchor, as commands a person runs, never per turn.
"""
from __future__ import annotations

from pathlib import Path

from acpmem.core.entryfile import dump_entry, parse_entry
from acpmem.core.errors import Refused, UsageError
from acpmem.core.limits import clip
from acpmem.core.values import Value
from acpmem.infra.files import read_exact
from acpmem.vault.branches import Checker, branch_tip, default_branch, git_lines, scoped_rows, visible_here
from acpmem.vault.projectgit import project_head
from acpmem.vault.writer import KIND_REVIEW


class Scoped(Value):
    """A branch-scoped entry as ``diff`` and the orphan list show it."""

    id: str
    title: str
    type: str
    branch: str
    commit: str | None
    anchor: str | None = None
    why: str = ""

    def to_json(self) -> dict:
        return {"id": self.id, "title": self.title, "type": self.type, "branch": self.branch, "commit": self.commit,
                "anchor": self.anchor, "why": self.why}


def _entries(vault) -> dict:
    return {e.id: e for e in vault.load(with_reads=False).live()}


def _scoped(e, why: str = "") -> Scoped:
    x = e.extra or {}
    return Scoped(e.id, e.title, e.type, x.get("branch"), x.get("commit"), x.get("anchor"), why)


def _need_project(vault) -> tuple[Path, str]:
    ph = project_head(vault)
    if ph is None:
        raise Refused(f"the vault at {vault.root} is not inside a git project with a commit, so no entry is "
                      "tied to a branch", "use a project vault (<project>/.acp-memory)")
    return ph


def _resolve(root: Path, name: str) -> str:
    if not name or name.startswith("-") or any(ch.isspace() for ch in name):
        raise UsageError(f"not a branch or commit: {clip(name)}", "e.g. acp memory diff main..feature")
    got = git_lines(root, "rev-parse", "--verify", "-q", f"{name}^{{commit}}")
    if not got:
        raise UsageError(f"the project has no branch or commit {clip(name)}", "name a branch, e.g. main..feature")
    return got[0]


def merge_diff(vault, spec: str) -> dict:
    """``acp memory diff BASE..BRANCH``: the entries a merge of BRANCH into BASE brings into BASE's memory (seen at
    BRANCH's tip, not at BASE), as ``{base, branch, base_commit, branch_commit, entries}``."""
    base, sep, branch = (spec or "").partition("..")
    if not sep or not base or not branch or branch.startswith("."):
        raise UsageError(f"diff takes BASE..BRANCH, got {spec!r}", "e.g. acp memory diff main..feature")
    root, _ = _need_project(vault)
    base_sha, branch_sha = _resolve(root, base), _resolve(root, branch)
    rows = scoped_rows(vault)
    entries = _entries(vault)
    at_base = Checker(vault, root, base_sha, per_head=False)
    at_branch = Checker(vault, root, branch_sha, per_head=False)
    at_base.budget = at_branch.budget = 10_000
    hidden_base, _ = visible_here(vault, rows, at_base, base)
    out = []
    for ident, b, commit, anchor in rows:
        if ident not in hidden_base or ident not in entries or commit is None:
            continue
        a = at_branch.anchor(b, commit, anchor)
        if a is not None and at_branch.holds(a, b):
            out.append(_scoped(entries[ident], f"learned on {b}"))
    at_base.save()
    at_branch.save()
    return {"base": base, "branch": branch, "base_commit": base_sha, "branch_commit": branch_sha,
            "entries": [s.to_json() for s in out]}


def orphans(vault) -> list[Scoped]:
    """The branch-scoped entries no branch holds: their branch is gone (no local or remote branch of that name)
    and no branch's history holds their work, nor the default branch its change (after a squash or a rebase). A
    person decides: ``review keep ID --global`` or ``review drop ID``. Runs git per distinct anchor (``doctor``
    and ``review``, not a per-turn read)."""
    ph = project_head(vault)
    if ph is None:
        return []
    root, _ = ph
    rows = scoped_rows(vault)
    if not rows:
        return []
    remote = vault.settings.branches.remote
    refs = git_lines(root, "for-each-ref", "--format=%(refname)", "refs/heads", f"refs/remotes/{remote}") or []
    names = {r[len("refs/heads/"):] for r in refs if r.startswith("refs/heads/")}
    names |= {r[len(f"refs/remotes/{remote}/"):] for r in refs if r.startswith(f"refs/remotes/{remote}/")}
    gone = [r for r in rows if r[1] not in names]
    if not gone:
        return []
    default = default_branch(root, remote)
    main_tip = branch_tip(root, default, remote) if default else None
    ck = Checker(vault, root, main_tip or ph[1], per_head=False)
    ck.budget = 10_000
    entries = _entries(vault)
    held: dict[str, bool] = {}
    out = []
    for ident, branch, commit, anchor in gone:
        if ident not in entries:
            continue
        a = ck.anchor(branch, commit, anchor) if commit else None
        if a is not None and a not in held:
            held[a] = bool(git_lines(root, "for-each-ref", "--count=1", f"--contains={a}", "--format=%(refname)",
                                  "refs/heads", f"refs/remotes/{remote}")) or ck.holds(a, branch)
        if a is None or not held[a]:
            why = (f"its branch {branch} is gone before a commit of its own was seen here" if a is None and commit
                   else f"its branch {branch} is gone and no branch holds its work")
            out.append(_scoped(entries[ident], why))
    ck.save()
    return out


def keep_global(vault, prefix: str) -> tuple[object, str]:
    """A person keeps a branch's entry for every checkout: its ``branch`` and ``anchor`` lines go (the ``commit``
    stays when it serves the staleness check of its ``files``), in one commit of kind ``human-review``."""
    found = vault.resolve(prefix)
    entry = parse_entry(read_exact(vault.root / found.path), found.path, vault.settings.types)
    extra = dict(entry.extra or {})
    branch = extra.get("branch")
    if branch is None:
        raise Refused(f"#{entry.id} is not tied to a branch", "it is already seen in every checkout")
    for k in ("branch", "anchor"):
        extra.pop(k, None)
    if not extra.get("files"):
        extra.pop("commit", None)
    new = entry.with_changes(extra=extra)
    sha = vault.replace_entry_text(entry, dump_entry(new), subject=f"keep #{entry.id} for every branch",
                                   why=f"A person kept it for every checkout; it was learned on {branch}.",
                                   kind=KIND_REVIEW)
    return new, sha


__all__ = ["Scoped", "merge_diff", "orphans", "keep_global"]
