"""Following a citation back to its turns: where each session's transcript lives, and what an entry's citations
point at in it.

Where a transcript lives is local knowledge (a path on this machine), so it is never in an entry: the first time a
session is seen with its transcript — a commit, the MCP server, the Claude Code hook — the path is recorded in the
session's folder under ``.acpmem/sessions/`` (``transcript.json``, one small file per session, written atomically:
two writers at once both write the same first sighting, or the later one finds it there). It changes only when the
recorded file is gone and a new one is named.

A commit also records the file it named for its own request (``request-<id>.json``): an entry made from that
request is read back from that file, whatever was sighted first for the session.

``entry_source`` reads an entry's citations back: for each, the transcript, the cited turns (a seq, a range, or a
block's covered turns), and for a block its summary; ``source_text`` frames them as data. A transcript that was not
recorded, is gone, or cannot be read is said plainly, never an error: the entry itself stays readable.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from acpmem.core.errors import AcpmemError, TranscriptError
from acpmem.core.framing import clean_inline, frame
from acpmem.core.limits import path_problem, seq_span
from acpmem.core.values import Value
from acpmem.infra import files
from acpmem.infra.files import atomic_write, expand_home

RECORD = "transcript.json"
LEGACY_RECORD = "claude-code.json"     # what the Claude Code hook has recorded since before this module
MAX_TURNS_SHOWN = 200
MAX_TURN_CHARS = 4000


# --------------------------------------------------------------------------------------------- the record

def record_transcript(vault, session: str, transcript: str | Path | None, origin: str) -> bool:
    """Record where ``session``'s transcript lives, if it is the first sighting (or the recorded file is gone).
    Returns whether anything was written. Never raises for I/O: it is a convenience for ``show --source``."""
    # lazy: `show`, which reads these records, does not need it (measured +0.4 ms to its start-up)
    from acpmem.read.sessions import folder as session_folder

    if not transcript or not session or path_problem(str(transcript)):
        return False

    try:
        path = os.path.abspath(expand_home(transcript, "the transcript path"))
        folder = session_folder(vault, session)
        target = folder / RECORD
        known = _read(target)
        if known == path:
            return False
        if known and Path(known).exists():
            return False
        files.ensure_dir(folder)
        data = json.dumps({"session": session, "transcript": path, "origin": origin}, ensure_ascii=False,
                          sort_keys=True)
        try:
            atomic_write(target, data, durable=False, replace=known is not None)
        except FileExistsError:
            return False   # another process recorded it first
        return True
    except (OSError, AcpmemError):
        return False


def record_request_transcript(vault, session: str, request_id: str, transcript: str | Path | None) -> bool:
    """Record the transcript a commit named for its request (``request-<id>.json`` in the session's folder): the file
    the fork distils from, so ``show --source`` reads the entries of that request from it even when the session's
    first-sighted transcript (the hook's, the server's) is another file. Never raises for I/O."""
    # lazy: `show`, which reads these records, does not need it (measured +0.4 ms to its start-up)
    from acpmem.read.sessions import folder as session_folder

    if not transcript or not session or not request_id or path_problem(str(transcript)):
        return False

    try:
        path = os.path.abspath(expand_home(transcript, "the transcript path"))
        folder = session_folder(vault, session)
        files.ensure_dir(folder)
        atomic_write(folder / f"request-{request_id}.json", json.dumps(
            {"session": session, "request": request_id, "transcript": path}, ensure_ascii=False, sort_keys=True),
            durable=False)
        return True
    except (OSError, AcpmemError, ValueError):
        return False


def request_transcript(vault, session: str, request_id: str | None) -> str | None:
    """The transcript the commit of ``request_id`` named (``record_request_transcript``), if recorded."""
    if not request_id or not isinstance(request_id, str) or "/" in request_id or request_id.startswith("."):
        return None
    try:
        folder = vault.session_dir(session)
    except AcpmemError:
        return None
    return _read(folder / f"request-{request_id}.json")


def _read(path: Path) -> str | None:
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    value = doc.get("transcript", doc.get("transcript_path")) if isinstance(doc, dict) else None
    return value if isinstance(value, str) and value and not path_problem(value) else None


def recorded_transcript(vault, session: str) -> str | None:
    """The transcript recorded for ``session`` (by a commit, the MCP server or the Claude Code hook), if any."""
    try:
        folder = vault.session_dir(session)
    except AcpmemError:
        return None
    return _read(folder / RECORD) or _read(folder / LEGACY_RECORD)


# --------------------------------------------------------------------------------------------- reading back

class Turn(Value):
    seq: int
    role: str
    text: str


class CitedSource(Value):
    """One citation read back. ``status``: ``ok``, ``not_recorded`` (no transcript known for the session), ``gone``
    (the recorded file no longer exists), ``unreadable`` (it exists but does not read: ``problem`` says why),
    ``no_block`` (the transcript has no such block). ``turns`` are the first ``MAX_TURNS_SHOWN`` cited turns,
    ``missing`` those of them the transcript does not hold, ``more`` how many cited turns were left unread."""

    citation: object
    status: str
    transcript: str | None = None
    problem: str | None = None
    block: object = None
    turns: tuple[Turn, ...] = ()
    missing: tuple[int, ...] = ()
    more: int = 0

    def to_json(self) -> dict:
        return {"citation": self.citation.to_dict(), "status": self.status, "transcript": self.transcript,
                "problem": self.problem, "block": self.block.to_json() if self.block is not None else None,
                "turns": [{"seq": t.seq, "role": t.role, "text": t.text} for t in self.turns],
                "missing": list(self.missing), "more": self.more}


class EntrySource(Value):
    entry: object
    sources: tuple[CitedSource, ...]

    def to_json(self) -> dict:
        return {"id": self.entry.id, "title": self.entry.title, "sources": [s.to_json() for s in self.sources]}


def cited_seqs(citation) -> tuple[int, ...]:
    # lazy: `show` does not need it (measured +0.4 ms to its start-up)
    from acpmem.core.blocks import parse_turns

    if citation.turns:
        return parse_turns(citation.turns) or ()
    span = seq_span(citation.seq)
    if span is None:
        return ()
    lo, hi = span
    return tuple(range(lo, min(hi, lo + 100_000) + 1))


def entry_source(vault, entry_id: str, *, transcript: str | None = None) -> EntrySource:
    """The turns an entry cites, read from each session's recorded transcript (or ``transcript``, for all of
    them). Does not mark the entry read. The id may be in either layer; transcripts are looked up where this
    session's vault recorded them, so a user-layer entry written in another project says "not recorded" here."""
    # lazy: `commit` does not need it (measured +2.0 ms to its start-up)
    from acpmem.read.layers import resolve_layer

    _, entry = resolve_layer(vault, entry_id)
    if transcript:   # `~/…` in quotes reaches us as it was typed: expanded as the shell would have
        transcript = str(expand_home(transcript, "--transcript"))
    cache: dict[str, object] = {}
    out = []
    request = entry.source.get("request") if isinstance(entry.source, dict) else None
    for c in entry.citation:
        out.append(_one(vault, c, transcript, cache, request))
    bad = next((s for s in out if s.status in ("gone", "unreadable")), None) if transcript else None
    if bad is not None:   # a file the person named that cannot be read is their error, not a finding to report

        why = (bad.problem or "does not exist").removeprefix(f"{transcript}: ")
        raise TranscriptError(f"--transcript {transcript}: {why}",
                              "name a transcript file acpmem reads (`acp memory blocks FILE` checks one)")
    return EntrySource(entry, tuple(out))


