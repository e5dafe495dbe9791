"""What the pi extension adds to a pi turn, measured in the real pi host (integrations/pi after `npm ci`; the model is
the scripted faux provider, so the model itself costs nothing).

For --turns N pi sessions with the extension and N without it (ACPMEM_PI=off), each of two prompts:
- start-up: from spawning `pi --mode rpc` to its first answer (the extension's `acp memory tools` and index calls
  start with the session and run in the background: they do not delay it);
- index, first turn: from the prompt leaving the client to the model receiving the request, the prompt sent as soon
  as pi answers — with the extension the turn waits for what of `acp memory tools` and `acp memory list --format
  prompt --session S` (both once per session, in parallel) is not done yet; a user who takes longer to type than
  they run waits for neither; the figure is the difference of the medians with and without;
- index, later turns: the same on the session's second prompt (the index is reused, byte for byte);
- memory_commit: from pi's tool_execution_start to its tool_execution_end event (the `acp memory commit` process;
  the fork runs afterwards in the background, here the offline extractor);
- system prompt bytes: UTF-8 bytes of the request's system prompt with the extension minus without, for the
  vault given (empty, or --example: acpmem's ten example entries).
Each time is also printed as a ratio to the same run's `python -c pass`.

    python bench/pi_turn.py [--turns 20] [--example]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

from pi_host import PiHost, call, missing, say  # noqa: E402


def _python_pass() -> float:
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        runs.append((time.perf_counter() - t) * 1000)
    return statistics.median(runs)


def _sessions(host: PiHost, env: dict, turns: int, commit: bool) -> dict:
    first, later, commits, prompt_bytes, startup = [], [], [], [], []
    for _ in range(turns):
        before = len(host.requests())
        t0 = time.time() * 1000
        with host.session(env) as pi:
            pi.state()                     # pi has started (its extensions loaded) once it answers
            startup.append(time.time() * 1000 - t0)
            pi.prompt("We pin pnpm 9: npm broke the lockfile twice.", [say("Noted.")])
            sent1 = pi.last_sent
            steps = [call("memory_commit", type="decision", note="pnpm 9 pinned: npm broke the lockfile twice",
                          importance=7), say("Kept.")] if commit else [say("Kept.")]
            events = pi.prompt("Keep that.", steps)
            sent2 = pi.last_sent
        reqs = host.requests()[before:]
        first.append(reqs[0]["at"] - sent1)
        later.append(reqs[1]["at"] - sent2)
        prompt_bytes.append(len(reqs[0]["systemPrompt"].encode()))
        if commit:
            start = next(e["_received"] for e in events if e.get("type") == "tool_execution_start")
            end = next(e for e in events if e.get("type") == "tool_execution_end")
            assert not end["result"].get("isError") and "Noted (r-" in end["result"]["content"][0]["text"], end
            commits.append(end["_received"] - start)
    return {"first": first, "later": later, "commit": commits, "bytes": prompt_bytes, "startup": startup}


def main() -> int:
    ap = argparse.ArgumentParser(description="What the pi extension adds to a pi turn (real pi host, scripted model).")
    ap.add_argument("--turns", type=int, default=20, help="sessions per configuration (default 20)")
    ap.add_argument("--example", action="store_true", help="a vault with acpmem's ten example entries (default: empty)")
    args = ap.parse_args()
    if args.turns < 1:
        ap.error("--turns must be at least 1")
    why = missing()
    if why:
        print(f"Error: {why}", file=sys.stderr)
        return 1
    acp = Path(sys.executable).parent / "acp"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        project = root / "proj"
        project.mkdir()
        subprocess.run([str(acp), "memory", "init", *(["--example"] if args.example else [])], cwd=project,
                       check=True, capture_output=True)
        env = {"PATH": f"{acp.parent}{os.pathsep}{os.environ['PATH']}"}
        for k in ("OPENAI_BASE_URL", "OPENAI_MODEL", "ACPMEM_VAULT"):
            os.environ.pop(k, None)
        on = _sessions(PiHost(project, root / "on"), env, args.turns, commit=True)
        off = _sessions(PiHost(project, root / "off"), {**env, "ACPMEM_PI": "off"}, args.turns, commit=False)
    base = _python_pass()
    med = statistics.median
    rows = [("pi start-up", med(on["startup"]) - med(off["startup"])),
            ("index, first turn of a session", med(on["first"]) - med(off["first"])),
            ("index, later turns (reused)", med(on["later"]) - med(off["later"])),
            ("memory_commit tool call", med(on["commit"]))]
    print(f"pi turn, median of {args.turns} sessions each way ({'example' if args.example else 'empty'} vault); "
          f"python -c pass = {base:.1f} ms")
    for name, ms in rows:
        print(f"  {name:34s} {ms:8.1f} ms  ({ms / base:5.2f}x python -c pass)")
    print(f"  first-turn latency with / without    {med(on['first']):8.1f} / {med(off['first']):.1f} ms")
    print(f"  system prompt bytes added            {med(on['bytes']) - med(off['bytes']):8.0f} "
          f"({med(off['bytes']):.0f} -> {med(on['bytes']):.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
