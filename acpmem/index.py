"""The derived search index: postings, document frequencies, field lengths and the per-document metadata that
ranking needs, in the catalog's SQLite file (``.acpmem/index.sqlite``), next to its ``files`` table.

It is derived twice over: the markdown files are the truth, ``catalog.refresh`` keeps ``files`` (one parsed entry
per path, with a stat signature) in step with them, and ``update`` keeps these tables in step with ``files``. For
that it keeps, per indexed path, the signature it indexed and compares it with ``files`` in SQL: whatever changed
the files table (this process, another command, an older run that was killed) the difference is found, and only
those documents are analysed again. Invalid files (``ok = 0``) are never indexed; superseded entries are indexed and
filtered at query time.

Nothing here is committed. A schema version row in ``meta`` and a check that every table is present decide whether
the tables are trusted; if not they are dropped and rebuilt from ``files``, and an unreadable database file is
deleted and rebuilt (``open_index``).

Concurrency: the file is in WAL mode with a busy timeout (``catalog.connect``). An update runs in one
``BEGIN IMMEDIATE`` transaction and recomputes the difference inside it, so a process that finds the work already
done by another commits nothing.

``IndexSource`` answers ``search.PostingSource`` from these tables: a query reads the postings of its own terms
only (with the field lengths joined in), the vocabulary is probed term by term, and the full term list is loaded
only for the typo channel, when a query word is not in the vocabulary. Document metadata is read in one batch for
the documents that scored.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from operator import itemgetter
from pathlib import Path

from acpmem import catalog
from acpmem.errors import LockTimeout
from acpmem.model import Value
from acpmem.search import (B, CJK_CHARS, FIELD_WEIGHTS, FIELDS, K1, CorpusStats, Hit, QueryGroup, SearchDoc,
                           _seq_range, doc_fields, make_preview, plan_query, rank, typo_neighbours)

INDEX_VERSION = "5"
VERSION_KEY = "search_index_version"
TABLES = ("idx_docs", "idx_lens", "idx_tids", "idx_terms", "idx_post", "idx_cites", "idx_stats", "idx_dirty")
TRIGGERS = ("idx_files_ins", "idx_files_upd", "idx_files_del")
_NF = len(FIELDS)

_SCHEMA = (
    # One narrow row per indexed file (joined to every posting a query reads, so kept small) ...
    """CREATE TABLE IF NOT EXISTS idx_docs (
        key INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, sig TEXT NOT NULL, entry_id TEXT NOT NULL,
        type TEXT NOT NULL, sup INTEGER NOT NULL, importance INTEGER NOT NULL, created TEXT, last_read TEXT,
        tags TEXT NOT NULL, cites TEXT NOT NULL, l0 INTEGER NOT NULL, l1 INTEGER NOT NULL, l2 INTEGER NOT NULL,
        l3 INTEGER NOT NULL)""",
    # ... the part of it that scoring joins to every posting (a narrow table: a query at 100,000 entries joins tens
    # of thousands of postings, and row width decides how many pages that touches) ...
    """CREATE TABLE IF NOT EXISTS idx_lens (key INTEGER PRIMARY KEY, sup INTEGER NOT NULL, type TEXT NOT NULL,
        l0 INTEGER NOT NULL, l1 INTEGER NOT NULL, l2 INTEGER NOT NULL, l3 INTEGER NOT NULL)""",
    # ... and the term ids of its postings, so they can be removed without a scan. (The text itself is read from
    # the catalog's ``files.data``, for the hits only.)
    "CREATE TABLE IF NOT EXISTS idx_tids (key INTEGER PRIMARY KEY, tids TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS idx_terms (tid INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE, df INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS idx_post (tid INTEGER NOT NULL, key INTEGER NOT NULL, f0 INTEGER NOT NULL,
        f1 INTEGER NOT NULL, f2 INTEGER NOT NULL, f3 INTEGER NOT NULL, PRIMARY KEY (tid, key)) WITHOUT ROWID""",
    "CREATE TABLE IF NOT EXISTS idx_cites (session TEXT NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL, "
    "key INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS idx_cites_session ON idx_cites(session, lo)",
    "CREATE INDEX IF NOT EXISTS idx_cites_key ON idx_cites(key)",
    # Corpus totals; ``gen`` counts committed updates (a process may keep its term cache while it is the writer).
    """CREATE TABLE IF NOT EXISTS idx_stats (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL,
        s0 INTEGER NOT NULL, s1 INTEGER NOT NULL, s2 INTEGER NOT NULL, s3 INTEGER NOT NULL, gen INTEGER NOT NULL)""",
    # Paths whose ``files`` row changed since the last update, written by triggers in the same transaction as
    # the change, so finding "nothing to do" costs one lookup instead of a join over every file.
    "CREATE TABLE IF NOT EXISTS idx_dirty (path TEXT PRIMARY KEY) WITHOUT ROWID",
    "CREATE TRIGGER IF NOT EXISTS idx_files_ins AFTER INSERT ON files BEGIN "
    "INSERT OR IGNORE INTO idx_dirty(path) VALUES (new.path); END",
    "CREATE TRIGGER IF NOT EXISTS idx_files_upd AFTER UPDATE ON files BEGIN "
    "INSERT OR IGNORE INTO idx_dirty(path) VALUES (old.path); INSERT OR IGNORE INTO idx_dirty(path) VALUES (new.path); END",
    "CREATE TRIGGER IF NOT EXISTS idx_files_del AFTER DELETE ON files BEGIN "
    "INSERT OR IGNORE INTO idx_dirty(path) VALUES (old.path); END",
)