def _one(vault, c, override: str | None, cache: dict, request: str | None = None) -> CitedSource:
    # lazy: `show` does not need it (measured +12 ms to its start-up)
    from acpmem.hosts.transcripts import read_transcript

    # the file the commit named (what the fork read), else the session's first-sighted one
    path = override or request_transcript(vault, c.session, request) or recorded_transcript(vault, c.session)
    if not path:
        return CitedSource(c, "not_recorded")
    try:
        there = Path(path).exists()
    except OSError as exc:   # a name too long for the file system, …: not a file anyone can read
        return CitedSource(c, "unreadable", path, exc.strerror or str(exc))
    if not there:
        return CitedSource(c, "gone", path)

    def read(seqs):   # a DSH log is scanned for just these turns (and its blocks); other formats are read whole
        key = (path, seqs)
        if key not in cache:
            try:
                cache[key] = read_transcript(Path(path), turns=seqs)
            except TranscriptError as exc:
                cache[key] = exc
        return cache[key]

    seqs = cited_seqs(c)
    t = read(frozenset(sorted(set(seqs))[:MAX_TURNS_SHOWN]))
    if isinstance(t, TranscriptError):
        return CitedSource(c, "unreadable", path, t.message)
    # lazy: `show` does not need it (measured +0.4 ms to its start-up)
    from acpmem.core.blocks import valid_block_id

    block = None
    block_id = c.block or (c.seq if valid_block_id(c.seq) else None)   # an older citation's seq "b3" is a block
    if block_id:
        try:
            block = t.block(block_id)
        except TranscriptError as exc:
            return CitedSource(c, "no_block", path, exc.message)
        if not c.turns and block.seqs:
            seqs = block.seqs
    shown = tuple(sorted(set(seqs)))[:MAX_TURNS_SHOWN]   # the rest are counted, not read
    t = read(frozenset(shown))          # the same read as above unless a block named the turns
    if isinstance(t, TranscriptError):
        return CitedSource(c, "unreadable", path, t.message)
    found = t.turns(shown)
    have = {m.seq for m in found}
    missing = tuple(s for s in shown if s not in have)
    turns = tuple(Turn(m.seq, m.role, _clip(t.text(m))) for m in found)
    return CitedSource(c, "ok", path, None, block, turns, missing, len(set(seqs)) - len(shown))


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TURN_CHARS else text[:MAX_TURN_CHARS - 1] + "…"


