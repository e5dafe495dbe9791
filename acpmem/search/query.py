"""Queries over the derived search index (built by ``acpmem.search.store``).

``IndexSource`` answers ``ranking.PostingSource`` from the index tables: a query reads the postings of its own terms
only (with the field lengths joined in), the vocabulary is probed term by term, and the full term list is loaded
only for the typo channel, when a query word is not in the vocabulary. Document metadata is read in one batch for
the documents that scored; the text of the hits only, from the catalog.
"""
from __future__ import annotations

import json
import re
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from acpmem.core.entry import Entry
from acpmem.search import cedict
from acpmem.search.analysis import CJK_CHARS, FIELDS, SearchDoc, indexed_body
from acpmem.search.ranking import (B, FIELD_WEIGHTS, K1, SPREAD_CITES, CorpusStats, Hit, QueryGroup, bounded_neighbours,
                                   idf, make_preview, plan_query, rank, term_why, typo_neighbours, vector_share)

_NF = len(FIELDS)
PRUNE_FROM_POSTINGS = 20_000   # below this many postings a query is scored whole (pruning costs a second query)
PROBE_COST = 0.35              # a primary-key probe, relative to one posting of a scan (measured at 100,000 entries)
# Up to this many query words, the pool's documents are summed word by word inside SQLite, as ``ranking`` sums them;
# with more (a long prompt), a conditional maximum per word made the query cost words × postings, so the pool is
# chosen by a sum SQLite adds in its own way, then summed again exactly (``IndexSource._top``)
SUM_IN_SQL_UPTO = 16
NEAR = 1e-9                    # relative: far more than the rounding of any sum of scores, far less than a real gap


_CJK_RANGES = [(a, b) for a, b in re.findall(r"(.)-(.)", CJK_CHARS)]


def doc_filter(types: Iterable[str] | None, include_superseded: bool) -> tuple[str, list]:
    """The SQL conditions (each `` AND …``, on the documents table ``d``) and their parameters that keep a search to
    these types and, unless asked, to entries not superseded."""
    where, params = [], []
    if not include_superseded:
        where.append("d.sup = 0")
    if types is not None:
        types = list(types)
        where.append(f"d.type IN ({','.join('?' * len(types))})")
        params += types
    return "".join(f" AND {w}" for w in where), params


