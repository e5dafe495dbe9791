"""How long `acp memory import` takes for 1,000 memories, in process: a generated CLAUDE.md of N distinct bullet
points (default 1,000) imported into a fresh vault that already holds M entries (default 200, so every candidate
is checked for duplicates against a real index), then imported a second time (every candidate unchanged).

Printed: the plan alone (``--dry-run``), the apply (plan + one commit), and the re-run, in seconds, with the
candidates per second. Median of R runs (default 3), each on a fresh vault.

Usage: python bench/import_speed.py [--memories N] [--existing M] [--runs R]
"""
from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

SUBJECTS = ["billing", "search", "roster", "webhook", "export", "auth", "queue", "cache", "deploy", "metrics",
            "tenant", "invoice", "schema", "index", "worker", "gateway", "backup", "locale", "upload", "session"]
VERBS = ["runs on", "depends on", "is owned by", "must never call", "is rebuilt by", "writes to", "reads from",
         "is tested with", "is configured in", "is deployed with"]
THINGS = ["Postgres", "Redis", "BullMQ", "S3", "the nightly job", "the admin app", "Fly machines", "Kafka",
          "the audit log", "the feature flags table", "Terraform", "pytest", "the edge proxy", "SQLite FTS5"]


def claude_md(n: int, rng: random.Random) -> str:
    lines = ["# CLAUDE.md", "", "## Project notes", ""]
    for i in range(n):
        s, v, t = rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(THINGS)
        lines.append(f"- The {s} service v{i} {v} {t}; ticket ACME-{1000 + i} records why (owner team {i % 37}).")
    return "\n".join(lines) + "\n"


def one_run(memories: int, existing: int, seed: int) -> tuple[float, float, float]:
    from acpmem.upkeep.importing import import_source
    from acpmem.vault.create import init_vault
    from acpmem.write.remember import remember

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        v = init_vault(Path(tmp) / "vault", rng=random.Random(seed))
        try:
            for i in range(existing):
                remember(v, f"Existing note {i}: the {rng.choice(SUBJECTS)} team meets on day {i % 28} about "
                            f"{rng.choice(THINGS)}.")
            src = Path(tmp) / "CLAUDE.md"
            src.write_text(claude_md(memories, rng), encoding="utf-8")
            t0 = time.perf_counter()
            import_source(v, str(src), dry_run=True)
            t1 = time.perf_counter()
            p = import_source(v, str(src))
            t2 = time.perf_counter()
            again = import_source(v, str(src))
            t3 = time.perf_counter()
            assert p.commit and again.commit is None
            return t1 - t0, t2 - t1, t3 - t2
        finally:
            v.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--existing", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    runs = [one_run(a.memories, a.existing, seed) for seed in range(a.runs)]
    for name, k in (("plan (--dry-run)", 0), ("apply (one commit)", 1), ("re-run (unchanged)", 2)):
        med = statistics.median(r[k] for r in runs)
        print(f"{name:<20} {med:7.2f} s   {a.memories / med:8.0f} memories/s   (median of {a.runs}, "
              f"{a.memories} memories into a vault of {a.existing})")


if __name__ == "__main__":
    main()
