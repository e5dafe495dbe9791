"""How long `acp memory commit` takes to return to its caller (target: <= 5x `python -c pass`), as whole processes.

Three timings, median of N runs each (default 15), on a fresh example vault with the offline extractor:
  floor     `python -c pass` — the interpreter alone, for scale;
  console   `acp memory commit …` — the installed console script as it is today;
  typer     the same command through typer (``ACPMEM_NO_FASTPATH=1``), for what the fast path saves.
Each is also printed as a ratio to the floor of the same run. The commit names a transcript and a seq, so the
commit-time checks (the transcript parses and reaches the seq) are part of what is timed.
The background worker's own run is not timed: after each commit the script waits until the queue is empty, so every
commit starts from the same state (and starts a worker, the slower case).

Usage: python bench/commit_speed.py [N]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRANSCRIPT = HERE.parent / "tests" / "fixtures" / "transcripts" / "openai_chat.json"


def wait_idle(root: Path, timeout: float = 60.0) -> None:
    from acpmem.write import requests, worker

    state = root / ".acpmem"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not requests.list_requests(state)[0]:
            fd = worker.try_worker_lock(state)
            if fd is not None:
                os.close(fd)
                return
        time.sleep(0.05)
    raise SystemExit("the worker did not finish")


# Measure what a user's install does: byte-code cached (an environment may set PYTHONDONTWRITEBYTECODE).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str], root: Path, n: int, env: dict | None = None) -> tuple[list[float], list[float]]:
    """Wall times and CPU times (user + sys of the process itself; the detached worker is not its child for long and
    is not counted). CPU time hardly moves with the machine's load; wall time does."""
    out, cpu = [], []
    for i in range(-1, n):   # run -1 warms the byte-code cache and is not counted
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        p = subprocess.run(cmd + (["--note", f"bench note {i}"] if "--type" in cmd else []), capture_output=True,
                           text=True, env={**ENV, **(env or {})})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if i >= 0:
            out.append(time.perf_counter() - start)
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if p.returncode != 0:
            raise SystemExit(f"{cmd[:3]} failed: {p.stderr}")
        wait_idle(root)
    return out, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="?", type=int, default=15, help="runs per timing (default 15)")
    n = parser.parse_args().runs
    if n < 1:
        parser.error("runs must be at least 1")
    from acpmem.vault.create import init_vault

    with tempfile.TemporaryDirectory() as tmp:
        v = init_vault(Path(tmp) / "vault", example=True)
        toml = v.root / "acpmem.toml"
        toml.write_text(toml.read_text().replace('extractor = "auto"', 'extractor = "offline"'))
        args = ["--vault", str(v.root), "commit", "--type", "lesson", "--importance", "7", "--session", "bench",
                "--seq", "6", "--transcript", str(TRANSCRIPT)]
        acp = str(Path(sys.executable).parent / "acp")
        rows = [("floor (python -c pass)", timed([sys.executable, "-c", "pass"], v.root, n)),
                ("console: acp memory commit", timed([acp, "memory", *args], v.root, n)),
                ("through typer (no fast path)", timed([acp, "memory", *args], v.root, n, {"ACPMEM_NO_FASTPATH": "1"}))]
        load = os.getloadavg()[0]
        print(f"acp memory commit, whole process, median of {n} (load average {load:.2f}, {os.cpu_count()} CPUs)")
        floor_wall, floor_cpu = statistics.median(rows[0][1][0]), statistics.median(rows[0][1][1])
        for name, (xs, cpu) in rows:
            print(f"  {name:<32} wall median {statistics.median(xs) * 1000:7.1f} ms (min {min(xs) * 1000:6.1f}, "
                  f"max {max(xs) * 1000:6.1f})   cpu median {statistics.median(cpu) * 1000:6.1f} ms   "
                  f"= {statistics.median(xs) / floor_wall:.1f}x the floor's wall, "
                  f"{statistics.median(cpu) / max(floor_cpu, 1e-9):.1f}x its cpu")
        v.close()


if __name__ == "__main__":
    main()
