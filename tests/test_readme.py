"""The README as a stranger uses it: the tour runs as written, command by command, in a fresh folder."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_tour_runs_as_written(tmp_path):
    text = README.read_text("utf-8")
    tour = text[text.index("## A short tour"):]
    block = re.search(r"```sh\n(.*?)```", tour, re.S).group(1)
    assert block.startswith(". .venv/bin/activate")
    lines = block.splitlines()[1:]           # the venv this test runs in is already "activated" through PATH
    script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", TMPDIR=str(tmp_path),
               EDITOR="true")   # the person's editor: one that saves without changes
    env.pop("ACPMEM_VAULT", None)
    env.pop("VISUAL", None)
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert "Error" not in r.stderr and "Traceback" not in r.stderr
    assert "Use SQLite WAL mode" in r.stdout and "Forgot #" in r.stdout and "forget" in r.stdout
