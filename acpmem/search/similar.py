"""Duplicates and contradictions by meaning, from the words: the lexical channel of ``consolidate`` and of the
fork's check before it writes (``docs/duplicates.md``).

Each text becomes ``Features``: its terms (the index's analysis — lemmas and Snowball stems — with abbreviations
folded onto their words: "repo" meets "repository", "deps" meets "dependencies"), its **key terms** (words no
English word list knows: tool and product names, codes — "pnpm", "npm", "uv"), its numbers, and its **segments**:
the clauses, split again where a negation starts ("never npm", "instead of npm", "rather than npm"), each affirmed
or negated ("npm lockfiles rejected" is negated too). The negation words themselves are not terms, so "never npm"
and "instead of npm" say the same about npm.

Two texts are scored by ``score``: the mean of the IDF-weighted Jaccard similarity of their terms and their
weighted overlap (the share of the smaller text's weight the other has: a short entry said again inside a longer
one), raised — when they share two key terms or more and most of their key terms — to the mean of their key-term
Jaccard and that overlap: short entries that name the same tools in other words.
``differs`` says why two similar texts disagree: different numbers or versions, or a segment one affirms and the
other negates about the same things ("Deploys happen on Fridays" / "Production deploys never happen on Fridays").

``clusters`` runs the channel over the index's live entries: candidates are pairs sharing a rare term (held by few
documents), so the work grows with the pairs that could match, not with the square of the vault. Pairs
(``Pair``) from any channel — this one, the vectors, a model's verdicts — are joined by ``join`` (union-find); a
cluster with a contradiction is a contradiction cluster. The thresholds were set on the planted sets of
``tests/test_consolidate.py`` and ``tests/fixtures/duplicates/planted.json`` (``bench/duplicates.py``).
"""
from __future__ import annotations

import functools
import json
import math
import re
import sqlite3
from collections import defaultdict
from collections.abc import Callable, Iterable

from acpmem.core.boilerplate import without_boilerplate
from acpmem.core.values import Value
from acpmem.search import cedict, english
from acpmem.search.analysis import analyze, has_cjk, normalize_word

DUPLICATE_THRESHOLD = 0.45
CONTRADICTION_THRESHOLD = 0.35
KEY_TERMS_MIN = 2          # shared key terms before the key-term rule applies
KEY_JACCARD_MIN = 0.5      # … and the share of both texts' key terms they are
# A key term held by this share of the entries (and by KEY_COMMON_MIN of them at least) is what the vault is about —
# the two people of a conversation, the project's own name — not a sign that two entries say the same thing: it does
# not count for the key-term rule (two facts about "Caroline and Melanie" shared both names and nothing else, and the
# fork dropped the second as a restatement).
KEY_COMMON_SHARE, KEY_COMMON_MIN = 0.3, 4
MAX_CLUSTER = 12           # a bigger group is a topic, not a duplicate: it is split by its strongest pairs only
SEGMENT_SHARED_MIN = 2     # terms two segments share before their polarity is compared
SEGMENT_SHARE_MIN = 0.6    # … and the share of the smaller segment they are
_NUMBER = re.compile(r"(?<![A-Za-z])v?\d+(?:[.:]\d+)*")
_NEGATION = re.compile(r"\b(?:not|never|no longer|don't|doesn't|isn't|aren't|won't|cannot|can't|without|avoid|"
                       r"stop|stopped|disable|disabled|no)\b|不|没|别|禁止")
# where a negated segment starts; "instead of" / "rather than" name what is not done
_PRE_NEGATION = re.compile(r"\b(?:not|never|no|nor|without|avoid(?:s|ed)?|instead of|rather than|stop(?:s|ped)?|"
                           r"disabled?|cannot|(?:do|does|did|is|are|was|were|wo|ca|should|must|has|have)n['’]t)\b")
# a segment with one of these says its subject is not done or not allowed
_POST_NEGATION = frozenset("rejected refused banned forbidden disallowed prohibited deprecated unsupported "
                           "dropped removed".split())
