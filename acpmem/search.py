"""Recall search: text analysis, corpus statistics and ranking — pure functions over documents.

Two engines live here.

* ``kernel_search`` — a faithful port of acp-kernel's ``searchBlocks`` (parity mode): the kernel tokenizer and
  suffix stemmer, BM25, fuzzy character bigrams, hybrid 0.7/0.3, role weights, previews. It exists to prove we
  start from the kernel's behaviour and to measure against it; recall does not use it.
* ``MemoryIndex`` — the default engine recall uses, in memory. It is the reference implementation of a split
  that a persistent index (SQLite, 100,000 entries) reuses piece by piece:

  1. **Analysis** (``analyze``, ``doc_fields``): text → tokens per field. Latin words are split on camelCase and
     hyphens, stop words dropped, irregular verbs lemmatised, Snowball-stemmed; CJK runs of documents are
     segmented with jieba (imported only when CJK appears) and also indexed as character bigrams in a low-weight
     ``gram`` field so a word the segmenter split differently still meets its query. A persistent index stores
     the output. Query text is segmented against the vocabulary and the dictionary (``query_cjk_words``).
  2. **Corpus statistics** (``CorpusStats``, ``Vocabulary``): N, per-field average lengths, df per term, and the
     term list. Typo tolerance, prefix matching and translation work from the ``Vocabulary`` alone, so no
     document is scanned to expand a query.
  3. **Scoring** (``plan_query``, ``score_query``, ``rank``): a query becomes groups of weighted terms (the
     word itself, aliases, typo and prefix neighbours, dictionary translations); each group contributes its best
     BM25F term per document, read from postings (fields title > tags > body > CJK bigrams); a source that can
     pick the best candidates itself (``index.IndexSource.candidates``) has only those scored here. ``rank`` then uses
     what entries carry, on a bounded pool of the best candidates: a share of a hit's score spreads to entries
     citing neighbouring turns of the same session; entries tagged with a word of the query (a person's name)
     and entries dated near a date the query names are boosted; an entry whose citations repeat those of an
     entry already chosen steps back. Anything that implements ``PostingSource`` can be ranked.

The weights below were set on the kernel corpus and LoCoMo (bench/search_*.py) as general rules, never per query.
"""
from __future__ import annotations

import bisect
import functools
import math
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from types import MappingProxyType

from acpmem import lexicon
from acpmem.model import Value

_NO_EXPLAIN = MappingProxyType({})

# ───────────────────────────── shared character classes ─────────────────────────────

CJK_CHARS = "\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
# JavaScript's \s and String.prototype.trim() whitespace, which differs from Python's str.isspace().
_JS_WS = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_WS_CHARS = "\t\n\v\f\r \u00a0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000\ufeff"


@functools.lru_cache(maxsize=1)
def _cjk_re() -> tuple[re.Pattern, re.Pattern]:
    # compiled on first use: the wide character class costs ~15 ms to compile, paid at import otherwise
    return re.compile(f"[{CJK_CHARS}]+"), re.compile(f"[{CJK_CHARS}]")


def has_cjk(text: str) -> bool:
    return not text.isascii() and _cjk_re()[1].search(text) is not None


def cjk_runs(text: str) -> list[str]:
    return _cjk_re()[0].findall(text)


@functools.lru_cache(maxsize=1)
def _jieba():
    import rjieba  # heavy-ish: loads its dictionary; only when CJK text appears
    return rjieba


# ═════════════════════════════ 1. parity mode: the kernel's searchBlocks ═════════════════════════════

_KERNEL_LATIN = re.compile(r"[a-z][a-z0-9_]*[a-z0-9]|[a-z0-9]")
ROLE_WEIGHTS = {"user": 1.5, "assistant": 1.0, "tool": 0.6, "block": 1.0}


