"""Entries that know what they are about: the project's git beside a project vault, and which entries' files
changed in it since the commit they were written at.

An entry may carry ``files`` (project files, relative to the project root) and ``commit`` (the project's commit when
they were seen; ``acpmem.write.fork`` records both). The project is the git work tree around a project vault
(``<project>/.acp-memory``): the nearest folder above the vault's with a ``.git``. A vault elsewhere (a team vault,
the user vault) has no project, and no entry of it is ever marked.

Cost, per turn: HEAD is read from the ref files (no git process); the marks are cached in ``.acpmem/stale.json``,
keyed by the project's HEAD and the catalog's scan digest (which changes with any entry file), so a listing whose HEAD
and entries are as before reads one small file; recall and show look up only the entries they serve, in the diffs
cache ``.acpmem/stale-diffs.json``. When HEAD moved, one ``git diff --name-only`` runs per distinct recorded commit
(entries written in one session share theirs), never a ``git log`` per entry; the commits that
changed a file are looked up only by ``acp memory stale``. ``ACPMEM_CHECKS=off`` turns the marks off (what the
benchmark compares with). ``docs/staleness.md`` has the figures.
"""
from __future__ import annotations

import json
import os
import posixpath
from pathlib import Path

from acpmem.core.entry import COMMIT_RE, MAX_ABOUT_FILES, about_files
from acpmem.core.entryfile import dump_entry, parse_entry
from acpmem.core.errors import Refused
from acpmem.core.layout import LAYER_PROJECT, VAULT_DIRNAME
from acpmem.core.values import Value
from acpmem.infra.files import atomic_write, read_exact

CACHE = "stale.json"          # the listing's marks: {head, scan, stale}
DIFFS = "stale-diffs.json"    # {head, diffs: {recorded commit: changed files, or null when unknown}}
MAX_DIFFS = 64            # distinct recorded commits diffed at most per HEAD; the rest are left unchecked
MAX_LOG_COMMITS = 20      # commits named per stale entry by `acp memory stale`


def checks_on() -> bool:
    """Whether the staleness marks and the citation check are on (``ACPMEM_CHECKS=off`` turns both off)."""
    return os.environ.get("ACPMEM_CHECKS", "").strip().lower() not in ("off", "0", "no", "false")


class Stale(Value):
    """One entry whose files changed: the recorded ``commit``, the ``files`` of it that changed since, and (from
    ``acp memory stale`` only) the ``commits`` that changed them, newest first, each ``{commit, subject}``."""

    id: str
    commit: str
    files: tuple[str, ...]
    commits: tuple[dict, ...] = ()

    def to_json(self) -> dict:
        return {"id": self.id, "commit": self.commit, "files": list(self.files), "commits": list(self.commits)}


def project_root(vault) -> Path | None:
    """The git work tree of the project a project vault sits in, or None (another layer, a vault not named
    ``.acp-memory``, no git around it)."""
    if getattr(vault, "layer", LAYER_PROJECT) != LAYER_PROJECT:
        return None
    root = Path(vault.root)
    if root.name != VAULT_DIRNAME:
        return None
    for d in (root.parent, *root.parent.parents):
        if os.path.exists(d / ".git"):
            return _worktree_here(d) or d
    return None


def _worktree_here(project: Path) -> Path | None:
    """The linked worktree of the project's repository that the current folder is in, when it is another one than
    the project's own (a vault used from ``git worktree add`` checkouts through ``--vault``/``ACPMEM_VAULT``): its
    HEAD is the checkout the session works on. None otherwise. Stats up the folders, no git process."""
    try:
        here = Path(os.getcwd())
    except OSError:
        return None
    for d in (here, *here.parents):
        if os.path.exists(d / ".git"):
            if d == project:
                return None
            mine, theirs = git_dirs(d), git_dirs(project)
            return d if mine and theirs and mine[1] == theirs[1] else None
    return None


def git_dirs(root: Path) -> tuple[Path, Path] | None:
    """(the work tree's git folder, the repository's common folder): the same for the main work tree, two for a
    linked worktree (whose ``.git`` file names its folder, and whose ``commondir`` names the shared one)."""
    gd = _git_dir(root)
    if gd is None:
        return None
    try:
        common = (gd / (gd / "commondir").read_text("ascii").strip()).resolve()
    except (OSError, UnicodeDecodeError):
        common = gd.resolve()
    return gd, common


