"""The derived search index: parity with the in-memory engine, noticing every kind of change, surviving its own
corruption, concurrent updates. Real vaults, real git, real SQLite files, real processes."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from acpmem.core.layout import DB_NAME
from acpmem.infra import db
from acpmem.search import catalog, store, watch
from acpmem.search import query as index_query
from acpmem.core.entry import Citation, Entry
from acpmem.search.reference import MemoryIndex
from acpmem.search.ranking import analyze, plan_query
from acpmem.vault.writer import Vault, git

QUERIES = ["sqlite queue", "postgres", "pytest fixtures gitconfig", "rate limit", "retry-after header",
           "stagng deploys", "architecure decisions", "日志", "上传文件", "upload large files", "short answers",
           "comments in english", "ADR template", "session append hook"]


def make(vault: Vault, title: str, body: str, typ: str = "fact", importance: int = 5, session: str = "s1",
         seq: int = 1, **kw) -> Entry:
    ident = vault.new_id()
    e = Entry(id=ident, title=title, type=typ, importance=importance, created="2026-11-01T10:00:00Z",
              body=body + "\n", citation=(Citation(session, seq),), **kw)
    return e.with_changes(path=vault.path_for(ident, title))


def write(vault: Vault, *entries: Entry) -> None:
    vault.write_entries(list(entries), subject="test entries", why="test")


def fresh(vault: Vault) -> sqlite3.Connection:
    con, _ = watch.open_fresh(vault.state_dir, vault.root)
    return con


def ids(con: sqlite3.Connection, query: str, **kw) -> list[str]:
    return [h.id for h in index_query.search(con, query, 10, **kw)]


def pool_keys(src, groups, n: int) -> list[int]:
    """The keys of the pool a search ranks (``IndexSource.scored_candidates``), best first."""
    return [k for k, _ in src.scored_candidates(groups, n)]


def top(con: sqlite3.Connection, query: str) -> str | None:
    found = ids(con, query)
    return found[0] if found else None


def has_term(con: sqlite3.Connection, word: str) -> bool:
    (term,) = analyze(word)
    return con.execute("SELECT df FROM idx_terms WHERE term=?", (term,)).fetchone() is not None


def test_same_ranking_as_the_in_memory_reference(example_vault):
    v = example_vault
    write(v, make(v, "Retry uploads with exponential backoff", "Use `retryUpload` with jitter; cap at 30 s.",
                  session="a41f0c2e", seq=213),
          make(v, "Neighbouring turn about the queue", "Workers poll every 2 s.", session="a41f0c2e", seq=214))
    con = fresh(v)
    docs = [store.search_doc(e.to_json()) for e in v.load().entries]
    mem = MemoryIndex(docs)
    for q in QUERIES:
        want = [(h.id, h.score, h.preview, h.explain) for h in mem.search(q, limit=10)]
        got = [(h.id, h.score, h.preview, h.explain)
               for h in index_query.search(con, q, 10, include_superseded=True)]
        assert got == want, q
    assert any(index_query.search(con, q, 10) for q in QUERIES)


def test_ranking_inside_sqlite_picks_the_same_pool_as_the_reference(vault):
    """Over 300 matching documents (more than the re-scored pool), neighbours by citation, superseded ones and a
    type filter: the SQLite source picks its pool in SQL (``IndexSource.candidates``) and must rank exactly as
    the in-memory reference, which scores every document."""
    import random

    rng = random.Random(3)
    words = ["cache", "queue", "retry", "upload", "token", "worker", "deploy", "schema", "index", "timeout",
             "backoff", "lease", "shard", "replica", "quota", "webhook"]
    for i in range(700):
        title = " ".join(rng.choice(words) for _ in range(rng.randint(2, 5)))
        body = " ".join(rng.choice(words + ["the", "and", "with"]) for _ in range(rng.randint(5, 40)))
        sup = "superseded_by: e0001\n" if i % 37 == 5 else ""
        sup += f"tags: [{words[i % len(words)]}, t{i % 3}]\n" if i % 5 == 0 else ""
        (vault.root / "entries" / f"e{i:04d}.md").write_text(
            f"---\nid: e{i:04d}\ntitle: {title}\ntype: {rng.choice(['fact', 'lesson', 'decision'])}\n"
            f"importance: {rng.randint(1, 10)}\ncreated: 2026-10-{rng.randint(1, 28):02d}T10:00:00Z\n{sup}"
            f"citation:\n- session: s{rng.randint(1, 4)}\n  seq: {rng.randint(1, 200)}\n---\n{body}\n", "utf-8")
    con = fresh(vault)
    entries = vault.load().entries
    assert len(entries) == 700
    for superseded, types in ((True, None), (False, None), (False, ("lesson",))):
        docs = [store.search_doc(e.to_json()) for e in entries
                if (superseded or not e.superseded_by) and (types is None or e.type in types)]
        mem = MemoryIndex(docs)
        for q in ("cache retry", "upload timeout backoff", "shard", "webhok quota", "deploy the schema index"):
            want = [(h.id, h.score, h.explain) for h in mem.search(q, limit=10)]
            got = [(h.id, h.score, h.explain)
                   for h in index_query.search(con, q, 10, include_superseded=superseded, types=types)]
            if types is None and superseded:
                assert got == want, q
            else:   # restricted documents still count in the index's corpus statistics, not in the reference's
                assert [g[0] for g in got] and all(g[0] in {d.id for d in docs} for g in got), q
    src = index_query.IndexSource(con, include_superseded=True)
    from acpmem.search.ranking import plan_query, score_query

    groups = plan_query("cache retry", src.vocabulary)
    scores, _ = score_query(groups, src)
    assert len(scores) > 300                                 # the pool really is a choice
    best = sorted(scores.values(), reverse=True)[:300]
    picked = pool_keys(src, groups, 300)
    assert len(set(picked)) == 300
    # MaxScore pruning (on from 20,000 postings; forced here) picks the same documents as scoring everything,
    # also where the documents of the seed's terms are left out of the last query (scored in the seed already)
    src.prune_from = 0
    sql: list[str] = []
    con.set_trace_callback(sql.append)
    for q in ("cache retry", "shard quota lease", "webhook the index", "upload", "token worker deploy schema",
              "cache queue retry upload token worker deploy schema index timeout"):
        g = plan_query(q, src.vocabulary)
        every, _ = score_query(g, src)
        for n in (5, 40):
            want = sorted(every.values(), reverse=True)[:n]
            got = pool_keys(src, g, n)
            assert sorted((every[k] for k in got), reverse=True) == pytest.approx(want, rel=1e-12), (q, n)
            # … with the very scores the reference computes, to the last bit: ``rank`` does not score them again
            assert src.scored_candidates(g, n) == [(k, every[k]) for k in got], (q, n)
    con.set_trace_callback(None)
    assert any(" EXCEPT SELECT key FROM idx_post" in s for s in sql)
    # the same documents, up to the last bit of a float sum (SQLite's sum() may add more exactly than Python)
    assert sorted((scores[k] for k in picked), reverse=True) == pytest.approx(best, rel=1e-12)
    # the pool is scored inside SQLite too (``IndexSource.scores``): to the last bit the floats ``score_query``
    # computes in Python, the same winning term per word and the same explanation, for any documents
    rng2 = random.Random(5)
    for superseded, types in ((True, None), (False, None), (False, ("lesson", "fact"))):
        src2 = index_query.IndexSource(con, include_superseded=superseded, types=types)
        for q in ("cache retry", "retries uploading tokens", "webhok quota", "the shard index with a replica",
                  "upload", "cache queue retry upload token worker deploy schema index timeout"):
            g = plan_query(q, src2.vocabulary)
            for keys in (pool_keys(src2, g, 300), rng2.sample(range(1, 720), 80), []):
                got = src2.scores(g, keys)
                assert got == score_query(g, src2, keys), (q, superseded, types)
                # the scores alone, and why asked afterwards for some of them (as ranking asks for its hits)
                alone = src2.scores(g, keys, explain=False)
                assert alone == (got[0], {})
                assert src2.explain(g, keys[:7]) == {k: got[1][k] for k in keys[:7] if k in got[1]}
                assert src2.explain(plan_query(q, src2.vocabulary), keys) == {}    # another query's words: nothing
    sql.clear()
    con.set_trace_callback(sql.append)
    assert index_query.search(con, "cache retry worker", 10)
    con.set_trace_callback(None)
    scoring = [s for s in sql if "WITH q(g, ti, tid, w)" in s]                   # documents scored in SQL
    scored_keys = [len(json.loads(s.split("json_each('", 1)[1].split("')", 1)[0])) for s in scoring]
    # the pool of 300 is scored as it is picked, never again: only the hits (why each matched) and the documents
    # spreading brought in from outside the pool are
    assert len(pool_keys(index_query.IndexSource(con), plan_query("cache retry worker", src.vocabulary), 300)) == 300
    assert scoring and max(scored_keys) < 300, scored_keys
    assert not any("FROM idx_post p JOIN idx_lens d" in s for s in sql)         # not term by term
    # a query word's candidate terms (aliases, …) looked up together, not one query each
    assert sum("FROM idx_terms WHERE term IN" in s for s in sql) >= 1
    assert sum("FROM idx_terms WHERE term=" in s for s in sql) <= 3
    present = [t for (t,) in con.execute("SELECT term FROM idx_terms ORDER BY tid LIMIT 4")]
    terms = [*present, "nosuchterm", present[0], "zzz"]
    looked, one_by_one = index_query.IndexVocabulary(con), index_query.IndexVocabulary(con)
    looked.prefetch(terms)
    assert [looked.lookup(t) for t in terms] == [one_by_one.lookup(t) for t in terms]
    assert {one_by_one.lookup(t) is None for t in terms} == {True, False}   # terms it has, and terms it lacks
    # the pool's documents, built by position, are the documents by name, and what ranking weighs them by too
    from acpmem.search.analysis import SearchDoc

    src3 = index_query.IndexSource(con, include_superseded=True)
    rows = con.execute("SELECT key, path, tags, cites, created FROM idx_docs").fetchall()
    src3.preload(k for k, *_ in rows)
    unread = index_query.IndexSource(con, include_superseded=True)    # each key read on its first use only
    tagged = described = 0
    for key, path, tags, cites, created in rows:
        want = SearchDoc(id=path, title="", tags=tuple(json.loads(tags)), created=created,
                         citations=tuple((s, q) for s, q in json.loads(cites)))
        assert src3.facets(key) == (1.0, want.tags, want.created)     # read before the document is built
        assert src3.citations(key) == want.citations                  # … and so are its citations
        assert src3.ident(key) == want.id                             # … and its name
        assert src3.doc(key) == want and src3.doc(key).weight == 1.0 and src3.doc(key).body == ""
        assert src3.citations(key) == want.citations                  # and after, from the document
        assert src3.ident(key) == want.id
        assert unread.citations(key) == want.citations                # not yet read: read for it
        assert index_query.IndexSource(con, include_superseded=True).ident(key) == want.id
        described += bool(want.citations) and want.created is not None
        tagged += len(want.tags) == 2
    assert described == len(rows) == 700 and tagged == 140


def _added_in_order(values) -> float:
    """Left to right, as ranking adds (the built-in ``sum`` of floats compensates from Python 3.12 on)."""
    total = 0.0
    for v in values:
        total += v
    return total


class _CompensatedTotal:
    """SQLite's ``total`` as it adds from 3.43 on (Kahan-Babuska-Neumaier), for a test on any SQLite."""

    def __init__(self) -> None:
        self.sum, self.comp = 0.0, 0.0

    def step(self, x) -> None:
        if x is None:
            return
        t = self.sum + x
        self.comp += (self.sum - t) + x if abs(self.sum) >= abs(x) else (x - t) + self.sum
        self.sum = t

    def finalize(self) -> float:
        return self.sum + self.comp


