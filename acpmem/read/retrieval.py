"""Recall and surfacing: the library calls behind ``acp memory recall`` and ``surface``, and the
framed text both put into a prompt.

* ``recall`` searches the derived index (``acpmem.search``, brought up to date with the files first) and returns the
  full entries of the hits only; it never builds every entry. The returned entries are marked read (one append to
  the local read log: no commit, no lock).
* ``surface`` picks, per turn, the top N entries by the selection score (``acpmem.core.score.rank``, jitter salted by the
  session) among live entries not yet surfaced — or recalled — in that session, each capped in bytes, within a
  cumulative per-session budget. The session's ledger (``surfaced.json`` in the session's folder) is read and
  rewritten atomically under a per-session lock, so two concurrent calls never surface the same entry twice.

A database that cannot be read is deleted and rebuilt once (it is a cache of the files).
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from itertools import islice
from pathlib import Path
from types import MappingProxyType

from acpmem.core.entry import Citation, Entry, evidence_of
from acpmem.core.errors import Refused, UsageError
from acpmem.core.layout import LAYER_PROJECT
from acpmem.core.limits import MAX_RECALL_LIMIT, clip, int_between, is_utf8
from acpmem.core.framing import DATA_NOTICE_EN, DATA_NOTICE_ZH, frame
from acpmem.core.values import Value
from acpmem.infra import files, locks
from acpmem.search import held, watch
from acpmem.search.query import light_entries, light_rows, search as search_index
from acpmem.vault import readlog
from acpmem.read.ledger import read_ledger, write_ledger
from acpmem.read.sessions import folder as session_folder
from acpmem.vault.reader import VaultReader, jitter_salt   # the read side is all recall and surfacing need
from acpmem.vault.branches import hidden

DEFERRED_NOTE_CHARS = 100    # room kept for the line saying entries wait for a later turn
MIN_SURFACED_CHARS = 200     # less room than this for a first entry: it waits too
_NO_EXPLAIN = MappingProxyType({})


class RecallHit(Value):
    """One recall result: the full entry (its effective ``last_read`` is the moment of this read), the search
    score, a preview around the first query word, and where the entry came from."""

    entry: Entry
    score: float
    preview: str
    citations: tuple[Citation, ...]
    explain: Mapping = _NO_EXPLAIN       # why it scored (left out of comparison)
    layer: str = LAYER_PROJECT           # the vault it came from: project or user (``acpmem.read.layers``)
    _hidden = ("explain",)

    def to_json(self) -> dict:
        # lazy: `surface` does not need it (measured +0.2 ms to its start-up)
        from acpmem.core.render import entry_json

        return entry_json(self.entry, {"score": self.score, "preview": self.preview, "layer": self.layer})


class SurfacedEntry(Value):
    entry: Entry
    score: float       # the selection score (importance + anti-recency + jitter)
    text: str          # title and body, capped at the per-entry cap (with a note when cut)
    truncated: bool
    layer: str = LAYER_PROJECT

    @property
    def size(self) -> int:
        return len(self.text.encode("utf-8"))

    def to_json(self) -> dict:
        # lazy: `surface` does not need it (measured +0.2 ms to its start-up)
        from acpmem.core.render import entry_json

        return entry_json(self.entry, {"score": round(self.score, 6), "text": self.text,
                                       "truncated": self.truncated, "bytes": self.size, "layer": self.layer})


class SurfaceResult(Value):
    """What one ``surface`` call put into the turn. ``reason`` says why nothing (more) was surfaced."""

    session: str
    entries: tuple[SurfacedEntry, ...]
    used_bytes: int      # cumulative for the session, this call included
    budget_bytes: int
    reason: str | None = None
    deferred: int = 0    # entries left for a later turn to keep this one's text within ``max_chars``

    def to_json(self) -> dict:
        return {"session": self.session, "entries": [e.to_json() for e in self.entries],
                "used_bytes": self.used_bytes, "budget_bytes": self.budget_bytes, "reason": self.reason,
                "deferred": self.deferred}


# --------------------------------------------------------------------------------------------- the index

def _with_index(vault: VaultReader, work: Callable[[sqlite3.Connection], object]):
    """Run ``work`` on the vault's database after bringing the catalog and the index in step with the files
    (``acpmem.search.watch.fresh``); an unreadable database is deleted and rebuilt once (``VaultReader.with_db``)."""
    def fresh_then_work(con: sqlite3.Connection):
        watch.fresh(con, vault.root, vault.state_dir, vault.settings)
        return work(con)

    return vault.with_db(fresh_then_work)


def with_index(vault: VaultReader, work: Callable[[sqlite3.Connection], object]):
    """``work(connection)`` on the vault's search index, brought in step with the files first (``consolidate``)."""
    return _with_index(vault, work)


