"""Every benchmark script explains itself with ``--help`` and refuses a wrong argument with a usage line (the scripts
take their data paths as arguments; a user's clone has no benchmark data next to it)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from scripts import run_script

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py"))


def test_there_are_benchmark_scripts():
    assert {"list_speed.py", "commit_speed.py", "recall_scale.py", "fuzz_boundaries.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_and_a_bad_argument(name, tmp_path):
    # in this process, as `python bench/NAME ...` runs it (tests/support/scripts.py): the script is the point, not
    # a Python start; text_vault.py and hand_speed.py run as real processes below
    ok = run_script(BENCH / name, "--help", cwd=tmp_path)
    assert ok.returncode == 0 and ok.stdout.startswith("usage:") and not ok.stderr, (ok.stdout, ok.stderr)
    bad = run_script(BENCH / name, "--no-such-option", cwd=tmp_path)
    assert bad.returncode == 2 and "usage:" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_a_script_run_in_this_process_sees_what_it_would_alone(tmp_path):
    """``run_script`` (the ``--help`` runs above): a script that needs one of the tests' modules fails as it would
    alone; ``sys.exit("...")`` and an uncaught exception give Python's status and text; the script's own folder is
    first on its import path, and what it imported from there, its folder and its environment do not stay here."""
    (tmp_path / "needs_tests.py").write_text("import openai_server\n")
    (tmp_path / "neighbour.py").write_text("VALUE = 'mine'\n")
    (tmp_path / "says.py").write_text("import os, sys, neighbour\nos.environ['LEFT'] = '1'\nos.chdir('/')\n"
                                      "print(neighbour.VALUE, sys.stdin.read(), os.path.basename(sys.argv[0]))\n"
                                      "sys.exit('stopped: ' + sys.argv[1])\n")
    (tmp_path / "raises.py").write_text("raise ValueError('no')\n")
    r = run_script(tmp_path / "needs_tests.py", cwd=tmp_path)
    assert r.returncode == 1 and "ModuleNotFoundError: No module named 'openai_server'" in r.stderr, r.stderr
    assert "openai_server" in sys.modules    # hidden from the script only
    r = run_script(tmp_path / "says.py", "why", cwd=tmp_path, input="piped")
    assert (r.returncode, r.stdout, r.stderr) == (1, "mine piped says.py\n", "stopped: why\n")
    assert "neighbour" not in sys.modules and "LEFT" not in os.environ and os.getcwd() != "/"
    r = run_script(tmp_path / "raises.py", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.splitlines()[-1] == "ValueError: no", r.stderr


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
    bad = run_script(BENCH / "read_speed.py", *args, cwd=tmp_path)
    assert bad.returncode == 2 and "at least" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_read_speed_times_a_later_turn_of_a_session_that_has_seen_entries(tmp_path):
    """The later-turn row is what it says: each run's session starts with 95 entries seen and surfaces new ones on
    top (not the "nothing new" answer a session that has seen everything gets). So is the long prompt's, in the
    vault of LoCoMo's text: a new session each run, surfacing by the pasted dialogue."""
    keep = tmp_path / "vaults"
    locomo = Path(__file__).resolve().parent / "fixtures" / "efficacy" / "locomo-tiny.json"
    ok = run_script(BENCH / "read_speed.py", "--entries", "130", "--runs", "1", "--recall-entries", "20",
                    "--recall-text", locomo, "--no-server", "--keep", keep, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "surface --prompt, 95 seen" in ok.stdout, ok.stdout
    (new,) = [line for line in ok.stdout.splitlines() if line.startswith("surface --prompt, a new word")]
    assert new.rstrip().endswith("3x"), new       # a per-turn read, with its target
    (row,) = [line for line in ok.stdout.splitlines() if line.startswith("surface, long prompt (20)")]
    assert row.rstrip().endswith("x"), row          # timed, with no target after its ratios
    for name in ("show ID (20)", "list --format prompt (20)"):   # the recall vault's show and index, no target
        (row,) = [line for line in ok.stdout.splitlines() if line.startswith(name)]
        assert row.rstrip().endswith("x") and row.count("x") == 2, row
    long = [json.loads(p.read_text()) for p in keep.glob("t20/.acpmem/sessions/bench-long-*/surfaced.json")]
    assert len(long) == 2 and all(ledger["surfaced"] for ledger in long), long
    ledgers = [json.loads(p.read_text()) for p in keep.glob("v130/.acpmem/sessions/bench-seen-*/surfaced.json")]
    assert len(ledgers) == 2, ledgers          # the warm-up's and the timed run's: a new session each
    for ledger in ledgers:
        assert 95 < len(ledger["surfaced"]) <= 100 and ledger["used_bytes"] > 0, ledger


def test_read_speed_refuses_a_file_to_keep_the_vaults_in(tmp_path):
    (tmp_path / "a-file").write_text("x")
    bad = run_script(BENCH / "read_speed.py", "--keep", tmp_path / "a-file", cwd=tmp_path)
    assert bad.returncode == 2 and "is a file: pass a folder" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_text_vault_writes_locomos_observations_and_turns_and_recall_finds_the_answer(tmp_path):
    """``bench/text_vault.py`` (the real-vocabulary vault `read_speed.py --recall-text` times `recall` in): every
    observation a fact, every turn a reference with its speaker, the texts used again past their count; a LoCoMo
    question recalls the observation holding its answer first."""
    locomo = Path(__file__).resolve().parent / "fixtures" / "efficacy" / "locomo-tiny.json"
    root = tmp_path / "t"
    made = subprocess.run([sys.executable, str(BENCH / "text_vault.py"), str(locomo), str(root), "--entries", "20"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    sys.path.insert(0, str(BENCH))
    try:
        import text_vault
    finally:
        sys.path.remove(str(BENCH))
    pool = text_vault.texts(locomo)
    assert [t for t, _, _ in pool] == ["fact"] * 6 + ["reference"] * 7
    files = sorted((root / "entries").glob("*.md"))
    assert len(files) == 20
    assert "Caroline attended an LGBTQ support group on 7 May 2023." in files[0].read_text()
    assert "(2)" in files[13].read_text() and pool[0][2] in files[13].read_text()   # used again, numbered
    pasted = text_vault.long_prompts(locomo, 120, 9)    # the long prompt of read_speed.py: dialogue, a turn a line
    assert pasted[0].startswith("Caroline: Hey Mel! I went to an LGBTQ support group yesterday and it was so "
                                "powerful.\nMelanie: ")
    assert len(pasted) == 4 and all(len(p) <= 120 and p.split(": ")[0] in ("Caroline", "Melanie") for p in pasted)
    asked = text_vault.questions(locomo, 2)
    assert asked == ["When did Caroline go to the LGBTQ support group?", "What does Melanie paint?"]
    got = run_cli("memory", "--vault", str(root), "recall", asked[1], "--json", "-n", "1",
                  env={"ACPMEM_USER_VAULT": "none"})
    assert got.returncode == 0, got.stderr
    (first,) = json.loads(got.stdout)["hits"]
    assert first["body"].strip() == "Melanie paints a lake sunrise.", first
    again = run_script(BENCH / "text_vault.py", locomo, root, cwd=tmp_path)
    assert again.returncode == 2 and "exists: pass a new folder" in again.stderr


def test_read_speed_refuses_recall_text_that_is_not_a_file(tmp_path):
    bad = run_script(BENCH / "read_speed.py", "--recall-text", tmp_path / "none.json", cwd=tmp_path)
    assert bad.returncode == 2 and "pass the path of locomo10.json" in bad.stderr and "Traceback" not in bad.stderr, \
        bad.stderr


def test_read_speed_refuses_a_locomo_file_without_dialogue_in_one_line(tmp_path):
    """The long prompt is pasted from the dialogue's turns: a file of observations alone is refused when it is
    given, in one line, before any vault is built."""
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps([{"conversation": {"speaker_a": "A", "speaker_b": "B"},
                                  "observation": {"session_1_observation": {"A": [["A likes tea.", "D1:1"]]}},
                                  "qa": [{"question": "What does A like?", "answer": "tea"}]}]))
    bad = run_script(BENCH / "read_speed.py", "--recall-entries", "5", "--recall-text", facts, "--keep",
                     tmp_path / "vaults", cwd=tmp_path)
    assert bad.returncode == 2 and "no dialogue turns" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    assert bad.stderr.strip().splitlines()[-1].count("error:") == 1 and not (tmp_path / "vaults").exists()


@pytest.mark.parametrize("text", ["not json", '{"a": 1}', '[{"conversation": {"session_1": [{"text": "hi"}]}}]', "[]"])
def test_text_vault_and_read_speed_refuse_a_file_that_is_not_locomo_in_one_line(tmp_path, text):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    for cmd in ([BENCH / "text_vault.py", bad, tmp_path / "v"], [BENCH / "read_speed.py", "--recall-text", bad]):
        r = run_script(*cmd, cwd=tmp_path)
        assert r.returncode == 2 and "locomo10.json" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.count("error:") == 1 and "error:" in r.stderr.strip().splitlines()[-1]   # one line says it
    assert not (tmp_path / "v").exists()
    locomo = Path(__file__).resolve().parent / "fixtures" / "efficacy" / "locomo-tiny.json"
    r = run_script(BENCH / "text_vault.py", locomo, bad / "v", "--entries", "3", cwd=tmp_path)
    assert r.returncode == 1 and "could not make the vault" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_hand_speed_times_every_command_on_both_paths(tmp_path):
    """One run of each command on each path, on fresh copies of its vaults: every command is timed (a command that
    failed would stop it with its error), each on both paths, with its ratio to the same run's Python start."""
    p = subprocess.run([sys.executable, str(BENCH / "hand_speed.py"), "--runs", "1"], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0 and not p.stderr, p.stderr
    rows = {line.split()[0]: line.split() for line in p.stdout.splitlines()[2:]}
    assert set(rows) == {"tools", "nudge", "remember", "init", "doctor", "sync"}, p.stdout
    for name, row in rows.items():   # name, fast "ms", ratio, typer "ms", ratio, saved "ms"
        assert row[3].endswith("x") and row[6].endswith("x") and float(row[1]) > 0 and float(row[4]) > 0, row
