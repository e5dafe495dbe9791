"""The per-turn cost of memory that follows the code's branches: `list --format prompt` and `recall` on a vault
whose entries were learned on 20 project branches, as ratios to Python start-up measured in the same run.

Builds a project git repository with a default branch `main` and `--branches` feature branches (default 20) of
three commits each; some are merged into main (a merge, a squash merge), the rest not. The vault at
`<project>/.acp-memory` holds `--size` entries (default 1,000): 60% learned on the branches (each at one of its
branch's commits, as a session writes them), the rest global. A copy of the vault with the same entries, all
global (no `branch:`), is the baseline. HEAD is main. Then, as fresh processes, taking turns:

* `warm`: the command at an unchanged HEAD (the verdicts cached in `.acpmem/branches.json`: what every turn but the
  first after a checkout costs);
* `moved`: the first turn after a commit (the cache holds the verdicts at HEAD~1: they carry over, three git
  runs);
* `cold`: the same with that cache deleted before each run (the first turn at a HEAD never seen: one `git
  rev-list` for every anchor's ancestry, and a few git runs per anchor whose branch is not merged, to look for
  its change under other commits);
* `global`: the same entries without branches (the cost before this feature's filtering).

    python bench/branches_cost.py [--size 1000] [--branches 20] [--runs 15] [--dir DIR]
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

WORDS = ("cache queue session hook lock index deploy token budget retry schema vault merge commit recall "
         "latency worker branch release config secret upload gateway parser render prompt").split()
QUERY = "retry budget"
CWD = tempfile.gettempdir()   # not a checkout: `python -m acpmem` imports the installed package


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x",
                               "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}).stdout.strip()


def build(proj: Path, n: int, branches: int, seed: int = 1, scoped: bool = True) -> dict:
    """The project (main and ``branches`` branches) and a vault of ``n`` entries; what was built."""
    from acpmem.core.entry import Entry
    from acpmem.vault.create import init_vault
    from acpmem.vault.writer import KIND_FORK

    rng = random.Random(seed)
    if not (proj / ".git").exists():
        _git(proj.parent, "init", "-q", "-b", "main", str(proj))
        (proj / "README.md").write_text("readme\n")
        _git(proj, "add", "-A")
        _git(proj, "commit", "-qm", "start")
    learned: list[tuple[str, str]] = []   # (branch, commit) an entry may be learned at
    merged = 0
    if scoped:
        for b in range(branches):
            name = f"feature/f{b:02d}"
            _git(proj, "checkout", "-qb", name, "main")
            for k in range(3):
                f = proj / f"src/f{b:02d}/m{k}.py"
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(f"x = {k}\n")
                _git(proj, "add", "-A")
                _git(proj, "commit", "-qm", f"{name} {k}")
                if k < 2:
                    learned.append((name, _git(proj, "rev-parse", "HEAD")))
            _git(proj, "checkout", "-q", "main")
            if b % 4 == 0:
                _git(proj, "merge", "-q", "--no-ff", name, "-m", f"merge {name}")
                merged += 1
            elif b % 4 == 1:
                _git(proj, "merge", "-q", "--squash", name)
                _git(proj, "commit", "-qm", f"{name}, squashed")
                merged += 1
    v = init_vault(proj / ".acp-memory", rng=rng)
    entries, taken = [], set()
    n_scoped = 0
    for i in range(n):
        ident = v.new_id(taken)
        taken.add(ident)
        title = " ".join(rng.sample(WORDS, 6)).capitalize() + f" ({i})"
        body = "\n".join(f"- {' '.join(rng.sample(WORDS, 10))}." for _ in range(3)) + "\n"
        extra = {}
        if learned and rng.random() < 0.6:
            branch, commit = rng.choice(learned)
            extra = {"branch": branch, "commit": commit}
            n_scoped += 1
        e = Entry(id=ident, title=title, type=rng.choice(("decision", "lesson", "fact", "reference")),
                  importance=rng.randint(1, 10),
                  created=f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}T10:00:00Z",
                  body=body, extra=extra)
        entries.append(e.with_changes(path=v.path_for(ident, title)))
    v.write_entries(entries, subject=f"{n} generated entries", why="benchmark", kind=KIND_FORK)
    v.close()
    return {"scoped": n_scoped, "anchors": len({c for _, c in learned}), "merged": merged}


def run(cmds: dict[str, tuple[list[str], Path | None]], runs: int, env: dict,
        restore: tuple[Path, bytes]) -> dict[str, float]:
    """The median ms of each command, runs taken in turn; a path: that cache file is deleted before each run;
    ``moved`` runs after the cache file is set back to ``restore``'s bytes."""
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(runs):
        for k, (cmd, drop) in cmds.items():
            if drop is not None:
                drop.unlink(missing_ok=True)
            if k == "moved":
                restore[0].write_bytes(restore[1])
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env, cwd=CWD)
            times[k].append((time.perf_counter() - t) * 1000)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--branches", type=int, default=20)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--dir", type=Path, help="build the projects here and keep them (reused when there)")
    args = ap.parse_args()
    if args.size < 1 or args.branches < 1 or args.runs < 1:
        ap.error("--size, --branches and --runs must be at least 1")
    work = args.dir or Path(tempfile.mkdtemp(prefix="acpmem-branches-"))
    env = {**os.environ, "ACPMEM_USER_VAULT": "none"}
    env.pop("ACPMEM_VAULT", None)
    t0 = time.perf_counter()
    built = {}
    for name, scoped in (("branches", True), ("global", False)):
        proj = work / name
        if not (proj / ".acp-memory" / "entries").is_dir():
            shutil.rmtree(proj, ignore_errors=True)
            proj.mkdir(parents=True)
            built[name] = build(proj, args.size, args.branches, scoped=scoped)
    if built:
        b = built.get("branches", {})
        print(f"built in {time.perf_counter() - t0:.0f} s: {b.get('scoped')} of {args.size} entries on "
              f"{args.branches} branches ({b.get('anchors')} learned-at commits, {b.get('merged')} branches merged "
              "into main)")
        time.sleep(3.1)   # past the catalog's racy window: measure the steady state a later turn sees
    floor = statistics.median([_time([sys.executable, "-c", "pass"], env) for _ in range(args.runs)])
    print(f"python {sys.version.split()[0]}, runs={args.runs} (median, whole process, in turn); "
          f"python -c pass: {floor:.1f} ms")
    for label, argv in (("list --format prompt", ["list", "--format", "prompt"]), ("recall", ["recall", QUERY])):
        cmds: dict[str, tuple[list[str], Path | None]] = {}
        proj = work / "branches"
        cache = proj / ".acp-memory" / ".acpmem" / "branches.json"
        for mode, name in (("warm", "branches"), ("moved", "branches"), ("cold", "branches"), ("global", "global")):
            vault = work / name / ".acp-memory"
            cmd = [sys.executable, "-m", "acpmem", *argv, "--vault", str(vault)]
            for _ in range(2):   # the derived caches (catalog, index) made once
                subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, env=env, cwd=CWD)
            cmds[mode] = (cmd, cache if mode == "cold" else None)
        # "moved": the cache as the turn before a commit left it (its verdicts at HEAD~1), restored before each run
        _git(proj, "checkout", "-q", "--detach", "main~1")
        cache.unlink(missing_ok=True)
        subprocess.run(cmds["warm"][0], stdout=subprocess.DEVNULL, check=True, env=env, cwd=CWD)
        before = cache.read_bytes()
        _git(proj, "checkout", "-q", "main")
        subprocess.run(cmds["warm"][0], stdout=subprocess.DEVNULL, check=True, env=env, cwd=CWD)
        got = run(cmds, args.runs, env, restore=(cache, before))
        parts = "  ".join(f"{m} {ms:.0f} ms ({ms / floor:.2f}x)" for m, ms in got.items())
        print(f"{label} at {args.size}: {parts}  warm/global {got['warm'] / got['global']:.3f}  "
              f"moved/global {got['moved'] / got['global']:.3f}")
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


def _time(cmd: list[str], env: dict) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env, cwd=CWD)
    return (time.perf_counter() - t) * 1000


if __name__ == "__main__":
    main()
