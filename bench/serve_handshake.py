"""How long `acp memory serve` takes to answer the MCP `initialize` request, against a bare Python start.

MCP clients (Claude Code, Codex) start their servers asynchronously and may begin the session without the tools of a
server that has not answered `initialize` yet, so the handshake must be about as quick as starting Python at all.
Each run starts a fresh `acp memory serve` process (the console script of this environment) on a new vault, writes
an `initialize` request and times until its answer is read, then `tools/list` (what a client needs before its
first model request); the same for `python -c pass` (until it exits). Prints the medians and the ratio of the
handshake to a Python start; the goal is at most 3.

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


def handshake(vault: Path, env: dict) -> tuple[float, float]:
    """Seconds from start to the initialize answer, and to the tools/list answer (sent as Claude Code does: right
    after the initialize answer, with notifications/initialized)."""
    t = time.perf_counter()
    proc = subprocess.Popen([acp(), "memory", "serve", "--vault", str(vault)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    proc.stdin.write((json.dumps(INIT) + "\n").encode())
    proc.stdin.flush()
    line = proc.stdout.readline()
    took = time.perf_counter() - t
    proc.stdin.write((json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"
                      + json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) + "\n").encode())
    proc.stdin.flush()
    tools = json.loads(proc.stdout.readline())
    listed = time.perf_counter() - t
    proc.stdin.close()
    proc.wait(timeout=60)
    answer = json.loads(line)
    if answer.get("id") != 0 or "result" not in answer or len(tools["result"]["tools"]) != 2:
        raise SystemExit(f"Error: serve answered {line!r} — not an initialize result")
    return took, listed


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
        both = [handshake(vault, env) for _ in range(args.runs)]
    hs, ls = [b[0] for b in both], [b[1] for b in both]
    p, h = statistics.median(py), statistics.median(hs)
    print(f"python -c pass:            median {p * 1000:7.1f} ms  (min {min(py) * 1000:.1f})")
    print(f"serve: initialize answered median {h * 1000:7.1f} ms  (min {min(hs) * 1000:.1f}, max {max(hs) * 1000:.1f})")
    print(f"serve: tools/list answered median {statistics.median(ls) * 1000:7.1f} ms  (max {max(ls) * 1000:.1f})")
    print(f"ratio: {h / p:.2f}x python start (goal: at most 3x)")


if __name__ == "__main__":
    main()
