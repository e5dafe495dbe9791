"""Citation-neighbour spreading costs candidates × a small bound, whatever the citations look like: thousands of
entries citing one turn, one entry citing hundreds of sessions. Work is counted (rows and scans read), not timed;
the SQLite source and the in-memory reference still agree."""
from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings, strategies as st

from acpmem.search import query as index_query
from acpmem.search import watch
from acpmem.search.analysis import SearchDoc
from acpmem.search.reference import MemoryIndex
from acpmem.search.ranking import SPREAD_CITES, SPREAD_RADIUS, SPREAD_ROWS, SPREAD_TOP

BOUND = SPREAD_TOP * (SPREAD_CITES + SPREAD_ROWS)     # the most one recall may read for spreading


def _key(con, path: str) -> int:
    """The index key of the entry file at ``path``."""
    (key,) = con.execute("SELECT key FROM idx_docs WHERE path=?", (path,)).fetchone()
    return key


def write_files(vault, n: int, cites, words=("cache", "queue", "retry", "upload", "token")) -> None:
    rng = random.Random(n)
    for i in range(n):
        lines = "".join(f"- session: {s}\n  seq: {q}\n" for s, q in cites(i))
        body = " ".join(rng.choice(words) for _ in range(8))
        (vault.root / "entries" / f"e{i:05d}.md").write_text(
            f"---\nid: e{i:05d}\ntitle: note {i} {rng.choice(words)}\ntype: fact\nimportance: 5\n"
            f"created: 2026-10-01T10:00:00Z\ncitation:\n{lines}---\n{body}\n", "utf-8")


def test_everything_citing_one_turn_reads_a_bounded_number_of_rows(vault):
    write_files(vault, 2000, lambda i: [("s1", 7)])
    con, _ = watch.open_fresh(vault.state_dir, vault.root)
    src = index_query.IndexSource(con)
    from acpmem.search.ranking import rank

    hits = rank(src, "cache queue", limit=10)
    assert len(hits) == 10
    # every entry is a neighbour of every other; before the bound this read 50 × 2000 rows
    assert 0 < src.neighbour_work <= BOUND
    assert sum("spread" in h.explain for h in hits) > 0         # spreading still happens


def test_an_entry_citing_hundreds_of_sessions_reads_a_bounded_number_of_rows(vault):
    write_files(vault, 300, lambda i: [(f"s{k}", 10 + i % 3) for k in range(400)])
    con, _ = watch.open_fresh(vault.state_dir, vault.root)
    src = index_query.IndexSource(con)
    from acpmem.search.ranking import rank

    assert rank(src, "retry", limit=5)
    assert 0 < src.neighbour_work <= BOUND


_cites = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.one_of(
    st.integers(0, 12), st.tuples(st.integers(0, 12), st.integers(0, 4)).map(lambda t: f"{t[0]}-{t[0] + t[1]}"))),
    max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_cites, min_size=1, max_size=120))
def test_neighbours_agree_between_sqlite_and_memory_and_stay_bounded(vault, shapes):
    """Generated citation shapes (crowded turns, ranges, many citations per entry): the SQLite source finds the
    same neighbours at the same distances as the in-memory reference, within the per-candidate bound."""
    for p in (vault.root / "entries").glob("e*.md"):
        p.unlink()
    write_files(vault, len(shapes), lambda i: shapes[i])
    con, _ = watch.open_fresh(vault.state_dir, vault.root)
    src = index_query.IndexSource(con, include_superseded=True)
    docs = []
    for i, cites in enumerate(shapes):
        docs.append(SearchDoc(id=f"entries/e{i:05d}.md", title="", citations=tuple(cites)))
    mem = MemoryIndex(docs)
    for i in range(len(shapes)):
        key = _key(con, f"entries/e{i:05d}.md")
        before_s, before_m = src.neighbour_work, mem.neighbour_work
        got = sorted((src.doc(k).id, d) for k, d in src.neighbours(key, SPREAD_RADIUS))
        want = sorted((docs[k].id, d) for k, d in mem.neighbours(i, SPREAD_RADIUS))
        assert got == want
        assert src.neighbour_work - before_s == mem.neighbour_work - before_m <= SPREAD_CITES + SPREAD_ROWS


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_cites, min_size=1, max_size=80), st.randoms(use_true_random=False))
def test_a_restricted_source_finds_the_neighbours_it_keeps_reading_as_much(vault, shapes, rnd):
    """Restricted to some types, or to entries not superseded: the SQLite source's neighbours are the reference's
    (which reads every entry) less the entries the restriction leaves out, read within the same work — a left-out
    entry's rows still count as read."""
    for p in (vault.root / "entries").glob("e*.md"):
        p.unlink()
    kinds = [(rnd.choice(["fact", "lesson"]), rnd.random() < 0.3) for _ in shapes]
    for i, (cites, (typ, sup)) in enumerate(zip(shapes, kinds)):
        lines = "".join(f"- session: {s}\n  seq: {q}\n" for s, q in cites)
        (vault.root / "entries" / f"e{i:05d}.md").write_text(
            f"---\nid: e{i:05d}\ntitle: note {i}\ntype: {typ}\nimportance: 5\ncreated: 2026-10-01T10:00:00Z\n"
            + (f"superseded_by: e{(i + 1) % len(shapes):05d}\n" if sup else "")
            + f"citation:\n{lines}---\ncache queue\n", "utf-8")
    con, _ = watch.open_fresh(vault.state_dir, vault.root)
    mem = MemoryIndex([SearchDoc(id=f"entries/e{i:05d}.md", title="", citations=tuple(c))
                       for i, c in enumerate(shapes)])
    everything = index_query.IndexSource(con, include_superseded=True)
    for types, superseded in ((("fact",), True), (None, False), (("lesson",), False)):
        src = index_query.IndexSource(con, types=types, include_superseded=superseded)

        def kept(i: int) -> bool:
            return (types is None or kinds[i][0] in types) and (superseded or not kinds[i][1])

        for i in range(len(shapes)):
            key = _key(con, f"entries/e{i:05d}.md")
            before_s, before_m = src.neighbour_work, mem.neighbour_work
            got = sorted((everything.doc(k).id, d) for k, d in src.neighbours(key, SPREAD_RADIUS))
            want = sorted((f"entries/e{k:05d}.md", d) for k, d in mem.neighbours(i, SPREAD_RADIUS) if kept(k))
            assert got == want, (types, superseded, i)
            assert src.neighbour_work - before_s == mem.neighbour_work - before_m
        # many at once (what ranking asks for), the same as one by one, reading as much
        keys = [_key(con, f"entries/e{i:05d}.md") for i in range(len(shapes))]
        one_by_one = index_query.IndexSource(con, types=types, include_superseded=superseded)
        at_once = index_query.IndexSource(con, types=types, include_superseded=superseded)
        assert at_once.neighbours_of(keys, SPREAD_RADIUS) == {k: one_by_one.neighbours(k, SPREAD_RADIUS) for k in keys}
        assert at_once.neighbour_work == one_by_one.neighbour_work


