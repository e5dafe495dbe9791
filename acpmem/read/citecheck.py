"""Citations checked when served: whether an entry's cited turns are recorded, still there, and unchanged.

When the fork writes an entry it stores, in each citation, ``hash``: a digest of the cited turns' text
(``turns_digest``). When ``recall`` or ``show`` serves the entry, ``check_entries`` says for each entry one of:

* ``ok`` — every cited transcript is there and its cited turns hash as they did;
* ``changed`` — a cited transcript is there but its cited turns read differently now (edited, or a turn gone);
* ``gone`` — the transcript recorded for a cited session no longer exists;
* ``unreadable`` — it exists and does not read;
* ``not_recorded`` — no transcript is recorded on this machine for a cited session (written elsewhere);
* ``unchecked`` — the transcript is there, but the citation has no hash (written before this check, or by hand);
* ``none`` — the entry cites nothing.

Never an error: a serve that cannot check says so. Cheap: a citation costs a stat of its transcript; the digest is
computed again only when the file's size, mtime or inode differs from the last check (kept in ``.acpmem/cites.json``),
so a turn reads no transcript unless one changed since it was last checked.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from acpmem.core.errors import TranscriptError
from acpmem.core.fasthash import sha256
from acpmem.core.layout import LAYER_PROJECT
from acpmem.core.values import Value
from acpmem.infra.files import atomic_write
from acpmem.read.sources import cited_seqs, recorded_transcript
from acpmem.vault.projectgit import checks_on, stale_of

CACHE = "cites.json"
MAX_HASHED_TURNS = 2000
MAX_CACHED = 512         # transcripts remembered in the cache
ORDER = ("gone", "changed", "unreadable", "not_recorded", "unchecked", "ok", "none")   # the worst first
MARKED = frozenset({"gone", "changed", "unreadable"})
TEXT = {"ok": "cited turns unchanged", "changed": "cited turns changed since written",
        "gone": "cited transcript is gone", "unreadable": "cited transcript does not read",
        "not_recorded": "cited transcript not recorded on this machine",
        "unchecked": "cited transcript present, no hash recorded", "none": "no citation"}


class CiteCheck(Value):
    """One entry's citation check: the overall ``status`` (the worst of its citations, ``ORDER``) and one
    ``{citation, status, transcript}`` per citation."""

    status: str
    citations: tuple[dict, ...] = ()

    @property
    def marked(self) -> bool:
        return self.status in MARKED

    @property
    def text(self) -> str:
        return TEXT[self.status]

    def to_json(self) -> dict:
        return {"status": self.status, "marked": self.marked, "text": self.text, "citations": list(self.citations)}


def cited_turn_seqs(transcript, citation) -> tuple[int, ...]:
    """The seqs a citation names: its turns, else its seq or range, else its block's covered turns."""
    # lazy: `show` does not need it (measured +0.4 ms to its start-up)
    from acpmem.core.blocks import valid_block_id

    seqs = cited_seqs(citation)
    if not seqs and transcript is not None:
        block_id = citation.block or (citation.seq if valid_block_id(citation.seq) else None)
        if block_id:
            try:
                seqs = tuple(transcript.block(block_id).seqs)
            except Exception:   # noqa: BLE001 - a citation of a block the transcript lacks hashes no turn
                seqs = ()
    return tuple(sorted(set(seqs)))[:MAX_HASHED_TURNS]


def turns_digest(transcript, seqs) -> str:
    """A digest of the cited turns' text: seq, role and readable text of each (``Transcript.text``), in order."""
    h = sha256()
    for m in transcript.turns(seqs):
        h.update(f"{m.seq}\x1f{m.role}\x1f{transcript.text(m)}\x1e".encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]


def _sig(path: str) -> str | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


def _key(c) -> str:
    return f"{c.seq}|{c.turns or ''}|{c.block or ''}"


def _digest_now(path: str, c, memo: dict) -> str | Exception:
    """The digest of ``c``'s turns in the transcript at ``path`` as it is now, or the error reading it."""
    # lazy: `show` does not need it (measured +12 ms to its start-up)
    from acpmem.hosts.transcripts import read_transcript

    seqs = cited_seqs(c)
    want = frozenset(sorted(set(seqs))[:MAX_HASHED_TURNS]) if seqs else None
    try:
        if (path, want) not in memo:
            memo[(path, want)] = read_transcript(Path(path), turns=want)
        t = memo[(path, want)]
    except (TranscriptError, OSError) as exc:
        return exc
    return turns_digest(t, cited_turn_seqs(t, c))