def test_a_query_of_many_words_picks_the_same_pool_summed_either_way(vault):
    """A long prompt's query has a hundred words: the pool is then chosen by a sum SQLite adds in its own order and
    summed again exactly (``IndexSource._top``). It must be the pool the word-by-word sum inside SQLite picks — the
    same documents, scores and order — also where the pool's edge cuts through documents of equal scores (copies of
    one text), against the word-by-word sum with and without MaxScore pruning, and with a type filter. A query of
    that many words is never pruned: every posting scanned once costs less then."""
    import random

    rng = random.Random(11)
    words = [f"{a}{b}" for a in ("cach", "queu", "retr", "uplo", "toke", "work", "depl", "sche") for b in "aeiou"]
    twin = " ".join(words[:12])
    for i in range(600):
        text = twin if i % 8 == 0 else " ".join(rng.choice(words) for _ in range(rng.randint(3, 30)))
        (vault.root / "entries" / f"m{i:04d}.md").write_text(
            f"---\nid: m{i:04d}\ntitle: {text.split()[0]} {i}\ntype: {('fact', 'lesson')[i % 2]}\nimportance: 5\n"
            f"created: 2026-10-01T10:00:00Z\ncitation:\n- session: s1\n  seq: {i + 1}\n---\n{text}\n", "utf-8")
    con = fresh(vault)
    sql: list[str] = []
    con.set_trace_callback(sql.append)
    compared = pruned = 0
    # two words not in the index, each standing for several terms (typos, prefixes), among words that are
    mixed = "retrz " + " ".join(rng.sample(words, 12)) + " workz " + " ".join(rng.sample(words, 12))
    for types in (None, ("lesson",)):
        for prune in (index_query.PRUNE_FROM_POSTINGS, 0):
            for q in (" ".join(words), " ".join(words[:12]), mixed):
                for n in (5, 40, 75, 300):
                    src = index_query.IndexSource(con, types=types)
                    src.prune_from = prune
                    groups = plan_query(q, src.vocabulary)
                    src.sum_in_sql_upto = 10 ** 6       # word by word inside SQLite
                    sql.clear()
                    want = pool_keys(src, groups, n)
                    pruned += any("e(key) AS (SELECT DISTINCT key" in s for s in sql)
                    src.sum_in_sql_upto = 0             # chosen by SQLite's sum, summed again exactly
                    sql.clear()
                    assert pool_keys(src, groups, n) == want, (types, prune, q, n)
                    # each with the score ``scores`` gives it, to the last bit, either way it was summed
                    exact, _ = src.scores(groups, want, explain=False)
                    for upto in (0, 10 ** 6):
                        src.sum_in_sql_upto = upto
                        assert src.scored_candidates(groups, n) == [(k, exact[k]) for k in want], (types, q, n)
                    src.sum_in_sql_upto = 0
                    sql.clear()
                    pool_keys(src, groups, n)
                    # every posting scanned at once: cheaper then than MaxScore's queries (never pruned)
                    assert not any("e(key) AS (SELECT DISTINCT key" in s for s in sql), (types, prune, q, n)
                    compared += 1
            # the scores themselves, to the last bit (MaxScore's bound is the n-th of them)
            groups = plan_query(mixed, src.vocabulary)
            assert sum(len(g.terms) > 1 for g in groups) == 2
            rows = [(gi, tid, w) for gi, _, tid, _, w in src._weighted(groups)]
            src.sum_in_sql_upto = 10 ** 6
            whole = src._top(rows, 300, None)
            src.sum_in_sql_upto = 0
            assert src._top(rows, 300, None) == whole
            # summed again exactly, as the word-by-word sum: each group's best term read back with SQLite's sums
            every = dict(src._top_sql(rows, 10 ** 6, None, ()))
            near, best = src._top_near(rows, 400, None, ())
            assert len(near) == len(best) == min(400, len(every)) and {k for k, _ in near} == set(best)
            assert all(_added_in_order(best[k][g] for g in sorted(best[k])) == every[k] for k, _ in near)
            # SQLite before 3.43 adds ``total`` in the groups' order, so there its own sums match already; from 3.43
            # on it adds more exactly (Kahan-Babuska-Neumaier), and only the sums again here keep the pool the same:
            # checked on any SQLite with that sum
            later = sqlite3.connect(vault.state_dir / DB_NAME)
            later.create_aggregate("total", 1, _CompensatedTotal)
            try:
                src = index_query.IndexSource(later, types=types)
                src.sum_in_sql_upto = 0
                assert src._top(rows, 300, None) == whole
                near, _ = src._top_near(rows, 400, None, ())
                assert any(every[k] != s for k, s in near)     # (SQLite's own sums did differ in their last bits)
            finally:
                later.close()
    con.set_trace_callback(None)
    assert compared == 48 and any("top AS (SELECT key, total(m) AS s FROM per" in s for s in sql)
    assert pruned    # (the word-by-word sums above did prune, where asked to from any count of postings)
    # the 75 copies of one text tie at the top for the query of their words: its 40 best cut through them, so more
    # documents than asked for were taken before the exact sums ordered them (a tie: the lower key first, as before)
    src = index_query.IndexSource(con)
    groups = plan_query(twin, src.vocabulary)
    src.sum_in_sql_upto = 0
    sql.clear()
    con.set_trace_callback(sql.append)
    picked = pool_keys(src, groups, 40)
    con.set_trace_callback(None)
    limits = [s.split("LIMIT", 1)[1].split(")", 1)[0].strip() for s in sql if "top AS (SELECT key, total(m)" in s]
    assert limits == ["56", "224"], limits
    exact, _ = src.scores(groups, picked, explain=False)
    assert len(picked) == 40 and len({exact[k] for k in picked}) == 1     # all copies, one score
    src.sum_in_sql_upto = 10 ** 6
    assert picked == pool_keys(src, groups, 40)


