"""Entry vectors of the optional embedding channel: derived state in ``.acpmem/vectors.sqlite``, never committed.

Two tables: ``vec`` holds one unit-length float32 vector per (model, content hash) — the hash of the text that was
embedded, so an entry whose text did not change is never embedded again, and a model change re-embeds everything
under the new name; ``at`` says which content hash each entry file had at which stat signature (the catalog's),
so a recall knows, without reading any file, which vectors are current: an edited file's signature differs and its
vector counts as missing until the background pass (``acpmem.read.embedding``) embeds the new text; a deleted file
has no index row, and its vector is ignored, then pruned.

A separate file rather than tables in ``index.sqlite``: the index is dropped and rebuilt whenever its schema or the
analyser changes, and vectors cost model calls to make again.

Search is exact (every current vector against the query, with numpy, imported here only): measured in
docs/design.md against sqlite-vec.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path

from acpmem.core.values import Value
from acpmem.infra import db
from acpmem.search.query import doc_filter

VECTORS_DB = "vectors.sqlite"
VECTOR_TOP = 100          # documents the vector channel proposes per query
TEXT_VERSION = "1"        # what ``embed_text`` makes of an entry: a change re-hashes every entry (and re-embeds)
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # a rowid table: WITHOUT ROWID stores a 1.5 KB row on overflow pages (3x the file, measured in docs/design.md)
    "CREATE TABLE IF NOT EXISTS vec (model TEXT NOT NULL, hash TEXT NOT NULL, dim INTEGER NOT NULL, v BLOB NOT NULL, "
    "UNIQUE (model, hash))",
    "CREATE TABLE IF NOT EXISTS at (path TEXT PRIMARY KEY, sig TEXT NOT NULL, hash TEXT NOT NULL) WITHOUT ROWID",
)


class VectorStatus(Value):
    model: str
    present: int     # live entries whose current text has a vector of the model
    missing: int     # … that have none yet

    def to_json(self) -> dict:
        return {"model": self.model, "present": self.present, "missing": self.missing}


def db_path(state_dir: Path) -> Path:
    return Path(state_dir) / VECTORS_DB


def connect(state_dir: Path) -> sqlite3.Connection:
    """The vectors database (created if missing; an unreadable one is deleted and made anew: it is derived)."""
    path = db_path(state_dir)
    for attempt in (0, 1):
        try:
            con = sqlite3.connect(path, timeout=30, isolation_level=None)
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("BEGIN IMMEDIATE")   # the tables appear together: a reader never sees a half-made file
            for stmt in _SCHEMA:
                con.execute(stmt)
            con.execute("COMMIT")
            row = con.execute("SELECT value FROM meta WHERE key = 'text'").fetchone()
            if row is None or row[0] != TEXT_VERSION:
                con.execute("DELETE FROM at")
                con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('text', ?)", (TEXT_VERSION,))
            return con
        except sqlite3.DatabaseError:
            if attempt:
                raise
            for suffix in ("", "-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
    raise AssertionError("unreachable")


def embed_text(data: dict) -> str:
    """What is embedded for an entry: its title and body (measured against title only and body only in
    docs/design.md)."""
    title = str(data.get("title") or "").strip()
    body = str(data.get("body") or "").strip()
    return f"{title}\n\n{body}" if body and body != title else title or body


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def sync(index: sqlite3.Connection, vcon: sqlite3.Connection) -> None:
    """Bring ``at`` in step with the catalog of ``index`` (an up-to-date ``index.sqlite``): the content hash of every
    valid entry file at its current signature; rows of files that are gone are removed."""
    known = dict(vcon.execute("SELECT path, sig FROM at"))
    files = index.execute("SELECT path, sig FROM files WHERE ok = 1").fetchall()
    stale = [p for p, sig in files if known.get(p) != sig]
    gone = set(known) - {p for p, _ in files}
    vcon.execute("BEGIN IMMEDIATE")
    try:
        for i in range(0, len(stale), 500):
            chunk = stale[i:i + 500]
            rows = index.execute("SELECT path, sig, data FROM files WHERE path IN (SELECT value FROM json_each(?))",
                                 (json.dumps(chunk),)).fetchall()
            vcon.executemany("INSERT OR REPLACE INTO at(path, sig, hash) VALUES (?,?,?)",
                             [(p, sig, text_hash(embed_text(json.loads(d)))) for p, sig, d in rows])
        vcon.executemany("DELETE FROM at WHERE path = ?", [(p,) for p in gone])
        vcon.execute("COMMIT")
    except BaseException:
        db.rollback(vcon)
        raise


def missing_texts(index: sqlite3.Connection, vcon: sqlite3.Connection, model: str) -> list[tuple[str, str]]:
    """(content hash, text) of the current entries that have no vector of ``model``, one per hash, in path order."""
    rows = vcon.execute("SELECT a.path, a.hash FROM at a WHERE NOT EXISTS (SELECT 1 FROM vec v WHERE v.model = ? "
                        "AND v.hash = a.hash) ORDER BY a.path", (model,)).fetchall()
    wanted: dict[str, str] = {}
    for path, h in rows:
        wanted.setdefault(h, path)
    out = []
    paths = list(wanted.values())
    for i in range(0, len(paths), 500):
        for path, data in index.execute("SELECT path, data FROM files WHERE path IN (SELECT value FROM json_each(?)) "
                                        "ORDER BY path", (json.dumps(paths[i:i + 500]),)):
            text = embed_text(json.loads(data))
            out.append((text_hash(text), text))
    return out


def store(vcon: sqlite3.Connection, model: str, items: Sequence[tuple[str, Sequence[float]]]) -> None:
    """Keep the vectors of (content hash, vector) pairs, at unit length, as float32 — in one transaction, so a
    reader sees a batch whole or not at all (the connection autocommits: each row would be its own commit)."""
    rows = []
    for h, vec in items:
        norm = sum(x * x for x in vec) ** 0.5 or 1.0
        rows.append((model, h, len(vec), array("f", [x / norm for x in vec]).tobytes()))
    vcon.execute("BEGIN IMMEDIATE")
    try:
        vcon.executemany("INSERT OR REPLACE INTO vec(model, hash, dim, v) VALUES (?,?,?,?)", rows)
        vcon.execute("COMMIT")
    except BaseException:
        db.rollback(vcon)
        raise


def drop_other_dims(vcon: sqlite3.Connection, model: str, dim: int) -> int:
    """Drop the vectors of ``model`` whose length is not ``dim`` (the endpoint now answers ``dim``: the others are
    of another model served under the same name, and no query can be compared with them); returns how many."""
    return vcon.execute("DELETE FROM vec WHERE model = ? AND dim != ?", (model, dim)).rowcount


def prune(vcon: sqlite3.Connection, model: str) -> int:
    """Drop vectors of other models and of texts no entry has any more; returns how many."""
    cur = vcon.execute("DELETE FROM vec WHERE model != ? OR hash NOT IN (SELECT hash FROM at)", (model,))
    return cur.rowcount


def _attached(index: sqlite3.Connection, state_dir: Path) -> bool:
    if any(r[1] == "vx" for r in index.execute("PRAGMA database_list")):
        return True
    if not db_path(state_dir).exists():
        return False
    index.execute("ATTACH DATABASE ? AS vx", (str(db_path(state_dir)),))
    # a file the background pass has only just created may not have its tables yet: then there are no vectors
    made = index.execute("SELECT count(*) FROM vx.sqlite_master WHERE type = 'table' AND name IN ('at', 'vec')")
    if made.fetchone()[0] < 2:
        index.execute("DETACH DATABASE vx")
        return False
    return True


def status(index: sqlite3.Connection, state_dir: Path, model: str, *, types: Iterable[str] | None = None,
           include_superseded: bool = False, dim: int = 0) -> VectorStatus:
    """How many live entries (of ``types``) have a current vector of ``model`` (of length ``dim`` when given: the
    endpoint's now), and how many have none."""
    where, params = doc_filter(types, include_superseded)
    total = index.execute(f"SELECT count(*) FROM idx_lens d WHERE 1{where}", params).fetchone()[0]
    if not _attached(index, state_dir):
        return VectorStatus(model, 0, total)
    present = index.execute(
        "SELECT count(*) FROM idx_lens d JOIN idx_docs x ON x.key = d.key JOIN vx.at a ON a.path = x.path "
        f"AND a.sig = x.sig WHERE EXISTS (SELECT 1 FROM vx.vec v WHERE v.model = ? AND v.hash = a.hash"
        f"{' AND v.dim = ?' if dim else ''}){where}", (model, *([dim] if dim else []), *params)).fetchone()[0]
    return VectorStatus(model, present, total - present)


def _current(index: sqlite3.Connection, state_dir: Path, model: str, dim: int, types, include_superseded: bool):
    """(live entries counted, [(key, vector blob)] of those with a current vector of ``model`` and ``dim``)."""
    where, params = doc_filter(types, include_superseded)
    total = index.execute(f"SELECT count(*) FROM idx_lens d WHERE 1{where}", params).fetchone()[0]
    if not _attached(index, state_dir):
        return total, []
    rows = index.execute(
        "SELECT d.key, v.v FROM idx_lens d JOIN idx_docs x ON x.key = d.key JOIN vx.at a ON a.path = x.path "
        f"AND a.sig = x.sig JOIN vx.vec v ON v.model = ? AND v.hash = a.hash AND v.dim = ? WHERE 1{where}",
        (model, dim, *params)).fetchall()
    return total, rows


class Matrix:
    """The current vectors of one model as one float32 matrix, for exact search (numpy is imported here)."""

    def __init__(self, total: int, rows: list) -> None:
        # lazy: numpy is heavy, never imported at start-up
        import numpy as np

        self.np = np
        self.total, self.n = total, len(rows)
        self.keys = np.fromiter((k for k, _ in rows), dtype=np.int64, count=len(rows))
        dim = len(rows[0][1]) // 4 if rows else 0
        self.mat = np.frombuffer(b"".join(v for _, v in rows), dtype=np.float32).reshape(len(rows), dim)

    def top(self, query: Sequence[float], k: int) -> dict[int, float]:
        if not self.n:
            return {}
        np = self.np
        q = np.asarray(query, dtype=np.float32)
        q /= float(np.linalg.norm(q)) or 1.0
        sims = self.mat @ q
        k = min(k, self.n)
        best = np.argpartition(-sims, k - 1)[:k]
        return {int(self.keys[i]): float(sims[i]) for i in best}


def load_matrix(index: sqlite3.Connection, state_dir: Path, model: str, dim: int, *, types=None,
                include_superseded: bool = False) -> Matrix:
    return Matrix(*_current(index, state_dir, model, dim, types, include_superseded))


def nearest(index: sqlite3.Connection, state_dir: Path, model: str, query: Sequence[float], *,
            types: Iterable[str] | None = None, include_superseded: bool = False,
            top: int | None = None) -> tuple[dict[int, float], VectorStatus]:
    """The ``top`` live entries (index keys) most similar to ``query`` (cosine), among those with a current vector
    of ``model``; and how many had none. Exact search: every current vector is compared (``watch.near`` asks the
    vault's watcher for the same answer from a matrix it keeps in memory)."""
    m = load_matrix(index, state_dir, model, len(query), types=types, include_superseded=include_superseded)
    return m.top(query, top or VECTOR_TOP), VectorStatus(model, m.n, m.total - m.n)


__all__ = ["VectorStatus", "Matrix", "load_matrix", "connect", "embed_text", "text_hash", "sync", "missing_texts", "store", "drop_other_dims",
           "prune", "status",
           "nearest", "db_path", "VECTORS_DB", "VECTOR_TOP"]