def _rows_at(con: sqlite3.Connection, paths: Sequence[str]) -> dict[str, tuple[str, str]]:
    """(entry id, catalog JSON) of each file of ``paths`` that is valid, unless another file with the same id comes
    first (the catalog's rule). One query for all of them (a long session's later prompt looks at a hundred hits);
    the JSON is parsed only for the entries a caller gets (``Entry.from_json``)."""
    return {path: (ident, data) for path, ident, data, first in con.execute(
        "SELECT f.path, f.entry_id, f.data, (SELECT min(g.path) FROM files g WHERE g.entry_id = f.entry_id AND "
        "g.ok = 1) FROM files f WHERE f.path IN (SELECT value FROM json_each(?)) AND f.ok = 1",
        (json.dumps(list(paths), ensure_ascii=False),))
        if first == path}


def _entries_at(con: sqlite3.Connection, paths: Sequence[str]) -> list[Entry | None]:
    """The entry of each file of ``paths`` (``_rows_at``), None for a file that is not valid or not first."""
    rows = _rows_at(con, paths)
    return [Entry.from_json(json.loads(rows[p][1])) if p in rows else None for p in paths]


def _effective_last_read(entry: Entry, lr: dict[str, str]) -> Entry:
    seen = lr.get(entry.id, "")
    return entry.with_changes(last_read=seen) if seen > (entry.last_read or "") else entry


def _check_types(vault: VaultReader, types: Iterable[str] | None) -> tuple[str, ...]:
    allowed = vault.settings.types
    if not types:
        return allowed
    types = tuple(dict.fromkeys(types))
    unknown = [t for t in types if t not in allowed]
    if unknown:
        raise Refused(f"unknown entry type '{unknown[0]}'", f"the types of this vault: {', '.join(allowed)}")
    return types


# --------------------------------------------------------------------------------------------- recall

def recall(vault: VaultReader, query: str, limit: int = 5, types: Iterable[str] | None = None,
           include_superseded: bool = False, session: str | None = None, *,
           mark_read: bool = True, report: dict | None = None, previews: bool = True,
           skip: Collection[str] = (), matched: bool = False, upto: int | None = None) -> list[RecallHit]:
    """Search the vault and return up to ``limit`` hits with their full entries; marks them read.

    ``types`` restricts the entry types; superseded entries only with ``include_superseded``. With ``session``,
    the returned entries are also noted in that session's ledger, so ``surface`` does not repeat them.
    ``mark_read=False`` is for acpmem's own lookups (the fork's related entries): no person or model read them.
    ``previews=False`` leaves each hit's ``preview`` empty, for a caller that shows the entries, not previews
    (``surface --prompt``: a long session's later prompt looks at a hundred hits to show five).

    What a caller drops from the hits it may say, so that the entries it would drop are not read (``surface
    --prompt`` ranks as many hits as its session has seen entries, to show five it has not): ``skip``, ids of
    entries to leave out; ``matched``, only the hits the query's words matched (not those reached through an
    entry's links alone); ``upto``, at most this many hits. The hits are then those of the same call without them,
    less the ones left out, cut to ``upto`` — every hit ranked as usual, holding its place within ``limit`` — and
    the entries left out are neither read from the index, nor marked read, nor noted; ``report`` (when given)
    receives ``left_out``, how many of the ``limit`` hits were.

    With the embedding channel on (``[embeddings] model``), the query's vector joins the ranking and ``report``
    (when given) receives ``vectors`` (model, present, missing, used) and, when the query could not be embedded,
    one ``warning``; recall then ranks lexically. Missing entry vectors start the background pass
    (``acpmem.read.embedding``); recall never waits for them. With the rerank stage on (``[rerank] model``), a
    rerank model reorders the best ``[rerank] candidates`` (``acpmem.read.reranking``) and ``report`` receives
    ``rerank`` (model, candidates, used, and ``skipped`` or its own ``warning``). With both off ``report`` stays
    empty."""
    hits = recall_ranked(vault, query, limit, types, include_superseded, session, mark_read=mark_read,
                         report=report, previews=previews, skip=skip, matched=matched, upto=upto)
    kept = [h for h in hits if h.entry is not None]
    if (skip or matched or upto is not None) and report is not None:
        report["left_out"] = len(hits) - len(kept)
    return kept


