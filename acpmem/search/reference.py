"""The in-memory reference index: analysis at build time, postings in dicts, ``ranking.rank`` for search.

The persistent index (``acpmem.search.store``, ``acpmem.search.query``) must rank exactly as this one does (a test
compares them); the offline extractor and the benchmarks use it directly.
"""
from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable

from acpmem.search import cedict
from acpmem.search.analysis import FIELDS, SearchDoc, doc_fields, has_cjk
from acpmem.search.ranking import CorpusStats, Hit, bounded_neighbours, rank, seq_range, typo_neighbours


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
        return cedict.en_to_zh(word)

    def zh_to_en(self, word: str) -> tuple[str, ...]:
        return cedict.zh_to_en(word)

    def known_cjk(self, words: Iterable[str]) -> tuple[set[str], set[str]]:
        """(those of ``words`` that are index terms, those that are dictionary headwords), for query segmentation."""
        words = set(words)
        return words & self._set, {w for w in words if cedict.zh_to_en(w)}

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
                r = seq_range(seq)
                if r:
                    self._by_session[str(session)].append((r[0], r[1], key))
        for v in self._by_session.values():
            v.sort()
        self.neighbour_work = 0

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
        cites = [(str(session), *r) for session, seq in self._docs[key].citations if (r := seq_range(seq))]
        best, work = bounded_neighbours(key, cites, radius, self._scan)
        self.neighbour_work += work
        return best.items()

    def _scan(self, session: str, low: int, high: int, n: int) -> Iterable[tuple[int, int, int]]:
        cited = self._by_session.get(session, [])
        j = bisect.bisect_left(cited, (high + 1,)) - 1
        while j >= 0 and n > 0 and cited[j][0] >= low:
            lo, hi, other = cited[j]
            yield other, lo, hi
            j -= 1
            n -= 1

    def search(self, query: str, limit: int = 5, spread: bool = True, dates: bool = True,
               preview_length: int = 200) -> list[Hit]:
        return rank(self, query, limit=limit, spread=spread, dates=dates, preview_length=preview_length)
