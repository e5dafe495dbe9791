"""The per-turn cost of the staleness marks and the citation check: `list --format prompt` and `recall`, with the
checks on and off, as ratios to Python start-up measured in the same run.

Builds a project git repository (a few hundred source files, a history of commits) with its vault at
`<project>/.acp-memory`; every entry records three project files and one of the project's earlier commits (as the
fork writes them), and cites a turn of one of 20 recorded session transcripts with that turn's hash. Later commits
change some of the files, so about one entry in ten is stale. Then, as fresh processes, alternating:

* `list --format prompt` at `--list-size` entries (default 1,000): on, `ACPMEM_CHECKS=off`, and with `--base` the
  same command run by another interpreter whose `acpmem` is a checkout without these features;
* `recall QUERY` at `--recall-size` entries (default 10,000), the same three ways.

    python bench/staleness_cost.py [--list-size 1000] [--recall-size 10000] [--runs 15] [--base PYTHON] [--dir DIR]

A base interpreter: `git worktree add --detach ../base <commit>`, `python -m venv /tmp/base-venv`, and a `.pth`
file in its site-packages naming `../base` and this environment's site-packages (for the dependencies).
"""
from __future__ import annotations

import argparse
import json
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
QUERIES = ("retry budget",)
CWD = tempfile.gettempdir()   # not a checkout: `python -m acpmem` must import the installed package of each Python


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x",
                               "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}).stdout


def build(proj: Path, n: int, seed: int = 1) -> tuple[int, int]:
    """The project, its history and a vault of ``n`` entries; (entries stale, distinct commits recorded)."""
    from acpmem.core.entry import Citation, Entry
    from acpmem.vault.create import init_vault
    from acpmem.vault.writer import KIND_FORK
    from acpmem.read.citecheck import turns_digest
    from acpmem.read.sources import record_transcript
    from acpmem.hosts.transcripts import read_transcript

    rng = random.Random(seed)
    files = [f"src/pkg{i % 12}/mod{i}.py" for i in range(300)]
    for f in files:
        (proj / f).parent.mkdir(parents=True, exist_ok=True)
        (proj / f).write_text(f"# {f}\n")
    _git(proj.parent, "init", "-q", str(proj))
    _git(proj, "add", "-A")
    _git(proj, "commit", "-qm", "start")
    commits = [_git(proj, "rev-parse", "HEAD").strip()]
    for k in range(4):   # the commits entries were written at
        for f in rng.sample(files, 5):
            (proj / f).write_text((proj / f).read_text() + f"# edit {k}\n")
        _git(proj, "commit", "-qam", f"work {k}")
        commits.append(_git(proj, "rev-parse", "HEAD").strip())
    v = init_vault(proj / ".acp-memory", rng=rng)
    tdir = proj.parent / "transcripts"
    tdir.mkdir(exist_ok=True)
    digests = {}
    for s in range(20):
        path = tdir / f"s{s}.json"
        msgs = [{"seq": q, "role": "user" if q % 2 == 0 else "assistant",
                 "content": " ".join(rng.sample(WORDS, 8))} for q in range(50)]
        path.write_text(json.dumps({"messages": msgs}))
        record_transcript(v, f"s{s}", path, "bench")
        t = read_transcript(path)
        for q in range(50):
            digests[(s, q)] = turns_digest(t, (q,))
    entries, taken = [], set()
    for i in range(n):
        ident = v.new_id(taken) if n <= 2000 else f"g{i:07d}"
        taken.add(ident)
        title = " ".join(rng.sample(WORDS, 6)).capitalize() + f" ({i})"
        body = "\n".join(f"- {' '.join(rng.sample(WORDS, 10))}." for _ in range(3)) + "\n"
        s, q = rng.randrange(20), rng.randrange(50)
        e = Entry(id=ident, title=title, type=rng.choice(("decision", "lesson", "fact", "reference")),
                  importance=rng.randint(1, 10),
                  created=f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}T10:00:00Z",
                  body=body, citation=(Citation(f"s{s}", q, hash=digests[(s, q)]),),
                  extra={"files": rng.sample(files, 3), "commit": rng.choice(commits)})
        entries.append(e.with_changes(path=v.path_for(ident, title)))
    v.write_entries(entries, subject=f"{n} generated entries", why="benchmark", kind=KIND_FORK)
    v.close()
    changed = set()
    for k in range(3):   # the history since: about one entry in ten has a changed file
        for f in rng.sample(files, 3):
            (proj / f).write_text((proj / f).read_text() + f"# later {k}\n")
            changed.add(f)
        _git(proj, "commit", "-qam", f"later {k}")
    stale = sum(any(f in changed for f in e.extra["files"]) for e in entries)
    return stale, len(commits)


def median_ms(cmd: list[str], runs: int, env: dict) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def interleaved(cmds: dict[str, tuple[list[str], dict]], runs: int) -> dict[str, float]:
    """The median of each command, runs taken in turn (so drift on a busy machine hits each alike)."""
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(runs):
        for k, (cmd, env) in cmds.items():
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env, cwd=CWD)
            times[k].append((time.perf_counter() - t) * 1000)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list-size", type=int, default=1000)
    ap.add_argument("--recall-size", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--base", help="a Python whose acpmem is a checkout without these features (the third column)")
    ap.add_argument("--dir", type=Path, help="build the projects here and keep them (reused when there)")
    args = ap.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="acpmem-stale-"))
    env = {**os.environ, "ACPMEM_USER_VAULT": "none"}
    modes = {"on": env, "off": {**env, "ACPMEM_CHECKS": "off"}}
    pythons = {"on": sys.executable, "off": sys.executable}
    if args.base:
        modes["base"] = env
        pythons["base"] = args.base
    floor = median_ms([sys.executable, "-c", "pass"], args.runs, env)
    print(f"python {sys.version.split()[0]}, runs={args.runs} (median, whole process, interleaved); "
          f"python -c pass: {floor:.1f} ms")
    for label, n, what in (("list --format prompt", args.list_size, "list"), ("recall", args.recall_size, "recall")):
        proj = work / f"p{n}"
        if not (proj / ".acp-memory" / "entries").is_dir():
            shutil.rmtree(proj, ignore_errors=True)
            proj.mkdir(parents=True)
            t = time.perf_counter()
            stale, ncommits = build(proj, n)
            built = (f"built in {time.perf_counter() - t:.0f} s: {stale} of {n} entries stale, "
                     f"{ncommits} recorded commits")
            time.sleep(3.1)   # past the catalog's racy window: measure the steady state a later turn sees
        else:
            built = "reused"
        vault = str(proj / ".acp-memory")
        cmds = {}
        for mode, menv in modes.items():
            q = QUERIES[0]
            cmd = [pythons[mode], "-m", "acpmem"] + (["list", "--format", "prompt", "--vault", vault] if what == "list"
                         else ["recall", q, "--vault", vault])
            for _ in range(2):   # warm the derived caches (catalog, index, the marks' caches) once
                subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, env=menv, cwd=CWD)
            cmds[mode] = (cmd, menv)
        got = interleaved(cmds, args.runs)
        parts = "  ".join(f"{m} {ms:.0f} ms ({ms / floor:.2f}x)" for m, ms in got.items())
        extra = f"  on/off {got['on'] / got['off']:.3f}" + (f", on/base {got['on'] / got['base']:.3f}"
                                                              if "base" in got else "")
        print(f"{label} at {n}: {parts}{extra}  [{built}]")
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