def _dropped(item: tuple, skip: Collection[str], matched: bool) -> bool:
    """Whether ``recall``'s caller drops ``item``, (an entry's id, its search hit): ``skip``, ``matched``."""
    return item[0] in skip or matched and not (item[1].explain or {}).get("terms", True)


def recall_ranked(vault: VaultReader, query: str, limit: int, types: Iterable[str] | None,
                  include_superseded: bool, session: str | None, *, mark_read: bool, report: dict | None,
                  previews: bool, skip: Collection[str], matched: bool = False,
                  upto: int | None = None) -> list[RecallHit]:
    """``recall``'s hits with the ones its caller drops (``skip``, ``matched``, past ``upto``) in their places, as
    hits without an entry (None) or citations: for ``recall``, and for ``acpmem.read.layers.recall_layered``, which
    merges the layers' hits by score before it cuts them to ``limit`` (and to ``upto``)."""
    query = "" if query is None else query
    if not isinstance(query, str) or not is_utf8(query) or "\x00" in query:
        raise UsageError(f"a query must be text, got {clip(query)}", 'pass words to look for, e.g. "sqlite wal"')
    query = query.strip()
    if not query:
        raise UsageError("recall needs a query", 'pass words to look for, e.g. `acp memory recall "sqlite wal"`')
    if not int_between(limit, 1, MAX_RECALL_LIMIT):
        raise UsageError(f"--limit must be an integer 1..{MAX_RECALL_LIMIT}, got {clip(limit)}", "e.g. --limit 5")
    if upto is not None and not int_between(upto, 0, MAX_RECALL_LIMIT):
        raise UsageError(f"upto must be an integer 0..{MAX_RECALL_LIMIT} or None, got {clip(upto)}", "e.g. upto=5")
    allowed = _check_types(vault, types)
    sdir = session_folder(vault, session) if session else None
    qv = _query_vector(vault, query)
    similar: dict[int, float] = {}

    reranked = bool(vault.settings.rerank.model)
    need = max(limit, vault.settings.rerank.candidates) if reranked else limit

    def kept(found: list[tuple]) -> list[bool]:
        """Of ``found`` ((entry id, hit) in order), which the caller gets."""
        out, n = [], 0
        for item in found:
            keep = not _dropped(item, skip, matched) and (upto is None or n < upto)
            n += keep
            out.append(keep)
        return out

    def work(con: sqlite3.Connection) -> tuple[list[tuple], dict | None]:
        nonlocal similar
        unseen = hidden(vault, con).ids   # learned on branches whose work this checkout lacks
        if qv is not None:
            similar = _vector_side(vault, con, qv, allowed, include_superseded, report)
        want = need
        said: dict | None = {} if qv is not None or reranked else None   # lexical recall does no more work
        while True:
            hits = search_index(con, query, want, types=allowed, include_superseded=include_superseded,
                                preview_length=200 if previews else 0, similar=similar,
                                share=qv.share if qv is not None else 0.0, said=said)
            rows = _rows_at(con, [h.id for h in hits])
            found = [(rows[h.id][0], h) for h in hits if h.id in rows and rows[h.id][0] not in unseen]
            if len(found) >= need or len(hits) < want:
                break
            want = want * 2 + 5  # some hits were files that lose to another file with the same id
        found = found[:need]
        # the entries the caller gets, read (all of them for a rerank model, which reads every candidate's text)
        read = [True] * len(found) if reranked else kept(found[:limit])
        return [(Entry.from_json(json.loads(rows[h.id][1])) if r else ident, h)
                for (ident, h), r in zip(found, read)], said

    found, said = _with_index(vault, work)
    if said is not None:
        if said["sure"] and report is not None and report.get("vectors", {}).get("used"):
            report["vectors"] = {**report["vectors"], "used": False,
                                 "skipped": "the query is an identifier or has a misspelt word"}
        if reranked:   # after the index is let go: no database work waits on the model (nor is redone with it)
            found = _reranked(vault, query, found, said["sure"], said["words"], report)
    found = found[:limit]
    if not found:
        return []
    layer = vault.layer
    out = [not k for k in kept([(e if isinstance(e, str) else e.id, h) for e, h in found])]
    if mark_read:
        ids = [e.id for (e, _), o in zip(found, out) if not o]
        if ids:
            vault.mark_read(ids)
            if sdir is not None:
                note_recalled(sdir, ids)
        now = vault.now()
    return [RecallHit(None, h.score, "", (), h.explain, layer) if o
            else RecallHit(e.with_changes(last_read=now) if mark_read else e, h.score, h.preview, e.citation,
                           h.explain, layer)
            for (e, h), o in zip(found, out)]


