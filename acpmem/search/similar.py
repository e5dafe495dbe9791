"""Clusters of near-duplicate and contradicting entries, found through the search index (``consolidate``).

Candidates come from the index's postings: two live entries are compared only when they share a rare term (one
held by few documents), so the work grows with the pairs that could match, not with the square of the vault. Each
candidate pair is scored by the IDF-weighted Jaccard similarity of the two term sets (title, body and tags as the
index analysed them: stems, numbers and codes). Then, on the two texts:

* a **contradiction**: similar (``contradiction_threshold``) yet saying different things where it counts — different
  numbers or versions, or one negated where the other is not;
* a **duplicate**: very similar (``duplicate_threshold``) and no such difference.

Pairs are joined into clusters (union-find); a cluster with any contradiction is a contradiction cluster. The
thresholds were set on a planted vault (``tests/test_consolidate.py`` asserts its precision and recall;
``docs/design.md``, "Consolidation").
"""
from __future__ import annotations

import json
import math
import re
import sqlite3
from collections import defaultdict

from acpmem.core.values import Value

DUPLICATE_THRESHOLD = 0.55
CONTRADICTION_THRESHOLD = 0.4
MAX_CLUSTER = 12          # a bigger group is a topic, not a duplicate: it is split by its strongest pairs only
_NUMBER = re.compile(r"(?<![A-Za-z])v?\d+(?:[.:]\d+)*")
_NEGATION = re.compile(r"\b(?:not|never|no longer|don't|doesn't|isn't|aren't|won't|cannot|can't|without|avoid|"
                       r"stop|stopped|disable|disabled|no)\b|不|没|别|禁止")


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


def signals(text: str) -> tuple[frozenset[str], bool]:
    """The numbers (versions, ports, sizes) a text states and whether it negates."""
    return frozenset(_NUMBER.findall(text)), bool(_NEGATION.search(text.lower()))


def differs(a: str, b: str) -> str | None:
    """Why two similar texts disagree, or None."""
    na, nega = signals(a)
    nb, negb = signals(b)
    if na and nb and na != nb:
        return f"different numbers ({', '.join(sorted(na - nb)[:3]) or '…'} vs {', '.join(sorted(nb - na)[:3]) or '…'})"
    if nega != negb:
        return "one negates what the other states"
    return None


def clusters(con: sqlite3.Connection, *, duplicate_threshold: float = DUPLICATE_THRESHOLD,
             contradiction_threshold: float = CONTRADICTION_THRESHOLD, types=None) -> list[Cluster]:
    """Clusters of live entries in the index (call after the index is brought up to date), strongest first."""
    rows = con.execute("SELECT d.key, d.entry_id, d.path, d.type, t.tids FROM idx_docs d JOIN idx_tids t "
                       "ON t.key = d.key WHERE d.sup = 0").fetchall()
    if types is not None:
        rows = [r for r in rows if r[3] in set(types)]
    n = len(rows)
    if n < 2:
        return []
    df = dict(con.execute("SELECT tid, df FROM idx_terms"))
    idf = {t: math.log(1 + n / max(1, d)) for t, d in df.items()}
    terms: dict[int, frozenset[int]] = {}
    meta: dict[int, tuple[str, str]] = {}
    postings: dict[int, list[int]] = defaultdict(list)
    rare = max(8, int(math.sqrt(n)))     # terms held by more documents do not make a pair a candidate
    for key, ident, path, _typ, tids in rows:
        ts = frozenset(int(t) for t in tids.split()) if tids else frozenset()
        terms[key] = ts
        meta[key] = (ident, path)
        for t in ts:
            if 1 < df.get(t, 0) <= rare:
                postings[t].append(key)
    weight = {k: sum(idf.get(t, 0.0) for t in ts) for k, ts in terms.items()}
    shared: dict[tuple[int, int], float] = defaultdict(float)
    for t, keys in postings.items():
        if len(keys) < 2:
            continue
        w = idf.get(t, 0.0)
        for i, a in enumerate(keys):
            for b in keys[i + 1:]:
                shared[(a, b) if a < b else (b, a)] += w
    edges: list[tuple[float, int, int, str | None]] = []
    texts: dict[int, str] = {}
    for (a, b), rare_w in shared.items():
        # an upper bound first: only the rare terms are counted so far, the common ones can only add
        if rare_w / max(weight[a], weight[b], 1e-9) < contradiction_threshold * 0.5:
            continue
        inter = sum(idf.get(t, 0.0) for t in terms[a] & terms[b])
        sim = inter / max(weight[a] + weight[b] - inter, 1e-9)
        if sim < contradiction_threshold:
            continue
        for k in (a, b):
            if k not in texts:
                texts[k] = _text(con, meta[k][1])
        why = differs(texts[a], texts[b])
        if why is not None or sim >= duplicate_threshold:
            edges.append((sim, a, b, why))
    return _join(edges, meta)


def _text(con: sqlite3.Connection, path: str) -> str:
    row = con.execute("SELECT data FROM files WHERE path = ?", (path,)).fetchone()
    if not row:
        return ""
    try:
        d = json.loads(row[0])
    except ValueError:
        return ""
    return f"{d.get('title') or ''}\n{d.get('body') or ''}"


def _join(edges, meta) -> list[Cluster]:
    parent: dict[int, int] = {}
    size: dict[int, int] = {}

    def root(x: int) -> int:
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    edges.sort(key=lambda e: -e[0])
    for sim, a, b, _why in edges:
        ra, rb = root(a), root(b)
        if ra == rb:
            continue
        if size.get(ra, 1) + size.get(rb, 1) > MAX_CLUSTER:
            continue
        parent[rb] = ra
        size[ra] = size.get(ra, 1) + size.get(rb, 1)
    groups: dict[int, list[int]] = defaultdict(list)
    best: dict[int, tuple[float, str | None]] = {}
    contra: dict[int, str] = {}
    for sim, a, b, why in edges:
        r = root(a)
        if r != root(b):
            continue
        if r not in best:
            best[r] = (sim, why)
        if why is not None and r not in contra:
            contra[r] = why
    for k in {x for e in edges for x in e[1:3]}:
        groups[root(k)].append(k)
    out = []
    for r, keys in groups.items():
        if len(keys) < 2:
            continue
        keys.sort(key=lambda k: meta[k][1])
        kind = "contradiction" if r in contra else "duplicate"
        why = contra.get(r) or f"near-duplicates (similarity {best[r][0]:.2f})"
        out.append(Cluster(kind, tuple(meta[k][0] for k in keys), tuple(meta[k][1] for k in keys), best[r][0], why))
    out.sort(key=lambda c: (-c.similarity, c.ids))
    return out