_NEGATION_TERMS = frozenset("not never no nor without avoid instead rather than stop disabl disable cannot "
                            "reject refus ban forbidden forbid disallow prohibit deprec unsupport drop remov".split())
_JOINED = re.compile(r"(?<=[a-z0-9])[-_](?=[a-z0-9])")
_CLAUSE = re.compile(r"[,;:()\[\]!?\n]+|\.(?=\s|$)|\s[-–—]\s")
# Abbreviations and the words they stand for: the same thing, written either way (never broader groups, which
# would join distinct facts).
_ABBREVIATIONS = """repo repository|repos repositories|config configuration|cfg configuration|deps dependencies|
dep dependency|env environment|envs environments|db database|dbs databases|dir directory|dirs directories|
docs documentation|doc documentation|auth authentication|k8s kubernetes|js javascript|ts typescript|py python|
msg message|pkg package|pkgs packages|prod production|dev development|impl implementation|
perf performance|tz timezone|info information|app application|apps applications"""


class Cluster(Value):
    """Entries to merge: their ids (oldest path first), the kind, the strongest pair's similarity and why."""

    kind: str
    ids: tuple[str, ...]
    paths: tuple[str, ...]
    similarity: float
    why: str

    def to_json(self) -> dict:
        return {"kind": self.kind, "ids": list(self.ids), "paths": list(self.paths),
                "similarity": round(self.similarity, 3), "why": self.why}


class Features(Value):
    """What the lexical channel reads of one text (``features``)."""

    terms: frozenset[str]
    keys: frozenset[str]
    numbers: frozenset[str]
    negated: bool
    segments: tuple[tuple[bool, frozenset[str]], ...]   # (negated, terms) per clause part
    cjk: bool = False


class Pair(Value):
    """Two entries (index keys) a channel found: ``kind`` duplicate or contradiction, the similarity, why, and the
    channel (``lexical``, ``embedding``, ``model``)."""

    a: int
    b: int
    similarity: float
    kind: str
    why: str
    channel: str = "lexical"


@functools.lru_cache(maxsize=1)
def _abbreviations() -> dict[str, str]:
    out = {}
    for group in _ABBREVIATIONS.replace("\n", "").split("|"):
        short, long = group.split()
        s, lg = normalize_word(short), normalize_word(long)
        if s and lg and s != lg:
            out[s] = lg
    return out


def prepare() -> None:
    """Build the abbreviation table this module builds on first use (``acpmem.search.ranking.prepare``)."""
    _abbreviations()


def _terms(text: str) -> list[str]:
    ab = _abbreviations()
    return [ab.get(t, t) for t in analyze(text) if t not in _NEGATION_TERMS]


