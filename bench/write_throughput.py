"""Write throughput: P processes × N writes into one vault, each write one ``Vault.write_entries`` (one commit), all
at once — the figure behind "8 × 50 writes" in docs/performance.md — and the git child processes each write starts.

1. Throughput. A fresh vault (``init_vault``); P writer processes start together and each writes N new entries.
   Reported: wall time, ms per write, writes kept (entries in HEAD), commits made (must be P × N + 1), and whether
   ``git status`` is clean afterwards.
2. Children per write. One process writes N entries with a ``git`` on PATH that logs each call and then runs the real
   git: the git processes per write, by subcommand.
3. ``--git-libs``: the commit step alone, in one process, N commits of a new file each: the ``git`` executable as
   acpmem runs it (``status``, ``add``, ``commit``), pygit2 (libgit2: status, index add, write tree, create commit)
   and GitPython (``index.add``, ``index.commit``); median ms per commit, the import time of each library, and the
   live child processes after the last commit. Needs ``pip install pygit2 GitPython`` (bench-only; a library that is
   missing is reported as such).

To compare with another checkout (the "before"), run this script with that checkout first on PYTHONPATH:
    PYTHONPATH=/path/to/other/checkout python bench/write_throughput.py

Usage: python bench/write_throughput.py [--procs 8] [--writes 50] [--git-libs] [--lib-commits 200]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if "acpmem" not in sys.modules and not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WRITER = r"""
import sys
from pathlib import Path
from acpmem.core.entry import Citation, Entry
from acpmem.vault.writer import Vault
root, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
v = Vault(Path(root))
sys.stdin.readline()   # start together
for i in range(n):
    ident = f"{tag}n{i:03d}"
    e = Entry(id=ident, title=f"Writer {tag} note {i}", type="fact", importance=5, created="2026-11-29T12:00:00Z",
              body=f"Body of {ident}.\n", citation=(Citation("s-bench", i),))
    v.write_entries([e.with_changes(path=v.path_for(ident, e.title))], subject=f"add #{ident}", why="bench")
