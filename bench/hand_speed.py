"""CPU of one process of each command a host runs at a session's start (`tools`, `nudge`) or a person runs by hand
(`remember`, `init`, `doctor`, `sync`): on the fast path and through typer (``ACPMEM_NO_FASTPATH=1``), alternating,
each run on a fresh copy of the same vaults (an example vault, a user vault, a bare remote the vault syncs with).

Prints the median CPU (user + system of the process and what it starts) of each, and its ratio to the same run's
`python -c pass`. Tests never assert on these figures.

Usage: python bench/hand_speed.py [--runs N] [--acp PATH]
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

COMMANDS = {
    "tools": lambda work, i: ["tools", "--format", "dsh"],
    "nudge": lambda work, i: ["nudge", "--voice", "tier"],
    "remember": lambda work, i: ["remember", f"Deploy fact number {i}, written for timing.", "--type", "fact"],
    "init": lambda work, i: ["init", str(work / f"new{i}")],
    "doctor": lambda work, i: ["doctor"],
    "sync": lambda work, i: ["sync"],
}


def _cpu(argv: list[str], env: dict) -> float:
    """Milliseconds of CPU the process took; a failure stops the benchmark with what it said."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"error: {' '.join(argv)} exited {p.returncode}: {(p.stderr or p.stdout).strip()[:300]}")
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=8, help="runs of each command on each path (1..1000, default 8)")
    ap.add_argument("--acp", default=str(Path(sys.executable).parent / "acp"),
                    help="the acp console script (default: the one beside this Python)")
    args = ap.parse_args()
    if not 1 <= args.runs <= 1000:
        ap.error(f"--runs must be 1..1000, got {args.runs}")
    acp = Path(args.acp)
    if not acp.is_file() or not os.access(acp, os.X_OK):
        ap.error(f"--acp {acp} is not an executable file (install acpmem, or pass its acp)")
    python = str(acp.parent / "python") if (acp.parent / "python").exists() else sys.executable
    base = Path(tempfile.mkdtemp(prefix="acpmem-hand-speed-"))
    try:
        home = base / "home"
        home.mkdir()
        (home / ".gitconfig").write_text("[user]\n\tname = Bench\n\temail = bench@example.invalid\n"
                                         "[init]\n\tdefaultBranch = main\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ACPMEM_", "OPENAI_"))}
        env.update(HOME=str(home), GIT_CONFIG_GLOBAL=str(home / ".gitconfig"), GIT_CONFIG_NOSYSTEM="1",
                   ACPMEM_NO_WATCH="1")
        template = base / "template"
        made = dict(env, ACPMEM_USER_VAULT=str(template / "user"))
        _cpu([str(acp), "memory", "init", str(template / "vault"), "--example"], made)
        _cpu([str(acp), "memory", "init", "--user"], made)
        subprocess.run(["git", "init", "-q", "--bare", str(template / "remote.git")], check=True)
        subprocess.run(["git", "-C", str(template / "vault"), "remote", "add", "origin", "../remote.git"], check=True)
        _cpu([str(acp), "memory", "--vault", str(template / "vault"), "sync"], made)
        floor: list[float] = []
        took = {name: {"fast": [], "typer": []} for name in COMMANDS}
        for i in range(args.runs):
            floor.append(_cpu([python, "-c", "pass"], env))
            for name, argv in COMMANDS.items():
                for path in ("fast", "typer"):
                    work = base / f"run-{i}-{name}-{path}"
                    shutil.copytree(template, work, symlinks=True)
                    run_env = dict(env, ACPMEM_USER_VAULT=str(work / "user"))
                    if path == "typer":
                        run_env["ACPMEM_NO_FASTPATH"] = "1"
                    took[name][path].append(_cpu([str(acp), "memory", "--vault", str(work / "vault"),
                                                   *argv(work, i)], run_env))
                    shutil.rmtree(work)
        p = statistics.median(floor)
        print(f"python -c pass: {p:.0f} ms CPU (median of {args.runs})")
        print(f"{'command':10} {'fast path':>16} {'typer':>16} {'saved':>8}")
        for name, t in took.items():
            fast, typer = statistics.median(t["fast"]), statistics.median(t["typer"])
            print(f"{name:10} {fast:7.0f} ms {fast / p:5.1f}x {typer:7.0f} ms {typer / p:5.1f}x {typer - fast:5.0f} ms")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