def check_entries(vault, entries) -> dict[str, CiteCheck]:
    """Each entry's ``CiteCheck`` by id. Transcripts are looked up where this vault recorded them
    (``acpmem.read.sources``); one cache read and at most one write for the whole call."""
    cache_path = Path(vault.state_dir) / CACHE
    try:
        cache = json.loads(cache_path.read_text("utf-8"))
        if not isinstance(cache, dict):
            cache = {}
    except (OSError, ValueError):
        cache = {}
    dirty = False
    memo: dict = {}
    where: dict[str, str | None] = {}
    out: dict[str, CiteCheck] = {}
    for e in entries:
        per = []
        for c in e.citation:
            if c.session not in where:
                where[c.session] = recorded_transcript(vault, c.session)
            path = where[c.session]
            status = "ok"
            if not path:
                status = "not_recorded"
            else:
                sig = _sig(path)
                if sig is None:
                    status = "gone"
                elif not c.hash:
                    status = "unchecked"
                else:
                    slot = cache.get(path) if isinstance(cache.get(path), dict) else None
                    if slot is None or slot.get("sig") != sig or not isinstance(slot.get("d"), dict):
                        slot = {"sig": sig, "d": {}}
                        cache[path] = slot
                        dirty = True
                    got = slot["d"].get(_key(c))
                    if got is None:
                        now = _digest_now(path, c, memo)
                        got = "!" if isinstance(now, Exception) else now
                        slot["d"][_key(c)] = got
                        dirty = True
                    status = "unreadable" if got == "!" else ("ok" if got == c.hash else "changed")
            per.append({"citation": c.to_dict(), "status": status, "transcript": path})
        overall = min((p["status"] for p in per), key=ORDER.index) if per else "none"
        out[e.id] = CiteCheck(overall, tuple(per))
    if dirty:
        if len(cache) > MAX_CACHED:   # the oldest first in insertion order: keep the newest
            cache = dict(list(cache.items())[-MAX_CACHED:])
        try:
            atomic_write(cache_path, json.dumps(cache, ensure_ascii=False), durable=False)
        except OSError:
            pass
    return out


__all__ = ["CiteCheck", "check_entries", "turns_digest", "cited_turn_seqs", "TEXT", "MARKED"]


class Served(Value):
    """What serving an entry says about it: ``stale`` (``acpmem.vault.projectgit.Stale``, or None) and ``cited``
    (its ``CiteCheck``)."""

    stale: object
    cited: CiteCheck

    def attrs(self) -> dict[str, str]:
        """The frame attributes ``recall`` adds: ``cited`` always, ``stale`` when the files changed."""
        out = {"cited": self.cited.text}
        if self.stale is not None:
            files = list(self.stale.files)
            out["stale"] = "files changed since written: " + ", ".join(files[:5]) + (" …" if len(files) > 5 else "")
        return out

    def lines(self) -> list[str]:
        """The lines ``show`` prints."""
        out = [f"source check: {self.cited.text}" + "".join(
            f"\n  {c['citation']['session']}#{c['citation']['seq']}: {TEXT[c['status']]}"
            + (f" ({c['transcript']})" if c["transcript"] else "") for c in self.cited.citations
            if len(self.cited.citations) > 1 or c["status"] != "ok")]
        if self.stale is not None:
            out.append(f"stale: files changed in the project since commit {self.stale.commit[:12]}: "
                       f"{', '.join(self.stale.files)} (`acp memory stale` names the commits)")
        return out

    def to_json(self) -> dict:
        return {"stale": self.stale.to_json() if self.stale is not None else None, "cited": self.cited.to_json()}


def served(vault, pairs) -> dict[str, Served]:
    """Both checks for the entries being served, given as (entry, layer) pairs, by id: the staleness of the
    project-layer ones (``acpmem.vault.projectgit.stale_of``) and every one's citations. Empty with
    ``ACPMEM_CHECKS=off``."""
    if not checks_on():
        return {}
    pairs = list(pairs)
    entries = [e for e, _ in pairs]
    stale = stale_of(vault, [e for e, layer in pairs if layer == LAYER_PROJECT]) if vault.layer == LAYER_PROJECT \
        else {}
    cites = check_entries(vault, entries)
    return {e.id: Served(stale.get(e.id), cites[e.id]) for e in entries}


__all__ += ["Served", "served"]
