"""The typo channel's neighbours: the index terms nearest a query word by optimal string alignment distance (an
adjacent swap is one edit), at most one edit away for a word of up to seven letters and two for a longer one.

rapidfuzz compares a word with every term faster than Python can, but importing it costs ~10 ms, a fifth of a
per-turn read, paid by every prompt with a word the index lacks. A word looked up at one edit needs none of that:
every string one edit from it (a letter deleted, two neighbours swapped, a letter replaced or inserted — only
letters some term has) is made and looked up in the set of terms, a few hundred lookups. Two edits away would be
tens of thousands of strings, so a longer word still goes to rapidfuzz. The answer is the same either way, term
for term and in the same order (tests/test_search.py compares them).
"""
from __future__ import annotations

from collections.abc import Sequence

# the last terms looked up in, as one tuple (the list, its set, its letters), replaced whole: a thread that reads it
# gets one list's set and letters, never another's
_LAST: list = [None]


def typo_neighbours(term: str, alphabetic_terms: Sequence[str], max_dist: int, limit: int = 5) -> list[tuple[str, int]]:
    """The nearest of ``alphabetic_terms`` (sorted by code point) to ``term``, at most ``max_dist`` edits away:
    the ``limit`` nearest (the term itself among them, if present), ties in the terms' order, and then the term
    itself left out — as rapidfuzz's ``process.extract`` with the OSA distance answers."""
    if max_dist == 1:
        return _one_edit(term, alphabetic_terms, limit)
    # lazy: rapidfuzz is heavy, never imported at start-up
    from rapidfuzz import process
    from rapidfuzz.distance import OSA
    hits = process.extract(term, alphabetic_terms, scorer=OSA.distance, score_cutoff=max_dist, limit=limit)
    return [(t, int(d)) for t, d, _ in hits if t != term]


def _one_edit(word: str, terms: Sequence[str], limit: int) -> list[tuple[str, int]]:
    """The terms at most one edit from ``word``: every string one edit away, looked up in the terms' set. Sorted
    terms are in code-point order, so a tie's order is the strings' own."""
    last = _LAST[0]
    if last is None or last[0] is not terms:
        last = _LAST[0] = (terms, frozenset(terms), "".join(sorted(set("".join(terms)))))
    _, known, letters = last
    m = len(word)
    near = {word[:i] + word[i + 1:] for i in range(m)}
    near.update(word[:i] + word[i + 1] + word[i] + word[i + 2:] for i in range(m - 1))
    for i in range(m + 1):
        head, tail = word[:i], word[i:]
        near.update(head + c + tail for c in letters)
        if i < m:
            rest = word[i + 1:]
            near.update(head + c + rest for c in letters)
    near.discard(word)
    found = [(word, 0)] if word in known else []
    found += [(t, 1) for t in sorted(near & known)]
    return [(t, d) for t, d in found[:limit] if t != word]
