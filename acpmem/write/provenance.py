"""What the fork records beside an entry so it can be checked later: the project files the cited turns read or
changed and the project's commit (``files``, ``commit``: ``acpmem.vault.projectgit``), and a digest of the cited turns
in each citation (``hash``: ``acpmem.read.citecheck``).

The files come from the transcript: the tool calls of the cited turns (``acpmem.core.toolfiles``) and, for a
compression block, the files its host recorded for it (pi's compaction ``details.readFiles`` / ``modifiedFiles``).
A citation of the commit's own seq names no turn that touched a file, so for it the turns since the previous
``memory_commit`` (what the commit is about) are read instead. Only files inside the project that exist there are
kept, relative to its root, changed ones first, at most ``MAX_FILES``. User-layer entries get the hashes only: the
user vault is read in every project, and one project's file names and commits stay out of it.
"""
from __future__ import annotations

import os

from acpmem.core.layout import LAYER_PROJECT
from acpmem.core.toolfiles import tool_files
from acpmem.read.citecheck import cited_turn_seqs, turns_digest
from acpmem.vault.projectgit import checks_on, project_head, relative_file

MAX_FILES = 24
WINDOW = 400      # messages read back for a plain citation


def _window(transcript) -> list:
    """The messages since the previous ``memory_commit`` call, up to the end of the prefix (the commit's own call
    excluded from the search for the previous one)."""
    msgs = list(transcript.messages)[-WINDOW:]
    out: list = []
    for i, m in enumerate(reversed(msgs)):
        calls = m.raw.get("tool_calls") if isinstance(m.raw, dict) else None
        names = {(c.get("function") or {}).get("name") for c in calls if isinstance(c, dict)} \
            if isinstance(calls, list) else set()
        if i > 0 and "memory_commit" in names:
            break
        out.append(m)
    return list(reversed(out))


def entry_files(transcript, citations, root, cwd: str | None = None) -> tuple[str, ...]:
    """The project files (relative to ``root``) the cited turns read or changed, changed ones first."""
    if transcript is None:
        return ()
    raws: list = []
    named: list[tuple[str, bool]] = []
    plain = True
    for c in citations:
        if c.block:
            plain = False
            try:
                b = transcript.block(c.block)
            except Exception:   # noqa: BLE001 - a block the transcript lacks names no file
                b = None
            if b is not None:
                named += [(f, True) for f in b.modified_files] + [(f, False) for f in b.read_files]
        seqs = cited_turn_seqs(transcript, c)
        if c.block or len(seqs) > 1:
            plain = False
            raws += [m.raw for m in transcript.turns(seqs)]
    if plain:
        raws = [m.raw for m in _window(transcript)]
    named += tool_files(raws)
    changed: dict[str, bool] = {}
    for p, ch in named:
        rel = relative_file(p, root, cwd)
        if rel is None or not os.path.isfile(os.path.join(root, rel)):
            continue
        changed[rel] = changed.get(rel, False) or ch
    ordered = sorted(changed, key=lambda p: not changed[p])   # stable: changed first, then in the order seen
    return tuple(ordered[:MAX_FILES])


def annotate(vault, transcript, entries: list, layer_of: dict) -> list:
    """``entries`` with each citation's ``hash`` and, for project-layer entries in a git project, ``files`` and
    ``commit`` (when any file was found). Anything that cannot be read leaves the entry as it was."""
    if transcript is None or not checks_on():
        return entries
    ph = project_head(vault) if vault.layer == LAYER_PROJECT else None
    cwd = _session_cwd(transcript)
    out = []
    for e in entries:
        own = e.citation[0].session if e.citation else None   # a citation carried from a superseded entry of
        cites = tuple(c.with_changes(hash=turns_digest(transcript, cited_turn_seqs(transcript, c)))   # another
                      if c.hash is None and c.session == own else c for c in e.citation)      # session is not hashed here
        extra = dict(e.extra or {})
        if ph is not None and layer_of.get(e.id, LAYER_PROJECT) == LAYER_PROJECT and "files" not in extra:
            files = entry_files(transcript, e.citation, ph[0], cwd)
            if files:
                extra["files"] = list(files)
                extra["commit"] = ph[1]
        out.append(e.with_changes(citation=cites, extra=extra))
    return out


def _session_cwd(transcript) -> str | None:
    """The working folder the host recorded for the session (pi's header ``cwd``), if any."""
    host = getattr(transcript, "host", None)
    cwd = getattr(host, "cwd", None)
    return cwd if isinstance(cwd, str) and os.path.isabs(cwd) else None


__all__ = ["annotate", "entry_files", "MAX_FILES"]