def read_ref(root: Path, ref: str) -> str | None:
    """The commit a full ref name (``refs/heads/main``) names, from the loose ref or ``packed-refs``; no git."""
    dirs = git_dirs(root)
    if dirs is None or ".." in ref:
        return None
    for base in dict.fromkeys(dirs):
        try:
            sha = (base / ref).read_text("ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if len(sha) == 40 and COMMIT_RE.match(sha):
            return sha
    try:
        packed = (dirs[1] / "packed-refs").read_text("ascii")
    except (OSError, UnicodeDecodeError):
        return None
    for line in packed.splitlines():
        if line.endswith(" " + ref) and len(line) == 41 + len(ref) and COMMIT_RE.match(line[:40]):
            return line[:40]
    return None


def current_branch(root: Path) -> str | None:
    """The branch checked out in the work tree at ``root`` (from its HEAD file), or None when detached."""
    gd = _git_dir(root)
    if gd is None:
        return None
    try:
        head = (gd / "HEAD").read_text("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return head[16:] if head.startswith("ref: refs/heads/") else None


def _git_dir(root: Path) -> Path | None:
    dot = root / ".git"
    if dot.is_dir():
        return dot
    try:   # a worktree or submodule: ".git" is a file naming the real folder
        text = dot.read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("gitdir: "):
        return None
    gd = Path(text[8:].strip())
    return gd if gd.is_absolute() else (root / gd).resolve()


def read_head(root: Path) -> str | None:
    """The commit the project's HEAD names, read from the ref files (loose, then packed); git itself only when
    they say something else (a reftable, a symbolic ref chain). None: no commit yet, or no git."""
    gd = _git_dir(root)
    if gd is None:
        return None
    try:
        head = (gd / "HEAD").read_text("ascii").strip()
        if not head.startswith("ref: "):
            return head if len(head) == 40 and COMMIT_RE.match(head) else _rev_parse(root)
        ref = head[5:]
        common = gd
        try:
            common = (gd / (gd / "commondir").read_text("ascii").strip()).resolve()
        except OSError:
            pass
        for base in dict.fromkeys((gd, common)):
            try:
                sha = (base / ref).read_text("ascii").strip()
            except OSError:
                continue
            if len(sha) == 40 and COMMIT_RE.match(sha):
                return sha
        try:
            packed = (common / "packed-refs").read_text("ascii")
        except OSError:
            packed = ""
        for line in packed.splitlines():
            if line.endswith(" " + ref) and len(line) == 41 + len(ref):
                return line[:40]
        return None if (common / "refs").is_dir() else _rev_parse(root)   # an unborn branch: no commit yet
    except (OSError, UnicodeDecodeError):
        return _rev_parse(root)


def _rev_parse(root: Path) -> str | None:
    # lazy: `list --format prompt` does not need it (measured +7.1 ms to its start-up)
    from acpmem.vault.gitrun import git

    r = git(root, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
    sha = r.out.strip()
    return sha if r.code == 0 and len(sha) == 40 else None


def project_head(vault) -> tuple[Path, str] | None:
    """(the project root, its HEAD commit) for a project vault inside a git project with a commit; else None."""
    root = project_root(vault)
    if root is None:
        return None
    head = read_head(root)
    return (root, head) if head else None


def relative_file(path: str, root: Path, cwd: str | None = None) -> str | None:
    """``path`` (absolute, or relative to ``cwd``, else to the project ``root``) as a path relative to the project
    root, or None when it is outside it. String work plus one realpath of the root."""
    if not isinstance(path, str) or not path or "\x00" in path or "\n" in path:
        return None
    real_root = os.path.realpath(root)
    base = cwd if cwd and os.path.isabs(cwd) else real_root
    full = path if os.path.isabs(path) else posixpath.join(base, path)
    full = posixpath.normpath(full)
    for r in dict.fromkeys((str(root), real_root)):
        if full.startswith(r.rstrip("/") + "/"):
            rel = full[len(r.rstrip("/")) + 1:]
            if rel and not rel.startswith(".git/") and rel != ".git" and not rel.startswith(VAULT_DIRNAME + "/"):
                return rel
    if not os.path.isabs(path) and base != real_root:   # relative to a cwd outside the project: try the root
        return relative_file(path, root)
    return None


# --------------------------------------------------------------------------------------------- the marks

def _about_rows(vault) -> list[tuple[str, str, tuple[str, ...]]]:
    """(id, commit, files) of every live entry that records both, from the catalog (no entry file is read)."""
    def q(con):
        return con.execute("SELECT entry_id, json_extract(data, '$.commit'), json_extract(data, '$.files') FROM files"
                           " WHERE ok AND superseded_by IS NULL AND json_extract(data, '$.commit') IS NOT NULL"
                           " ORDER BY path").fetchall()

    out = []
    for ident, commit, files in vault.with_db(q):
        try:
            value = json.loads(files) if isinstance(files, str) and files[:1] == "[" else files
        except ValueError:
            continue
        got = about_files({"files": value})
        if isinstance(commit, str) and COMMIT_RE.match(commit) and got:
            out.append((ident, commit, got))
    return out


def _scan_key(vault) -> str | None:
    """The catalog's digest of the entry files as last scanned, or None when it cannot vouch for the rows (a partial
    refresh since, or rows read while racily clean)."""
    def q(con):
        return dict(con.execute("SELECT key, value FROM meta WHERE key IN ('scan', 'racy')").fetchall())

    meta = vault.with_db(q)
    return None if meta.get("racy") else meta.get("scan")


def changed_files(root: Path, commit: str, head: str) -> frozenset[str] | None:
    """The files that differ between ``commit`` and ``head`` in the project (``git diff --name-only``), or None when
    the commit is not in this clone's history."""
    # lazy: `list --format prompt` does not need it (measured +7.1 ms to its start-up)
    from acpmem.vault.gitrun import git

    if commit == head or head.startswith(commit):
        return frozenset()
    r = git(root, "diff", "--name-only", "-z", "--no-renames", commit, head, "--", check=False)
    if r.code != 0:
        return None
    return frozenset(p for p in r.out.split("\x00") if p)


def _load_cache(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _save(path: Path, doc: dict) -> None:
    try:
        atomic_write(path, json.dumps(doc, ensure_ascii=False, sort_keys=True), durable=False)
    except OSError:
        pass   # a read-only state folder: computed again next time


def _diffs(vault, root: Path, head: str, commits) -> dict:
    """The changed files since each recorded commit, at this HEAD (``DIFFS``, cached per HEAD): one ``git diff``
    per commit not seen at this HEAD yet, at most ``MAX_DIFFS`` per call (the rest stay unchecked until later)."""
    path = Path(vault.state_dir) / DIFFS
    doc = _load_cache(path)
    if doc.get("head") != head or not isinstance(doc.get("diffs"), dict):
        doc = {"head": head, "diffs": {}}
    diffs = doc["diffs"]
    missing = [c for c in dict.fromkeys(commits) if c not in diffs][:MAX_DIFFS]
    for c in missing:
        got = changed_files(root, c, head)
        diffs[c] = None if got is None else sorted(got)
    if missing:
        _save(path, doc)
    return diffs


def _marks(about, diffs: dict) -> dict[str, Stale]:
    out: dict[str, Stale] = {}
    for ident, commit, files in about:
        changed = diffs.get(commit)
        if changed:
            hit = tuple(f for f in files if f in frozenset(changed))
            if hit:
                out[ident] = Stale(ident, commit, hit)
    return out


def stale_of(vault, entries) -> dict[str, Stale]:
    """The stale ones among ``entries`` (full entries of this project vault, as recall or show serve them), by id.
    No cache is read when none of them records files."""
    if not checks_on():
        return {}

    about = [(e.id, e.extra.get("commit"), about_files(e.extra)) for e in entries if e.extra]
    about = [(i, c, f) for i, c, f in about if isinstance(c, str) and COMMIT_RE.match(c) and f]
    if not about:
        return {}
    ph = project_head(vault)
    if ph is None:
        return {}
    return _marks(about, _diffs(vault, ph[0], ph[1], [c for _, c, _ in about]))


def stale_map(vault, *, force: bool = False) -> dict[str, Stale]:
    """Every live entry whose files changed in the project since its commit, by id (``Stale``, without the commits).
    Empty without a project git, with the checks off, or when no entry records files. Call it after a full read of
    the vault (the listing's): the cache is keyed by the catalog's scan digest of that read."""
    if not checks_on():
        return {}
    ph = project_head(vault)
    if ph is None:
        return {}
    root, head = ph
    cache_path = Path(vault.state_dir) / CACHE
    key = _scan_key(vault)
    cache = {} if force else _load_cache(cache_path)
    if key is not None and cache.get("head") == head and cache.get("scan") == key \
            and isinstance(cache.get("stale"), dict):
        return {i: Stale(i, v[0], tuple(v[1])) for i, v in cache["stale"].items()
                if isinstance(v, list) and len(v) == 2}
    about = _about_rows(vault)
    out = _marks(about, _diffs(vault, root, head, [c for _, c, _ in about])) if about else {}
    _save(cache_path, {"head": head, "scan": key, "stale": {i: [s.commit, list(s.files)] for i, s in out.items()}})
    return out


def unknown_commits(vault) -> list[tuple[str, str]]:
    """(id, commit) of the entries whose recorded commit is not in this clone's project history (after a rebase,
    in a shallow clone): they cannot be checked. Reads the cache ``stale_map`` wrote."""
    doc = _load_cache(Path(vault.state_dir) / DIFFS)
    diffs = doc.get("diffs") if isinstance(doc.get("diffs"), dict) else {}
    return [(i, c) for i, c, _ in _about_rows(vault) if c in diffs and diffs[c] is None]


def stale_report(vault) -> list[Stale]:
    """``acp memory stale``: each stale entry with the commits that changed its files (one ``git log`` per stale
    entry: this is the command a person runs, not a per-turn read)."""
    # lazy: `list --format prompt` does not need it (measured +7.1 ms to its start-up)
    from acpmem.vault.gitrun import git

    ph = project_head(vault)
    if ph is None:
        return []
    root, head = ph
    out = []
    for ident, s in sorted(stale_map(vault, force=True).items()):
        r = git(root, "log", f"--max-count={MAX_LOG_COMMITS}", "--format=%H%x09%s", f"{s.commit}..{head}", "--",
                *s.files, check=False)
        commits = tuple({"commit": line.partition("\t")[0], "subject": line.partition("\t")[2]}
                        for line in r.out.splitlines() if line.strip()) if r.code == 0 else ()
        out.append(s.with_changes(commits=commits))
    return out


def confirm(vault, prefix: str) -> tuple[object, str, str]:
    """A person says the entry is still true: its ``commit`` becomes the project's HEAD, in one commit of kind
    ``human-review`` that changes that one line. (the entry, the new project commit, the vault commit)."""
    # lazy: `list --format prompt` does not need it (measured +15 ms to its start-up)
    from acpmem.vault.writer import KIND_REVIEW

    ph = project_head(vault)
    if ph is None:
        raise Refused(f"the vault at {vault.root} is not inside a git project with a commit, so there is no "
                         "commit to record", "confirm entries from a project vault (<project>/.acp-memory)")
    found = vault.resolve(prefix)
    text = read_exact(vault.root / found.path)
    entry = parse_entry(text, found.path, vault.settings.types)
    if not entry.extra.get("files"):
        raise Refused(f"#{entry.id} records no project files, so there is nothing to confirm",
                         "add `files: [path, …]` to it with `acp memory edit` to have it checked")
    extra = {**entry.extra, "commit": ph[1]}
    extra.pop("anchor", None)   # a branch's entry confirmed at this commit is anchored at it (docs/branches.md)
    new = entry.with_changes(extra=extra)
    sha = vault.replace_entry_text(entry, dump_entry(new), subject=f"confirm #{entry.id} {entry.title}",
                                   why=f"A person confirmed it is still true at the project's commit {ph[1][:12]}.",
                                   kind=KIND_REVIEW)
    return new, ph[1], sha


__all__ = ["Stale", "confirm", "git_dirs", "read_ref", "current_branch", "checks_on", "project_root", "read_head", "project_head", "relative_file", "stale_map",
           "stale_report", "stale_of", "unknown_commits", "changed_files"]


def merged_about(vault, members) -> dict:
    """``files`` and ``commit`` for an entry merged from ``members`` (``consolidate``): every file any of them is
    about (first seen first, at most the limit), and one commit for all, chosen so that the merged entry is stale
    exactly when a member would be: the newest member's commit when no other member's files changed between its
    own commit and that one; else their common ancestor (``git merge-base``: what changed since any member was
    written still marks it, at the price of also naming files a newer member had already seen changed); without
    the project's git or the commits in its history, the oldest member's. Empty when no member records files."""
    files = list(dict.fromkeys(f for e in members for f in about_files(e.extra)))[:MAX_ABOUT_FILES]
    if not files:
        return {}
    dated = sorted((e for e in members if about_files(e.extra) and isinstance((e.extra or {}).get("commit"), str)
                    and COMMIT_RE.match(e.extra["commit"])), key=lambda e: e.created)
    commits = list(dict.fromkeys(e.extra["commit"] for e in dated))
    if len(commits) <= 1:
        return {"files": files, "commit": commits[0]} if commits else {"files": files}
    root = project_root(vault)
    if root is None:
        return {"files": files, "commit": commits[0]}
    newest = dated[-1].extra["commit"]
    seen = [changed_files(root, e.extra["commit"], newest) for e in dated[:-1]]
    if all(ch is not None and not (ch & set(about_files(e.extra))) for e, ch in zip(dated[:-1], seen)):
        return {"files": files, "commit": newest}
    # lazy: `list --format prompt` does not need it (measured +7.1 ms to its start-up)
    from acpmem.vault.gitrun import git

    r = git(root, "merge-base", "--octopus", *commits, check=False)
    base = r.out.strip()
    return {"files": files, "commit": base if r.code == 0 and COMMIT_RE.match(base) else commits[0]}
