"""The review queue and consolidation at scale, through the real command line:

1. ``acp memory review --json`` over P proposals (a vault with ``[write] policy = "review"`` and P proposal files
   committed in one commit, as the fork writes them) — wall time of the whole process, median of R runs.
2. ``acp memory consolidate --dry-run --json`` over E entries (E generated entries, a tenth of them in planted
   near-duplicate pairs and a twentieth in contradicting pairs), first run (the search index built from scratch) and
   warm (median of R runs); the clusters found and the precision and recall of their pairs against the planted ones.

Usage: python bench/review_scale.py [--proposals 1000] [--entries 10000] [--reps 3]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WORDS = ("queue worker lock session index vault cache tenant deploy release build test docker redis postgres "
         "kafka schema migration token header retry backoff timeout latency shard replica bucket upload thumbnail "
         "webhook payment invoice email template locale timezone cron scheduler metric alert dashboard trace span "
         "sampler budget quota limit throttle gateway proxy route handler middleware config secret rotation "
         "certificate domain cluster node pod volume snapshot backup restore archive compress encrypt decrypt hash "
         "signature verify parser lexer grammar compiler linker bundle chunk asset sprite shader texture mesh").split()


def _entry(ident: str, title: str, body: str, created: str = "2026-11-29T12:00:00Z") -> str:
    return (f"---\nid: {ident}\ntitle: {title}\ntype: fact\nimportance: 5\ncreated: {created}\n"
            f"citation:\n- session: s-bench\n  seq: 1\n---\n{body}\n")


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def _acp(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    exe = Path(sys.executable).parent / "acp"
    cmd = [str(exe), "memory", *args] if exe.exists() else [sys.executable, "-m", "acpmem", *args]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode:
        raise SystemExit(r.stderr[-2000:])
    return time.perf_counter() - t, r


def _env_identity() -> None:
    for k, v in (("GIT_AUTHOR_NAME", "bench"), ("GIT_AUTHOR_EMAIL", "bench@example.invalid"),
                 ("GIT_COMMITTER_NAME", "bench"), ("GIT_COMMITTER_EMAIL", "bench@example.invalid")):
        os.environ.setdefault(k, v)


def review_bench(n: int, reps: int, tmp: Path) -> None:
    from acpmem.vault.create import init_vault

    root = tmp / "review"
    init_vault(root).close()
    p = root / "acpmem.toml"
    p.write_text(p.read_text().replace('policy = "auto"', 'policy = "review"'))
    (root / "proposals").mkdir()
    rng = random.Random(1)
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(12))
        (root / "proposals" / f"p{i:05d}.md").write_text(_entry(f"p{i:05d}", f"Proposal {i} about {words[:40]}",
                                                                f"- {words}."))
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "proposals", "--trailer", "Acpmem-Kind: proposal")
    times = []
    for _ in range(reps):
        t, r = _acp("--vault", str(root), "review", "--json")
        times.append(t)
    items = json.loads(r.stdout)["items"]
    print(f"review --json over {n} proposals: {statistics.median(times) * 1000:.0f} ms median of {reps} "
          f"(min {min(times) * 1000:.0f} ms); {len(items)} items listed")


def consolidate_bench(n: int, reps: int, tmp: Path) -> None:
    from acpmem.vault.create import init_vault

    root = tmp / "consolidate"
    init_vault(root).close()
    rng = random.Random(2)
    ents = root / "entries"
    truth: list[tuple[str, str]] = []
    i = 0
    while i < n:
        # common words plus two names of their own (a file, a component), as real entries have
        words = [rng.choice(WORDS) for _ in range(12)] + [f"{rng.choice(WORDS)}{rng.randrange(10**6)}" for _ in range(2)]
        rng.shuffle(words)
        roll = rng.random()
        text = " ".join(words)
        if roll < 0.05 and i + 1 < n:      # near-duplicate pair: two words swapped, one dropped
            a, b = f"e{i:06d}", f"e{i + 1:06d}"
            w2 = words[:]
            w2[2], w2[5] = w2[5], w2[2]
            del w2[9]
            (ents / f"{a}.md").write_text(_entry(a, " ".join(words[:6]), f"- {text}."))
            (ents / f"{b}.md").write_text(_entry(b, " ".join(w2[:6]), f"- {' '.join(w2)}."))
            truth.append((a, b))
            i += 2
        elif roll < 0.075 and i + 1 < n:   # contradiction: the same sentence, another number
            a, b = f"e{i:06d}", f"e{i + 1:06d}"
            (ents / f"{a}.md").write_text(_entry(a, " ".join(words[:6]), f"- {text} is {rng.randint(2, 50)}."))
            (ents / f"{b}.md").write_text(_entry(b, " ".join(words[:6]), f"- {text} is {rng.randint(51, 99)}."))
            truth.append((a, b))
            i += 2
        else:
            a = f"e{i:06d}"
            (ents / f"{a}.md").write_text(_entry(a, " ".join(words[:6]), f"- {text}."))
            i += 1
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "entries")
    first, r = _acp("--vault", str(root), "consolidate", "--dry-run", "--json")
    warm = []
    for _ in range(reps):
        t, r = _acp("--vault", str(root), "consolidate", "--dry-run", "--json")
        warm.append(t)
    doc = json.loads(r.stdout)
    got = {frozenset(p) for c in doc["clusters"] for p in itertools.combinations(c["ids"], 2)}
    want = {frozenset(p) for p in truth}
    prec = len(got & want) / len(got) if got else 1.0
    rec = len(got & want) / len(want) if want else 1.0
    print(f"consolidate --dry-run over {doc['entries']} entries: first run (index built) {first:.2f} s, warm "
          f"{statistics.median(warm):.2f} s median of {reps}; {len(doc['clusters'])} clusters, pair precision "
          f"{prec:.3f}, recall {rec:.3f} against {len(want)} planted pairs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--proposals", type=int, default=1000, help="proposals for review --json (default 1000)")
    ap.add_argument("--entries", type=int, default=10000, help="entries for consolidate --dry-run (default 10000)")
    ap.add_argument("--reps", type=int, default=3, help="timed runs each (default 3)")
    args = ap.parse_args()
    if args.proposals < 1 or args.entries < 2 or args.reps < 1:
        ap.error("--proposals and --reps must be at least 1, --entries at least 2")
    _env_identity()
    with tempfile.TemporaryDirectory() as d:
        review_bench(args.proposals, args.reps, Path(d))
        consolidate_bench(args.entries, args.reps, Path(d))


if __name__ == "__main__":
    main()
