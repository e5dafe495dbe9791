"""How long `acp memory import` takes for 1,000 memories, in process: a generated CLAUDE.md of N distinct bullet
points (default 1,000) imported into a fresh vault that already holds M entries (default 200, so every candidate
is checked for duplicates against a real index), then imported a second time (every candidate unchanged).

Printed: the plan alone (``--dry-run``), the apply (plan + one commit), and the re-run: wall-clock and CPU
seconds, memories per CPU second, and what the plan decided. Median of R runs (default 3), each on a fresh vault.

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
    from acpmem.core.entry import Entry
    from acpmem.vault.writer import KIND_REMEMBER

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        v = init_vault(Path(tmp) / "vault", rng=random.Random(seed))
        try:
            made, taken = [], set()
            for i in range(existing):   # one commit, as an earlier import would have made them
                ident = v.new_id(taken)
                taken.add(ident)
                body = (f"Existing note {i}: the {rng.choice(SUBJECTS)} team meets on day {i % 28} about "
                        f"{rng.choice(THINGS)}.\n")
                made.append(Entry(id=ident, title=body.strip(), type="fact", importance=5, created=v.now(),
                                  body=body, path=v.path_for(ident, body.strip())))
            if made:
                v.write_entries(made, subject="bench: existing entries", why="bench", kind=KIND_REMEMBER)
            src = Path(tmp) / "CLAUDE.md"
            src.write_text(claude_md(memories, rng), encoding="utf-8")
            times = []
            for dry in (True, False, False):
                w, c = time.perf_counter(), time.process_time()
                got = import_source(v, str(src), dry_run=dry)
                times.append((time.perf_counter() - w, time.process_time() - c, got))
            assert times[1][2].commit and times[2][2].commit is None
            return times
        finally:
            v.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--existing", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    runs = [one_run(a.memories, a.existing, seed) for seed in range(a.runs)]
    print(f"{a.memories} memories into a vault of {a.existing} entries, median of {a.runs} run(s); "
          f"this process's CPU time beside the wall clock (a loaded machine stretches the wall clock)")
    for name, k in (("plan (--dry-run)", 0), ("apply (one commit)", 1), ("re-run (unchanged)", 2)):
        wall = statistics.median(r[k][0] for r in runs)
        cpu = statistics.median(r[k][1] for r in runs)
        print(f"{name:<20} wall {wall:7.2f} s   cpu {cpu:7.2f} s   {a.memories / cpu:7.0f} memories per cpu-second   "
              f"{runs[0][k][2].counts()}")


if __name__ == "__main__":
    main()
