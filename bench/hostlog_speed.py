"""Reading a long DSH session log, and ``show --source`` on it: time and peak memory.

Generates a DSH-style zstd log of about ``--events`` events (the worked example's session with filler turns before its
first compaction, so block b1 covers almost all of them), then, each in a fresh process so peak RSS is its own:

* ``read``: ``read_transcript`` of the whole log (streamed; every message event kept, the surface replayed);
* ``block check``: what ``commit --block`` does before it queues: the blocks only (lines that name no compaction
  are skipped unparsed);
* ``last seq``: the seq the MCP server cites when the host passes none — before, by reading the whole log; now by
  the bounded scan (``acpmem.write.transcripts.last_seq``: no message built);
* ``commit``: ``acp memory commit --block b2 --wait --extractor offline`` (reads the log to check the block, then
  the fork reads it again);
* ``show --source``: the entry's cited turns read back from the log.

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Time and peak memory of reading a long DSH session log and of "
                                             "`show --source` on it.")
    ap.add_argument("--events", type=int, default=100_000, help="about how many events the log has (default 100000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement (default 3; medians shown)")
    ap.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it (default: a temporary folder)")
    args = ap.parse_args(argv)

    import make_session

    work = Path(args.keep or tempfile.mkdtemp(prefix="acpmem-hostlog-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "session.jsonl.zstd"
    filler = max(0, (args.events - 30) // 2)
    t = time.perf_counter()
    make_session.write(log, filler)
    gen = time.perf_counter() - t
    plain = len(b"".join(json.dumps(e).encode() + b"\n" for e in make_session.events(filler)))
    print(f"log: {log} — {2 * filler + 30} events, {log.stat().st_size / 1e6:.1f} MB zstd "
          f"({plain / 1e6:.1f} MB of JSONL), generated in {gen:.1f} s")

    rows = {}
    read_code = ("from acpmem.write.transcripts import read_transcript\n"
                 f"t = read_transcript({str(log)!r})\n"
                 "print(len(t.events), len(t.messages), [(b.id, b.tier, len(b.seqs)) for b in t.blocks])")
    rows["read_transcript (whole log)"] = [measure(read_code) for _ in range(args.repeat)]
    print(f"  read: {rows['read_transcript (whole log)'][0][2].strip()}")
    check_code = ("from acpmem.write.transcripts import read_transcript\n"
                  f"print(read_transcript({str(log)!r}, turns=()).block('b2').label())")
    rows["block check at commit (scan)"] = [measure(check_code) for _ in range(args.repeat)]

    last_read = ("from acpmem.write.transcripts import read_transcript\n"
                 f"print(read_transcript({str(log)!r}).last_seq)")
    last_scan = ("from acpmem.write.transcripts import last_seq\n"
                 f"print(last_seq({str(log)!r}))")
    rows["last seq: read whole log (before)"] = [measure(last_read) for _ in range(args.repeat)]
    rows["last seq: scan (MCP server now)"] = [measure(last_scan) for _ in range(args.repeat)]
    a, b = (rows[k][0][2].strip() for k in ("last seq: read whole log (before)", "last seq: scan (MCP server now)"))
    if a != b:
        raise SystemExit(f"the scan found seq {b}, the reader {a}")
    print(f"  last seq: {b}")

    vault = work / "vault"
    env = dict(os.environ, ACPMEM_NO_WATCH="1")
    acp = [sys.executable, "-m", "acpmem"]
    if not vault.exists():
        subprocess.run([*acp, "init", str(vault)], check=True, capture_output=True, env=env)
    commit = [*acp, "--vault", str(vault), "commit", "--type", "decision", "--note", "auth token design",
              "--importance", "8", "--session", "session-3aa366c3", "--seq", "999999999", "--transcript", str(log),
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

    print(f"\n{'step':<34}{'median s':>10}{'peak RSS MB':>14}")
    for name, rs in rows.items():
        print(f"{name:<34}{statistics.median(r[0] for r in rs):>10.2f}{max(r[1] for r in rs):>14.0f}")
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