def note_recalled(sdir: Path, ids: Iterable[str]) -> None:
    """Note recalled entries in a session's ledger (its folder ``sdir``), so ``surface`` does not repeat them."""
    with _session_lock(sdir):
        ledger = read_ledger(sdir)
        ledger["recalled"] = sorted(set(ledger["recalled"]) | set(ids))
        write_ledger(sdir, ledger)


def _query_vector(vault: VaultReader, query: str):
    if not vault.settings.embeddings.model:       # the channel is off: nothing of it is imported
        return None
    # lazy: `surface` does not need it (measured +25 ms to its start-up)
    from acpmem.read import embedding

    return embedding.query_vector(vault.settings, query)


def _vector_side(vault: VaultReader, con: sqlite3.Connection, qv, allowed, include_superseded: bool,
                 report: dict | None) -> dict[int, float]:
    """The vector channel's candidates for one recall (empty when the query has no vector), reported in
    ``report``; starts the background pass when entries lack vectors."""
    # lazy: `surface` does not need them (measured +22 ms to its start-up)
    from acpmem.search import vectors
    from acpmem.read import embedding

    model = qv.endpoint.vector_key
    if qv.vector is not None:
        try:    # the watcher keeps the vectors in memory; without one, this process reads and compares them
            got = watch.near(vault.state_dir, con, model, qv.vector, list(allowed), include_superseded,
                             vectors.VECTOR_TOP)
            similar, status = got or vectors.nearest(con, vault.state_dir, model, qv.vector, types=allowed,
                                                     include_superseded=include_superseded)
        except ImportError:     # numpy is what compares vectors
            qv = qv.with_changes(vector=None, share=0.0, warning="the embedding channel needs numpy (pip install "
                                 "'acpmem[embeddings]'); recall used lexical search alone")
    if qv.vector is None:
        similar, status = {}, vectors.status(con, vault.state_dir, model, types=allowed,
                                             include_superseded=include_superseded)
    if report is not None:
        report["vectors"] = {**status.to_json(), "model": qv.endpoint.model, "used": bool(similar and qv.share)}
        if qv.skipped:
            report["vectors"]["skipped"] = qv.skipped
        if qv.warning:
            report["warning"] = qv.warning
    if status.missing:
        try:
            embedding.start_background(vault.root, vault.state_dir, len(qv.vector) if qv.vector else 0)
        except OSError as exc:
            vault.warnings.append(f"could not start the embedding pass ({exc}); missing vectors stay missing")
    return similar


def _reranked(vault: VaultReader, query: str, found: list[tuple], sure: bool, words: int,
              report: dict | None) -> list[tuple]:
    """``found`` (entry, hit) in the rerank stage's order (``acpmem.read.reranking``), reported in ``report``.
    The hits keep the scores of recall's order, handed out in the new order, so scores still fall down the list
    and compare with another layer's."""
    # lazy: `surface` does not need it (measured +18 ms to its start-up)
    from acpmem.read import reranking

    texts = [f"{e.title}\n{e.body}".strip() for e, _ in found]
    order, said = reranking.rerank(vault.settings, query, texts, sure, words)
    if report is not None:
        report["rerank"] = said
    if order is None:
        return found
    scores = [h.score for _, h in found]
    return [(found[i][0], found[i][1].with_changes(score=scores[r])) for r, i in enumerate(order)]


# --------------------------------------------------------------------------------------------- surfacing

def session_lock(sdir: Path):
    """The session's ledger lock: held for milliseconds; released by the kernel if we die."""
    return _session_lock(sdir)


def _session_lock(sdir: Path):
    """The session's ledger lock: held for milliseconds; released by the kernel if we die."""
    files.ensure_dir(sdir)
    return locks.held(sdir / "surface.lock", 30.0, what="another process is surfacing in this session")


