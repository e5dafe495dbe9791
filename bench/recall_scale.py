"""Recall at scale: index build from scratch, warm whole-process recall, one changed file, peak RSS.

Usage: python bench/recall_scale.py [--sizes 10000,100000] [--dir /tmp/acpmem-scale] [--runs 7] [--keep]
                                   [--reuse-index] [--shapes varied,one-turn,many-sessions] [--embed minilm|bge|e5|mpnet] [--rerank msmarco]

For each size N it writes a vault of N varied entries (English words drawn from the CC-CEDICT gloss list with a
Zipf-like frequency, code identifiers, numbers, about one entry in ten in Chinese, a few superseded) directly as
files plus one git commit, then measures, each as a whole ``acp memory recall`` process:

* build: the first recall on a vault with no ``.acpmem/index.sqlite`` (catalog parse + index build + query);
* warm: the median over several queries (English, a typo, a prefix, Chinese) with the index up to date, the
  vault's watcher (``acpmem.watch``, started by the first recall) answering what changed; and the same for three
  of them with ``ACPMEM_NO_WATCH=1``, where every entry file is checked by ``stat``;
* changed: one entry file rewritten by hand, then a recall (the extra over warm is the incremental update);
* shapes: ``--shapes`` adds vaults whose citations are pathological for neighbour spreading: every entry citing one
  turn, or every entry citing 400 sessions;
* fused: with ``--embed``, the entries are embedded (``acpmem.read.embedding.run_pass``) and the warm recalls are
  measured again with the embedding channel on, beside the endpoint's own time for one query;
* RSS: the peak resident set of the recall processes (``/usr/bin/time -f %M``), and the watcher's (VmHWM).

A vault already generated for a size is reused (``--keep`` keeps them; the default deletes them at the end).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

ACP = [sys.executable, "-m", "acpmem"]
TYPES = ("decision", "lesson", "fact", "user-preference", "reference")
TECH = ("sqlite", "postgres", "redis", "kafka", "nginx", "docker", "kubernetes", "terraform", "pytest", "webpack",
        "graphql", "grpc", "oauth", "jwt", "s3", "lambda", "celery", "django", "fastapi", "react", "typescript",
        "rustc", "cargo", "gradle", "maven", "ansible", "prometheus", "grafana", "loki", "sentry", "elasticsearch")
IDENT_PARTS = ("user", "session", "cache", "queue", "token", "retry", "upload", "index", "config", "worker", "job",
               "event", "handler", "client", "server", "buffer", "stream", "batch", "limit", "timeout")


def word_pools(rng: random.Random) -> tuple[list[str], list[str]]:
    raw = resources.files("acpmem").joinpath("data/cedict-words.tsv.gz").read_bytes()
    en: set[str] = set()
    zh: list[str] = []
    section = None
    for line in gzip.decompress(raw).decode("utf-8").splitlines():
        if line.startswith("@"):
            section = line
            continue
        if line.startswith("#") or section != "@zh":
            continue
        word, _, gloss = line.partition("\t")
        if 2 <= len(word) <= 4:
            zh.append(word)
        en.update(g for g in gloss.split() if g.isalpha() and 3 <= len(g) <= 12)
    en_list, zh = sorted(en), sorted(set(zh))
    rng.shuffle(en_list)
    rng.shuffle(zh)
    return en_list, zh


class Zipf:
    def __init__(self, words: list[str], rng: random.Random, s: float = 1.05) -> None:
        self.words, self.rng = words, rng
        weights = [1 / (i + 1) ** s for i in range(len(words))]
        total = 0.0
        self.cum = []
        for w in weights:
            total += w
            self.cum.append(total)

    def take(self, k: int) -> list[str]:
        return self.rng.choices(self.words, cum_weights=self.cum, k=k)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _ident(rng: random.Random) -> str:
    parts = rng.sample(IDENT_PARTS, rng.randint(2, 3))
    style = rng.random()
    if style < 0.4:
        return parts[0] + "".join(p.capitalize() for p in parts[1:])
    if style < 0.8:
        return "_".join(parts)
    return "src/" + "/".join(parts) + ".py"


SHAPES = ("varied", "one-turn", "many-sessions")


def citation_lines(rng: random.Random, shape: str) -> list[str]:
    """varied: one random session and turn; one-turn: every entry cites the same turn (notes imported by hand);
    many-sessions: every entry cites 400 sessions (a summary of many conversations)."""
    if shape == "one-turn":
        return ["- session: \"0000beef\"", "  seq: 1"]
    if shape == "many-sessions":
        return [x for k in range(400) for x in (f"- session: \"s{k:04d}\"", f"  seq: {rng.randint(1, 50)}")]
    return [f"- session: \"{rng.getrandbits(32):08x}\"", f"  seq: {rng.randint(1, 2000)}"]


def make_entry_text(i: int, rng: random.Random, en: Zipf, zh: Zipf, ident: str, superseded_by: str | None,
                    shape: str = "varied") -> str:
    chinese = rng.random() < 0.1
    if chinese:
        title = "".join(zh.take(rng.randint(3, 6))) + ("，" + "".join(zh.take(3)) if rng.random() < 0.5 else "")
        lines = ["- " + "".join(zh.take(rng.randint(6, 14))) + "。" for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.5:
            lines.append(f"- 参见 `{_ident(rng)}`，{rng.choice(TECH)} 配置。")
    else:
        words = en.take(rng.randint(4, 9))
        if rng.random() < 0.5:
            words.insert(rng.randint(0, len(words)), rng.choice(TECH))
        title = _cap(" ".join(words))
        lines = []
        for _ in range(rng.randint(1, 5)):
            sent = en.take(rng.randint(6, 18))
            if rng.random() < 0.4:
                sent.insert(rng.randint(0, len(sent)), f"`{_ident(rng)}`")
            if rng.random() < 0.3:
                sent.insert(rng.randint(0, len(sent)), str(rng.choice((2, 3, 8, 10, 30, 60, 100, 404, 429, 500))))
            lines.append("- " + _cap(" ".join(sent)) + ".")
    day = rng.randint(0, 700)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_700_000_000 + day * 86400 + rng.randint(0, 86399)))
    meta = [f"id: {ident}", f"title: {json.dumps(title, ensure_ascii=False)}", f"type: {rng.choice(TYPES)}",
            f"importance: {rng.randint(1, 10)}", f"created: {created}", "last_read: null",
            "citation:", *citation_lines(rng, shape), "tier: 3"]
    if superseded_by:
        meta.append(f"superseded_by: {superseded_by}")
    return "---\n" + "\n".join(meta) + "\n---\n" + "\n".join(lines) + "\n"


def generate(root: Path, n: int, seed: int = 7, shape: str = "varied") -> None:
    """A vault of n entries at root (init through the library, files written directly, one commit)."""
    from acpmem.vault.writer import git
    from acpmem.vault.create import init_vault

    rng = random.Random(seed)
    init_vault(root)
    en_words, zh_words = word_pools(rng)
    en, zh = Zipf(en_words, rng), Zipf(zh_words, rng)
    alphabet = "abcdefghijkmnpqrstuvwxyz23456789"
    ids: list[str] = []
    seen: set[str] = set()
    while len(ids) < n:
        ident = rng.choice(alphabet[:24]) + "".join(rng.choice(alphabet) for _ in range(7))  # never all digits
        if ident not in seen:
            seen.add(ident)
            ids.append(ident)
    entries = root / "entries"
    for i, ident in enumerate(ids):
        sup = ids[rng.randrange(n)] if rng.random() < 0.03 else None
        (entries / f"{ident}.md").write_text(make_entry_text(i, rng, en, zh, ident, sup if sup != ident else None,
                                                                 shape),
                                             "utf-8")
    git(root, "add", "-A", "entries")
    git(root, "commit", "-q", "--no-verify", "-m", f"bench: {n} generated entries")


def queries_for(root: Path, rng: random.Random) -> list[str]:
    """Queries made from real entries: two or three title words, one with a typo, one prefix, one Chinese."""
    from acpmem.core.entryfile import parse_entry_bytes

    files = sorted((root / "entries").iterdir())
    en_titles, zh_titles = [], []
    for p in rng.sample(files, min(400, len(files))):
        e = parse_entry_bytes(p.read_bytes(), p.name, None)
        (zh_titles if not e.title.isascii() else en_titles).append(e.title)
    out = []
    for t in en_titles[:4]:
        words = [w for w in t.lower().split() if len(w) > 3]
        out.append(" ".join(rng.sample(words, min(3, len(words)))))
    w = max(en_titles[4].split(), key=len).lower()
    out.append(w[:2] + w[3] + w[2] + w[4:] if len(w) > 5 else w + "x")  # a transposition typo
    w = max(en_titles[5].split(), key=len).lower()
    out.append(w[: max(4, len(w) - 3)])  # a prefix
    out.append(zh_titles[0][:4])
    return out


def run_recall(root: Path, query: str, env: dict | None = None) -> tuple[float, int, float]:
    """One whole ``acp memory recall`` process: wall seconds, hits, and its peak RSS in MB (from GNU time, so
    git children of other steps are not counted)."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "maxrss_kb=%M"] + ACP
                       + ["--vault", str(root), "recall", "--json", "--limit", "5", query],
                       capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"recall failed ({p.returncode}): {p.stderr.strip()[:500]}")
    rss = next((int(line.split("=")[1]) for line in p.stderr.splitlines() if line.startswith("maxrss_kb=")), 0)
    return dt, len(json.loads(p.stdout)["hits"]), rss / 1024


