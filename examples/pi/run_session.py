"""Two pi sessions with acpmem wired in through the pi extension (integrations/pi), offline: the real pi host (from
npm, `npm ci` in integrations/pi), the model played by a script (pi-ai's faux provider), the fork by acpmem's
offline extractor.

    (cd integrations/pi && npm ci)
    python examples/pi/run_session.py

Session 1: the user states a decision, pi compacts (its own /compact), the extension adds acpmem's memory guidance,
the model calls memory_commit, and the fork writes an entry citing the session. Session 2 (same project): the entry
is in the system prompt pi sends, and memory_recall returns it. Everything happens in a temporary folder; your
~/.pi and vaults are not touched. Prints what pi wrote and sent.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from pi_host import PiHost, call, entries, missing, say  # noqa: E402

ACP = Path(sys.executable).parent / "acp"


def acp(*args: str, cwd: Path) -> str:
    r = subprocess.run([str(ACP), "memory", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if r.returncode:
        sys.exit(r.stderr.strip())
    return r.stdout


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    why = missing()
    if why:
        print(f"Error: {why}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "proj"
        project.mkdir()
        acp("init", cwd=project)
        env = {"PATH": f"{ACP.parent}{os.pathsep}{os.environ['PATH']}", "OPENAI_BASE_URL": "", "ACPMEM_VAULT": ""}
        print(f"$ pi install {ROOT / 'integrations' / 'pi'}   (PI_CODING_AGENT_DIR={tmp}/agent)")
        host = PiHost(project, Path(tmp) / "agent", settings={"compaction": {"keepRecentTokens": 1}})

        print("\n--- session 1")
        with host.session(env) as pi:
            pi.prompt("We decided to pin pnpm 9: npm broke the lockfile twice.", [say("Noted: pnpm 9.")])
            pi.prompt("Add the CI job.", [say("Added: CI runs pnpm install --frozen-lockfile.")])
            summary = "## Goal\nCI for the project.\n\n## Key Decisions\n- Pin pnpm 9: npm broke the lockfile twice."
            pi.compact([say(summary), say(summary)])
            pi.prompt("Keep that decision.", [call("memory_commit", type="decision", importance=8,
                                                   note="pnpm 9 is pinned: npm broke the lockfile twice"),
                                              say("Kept.")])
            one = pi.state()
        for e in entries(one["sessionFile"]):
            if e.get("type") == "compaction":
                print(f"[pi compaction {e['id']}] {e['summary'].splitlines()[0]} …")
            elif e.get("customType") == "acpmem-guidance":
                print("[acpmem guidance, after the compaction]\n" + e["content"])
            elif e.get("type") == "message" and e["message"].get("role") == "toolResult":
                print(f"[{e['message']['toolName']} → ] {e['message']['content'][0]['text']}")
        for _ in range(600):   # the fork runs in the background (offline extractor here)
            listed = json.loads(acp("list", "--json", cwd=project))["entries"]
            if listed:
                break
            time.sleep(0.1)
        else:
            sys.exit("Error: the fork wrote no entry; see `acp memory doctor`")
        entry = listed[0]["id"]
        print(f"\n$ acp memory show {entry}\n" + acp("show", entry, cwd=project))

        print("--- session 2 (a new pi session in the same project)")
        before = len(host.requests())
        with host.session(env) as pi:
            pi.prompt("Which package manager do we use?", [call("memory_recall", query="pnpm lockfile"),
                                                           say("pnpm 9.")])
            two = pi.state()
        sent = host.requests()[before]["systemPrompt"]
        print("[the end of the system prompt pi sent the model]\n" + sent[sent.index("# Long-term memory"):])
        for e in entries(two["sessionFile"]):
            if e.get("type") == "message" and e["message"].get("role") == "toolResult":
                print(f"[memory_recall → ]\n{e['message']['content'][0]['text']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