def test_fused_ranking_spreads_with_its_own_share_and_lexical_ranking_keeps_its_own(vault):
    """The neighbour of a matching entry gains SPREAD × its score lexically and SPREAD_FUSED × it when the vector
    channel is fused in (here with one vector candidate, which adds nothing to any score: only the share differs)."""
    from acpmem.search.ranking import SPREAD, SPREAD_FUSED, rank

    for i, (words, seq) in enumerate([("cache eviction policy", 10), ("unrelated words here", 11),
                                      ("other things entirely", 90)]):
        (vault.root / "entries" / f"e{i}.md").write_text(
            f"---\nid: e{i}\ntitle: note {i}\ntype: fact\nimportance: 5\ncreated: 2026-10-01T10:00:00Z\n"
            f"citation:\n- session: s1\n  seq: {seq}\n---\n{words}\n", "utf-8")
    con, _ = watch.open_fresh(vault.state_dir, vault.root)
    src = index_query.IndexSource(con)
    lexical = {h.id: h for h in rank(src, "cache", limit=3)}
    a = _key(con, next(i for i in lexical if "e0" in i))
    fused = {h.id: h for h in rank(src, "cache", limit=3, similar={a: 0.5}, share=0.5)}
    b = next(i for i in lexical if "e1" in i)
    assert not any("e2" in i for i in lexical)                         # too far to be a neighbour
    assert lexical[b].explain["spread"] > 0
    assert abs(fused[b].explain["spread"] / lexical[b].explain["spread"] - SPREAD_FUSED / SPREAD) < 1e-3


def _commit_entries(vault, rows) -> None:
    """Entries one fork commit wrote: all cite the commit's seq (999) in session s1, each naming its own turns."""
    for name, words, turns in rows:
        cite = f"- session: {'s1' if turns is not None else 's2'}\n  seq: 999\n" + (f"  turns: '{turns}'\n" if turns
                                                                                  else "")
        (vault.root / "entries" / f"{name}.md").write_text(
            f"---\nid: {name}\ntitle: {words}\ntype: fact\nimportance: 5\ncreated: 2026-10-01T10:00:00Z\n"
            f"citation:\n{cite}---\n- {words}\n", "utf-8")


def test_an_entry_is_placed_at_the_turns_it_rests_on_not_at_its_commit(vault):
    """A fork's commit cites its own seq for every entry it writes, each naming its turns; spreading and the step
    back for entries citing the same moment go by those turns. Placed at the commit, every entry of a session was
    every other's neighbour at distance 0 (on LoCoMo one entry carrying five sessions' citations reached the top
    five of 52 questions of 150 by spreading alone) and the second relevant entry of a commit stepped back."""
    from acpmem.search.ranking import rank
    from acpmem.search.store import search_doc

    assert search_doc({"id": "x", "citation": [{"session": "s1", "seq": 999, "turns": "10-12,40"}]}).citations == \
        (("s1", "10-12"), ("s1", 40))
    assert search_doc({"id": "x", "citation": [{"session": "s1", "seq": 999}]}).citations == (("s1", 999),)
    scattered = ",".join(str(t) for t in range(1, 40, 4))                  # ten runs: placed at their span
    assert search_doc({"id": "x", "citation": [{"session": "s1", "seq": 999, "turns": scattered}]}).citations == \
        (("s1", "1-37"),)
    assert search_doc({"id": "x", "citation": [{"session": "s1", "seq": 999, "turns": "7-x"}]}).citations == \
        (("s1", 999),)                                                    # not a turns text: at its seq
    _commit_entries(vault, [
        ("a", "lantern festival parade tickets", "10"),
        ("b", "unrelated dinner with cousins", "11"),               # next to a's turn
        ("c", "different topic about gardening", "300"),            # the same commit, far from a's turn
        ("d", "lantern festival parade tickets again bought", "200"),
        ("e", "lantern festival parade tickets again bought later", None),   # another session's commit
    ])
    con, _ = watch.open_fresh(vault.state_dir, vault.root)
    src = index_query.IndexSource(con)
    hits = rank(src, "lantern festival parade tickets", limit=5)
    by = {h.id.split("/")[-1][:-3]: h for h in hits}
    assert by["b"].explain.get("spread", 0) > 0                       # a's neighbour
    assert "c" not in by                                              # not a neighbour: it shares no word either
    order = [h.id.split("/")[-1][:-3] for h in hits]
    assert order.index("d") < order.index("e"), order                 # d does not step back: it cites other turns
