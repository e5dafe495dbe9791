"""Ranking: a query becomes groups of weighted index terms, documents are scored by BM25F, then re-ranked with
what entries carry.

A query word's group holds the word itself, aliases, typo and prefix neighbours and dictionary translations, each
found in the ``Vocabulary`` alone (no document is scanned to expand a query); each group contributes its best BM25F
term per document, read from postings (fields title > tags > body > CJK bigrams). A source that can pick the best
candidates itself, with their scores (``acpmem.search.query.IndexSource.scored_candidates``), has none scored here.
``rank`` then works on a bounded pool of the best candidates: a share of a hit's score spreads to entries citing
neighbouring turns of the same session; entries tagged with a word of the query (a person's name) and entries dated
near a date the query names are boosted; an entry whose citations repeat those of an entry already chosen steps back.
Anything that implements ``PostingSource`` can be ranked (``acpmem.search.reference.MemoryIndex`` is the reference).

The weights below were set on the kernel corpus and LoCoMo (bench/search_*.py) as general rules, never per query.
"""
from __future__ import annotations

import functools
import heapq
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime
from types import MappingProxyType

from acpmem.core.lazyre import compile_later
from acpmem.core.limits import MAX_SEQ
from acpmem.core.values import Value
from acpmem.search import english
from acpmem.search.analysis import prepare as analysis_prepare
from acpmem.search.analysis import (SearchDoc, analyze, cjk_runs, has_cjk, latin_words, normalize_word,
                                    query_cjk_words)
from acpmem.search.typos import typo_neighbours  # noqa: F401  (reference.py and query.py take it from here)

_NO_EXPLAIN = MappingProxyType({})
FIELD_WEIGHTS = (2.0, 1.0, 1.5, 0.3)
K1, B = 1.2, 0.75


class Hit(Value):
    id: str
    score: float
    preview: str
    explain: Mapping = _NO_EXPLAIN       # why it scored (left out of comparison)
    _hidden = ("explain",)


class CorpusStats(Value):
    n_docs: int
    avg_len: tuple[float, ...]  # per field, FIELDS order


class Vocabulary:
    """What query planning needs from an index's terms (a description: nothing inherits it). ``memory.Vocabulary``
    is the reference; ``query.IndexVocabulary`` answers the same from SQLite."""

    has_cjk: bool       # the index holds CJK terms (dictionary lookups are worth doing)
    has_latin: bool     # … and Latin ones

    def __contains__(self, term: str) -> bool: ...
    def with_prefix(self, prefix: str, limit: int = 50) -> list[str]: ...
    def typo_neighbours(self, term: str, max_dist: int, limit: int = 5) -> list[tuple[str, int]]: ...
    def en_to_zh(self, word: str) -> tuple[str, ...]: ...
    def zh_to_en(self, word: str) -> tuple[str, ...]: ...
    def known_cjk(self, words: Iterable[str]) -> tuple[set[str], set[str]]: ...


class PostingSource:
    """What ``rank`` needs from an index (a description: nothing inherits it). ``MemoryIndex`` is the reference;
    ``index.IndexSource`` supplies the same from SQLite."""

    stats: CorpusStats
    vocabulary: Vocabulary

    def df(self, term: str) -> int: ...
    # (doc key, tf per field), of the documents in ``keys`` only when given
    def postings(self, term: str, keys: Iterable[int] | None = None) -> Iterable[tuple[int, tuple[int, ...]]]: ...
    def doc_len(self, key: int) -> tuple[int, ...]: ...
    def doc(self, key: int) -> SearchDoc: ...
    # (doc key, distance) of the documents citing turns within ``radius`` of ``key``'s, read as ``bounded_neighbours``
    # says; adds what it read to ``neighbour_work``
    def neighbours(self, key: int, radius: int) -> Iterable[tuple[int, int]]: ...
    neighbour_work: int
    # optional, for a source that can compute inside its store: ``scored_candidates(groups, n)``, (key, score) of
    # the ``n`` best documents by term score (the pool ``rank`` ranks), with ``scores(groups, keys)``, what
    # ``score_query`` gives for given documents, bit for bit, and why (``explain=False``: the scores alone), which
    # the pool's scores are too; ``neighbours_of(keys, radius)``, ``neighbours`` of each, and
    # ``facets(key)``, a document's (weight, tags, created), and ``citations(key)``, its citations (``doc(key)``'s),
    # read without building the document


