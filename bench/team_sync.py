"""Many agents, one remote: N clones of one vault behind a real git server (``git daemon`` on 127.0.0.1), each
writing an entry and syncing R times, all at once and uncoordinated.

    python bench/team_sync.py --agents 10 --rounds 10
    python bench/team_sync.py --agents 20 --rounds 10 --acp /path/to/other/venv/bin/acp   # another acpmem

Prints, for the run: syncs that failed (after sync's own retries), sync latency (median, p90, max), commits on the
remote per entry written, entries lost or duplicated after a final settling pass, wall time, and the same run's
``python -c pass`` time. Every clone is checked at the end: the same HEAD, every entry exactly once.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def python_startup() -> float:
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def start_daemon(base: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack",
                             "--informative-errors", f"--base-path={base}", "--listen=127.0.0.1", f"--port={port}",
                             str(base)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"git://127.0.0.1:{port}/vault.git"
    for _ in range(200):
        if subprocess.run(["git", "ls-remote", url], capture_output=True).returncode == 0:
            return proc, url
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("git daemon did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--acp", default=str(Path(sys.executable).parent / "acp"), help="the acp executable to measure")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = ap.parse_args()
    if a.agents < 1 or a.rounds < 1:
        raise SystemExit("--agents and --rounds must be at least 1")
    acp = a.acp
    startup = python_startup()
    tmp = Path(tempfile.mkdtemp(prefix="acpmem-team-"))
    env = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@localhost", GIT_COMMITTER_NAME="bench",
               GIT_COMMITTER_EMAIL="bench@localhost", ACPMEM_USER_VAULT="none", EDITOR="true")
    env.pop("ACPMEM_VAULT", None)
    daemon = None
    try:
        seed = tmp / "seed" / ".acp-memory"
        subprocess.run([acp, "memory", "init", str(seed)], check=True, capture_output=True, env=env)
        git("clone", "-q", "--bare", str(seed), str(tmp / "vault.git"))
        daemon, url = start_daemon(tmp)
        base_commits = int(git("rev-list", "--count", "main", cwd=tmp / "vault.git"))
        clones = []
        for k in range(a.agents):
            c = tmp / f"agent{k}" / ".acp-memory"
            git("clone", "-q", url, str(c))
            clones.append(c)
        results: list[tuple[int, float, str]] = []
        lock = threading.Lock()

        def agent(k: int) -> None:
            c = clones[k]
            for r in range(a.rounds):
                text = f"Agent {k} learned fact number {r}: the widget cache of shard {k}-{r} expires after {r + 1} h."
                w = subprocess.run([acp, "memory", "--vault", str(c), "remember", "--type", "fact", "--importance",
                                    "5", text], capture_output=True, text=True, env=env)
                if w.returncode != 0:
                    with lock:
                        results.append((1, 0.0, "remember: " + w.stderr.strip()))
                    continue
                t = time.perf_counter()
                s = subprocess.run([acp, "memory", "--vault", str(c), "sync"], capture_output=True, text=True,
                                   env=env)
                with lock:
                    results.append((s.returncode, time.perf_counter() - t, s.stderr.strip()))

        t0 = time.perf_counter()
        threads = [threading.Thread(target=agent, args=(k,)) for k in range(a.agents)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
        # settle: every clone syncs until nothing moves (two sequential passes are enough without contention)
        settle_failures = 0
        for _ in range(2):
            for c in clones:
                s = subprocess.run([acp, "memory", "--vault", str(c), "sync"], capture_output=True, text=True,
                                   env=env)
                settle_failures += s.returncode != 0
        heads = {git("rev-parse", "HEAD", cwd=c).strip() for c in clones}
        server_head = git("rev-parse", "main", cwd=tmp / "vault.git").strip()
        commits = int(git("rev-list", "--count", "main", cwd=tmp / "vault.git")) - base_commits
        merges = int(git("rev-list", "--count", "--merges", "main", cwd=tmp / "vault.git"))
        written = a.agents * a.rounds
        titles = []
        for c in clones[:1]:
            listing = json.loads(subprocess.run([acp, "memory", "--vault", str(c), "list", "--json", "--all"],
                                                capture_output=True, text=True, env=env, check=True).stdout)
            items = listing["entries"] if isinstance(listing, dict) else listing
            titles = [e["title"] for e in items]
        syncs = [r for r in results if not r[2].startswith("remember: ")]
        failed = [r for r in results if r[0] != 0]
        lat = sorted(r[1] for r in syncs if r[0] == 0) or [0.0]
        figures = {
            "agents": a.agents, "rounds": a.rounds, "syncs": len(syncs), "failed": len(failed),
            "failed_share": round(len(failed) / max(1, len(results)), 3),
            "latency_median_s": round(statistics.median(lat), 3),
            "latency_p90_s": round(lat[min(len(lat) - 1, int(0.9 * len(lat)))], 3),
            "latency_max_s": round(lat[-1], 3),
            "commits": commits, "merge_commits": merges, "entries_written": written,
            "commits_per_entry": round(commits / max(1, written), 2),
            "entries_in_clone": len(titles), "distinct_entries": len(set(titles)),
            "clones_converged": len(heads) == 1 and server_head in heads, "settle_failures": settle_failures,
            "wall_s": round(wall, 1), "python_startup_s": round(startup, 4),
            "errors": sorted({r[2].splitlines()[-1][:160] for r in failed if r[2]})[:5],
        }
        if a.json:
            print(json.dumps(figures, indent=2))
        else:
            for k, v in figures.items():
                print(f"{k:>20}: {v}")
    finally:
        if daemon is not None:
            daemon.kill()
            daemon.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