def test_typo_and_chinese_queries_find_the_entry(example_vault):
    con = fresh(example_vault)
    by_path = {e.path: e for e in example_vault.load().entries}
    assert "SQLite WAL" in by_path[ids(con, "sqllite wal")[0]].title
    assert "Staging deploys" in by_path[ids(con, "stagin deploy")[0]].title
    assert "分片上传" in by_path[ids(con, "上传大文件")[0]].title
    assert "结构化 JSON" in by_path[ids(con, "日志格式")[0]].title


def _indexed(con: sqlite3.Connection) -> dict[str, str]:
    return dict(con.execute("SELECT path, sig FROM idx_docs"))


def test_notices_every_kind_of_change(vault):
    v = vault
    a = make(v, "Cache invalidation uses version stamps", "Every key carries a version stamp.")
    write(v, a)
    con = fresh(v)
    assert top(con, "version stamps") == a.path
    first_commit = git(v.root, "rev-parse", "HEAD").out.strip()

    # an acpmem write
    b = make(v, "Kafka consumers commit offsets manually", "Auto-commit lost messages on rebalance.")
    write(v, b)
    con = fresh(v)
    assert top(con, "kafka offsets") == b.path

    # a human edit that keeps the size and the mtime: only ctime (and content) change
    p = v.root / a.path
    text = p.read_text("utf-8")
    st = p.stat()
    edited = text.replace("carries a version stamp.", "holds hashed etags.")
    edited = edited + " " * (len(text.encode()) - len(edited.encode()))
    assert len(edited.encode()) == st.st_size
    p.write_text(edited, "utf-8")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size and p.stat().st_mtime_ns == st.st_mtime_ns
    con = fresh(v)
    assert top(con, "hashed etags") == a.path
    assert has_term(con, "etags") and not has_term(con, "carries")

    # git checkout of an older version: b's file disappears, a's text comes back
    git(v.root, "checkout", "-q", "--", a.path)
    git(v.root, "checkout", "-q", first_commit)
    assert not (v.root / b.path).exists()
    con = fresh(v)
    assert b.path not in ids(con, "kafka offsets") and not has_term(con, "kafka")
    assert top(con, "carries version stamp") == a.path
    assert has_term(con, "carries") and not has_term(con, "etags")

    # a deleted file
    (v.root / a.path).unlink()
    con = fresh(v)
    assert ids(con, "version stamps") == []
    assert _indexed(con) == {}
    assert con.execute("SELECT count(*) FROM idx_terms").fetchone()[0] == 0

    # a new file dropped in by hand
    (v.root / "entries" / "hand01.md").write_text(
        "---\nid: hand01\ntitle: Written by hand\ntype: lesson\nimportance: 4\ncreated: 2026-11-02T00:00:00Z\n"
        "---\nThe flamingo deployment pipeline needs a manual approval.\n", "utf-8")
    con = fresh(v)
    assert top(con, "flamingo approval") == "entries/hand01.md"