# ───────────────────────────── 3. scoring ─────────────────────────────

W_EXACT, W_ALIAS, W_DICT, W_PREFIX, W_CLIPPED, W_TYPO1, W_TYPO2 = 1.0, 0.7, 0.6, 0.55, 0.35, 0.6, 0.45
SPREAD, SPREAD_RADIUS, SPREAD_TOP = 0.15, 2, 50
# With the vector channel fused in, spreading gets a larger share: the fused top holds more of the right moment and
# less of what shares a word by chance (LoCoMo R@5 with all-MiniLM-L6-v2: 0.602 at 0.15, 0.608 at 0.25, 0.605 at
# 0.4; docs/design.md). Lexical-only ranking keeps SPREAD.
SPREAD_FUSED = 0.25
# Spreading reads, per candidate, at most SPREAD_CITES of its citations and SPREAD_ROWS cited turns in all (nearest
# first), so its cost stays candidates × a small bound when thousands of entries cite one turn or one entry cites
# hundreds of sessions; ``PostingSource.neighbour_work`` counts what was read.
SPREAD_CITES, SPREAD_ROWS = 8, 64
SPREAD_SPAN = 10_000     # a range citation is seen from a turn at most this far past its start
DATE_BOOST = 1.0
TAG_BOOST = 0.5
POOL = 300
DUPLICATE = 0.6
FILLER_WEIGHT = 0.3
# Chinese words that frame a request or a question rather than name its topic ("帮我写一下…", "一个…", "怎么…");
# a query weighs them down as it does the English ones (documents keep them).
QUERY_FILLER_ZH = frozenset("""
一个 一下 一些 一种 帮我 帮忙 麻烦 请问 这个 那个 这些 那些 什么 怎么 怎样 如何 为什么 哪些 哪个 我们 你们 他们 我的 你的
可以 能否 能不能 需要 是否 有没有 应该 现在 还有 以及
""".split())


class QueryTerm(Value):
    term: str
    weight: float
    via: str


class QueryGroup(Value):
    """One query word and the index terms that may stand for it; a document scores its best one."""
    word: str
    terms: tuple[QueryTerm, ...]


@functools.lru_cache(maxsize=1)
def _alias_groups_by_letter() -> dict[str, tuple[int, ...]]:
    """First letter → the alias groups holding a word whose index term may start with it. A word's term is the word
    itself (a stop word, a code, a word not in English) or the stem of its lemma, and a stem keeps its word's first
    letter: so a word is filed under its own first letter and its lemma's."""
    by: dict[str, set[int]] = defaultdict(set)
    for gi, group in enumerate(english.ALIAS_GROUPS):
        for w in group:
            w = w.replace("-", "")
            by[w[:1]].add(gi)
            by[english.IRREGULAR.get(w, w)[:1]].add(gi)
    return {k: tuple(sorted(v)) for k, v in by.items()}


@functools.lru_cache(maxsize=None)
def _alias_group(gi: int) -> tuple[frozenset[str], frozenset[str]]:
    """(the words, their index terms) of one alias group."""
    words = frozenset(w.replace("-", "") for w in english.ALIAS_GROUPS[gi])
    return words, frozenset(normalize_word(w) or w for w in words)