def source_text(src: EntrySource, lang: str = "en") -> str:
    """The cited turns as text for a person or a model: each citation's turns and block framed as data."""
    # lazy: `show` does not need it (measured +0.4 ms to its start-up)
    from acpmem.core.blocks import turns_text

    e = src.entry
    lines = [f"#{e.id} {clean_inline(e.title)}"]
    if not src.sources:
        lines.append("This entry records no citation: there is no source to show.")
    for s in src.sources:
        c = s.citation
        lines.append("")
        lines.append(f"Citation {clean_inline(str(c))}" + (f", tier {c.tier}" if c.tier else "")
                     + (f", compaction {c.compaction}" if c.compaction else "")
                     + (f", turns {c.turns}" if c.turns else ""))
        if s.status == "not_recorded":
            lines.append(f"  The transcript of session {clean_inline(c.session)} was not recorded on this machine: "
                         "no source to show (pass --transcript FILE if you have it).")
            continue
        if s.status == "gone":
            lines.append(f"  The recorded transcript {s.transcript} is gone: no source to show.")
            continue
        if s.status in ("unreadable", "no_block"):
            lines.append(f"  {clean_inline(s.problem or '')}")
            continue
        lines.append(f"  from {s.transcript}")
        if s.block is not None:
            b = s.block
            lines.append(frame("block", b.summary, attrs={"id": b.id, "tier": str(b.tier or "unknown"),
                                                           "topic": b.topic or "",
                                                           "turns": turns_text(b.seqs) or "not recorded"}))
        for t in s.turns:
            lines.append(frame("turn", t.text, attrs={"seq": str(t.seq), "role": t.role}))
        if s.more:
            lines.append(f"  … and {s.more} more cited turns, not shown")
        if s.missing:
            lines.append(f"  Turns not in the transcript: {turns_text(s.missing)}")
        if not s.turns and not s.missing and s.block is None:
            lines.append("  The citation names no turn of this transcript.")
    return "\n".join(lines) + "\n"