def test_change_seen_by_another_command_first_is_still_indexed(vault):
    """Another process may refresh the catalog (and so consume the change) before recall runs."""
    v = vault
    a = make(v, "Nightly backups go to cold storage", "Retention 35 days.")
    write(v, a)
    con = fresh(v)
    assert top(con, "backups") == a.path
    p = v.root / a.path
    p.write_text(p.read_text("utf-8").replace("Retention 35 days.", "Retention is ninety days for audits."), "utf-8")
    other = Vault(v.root)
    other.load()  # refreshes the `files` table: the catalog's change list is gone
    other.close()
    con2 = catalog.connect(v.state_dir / catalog.DB_NAME)
    assert not catalog.refresh(con2, v.root)
    res = store.update(con2)
    assert (res.indexed, res.dropped) == (1, 1)
    assert top(con2, "audits ninety") == a.path


def test_invalid_files_are_never_indexed_and_superseded_are_filtered(vault):
    v = vault
    old = make(v, "Deploys happen on Fridays", "Every Friday afternoon.")
    write(v, old)
    new = make(v, "Deploys happen on Tuesdays", "Never on Friday.", supersedes=(old.id,))
    write(v, new, )
    v.write_entries([], subject="supersede", why="test",
                    updates=[v.resolve(old.id).with_changes(superseded_by=new.id)])
    (v.root / "entries" / "broken.md").write_text("---\nid: [unclosed\n---\nFriday deploy notes\n", "utf-8")
    con = fresh(v)
    assert "entries/broken.md" not in _indexed(con)
    assert ids(con, "deploys friday") == [new.path]
    assert set(ids(con, "deploys friday", include_superseded=True)) == {new.path, old.path}
    assert ids(con, "deploys friday", types=["decision"]) == []