def set_embeddings(root: Path, url: str, model: str) -> None:
    """Point (or, with model "", stop pointing) the vault's [embeddings] at an endpoint."""
    import re

    path = root / "acpmem.toml"
    text = path.read_text("utf-8")
    head, sep, tail = text.partition("[embeddings]")
    body, nxt, rest = tail.partition("\n[")
    body = re.sub(r'(?m)^(# )?base_url = .*$', f'base_url = {json.dumps(url)}', body)
    body = re.sub(r'(?m)^(# )?model = .*$', f'model = {json.dumps(model)}', body)
    body = re.sub(r'(?m)^(# )?batch_size = .*$', 'batch_size = 256', body)
    body = re.sub(r'(?m)^(# )?batch_timeout_seconds = .*$', 'batch_timeout_seconds = 600.0', body)
    path.write_text(head + sep + body + nxt + rest, "utf-8")


def set_rerank(root: Path, url: str, model: str) -> None:
    """Point (or, with model "", stop pointing) the vault's [rerank] at an endpoint."""
    path = root / "acpmem.toml"
    head, sep, tail = path.read_text("utf-8").partition("[rerank]\n")
    body, nxt, rest = tail.partition("\n[")
    body = f"base_url = {json.dumps(url)}\nmodel = {json.dumps(model)}\ntimeout_seconds = 10.0\n" if model else ""
    path.write_text(head + "[rerank]\n" + body + nxt + rest, "utf-8")