# The difference between what the catalog holds and what is indexed, for a batch of paths (a JSON array): indexed
# versions whose file is gone, invalid or has another signature; valid files not indexed with their signature.
_STALE_SQL = """SELECT d.key FROM json_each(?) j JOIN idx_docs d ON d.path = j.value
                LEFT JOIN files f ON f.path = d.path WHERE f.path IS NULL OR f.ok = 0 OR f.sig <> d.sig"""
_MISSING_SQL = """SELECT f.path, f.sig, f.data FROM json_each(?) j JOIN files f ON f.path = j.value
                  LEFT JOIN idx_docs d ON d.path = f.path
                  WHERE f.ok = 1 AND (d.key IS NULL OR d.sig <> f.sig) ORDER BY f.path"""
PRUNE_FROM_POSTINGS = 20_000   # below this many postings a query is scored whole (pruning costs a second query)
PROBE_COST = 0.35              # a primary-key probe, relative to one posting of a scan (measured at 100,000 entries)
CHUNK = 2000  # paths per write transaction: a long rebuild never holds the write lock for long


class UpdateResult(Value):
    """What ``update`` did: documents analysed and indexed, indexed versions dropped (changed or gone files), and
    whether the tables were (re)created empty first."""

    indexed: int = 0
    dropped: int = 0
    rebuilt: bool = False
    via: str = "scan"     # how the catalog was brought in step first: "scan" (every file) or "watcher"


# --------------------------------------------------------------------------------------------- schema

def index_version() -> str:
    # The stemmer implementation is part of the version: PyStemmer (C) and snowballstemmer (Python) are meant to
    # agree, but an index is only trusted with the analyser that built it.
    from acpmem.search import _stemmer
    return f"{INDEX_VERSION}:{type(_stemmer()).__module__}"


def _tables_ok(con: sqlite3.Connection) -> bool:
    have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")}
    if not (set(TABLES) | set(TRIGGERS) | {"meta"}) <= have:
        return False
    row = con.execute("SELECT value FROM meta WHERE key=?", (VERSION_KEY,)).fetchone()
    return bool(row and row[0] == index_version() and con.execute("SELECT count(*) FROM idx_stats").fetchone()[0])


def _create(con: sqlite3.Connection) -> None:
    """Drop and create the index tables, inside the caller's transaction."""
    for name in TRIGGERS:
        con.execute(f"DROP TRIGGER IF EXISTS {name}")
    for name in TABLES:
        con.execute(f"DROP TABLE IF EXISTS {name}")
    for stmt in _SCHEMA:
        con.execute(stmt)
    con.execute("INSERT INTO idx_stats(id, n, s0, s1, s2, s3, gen) VALUES (1, 0, 0, 0, 0, 0, 0)")
    con.execute("INSERT OR IGNORE INTO idx_dirty(path) SELECT path FROM files")
    con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (VERSION_KEY, index_version()))