def test_incremental_update_equals_a_rebuild(example_vault):
    v = example_vault
    con = fresh(v)
    e = v.load().entries[3]
    p = v.root / e.path
    p.write_text(p.read_text("utf-8") + "\nAlso mentions zeppelin telemetry.\n", "utf-8")
    catalog.refresh(con, v.root)
    res = store.update(con)
    assert (res.indexed, res.dropped, res.rebuilt) == (1, 1, False)

    def state(c):
        terms = sorted(c.execute("SELECT term, df FROM idx_terms"))
        stats = c.execute("SELECT n, s0, s1, s2, s3 FROM idx_stats").fetchone()
        posts = sorted(c.execute("SELECT t.term, d.path, p.f0, p.f1, p.f2, p.f3 FROM idx_post p "
                                 "JOIN idx_terms t ON t.tid = p.tid JOIN idx_docs d ON d.key = p.key"))
        return terms, stats, posts

    incremental = state(con)
    assert ("zeppelin", 1) in incremental[0]
    v.close()
    db.delete(v.state_dir / DB_NAME)
    assert state(fresh(v)) == incremental
    # a rebuild in small transactions (as several processes sharing the work, or one resuming after a kill)
    v.close()
    db.delete(v.state_dir / DB_NAME)
    con = catalog.connect(v.state_dir / catalog.DB_NAME)
    catalog.refresh(con, v.root)
    res = store.update(con, chunk=3)
    assert res.rebuilt and res.indexed == 10
    assert state(con) == incremental
    con.execute("INSERT INTO idx_dirty(path) SELECT path FROM files")  # marked but unchanged: nothing to do
    assert store.update(con, chunk=4) == store.UpdateResult()
    assert state(con) == incremental