def bench_fused(root: Path, queries: list[str], runs: int, url: str, model: str, rerank: str = "") -> dict:
    """Warm recall with the embedding channel on (vectors made first by the background pass, in this process),
    and with ``rerank`` (a rerank model at ``url``) the rerank stage too."""
    from acpmem.infra import embedclient
    from acpmem.read import embedding
    from acpmem.vault.reader import VaultReader

    set_embeddings(root, url, model)
    t0 = time.perf_counter()
    vault = VaultReader(root)
    done = embedding.run_pass(vault)
    print(f"  embedded {done['embedded']} entries in {time.perf_counter() - t0:.1f} s", flush=True)
    ep = embedding.endpoint(vault.settings)
    vault.close()
    endpoint_s = []
    for q in queries:
        for i in range(runs):     # texts the server has not seen (bench/embed_server.py caches vectors by text)
            endpoint_s.append(embedclient.embed(ep, [f"{q} {i} {time.time()}"], 10).latency_s)
    run_recall(root, queries[0])
    per_query = {}
    for q in queries:
        times = [run_recall(root, q)[0] for _ in range(runs)]
        per_query[q] = statistics.median(times)
    out = {"per_query": per_query, "median_ms": statistics.median(per_query.values()) * 1000,
           "endpoint_ms": statistics.median(endpoint_s) * 1000}
    if rerank:
        from acpmem.core.settings import settings_from_mapping
        from acpmem.infra import rerankclient

        set_rerank(root, url, rerank)
        rep = rerankclient.resolve(dict(settings_from_mapping({"rerank": {"base_url": url, "model": rerank}}).rerank))
        from acpmem.read.retrieval import recall

        vault = VaultReader(root)      # the model's own time on what recall sends it: each query's candidates
        sent = {q: [f"{h.entry.title}\n{h.entry.body}".strip()[:2000] for h in
                    recall(vault, q, limit=vault.settings.rerank.candidates, mark_read=False)] for q in queries}
        vault.close()
        rerank_s = [rerankclient.rerank(rep, q, sent[q], 10).latency_s for q in queries for _ in range(runs)]
        run_recall(root, queries[0])
        times = {q: statistics.median(run_recall(root, q)[0] for _ in range(runs)) for q in queries}
        out.update(rerank_ms=statistics.median(times.values()) * 1000,
                   rerank_endpoint_ms=statistics.median(rerank_s) * 1000)
        set_rerank(root, "", "")
    set_embeddings(root, "", "")
    return out


