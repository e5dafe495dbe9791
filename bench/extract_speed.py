"""End-to-end extraction speed with a loopback fake OpenAI server: 1 queued request, and 20 queued requests.

For each case: a fresh example vault pointed at the fake server (tests/support/openai_server.py, a real HTTP server on
127.0.0.1 that answers every call at once with two memory_write calls), N requests queued with `submit.submit` while
the worker lock is held (so no background worker starts), then one whole process `acp memory extract --pending --json`
timed from start to exit. Reported: wall time, time per request, and the in-process split (model call vs the rest:
transcript, related entries, secret scan, git commit) from the outcomes and the cost ledger.

Usage: python bench/extract_speed.py [REPEATS]
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
TRANSCRIPT = HERE.parent / "tests" / "fixtures" / "transcripts" / "openai_chat.json"
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "OPENAI_API_KEY",
                                                        "OPENAI_BASE_URL", "OPENAI_MODEL")}


def one_case(n: int, srv) -> tuple[float, float, int]:
    from acpmem.write import submit, worker
    from acpmem.vault.writer import Vault
    from acpmem.vault.create import init_vault

    with tempfile.TemporaryDirectory() as tmp:
        v = init_vault(Path(tmp) / "vault", example=True)
        toml = v.root / "acpmem.toml"
        toml.write_text(toml.read_text().replace('base_url = ""', f'base_url = "{srv.base_url}"')
                        .replace('model = ""', 'model = "bench-model"'))
        v.close()
        v = Vault(v.root)
        fd = worker.try_worker_lock(v.state_dir)
        try:
            for i in range(n):
                submit.submit(v, type="lesson", note=f"re-entrant session.append, variant {i}", importance=7,
                             session="bench", seq=6, transcript=TRANSCRIPT)
        finally:
            os.close(fd)
        start = time.perf_counter()
        p = subprocess.run([str(Path(sys.executable).parent / "acp"), "memory", "--vault", str(v.root), "extract",
                            "--pending", "--json"], capture_output=True, text=True, env=ENV)
        wall = time.perf_counter() - start
        if p.returncode != 0:
            raise SystemExit(f"extract failed: {p.stderr}\n{p.stdout[:2000]}")
        outcomes = json.loads(p.stdout)["outcomes"]
        written = sum(len(o["entries"]) for o in outcomes)
        model_s = sum((o["usage"] or {}).get("latency_s", 0) for o in outcomes)
        v.close()
        return wall, model_s, written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repeats", nargs="?", type=int, default=3, help="runs per size (default 3)")
    repeats = parser.parse_args().repeats
    if repeats < 1:
        parser.error("repeats must be at least 1")
    from openai_server import fake_openai, reply

    answer = reply.always(reply.writes(
        reply.write("- Guard `session.append` with the per-session lock in `state.ts`.",
                    title="session.append must hold the per-session lock"),
        reply.write("- A boolean flag is not re-entrant: the post-tool hook can fire mid-write."),
        usage=reply.usage(1500, 90, cached=1200)))
    print(f"extract --pending, whole process, loopback fake server (load average {os.getloadavg()[0]:.2f}, "
          f"{os.cpu_count()} CPUs), median of {repeats}")
    for n in (1, 20):
        walls, models, wrote = [], [], 0
        for _ in range(repeats):
            with fake_openai([answer]) as srv:
                wall, model_s, wrote = one_case(n, srv)
            walls.append(wall)
            models.append(model_s)
        w, m = statistics.median(walls), statistics.median(models)
        print(f"  {n:>2} request(s): {w:6.2f} s wall, {w / n * 1000:7.1f} ms per request "
              f"(model calls {m / n * 1000:6.1f} ms each), {wrote} entries written")


if __name__ == "__main__":
    main()
