"""The derived search index, built and kept current: postings, document frequencies, field lengths and the
per-document metadata ranking needs, in the catalog's SQLite file (``.acpmem/index.sqlite``), next to its ``files``
table. Queries are ``acpmem.search.query``.

It is derived twice over: the markdown files are the truth, ``catalog.refresh`` keeps ``files`` (one parsed entry
per path, with a stat signature) in step with them, and ``update`` keeps these tables in step with ``files``. For
that it keeps, per indexed path, the signature it indexed and compares it with ``files`` in SQL: whatever changed
the files table (this process, another command, an older run that was killed) the difference is found, and only
those documents are analysed again. Invalid files (``ok = 0``) are never indexed; superseded entries are indexed and
filtered at query time.

Nothing here is committed. A schema version row in ``meta`` and a check that every table is present decide whether
the tables are trusted; if not they are dropped and rebuilt from ``files``; an unreadable database file is deleted
and rebuilt (``acpmem.infra.db``).

Concurrency: the file is in WAL mode with a busy timeout. An update runs in one ``BEGIN IMMEDIATE`` transaction and
recomputes the difference inside it, so a process that finds the work already done by another commits nothing.
"""
from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Sequence
from operator import itemgetter

from acpmem.core.blocks import turn_runs
from acpmem.core.limits import MAX_INT, MIN_INT, int_between, valid_seq
from acpmem.core.values import Value
from acpmem.infra import db, progress
from acpmem.search.analysis import FIELDS, SearchDoc, doc_fields, indexed_body, stemmer
from acpmem.search.ranking import seq_range

INDEX_VERSION = "9"   # 7: an entry's evidence quotes are indexed with its body; 8: a citation by its turns;
# 9: "won't" is "will not" (was the past of "win"), a typographic apostrophe an apostrophe
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
    "CREATE INDEX IF NOT EXISTS idx_cites_session ON idx_cites(session, lo, hi, key)",
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
CHUNK = 2000  # paths per write transaction: a long rebuild never holds the write lock for long


class UpdateResult(Value):
    """What ``update`` did: documents analysed and indexed, indexed versions dropped (changed or gone files), and
    whether the tables were (re)created empty first."""

    indexed: int = 0
    dropped: int = 0
    skipped: int = 0      # catalog rows holding a value the index cannot store (validation keeps them out first)
    rebuilt: bool = False
    via: str = "scan"     # how the catalog was brought in step first: "scan" (every file) or "watcher"


# --------------------------------------------------------------------------------------------- schema

def index_version() -> str:
    # The stemmer implementation is part of the version: PyStemmer (C) and snowballstemmer (Python) are meant to
    # agree, but an index is only trusted with the analyser that built it.
    return f"{INDEX_VERSION}:{type(stemmer()).__module__}"


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


# --------------------------------------------------------------------------------------------- documents

def _tags(d: dict) -> tuple[str, ...]:
    tags = d.get("tags")
    if isinstance(tags, str):
        return (tags,)
    if isinstance(tags, list):
        return tuple(str(t) for t in tags if isinstance(t, (str, int, float)) and not isinstance(t, bool))
    return ()


CITED_RUNS = 8   # a citation naming more runs of turns is placed at their span


def _cited_at(c: dict) -> list[tuple[str, int | str]]:
    """Where a citation puts an entry in its session: the runs of the turns it rests on when it names them (a
    fork's commit cites the commit's seq for every entry it writes, each naming its own turns), else its seq."""
    session = str(c.get("session"))
    runs = turn_runs(c.get("turns"), CITED_RUNS) if c.get("turns") is not None else None
    if not runs:
        return [(session, c.get("seq"))]
    return [(session, lo if lo == hi else f"{lo}-{hi}") for lo, hi in runs]


def search_doc(d: dict) -> SearchDoc:
    """The SearchDoc of an entry given as its catalog JSON (``Entry.to_json``); its citations placed by
    ``_cited_at``."""
    cites = tuple(at for c in d.get("citation") or () if isinstance(c, dict) for at in _cited_at(c))
    return SearchDoc(id=d.get("path") or d["id"], title=d.get("title") or "", body=indexed_body(d),
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


def _storable(d: dict) -> bool:
    """Whether a catalog row's values fit the index's columns (validation at parse is the gate; this keeps a row
    that got past it from aborting a whole batch)."""
    imp = d.get("importance") or 0
    return (isinstance(d.get("id"), str) and int_between(imp, MIN_INT, MAX_INT)
            and all(isinstance(d.get(k), (str, type(None))) for k in ("type", "created", "last_read")))


def _add(con: sqlite3.Connection, rows: Sequence[tuple[str, str, str]], terms: _Terms, sums: list[int]) -> int:
    """Index ``rows`` (path, signature, catalog JSON); returns how many were skipped as unstorable. A citation the
    index cannot store (``seq_range`` is None) is left out of the neighbour table; its document is still indexed."""
    posts: list[tuple] = []
    cites: list[tuple] = []
    texts: list[tuple] = []
    docs: list[tuple] = []
    skipped = 0
    key = con.execute("SELECT max(key) FROM idx_docs").fetchone()[0] or 0
    for path, sig, data in rows:
        try:
            d = json.loads(data)
            ok = isinstance(d, dict) and _storable(d)
            doc = search_doc(d) if ok else None
            per_field = doc_fields(doc) if ok else None
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            ok = False
        if not ok:
            skipped += 1
            continue
        key += 1
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
        cited = [c for c in doc.citations if valid_seq(c[1])]
        docs.append((key, path, sig, d["id"], d.get("type") or "", 1 if d.get("superseded_by") else 0,
                     int(d.get("importance") or 0), d.get("created"), d.get("last_read"),
                     json.dumps(list(doc.tags), ensure_ascii=False), json.dumps(cited, ensure_ascii=False), *lens))
        texts.append((key, " ".join(map(str, counts))))
        for tid, c in counts.items():
            posts.append((tid, key, *c))
            terms.delta[tid] = terms.delta.get(tid, 0) + 1
        for session, seq in cited:
            r = seq_range(seq)
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
    return skipped


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
            db.rollback(con)
            raise
    indexed = dropped = skipped = 0
    cache: dict[str, int] | None = None
    my_gen = None
    shown = None
    while con.execute("SELECT EXISTS (SELECT 1 FROM idx_dirty)").fetchone()[0]:
        if shown is None:   # a first build of a large vault is counted on a terminal (``acpmem.infra.progress``)
            dirty = con.execute("SELECT count(*) FROM idx_dirty").fetchone()[0] if progress.listening() else 0
            shown = progress.task("indexing entries", dirty, unit="entries", at_least=progress.index_min_entries())
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
                skipped += _add(con, missing, terms, sums)
                terms.flush()
                cache, my_gen = (terms.ids if terms.complete else None), gen + 1
                con.execute("UPDATE idx_stats SET s0=?, s1=?, s2=?, s3=?, n=?, gen=? WHERE id=1", (*sums, gen + 1))
            con.execute("DELETE FROM idx_dirty WHERE path IN (SELECT value FROM json_each(?))", (batch,))
            con.execute("COMMIT")
        except BaseException:
            db.rollback(con)
            if shown is not None:
                shown.close()
            raise
        indexed += len(missing)
        dropped += len(stale)
        shown.advance(len(paths))
    if shown is not None:
        shown.close()
    return UpdateResult(indexed=indexed - skipped, dropped=dropped, skipped=skipped, rebuilt=rebuilt)
