"""An entry's history (``acp memory log``): the commits that touched it, with the kind of each change, found through
the ``Acpmem-Kind`` trailer; and the exactly-once check of the fork (the commit carrying a request's trailer).
"""
from __future__ import annotations

from acpmem.core.errors import EntryNotFound, GitStateError
import os

from acpmem.core.layout import ENTRIES_DIR, PROPOSALS_DIR
from acpmem.core.values import Value
from acpmem.vault.gitrun import git
from acpmem.vault.reader import VaultReader


class LogItem(Value):
    commit: str
    date: str
    author: str
    kind: str
    subject: str
    paths: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"commit": self.commit, "date": self.date, "author": self.author, "kind": self.kind,
                "subject": self.subject, "paths": list(self.paths)}


def log(vault: VaultReader, prefix: str | None = None, limit: int = 50) -> list[LogItem]:
    """The history of one entry (by id prefix, forgotten ones too) or of the whole vault, newest first."""
    args = ["log", f"-n{limit}", "--name-only",
            "--format=%x1e%H%x1f%aI%x1f%an%x1f%s%x1f%(trailers:key=Acpmem-Kind,valueonly,separator=%x2c)"]
    if prefix:
        entry = path_in_history(vault, prefix)
        args += ["--follow", "--", entry]
    res = git(vault.root, *args, check=False)
    if res.code != 0:
        if "does not have any commits" in res.err:
            return []
        raise GitStateError(f"git log failed: {res.err.strip()[:200]}", "run `acp memory doctor`")
    items = []
    for rec in res.out.split("\x1e")[1:]:
        head, _, files = rec.partition("\n")
        parts = head.split("\x1f")
        if len(parts) < 5:
            continue
        sha, date, author, subject, kind = parts[:5]
        kind = kind.strip() or ("human-edit (git)" if not subject.startswith("acpmem:") else "change")
        items.append(LogItem(sha[:12], date, author, kind, subject,
                             tuple(f for f in files.strip().splitlines() if f)))
    return items


def path_in_history(vault: VaultReader, prefix: str) -> str:
    """The path of an entry by id prefix — including forgotten entries, found in history, and proposals (waiting
    under ``proposals/``, or rejected and found in history): ``log`` of a proposal's id shows its history."""
    try:
        return vault.resolve(prefix).path
    except EntryNotFound:
        want = (prefix or "").strip().lstrip("#")
        if not want or "/" in want or any(c in want for c in "*?[]\\"):
            raise
        live = proposal_paths(vault, want)
        if len(live) == 1:
            return live[0]
        if live:
            raise
        res = git(vault.root, "log", "--all", "--format=", "--name-only", "--diff-filter=D", "--",
                  f"{ENTRIES_DIR}/{want}*", f"{PROPOSALS_DIR}/{want}*", check=False)
        hits = sorted({p for p in res.out.splitlines() if p.strip()})
        # an accepted proposal later forgotten left both files: the entry's history follows it back to the proposal
        for folder in (ENTRIES_DIR, PROPOSALS_DIR):
            mine = [h for h in hits if h.startswith(folder + "/")]
            if len(mine) == 1:
                return mine[0]
            if mine:
                break
        raise EntryNotFound(f"no entry with id '{want}', now or in this vault's history",
                            "`acp memory log` without an id lists every change, `acp memory list --all` the ids "
                            "there are") from None


def proposal_paths(vault: VaultReader, prefix: str) -> list[str]:
    """The files of the proposals waiting in this vault whose id is ``prefix`` (exactly, else starting with it)."""
    want = (prefix or "").strip().lstrip("#")
    try:
        names = sorted(n for n in os.listdir(vault.root / PROPOSALS_DIR) if n.endswith(".md"))
    except (FileNotFoundError, NotADirectoryError):
        return []
    if not want:
        return []
    exact = [n for n in names if n[:-3] == want or n.startswith(want + "-")]
    return [f"{PROPOSALS_DIR}/{n}" for n in (exact or [n for n in names if n.startswith(want)])]


def commit_for_request(vault: VaultReader, request_id: str) -> str | None:
    """The commit that carries ``Acpmem-Request: <id>``, if any (the fork's exactly-once check). ``request_id`` must
    be a valid id (``acpmem.write.requests.check_request_id``)."""
    # Anchored: a note (one line, behind "Focus:" or "Acpmem-Note:") can never fake this line.
    res = git(vault.root, "log", "--format=%H", f"--grep=^Acpmem-Request: {request_id}$", check=False)
    shas = res.out.split()
    return shas[0] if res.code == 0 and shas else None