v.close()
"""

GIT_SHIM = """#!/bin/sh
echo "$1 $2 $3 $4" >> "{log}"
exec "{git}" "$@"
"""


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("GIT_AUTHOR_NAME", "bench")
    env.setdefault("GIT_AUTHOR_EMAIL", "bench@example.invalid")
    env.setdefault("GIT_COMMITTER_NAME", "bench")
    env.setdefault("GIT_COMMITTER_EMAIL", "bench@example.invalid")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(_pkg_root())) if p)
    return env


def _pkg_root() -> Path:
    import acpmem

    return Path(acpmem.__file__).resolve().parent.parent


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def throughput(procs: int, writes: int, tmp: Path) -> dict:
    from acpmem.vault.create import init_vault

    root = tmp / "vault"
    init_vault(root).close()
    env = _env()
    ps = [subprocess.Popen([sys.executable, "-c", WRITER, str(root), f"p{p}", str(writes)], stdin=subprocess.PIPE,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
          for p in range(procs)]
    time.sleep(1.0)   # every interpreter started and imported
    t0 = time.monotonic()
    for p in ps:
        p.stdin.write("go\n")
        p.stdin.flush()
    errors = []
    for p in ps:
        _, err = p.communicate(timeout=900)
        if p.returncode:
            errors.append(err[-500:])
    elapsed = time.monotonic() - t0
    files = [f for f in _git(root, "ls-tree", "-r", "--name-only", "HEAD").split()
             if f.startswith("entries/") and f.endswith(".md")]
    commits = int(_git(root, "rev-list", "--count", "HEAD"))
    clean = _git(root, "status", "--porcelain") == ""
    return {"seconds": elapsed, "ms_per_write": elapsed / (procs * writes) * 1000, "kept": len(files),
            "commits": commits, "clean": clean, "errors": errors}


def children_per_write(writes: int, tmp: Path) -> dict:
    from acpmem.vault.create import init_vault

    root = tmp / "count"
    init_vault(root).close()
    shim_dir = tmp / "shim"
    shim_dir.mkdir()
    log = tmp / "git-calls.log"
    real = shutil.which("git")
    (shim_dir / "git").write_text(GIT_SHIM.format(log=log, git=real))
    (shim_dir / "git").chmod(0o755)
    env = _env()
    env["PATH"] = f"{shim_dir}{os.pathsep}{env.get('PATH', '')}"
    p = subprocess.run([sys.executable, "-c", WRITER, str(root), "c", str(writes)], input="go\n", text=True,
                       capture_output=True, env=env, timeout=600, cwd=tmp)
    if p.returncode:
        raise SystemExit(p.stderr[-1000:])
    calls = log.read_text().splitlines() if log.exists() else []
    by: dict[str, int] = {}
    for line in calls:
        words = line.split()
        sub = next((w for i, w in enumerate(words) if i >= 2 and not w.startswith("-")), words[0] if words else "?")
        if words[:1] == ["-C"] and len(words) > 2:
            sub = words[2]
        by[sub] = by.get(sub, 0) + 1
    return {"per_write": len(calls) / writes, "by_command": {k: round(v / writes, 2) for k, v in sorted(by.items())}}


def _children() -> int:
    me, n = os.getpid(), 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == me:
                        n += 1
            except (OSError, ValueError, IndexError):
                continue
    return n


def git_libs(commits: int, tmp: Path) -> list[dict]:
    """The commit step alone: a new file, staged and committed, N times, by each way of driving git."""
    from acpmem.vault.create import init_vault
    from acpmem.vault.gitrun import git

    results = []

    def fresh(name: str) -> Path:
        root = tmp / name
        init_vault(root).close()
        return root

    def body(i: int) -> str:
        return f"---\nid: b{i:05d}\ntitle: note {i}\ntype: fact\nimportance: 5\ncreated: 2026-11-29T12:00:00Z\n---\n- {i}\n"

    # the git executable, as acpmem's writer runs it
    root = fresh("exe")
    times = []
    for i in range(commits):
        rel = f"entries/b{i:05d}.md"
        t = time.perf_counter()
        (root / rel).write_text(body(i))
        git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
        git(root, "add", "-A", "--", rel)
        git(root, "commit", "-q", "--no-verify", "-F", "-", "--", rel, input=f"add {rel}\n")
        times.append(time.perf_counter() - t)
    results.append({"way": "git executable (status, add, commit)", "import_ms": 0.0,
                    "median_ms": statistics.median(times) * 1000, "children_after": _children()})

    try:
        t = time.perf_counter()
        import pygit2
        imp = (time.perf_counter() - t) * 1000
        root = fresh("pygit2")
        repo = pygit2.Repository(str(root))
        sig = pygit2.Signature("bench", "bench@example.invalid")
        times = []
        for i in range(commits):
            rel = f"entries/b{i:05d}.md"
            t = time.perf_counter()
            (root / rel).write_text(body(i))
            repo.status()
            repo.index.read()
            repo.index.add(rel)
            repo.index.write()
            tree = repo.index.write_tree()
            repo.create_commit("HEAD", sig, sig, f"add {rel}\n", tree, [repo.head.target])
            times.append(time.perf_counter() - t)
        clean = _git(root, "status", "--porcelain") == ""
        results.append({"way": f"pygit2 {pygit2.__version__} (status, index add, write tree, commit)",
                        "import_ms": imp, "median_ms": statistics.median(times) * 1000,
                        "children_after": _children(), "clean": clean})
    except ImportError:
        results.append({"way": "pygit2", "missing": "pip install pygit2"})

    try:
        t = time.perf_counter()
        import git as gitpython
        imp = (time.perf_counter() - t) * 1000
        root = fresh("gitpython")
        repo = gitpython.Repo(str(root))
        times = []
        for i in range(commits):
            rel = f"entries/b{i:05d}.md"
            t = time.perf_counter()
            (root / rel).write_text(body(i))
            repo.git.status("--porcelain")
            repo.index.add([rel])
            repo.index.commit(f"add {rel}\n", skip_hooks=True)
            times.append(time.perf_counter() - t)
        kids = _children()
        repo.close()
        results.append({"way": f"GitPython {gitpython.__version__} (status, index.add, index.commit)",
                        "import_ms": imp, "median_ms": statistics.median(times) * 1000, "children_after": kids})
    except ImportError:
        results.append({"way": "GitPython", "missing": "pip install GitPython"})
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=8, help="writer processes (default 8)")
    ap.add_argument("--writes", type=int, default=50, help="writes per process (default 50)")
    ap.add_argument("--git-libs", action="store_true", help="also time the commit step with pygit2 and GitPython")
    ap.add_argument("--lib-commits", type=int, default=200, help="commits per way with --git-libs (default 200)")
    args = ap.parse_args()
    if args.procs < 1 or args.writes < 1 or args.lib_commits < 1:
        ap.error("--procs, --writes and --lib-commits must be at least 1")
    import acpmem

    print(f"acpmem from {Path(acpmem.__file__).resolve().parent}"
          + (" (ACPMEM_GIT=exe: the git executable)" if os.environ.get("ACPMEM_GIT") == "exe" else ""))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        r = throughput(args.procs, args.writes, tmp)
        print(f"{args.procs} processes x {args.writes} writes: {r['seconds']:.2f} s ({r['ms_per_write']:.1f} ms per "
              f"write); kept {r['kept']} of {args.procs * args.writes}; {r['commits']} commits "
              f"(expected {args.procs * args.writes + 1}); git status clean: {r['clean']}")
        for e in r["errors"]:
            print("  writer error:", e)
        c = children_per_write(min(args.writes, 50), tmp)
        print(f"git processes per write: {c['per_write']:.2f} {c['by_command']}")
        if args.git_libs:
            for row in git_libs(args.lib_commits, tmp):
                if "missing" in row:
                    print(f"  {row['way']}: not installed ({row['missing']})")
                else:
                    print(f"  {row['way']}: {row['median_ms']:.2f} ms per commit, import {row['import_ms']:.0f} ms, "
                          f"{row['children_after']} live children after"
                          + (f", status clean: {row['clean']}" if "clean" in row else ""))


if __name__ == "__main__":
    main()
