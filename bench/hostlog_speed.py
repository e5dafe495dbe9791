"""Reading a long DSH session log, and ``show --source`` on it: time and peak memory.

Generates a DSH zstd log of about ``--events`` events in the host's shape (``examples/dsh/make_session.py``: the
header line, ``type, seq, …`` key order, streamed replies as packed chunk rows, turn/step events, two ``compress``
calls with their ``compaction/prune`` events; filler turns before the first compaction, so block b1 covers almost
all of them), and one a tenth as long, then, each in a fresh process so peak RSS is its own:

* ``read``: ``read_transcript`` of the whole log (streamed; every message event kept, the surface replayed);
* ``block check``: what ``commit --block`` does before it queues: the blocks only (event lines that name no
  compaction are skipped unparsed);
* ``last seq``: the seq the MCP server cites when the host passes none — by reading the whole log, and by the
  bounded scan (``acpmem.hosts.transcripts.last_seq``: no message built); ``check_dsh`` is the same scan;
* ``commit``: ``acp memory commit --block b2 --wait --extractor offline`` (reads the log to check the block, then
  the fork reads it again);
* ``show --source``: the entry's cited turns read back from the log.

Times are also given as a ratio to ``python -c pass`` measured in the same run (the interpreter's start-up).

    python bench/hostlog_speed.py --events 100000 --repeat 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "dsh"))


def _child(code: str) -> list[str]:
    """A wrapper process that runs ``code`` in a grandchild and prints that grandchild's peak RSS (KB) and time."""
    wrapper = ("import resource, subprocess, sys, time\n"
               "t = time.perf_counter()\n"
               "r = subprocess.run([sys.executable, '-c', sys.argv[1]], capture_output=True, text=True)\n"
               "took = time.perf_counter() - t\n"
               "sys.stderr.write(r.stderr)\n"
               "print(took, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)\n"
               "sys.stdout.write(r.stdout)\n")
    return [sys.executable, "-c", wrapper, code]


def measure(code: str) -> tuple[float, float, str]:
    r = subprocess.run(_child(code), capture_output=True, text=True)
    head, _, rest = r.stdout.partition("\n")
    took, rss, rc = head.split()
    if rc != "0":
        raise SystemExit(f"failed:\n{r.stderr[-2000:]}")
    return float(took), int(rss) / 1024, rest


def generate(path: Path, events: int) -> tuple[int, str]:
    """Write a log of about ``events`` events; returns its event count and a line on its shape."""
    import make_session

    per = max(1, make_session.session(20).next - make_session.session(0).next) / 20
    base = make_session.session(0).next
    filler = max(0, int((events - base) / per))
    t = time.perf_counter()
    g = make_session.session(filler)
    make_session.write(path, filler)
    took = time.perf_counter() - t
    plain = sum(len(line.encode()) + 1 for line in g.lines())
    rows = sum(1 for r in g.rows if "seq0" in r)
    prunes = sum(1 for r in g.rows if r["type"] == "compaction/prune")
    return g.next, (f"{g.next} events in {len(g.rows)} lines ({rows} packed rows, {prunes} prune events, header "
                    f"line 1), {path.stat().st_size / 1e6:.1f} MB zstd ({plain / 1e6:.1f} MB of JSONL), "
                    f"generated in {took:.1f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Time and peak memory of reading a long DSH session log and of "
                                             "`show --source` on it.")
    ap.add_argument("--events", type=int, default=100_000, help="about how many events the log has (default 100000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement (default 3; medians shown)")
    ap.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it (default: a temporary folder)")
    args = ap.parse_args(argv)

    work = Path(args.keep or tempfile.mkdtemp(prefix="acpmem-hostlog-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "session.jsonl.zstd"
    small = work / "small.jsonl.zstd"
    _, shape = generate(log, args.events)
    print(f"log: {log} — {shape}")
    _, shape = generate(small, args.events // 10)
    print(f"small log: {small} — {shape}")

    rows = {}
    rows["python -c pass"] = [measure("pass") for _ in range(args.repeat)]
    read_code = ("from acpmem.hosts.transcripts import read_transcript\n"
                 f"t = read_transcript({str(log)!r})\n"
                 "print(len(t.events), len(t.messages), [(b.id, b.tier, len(b.seqs)) for b in t.blocks])")
    rows["read_transcript (whole log)"] = [measure(read_code) for _ in range(args.repeat)]
    print(f"  read: {rows['read_transcript (whole log)'][0][2].strip()}")
    for name, path in (("", log), (" (small log)", small)):
        check_code = ("from acpmem.hosts.transcripts import read_transcript\n"
                      f"print(read_transcript({str(path)!r}, turns=()).block('b2').label())")
        rows["block check at commit" + name] = [measure(check_code) for _ in range(args.repeat)]
        last_scan = ("from acpmem.hosts.transcripts import last_seq\n"
                     f"print(last_seq({str(path)!r}))")
        rows["last seq: scan" + name] = [measure(last_scan) for _ in range(args.repeat)]

    last_read = ("from acpmem.hosts.transcripts import read_transcript\n"
                 f"print(read_transcript({str(log)!r}).last_seq)")
    rows["last seq: read whole log"] = [measure(last_read) for _ in range(args.repeat)]
    a, b = (rows[k][0][2].strip() for k in ("last seq: read whole log", "last seq: scan"))
    if a != b:
        raise SystemExit(f"the scan found seq {b}, the reader {a}")
    print(f"  last seq: {b}")
    vault = work / "vault"
    env = dict(os.environ, ACPMEM_NO_WATCH="1")
    acp = [sys.executable, "-m", "acpmem"]
    if not vault.exists():
        subprocess.run([*acp, "init", str(vault)], check=True, capture_output=True, env=env)
    commit = [*acp, "--vault", str(vault), "commit", "--type", "decision", "--note", "auth token design",
              "--importance", "8", "--session", "session-3aa366c3", "--seq", b, "--transcript", str(log),
              "--block", "b2", "--wait", "--extractor", "offline", "--json"]
    commit_code = f"import subprocess, os; subprocess.run({commit!r}, check=True, env=dict(os.environ, " \
                  "ACPMEM_NO_WATCH='1'))"
    runs = []
    for _ in range(args.repeat):
        took, rss, out = measure(commit_code)
        runs.append((took, rss, out))
    rows["commit --block --wait (offline)"] = runs
    entry = json.loads(runs[-1][2])["outcome"]["entries"][0]["id"]
    show = [*acp, "--vault", str(vault), "show", entry, "--source"]
    show_code = f"import subprocess; subprocess.run({show!r}, check=True, stdout=subprocess.DEVNULL)"
    rows["show --source (block b2)"] = [measure(show_code) for _ in range(args.repeat)]

    base = statistics.median(r[0] for r in rows["python -c pass"])
    print(f"\n{'step':<40}{'median s':>10}{'x pass':>8}{'peak RSS MB':>14}")
    for name, rs in rows.items():
        took = statistics.median(r[0] for r in rs)
        print(f"{name:<40}{took:>10.2f}{took / base:>8.1f}{max(r[1] for r in rs):>14.0f}")
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
