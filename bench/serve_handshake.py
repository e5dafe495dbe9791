"""How long `acp memory serve` takes to answer the MCP `initialize` request, against a bare Python start.

MCP clients (Claude Code, Codex) start their servers asynchronously and may begin the session without the tools of a
server that has not answered `initialize` yet, so the handshake must be about as quick as starting Python at all.
Each run starts a fresh `acp memory serve` process (the console script of this environment) on a new vault, writes
an `initialize` request and times until its answer is read; the same for `python -c pass` (until it exits). Prints
both medians and their ratio; the goal is a ratio of at most 3.

    python bench/serve_handshake.py [--runs 15]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "0"}}}


def acp() -> str:
    here = Path(sys.executable).with_name("acp")
    return str(here) if here.exists() else (shutil.which("acp") or "acp")


def python_start() -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t


def handshake(vault: Path, env: dict) -> float:
    t = time.perf_counter()
    proc = subprocess.Popen([acp(), "memory", "serve", "--vault", str(vault)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    proc.stdin.write((json.dumps(INIT) + "\n").encode())
    proc.stdin.flush()
    line = proc.stdout.readline()
    took = time.perf_counter() - t
    proc.stdin.close()
    proc.wait(timeout=60)
    answer = json.loads(line)
    if answer.get("id") != 0 or "result" not in answer:
        raise SystemExit(f"Error: serve answered {line!r} — not an initialize result")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        from acpmem.vault.create import init_vault

        vault = Path(tmp) / "vault"
        init_vault(vault).close()
        env = {**os.environ, "ACPMEM_USER_VAULT": "none", "HOME": tmp}
        handshake(vault, env)   # warm the file cache once
        py = [python_start() for _ in range(args.runs)]
        hs = [handshake(vault, env) for _ in range(args.runs)]
    p, h = statistics.median(py), statistics.median(hs)
    print(f"python -c pass:            median {p * 1000:7.1f} ms  (min {min(py) * 1000:.1f})")
    print(f"serve: initialize answered median {h * 1000:7.1f} ms  (min {min(hs) * 1000:.1f}, max {max(hs) * 1000:.1f})")
    print(f"ratio: {h / p:.2f}x python start (goal: at most 3x)")


if __name__ == "__main__":
    main()
