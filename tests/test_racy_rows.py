"""Racily clean catalog rows: a file rewritten with the same size in the timestamp granule it was read in keeps its
stat signature (size, mtime, ctime, inode) on a file system or kernel with coarse timestamps, so the catalog reads
such a file again, and compares, until its ctime is older than any granule (``catalog.RACY_NS``).

The kernel these tests run on may stamp every change apart (Linux 6.13+ hands out a fine-grained ctime once one was
looked at, and unlinking the old file raises the floor for the new one), so the collision cannot be made on demand in
the file system. It is made in the cache instead: after the rewrite, every record the cache keeps of the file's old
signature is given the new one — the state a coarse clock leaves, where the two signatures are the same.
Real vaults, real git, real SQLite."""
from __future__ import annotations

import json
import sqlite3
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers_proc import make_entry, wait_until
from acpmem.core.entryfile import new_entry_text
from acpmem.search import catalog, store, watch
from acpmem.search import query as index_query

COLS = ("entry_id", "ok", "data", "title", "type", "importance", "created", "last_read", "superseded_by")


def _row(con: sqlite3.Connection, rel: str) -> tuple:
    return con.execute(f"SELECT {', '.join(COLS)} FROM files WHERE path=?", (rel,)).fetchone()


def _sig(con: sqlite3.Connection, rel: str) -> str:
    """The stat signature the cache recorded for a file (what it keeps after a ``~`` is its own)."""
    return con.execute("SELECT sig FROM files WHERE path=?", (rel,)).fetchone()[0].partition("~")[0]


def _unseen(con: sqlite3.Connection, root: Path, rel: str, old: str) -> None:
    """The cache as a coarse clock leaves it after a same-size rewrite: the file's new signature equal to the ``old``
    one the cache recorded with the previous text — so every record of ``old`` (the row, the search index's copy, the
    racy rows, the digest of the scan) is given the new one."""
    new = catalog.scan(root / "entries")[rel]
    recorded = {p: sig.partition("~")[0] for p, sig in con.execute("SELECT path, sig FROM files")}
    digest = con.execute("SELECT value FROM meta WHERE key='scan'").fetchone()
    con.execute("UPDATE files SET sig=replace(sig, ?, ?) WHERE path=?", (old, new, rel))
    if con.execute("SELECT 1 FROM sqlite_master WHERE name='idx_docs'").fetchone():
        con.execute("UPDATE idx_docs SET sig=replace(sig, ?, ?) WHERE path=?", (old, new, rel))
    con.execute("UPDATE meta SET value=replace(value, ?, ?) WHERE key<>'scan'", (old, new))
    if digest and digest[0] == catalog.scan_digest(recorded):   # the digest of what the cache recorded: the same
        con.execute("UPDATE meta SET value=? WHERE key='scan'", (catalog.scan_digest({**recorded, rel: new}),))


def _racy(con: sqlite3.Connection) -> dict:
    row = con.execute("SELECT value FROM meta WHERE key='racy'").fetchone()
    return json.loads(row[0]) if row else {}


def _body(con: sqlite3.Connection, rel: str) -> str:
    return json.loads(_row(con, rel)[2])["body"]


def _written(vault, text: str):
    e = make_entry(vault.new_id(), "Where the consumer offsets live", text)
    e = e.with_changes(path=vault.path_for(e.id, e.title))
    vault.write_entries([e], subject="test entry", why="test")
    return e, vault.root / e.path


def test_a_same_size_rewrite_its_signature_misses_is_read_again_and_indexed(vault):
    e, p = _written(vault, "- Offsets are kept in kafka.")
    con, _ = watch.open_fresh(vault.state_dir, vault.root)         # the catalog and the index read the file ...
    old = _sig(con, e.path)
    p.write_text(p.read_text("utf-8").replace("kafka", "redis"), "utf-8")   # ... rewritten, the same size,
    _unseen(con, vault.root, e.path, old)                                   # within the granule it was read in

    watch.fresh(con, vault.root, vault.state_dir)
    assert "redis" in _body(con, e.path)
    assert [h.id for h in index_query.search(con, "redis", 5)] == [e.path]
    assert [h.id for h in index_query.search(con, "kafka", 5)] == []