def cap_text(text: str, cap: int, entry_id: str) -> tuple[str, bool]:
    """``text`` cut to at most ``cap`` UTF-8 bytes (on a character boundary), the note about the rest included."""
    raw = text.encode("utf-8")
    if len(raw) <= cap:
        return text, False
    note = f"\n[… cut here; the rest is in the vault: `acp memory show {entry_id}`]"
    room = max(0, cap - len(note.encode("utf-8")))
    return raw[:room].decode("utf-8", errors="ignore").rstrip() + note, True


def surface(vault: VaultReader, session: str, at: datetime | None = None, seed: int | None = None, *,
            max_chars: int | None = None) -> SurfaceResult:
    """Per-turn surfacing: the top ``[surface] top_n`` live entries by score not yet surfaced (or
    recalled) in ``session``, each capped at ``entry_cap_bytes``, while the session's cumulative
    ``session_budget_bytes`` lasts. Marks them read.

    ``max_chars`` bounds this turn's whole text (``surface_text``, notice and frames included) for a host that cuts
    long context (Claude Code shows about 10,000 characters inline): entries that do not fit wait for a later turn,
    unsurfaced; a first entry too long for it is cut further."""
    # lazy: `recall` does not need it (measured +0.2 ms to its start-up)
    from acpmem.core.score import rank_iter

    sdir = session_folder(vault, session)
    cfg = vault.settings.surface
    at = at or vault.clock()
    with _session_lock(sdir):
        ledger = read_ledger(sdir)
        used, budget = ledger["used_bytes"], cfg.session_budget_bytes
        if used >= budget:
            return SurfaceResult(session, (), used, budget,
                                 f"the session's surfacing budget is spent ({used} of {budget} bytes)")
        seen = set(ledger["surfaced"]) | set(ledger["recalled"])

        layers = vault.layers()
        # (layer vault, path, light entry) of every live entry not yet in this session, from every layer
        light: list[tuple[VaultReader, str, Entry]] = []
        reads: dict[int, dict[str, str]] = {}   # each layer's effective last reads, read once
        for lv in layers:
            lr = reads[id(lv)] = readlog.served_reads(lv.root, lv.state_dir, lv.db_path)
            types = tuple(lv.settings.types)

            def rows(con: sqlite3.Connection | None, lv=lv, lr=lr, types=types, kept=None) -> list:
                got: dict[str, tuple] = {}
                unseen = hidden(lv, con).ids   # learned on branches whose work this checkout lacks
                for path, e in kept if kept is not None else light_entries(light_rows(con, types=types)):
                    if e.id in seen or e.id in got or e.id in unseen:
                        continue  # already in this session; or a second file with the id (the first path wins)
                    got[e.id] = (lv, path, _effective_last_read(e, lr))
                return list(got.values())

            kept = held.rows(str(lv.root), types)   # (only in the read server's children)
            if kept is not None:
                light += rows(None, kept=kept)
            else:
                light += _with_index(lv, rows)
                held.loaded(str(lv.root), str(lv.db_path), types, held.ROWS)
        where = {id(e): (lv, path) for lv, path, e in light}
        ranked = rank_iter([e for _, _, e in light], at, jitter_salt(vault, seed, session), vault.settings.score,
                           top_n=cfg.top_n)
        top = list(islice(ranked, cfg.top_n))   # (the rest are never made)
        full: dict[int, Entry | None] = {}
        for lv in layers:   # the chosen ones in full: one query each, on the index just brought up to date
            mine = [sc.entry for sc in top if where[id(sc.entry)][0] is lv]
            if mine:
                got = lv.with_db(lambda con, mine=mine: _entries_at(con, [where[id(e)][1] for e in mine]))
                full.update((id(e), None if f is None else _effective_last_read(f, reads[id(lv)]))
                            for e, f in zip(mine, got))
        chosen: list[tuple[float, Entry, VaultReader]] = [(sc.total, full[id(sc.entry)], where[id(sc.entry)][0])
                                                          for sc in top if full[id(sc.entry)] is not None]
        if not chosen:
            return SurfaceResult(session, (), used, budget, "every live entry was already surfaced or recalled "
                                 "in this session" if seen else "the vault has no live entries")
        picked: list[SurfacedEntry] = []
        reason = None
        deferred = 0
        chars = len(_notice(vault)) + DEFERRED_NOTE_CHARS
        for n, (total, entry, lv) in enumerate(chosen):
            text, cut = cap_text(f"{entry.title}\n\n{entry.body}".rstrip("\n"), cfg.entry_cap_bytes, entry.id)
            item = SurfacedEntry(entry, total, text, cut, lv.layer)
            if max_chars is not None:
                room = max_chars - chars - 2 - (len(_framed(item)) - len(item.text))
                if len(item.text) > room:
                    if picked or room < MIN_SURFACED_CHARS:
                        deferred = len(chosen) - n
                        break
                    text, _ = cap_text(item.text, room, entry.id)   # the one entry, cut to fit (bytes >= chars)
                    item = SurfacedEntry(entry, total, text, True, lv.layer)
            if used + item.size > budget:
                reason = f"the session's surfacing budget would be exceeded ({used} of {budget} bytes used)"
                break
            used += item.size
            chars += 2 + len(_framed(item))
            picked.append(item)
        if picked:
            ledger["surfaced"] = ledger["surfaced"] + [p.entry.id for p in picked]
            ledger["used_bytes"] = used
            write_ledger(sdir, ledger)
    for lv in layers:
        ids = [p.entry.id for p in picked if p.layer == lv.layer]
        if ids:
            lv.mark_read(ids)
    return SurfaceResult(session, tuple(picked), used, budget, reason, deferred)