def delete_db(state_dir: Path) -> None:
    catalog.delete(state_dir / catalog.DB_NAME)


# --------------------------------------------------------------------------------------------- documents

def _tags(d: dict) -> tuple[str, ...]:
    tags = d.get("tags")
    if isinstance(tags, str):
        return (tags,)
    if isinstance(tags, list):
        return tuple(str(t) for t in tags if isinstance(t, (str, int, float)) and not isinstance(t, bool))
    return ()


def search_doc(d: dict) -> SearchDoc:
    """The SearchDoc of an entry given as its catalog JSON (``Entry.to_json``)."""
    cites = tuple((str(c.get("session")), c.get("seq")) for c in d.get("citation") or () if isinstance(c, dict))
    return SearchDoc(id=d.get("path") or d["id"], title=d.get("title") or "", body=d.get("body") or "",
                     type=d.get("type") or "", tags=_tags(d), citations=cites, created=d.get("created"))


class _Terms:
    """Term ids and df changes within one update transaction."""

    def __init__(self, con: sqlite3.Connection, preload: bool, cache: dict[str, int] | None = None) -> None:
        self.con = con
        self.ids: dict[str, int] = cache if cache is not None else {}
        self.delta: dict[int, int] = {}
        self.new: dict[str, int] = {}
        self.next_id = (con.execute("SELECT max(tid) FROM idx_terms").fetchone()[0] or 0) + 1
        # a complete map (the whole table, kept by this process while no other wrote) answers misses itself
        self.complete = cache is not None
        if preload and cache is None:
            self.ids = dict(con.execute("SELECT term, tid FROM idx_terms"))
            self.complete = True

    def tid(self, term: str) -> int:
        tid = self.ids.get(term)
        if tid is None:
            row = None if self.complete else self.con.execute("SELECT tid FROM idx_terms WHERE term=?",
                                                               (term,)).fetchone()
            if row:
                tid = row[0]
            else:
                tid = self.next_id
                self.next_id += 1
                self.new[term] = tid
            self.ids[term] = tid
        return tid

    def flush(self) -> None:
        new_ids = set(self.new.values())
        self.con.executemany("INSERT INTO idx_terms(tid, term, df) VALUES (?, ?, ?)",
                             [(tid, term, self.delta.get(tid, 0)) for term, tid in self.new.items()])
        self.con.executemany("UPDATE idx_terms SET df = df + ? WHERE tid = ?",
                             [(d, tid) for tid, d in self.delta.items() if d and tid not in new_ids])
        gone = [tid for tid, d in self.delta.items() if d < 0]
        self.con.executemany("DELETE FROM idx_terms WHERE tid = ? AND df <= 0", [(t,) for t in gone])
        if gone:  # a deleted term's id may be given to another term later: drop them from the cache
            still = {t for (t,) in self.con.execute("SELECT tid FROM idx_terms WHERE tid IN (SELECT value FROM "
                                                    "json_each(?))", (json.dumps(gone),))}
            dead = set(gone) - still
            if dead:
                self.ids = {k: v for k, v in self.ids.items() if v not in dead}


def _remove(con: sqlite3.Connection, keys: list[int], terms: _Terms, sums: list[int]) -> None:
    for key in keys:
        row = con.execute("SELECT t.tids, d.l0, d.l1, d.l2, d.l3 FROM idx_docs d JOIN idx_tids t ON t.key = d.key "
                          "WHERE d.key=?", (key,)).fetchone()
        if row is None:
            continue
        tids = [int(t) for t in row[0].split()] if row[0] else []
        con.executemany("DELETE FROM idx_post WHERE tid=? AND key=?", [(t, key) for t in tids])
        for t in tids:
            terms.delta[t] = terms.delta.get(t, 0) - 1
        for i in range(_NF):
            sums[i] -= row[1 + i]
        sums[_NF] -= 1
        con.execute("DELETE FROM idx_cites WHERE key=?", (key,))
        con.execute("DELETE FROM idx_docs WHERE key=?", (key,))
        con.execute("DELETE FROM idx_lens WHERE key=?", (key,))
        con.execute("DELETE FROM idx_tids WHERE key=?", (key,))


