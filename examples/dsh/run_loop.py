"""The memory loop on a DSH session, offline: a compression block becomes a long-term memory that cites its turns.

1. writes a small DSH-style session log with two compactions (``make_session.py``: b1 tier 1, b2 tier 2 over b1);
2. lists the blocks the log holds (``acp memory blocks``), creates a vault, commits block b2 (``memory_commit`` with ``block``), the way a
   harness does when the model calls it;
3. extracts it with the offline extractor (no model, no network);
4. shows the entry and follows its citation back to the turns (``show --source``).

    python examples/dsh/run_loop.py            # in a temporary folder
    python examples/dsh/run_loop.py --keep DIR # and keep the vault and the log in DIR
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_session  # noqa: E402


def acp(*args: str, cwd: Path) -> str:
    """Run ``acp memory …`` (this Python's acpmem), print the command and its output, return the output."""
    shown = "acp memory " + " ".join(shlex.quote(a) for a in args)
    print(f"\n$ {shown}")
    env = dict(os.environ, ACPMEM_NO_WATCH="1")
    env.pop("ACPMEM_VAULT", None)
    r = subprocess.run([sys.executable, "-m", "acpmem", *args], cwd=cwd, capture_output=True, text=True, env=env)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise SystemExit(f"`{shown}` failed (exit {r.returncode})")
    return r.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the memory loop offline on a generated DSH session: commit a "
                                             "compression block, extract it, follow the citation back.")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temporary folder)")
    args = ap.parse_args(argv)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="acpmem-dsh-"))
    work.mkdir(parents=True, exist_ok=True)
    log = make_session.write(work / "session.jsonl.zstd")
    print(f"DSH session log: {log}")

    from acpmem import read_transcript

    last = read_transcript(log).last_seq      # the seq of the model's memory_commit call: the log's last event
    acp("blocks", str(log), cwd=work)
    acp("init", cwd=work)
    said = acp("commit", "--type", "decision", "--note", "auth token design: JWT + Redis refresh", "--importance",
               "8", "--session", "session-3aa366c3", "--seq", str(last), "--transcript", str(log),
               "--block", "b2", "--extractor", "offline", "--wait", cwd=work)
    entry = re.search(r"wrote 1 entry \(#([A-Za-z0-9_-]+)\)", said)[1]
    acp("show", entry, cwd=work)
    acp("show", entry, "--source", cwd=work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