def aliases_of(term: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """(the alias index terms, sorted; the alias surface words, for dictionary look-ups) of an index term: those of
    every alias group one of whose words has that term. Only the groups filed under the term's first letter are
    looked at (stemming all five hundred alias words took ~2 ms of every query's process)."""
    terms: set[str] = set()
    words: set[str] = set()
    for gi in _alias_groups_by_letter().get(term[:1], ()):
        group_words, group_terms = _alias_group(gi)
        if term in group_terms:
            terms |= group_terms
            words |= group_words
    terms.discard(term)
    return tuple(sorted(terms)), frozenset(words)


def prepare(segment: bool = True) -> None:
    """Build what a query builds on first use — the alias tables, the word lists, the CJK patterns, the segmenter
    (unless ``segment`` is false) and the stemmer — for a process that forks readers (``acpmem.cli.readserver``)."""
    for gi in range(len(english.ALIAS_GROUPS)):
        _alias_group(gi)
    _alias_groups_by_letter()
    english.prepare()
    analysis_prepare(segment)


def _english_forms(word: str) -> list[str]:
    forms = [word, english.IRREGULAR.get(word, word)]
    for suffix, repl in (("ies", "y"), ("es", ""), ("s", ""), ("ing", ""), ("ing", "e"), ("ed", ""), ("ed", "e")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            forms.append(word[: len(word) - len(suffix)] + repl)
    return list(dict.fromkeys(forms))


def plan_query(query: str, vocab: Vocabulary) -> list[QueryGroup]:
    """Query text → groups of weighted index terms, from the vocabulary alone."""
    groups: list[QueryGroup] = []
    seen: set[str] = set()
    prefetch = getattr(vocab, "prefetch", None)   # a vocabulary that looks many terms up at once

    def add(word: str, term: str, cands: list[QueryTerm]) -> None:
        best: dict[str, QueryTerm] = {}
        if prefetch is not None:
            prefetch(c.term for c in cands)
        for c in cands:
            if c.term in vocab and (c.term not in best or best[c.term].weight < c.weight):
                best[c.term] = c
        if best:
            groups.append(QueryGroup(word, tuple(best.values())))

    for word in latin_words(query):
        term = normalize_word(word)
        if not term or term in seen:
            continue
        seen.add(term)
        # words that frame a question ("what kind of…", "mentioned") say little about the topic
        cands = [QueryTerm(term, FILLER_WEIGHT if word in english.QUERY_FILLER else W_EXACT, "exact")]
        aliases, alias_words = aliases_of(term)
        cands += [QueryTerm(a, W_ALIAS, "alias") for a in aliases]
        if prefetch is not None:
            prefetch(c.term for c in cands)
        if term not in vocab and len(term) >= 4 and term.isalpha():
            cands += [QueryTerm(t, W_PREFIX, "prefix") for t in vocab.with_prefix(term, 20)]
            # a clipped word in the index ("auth" for "authentication") is weaker evidence than the reverse
            cands += [QueryTerm(term[:i], W_CLIPPED, "clipped") for i in range(4, len(term))]
            max_dist = 1 if len(term) < 8 else 2
            cands += [QueryTerm(t, W_TYPO1 if d == 1 else W_TYPO2, "typo")
                      for t, d in vocab.typo_neighbours(term, max_dist)]
        if vocab.has_cjk:
            forms = _english_forms(word)
            for form in forms:
                cands += [QueryTerm(z, W_DICT, "dict") for z in vocab.en_to_zh(form)]
            for form in sorted(alias_words - set(forms)):
                cands += [QueryTerm(z, W_DICT * W_ALIAS, "alias+dict") for z in vocab.en_to_zh(form)]
        add(word, term, cands)

    if has_cjk(query):
        for run in cjk_runs(query):
            for w in query_cjk_words(run, vocab):
                if w in seen:
                    continue
                seen.add(w)
                if w in QUERY_FILLER_ZH:
                    add(w, w, [QueryTerm(w, FILLER_WEIGHT, "exact")])
                    continue
                cands = [QueryTerm(w, W_EXACT, "exact")]
                if vocab.has_latin:
                    for en in vocab.zh_to_en(w):
                        t = normalize_word(en)
                        if t:
                            cands.append(QueryTerm(t, W_DICT, "dict"))
                add(w, w, cands)
    return groups


def bm25f(tfs: Sequence[int], lens: Sequence[int], stats: CorpusStats) -> float:
    tfw = 0.0
    for tf, ln, avg, w in zip(tfs, lens, stats.avg_len, FIELD_WEIGHTS):
        if tf:
            tfw += w * tf / (1 - B + B * ln / (avg or 1))
    return tfw * (K1 + 1) / (K1 + tfw)


def idf(n_docs: int, df: int) -> float:
    """BM25's inverse document frequency of a term in ``df`` of ``n_docs`` documents."""
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


def term_why(qt: QueryTerm, score: float) -> dict:
    """How a query word scored in a document, as a hit's explanation says it: its best term, how that term was
    found, its score."""
    return {"term": qt.term, "via": qt.via, "score": round(score, 4)}


def score_query(groups: Sequence[QueryGroup], src: PostingSource,
                keys: Iterable[int] | None = None) -> tuple[dict[int, float], dict[int, dict]]:
    """BM25F over postings: per group, each document takes its best-scoring term. Returns scores and why; with
    ``keys``, for those documents only."""
    n = src.stats.n_docs
    only = None if keys is None else list(keys)
    totals: dict[int, float] = defaultdict(float)
    why: dict[int, dict] = defaultdict(dict)
    for g in groups:
        best: dict[int, tuple[float, QueryTerm]] = {}
        for qt in g.terms:
            df = src.df(qt.term)
            if not df:
                continue
            w = idf(n, df)
            found = src.postings(qt.term) if only is None else src.postings(qt.term, only)
            for key, tfs in found:
                s = qt.weight * w * bm25f(tfs, src.doc_len(key), src.stats)
                if key not in best or s > best[key][0]:
                    best[key] = (s, qt)
        for key, (s, qt) in best.items():
            totals[key] += s
            why[key][g.word] = term_why(qt, s)
    return dict(totals), dict(why)


_MONTHS = {m: i for i, m in enumerate(
    "january february march april may june july august september october november december".split(), 1)}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_DATE_PATTERNS = (
    compile_later(r"\b(\d{4})-(\d{2})-(\d{2})\b"),
    compile_later(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+([A-Za-z]+),?\s+(\d{4})\b"),
    compile_later(r"\b([A-Za-z]+)\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b"),
    compile_later(r"\b([A-Za-z]+),?\s+(\d{4})\b"),
)


def _dated_spans(query: str) -> list[tuple[date, int, str]]:
    """(date, tolerance in days, the text that names it) for each date the query names."""
    out: list[tuple[date, int, str]] = []
    for m in _DATE_PATTERNS[0].finditer(query):
        try:
            out.append((date(int(m[1]), int(m[2]), int(m[3])), 3, m[0]))
        except ValueError:
            pass
    for pat, order in ((_DATE_PATTERNS[1], "dmy"), (_DATE_PATTERNS[2], "mdy")):
        for m in pat.finditer(query):
            d, mon, y = (m[1], m[2], m[3]) if order == "dmy" else (m[2], m[1], m[3])
            month = _MONTHS.get(mon.lower())
            if month:
                try:
                    out.append((date(int(y), month, int(d)), 3, m[0]))
                except ValueError:
                    pass
    if not out:
        for m in _DATE_PATTERNS[3].finditer(query):
            month = _MONTHS.get(m[1].lower())
            if month and len(m[1]) >= 3:
                out.append((date(int(m[2]), month, 15), 16, m[0]))
    return out


def query_dates(query: str) -> list[tuple[date, int]]:
    """Dates a query names, each with a tolerance in days (a day ±3, a month ±16)."""
    return [(d, tol) for d, tol, _ in _dated_spans(query)]


def date_words_as_one(groups: Sequence[QueryGroup], spans: Sequence[tuple[date, int, str]]) -> list[QueryGroup]:
    """The query's groups with the words of the dates it names ("October", "13", "2023") weighed together as one
    filler word: the date boost finds what was written near that day, and as words they would rank first whatever
    entry happens to spell the date out (a model copying a session's header into a note), over the entries about
    the question. ``spans``: the query's dates as ``_dated_spans`` reads them."""
    words = {normalize_word(w) for _, _, text in spans for w in latin_words(text)}
    words.discard(None)
    if not words:
        return list(groups)
    cap = FILLER_WEIGHT / len(words)      # a date is one thing the query names, however many words spell it
    return [QueryGroup(g.word, tuple(QueryTerm(t.term, min(t.weight, cap), t.via) for t in g.terms))
            if normalize_word(g.word) in words else g for g in groups]


def _parse_created(created: str | None) -> date | None:
    if not created:
        return None
    try:
        return datetime.fromisoformat(created.replace("Z", "+00:00")).date()
    except ValueError:
        return None


def make_preview(doc: SearchDoc, words: Sequence[str], length: int = 200) -> str:
    """Up to ``length`` characters of the document's text around the first of ``words`` found in it (from the
    start when none is); nothing when ``length`` is 0 (a caller that shows no preview)."""
    if length <= 0:
        return ""
    text = doc.body or doc.title
    if len(text) <= length:
        return text
    lower = text.lower()
    hit = next((i for i in (lower.find(w.lower()) for w in words if len(w) > 1) if i >= 0), -1)
    start = max(0, hit - length // 3) if hit > 0 else 0
    end = min(len(text), start + length)
    return ("…" if start else "") + text[start:end].strip() + ("…" if end < len(text) else "")


@functools.lru_cache(maxsize=4096)
def _tag_terms(tags: tuple[str, ...]) -> frozenset[str]:
    return frozenset(analyze(" ".join(tags)))


def _diversify(src: PostingSource, final: dict[int, float], limit: int) -> list[int]:
    """Top ``limit`` keys by score, except that an entry whose citations are all covered by entries already
    chosen competes with its score times DUPLICATE (near-duplicate memories of one moment crowd out others).

    Chosen one at a time, each the best left (the first in score order on a tie). An entry's standing changes
    once, to its score × DUPLICATE, when the chosen entries come to cover its citations, and both standings keep
    the score order. So the best left is the first entry not covered or the first one covered, whichever stands
    higher (the earlier on a tie); each entry counts the citations it still misses, and a choice updates only the
    entries that share one with it, instead of weighing every candidate again for each choice (a session's later
    prompts ask for up to 100 of a pool of 300: 30,000 weighings). Scores are numbers (never NaN). Where none is
    negative — as every ranking gives them — ``_diversify_in_order`` makes the same choice reading fewer citations;
    the counting below is for any numbers."""
    ranked = sorted(final, key=lambda k: (-final[k], k))
    if not DUPLICATE or DUPLICATE >= 1:
        return ranked[:limit]
    pending = ranked[: limit * 4]
    cited = getattr(src, "citations", None)     # without building each document: a later prompt weighs 400
    if pending and not final[pending[-1]] < 0:
        return _diversify_in_order(pending, final, limit, cited or (lambda k: src.doc(k).citations))
    cites = [frozenset(cited(k) if cited is not None else src.doc(k).citations) for k in pending]
    missing = [len(c) for c in cites]          # of each entry's citations, how many are not covered yet
    citing: dict = defaultdict(list)            # citation -> the positions of the entries that cite it
    for i, c in enumerate(cites):
        for cite in c:
            citing[cite].append(i)
    taken = [False] * len(pending)
    stepped_back: set[int] = set()              # positions of the covered entries not taken
    covered: set = set()
    first = 0                                   # every position before it is taken or covered
    chosen: list[int] = []
    while len(chosen) < min(limit, len(pending)):
        while first < len(pending) and (taken[first] or (cites[first] and not missing[first])):
            first += 1
        best = first
        if stepped_back:
            back = min(stepped_back)
            if first == len(pending):
                best = back
            else:
                free, lower = final[pending[first]], final[pending[back]] * DUPLICATE
                if lower > free or (lower == free and back < first):
                    best = back
        taken[best] = True
        stepped_back.discard(best)
        chosen.append(pending[best])
        for cite in cites[best] - covered:
            covered.add(cite)
            for j in citing[cite]:
                missing[j] -= 1
                if not missing[j] and not taken[j]:
                    stepped_back.add(j)
    return chosen


def _diversify_in_order(pending: list[int], final: dict[int, float], limit: int,
                        cited: Callable[[int], Iterable]) -> list[int]:
    """``_diversify`` where no score is negative, reading the citations of the entries up to the first one neither
    taken nor covered only (a later prompt of a long session asks for 100 of 400: about a third of them). With no
    negative score, a covered entry ranked below that first one never wins (its score × DUPLICATE is not above the
    first one's score, and a tie goes to the earlier), so only the covered entries above it compete: the earliest
    of them, the best left of them all."""
    cites: list[frozenset | None] = [None] * len(pending)

    def of(i: int) -> frozenset:
        c = cites[i]
        if c is None:
            c = cites[i] = frozenset(cited(pending[i]))
        return c

    taken = [False] * len(pending)
    back: list[int] = []        # the covered entries above ``first`` not taken, by position (a heap)
    covered: set = set()
    first = 0
    chosen: list[int] = []
    while len(chosen) < min(limit, len(pending)):
        while first < len(pending) and (taken[first] or (of(first) and of(first) <= covered)):
            if not taken[first]:
                heapq.heappush(back, first)
            first += 1
        best = first
        if back and (first == len(pending) or final[pending[back[0]]] * DUPLICATE >= final[pending[first]]):
            best = heapq.heappop(back)
        taken[best] = True
        chosen.append(pending[best])
        covered |= of(best)
    return chosen


_IDENTIFIER = compile_later(r"[A-Za-z0-9]+(?:[_./:#-][A-Za-z0-9]+)+|[a-z]+[A-Z][A-Za-z0-9]*|[A-Za-z]+[0-9][A-Za-z0-9]*")


def vector_share(query: str, groups: Sequence[QueryGroup], weight: float, vocab=None) -> float:
    """The vector channel's share for this query: none for queries lexical search answers by construction — an
    identifier (``retry_upload``, ``src/app.py``, ``retryUpload``, ``v2``) or a misspelt word (a query word found
    only through its typo neighbours, which an embedding of the misspelling does not know).

    With ``vocab`` (its ``en_to_zh`` is the dictionary), a word the vault never used is told from a misspelling:
    an English word (``english.known_word``: "soon" is not a misspelt "son") or a name (capitalised past the
    query's first word) does not count as misspelt, nor does a hyphenated compound of English words
    ("self-care") as an identifier. Without it every such word counts (the rule before the dictionary)."""
    if not weight:
        return 0.0

    def known(word: str) -> bool:
        return vocab is not None and english.known_word(word.lower(), vocab.en_to_zh)

    for m in _IDENTIFIER.finditer(query):
        parts = m.group().split("-")
        if len(parts) < 2 or not all(p.isalpha() and known(p) for p in parts):
            return 0.0
    words = re.findall(r"[^\W\d_]+", query)
    names = {w.lower() for w in words[1:] if w[:1].isupper()} if vocab is not None else set()
    for g in groups:
        if not any(t.via in ("exact", "alias") for t in g.terms) and any(t.via == "typo" for t in g.terms):
            if g.word not in names and not known(g.word):
                return 0.0
    return weight


# Measured on LoCoMo and the kernel corpus with all-MiniLM-L6-v2 (docs/design.md): the floor at rank 19, 49 or 99,
# squared similarities and a lower lexical unit all land within ±0.005 R@5 of each other.
FUSE_FLOOR_RANK = 99     # the vector candidate whose similarity counts as nothing (rank from 0)


def fuse(scores: Mapping[int, float], similar: Mapping[int, float], share: float) -> dict[int, float]:
    """Score-level fusion: the term scores plus ``share`` × the best term score × each document's similarity
    rescaled over the vector candidates (the best 1, the ``FUSE_FLOOR_RANK``-th 0), so the vector channel reorders
    what the words leave close and brings in what they missed, and a query no word matched ranks by meaning alone."""
    top = max(scores.values(), default=0.0) or 1.0
    ranked = sorted(similar.values(), reverse=True)
    hi, lo = ranked[0], ranked[min(len(ranked) - 1, FUSE_FLOOR_RANK)]
    span = (hi - lo) or 1.0
    out = dict(scores)
    for k, c in similar.items():
        if c > lo:
            out[k] = out.get(k, 0.0) + top * share * (c - lo) / span
    return out


def rank(src: PostingSource, query: str, limit: int = 5, spread: bool = True, dates: bool = True,
         preview_length: int = 200, groups: Sequence[QueryGroup] | None = None,
         similar: Mapping[int, float] | None = None, share: float = 0.0) -> list[Hit]:
    """Rank the documents of ``src`` for ``query``: term scores (fused with the vector channel's ``similar``
    documents — key → cosine similarity — at ``share``, when given), then spreading and the tag and date boosts.

    Only the best ``POOL`` documents by term score (and those they spread to) are re-scored, so the cost of
    this step does not grow with the index."""
    if groups is None:
        groups = plan_query(query, src.vocabulary)
    spans = _dated_spans(query) if dates else []
    named = [(d, tol) for d, tol, _ in spans]
    if spans:
        groups = date_words_as_one(groups, spans)
    # A source that can rank inside its store names the pool with its scores, and scores the documents outside it
    # that spreading or the vector channel bring in; only those documents become Python objects here, and why is
    # asked at the end, for the documents shown only.
    pick = getattr(src, "scored_candidates", None)
    scored = getattr(src, "scores", None) if pick is not None else None

    def score(keys: list[int] | None) -> tuple[dict[int, float], dict[int, dict]]:
        if scored is None or keys is None:
            return score_query(groups, src, keys)
        return scored(groups, keys, explain=False)

    pool: list[int] | None = None
    if pick is not None:
        picked = pick(groups, max(POOL, limit))
        pool = [k for k, _ in picked]
        scores, why = dict(picked), {}
    else:
        scores, why = score_query(groups, src, None)
    fused = bool(similar) and share > 0
    if fused:
        outside = [k for k in similar if k not in scores]
        if pool is not None and outside:      # a similar document below the pool keeps its own term score
            more, more_why = score(outside)
            scores.update(more)
            why.update(more_why)
        scores = fuse(scores, similar, share)
    if not scores:
        return []
    by_score = sorted(scores, key=lambda k: (-scores[k], k))
    final = {k: scores[k] for k in by_score[:max(POOL, limit)]}
    extra: dict[int, dict] = defaultdict(dict)
    if fused:
        for k, c in similar.items():
            extra[k]["vector"] = round(c, 4)
    spread_share = SPREAD_FUSED if fused else SPREAD
    if spread and spread_share:
        gains: dict[int, float] = defaultdict(float)
        top = by_score[:SPREAD_TOP]
        many = getattr(src, "neighbours_of", None)    # a source that reads them for many documents at once
        found = many(top, SPREAD_RADIUS) if many is not None else {k: src.neighbours(k, SPREAD_RADIUS) for k in top}
        for key in top:
            for other, dist in found[key]:
                gains[other] += spread_share * scores[key] / (1 + dist)
        outside = [k for k in gains if k not in scores]
        if pool is not None and outside:     # a neighbour below the pool keeps its own term score
            more, more_why = score(outside)
            scores.update(more)
            why.update(more_why)
        for other, gain in gains.items():
            final[other] = final.get(other, scores.get(other, 0.0)) + gain
            extra[other]["spread"] = round(gain, 4)
    exact = {g.terms[0].term for g in groups if g.terms[0].via == "exact"}
    preload = getattr(src, "preload", None)
    if preload is not None:
        preload(final)
    facets = getattr(src, "facets", None)    # a source that gives them without building each document
    for key in final:
        if facets is not None:
            weight, tags, created = facets(key)
        else:
            doc = src.doc(key)
            weight, tags, created = doc.weight, doc.tags, doc.created
        factor = weight
        if TAG_BOOST and tags and exact & _tag_terms(tags):
            factor *= 1 + TAG_BOOST
            extra[key]["tag"] = True
        if named:
            created = _parse_created(created)
            if created:
                near = max((max(0.0, 1 - abs((created - d).days) / tol) for d, tol in named), default=0.0)
                if near > 0:
                    factor *= 1 + DATE_BOOST * near
                    extra[key]["date"] = round(near, 3)
        final[key] *= factor
    order = _diversify(src, final, limit)
    words = [g.word for g in groups]
    if scored is not None:     # why, for the documents shown only
        why = scored(groups, order)[1]
    ident = getattr(src, "ident", None) if preview_length <= 0 else None   # without previews, the documents'
    if ident is not None:                                                   # names alone (not built)
        return [Hit(ident(k), round(final[k], 6), "", {"terms": why.get(k, {}), **extra.get(k, {})}) for k in order]
    return [Hit(src.doc(k).id, round(final[k], 6), make_preview(src.doc(k), words, preview_length),
                {"terms": why.get(k, {}), **extra.get(k, {})}) for k in order]


def bounded_neighbours(key: int, cites: Iterable[tuple[str, int, int]], radius: int,
                       scan: Callable[[str, int, int, int], Iterable[tuple[int | None, int, int]]]) -> tuple[dict[int, int], int]:
    """The neighbours of document ``key`` as every ``PostingSource`` reads them, within a fixed budget.

    ``cites`` are the document's (session, lo, hi); the first ``SPREAD_CITES`` distinct ones in sorted order are
    used. ``scan(session, low, high, n)`` yields at most ``n`` (key, lo, hi) of that session with ``low <= lo <=
    high`` in descending (lo, hi, key) order — nearest to the cited turn first — with key None for a row the
    source's restriction leaves out, where it restricts while scanning (such a row still counts as read).
    ``SPREAD_ROWS`` rows are read in all. Returns ({neighbour: distance}, rows and scans read)."""
    best: dict[int, int] = {}
    left, work = SPREAD_ROWS, 0
    for session, r0, r1 in sorted(set(cites))[:SPREAD_CITES]:
        if left <= 0:
            break
        work += 1
        for other, lo, hi in scan(session, max(0, r0 - radius - SPREAD_SPAN), min(r1 + radius, MAX_SEQ), left):
            left -= 1
            work += 1
            dist = max(0, lo - r1, r0 - hi)
            if other is not None and other != key and dist <= radius and dist < best.get(other, radius + 1):
                best[other] = dist
    return best, work


def seq_range(seq: int | str) -> tuple[int, int] | None:
    """A citation's turn range: 12, "10-14", or a kernel message ref "m00012"; None for a block ref ("b3"), and for
    anything the index could not store (outside 0..MAX_SEQ, or a range that ends before it starts)."""
    if isinstance(seq, bool):
        return None
    if isinstance(seq, int):
        return (seq, seq) if 0 <= seq <= MAX_SEQ else None
    m = _SEQ_RE.fullmatch(str(seq)) if isinstance(seq, str) and len(seq) <= 100 else None
    if not m:
        return None
    lo = int(m[1])
    hi = int(m[2]) if m[2] else lo
    return (lo, hi) if lo <= hi <= MAX_SEQ else None


_SEQ_RE = compile_later(r"\s*m?([0-9]+)\s*(?:-\s*m?([0-9]+)\s*)?")