class IndexVocabulary:
    """``memory.Vocabulary`` answered from ``idx_terms``: membership and prefixes by index lookups; the typo
    channel loads the alphabetic terms once, on first use."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self._con = con
        self._known: dict[str, tuple[int, int] | None] = {}
        self._typo: list[str] | None = None
        self._typo_memo: dict[tuple, list[tuple[str, int]]] = {}
        self._has_cjk: bool | None = None
        self._has_latin: bool | None = None

    def en_to_zh(self, word: str) -> tuple[str, ...]:
        return cedict.store().en_to_zh(word)

    def zh_to_en(self, word: str) -> tuple[str, ...]:
        return cedict.store().zh_to_en(word)

    def known_cjk(self, words: Iterable[str]) -> tuple[set[str], set[str]]:
        """(those of ``words`` that are index terms, those that are dictionary headwords)."""
        words = list(words)
        found = {t for (t,) in self._con.execute("SELECT term FROM idx_terms WHERE term IN (SELECT value FROM "
                                                 "json_each(?))", (json.dumps(words, ensure_ascii=False),))}
        return found, cedict.store().known_zh(words)

    def prefetch(self, terms: Iterable[str]) -> None:
        """Look up every one of ``terms`` not looked up yet, in one query (a query word's candidates — its aliases,
        prefixes, clippings and typo neighbours — are tens of terms)."""
        todo = [t for t in dict.fromkeys(terms) if t not in self._known]
        if len(todo) < 2:
            return
        found = {t: (tid, df) for t, tid, df in self._con.execute(
            "SELECT term, tid, df FROM idx_terms WHERE term IN (SELECT value FROM json_each(?))",
            (json.dumps(todo, ensure_ascii=False),))}
        for t in todo:
            self._known[t] = found.get(t)

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
        """The alphabetic terms that do not start with a CJK character, sorted (as ``memory.Vocabulary`` keeps
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
    """A ``ranking.PostingSource`` over the index tables, optionally restricted to live entries of some types.
    Restricted documents never score (their postings are skipped), but still count in the corpus statistics."""

    def __init__(self, con: sqlite3.Connection, *, types: Iterable[str] | None = None,
                 include_superseded: bool = False) -> None:
        self._con = con
        row = con.execute("SELECT n, s0, s1, s2, s3 FROM idx_stats WHERE id=1").fetchone()
        n = row[0]
        self.stats = CorpusStats(n, tuple(s / (n or 1) for s in row[1:]))
        self.vocabulary = IndexVocabulary(con)
        self._where, params = doc_filter(types, include_superseded)
        self._params = params
        self._lens: dict[int, tuple[int, ...]] = {}
        self._docs: dict[int, SearchDoc] = {}
        self._rows: dict[int, list] = {}     # preloaded, not built yet: path, tags, cites, created
        self._kept: dict[int, bool] = {}
        self._best: dict[int, dict[int, tuple[float, int]]] = {}   # per document scored: group → (score, term)
        self._best_of: Sequence[QueryGroup] | None = None           # … for these groups
        self.neighbour_work = 0

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

    def scores(self, groups: Sequence[QueryGroup], keys: Iterable[int],
               explain: bool = True) -> tuple[dict[int, float], dict[int, dict]]:
        """``ranking.score_query`` for the documents ``keys``, their postings scored inside SQLite in one query
        rather than read term by term into Python: each term's score is the same operations on the same doubles
        in the same order (``bm25f`` skips a field without the term, here it adds 0.0, which changes no bit), and
        the best term per group and the sum over groups are taken here as ``score_query`` takes them, so the
        floats, the winning terms and ties come out the same. With ``explain`` false, why is left to ``explain``
        (ranking shows a handful of the hundreds it scores)."""
        keys = list(keys)
        rows = [(gi, ti, tid, w) for gi, ti, tid, df, w in self._weighted(groups) if df]
        totals: dict[int, float] = defaultdict(float)
        why: dict[int, dict] = defaultdict(dict)
        if not rows or not keys:
            return dict(totals), dict(why)
        tfw, fparams = self._field_sum()
        sql = (f"WITH q(g, ti, tid, w) AS (VALUES {','.join('(?,?,?,?)' for _ in rows)}) "
               "SELECT key, g, ti, w * (t * ? / (? + t)) FROM ("
               f"SELECT d.key AS key, q.g AS g, q.ti AS ti, q.w AS w, ({tfw}) AS t "
               "FROM idx_lens d CROSS JOIN q CROSS JOIN idx_post p WHERE d.key IN (SELECT value FROM json_each(?)) "
               f"AND p.tid = q.tid AND p.key = d.key{self._where})")
        params = [x for r in rows for x in r] + [K1 + 1, K1] + fparams + [json.dumps(keys)] + self._params
        # per document and group, the best term: the first of the group's terms on a tie, as score_query keeps it
        best: dict[int, dict[int, tuple[float, int]]] = {}
        for key, gi, ti, s in self._con.execute(sql, params):
            per = best.setdefault(key, {})
            was = per.get(gi)
            if was is None or s > was[0] or (s == was[0] and ti < was[1]):
                per[gi] = (s, ti)
        if self._best_of is not groups:     # what explain says is of one query's words
            self._best, self._best_of = {}, groups
        self._best.update(best)
        for key, per in best.items():
            for gi in sorted(per):      # summed in the groups' order, as score_query sums them
                totals[key] += per[gi][0]
        if explain:
            why.update(self.explain(groups, best))
        return dict(totals), dict(why)

    def explain(self, groups: Sequence[QueryGroup], keys: Iterable[int]) -> dict[int, dict]:
        """Why each of ``keys`` scored what ``scores`` gave it (for these ``groups``): per query word, its best term,
        how it was found and its score, as ``score_query`` says it."""
        why: dict[int, dict] = {}
        if self._best_of is not groups:
            return why
        for key in keys:
            per = self._best.get(key)
            if per:
                why[key] = {}
                for gi in sorted(per):
                    s, ti = per[gi]
                    g = groups[gi]
                    why[key][g.word] = term_why(g.terms[ti], s)
        return why

    def _weighted(self, groups: Sequence[QueryGroup]) -> list[tuple[int, int, int, int, float]]:
        """(group, term's place in it, term id, df, weight × idf) of each query term in the index."""
        out = []
        for gi, g in enumerate(groups):
            for ti, qt in enumerate(g.terms):
                found = self.vocabulary.lookup(qt.term)
                if found:
                    out.append((gi, ti, *found, qt.weight * idf(self.stats.n_docs, found[1])))
        return out

    def _field_sum(self) -> tuple[str, list]:
        """BM25F's weighted, length-normalised term frequency of a posting ``p`` of a document ``d``, as SQL with
        its parameters: per field ``w * tf / (1 - B + B * len / avg)`` — the operations of ``ranking.bm25f``, in
        its order — and 0.0 for a field without the term (as ``bm25f`` skips it; adding 0.0 changes no bit, and
        most postings are in one or two of the fields)."""
        parts, params = [], []
        for i, (w, avg) in enumerate(zip(FIELD_WEIGHTS, self.stats.avg_len)):
            parts.append(f"(CASE WHEN p.f{i} THEN ? * p.f{i} / (? + ? * d.l{i} / ?) ELSE 0.0 END)")
            params += [w, 1 - B, B, avg or 1]
        return " + ".join(parts), params

    prune_from = PRUNE_FROM_POSTINGS

    def scored_candidates(self, groups: Sequence[QueryGroup], n: int) -> list[tuple[int, float]]:
        """(key, score) of the ``n`` best documents by term score, best first, found inside SQLite: the same BM25F
        as ``ranking.bm25f`` and the same best-term-per-group sum, so that a query's tens of thousands of postings
        never become Python objects. Each score is the one ``scores`` gives the document, bit for bit (the same
        operations on the same doubles in the same order), so ``rank`` takes the pool's scores from here rather
        than scoring it again.

        With many postings, MaxScore prunes: no document takes more from a term than weight × idf × (k1 + 1). The
        documents of the strongest terms give a score ``theta`` that the ``n``-th best reaches at least; a document
        holding only terms whose bounds (best per query word) add up below ``theta`` cannot be in the top ``n``,
        so only documents holding one of the other terms are scored, fully — when that is cheaper than scanning
        every posting."""
        rows: list[tuple[int, int, float]] = []
        dfs: dict[int, int] = {}
        for gi, _, tid, df, w in self._weighted(groups):
            dfs[tid] = df
            rows.append((gi, tid, w))
        if not rows:
            return []
        if sum(dfs.values()) < self.prune_from or len({gi for gi, _, _ in rows}) > self.sum_in_sql_upto:
            # a query of more words than that is summed by SQLite (``_top``): every posting scanned once costs less
            # than MaxScore's queries then (a long prompt: 17% less at 100,000 entries, 30% at 10,000)
            return self._top(rows, n, None)
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
            return self._top(rows, n, None)
        seed = self._top(rows, n, sorted(seed_terms))
        if len(seed) < n:
            return self._top(rows, n, None)
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
            return seed
        if not (weak and cheaper(essential)):
            return self._top(rows, n, None)
        # the documents of the seed terms were scored already: a document among them missing from the seed's best
        # n is behind n others there, so only the other documents of the essential terms are scored now
        more = self._top(rows, n, [t for t in essential if t not in seed_terms], sorted(seed_terms))
        return sorted(seed + more, key=lambda r: (-r[1], r[0]))[:n]

    sum_in_sql_upto = SUM_IN_SQL_UPTO

    def _top(self, rows: list[tuple[int, int, float]], n: int, holding: list[int] | None,
             scored: Sequence[int] = ()) -> list[tuple[int, float]]:
        """(key, score) of the ``n`` best documents over all query terms, best first (a tie: the lower key first);
        with ``holding``, among the documents that hold one of those term ids only, less those holding one of the
        term ids ``scored``.

        A document's score is the sum, in the groups' order, of its best term per group. Summed so inside SQLite,
        each group is a conditional maximum evaluated on every posting: a long prompt's hundred words made the
        query a hundred times the work of its postings. With more than ``sum_in_sql_upto`` groups, SQLite takes
        each group's best per document and adds them with its own ``total`` (the same up to the last bits), a few more
        documents than ``n`` are taken, as many more as it takes for the last of them to fall clearly below the
        ``n``-th, and those are summed again here exactly as above: the same documents, scores and order."""
        if len({r[0] for r in rows}) <= self.sum_in_sql_upto:
            return self._top_sql(rows, n, holding, scored)
        fetch = n + max(16, n // 8)
        while True:
            near, best = self._top_near(rows, fetch, holding, scored)
            if len(near) < fetch or near[-1][1] < near[n - 1][1] - NEAR * (abs(near[n - 1][1]) + 1.0):
                break
            fetch *= 4
        exact: dict[int, float] = {}
        for key, per in best.items():
            total = 0.0
            for g in sorted(per):
                total += per[g]
            exact[key] = total
        return sorted(exact.items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    def _pool_rows(self, rows: list[tuple[int, int, float]], holding: list[int] | None,
                   scored: Sequence[int]) -> tuple[str, list, str, list]:
        """The common part of ``_top``'s queries: the query's terms and the documents as common table expressions
        (with their parameters), and a select of every (document, group, term score) row (with its parameters)."""
        tfw, fparams = self._field_sum()
        ctes = f"q(g, tid, w) AS (VALUES {','.join('(?,?,?)' for _ in rows)})"
        params: list = [x for r in rows for x in r]
        if holding is None:
            scan = f"q JOIN idx_post p ON p.tid = q.tid JOIN idx_lens d ON d.key = p.key WHERE 1{self._where}"
        else:   # driven by those documents, each probing the query's postings by primary key
            ctes += f", e(key) AS (SELECT DISTINCT key FROM idx_post WHERE tid IN ({','.join('?' * len(holding))})"
            params += holding
            if scored:
                ctes += f" EXCEPT SELECT key FROM idx_post WHERE tid IN ({','.join('?' * len(scored))})"
                params += list(scored)
            ctes += ")"
            # the documents by primary key in key order, so that grouping by document needs no sort
            scan = ("idx_lens d CROSS JOIN q CROSS JOIN idx_post p "
                    f"WHERE d.key IN (SELECT key FROM e) AND p.tid = q.tid AND p.key = d.key{self._where}")
        # grouped as ``scores`` groups it (and ``ranking.bm25f``): the same doubles, so the sums are the same bits
        scores = ("SELECT key, g, w * (tfw * ? / (? + tfw)) AS sc FROM ("
                  f"SELECT d.key AS key, q.g AS g, q.w AS w, ({tfw}) AS tfw FROM {scan})")
        return ctes, params, scores, [K1 + 1, K1] + fparams + self._params

    def _top_sql(self, rows: list[tuple[int, int, float]], n: int, holding: list[int] | None,
                 scored: Sequence[int]) -> list[tuple[int, float]]:
        """``_top`` in one query, summed group by group in their order: each group's best term per document by a
        conditional max, all in one grouping by document (grouping by document and group first, then by document,
        sorts every row twice: slower for a few words)."""
        ctes, params, scores, more = self._pool_rows(rows, holding, scored)
        best = " + ".join(f"coalesce(max(CASE WHEN g = {gi} THEN sc END), 0.0)" for gi in sorted({r[0] for r in rows}))
        sql = f"WITH {ctes} SELECT key, {best} AS s FROM ({scores}) GROUP BY key ORDER BY s DESC, key LIMIT ?"
        return self._con.execute(sql, params + more + [n]).fetchall()

    def _top_near(self, rows: list[tuple[int, int, float]], n: int, holding: list[int] | None,
                  scored: Sequence[int]) -> tuple[list[tuple[int, float]], dict[int, dict[int, float]]]:
        """The ``n`` best documents by SQLite's own sum of each group's best term (``total``: the same up to the last
        bits), best first, and, for each of them, each group's best term score (those doubles exactly) — in one
        query, the groups' bests kept from the sum rather than computed twice."""
        ctes, params, scores, more = self._pool_rows(rows, holding, scored)
        sql = (f"WITH {ctes}, per AS (SELECT key, g, max(sc) AS m FROM ({scores}) GROUP BY key, g), "
               "top AS (SELECT key, total(m) AS s FROM per GROUP BY key ORDER BY s DESC, key LIMIT ?) "
               "SELECT top.key, top.s, per.g, per.m FROM top JOIN per ON per.key = top.key")
        sums: dict[int, float] = {}
        best: dict[int, dict[int, float]] = {}
        for key, total, g, m in self._con.execute(sql, params + more + [n]):
            sums[key] = total
            best.setdefault(key, {})[g] = m
        return sorted(sums.items(), key=lambda kv: (-kv[1], kv[0])), best

    def doc_len(self, key: int) -> tuple[int, ...]:
        got = self._lens.get(key)
        if got is None:
            row = self._con.execute("SELECT l0, l1, l2, l3 FROM idx_lens WHERE key=?", (key,)).fetchone()
            got = self._lens[key] = tuple(row) if row else (0,) * _NF
        return got

    def doc(self, key: int) -> SearchDoc:
        """The document without its text (``rank`` re-scores a bounded pool of documents by id, tags, created,
        citations and weight); ``full_docs`` adds the text."""
        got = self._docs.get(key)
        if got is None:
            row = self._rows.get(key)
            if row is None:
                self.preload((key,))
                row = self._rows[key]
            path, tags, cites, created = row
            # every field by position (id, title, body, type, tags, citations, created, weight): a third cheaper
            # than by name
            got = self._docs[key] = SearchDoc(path, "", "", "", () if tags == "[]" else tuple(json.loads(tags)),
                                              _citations(cites), created, 1.0)
        return got

    def ident(self, key: int) -> str:
        """``doc(key).id``, the entry file's path, read without building the document (``rank`` names a hundred
        hits on a long session's later prompt, whose previews nobody reads)."""
        got = self._docs.get(key)
        if got is not None:
            return got.id
        row = self._rows.get(key)
        return self.doc(key).id if row is None else row[0]

    def citations(self, key: int) -> tuple[tuple[str, int | str], ...]:
        """``doc(key).citations``, read without building the document (``rank`` compares the citations of four
        times as many documents as it returns)."""
        got = self._docs.get(key)
        if got is not None:
            return got.citations
        row = self._rows.get(key)
        return self.doc(key).citations if row is None else _citations(row[2])

    def facets(self, key: int) -> tuple[float, tuple[str, ...], str | None]:
        """(weight, tags, created) of a document: what ``rank`` weighs each pooled document by, read without
        building the document (its citations are parsed only for the few ``rank`` compares)."""
        row = self._rows.get(key)
        if row is None:
            d = self.doc(key)
            return d.weight, d.tags, d.created
        tags = row[1]
        return 1.0, () if tags == "[]" else tuple(json.loads(tags)), row[3]

    def preload(self, keys: Iterable[int]) -> None:
        """Read the documents of ``keys`` in one query (``rank`` looks at its whole pool); each is built when
        asked for."""
        todo = [k for k in keys if k not in self._rows]
        if not todo:
            return
        rows = self._rows
        for key, *row in self._con.execute(
                "SELECT key, path, tags, cites, created FROM idx_docs WHERE key IN (SELECT value FROM json_each(?))",
                (json.dumps(todo),)):
            rows[key] = row

    def full_docs(self, paths: Sequence[str]) -> dict[str, SearchDoc]:
        """The document of each of ``paths`` that is indexed, with its text (the document alone where its file's
        row is gone), all in one query: a later prompt of a long session previews a hundred hits."""
        out: dict[str, SearchDoc] = {}
        for path, key, data in self._con.execute(
                "SELECT d.path, d.key, f.data FROM idx_docs d LEFT JOIN files f ON f.path = d.path "
                "WHERE d.path IN (SELECT value FROM json_each(?))", (json.dumps(list(paths), ensure_ascii=False),)):
            light = self.doc(key)
            if data is None:
                out[path] = light
            else:
                d = json.loads(data)
                out[path] = light.with_changes(title=d.get("title") or "", body=indexed_body(d))
        return out

    def neighbours(self, key: int, radius: int) -> list[tuple[int, int]]:
        return self.neighbours_of((key,), radius)[key]

    def neighbours_of(self, keys: Iterable[int], radius: int) -> dict[int, list[tuple[int, int]]]:
        """``neighbours`` of each of ``keys``, the same, with fewer queries: the citations of all of them in one
        (still at most ``SPREAD_CITES`` of each, read as ``neighbours`` reads them), the restriction once for all
        they found."""
        keys = list(keys)
        cited = dict(self._con.execute(
            "SELECT e.value, (SELECT json_group_array(json_array(session, lo, hi)) FROM (SELECT DISTINCT session, lo, "
            "hi FROM idx_cites WHERE key = e.value ORDER BY session, lo, hi LIMIT ?)) FROM json_each(?) e",
            (SPREAD_CITES, json.dumps(keys))))
        found = {}
        for key in keys:
            best, work = bounded_neighbours(key, [tuple(c) for c in json.loads(cited[key])], radius, self._scan)
            self.neighbour_work += work
            found[key] = best
        if self._where:
            allowed = self._allowed({k for best in found.values() for k in best})
            return {key: [(k, d) for k, d in best.items() if k in allowed] for key, best in found.items()}
        return {key: list(best.items()) for key, best in found.items()}

    def _scan(self, session: str, low: int, high: int, n: int) -> list[tuple[int, int, int]]:
        # the nearest n rows by the (session, lo, hi, key) index; every row read counts as read, a document the
        # restriction leaves out too (``neighbours`` drops those from what it found, with one query, rather than
        # a probe per row read here)
        return self._con.execute(
            "SELECT key, lo, hi FROM idx_cites WHERE session = ? AND lo BETWEEN ? AND ? "
            "ORDER BY lo DESC, hi DESC, key DESC LIMIT ?", (session, low, high, n)).fetchall()

    def _allowed(self, keys: Iterable[int]) -> set[int]:
        """Those of ``keys`` the restriction keeps (remembered: spreading meets the same neighbours again)."""
        memo = self._kept
        todo = [k for k in keys if k not in memo]
        if todo:
            kept = {k for (k,) in self._con.execute(
                f"SELECT d.key FROM idx_lens d WHERE d.key IN (SELECT value FROM json_each(?)){self._where}",
                (json.dumps(todo), *self._params))}
            memo.update((k, k in kept) for k in todo)
        return {k for k in keys if memo[k]}

def _citations(raw: str) -> tuple[tuple[str, int | str], ...]:
    """A document's citations as the index row stores them (JSON [[session, seq], …])."""
    return () if raw == "[]" else tuple((s, q) for s, q in json.loads(raw))


def search(con: sqlite3.Connection, query: str, limit: int = 5, *, types: Iterable[str] | None = None,
           include_superseded: bool = False, preview_length: int = 200, similar: Mapping[int, float] | None = None,
           share: float = 0.0, said: dict | None = None) -> list[Hit]:
    """Rank the indexed documents for ``query`` with the default engine (``ranking.rank``); ``Hit.id`` is the
    entry file's path. Previews are made from the full text of the hits only, as ``rank`` makes them.

    ``similar`` (index key → cosine similarity, from ``acpmem.search.vectors.nearest``) fuses the vector channel
    in at ``share``, reduced to nothing for the queries lexical search answers by construction
    (``ranking.vector_share``). ``said`` (when given) receives ``sure``: whether this is such a query, and
    ``words``: how many words it searched for (stop words aside). ``preview_length=0``: no previews (a caller
    that shows none reads no entry's text here)."""
    src = IndexSource(con, types=types, include_superseded=include_superseded)
    groups = plan_query(query, src.vocabulary)
    sure = bool(similar or said is not None) and vector_share(query, groups, 1.0, src.vocabulary) == 0.0
    share = share if similar and not sure else 0.0
    if said is not None:     # what the caller's later stages need to know of the query
        said.update(sure=sure, words=len(groups))
    hits = rank(src, query, limit=limit, preview_length=preview_length, groups=groups, similar=similar, share=share)
    if not hits or preview_length <= 0:
        return hits
    words = [g.word for g in groups]
    docs = src.full_docs([h.id for h in hits])
    return [h.with_changes(preview=make_preview(docs[h.id], words, preview_length)) if h.id in docs else h
            for h in hits]


def light_rows(con: sqlite3.Connection, *, types: Iterable[str], include_superseded: bool = False) -> list[tuple]:
    """(path, entry id, type, importance, created, frontmatter last_read) of every indexed entry, for scoring
    without building entries."""
    types = list(types)
    sql = (f"SELECT path, entry_id, type, importance, created, last_read FROM idx_docs "
           f"WHERE type IN ({','.join('?' * len(types))})" + ("" if include_superseded else " AND sup = 0"))
    return con.execute(sql, types).fetchall()


def light_entries(rows: Iterable[tuple]) -> list[tuple[str, Entry]]:
    """(path, entry) of ``light_rows``, in path order: entries of the index fields alone (no title, body or
    citations), for scoring."""
    return [(path, Entry(id=ident, title="", type=typ, importance=imp, created=created, body="", last_read=last_read))
            for path, ident, typ, imp, created, last_read in sorted(rows)]


__all__ = ["search", "IndexSource", "IndexVocabulary", "light_rows", "light_entries"]
