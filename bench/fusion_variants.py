"""Fusion variants on LoCoMo: the attempts behind the embedding channel's defaults (docs/design.md), re-measurable.

Usage: python bench/fusion_variants.py [LOCOMO_JSON] [--dir /tmp/acpmem-locomo] [--keep] [--only NAME,...]
       [--conversations 0,1,2]

The vaults, entries and vectors of ``bench/recall_locomo.py --embed minilm`` (or ``e5``, ``mpnet``; reused from
``--dir`` when a run with ``--keep`` left them there), the model served on loopback by ``bench/embed_server.py``;
every question is ranked by ``acpmem.search.query.search`` with the vector channel fused in at ``--share`` (the
``[embeddings] weight`` default), once per variant. A variant replaces ``ranking.fuse`` or sets ranking constants
for its run only (an exploration tool: the library's defaults are what ``recall_locomo.py`` measures), or changes
the query's vector (normalised question, pseudo-relevance feedback) or reorders the hits (maximal marginal
relevance). Prints R@1/5/10 and MRR over all questions, and R@5 per category.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections import defaultdict
from pathlib import Path

from acpmem.core.settings import EmbeddingsSettings

sys.path.insert(0, str(Path(__file__).resolve().parent))

_WH = re.compile(r"^\s*(?:what|when|where|who|whom|whose|which|why|how(?: many| much| long| often| old)?)\b\s*"
                 r"(?:(?:did|does|do|is|are|was|were|has|have|had|can|could|would|will|might)\b\s*)?", re.I)


def _z(d: dict) -> dict:
    vals = list(d.values())
    mean = sum(vals) / len(vals)
    sd = (sum((x - mean) ** 2 for x in vals) / len(vals)) ** 0.5 or 1.0
    return {k: (x - mean) / sd for k, x in d.items()}


def variants(ranking) -> dict:
    """name → (constants to set, fuse replacement or None, query change or None)."""
    orig = ranking.fuse

    def zscore(scores, similar, share):
        zs, zv = _z(scores) if scores else {}, _z(similar)
        lo, lov = min([*zs.values(), 0.0]), min([*zv.values(), 0.0])
        out = {k: (zs.get(k, lo) - lo) + share * (zv.get(k, lov) - lov) for k in set(scores) | set(similar)}
        top, most = max(scores.values(), default=0.0) or 1.0, max(out.values()) or 1.0
        return {k: top * v / most for k, v in out.items()}

    def minmax(scores, similar, share):
        top, low = max(scores.values(), default=0.0) or 1.0, min(scores.values(), default=0.0)
        ranked = sorted(similar.values(), reverse=True)
        out = {k: (s - low) / ((top - low) or 1.0) for k, s in scores.items()}
        for k, c in similar.items():
            out[k] = out.get(k, 0.0) + share * (c - ranked[-1]) / ((ranked[0] - ranked[-1]) or 1.0)
        return {k: top * v for k, v in out.items()}

    def vector_gap(scores, similar, share):
        r = sorted(similar.values(), reverse=True)
        return orig(scores, similar, share * min(2.0, 0.5 + 10 * (r[0] - r[min(4, len(r) - 1)])))

    def lexical_margin(scores, similar, share):
        r = sorted(scores.values(), reverse=True)
        if len(r) >= 2 and r[0] > 0:
            margin = (r[0] - r[1]) / r[0]
            share = share * (1.5 - 2 * margin) if margin < 0.5 else share * 0.5
        return orig(scores, similar, max(0.1, share))

    old = {"SPREAD_FUSED": ranking.SPREAD}
    return {
        "issue 13 (fused spreading 0.15)": (old, None, None),   # "@0.15": on issue 13's spreading share
        "default": ({}, None, None),
        "z-score both lists @0.15": (old, zscore, None),
        "min-max both lists @0.15": (old, minmax, None),
        "vector top1-top5 gap weight @0.15": (old, vector_gap, None),
        "lexical margin weight @0.15": (old, lexical_margin, None),
        "query without question word @0.15": (old, None, "nowh"),
        "query without '?' @0.15": (old, None, "noqmark"),
        "prf top-3 lexical b0.5 @0.15": (old, None, ("prf", 3, 0.5)),
        "prf top-3 lexical b1 @0.15": (old, None, ("prf", 3, 1.0)),
        "no spreading after fusion": ({"SPREAD_FUSED": 0.0}, None, None),
        "fused spreading 0.4": ({"SPREAD_FUSED": 0.4}, None, None),
        "fused spreading 0.25 radius 3": ({"SPREAD_RADIUS": 3}, None, None),
        "default + vector gap weight": ({}, vector_gap, None),
        "default + lexical margin weight": ({}, lexical_margin, None),
        "default + duplicate 0.4": ({"DUPLICATE": 0.4}, None, None),
        "default + tag boost 1.0": ({"TAG_BOOST": 1.0}, None, None),
        "default + vector MMR l0.1": ({}, None, ("mmr", 0.1)),
        "default + vector MMR l0.2": ({}, None, ("mmr", 0.2)),
        "default + vector MMR l0.4": ({}, None, ("mmr", 0.4)),
    }


def mmr(hits, lam: float, row, mat, np, depth: int = 20) -> list[str]:
    """Maximal marginal relevance over the top ``depth`` hits: each next pick maximises its score minus ``lam`` x
    the best score x its greatest cosine similarity to what was picked already."""
    head, tail = list(hits[:depth]), hits[depth:]
    top = head[0].score if head else 1.0
    picked: list = []
    while head:
        def value(h):
            r = row(h)
            if r is None or not picked:
                return h.score
            sims = [float(mat[r] @ mat[row(p)]) for p in picked if row(p) is not None]
            return h.score - lam * top * max(sims, default=0.0)
        best = max(head, key=value)
        head.remove(best)
        picked.append(best)
    return [h.id for h in picked + list(tail)]


def main() -> None:
    from search_locomo import DEFAULT_DATA

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", default=str(DEFAULT_DATA))
    ap.add_argument("--dir", default="/tmp/acpmem-locomo")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated variant names (default: all)")
    ap.add_argument("--conversations", default="", help="comma-separated conversation numbers (default: all)")
    ap.add_argument("--embed", choices=("minilm", "e5", "mpnet", "bge"), default="minilm", help="the model served on loopback")
    ap.add_argument("--share", type=float, default=EmbeddingsSettings().weight,
                    help="the vector channel's share in the fused score (default: [embeddings] weight's)")
    args = ap.parse_args()

    import numpy as np

    from embed_server import MODELS, serve
    from recall_locomo import build_vault, configure, record
    from search_locomo import questions

    from acpmem.infra import embedclient
    from acpmem.search import query as index_query, ranking, vectors, watch
    from acpmem.read import embedding

    data = json.loads(Path(args.data).read_text(encoding="utf-8"))
    chosen = {int(x) for x in args.conversations.split(",") if x.strip()} or set(range(len(data)))
    table = variants(ranking)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        ap.error(f"unknown variant {unknown[0]!r}; the variants: {', '.join(table)}")
    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    model = MODELS[args.embed].name
    prefixes = MODELS[args.embed].PREFIXES or None
    per = {n: defaultdict(list) for n in names}
    orig_fuse = ranking.fuse
    try:
        with serve(model=args.embed) as url:
            for i, conv in enumerate(data):
                if i not in chosen:
                    continue
                build_vault(base / f"conv{i:02d}", conv).close()
                vault = configure(base / f"conv{i:02d}", url, model, prefixes)
                done = embedding.run_pass(vault)
                if done["error"] or done["missing"]:
                    raise SystemExit(f"embedding failed: {done}")
                cites = {e.path: e.citation for e in vault.load().entries}
                qs = list(questions(conv))
                ep = embedding.endpoint(vault.settings)
                texts = {"q": [qa["question"] for qa, _ in qs]}
                texts["nowh"] = [_WH.sub("", q).rstrip(" ?") or q for q in texts["q"]]
                texts["noqmark"] = [q.rstrip(" ?") for q in texts["q"]]
                qvecs = {k: embedclient.embed(ep, [ep.query_prefix + q for q in t], 600).vectors
                         for k, t in texts.items()}

                def rank_all(con):
                    watch.fresh(con, vault.root, vault.state_dir, vault.settings)
                    key_of = {p: k for k, p in con.execute("SELECT key, path FROM idx_docs")}
                    m = vectors.load_matrix(con, vault.state_dir, ep.vector_key, len(qvecs["q"][0]),
                                            types=vault.settings.types)
                    row_of = {int(k): r for r, k in enumerate(m.keys)}
                    out = []
                    for name in names:
                        consts, fuse, change = table[name]
                        saved = {k: getattr(ranking, k) for k in consts}
                        for k, v in consts.items():
                            setattr(ranking, k, v)
                        ranking.fuse = fuse or orig_fuse
                        try:
                            for j, (qa, evidence) in enumerate(qs):
                                q = qa["question"]
                                qv = qvecs[change if isinstance(change, str) else "q"][j]
                                if isinstance(change, tuple) and change[0] == "prf":   # pseudo-relevance feedback
                                    _, k, beta = change
                                    top = [key_of[h.id] for h in index_query.search(con, q, k)]
                                    rows = [row_of[x] for x in top if x in row_of]
                                    v = np.asarray(qv, dtype=np.float32)
                                    v /= float(np.linalg.norm(v)) or 1.0
                                    qv = (v + beta * m.mat[rows].mean(0)) if rows else v
                                similar = m.top(qv, vectors.VECTOR_TOP)
                                hits = index_query.search(con, q, 50, similar=similar, share=args.share)
                                ids = [h.id for h in hits]
                                if isinstance(change, tuple) and change[0] == "mmr":   # diversity by meaning
                                    ids = mmr(hits, change[1], lambda h: row_of.get(key_of.get(h.id)), m.mat, np)
                                out.append((name, qa, evidence, ids))
                        finally:
                            ranking.fuse = orig_fuse
                            for k, v in saved.items():
                                setattr(ranking, k, v)
                    return out

                for name, qa, evidence, paths in vault.with_db(rank_all):
                    record(per[name], qa, evidence, paths, cites)
                vault.close()
                print(f"  conversation {i}: {len(qs)} questions", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"{'variant':42} {'n':>5} " + " ".join(f"{c:>6}" for c in ("R@1", "R@5", "R@10", "MRR"))
          + "   R@5 by category 1 2 3 4")
    for name, rows in per.items():
        items = rows["all"]
        print(f"{name:42} {len(items):5d} " + " ".join(f"{sum(r[c] for r in items) / len(items):6.3f}"
                                                     for c in ("R@1", "R@5", "R@10", "MRR"))
              + "   " + " ".join(f"{sum(r['R@5'] for r in rows[c]) / len(rows[c]):.3f}" if rows[c] else "  —  "
                                 for c in "1234"))


if __name__ == "__main__":
    main()