_first = itemgetter(0)


def _add(con: sqlite3.Connection, rows: Sequence[tuple[str, str, str]], terms: _Terms, sums: list[int]) -> None:
    posts: list[tuple] = []
    cites: list[tuple] = []
    texts: list[tuple] = []
    docs: list[tuple] = []
    key = con.execute("SELECT max(key) FROM idx_docs").fetchone()[0] or 0
    for path, sig, data in rows:
        key += 1
        d = json.loads(data)
        doc = search_doc(d)
        per_field = doc_fields(doc)
        counts: dict[int, list[int]] = {}
        known = terms.ids
        for i, field_terms in enumerate(per_field):
            if not field_terms:
                continue
            for t, n in Counter(field_terms).items():
                tid = known.get(t) or terms.tid(t)
                c = counts.get(tid)
                if c is None:
                    c = counts[tid] = [0, 0, 0, 0]
                c[i] = n
        lens = [len(f) for f in per_field]
        docs.append((key, path, sig, d["id"], d.get("type") or "", 1 if d.get("superseded_by") else 0,
                     int(d.get("importance") or 0), d.get("created"), d.get("last_read"),
                     json.dumps(list(doc.tags), ensure_ascii=False), json.dumps(doc.citations, ensure_ascii=False),
                     *lens))
        texts.append((key, " ".join(map(str, counts))))
        for tid, c in counts.items():
            posts.append((tid, key, *c))
            terms.delta[tid] = terms.delta.get(tid, 0) + 1
        for session, seq in doc.citations:
            r = _seq_range(seq)
            if r:
                cites.append((session, r[0], r[1], key))
        for i in range(_NF):
            sums[i] += lens[i]
        sums[_NF] += 1
    con.executemany("INSERT INTO idx_docs(key, path, sig, entry_id, type, sup, importance, created, last_read, "
                    "tags, cites, l0, l1, l2, l3) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", docs)
    con.executemany("INSERT INTO idx_lens(key, sup, type, l0, l1, l2, l3) VALUES (?,?,?,?,?,?,?)",
                    [(d[0], d[5], d[4], *d[11:15]) for d in docs])
    posts.sort(key=_first)  # in primary-key order (keys already ascend): b-tree appends, not random inserts
    con.executemany("INSERT INTO idx_post(tid, key, f0, f1, f2, f3) VALUES (?,?,?,?,?,?)", posts)
    con.executemany("INSERT INTO idx_cites(session, lo, hi, key) VALUES (?,?,?,?)", cites)
    con.executemany("INSERT INTO idx_tids(key, tids) VALUES (?,?)", texts)


def update(con: sqlite3.Connection, chunk: int = CHUNK) -> UpdateResult:
    """Bring the index tables in step with the catalog's ``files`` table (call ``catalog.refresh`` first).

    Paths whose ``files`` row changed are marked by triggers (all of them when the tables are new); for those the
    indexed signature is compared with the catalog's in SQL and only the differences are analysed, in write
    transactions of ``chunk`` paths. A process that finds nothing marked does nothing; several processes finding
    work share it, chunk by chunk; a killed one leaves its chunk marked for the next."""
    rebuilt = False
    if not _tables_ok(con):
        con.execute("BEGIN IMMEDIATE")
        try:
            if not _tables_ok(con):  # another process may have done it while we waited for the lock
                _create(con)
                rebuilt = True
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    indexed = dropped = 0
    cache: dict[str, int] | None = None
    my_gen = None
    while con.execute("SELECT EXISTS (SELECT 1 FROM idx_dirty)").fetchone()[0]:
        con.execute("BEGIN IMMEDIATE")
        try:
            paths = [r[0] for r in con.execute("SELECT path FROM idx_dirty ORDER BY path LIMIT ?", (chunk,))]
            batch = json.dumps(paths, ensure_ascii=False)
            stale = [r[0] for r in con.execute(_STALE_SQL, (batch,))]
            missing = con.execute(_MISSING_SQL, (batch,)).fetchall()
            *sums, gen = con.execute("SELECT s0, s1, s2, s3, n, gen FROM idx_stats WHERE id=1").fetchone()
            if stale or missing:
                terms = _Terms(con, preload=len(missing) > 200, cache=cache if gen == my_gen else None)
                _remove(con, stale, terms, sums)
                _add(con, missing, terms, sums)
                terms.flush()
                cache, my_gen = (terms.ids if terms.complete else None), gen + 1
                con.execute("UPDATE idx_stats SET s0=?, s1=?, s2=?, s3=?, n=?, gen=? WHERE id=1", (*sums, gen + 1))
            con.execute("DELETE FROM idx_dirty WHERE path IN (SELECT value FROM json_each(?))", (batch,))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        indexed += len(missing)
        dropped += len(stale)
    return UpdateResult(indexed=indexed, dropped=dropped, rebuilt=rebuilt)


