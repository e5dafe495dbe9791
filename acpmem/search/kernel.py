"""Parity mode: a faithful port of acp-kernel's ``searchBlocks``.

The kernel tokenizer and suffix stemmer, BM25, fuzzy character bigrams, hybrid 0.7/0.3, role weights and previews. It
exists to prove acpmem starts from the kernel's behaviour and to measure against it (``bench/search_kernel.py``);
recall does not use it. Given the kernel's own tokens it returns the kernel's top 10 and scores to 1e-4.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from acpmem.core.errors import UsageError
from acpmem.core.values import Value
from acpmem.search.analysis import cjk_runs, has_cjk, segmenter

# JavaScript's \s and String.prototype.trim() whitespace, which differs from Python's str.isspace().
_JS_WS = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_WS_CHARS = "\t\n\v\f\r \u00a0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000\ufeff"


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
    words = [w for w in segmenter().cut(run) if len(w) >= 2]
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