def kernel_stem(word: str) -> str:
    """The kernel's suffix stemmer: each rule below runs in order on the result of the previous one."""
    w = word
    if len(w) <= 3:
        return w
    if w.endswith("ies"):
        w = w[:-3] + "y"
    elif w.endswith(("ses", "xes", "zes")) or w.endswith(("ches", "shes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    if w.endswith("ing") and len(w) > 5:
        w = w[:-3]
    if w.endswith("ed") and len(w) > 4:
        w = w[:-2]
    if w.endswith("ation") and len(w) > 6:
        w = w[:-3]
    elif w.endswith("tion") and len(w) > 5:
        w = w[:-4] + "t"
    elif w.endswith("ion") and len(w) > 4:
        w = w[:-3]
    if w.endswith("ment") and len(w) > 6:
        w = w[:-4]
    if w.endswith("ness") and len(w) > 6:
        w = w[:-4]
    if w.endswith("ly") and len(w) > 4:
        w = w[:-2]
    return w


def _kernel_cjk(run: str) -> list[str]:
    words = [w for w in _jieba().cut(run) if len(w) >= 2]
    if words:
        return words
    return [run[i:i + 2] for i in range(len(run) - 1)] + list(run)


def kernel_tokenize(text: str, stem: bool = True) -> list[str]:
    """The kernel tokenizer; Chinese segmentation by jieba instead of ICU (so CJK tokens may differ)."""
    lower = text.lower()
    out = [kernel_stem(w) if stem else w for w in _KERNEL_LATIN.findall(lower) if len(w) >= 2]
    for run in cjk_runs(lower):
        out.extend(_kernel_cjk(run))
    return out


def _char_bigrams(text: str) -> list[str]:
    return [text[i:i + 2] for i in range(len(text) - 1) if text[i:i + 2].strip(_JS_WS_CHARS) == text[i:i + 2]]


class KernelDoc(Value):
    """A kernel SearchDoc: ``text`` is what is scored (topic + " " + summary for a block)."""
    ref: str
    text: str
    kind: str = "block"
    role: str | None = None


class KernelResult(Value):
    ref: str
    score: float
    preview: str


def _kernel_bm25(docs: Sequence[KernelDoc], query: str, doc_tokens, query_tokens) -> list[float]:
    k1, b = 1.2, 0.75
    n = len(docs)
    parsed = []
    for d in docs:
        toks = doc_tokens[d.ref] if doc_tokens is not None else kernel_tokenize(d.text)
        tf: dict[str, int] = {}
        for t in toks:
            tf[t] = tf.get(t, 0) + 1
        parsed.append((tf, sum(tf.values())))
    avgdl = sum(p[1] for p in parsed) / (n or 1)
    q_terms = list(query_tokens) if query_tokens is not None else kernel_tokenize(query)
    if not q_terms:
        return [0.0] * n
    idf = {}
    for t in dict.fromkeys(q_terms):
        df = sum(1 for tf, _ in parsed if t in tf)
        idf[t] = math.log(1 + (n - df + 0.5) / (df + 0.5))
    scores = []
    for tf, ln in parsed:
        s = 0.0
        for t in q_terms:  # not de-duplicated, as in the kernel
            f = tf.get(t, 0)
            if f:
                s += (idf[t] * (f * (k1 + 1))) / (f + k1 * (1 - b + (b * ln) / (avgdl or 1)))
        scores.append(s)
    return scores


def _kernel_fuzzy(docs: Sequence[KernelDoc], query: str) -> list[float]:
    q_tokens = [t for t in re.split(f"[{_JS_WS},]+", query.lower())
                if len(t) >= 4 or (len(t) >= 2 and has_cjk(t))]
    q_grams = list(dict.fromkeys(g for t in q_tokens for g in _char_bigrams(t)))
    if not q_grams:
        return [0.0] * len(docs)
    out = []
    for d in docs:
        grams = set(_char_bigrams(d.text.lower()))
        out.append(sum(1 for g in q_grams if g in grams) / len(q_grams))
    return out


def kernel_preview(text: str, query: str, length: int = 200) -> str:
    """Window of ``length`` chars around the first query word found in ``text``, "…" where cut."""
    if not text:
        return ""
    terms = [t for t in re.split(f"[{_JS_WS}]+", query.lower().strip(_JS_WS_CHARS)) if len(t) > 1]
    if not terms:
        return text[:length]
    lower = text.lower()
    hit = next((i for i in (lower.find(t) for t in terms) if i >= 0), -1)
    if hit < 0:
        return text[:length]
    half = max(0, length // 2 - 10)
    start = max(0, hit - half)
    end = min(len(text), start + length)
    return ("…" if start > 0 else "") + text[start:end].strip(_JS_WS_CHARS) + ("…" if end < len(text) else "")


def kernel_search(docs: Sequence[KernelDoc], query: str, algorithm: str = "hybrid", limit: int = 10,
                  doc_tokens: Mapping[str, Sequence[str]] | None = None,
                  query_tokens: Sequence[str] | None = None, preview_length: int = 200,
                  min_score: float = 0.01, role_weights: Mapping[str, float] | None = None) -> list[KernelResult]:
    """acp-kernel's searchBlocks over ``docs``. ``doc_tokens`` (ref → tokens) and ``query_tokens`` replace our
    tokenizer's output with the kernel's own, which is how parity with its ICU segmentation is checked."""
    from acpmem.errors import UsageError
    if algorithm not in ("hybrid", "bm25", "fuzzy"):
        raise UsageError(f"Unknown search algorithm '{algorithm}'", "use hybrid, bm25 or fuzzy")
    if not docs:
        return []
    if algorithm == "bm25":
        scores = _kernel_bm25(docs, query, doc_tokens, query_tokens)
    elif algorithm == "fuzzy":
        scores = _kernel_fuzzy(docs, query)
    else:
        bm = _kernel_bm25(docs, query, doc_tokens, query_tokens)
        fz = _kernel_fuzzy(docs, query)
        max_bm, max_fz = max(max(bm), 1e-9), max(max(fz), 1e-9)
        scores = [0.7 * (x / max_bm) + 0.3 * (y / max_fz) for x, y in zip(bm, fz)]
    rw = {**ROLE_WEIGHTS, **(role_weights or {})}
    results = []
    for d, s in zip(docs, scores):
        w = rw["block"] if d.kind != "message" else rw.get(d.role or "tool", rw["tool"])
        if s * w >= min_score:
            results.append(KernelResult(d.ref, s * w, kernel_preview(d.text, query, preview_length)))
    results.sort(key=lambda r: -r.score)  # stable, like Array.prototype.sort
    return results[:limit]


# ═════════════════════════════ 2. the default engine ═════════════════════════════

# Bumped whenever analysis output changes, so a persistent index knows its stored terms are stale.
ANALYSIS_VERSION = "2"
FIELDS = ("title", "body", "tags", "gram")
FIELD_WEIGHTS = (2.0, 1.0, 1.5, 0.3)
K1, B = 1.2, 0.75

# Words of any alphabetic script (Latin, accented, Cyrillic, Greek…); CJK runs are blanked out first.
_WORD_RUN = re.compile(r"[^\W_]+(?:[-_'][^\W_]+)*")
_COMPOUND = re.compile(r"[-_]")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


@functools.lru_cache(maxsize=1)
def _stemmer():
    import snowballstemmer
    return snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=200_000)
def normalize_word(word: str) -> str | None:
    """One lowercase Latin word → its index term (lemma, then Snowball stem), or None for a stop word."""
    if word.isdigit():
        return word
    if len(word) < 2 or word in lexicon.STOP_WORDS:
        return None
    word = lexicon.IRREGULAR.get(word, word)
    if any(c.isdigit() for c in word) or not word.isascii():
        return word  # i18n, k8s, sha256 are codes; non-English words are kept whole (accents already folded)
    return _stemmer().stemWord(word)


def latin_words(text: str) -> list[str]:
    """Lowercase words outside CJK runs: camelCase and hyphen/underscore compounds give their parts and the
    joined whole; accents are folded ("café" → "cafe")."""
    out: list[str] = []
    if not text.isascii():
        if has_cjk(text):
            text = _cjk_re()[0].sub(" ", text)
        text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    for run in _WORD_RUN.findall(text):
        if run.isascii() and run.isalnum() and (run.islower() or run[1:].islower()):
            out.append(run.lower())   # most words: no compound, no camelCase, nothing to split
            continue
        run = run.replace("'", " ").split()[0] if "'" in run else run  # possessive / contraction tail dropped
        parts = [p for seg in _COMPOUND.split(run) for p in _CAMEL.sub(" ", seg).split()]
        lowered = [p.casefold() for p in parts]
        out.extend(lowered)
        if len(lowered) > 1:
            out.append("".join(lowered))
    return out


def cjk_words(run: str) -> list[str]:
    """Words of one CJK run of a document, by jieba's search mode (a long word also yields its sub-words); a run
    with no word of 2+ chars gives bigrams + characters. Queries are split by ``query_cjk_words`` instead."""
    words = [w for w in _jieba().cut_for_search(run) if len(w) >= 2]
    if words:
        return words
    return [run[i:i + 2] for i in range(len(run) - 1)] + list(run)


MAX_CJK_WORD = 8
DICT_ONLY_WORD = 0.6


def query_cjk_words(run: str, vocab: "Vocabulary") -> list[str]:
    """Words of one CJK run of a query, segmented against what the vocabulary knows (its index terms and the
    dictionary's headwords) instead of by jieba: loading jieba costs ~0.2 s, more than a whole recall may take,
    and a query word only matters if the index or the dictionary knows it. The split maximises the sum of squared
    word lengths, a word the index does not hold counting less: a long word beats the pieces inside it (序列化,
    not 序列 + 化用), two words beat a word straddling them (试验 + 证明, never 验证; 所有 + 权限, not 所有权).
    A run with no known word gives bigrams + characters, as in documents."""
    n = len(run)
    subs = {run[i:j] for i in range(n) for j in range(i + 2, min(n, i + MAX_CJK_WORD) + 1)}
    indexed, listed = vocab.known_cjk(subs) if subs else (set(), set())
    # best split of run[:i]: (score, characters covered, words); a word scores its squared length, a word only
    # the dictionary knows (useful for its translation, matching nothing itself) a fraction of that
    best: list[tuple[float, int, tuple[str, ...]]] = [(0.0, 0, ())] * (n + 1)
    for i in range(1, n + 1):
        top = best[i - 1]
        for j in range(max(0, i - MAX_CJK_WORD), i - 1):
            w = run[j:i]
            weight = 1.0 if w in indexed else DICT_ONLY_WORD if w in listed else 0.0
            if weight:
                score, covered, words = best[j]
                cand = (score + weight * len(w) ** 2, covered + len(w), words + (w,))
                if cand[:2] > top[:2]:
                    top = cand
        best[i] = top
    if best[n][2]:
        return list(best[n][2])
    return [run[i:i + 2] for i in range(n - 1)] + list(run)


def cjk_grams(text: str) -> list[str]:
    out: list[str] = []
    for run in cjk_runs(text):
        out.extend(run[i:i + 2] for i in range(len(run) - 1)) if len(run) > 1 else out.append(run)
    return out


def analyze(text: str) -> list[str]:
    """Text → index terms, in order (Latin terms first, then CJK words)."""
    terms = [t for t in (normalize_word(w) for w in latin_words(text)) if t]
    if has_cjk(text):
        for run in cjk_runs(text):
            terms.extend(cjk_words(run))
    return terms


class SearchDoc(Value):
    """What the engine ranks. ``citations`` are (session, seq) where seq is an int, an "a-b" range or a kernel
    ref; ``created`` an ISO date/time or None; ``weight`` multiplies the final score (1.0 = neutral)."""
    id: str
    title: str
    body: str = ""
    type: str = ""
    tags: tuple[str, ...] = ()
    citations: tuple[tuple[str, int | str], ...] = ()
    created: str | None = None
    weight: float = 1.0


class Hit(Value):
    id: str
    score: float
    preview: str
    explain: Mapping = _NO_EXPLAIN       # why it scored (left out of comparison)
    _hidden = ("explain",)


def doc_fields(doc: SearchDoc) -> tuple[list[str], ...]:
    """A document's terms per field, in FIELDS order."""
    tags_text = " ".join((doc.type, *doc.tags))
    return (analyze(doc.title), analyze(doc.body), analyze(tags_text),
            cjk_grams(doc.title + " " + doc.body) if has_cjk(doc.title + doc.body) else [])


# ───────────────────────────── 2. corpus statistics ─────────────────────────────

class CorpusStats(Value):
    n_docs: int
    avg_len: tuple[float, ...]  # per field, FIELDS order


class Vocabulary:
    """The term list of an index: exact lookup, prefix ranges and typo neighbours, without touching documents."""

    def __init__(self, terms: Iterable[str]) -> None:
        self._sorted = sorted(set(terms))
        self._set = frozenset(self._sorted)
        self._latin = [t for t in self._sorted if t.isalpha() and not has_cjk(t[:1])]
        self.has_cjk = any(has_cjk(t[:1]) for t in self._sorted)
        self.has_latin = bool(self._latin)

    def __contains__(self, term: str) -> bool:
        return term in self._set

    # Translations go through the vocabulary so a persistent index can answer them from disk, word by word.
    def en_to_zh(self, word: str) -> tuple[str, ...]:
        return lexicon.en_to_zh(word)

    def zh_to_en(self, word: str) -> tuple[str, ...]:
        return lexicon.zh_to_en(word)

    def known_cjk(self, words: Iterable[str]) -> tuple[set[str], set[str]]:
        """(those of ``words`` that are index terms, those that are dictionary headwords), for query segmentation."""
        words = set(words)
        return words & self._set, {w for w in words if lexicon.zh_to_en(w)}

    def __len__(self) -> int:
        return len(self._sorted)

    def with_prefix(self, prefix: str, limit: int = 50) -> list[str]:
        i = bisect.bisect_left(self._sorted, prefix)
        out = []
        while i < len(self._sorted) and self._sorted[i].startswith(prefix) and len(out) < limit:
            out.append(self._sorted[i])
            i += 1
        return out

    def typo_neighbours(self, term: str, max_dist: int, limit: int = 5) -> list[tuple[str, int]]:
        return typo_neighbours(term, self._latin, max_dist, limit)


def typo_neighbours(term: str, alphabetic_terms: Sequence[str], max_dist: int, limit: int = 5) -> list[tuple[str, int]]:
    """The nearest of ``alphabetic_terms`` (sorted) to ``term`` by edit distance (optimal string alignment: an
    adjacent swap is one edit, the commonest typo after a wrong letter), at most ``max_dist`` away."""
    from rapidfuzz import process
    from rapidfuzz.distance import OSA
    found = process.extract(term, alphabetic_terms, scorer=OSA.distance, score_cutoff=max_dist, limit=limit)
    return [(t, int(d)) for t, d, _ in found if t != term]


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
    def neighbours(self, key: int, radius: int) -> Iterable[tuple[int, int]]: ...  # (doc key, distance)


# ───────────────────────────── 3. scoring ─────────────────────────────

W_EXACT, W_ALIAS, W_DICT, W_PREFIX, W_CLIPPED, W_TYPO1, W_TYPO2 = 1.0, 0.7, 0.6, 0.55, 0.35, 0.6, 0.45
SPREAD, SPREAD_RADIUS, SPREAD_TOP = 0.15, 2, 50
DATE_BOOST = 1.0
TAG_BOOST = 0.5
POOL = 300
DUPLICATE = 0.6
FILLER_WEIGHT = 0.3


class QueryTerm(Value):
    term: str
    weight: float
    via: str


class QueryGroup(Value):
    """One query word and the index terms that may stand for it; a document scores its best one."""
    word: str
    terms: tuple[QueryTerm, ...]


@functools.lru_cache(maxsize=1)
def _alias_maps() -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """(index term → alias index terms, index term → alias surface words for dictionary look-ups)."""
    terms_of: dict[str, set[str]] = defaultdict(set)
    words_of: dict[str, set[str]] = defaultdict(set)
    for group in lexicon.ALIAS_GROUPS:
        words = {w.replace("-", "") for w in group}
        terms = {normalize_word(w) or w for w in words}
        for t in terms:
            terms_of[t] |= terms - {t}
            words_of[t] |= words
    return ({k: frozenset(v) for k, v in terms_of.items()}, {k: frozenset(v) for k, v in words_of.items()})


def _english_forms(word: str) -> list[str]:
    forms = [word, lexicon.IRREGULAR.get(word, word)]
    for suffix, repl in (("ies", "y"), ("es", ""), ("s", ""), ("ing", ""), ("ing", "e"), ("ed", ""), ("ed", "e")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            forms.append(word[: len(word) - len(suffix)] + repl)
    return list(dict.fromkeys(forms))


def plan_query(query: str, vocab: Vocabulary) -> list[QueryGroup]:
    """Query text → groups of weighted index terms, from the vocabulary alone."""
    groups: list[QueryGroup] = []
    seen: set[str] = set()

    def add(word: str, term: str, cands: list[QueryTerm]) -> None:
        best: dict[str, QueryTerm] = {}
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
        cands = [QueryTerm(term, FILLER_WEIGHT if word in lexicon.QUERY_FILLER else W_EXACT, "exact")]
        aliases, alias_words = _alias_maps()
        cands += [QueryTerm(a, W_ALIAS, "alias") for a in aliases.get(term, ())]
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
            for form in sorted(alias_words.get(term, set()) - set(forms)):
                cands += [QueryTerm(z, W_DICT * W_ALIAS, "alias+dict") for z in vocab.en_to_zh(form)]
        add(word, term, cands)

    if has_cjk(query):
        for run in cjk_runs(query):
            for w in query_cjk_words(run, vocab):
                if w in seen:
                    continue
                seen.add(w)
                cands = [QueryTerm(w, W_EXACT, "exact")]
                if vocab.has_latin:
                    for en in vocab.zh_to_en(w):
                        t = normalize_word(en)
                        if t:
                            cands.append(QueryTerm(t, W_DICT, "dict"))
                add(w, w, cands)
    return groups


def _bm25f(tfs: Sequence[int], lens: Sequence[int], stats: CorpusStats) -> float:
    tfw = 0.0
    for tf, ln, avg, w in zip(tfs, lens, stats.avg_len, FIELD_WEIGHTS):
        if tf:
            tfw += w * tf / (1 - B + B * ln / (avg or 1))
    return tfw * (K1 + 1) / (K1 + tfw)


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
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            found = src.postings(qt.term) if only is None else src.postings(qt.term, only)
            for key, tfs in found:
                s = qt.weight * idf * _bm25f(tfs, src.doc_len(key), src.stats)
                if key not in best or s > best[key][0]:
                    best[key] = (s, qt)
        for key, (s, qt) in best.items():
            totals[key] += s
            why[key][g.word] = {"term": qt.term, "via": qt.via, "score": round(s, 4)}
    return dict(totals), dict(why)


_MONTHS = {m: i for i, m in enumerate(
    "january february march april may june july august september october november december".split(), 1)}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_DATE_PATTERNS = (
    re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"),
    re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+([A-Za-z]+),?\s+(\d{4})\b"),
    re.compile(r"\b([A-Za-z]+)\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b"),
    re.compile(r"\b([A-Za-z]+),?\s+(\d{4})\b"),
)


def query_dates(query: str) -> list[tuple[date, int]]:
    """Dates a query names, each with a tolerance in days (a day ±3, a month ±16)."""
    out: list[tuple[date, int]] = []
    for m in _DATE_PATTERNS[0].finditer(query):
        try:
            out.append((date(int(m[1]), int(m[2]), int(m[3])), 3))
        except ValueError:
            pass
    for pat, order in ((_DATE_PATTERNS[1], "dmy"), (_DATE_PATTERNS[2], "mdy")):
        for m in pat.finditer(query):
            d, mon, y = (m[1], m[2], m[3]) if order == "dmy" else (m[2], m[1], m[3])
            month = _MONTHS.get(mon.lower())
            if month:
                try:
                    out.append((date(int(y), month, int(d)), 3))
                except ValueError:
                    pass
    if not out:
        for m in _DATE_PATTERNS[3].finditer(query):
            month = _MONTHS.get(m[1].lower())
            if month and len(m[1]) >= 3:
                out.append((date(int(m[2]), month, 15), 16))
    return out


def _parse_created(created: str | None) -> date | None:
    if not created:
        return None
    try:
        return datetime.fromisoformat(created.replace("Z", "+00:00")).date()
    except ValueError:
        return None


def make_preview(doc: SearchDoc, words: Sequence[str], length: int = 200) -> str:
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
    chosen competes with its score times DUPLICATE (near-duplicate memories of one moment crowd out others)."""
    ranked = sorted(final, key=lambda k: (-final[k], k))
    if not DUPLICATE or DUPLICATE >= 1:
        return ranked[:limit]
    pending = ranked[: limit * 4]
    cites = {k: frozenset(src.doc(k).citations) for k in pending}
    chosen: list[int] = []
    covered: set = set()
    while pending and len(chosen) < limit:
        # pending is in score order, so the first maximum wins ties as in a stable sort
        best = max(pending, key=lambda k: final[k] * (DUPLICATE if cites[k] and cites[k] <= covered else 1.0))
        pending.remove(best)
        chosen.append(best)
        covered |= cites[best]
    return chosen


def rank(src: PostingSource, query: str, limit: int = 5, spread: bool = True, dates: bool = True,
         preview_length: int = 200, groups: Sequence[QueryGroup] | None = None) -> list[Hit]:
    """Rank the documents of ``src`` for ``query``: term scores, then spreading and the tag and date boosts.

    Only the best ``POOL`` documents by term score (and those they spread to) are re-scored, so the cost of
    this step does not grow with the index."""
    if groups is None:
        groups = plan_query(query, src.vocabulary)
    # A source that can rank inside its store names the pool; only those documents become Python objects here.
    pick = getattr(src, "candidates", None)
    pool = pick(groups, max(POOL, limit)) if pick is not None else None
    scores, why = score_query(groups, src, pool)
    if not scores:
        return []
    by_score = sorted(scores, key=lambda k: (-scores[k], k))
    final = {k: scores[k] for k in by_score[:max(POOL, limit)]}
    extra: dict[int, dict] = defaultdict(dict)
    if spread and SPREAD:
        gains: dict[int, float] = defaultdict(float)
        for key in by_score[:SPREAD_TOP]:
            for other, dist in src.neighbours(key, SPREAD_RADIUS):
                gains[other] += SPREAD * scores[key] / (1 + dist)
        outside = [k for k in gains if k not in scores]
        if pool is not None and outside:     # a neighbour below the pool keeps its own term score
            more, more_why = score_query(groups, src, outside)
            scores.update(more)
            why.update(more_why)
        for other, gain in gains.items():
            final[other] = final.get(other, scores.get(other, 0.0)) + gain
            extra[other]["spread"] = round(gain, 4)
    named = query_dates(query) if dates else []
    exact = {g.terms[0].term for g in groups if g.terms[0].via == "exact"}
    preload = getattr(src, "preload", None)
    if preload is not None:
        preload(final)
    for key in final:
        doc = src.doc(key)
        factor = doc.weight
        if TAG_BOOST and doc.tags and exact & _tag_terms(doc.tags):
            factor *= 1 + TAG_BOOST
            extra[key]["tag"] = True
        if named:
            created = _parse_created(doc.created)
            if created:
                near = max((max(0.0, 1 - abs((created - d).days) / tol) for d, tol in named), default=0.0)
                if near > 0:
                    factor *= 1 + DATE_BOOST * near
                    extra[key]["date"] = round(near, 3)
        final[key] *= factor
    order = _diversify(src, final, limit)
    words = [g.word for g in groups]
    return [Hit(src.doc(k).id, round(final[k], 6), make_preview(src.doc(k), words, preview_length),
                {"terms": why.get(k, {}), **extra.get(k, {})}) for k in order]


def _seq_range(seq: int | str) -> tuple[int, int] | None:
    """A citation's turn range: 12, "10-14", or a kernel message ref "m00012"; None for a block ref ("b3")."""
    if isinstance(seq, int):
        return (seq, seq)
    m = re.fullmatch(r"\s*m?(\d+)\s*(?:-\s*m?(\d+)\s*)?", str(seq))
    if not m:
        return None
    lo = int(m[1])
    return (lo, int(m[2]) if m[2] else lo)


class MemoryIndex:
    """The in-memory reference index: analysis at build time, postings in dicts, ``rank`` for search."""

    def __init__(self, docs: Iterable[SearchDoc]) -> None:
        self._docs = list(docs)
        self._postings: dict[str, list[tuple[int, tuple[int, ...]]]] = defaultdict(list)
        self._lens: list[tuple[int, ...]] = []
        totals = [0] * len(FIELDS)
        for key, doc in enumerate(self._docs):
            per_field = doc_fields(doc)
            lens = tuple(len(f) for f in per_field)
            self._lens.append(lens)
            totals = [a + b for a, b in zip(totals, lens)]
            counts: dict[str, list[int]] = {}
            for i, terms in enumerate(per_field):
                for t in terms:
                    counts.setdefault(t, [0] * len(FIELDS))[i] += 1
            for t, c in counts.items():
                self._postings[t].append((key, tuple(c)))
        n = len(self._docs)
        self.stats = CorpusStats(n, tuple(t / (n or 1) for t in totals))
        self.vocabulary = Vocabulary(self._postings)
        # session → sorted (lo, hi, key) for spreading to neighbouring turns
        self._by_session: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        for key, doc in enumerate(self._docs):
            for session, seq in doc.citations:
                r = _seq_range(seq)
                if r:
                    self._by_session[str(session)].append((r[0], r[1], key))
        for v in self._by_session.values():
            v.sort()

    def __len__(self) -> int:
        return len(self._docs)

    def df(self, term: str) -> int:
        return len(self._postings.get(term, ()))

    def postings(self, term: str, keys: Iterable[int] | None = None) -> Iterable[tuple[int, tuple[int, ...]]]:
        found = self._postings.get(term, ())
        if keys is None:
            return found
        keys = set(keys)
        return [p for p in found if p[0] in keys]

    def doc_len(self, key: int) -> tuple[int, ...]:
        return self._lens[key]

    def doc(self, key: int) -> SearchDoc:
        return self._docs[key]

    def neighbours(self, key: int, radius: int) -> Iterable[tuple[int, int]]:
        best: dict[int, int] = {}
        for session, seq in self._docs[key].citations:
            r = _seq_range(seq)
            if not r:
                continue
            cited = self._by_session.get(str(session), [])
            i = bisect.bisect_left(cited, (r[0] - radius - 10_000,))
            for lo, hi, other in cited[i:]:
                if lo > r[1] + radius:
                    break
                dist = max(0, lo - r[1], r[0] - hi)
                if other != key and dist <= radius and dist < best.get(other, radius + 1):
                    best[other] = dist
        return best.items()

    def search(self, query: str, limit: int = 5, spread: bool = True, dates: bool = True,
               preview_length: int = 200) -> list[Hit]:
        return rank(self, query, limit=limit, spread=spread, dates=dates, preview_length=preview_length)