is_corrupt = catalog.is_corrupt


def busy_error(exc: sqlite3.DatabaseError) -> LockTimeout:
    return LockTimeout(f"the vault's index is busy ({exc})",
                       "another acpmem process is rebuilding it; run the command again in a moment")


def open_index(state_dir: Path, root: Path, settings=None) -> tuple[sqlite3.Connection, UpdateResult]:
    """Connect, refresh the catalog from the files and the index from the catalog (through the vault's watcher
    when one answers, ``acpmem.watch``). A database that cannot be read (corrupt, truncated, not SQLite) is deleted
    and rebuilt once."""
    from acpmem import watch

    for attempt in (0, 1):
        con = None
        try:
            con = catalog.connect(state_dir / catalog.DB_NAME)
            return con, watch.fresh(con, root, state_dir, settings)
        except sqlite3.DatabaseError as exc:
            if con is not None:
                with contextlib.suppress(Exception):
                    con.close()
            if not is_corrupt(exc):
                raise busy_error(exc) from None
            if attempt:
                raise
            delete_db(state_dir)
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------------------------- querying

_CJK_RANGES = [(a, b) for a, b in re.findall(r"(.)-(.)", CJK_CHARS)]


class IndexVocabulary:
    """``search.Vocabulary`` answered from ``idx_terms``: membership and prefixes by index lookups; the typo
    channel loads the alphabetic terms once, on first use."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self._con = con
        self._known: dict[str, tuple[int, int] | None] = {}
        self._typo: list[str] | None = None
        self._typo_memo: dict[tuple, list[tuple[str, int]]] = {}
        self._has_cjk: bool | None = None
        self._has_latin: bool | None = None

    def en_to_zh(self, word: str) -> tuple[str, ...]:
        from acpmem.dictionary import store

        return store().en_to_zh(word)

    def zh_to_en(self, word: str) -> tuple[str, ...]:
        from acpmem.dictionary import store

        return store().zh_to_en(word)

    def known_cjk(self, words: Iterable[str]) -> tuple[set[str], set[str]]:
        """(those of ``words`` that are index terms, those that are dictionary headwords)."""
        from acpmem.dictionary import store

        words = list(words)
        found = {t for (t,) in self._con.execute("SELECT term FROM idx_terms WHERE term IN (SELECT value FROM "
                                                 "json_each(?))", (json.dumps(words, ensure_ascii=False),))}
        return found, store().known_zh(words)

    def lookup(self, term: str) -> tuple[int, int] | None:
        """(term id, df) or None."""
        if term not in self._known:
            self._known[term] = self._con.execute("SELECT tid, df FROM idx_terms WHERE term=?", (term,)).fetchone()
        return self._known[term]

    def __contains__(self, term: str) -> bool:
        return self.lookup(term) is not None

    def __len__(self) -> int:
        return self._con.execute("SELECT count(*) FROM idx_terms").fetchone()[0]

    @property
    def has_cjk(self) -> bool:
        if self._has_cjk is None:
            self._has_cjk = any(self._con.execute("SELECT 1 FROM idx_terms WHERE term >= ? AND term < ? LIMIT 1",
                                                  (a, chr(ord(b) + 1))).fetchone() for a, b in _CJK_RANGES)
        return self._has_cjk

    @property
    def has_latin(self) -> bool:
        if self._has_latin is None:
            self._has_latin = self._con.execute(
                "SELECT 1 FROM idx_terms WHERE term >= 'A' AND term < '{' AND NOT term GLOB '*[^A-Za-z]*' "
                "LIMIT 1").fetchone() is not None or bool(self._typo_terms())
        return self._has_latin

    def _typo_terms(self) -> list[str]:
        """The alphabetic terms that do not start with a CJK character, sorted (as ``search.Vocabulary`` keeps
        them for the typo channel): loaded once, on the first query word that is not in the index."""
        if self._typo is None:
            outside = " AND ".join("NOT (term >= ? AND term < ?)" for _ in _CJK_RANGES)
            bounds = [x for a, b in _CJK_RANGES for x in (a, chr(ord(b) + 1))]
            self._typo = [t for (t,) in self._con.execute(
                f"SELECT term FROM idx_terms WHERE {outside} ORDER BY term", bounds) if t.isalpha()]
        return self._typo

    def with_prefix(self, prefix: str, limit: int = 50) -> list[str]:
        rows = self._con.execute("SELECT term FROM idx_terms WHERE term >= ? ORDER BY term LIMIT ?",
                                 (prefix, limit * 4 + 16)).fetchall()
        out = []
        for (t,) in rows:
            if not t.startswith(prefix) or len(out) >= limit:
                break
            out.append(t)
        return out

    def typo_neighbours(self, term: str, max_dist: int, limit: int = 5) -> list[tuple[str, int]]:
        memo = (term, max_dist, limit)
        if memo in self._typo_memo:
            return self._typo_memo[memo]
        found = self._typo_memo[memo] = typo_neighbours(term, self._typo_terms(), max_dist, limit)
        return found


class IndexSource:
    """A ``search.PostingSource`` over the index tables, optionally restricted to live entries of some types.
    Restricted documents never score (their postings are skipped), but still count in the corpus statistics."""

    def __init__(self, con: sqlite3.Connection, *, types: Iterable[str] | None = None,
                 include_superseded: bool = False) -> None:
        self._con = con
        row = con.execute("SELECT n, s0, s1, s2, s3 FROM idx_stats WHERE id=1").fetchone()
        n = row[0]
        self.stats = CorpusStats(n, tuple(s / (n or 1) for s in row[1:]))
        self.vocabulary = IndexVocabulary(con)
        where, params = [], []
        if not include_superseded:
            where.append("d.sup = 0")
        if types is not None:
            types = list(types)
            where.append(f"d.type IN ({','.join('?' * len(types))})")
            params += types
        self._where = "".join(f" AND {w}" for w in where)
        self._params = params
        self._lens: dict[int, tuple[int, ...]] = {}
        self._docs: dict[int, SearchDoc] = {}

    def df(self, term: str) -> int:
        found = self.vocabulary.lookup(term)
        return found[1] if found else 0

    def postings(self, term: str, keys: Iterable[int] | None = None) -> list[tuple[int, tuple[int, ...]]]:
        """(key, tf per field) of the documents containing ``term`` (only those in ``keys`` if given)."""
        found = self.vocabulary.lookup(term)
        if not found:
            return []
        only, params = "", (found[0], *self._params)
        if keys is not None:
            only, params = " AND p.key IN (SELECT value FROM json_each(?))", (*params, json.dumps(list(keys)))
        out = []
        lens = self._lens
        for key, f0, f1, f2, f3, l0, l1, l2, l3 in self._con.execute(
                "SELECT p.key, p.f0, p.f1, p.f2, p.f3, d.l0, d.l1, d.l2, d.l3 "
                f"FROM idx_post p JOIN idx_lens d ON d.key = p.key WHERE p.tid = ?{self._where}{only}", params):
            out.append((key, (f0, f1, f2, f3)))
            lens[key] = (l0, l1, l2, l3)
        return out

    prune_from = PRUNE_FROM_POSTINGS

    def candidates(self, groups: Sequence[QueryGroup], n: int) -> list[int]:
        """The ``n`` best documents by term score, found inside SQLite (``rank`` then scores these exactly with
        ``score_query``): the same BM25F as ``search._bm25f`` and the same best-term-per-group sum, so that a
        query's tens of thousands of postings never become Python objects.

        With many postings, MaxScore prunes: no document takes more from a term than weight × idf × (k1 + 1). The
        documents of the strongest terms give a score ``theta`` that the ``n``-th best reaches at least; a document
        holding only terms whose bounds (best per query word) add up below ``theta`` cannot be in the top ``n``,
        so only documents holding one of the other terms are scored, fully — when that is cheaper than scanning
        every posting."""
        total = self.stats.n_docs
        rows: list[tuple[int, int, float]] = []
        dfs: dict[int, int] = {}
        for gi, g in enumerate(groups):
            for qt in g.terms:
                found = self.vocabulary.lookup(qt.term)
                if found:
                    tid, df = found
                    dfs[tid] = df
                    rows.append((gi, tid, qt.weight * math.log(1 + (total - df + 0.5) / (df + 0.5))))
        if not rows:
            return []
        if sum(dfs.values()) < self.prune_from:
            return [k for k, _ in self._top(rows, n, None)]
        bound = {tid: w * (K1 + 1) for _, tid, w in rows}    # no document takes more from a term
        group = {tid: gi for gi, tid, _ in rows}
        # theta: the n-th best score among the documents of the strongest terms (enough of them for n documents)
        seed_terms: list[int] = []
        for tid in sorted(bound, key=lambda t: (-bound[t], dfs[t])):
            seed_terms.append(tid)
            if sum(dfs[t] for t in seed_terms) >= 2 * n:
                break
        whole = sum(dfs.values())

        def cheaper(terms) -> bool:     # scoring from these terms' documents beats scanning every posting
            return sum(dfs[t] for t in terms) * (1 + len(rows)) * PROBE_COST < whole

        if not cheaper(seed_terms):
            return [k for k, _ in self._top(rows, n, None)]
        seed = self._top(rows, n, sorted(seed_terms))
        if len(seed) < n:
            return [k for k, _ in self._top(rows, n, None)]
        theta = seed[-1][1]
        # the weakest terms, as long as a document holding only those stays below theta
        weak: set[int] = set()
        best_in: dict[int, float] = {}
        for tid in sorted(bound, key=bound.get):
            trial = dict(best_in)
            trial[group[tid]] = max(trial.get(group[tid], 0.0), bound[tid])
            if sum(trial.values()) >= theta:
                break
            best_in, weak = trial, weak | {tid}
        essential = sorted(set(bound) - weak)
        if set(essential) <= set(seed_terms):
            return [k for k, _ in seed]
        return [k for k, _ in self._top(rows, n, essential if weak and cheaper(essential) else None)]

    def _top(self, rows: list[tuple[int, int, float]], n: int, holding: list[int] | None) -> list[tuple[int, float]]:
        """(key, score) of the ``n`` best documents over all query terms; with ``holding``, among the documents
        that hold one of those term ids only."""
        tfw, fparams = [], []
        for i, (w, avg) in enumerate(zip(FIELD_WEIGHTS, self.stats.avg_len)):
            tfw.append(f"? * p.f{i} / (? + ? * d.l{i} / ?)")
            fparams += [w, 1 - B, B, avg or 1]
        ctes = f"q(g, tid, w) AS (VALUES {','.join('(?,?,?)' for _ in rows)})"
        params: list = [x for r in rows for x in r]
        if holding is None:
            scan = f"q JOIN idx_post p ON p.tid = q.tid JOIN idx_lens d ON d.key = p.key WHERE 1{self._where}"
        else:   # driven by those documents, each probing the query's postings by primary key
            ctes += f", e(key) AS (SELECT DISTINCT key FROM idx_post WHERE tid IN ({','.join('?' * len(holding))}))"
            params += holding
            scan = ("e CROSS JOIN idx_lens d CROSS JOIN q CROSS JOIN idx_post p "
                    f"WHERE d.key = e.key AND p.tid = q.tid AND p.key = e.key{self._where}")
        sql = (f"WITH {ctes} SELECT key, sum(best) AS s FROM ("
               "SELECT key, g, max(w * tfw * ? / (? + tfw)) AS best FROM ("
               f"SELECT d.key AS key, q.g AS g, q.w AS w, ({' + '.join(tfw)}) AS tfw FROM {scan}) "
               "GROUP BY key, g) GROUP BY key ORDER BY s DESC, key LIMIT ?")
        params += [K1 + 1, K1] + fparams + self._params + [n]
        return self._con.execute(sql, params).fetchall()

    def doc_len(self, key: int) -> tuple[int, ...]:
        got = self._lens.get(key)
        if got is None:
            row = self._con.execute("SELECT l0, l1, l2, l3 FROM idx_lens WHERE key=?", (key,)).fetchone()
            got = self._lens[key] = tuple(row) if row else (0,) * _NF
        return got

    def doc(self, key: int) -> SearchDoc:
        """The document without its text (``rank`` re-scores a bounded pool of documents by id, tags, created,
        citations and weight); ``full_doc`` adds the text."""
        got = self._docs.get(key)
        if got is None:
            self.preload((key,))
            got = self._docs[key]
        return got

    def preload(self, keys: Iterable[int]) -> None:
        """Read the documents of ``keys`` in one query (``rank`` looks at its whole pool)."""
        todo = [k for k in keys if k not in self._docs]
        if not todo:
            return
        for key, path, tags, cites, created in self._con.execute(
                "SELECT key, path, tags, cites, created FROM idx_docs WHERE key IN (SELECT value FROM json_each(?))",
                (json.dumps(todo),)):
            self._docs[key] = SearchDoc(
                id=path, title="", created=created, tags=() if tags == "[]" else tuple(json.loads(tags)),
                citations=() if cites == "[]" else tuple((s, q) for s, q in json.loads(cites)))

    def full_doc(self, key: int) -> SearchDoc:
        light = self.doc(key)
        row = self._con.execute("SELECT f.data FROM idx_docs d JOIN files f ON f.path = d.path WHERE d.key=?",
                                (key,)).fetchone()
        if row is None:
            return light
        d = json.loads(row[0])
        return light.with_changes(title=d.get("title") or "", body=d.get("body") or "")

    def key_of(self, path: str) -> int | None:
        row = self._con.execute("SELECT key FROM idx_docs WHERE path=?", (path,)).fetchone()
        return row[0] if row else None

    def neighbours(self, key: int, radius: int) -> list[tuple[int, int]]:
        best: dict[int, int] = {}
        for session, r0, r1 in self._con.execute("SELECT session, lo, hi FROM idx_cites WHERE key=?", (key,)).fetchall():
            for other, lo, hi in self._con.execute(
                    "SELECT c.key, c.lo, c.hi FROM idx_cites c JOIN idx_lens d ON d.key = c.key "
                    f"WHERE c.session = ? AND c.lo BETWEEN ? AND ? AND c.hi >= ?{self._where}",
                    (session, r0 - radius - 10_000, r1 + radius, r0 - radius, *self._params)):
                dist = max(0, lo - r1, r0 - hi)
                if other != key and dist <= radius and dist < best.get(other, radius + 1):
                    best[other] = dist
        return list(best.items())


def search(con: sqlite3.Connection, query: str, limit: int = 5, *, types: Iterable[str] | None = None,
           include_superseded: bool = False, preview_length: int = 200) -> list[Hit]:
    """Rank the indexed documents for ``query`` with the default engine (``search.rank``); ``Hit.id`` is the
    entry file's path. Previews are made from the full text of the hits only, as ``rank`` makes them."""
    src = IndexSource(con, types=types, include_superseded=include_superseded)
    groups = plan_query(query, src.vocabulary)
    hits = rank(src, query, limit=limit, preview_length=preview_length, groups=groups)
    if not hits:
        return hits
    words = [g.word for g in groups]
    out = []
    for h in hits:
        key = src.key_of(h.id)
        doc = src.full_doc(key) if key is not None else None
        out.append(h.with_changes(preview=make_preview(doc, words, preview_length)) if doc else h)
    return out


def light_rows(con: sqlite3.Connection, *, types: Iterable[str], include_superseded: bool = False) -> list[tuple]:
    """(path, entry id, type, importance, created, frontmatter last_read) of every indexed entry, for scoring
    without building entries."""
    types = list(types)
    sql = (f"SELECT path, entry_id, type, importance, created, last_read FROM idx_docs "
           f"WHERE type IN ({','.join('?' * len(types))})" + ("" if include_superseded else " AND sup = 0"))
    return con.execute(sql, types).fetchall()


__all__ = ["open_index", "update", "search", "IndexSource", "IndexVocabulary", "UpdateResult",
           "light_rows", "search_doc", "INDEX_VERSION"]
