"""Word overlap of two short texts: their terms, the overlap and the Jaccard index."""
from __future__ import annotations

import re

STOP = frozenset("the a an and or of to in on for is are be it this that with as by at from not no use uses "
                  "used must should when if".split())


def terms(text: str) -> set[str]:
    """The words of a text for overlap: lower-cased ASCII words of 2+ letters (minus a few stopwords) and the
    character pairs of CJK runs."""
    out = {w for w in re.findall(r"[a-z0-9][a-z0-9_.-]*[a-z0-9]|[a-z0-9]{2,}", text.lower()) if w not in STOP}
    for run in re.findall(r"[\u3400-\u9fff]+", text):
        out.update(run[i:i + 2] for i in range(max(1, len(run) - 1)))
    return out


def overlap(a: str, b: str) -> float:
    """The share of the smaller text's terms the other one has too (0 when either has none)."""
    ta, tb = terms(a), terms(b)
    return len(ta & tb) / min(len(ta), len(tb)) if ta and tb else 0.0


def jaccard(a: str, b: str) -> float:
    ta, tb = terms(a), terms(b)
    return len(ta & tb) / len(ta | tb) if ta and tb else 0.0