# --------------------------------------------------------------------------------------------- prompt text

def _attrs(entry: Entry, layer: str = LAYER_PROJECT) -> dict[str, str]:
    src = entry.source or {}
    return {"id": entry.id, "layer": layer, "type": entry.type,
            "citation": ", ".join(str(c) for c in entry.citation),
            "source": " ".join(f"{k}={v}" for k, v in src.items()) if isinstance(src, dict) else str(src)}


def _notice(vault: VaultReader) -> str:
    return DATA_NOTICE_ZH if vault.settings.language == "zh" else DATA_NOTICE_EN


def recall_text(vault: VaultReader, hits: list[RecallHit], checks: dict | None = None) -> str:
    """The data notice, then each hit's title and body framed as data (what a model reads). ``checks``: by id, the
    attributes the serve-time checks add (``acpmem.read.citecheck.Served.attrs``)."""
    if not hits:
        return "未找到相关记忆。" if vault.settings.language == "zh" else "No memory matches that query."
    checks = checks or {}
    zh = vault.settings.language == "zh"
    blocks = [frame("recall", f"{h.entry.title}\n\n{h.entry.body}" + _evidence_text(h.entry, zh),
                    attrs={**_attrs(h.entry, h.layer), **checks.get(h.entry.id, {})}) for h in hits]
    return "\n\n".join([_notice(vault), *blocks])


def _evidence_text(entry: Entry, zh: bool) -> str:
    """An entry's ``evidence`` (the words of the turns it cites) as quoted lines after its body, or nothing."""
    quotes = evidence_of(entry.extra)
    if not quotes:
        return ""
    head = "所依据的原话：" if zh else "Said in the turns it cites:"
    return "\n\n" + head + "\n" + "\n".join("> " + " ".join(q.split()) for q in quotes)


def lexical_fallback_note(vault: VaultReader) -> str:
    """The one line a model reads after ``recall_text`` when the embedding channel is on but this query could not
    use it (the endpoint failed): the entries were ranked by their words alone, so a paraphrase may have missed."""
    if vault.settings.language == "zh":
        return "（本次检索未能使用语义向量，结果仅按字词匹配排序；换用记忆里可能出现的原词可再试。）"
    return ("(Meaning-based search was unavailable for this query: entries were ranked by their words alone; "
            "retry with words the memory would use.)")


def surface_text(vault: VaultReader, result: SurfaceResult) -> str:
    """The data notice and the framed entries; when nothing is surfaced, one line saying why."""
    if not result.entries:
        return f"(nothing surfaced: {result.reason})" if result.reason else ""
    blocks = [_framed(s) for s in result.entries]
    if result.deferred:
        blocks.append(f"({result.deferred} more {'entry waits' if result.deferred == 1 else 'entries wait'} for a "
                      "later turn; memory_recall finds any of them now.)")
    return "\n\n".join([_notice(vault), *blocks])


def _framed(s: SurfacedEntry) -> str:
    return frame("surface", s.text, attrs=_attrs(s.entry, s.layer))


__all__ = ["recall", "recall_ranked", "surface", "session_lock", "RecallHit", "SurfaceResult", "SurfacedEntry", "recall_text", "surface_text",
           "cap_text", "lexical_fallback_note"]
