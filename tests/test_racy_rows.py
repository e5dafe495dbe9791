"""Racily clean catalog rows: a file rewritten with the same size in the timestamp granule it was read in keeps its
stat signature (size, mtime, ctime, inode) on a file system or kernel with coarse timestamps, so the catalog reads
such a file again, and compares, until its ctime is older than any granule (``catalog.RACY_NS``).

The kernel these tests run on may stamp every change apart (Linux 6.13+ hands out a fine-grained ctime once one was
looked at), so the collision itself cannot be made on demand. It is made in the cache instead: the row of a file read
a moment ago is given the text of the file's previous version under its current signature — exactly what the cache
holds after a same-size rewrite its signature did not show. Real vaults, real git, real SQLite."""
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
from acpmem.search import catalog, watch
from acpmem.search import query as index_query

COLS = ("entry_id", "ok", "data", "title", "type", "importance", "created", "last_read", "superseded_by")


def _row(con: sqlite3.Connection, rel: str) -> tuple:
    return con.execute(f"SELECT {', '.join(COLS)} FROM files WHERE path=?", (rel,)).fetchone()


def _collide(con: sqlite3.Connection, rel: str, stale: tuple) -> None:
    """The cache as a rewrite its signature did not show leaves it: the previous text under the current signature."""
    con.execute(f"UPDATE files SET ({', '.join(COLS)}) = ({', '.join('?' * len(COLS))}) WHERE path=?", (*stale, rel))


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
    con, _ = watch.open_fresh(vault.state_dir, vault.root)
    stale = _row(con, e.path)
    p.write_text(p.read_text("utf-8").replace("kafka", "redis"), "utf-8")   # the same size
    watch.fresh(con, vault.root, vault.state_dir)                              # reads the new text ...
    _collide(con, e.path, stale)         # ... which a coarse clock would not have shown: the old text stays cached

    changes = catalog.refresh(con, vault.root)
    assert changes.modified == (e.path,) and "redis" in _body(con, e.path)
    watch.fresh(con, vault.root, vault.state_dir)
    assert [h.id for h in index_query.search(con, "redis", 5)] == [e.path]
    assert [h.id for h in index_query.search(con, "kafka", 5)] == []


def test_the_watchers_partial_refresh_reads_a_racily_clean_row_again(vault):
    e, p = _written(vault, "- Offsets are kept in kafka.")
    con = catalog.connect(vault.state_dir / catalog.DB_NAME)
    catalog.refresh(con, vault.root)
    stale = _row(con, e.path)
    p.write_text(p.read_text("utf-8").replace("kafka", "redis"), "utf-8")
    assert catalog.refresh_paths(con, vault.root, [e.path]).modified == (e.path,)
    _collide(con, e.path, stale)
    # the watcher is told about the second write (inotify), and finds the signature unchanged
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
step = st.tuples(st.sampled_from(["rewrite", "unseen rewrite", "remove", "refresh", "refresh paths"]),
                 st.integers(0, 2), st.integers(0, len(TEXTS) - 1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=12))
def test_whatever_the_rewrites_and_refreshes_a_full_refresh_equals_a_rebuild(steps):
    """Files rewritten (the same size or not), removed, refreshed fully or by path, in any order, some rewrites unseen
    by the signature (the cache keeps the text it read before, as a coarse clock would leave it — only for a file
    changed within the window, as older ones cannot collide): after a full refresh the cache holds what a new cache
    built from the files holds."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "entries").mkdir()
        con = catalog.connect(root / "live.sqlite")
        for op, i, t in steps:
            rel = f"entries/e{i}.md"
            p = root / rel
            if op in ("rewrite", "unseen rewrite"):
                cached = _row(con, rel)
                recent = p.exists() and p.stat().st_ctime_ns >= time.time_ns() - catalog.RACY_NS // 2
                p.write_text(new_entry_text(make_entry(f"e{i}", f"Entry {i}", TEXTS[t])), "utf-8")
                if op == "unseen rewrite" and recent and cached is not None:
                    catalog.refresh_paths(con, root, [rel])
                    _collide(con, rel, cached)
            elif op == "remove":
                p.unlink(missing_ok=True)
            elif op == "refresh":
                catalog.refresh(con, root)
            else:
                catalog.refresh_paths(con, root, [rel])
        catalog.refresh(con, root)
        rebuilt = catalog.connect(root / "rebuilt.sqlite")
        catalog.refresh(rebuilt, root)
        query = f"SELECT path, {', '.join(COLS)} FROM files ORDER BY path"
        assert con.execute(query).fetchall() == rebuilt.execute(query).fetchall()
        con.close()
        rebuilt.close()