@pytest.mark.parametrize("damage", ["junk", "deleted", "tables", "trigger", "version"])
def test_rebuilds_after_corruption(example_vault, damage):
    v = example_vault
    con = fresh(v)
    before = ids(con, "sqlite queue")
    assert before
    con.close()
    path = v.state_dir / catalog.DB_NAME
    if damage == "junk":
        for suffix in ("-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        path.write_bytes(os.urandom(4096) * 8)
    elif damage == "deleted":
        db.delete(path)
    else:
        c = sqlite3.connect(path)
        if damage == "tables":
            for t in store.TABLES:
                c.execute(f"DROP TABLE {t}")
        elif damage == "trigger":
            c.execute("DROP TRIGGER idx_files_upd")
        else:
            c.execute("UPDATE meta SET value='0' WHERE key=?", (store.VERSION_KEY,))
        c.commit()
        c.close()
    con, res = watch.open_fresh(v.state_dir, v.root)
    assert res.rebuilt and res.indexed == len(v.load().entries)
    assert ids(con, "sqlite queue") == before


_RECALLER = """
import sys
from acpmem.vault.writer import Vault
from acpmem.read.retrieval import recall
v = Vault(sys.argv[1])
hits = recall(v, sys.argv[2])
print(hits[0].entry.id if hits else "-")
"""


def test_many_processes_update_and_recall_at_once(example_vault):
    v = example_vault
    db.delete(v.state_dir / DB_NAME)
    procs = [subprocess.Popen([sys.executable, "-c", _RECALLER, str(v.root), q], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for q in ("sqlite queue", "pytest gitconfig", "rate limits", "上传大文件", "ADR")]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
    assert all(o[0].strip() not in ("", "-") for o in outs)
    con = fresh(v)
    assert con.execute("SELECT count(*) FROM idx_docs").fetchone()[0] == len(v.load().entries)
    assert con.execute("SELECT count(*) FROM idx_dirty").fetchone()[0] == 0
    assert json.loads(json.dumps(con.execute("SELECT n FROM idx_stats").fetchone()))[0] == 10


def test_an_immediate_locked_answer_is_tried_again_then_reported(tmp_path):
    """SQLite answers "locked" at once, without waiting, where waiting could not help: here a write after a read
    whose snapshot another process has moved past (WAL). ``with_rebuild`` tries the whole attempt again a moment
    later (which then works) and, when it keeps happening, reports a busy index — never deletes it."""
    import sqlite3

    from acpmem.core.errors import LockTimeout

    path = tmp_path / "x.sqlite"
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    calls: list[int] = []

    def attempt(conflict_every_time: bool):
        calls.append(1)
        a = sqlite3.connect(path, isolation_level=None, timeout=30)
        try:
            a.execute("BEGIN")
            a.execute("SELECT count(*) FROM t").fetchone()
            if conflict_every_time or len(calls) == 1:
                b = sqlite3.connect(path, isolation_level=None)
                b.execute("INSERT INTO t VALUES (1)")
                b.close()
            a.execute("INSERT INTO t VALUES (2)")
            a.execute("COMMIT")
            return len(calls)
        finally:
            a.close()

    assert db.with_rebuild(path, lambda: attempt(False)) == 2
    calls.clear()
    with pytest.raises(LockTimeout):
        db.with_rebuild(path, lambda: attempt(True))
    assert len(calls) == len(db.BUSY_RETRIES) + 1
    assert path.exists()
    con = sqlite3.connect(path)
    assert con.execute("SELECT count(*) FROM t WHERE x = 2").fetchone()[0] == 1     # the one attempt that worked
    con.close()