_WORD_RUN = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:['’.+#-][A-Za-z0-9]+)*")
# short words the dictionary has no headword for, which are no names
_COMMON = frozenset("per id ids via vs etc ok two three four five six seven eight nine ten".split())


@functools.lru_cache(maxsize=50_000)
def _is_key(word: str) -> bool:
    """A word no English list knows (a tool, product or code name), not a number."""
    if len(word) < 2 or word in _COMMON or word in english.STOP_WORDS or _NUMBER.fullmatch(word):
        return False
    return not english.known_word(word, cedict.store().en_to_zh)


def features(text: str, *, segments: bool = True) -> Features:
    """The features of a text; ``segments=False`` leaves the segments out (the costlier part, needed only to
    compare two texts that are a candidate pair: ``Corpus.full``)."""
    text = without_boilerplate(text)
    lowered = text.lower()
    ab = _abbreviations()
    segs = _segments(lowered) if segments else ()
    keys = set()
    for run in _WORD_RUN.findall(text):   # whole words: "GitHub" is one name, not "git" and "hub"
        w = run.lower().split("'")[0]
        if _is_key(w):
            t = normalize_word(w)
            if t and t not in _NEGATION_TERMS:
                keys.add(ab.get(t, t))
    return Features(frozenset(_terms(text)), frozenset(keys), frozenset(_NUMBER.findall(text)),
                    bool(_NEGATION.search(lowered)), segs, has_cjk(text))


def _segments(lowered: str) -> tuple[tuple[bool, frozenset[str]], ...]:
    segments = []
    for clause in _CLAUSE.split(lowered):
        if not clause.strip():
            continue
        cuts = [m.start() for m in _PRE_NEGATION.finditer(clause)]
        parts = [(False, clause[:cuts[0]] if cuts else clause)]
        parts += [(True, clause[c:d]) for c, d in zip(cuts, cuts[1:] + [len(clause)])]
        for neg, part in parts:
            words = set(re.findall(r"[a-z]+", part))
            neg = neg or bool(words & _POST_NEGATION)
            ts = frozenset(_terms(_JOINED.sub("", part)))   # "re-entrant" is one word here, not three terms
            if ts:
                segments.append((neg, ts))
    return tuple(segments)


Idf = Callable[[str], float]


class TermWeights:
    """The weights of terms over a set of ``n`` entries, from their document frequencies ``df``: the IDF (a term
    none holds weighs most), and which key terms are too common there to mark two entries as the same
    (``KEY_COMMON_SHARE``)."""

    def __init__(self, n: int, df: dict[str, int]) -> None:
        self.n, self.df = max(1, n), df
        self._common_at = max(KEY_COMMON_MIN, KEY_COMMON_SHARE * self.n)

    def __call__(self, term: str) -> float:
        d = self.df.get(term)
        return math.log(1 + self.n / d) if d else math.log(1 + self.n)

    def common(self, term: str) -> bool:
        return self.df.get(term, 0) >= self._common_at


def score(a: Features, b: Features, idf: Idf) -> float:
    """How alike two texts are by their words, 0–1 (see the module's docstring). With ``idf`` a ``TermWeights``,
    key terms it calls common do not count for the key-term rule."""
    if not a.terms or not b.terms:
        return 0.0
    wa = sum(idf(t) for t in a.terms)
    wb = sum(idf(t) for t in b.terms)
    inter = sum(idf(t) for t in a.terms & b.terms)
    jaccard = inter / max(wa + wb - inter, 1e-9)
    covered = inter / max(min(wa, wb), 1e-9)     # a short text said again inside a longer one scores high here
    sim = max(jaccard, (jaccard + covered) / 2)
    common = getattr(idf, "common", None)
    keys_a, keys_b = (a.keys, b.keys) if common is None else \
        ({t for t in a.keys if not common(t)}, {t for t in b.keys if not common(t)})
    shared_keys = keys_a & keys_b
    if len(shared_keys) >= KEY_TERMS_MIN:
        kj = len(shared_keys) / len(keys_a | keys_b)
        if kj >= KEY_JACCARD_MIN:
            sim = max(sim, (kj + covered) / 2)
    return min(sim, 1.0)


def signals(text: str) -> tuple[frozenset[str], bool]:
    """The numbers (versions, ports, sizes) a text states and whether it negates."""
    return frozenset(_NUMBER.findall(text)), bool(_NEGATION.search(text.lower()))


def differs_features(fa: Features, fb: Features) -> str | None:
    """Why two similar texts disagree, or None: different numbers, or a segment one affirms and the other negates
    (for texts with CJK, where segments are not split: one negates and the other does not)."""
    if fa.numbers and fb.numbers and fa.numbers != fb.numbers:
        return (f"different numbers ({', '.join(sorted(fa.numbers - fb.numbers)[:3]) or '…'} vs "
                f"{', '.join(sorted(fb.numbers - fa.numbers)[:3]) or '…'})")
    if fa.cjk or fb.cjk:
        return "one negates what the other states" if fa.negated != fb.negated else None
    in_a, in_b = set(fa.segments), set(fb.segments)
    for neg_a, sa in fa.segments:
        for neg_b, sb in fb.segments:
            if neg_a == neg_b:
                continue
            if (neg_a, sa) in in_b or (neg_b, sb) in in_a:
                continue   # the other text says the same thing the same way too (a shared sentence): no dispute
            shared = sa & sb
            if len(shared) >= SEGMENT_SHARED_MIN and len(shared) / min(len(sa), len(sb)) >= SEGMENT_SHARE_MIN:
                return f"one negates what the other states ({', '.join(sorted(shared)[:3])})"
    return None


def differs(a: str, b: str) -> str | None:
    """Why two similar texts disagree, or None."""
    return differs_features(features(a), features(b))


def judge(fa: Features, fb: Features, idf: Idf, *, duplicate_threshold: float = DUPLICATE_THRESHOLD,
          contradiction_threshold: float = CONTRADICTION_THRESHOLD) -> tuple[str, float, str] | None:
    """(kind, similarity, why) for two texts the lexical channel pairs, or None."""
    sim = score(fa, fb, idf)
    if sim < contradiction_threshold:
        return None
    why = differs_features(fa, fb)
    if why is not None:
        return "contradiction", sim, why
    if sim >= duplicate_threshold:
        return "duplicate", sim, f"near-duplicates (similarity {sim:.2f})"
    return None


class Corpus:
    """The live entries of one index read for the channels: keys, ids, paths, types, texts, features, and the
    IDF of the terms over them."""

    def __init__(self, rows: list[tuple[int, str, str, str, str]]) -> None:
        self.keys = [r[0] for r in rows]
        self.meta = {r[0]: (r[1], r[2]) for r in rows}
        self.types = {r[0]: r[3] for r in rows}
        self.text = {r[0]: r[4] for r in rows}
        self.feat = {k: features(t, segments=False) for k, t in self.text.items()}
        self._full: dict[int, Features] = {}
        self.df: dict[str, int] = defaultdict(int)
        for f in self.feat.values():
            for t in f.terms:
                self.df[t] += 1
        self.idf = TermWeights(len(rows), self.df)
        self.n = self.idf.n

    def full(self, key: int) -> Features:
        """The entry's features with its segments (made on first use)."""
        got = self._full.get(key)
        if got is None:
            got = self._full[key] = self.feat[key].with_changes(segments=_segments(self.text[key].lower()))
        return got


def corpus(con: sqlite3.Connection, types=None) -> Corpus:
    """The index's live entries (call after it is brought up to date)."""
    rows = con.execute("SELECT d.key, d.entry_id, d.path, d.type, f.data FROM idx_docs d JOIN files f "
                       "ON f.path = d.path WHERE d.sup = 0 ORDER BY d.key").fetchall()
    if types is not None:
        rows = [r for r in rows if r[3] in set(types)]
    return Corpus([(k, i, p, t, _text(d)) for k, i, p, t, d in rows])


def _text(data: str) -> str:
    try:
        d = json.loads(data)
    except ValueError:
        return ""
    return f"{d.get('title') or ''}\n{d.get('body') or ''}"


def lexical_pairs(c: Corpus, *, duplicate_threshold: float = DUPLICATE_THRESHOLD,
                  contradiction_threshold: float = CONTRADICTION_THRESHOLD, floor: float | None = None) -> list[Pair]:
    """The pairs the lexical channel finds among the corpus: candidates share a rare term or a key term. With
    ``floor``, pairs it does not call either kind but scores at ``floor`` or more come too, of kind ``candidate``
    (for a model to judge).

    Work: the shared weight of each candidate pair is summed from the postings of the rare terms (cheap additions);
    a pair is scored in full only when an upper bound of its score — that weight plus all the common terms the
    lighter text has — reaches the lowest threshold, or when it shares two key terms."""
    rare = max(8, int(math.sqrt(c.n)))     # terms held by more documents do not make a pair a candidate
    postings: dict[str, list[int]] = defaultdict(list)
    key_postings: dict[str, list[int]] = defaultdict(list)
    weight: dict[int, float] = {}
    common: dict[int, float] = {}
    for k, f in c.feat.items():
        weight[k] = sum(c.idf(t) for t in f.terms)
        common[k] = sum(c.idf(t) for t in f.terms if c.df.get(t, 0) > rare)
        for t in f.terms:
            if 1 < c.df.get(t, 0) <= rare:
                postings[t].append(k)
        for t in f.keys:
            key_postings[t].append(k)
    shared: dict[tuple[int, int], float] = defaultdict(float)
    for t, keys in postings.items():
        w = c.idf(t)
        for i, a in enumerate(keys):
            for b in keys[i + 1:]:
                shared[(a, b) if a < b else (b, a)] += w
    keyed: dict[tuple[int, int], int] = defaultdict(int)
    for keys in key_postings.values():
        if 1 < len(keys) <= rare:
            for i, a in enumerate(keys):
                for b in keys[i + 1:]:
                    keyed[(a, b) if a < b else (b, a)] += 1
    lowest = min(contradiction_threshold, floor if floor is not None else 1.0)
    out = []
    for p in set(shared) | {p for p, n in keyed.items() if n >= KEY_TERMS_MIN}:
        a, b = p
        if keyed.get(p, 0) < KEY_TERMS_MIN:
            wa, wb = weight[a], weight[b]
            ub = shared.get(p, 0.0) + min(common[a], common[b])
            ub_jaccard = ub / max(wa + wb - ub, 1e-9)
            if max(ub_jaccard, (ub_jaccard + ub / max(min(wa, wb), 1e-9)) / 2) < lowest:
                continue
        got = judge(c.full(a), c.full(b), c.idf, duplicate_threshold=duplicate_threshold,
                    contradiction_threshold=contradiction_threshold)
        if got is not None:
            out.append(Pair(a, b, got[1], got[0], got[2], "lexical"))
        elif floor is not None:
            sim = score(c.feat[a], c.feat[b], c.idf)
            if sim >= floor:
                out.append(Pair(a, b, sim, "candidate", f"similarity {sim:.2f}", "lexical"))
    out.sort(key=lambda x: (x.a, x.b))
    return out


def clusters(con: sqlite3.Connection, *, duplicate_threshold: float = DUPLICATE_THRESHOLD,
             contradiction_threshold: float = CONTRADICTION_THRESHOLD, types=None) -> list[Cluster]:
    """Clusters of live entries in the index by the lexical channel (call after the index is brought up to
    date), strongest first."""
    c = corpus(con, types)
    if c.n < 2 or len(c.keys) < 2:
        return []
    return join(lexical_pairs(c, duplicate_threshold=duplicate_threshold,
                              contradiction_threshold=contradiction_threshold), c.meta)


def join(pairs: Iterable[Pair], meta: dict[int, tuple[str, str]]) -> list[Cluster]:
    """Clusters of the pairs (strongest first, at most ``MAX_CLUSTER`` entries each); ``meta``: key → (id, path)."""
    parent: dict[int, int] = {}
    size: dict[int, int] = {}

    def root(x: int) -> int:
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    edges = sorted(pairs, key=lambda p: (-p.similarity, p.a, p.b))
    edges = [p for p in edges if p.kind in ("duplicate", "contradiction")]
    for p in edges:
        ra, rb = root(p.a), root(p.b)
        if ra == rb:
            continue
        if size.get(ra, 1) + size.get(rb, 1) > MAX_CLUSTER:
            continue
        parent[rb] = ra
        size[ra] = size.get(ra, 1) + size.get(rb, 1)
    groups: dict[int, list[int]] = defaultdict(list)
    best: dict[int, Pair] = {}
    contra: dict[int, Pair] = {}
    for p in edges:
        r = root(p.a)
        if r != root(p.b):
            continue
        best.setdefault(r, p)
        if p.kind == "contradiction":
            contra.setdefault(r, p)
    for k in {x for p in edges for x in (p.a, p.b)}:
        groups[root(k)].append(k)
    out = []
    for r, keys in groups.items():
        if len(keys) < 2:
            continue
        keys.sort(key=lambda k: meta[k][1])
        kind = "contradiction" if r in contra else "duplicate"
        top = contra.get(r) or best[r]
        why = top.why if top.channel == "lexical" else f"{top.why} ({top.channel})"
        out.append(Cluster(kind, tuple(meta[k][0] for k in keys), tuple(meta[k][1] for k in keys),
                           best[r].similarity, why))
    out.sort(key=lambda c: (-c.similarity, c.ids))
    return out
