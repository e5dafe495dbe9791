"""Whole-process timing of `acp memory list --format prompt` and `acp memory --help`.

Builds vaults of generated entries through the library (one commit each), warms the derived cache once, then runs
each command as a fresh process several times and prints the median. Each size is measured with the project vault
alone (the user vault turned off) and with a user vault of the same size beside it (both layers read, the token
budget shared).

    python bench/list_speed.py [--sizes 1000,10000] [--runs 15] [--keep DIR] [--no-layers]
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from acpmem.core.entry import Citation, Entry
from acpmem.search import catalog
from acpmem.vault.writer import KIND_FORK
from acpmem.vault.create import init_vault

WORDS = ("cache queue session hook lock index deploy token budget retry schema vault merge commit recall "
         "latency worker branch release config secret upload gateway parser render prompt").split()
ZH = ["缓存", "队列", "会话", "部署", "网关", "上传", "配置", "索引", "合并", "日志"]


def build(root: Path, n: int, seed: int = 1, *, user: bool = False) -> None:
    rng = random.Random(seed)
    v = init_vault(root, rng=rng)
    if user:
        v.layer = "user"   # ids with the user layer's prefix
    entries, taken = [], set()
    for i in range(n):
        ident = v.new_id(taken) if n <= 2000 else (f"u-g{i:07d}" if user else f"g{i:07d}")
        taken.add(ident)
        if i % 7 == 0:
            title = "".join(rng.sample(ZH, 3)) + f"的约定 {i}"
        else:
            title = " ".join(rng.sample(WORDS, 6)).capitalize() + f" ({i})"
        body = "\n".join(f"- {' '.join(rng.sample(WORDS, 10))}." for _ in range(3)) + "\n"
        e = Entry(id=ident, title=title, type=rng.choice(("decision", "lesson", "fact", "reference")),
                  importance=rng.randint(1, 10), created=f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}T10:00:00Z",
                  body=body, citation=(Citation(f"s{rng.randint(1, 50)}", rng.randint(1, 900)),))
        entries.append(e.with_changes(path=v.path_for(ident, title)))
    v.write_entries(entries, subject=f"{n} generated entries", why="benchmark", kind=KIND_FORK)
    v.close()


def median_ms(cmd: list[str], runs: int, env: dict | None = None) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--keep", type=Path, help="build the vaults here and keep them")
    ap.add_argument("--no-layers", action="store_true", help="measure the project vault alone only")
    args = ap.parse_args()
    acp = str(Path(sys.executable).parent / "acp")
    base = args.keep or Path(tempfile.mkdtemp(prefix="acpmem-bench-"))
    floor = median_ms([sys.executable, "-c", "pass"], args.runs)
    print(f"python {sys.version.split()[0]}, runs={args.runs} (median, whole process); python -c pass: {floor:.0f} ms")
    print(f"{'entries':>8}  {'layers':>14}  {'list --format prompt':>21}  {'list --session (frozen)':>24}  "
          f"{'--help':>8}  build")
    for n in (int(s) for s in args.sizes.split(",")):
        root = base / f"v{n}"
        user = base / f"u{n}"
        built = []
        for path, is_user in ((root, False),) + (() if args.no_layers else ((user, True),)):
            if not (path / "entries").is_dir():
                t = time.perf_counter()
                build(path, n, seed=2 if is_user else 1, user=is_user)
                built.append(f"{time.perf_counter() - t:.1f} s")
            else:
                built.append("kept")
        if any(b != "kept" for b in built):    # files this recent are re-checked at each refresh (the catalog's
            time.sleep(catalog.RACY_NS / 1e9)  # racily clean rows): measure the steady state, as a later turn sees
        runs = [("project only", {**os.environ, "ACPMEM_USER_VAULT": "none"})]
        if not args.no_layers:
            runs.append((f"+ user {n}", {**os.environ, "ACPMEM_USER_VAULT": str(user)}))
        for label, env in runs:
            cmd = [acp, "memory", "list", "--format", "prompt", "--vault", str(root)]
            session = f"bench-{label.split()[0]}"
            subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, env=env)  # warm the derived caches once
            subprocess.run(cmd + ["--session", session], stdout=subprocess.DEVNULL, check=True, env=env)
            t_list = median_ms(cmd, args.runs, env)
            t_frozen = median_ms(cmd + ["--session", session], args.runs, env)
            t_help = median_ms([acp, "memory", "--help"], args.runs, env)
            print(f"{n:>8}  {label:>14}  {t_list:>10.0f} ms ({t_list / floor:3.1f}x)  "
                  f"{t_frozen:>13.0f} ms ({t_frozen / floor:3.1f}x)  {t_help:>5.0f} ms  {', '.join(built)}")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