def bench_size(base: Path, n: int, runs: int, reuse_index: bool = False, shape: str = "varied",
               embed: tuple[str, str, str] | None = None) -> dict:
    root = base / (f"v{n}" if shape == "varied" else f"v{n}-{shape}")
    if not (root / "entries").is_dir():
        t0 = time.perf_counter()
        generate(root, n, shape=shape)
        print(f"  generated {n} entries in {time.perf_counter() - t0:.1f} s", flush=True)
    rng = random.Random(n)
    queries = queries_for(root, rng)
    if not reuse_index:
        for suffix in ("", "-wal", "-shm"):
            Path(str(root / ".acpmem" / "index.sqlite") + suffix).unlink(missing_ok=True)
    from acpmem.search import watch

    stop_watcher(root)
    build_s, _, rss = run_recall(root, queries[0])
    rss_max = rss
    # the first recall started the vault's watcher (acpmem.watch); wait until it answers
    deadline = time.monotonic() + 300
    while not watch.sync(root / ".acpmem", root / ".acpmem" / "index.sqlite") and time.monotonic() < deadline:
        time.sleep(0.2)
    watcher = watch.running_pid(root / ".acpmem")
    run_recall(root, queries[0])  # warm the page cache
    # the same queries without a watcher: every file is checked by stat
    scan_env = dict(os.environ, ACPMEM_NO_WATCH="1")
    scanned = [run_recall(root, q, scan_env)[0] for q in queries[:3] for _ in range(max(1, runs // 2))]
    warm: list[float] = []
    per_query: dict[str, tuple[float, int]] = {}
    for q in queries:
        times = []
        for _ in range(runs):
            dt, k, rss = run_recall(root, q)
            times.append(dt)
            rss_max = max(rss_max, rss)
        per_query[q] = (statistics.median(times), k)
        warm.extend(times)
    warm_ms = statistics.median(warm) * 1000
    fused = bench_fused(root, queries, runs, *embed) if embed else None
    # one entry changed by hand (same path, new content), then a recall
    changed = []
    files = sorted((root / "entries").iterdir())
    for i in range(runs):
        p = files[rng.randrange(len(files))]
        text = p.read_text("utf-8")
        p.write_text(text.rstrip("\n") + f" Edited by hand {i}.\n", "utf-8")
        dt, _, rss = run_recall(root, queries[i % len(queries)])
        changed.append(dt)
        rss_max = max(rss_max, rss)
    rss_mb = rss_max
    db = root / ".acpmem" / "index.sqlite"
    watcher_mb = 0.0
    if watcher:
        status = Path(f"/proc/{watcher}/status").read_text()
        watcher_mb = next(int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("VmHWM")) / 1024
    stop_watcher(root)
    return {"n": n, "build_s": build_s, "warm_ms": warm_ms, "per_query": per_query,
            "changed_ms": statistics.median(changed) * 1000, "rss_mb": rss_mb,
            "scan_ms": statistics.median(scanned) * 1000, "watcher_mb": watcher_mb,
            "db_mb": db.stat().st_size / 1e6 if db.exists() else 0.0, "fused": fused}


def stop_watcher(root: Path) -> None:
    import signal

    from acpmem.search import watch

    pid = watch.running_pid(root / ".acpmem")
    if pid:
        os.kill(pid, signal.SIGTERM)
        while watch.running_pid(root / ".acpmem"):
            time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--dir", default="/tmp/acpmem-scale")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--embed", default=None, help="minilm, bge, e5 or mpnet (served here, see bench/embed_server.py; "
                    "mpnet's vectors have 768 dimensions, the others' 384) or the base URL of an "
                    "OpenAI-compatible endpoint: also measure warm recall with the embedding channel on")
    ap.add_argument("--model", default="all-MiniLM-L6-v2", help="the embedding model's name at --embed URL")
    ap.add_argument("--rerank", default=None, help="with --embed: msmarco (served here) or the rerank model's name at "
                    "--embed URL; also measure warm recall with the rerank stage on")
    ap.add_argument("--shapes", default="varied", help="citation shapes, comma-separated: varied (one random turn "
                    "each), one-turn (every entry cites the same turn), many-sessions (every entry cites 400 sessions)")
    ap.add_argument("--reuse-index", action="store_true", help="keep an existing index (build time then means "
                    "only what changed since)")
    args = ap.parse_args()
    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")
    import statistics
    import subprocess
    import sys
    import time

    def start() -> float:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        return time.perf_counter() - t

    floor = statistics.median(start() for _ in range(max(5, args.runs))) * 1000
    print(f"python -c pass: {floor:.0f} ms (whole process, median): the per-turn targets are ratios to it")
    try:
        for n, shape in ((int(s), sh) for s in args.sizes.split(",") for sh in args.shapes.split(",")):
            if shape not in SHAPES:
                raise SystemExit(f"unknown shape {shape!r}; one of {', '.join(SHAPES)}")
            print(f"\n{n} entries, citations: {shape}", flush=True)
            embed = None
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from embed_server import MODELS, serve

            from embed_server import RERANKERS

            if args.embed in MODELS:
                server = serve(model=args.embed, rerank=args.rerank if args.rerank in RERANKERS else None)
                embed = (server.__enter__(), MODELS[args.embed].name,
                         RERANKERS[args.rerank].name if args.rerank in RERANKERS else "")
            elif args.embed:
                embed = (args.embed, args.model, args.rerank or "")
            r = bench_size(base, n, args.runs, args.reuse_index, shape, embed)
            what = "first recall process, index reused" if args.reuse_index else "from scratch (first recall process)"
            print(f"  index build {what}: {r['build_s']:.2f} s")
            print(f"  recall, warm index, whole process, median:       {r['warm_ms']:.0f} ms "
                  f"({r['warm_ms'] / floor:.1f}x python start; slowest query {max(r['per_query'].values())[0] * 1000:.0f} ms)")
            for q, (t, k) in r["per_query"].items():
                print(f"      {t * 1000:6.0f} ms  {k} hits  {q!r}")
            print(f"  recall after one file changed, median:           {r['changed_ms']:.0f} ms "
                  f"(+{r['changed_ms'] - r['warm_ms']:.0f} ms)")
            print(f"  recall without the watcher (stat every file):    {r['scan_ms']:.0f} ms (first 3 queries)")
            print(f"  peak RSS of a recall process (build included):   {r['rss_mb']:.0f} MB")
            print(f"  peak RSS of the watcher process:                 {r['watcher_mb']:.0f} MB")
            print(f"  index.sqlite size:                               {r['db_mb']:.0f} MB")
            if r["fused"]:
                f = r["fused"]
                print(f"  recall, embedding channel on, warm, median:      {f['median_ms']:.0f} ms (the endpoint's own "
                      f"time for a query: {f['endpoint_ms']:.0f} ms; slowest query "
                      f"{max(f['per_query'].values()) * 1000:.0f} ms)")
                if "rerank_ms" in f:
                    print(f"  recall, embeddings and rerank on, warm, median:  {f['rerank_ms']:.0f} ms (the rerank "
                          f"endpoint's own time for a query's candidates: {f['rerank_endpoint_ms']:.0f} ms)")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
