"""Text analysis: text → index terms per field, the same way for documents and queries.

Latin words are split on camelCase and hyphens, stop words dropped, irregular verbs lemmatised, Snowball-stemmed;
CJK runs of documents are segmented with jieba (imported only when CJK appears) and also indexed as character
bigrams in a low-weight ``gram`` field, so a word the segmenter split differently still meets its query. Query text
in CJK is segmented against what the index and the dictionary know (``query_cjk_words``), so a recall never waits
for jieba to load. A persistent index stores the output (``ANALYSIS_VERSION`` says when it is stale).
"""
from __future__ import annotations

import functools
import re
import unicodedata

from acpmem.core.entry import evidence_of
from acpmem.core.values import Value
from acpmem.search import english

CJK_CHARS = "\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"


@functools.lru_cache(maxsize=1)
def _cjk_re() -> tuple[re.Pattern, re.Pattern]:
    # compiled on first use: the wide character class costs ~15 ms to compile, paid at import otherwise
    return re.compile(f"[{CJK_CHARS}]+"), re.compile(f"[{CJK_CHARS}]")


def has_cjk(text: str) -> bool:
    return not text.isascii() and _cjk_re()[1].search(text) is not None


def cjk_runs(text: str) -> list[str]:
    return _cjk_re()[0].findall(text)


@functools.lru_cache(maxsize=1)
def segmenter():
    """rjieba, loaded on first use."""
    import rjieba  # heavy-ish: loads its dictionary; only when CJK text appears
    return rjieba



# Bumped whenever analysis output changes, so a persistent index knows its stored terms are stale.
ANALYSIS_VERSION = "2"
FIELDS = ("title", "body", "tags", "gram")
FIELD_WEIGHTS = (2.0, 1.0, 1.5, 0.3)

# Words of any alphabetic script (Latin, accented, Cyrillic, Greek…); CJK runs are blanked out first.
_WORD_RUN = re.compile(r"[^\W_]+(?:[-_'][^\W_]+)*")
_COMPOUND = re.compile(r"[-_]")
_NEGATED = {"won": "will", "shan": "shall"}   # the heads of "won't" and "shan't" are not words of their own
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


@functools.lru_cache(maxsize=1)
def stemmer():
    """The Snowball English stemmer (PyStemmer's C implementation when installed)."""
    # lazy: snowballstemmer is heavy, never imported at start-up
    import snowballstemmer
    return snowballstemmer.stemmer("english")


def prepare(segment: bool = True) -> None:
    """Build what analysis builds on first use (the CJK patterns, the segmenter unless ``segment`` is false, the
    stemmer): for a process that forks readers (``acpmem.cli.readserver``)."""
    _cjk_re()
    if segment:
        segmenter()
    stemmer()


def segmenter_loaded() -> bool:
    """Whether this process has loaded the segmenter (jieba and its dictionary)."""
    return segmenter.cache_info().currsize > 0


@functools.lru_cache(maxsize=200_000)
def normalize_word(word: str) -> str | None:
    """One lowercase Latin word → its index term (lemma, then Snowball stem), or None for a stop word."""
    if word.isdigit():
        return word
    if len(word) < 2 or word in english.STOP_WORDS:
        return None
    word = english.IRREGULAR.get(word, word)
    if any(c.isdigit() for c in word) or not word.isascii():
        return word  # i18n, k8s, sha256 are codes; non-English words are kept whole (accents already folded)
    return stemmer().stemWord(word)


def latin_words(text: str) -> list[str]:
    """Lowercase words outside CJK runs: camelCase and hyphen/underscore compounds give their parts and the
    joined whole; accents are folded ("café" → "cafe")."""
    out: list[str] = []
    if not text.isascii():
        if has_cjk(text):
            text = _cjk_re()[0].sub(" ", text)
        text = "".join(c for c in unicodedata.normalize("NFKD", text.replace("\u2019", "'"))
                       if not unicodedata.combining(c))   # a typographic apostrophe is an apostrophe
    for run in _WORD_RUN.findall(text):
        if run.isascii() and run.isalnum() and (run.islower() or run[1:].islower()):
            out.append(run.lower())   # most words: no compound, no camelCase, nothing to split
            continue
        if "'" in run:   # possessive / contraction tail dropped; "won't" is "will not", never the past of "win"
            head = run.split("'", 1)[0]
            run = _NEGATED.get(head.casefold(), head) if run.casefold().endswith("n't") else head
        parts = [p for seg in _COMPOUND.split(run) for p in _CAMEL.sub(" ", seg).split()]
        lowered = [p.casefold() for p in parts]
        out.extend(lowered)
        if len(lowered) > 1:
            out.append("".join(lowered))
    return out


def cjk_words(run: str) -> list[str]:
    """Words of one CJK run of a document, by jieba's search mode (a long word also yields its sub-words); a run
    with no word of 2+ chars gives bigrams + characters. Queries are split by ``query_cjk_words`` instead."""
    words = [w for w in segmenter().cut_for_search(run) if len(w) >= 2]
    if words:
        return words
    return [run[i:i + 2] for i in range(len(run) - 1)] + list(run)


MAX_CJK_WORD = 8
DICT_ONLY_WORD = 0.6


def query_cjk_words(run: str, vocab) -> list[str]:
    """Words of one CJK run of a query, segmented against what the vocabulary (``known_cjk``) knows (its index terms and the
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


def indexed_body(d: dict) -> str:
    """The text indexed as an entry's body, given as its catalog JSON: the body, then its ``evidence`` quotes (the
    words of the turns it cites), so a terse entry is still found by the words it rests on."""
    body = d.get("body") or ""
    quotes = evidence_of(d)
    return body + "\n" + "\n".join(quotes) if quotes else body


def doc_fields(doc: SearchDoc) -> tuple[list[str], ...]:
    """A document's terms per field, in FIELDS order."""
    tags_text = " ".join((doc.type, *doc.tags))
    return (analyze(doc.title), analyze(doc.body), analyze(tags_text),
            cjk_grams(doc.title + " " + doc.body) if has_cjk(doc.title + doc.body) else [])