def test_the_watchers_partial_refresh_reads_a_racily_clean_row_again(vault):
    e, p = _written(vault, "- Offsets are kept in kafka.")
    con = catalog.connect(vault.state_dir / catalog.DB_NAME)
    catalog.refresh(con, vault.root)
    old = _sig(con, e.path)
    p.write_text(p.read_text("utf-8").replace("kafka", "redis"), "utf-8")
    _unseen(con, vault.root, e.path, old)
    # the watcher is told of the write (inotify) and finds the signature as it was
    assert catalog.refresh_paths(con, vault.root, [e.path]).modified == (e.path,)
    assert "redis" in _body(con, e.path)


def test_a_racily_clean_row_costs_a_read_not_a_write_and_is_trusted_once_old(vault):
    e, _ = _written(vault, "- Offsets are kept in kafka.")
    con = catalog.connect(vault.state_dir / catalog.DB_NAME)
    catalog.refresh(con, vault.root)
    assert e.path in _racy(con)
    writes = con.total_changes
    assert not catalog.refresh(con, vault.root) and con.total_changes == writes   # read and compared: the same
    # once the file's ctime is older than the window, the row is trusted: the one-lookup answer is back
    wait_until(lambda: not catalog.refresh(con, vault.root) and not _racy(con), timeout=catalog.RACY_NS / 1e9 + 30)
    writes = con.total_changes
    assert not catalog.refresh(con, vault.root) and con.total_changes == writes


# --------------------------------------------------------------------------------------------- the class of it

TEXTS = ("- kept in kafka.", "- kept in redis.", "- kept in mysql.", "- kept in a file on disk.")
# (an unseen rewrite and a full refresh twice as likely: the interesting case is a refresh, then a collision)
step = st.tuples(st.sampled_from(["rewrite", "unseen rewrite", "unseen rewrite", "remove", "refresh", "refresh",
                                  "refresh paths"]),
                 st.integers(0, 1), st.integers(0, len(TEXTS) - 1))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=12))
def test_whatever_the_rewrites_and_refreshes_a_full_refresh_equals_a_rebuild(steps):
    """Files rewritten (the same size or not), removed, refreshed fully or by path (and the search index updated), in
    any order, some rewrites unseen by the signature (``_unseen``; only where the cached signature is recent enough for
    a coarse clock to repeat it): after a full refresh the cache and the search index hold what new ones built from
    the files hold."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "entries").mkdir()
        con = catalog.connect(root / "live.sqlite")
        for op, i, t in steps:
            rel = f"entries/e{i}.md"
            p = root / rel
            if op in ("rewrite", "unseen rewrite"):
                old = _sig(con, rel) if _row(con, rel) else None
                p.write_text(new_entry_text(make_entry(f"e{i}", f"Entry {i}", TEXTS[t])), "utf-8")
                # a coarse clock can give the new file the cached stamps only if they are of the present granule
                if op == "unseen rewrite" and old and int(old.split(":")[-2]) >= time.time_ns() - catalog.RACY_NS // 2:
                    _unseen(con, root, rel, old)
            elif op == "remove":
                p.unlink(missing_ok=True)
            elif op == "refresh":
                catalog.refresh(con, root)
                store.update(con)
            else:
                catalog.refresh_paths(con, root, [rel])
                store.update(con)
        catalog.refresh(con, root)
        store.update(con)
        rebuilt = catalog.connect(root / "rebuilt.sqlite")
        catalog.refresh(rebuilt, root)
        store.update(rebuilt)
        query = f"SELECT path, {', '.join(COLS)} FROM files ORDER BY path"
        assert con.execute(query).fetchall() == rebuilt.execute(query).fetchall()
        assert {p: _sig(con, p) for p, in con.execute("SELECT path FROM files")} == catalog.scan(root / "entries")
        for word in ("kafka", "redis", "mysql", "disk", "entry"):   # and the search index finds what a new one finds
            assert ({h.id for h in index_query.search(con, word, 10)}
                    == {h.id for h in index_query.search(rebuilt, word, 10)}), word
        con.close()
        rebuilt.close()
