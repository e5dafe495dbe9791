"""Every benchmark script explains itself with ``--help`` and refuses a wrong argument with a usage line (the scripts
take their data paths as arguments; a user's clone has no benchmark data next to it)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py"))


def test_there_are_benchmark_scripts():
    assert {"list_speed.py", "commit_speed.py", "recall_scale.py", "fuzz_boundaries.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_and_a_bad_argument(name, tmp_path):
    ok = subprocess.run([sys.executable, str(BENCH / name), "--help"], capture_output=True, text=True, timeout=120,
                        cwd=tmp_path)
    assert ok.returncode == 0 and ok.stdout.startswith("usage:") and not ok.stderr, (ok.stdout, ok.stderr)
    bad = subprocess.run([sys.executable, str(BENCH / name), "--no-such-option"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert bad.returncode == 2 and "usage:" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_read_speed_names_an_editable_install(tmp_path):
    """An editable install's ``.pth`` imports its finder at every python start, which the ratios' baseline pays too;
    the benchmark says so rather than print flattered ratios in silence."""
    sys.path.insert(0, str(BENCH))
    try:
        import read_speed
    finally:
        sys.path.remove(str(BENCH))
    (tmp_path / "__editable__.acpmem-0.1.0.pth").write_text("import __editable___acpmem_0_1_0_finder; "
                                                            "__editable___acpmem_0_1_0_finder.install()\n")
    (tmp_path / "__editable__.plain-2.0.pth").write_text("/src/plain\n")     # a path only: nothing imported
    (tmp_path / "other.pth").write_text("import something\n")
    assert read_speed.editable_finders([str(tmp_path)]) == ["acpmem"]
    assert read_speed.editable_finders([str(tmp_path / "none")]) == []


@pytest.mark.parametrize("args", [["--runs", "0"], ["--entries", "-5"], ["--recall-entries", "-1"]])
def test_read_speed_refuses_a_count_out_of_range_in_one_usage_line(args, tmp_path):
    bad = subprocess.run([sys.executable, str(BENCH / "read_speed.py"), *args], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert bad.returncode == 2 and "at least" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_read_speed_refuses_a_file_to_keep_the_vaults_in(tmp_path):
    (tmp_path / "a-file").write_text("x")
    bad = subprocess.run([sys.executable, str(BENCH / "read_speed.py"), "--keep", str(tmp_path / "a-file")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert bad.returncode == 2 and "is a file: pass a folder" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
