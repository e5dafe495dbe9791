"""bench/efficacy.py end to end on a tiny LoCoMo-shaped conversation and one coding scenario: the offline arm, the
fork arm and the answering model on the loopback OpenAI server (real HTTP, the real fork path), resumable state, and
bad input said in one line."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from openai_server import reply
from scripts import run_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "efficacy.py"
FIX = Path(__file__).resolve().parent / "fixtures" / "efficacy"


def run_process(*args, cwd: Path) -> subprocess.CompletedProcess:
    """The script as a person runs it: ``python bench/efficacy.py ARGS``."""
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def run(*args, cwd: Path) -> subprocess.CompletedProcess:
    """The script in this process, as ``python bench/efficacy.py ARGS`` runs it (``tests/support/scripts.py``),
    without the ~0.3 s of a Python start and imports each run."""
    return run_script(SCRIPT, *args, cwd=cwd)


def model(body: dict):
    """A stand-in model: the fork (a request with tools) writes one entry, with one name no turn holds; an answer
    request gets a short answer."""
    if body.get("tools"):
        return reply.writes(reply.write("Caroline went to an LGBTQ support group and started an adoption application "
                                        "with an agency in Boston; Zebulon helped.", title="Caroline's support group"))
    return reply.text("Boston")


def test_locomo_and_coding_end_to_end_and_resumed(openai_server, tmp_path):
    openai_server.responder = model
    out = tmp_path / "r.json"
    args = ("--locomo", FIX / "locomo-tiny.json", "--scenarios", FIX / "scenarios", "--base-url",
            openai_server.base_url, "--answer-model", "fake-model", "--sample", 3, "--state", tmp_path / "st",
            "--out", out, "--record", tmp_path / "rec")
    r = run_process(*args, cwd=tmp_path)   # once as a person runs it; the other runs call its main() in-process
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    res = json.loads(out.read_text("utf-8"))
    lo = res["locomo"]
    arms = {row["arm"] for row in lo["rows"]}
    assert arms == {"none", "offline", "fork", "raw-turns", "observations", "full"}
    assert len({row["qid"] for row in lo["rows"]}) == 5   # categories 1-4 only: the adversarial one is left out
    # the fork wrote through the real path: a request with tools per session, and entries that cite turns
    forks = [f for f in lo["forks"] if f["arm"] == "fork"]
    assert [f["status"] for f in forks] == ["written", "written"]
    recorded = [json.loads(p.read_text("utf-8")) for p in sorted((tmp_path / "rec").glob("answer-*.json"))]
    assert len(recorded) == 2 + 3 and all(x["request"]["tools"] for x in recorded)   # 2 sessions, 3 commits
    # a run resumed with the same --record adds after the last answer there (it overwrote the first ones)
    again = run("--locomo", FIX / "locomo-tiny.json", "--no-scenarios", "--base-url", openai_server.base_url,
                "--state", tmp_path / "st2", "--record", tmp_path / "rec", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in (tmp_path / "rec").glob("answer-*.json")) == [f"answer-{i:03d}.json"
                                                                               for i in range(1, 8)]
    assert [json.loads(p.read_text("utf-8")) for p in sorted((tmp_path / "rec").glob("answer-*.json"))][:5] \
        == recorded
    # observations cite the gold turns: evidence for every question; no memory: none
    by = lambda arm: [row for row in lo["rows"] if row["arm"] == arm]   # noqa: E731
    assert all(row["evidence"] for row in by("observations"))
    assert not any(row["evidence"] or row["contained"] for row in by("none"))
    assert any(row["contained"] for row in by("full"))
    # nothing invented: the fork's "Zebulon" is in no turn and no note
    fork_inv = [x for x in lo["invented"] if x["arm"] == "fork"]
    assert fork_inv and all("Zebulon" in x["missing"] for x in fork_inv)
    # a host writes a session's memory on that session's day: each arm's entries are created then, not today
    for arm in ("fork", "offline", "raw-turns", "observations"):
        days = {line.split(": ", 1)[1][:10] for f in (tmp_path / "st" / f"locomo-0-{arm}" / "entries").glob("*.md")
                for line in f.read_text("utf-8").splitlines() if line.startswith("created: ")}
        assert days == {"2023-05-08", "2023-05-25"} if arm != "observations" else days <= {"2023-05-08", "2023-05-25"}, arm
    assert all(not x["missing"] for x in lo["invented"] if x["arm"] == "offline")
    # answers: 3 sampled questions per arm; "Boston" is right for one question only
    answers = lo["answers"]
    assert len({a["qid"] for a in answers}) == 3 and {a["arm"] for a in answers} == arms
    assert all(a["f1"] == (1.0 if a["contained"] else 0.0) for a in answers)
    co = res["coding"]
    assert co["scenarios"] == 1 and co["prompts"] == 3
    assert {row["arm"] for row in co["rows"]} == {"none", "offline", "fork", "hand-written"}
    assert all(row["carried"] for row in co["rows"] if row["arm"] == "hand-written")
    assert "| fork |" in r.stdout and "evidence@5" in r.stdout and "nothing invented" in r.stdout
    # the check on its own, over the fork's vault as it stands: the cited turns read back from the transcripts
    alone = subprocess.run([sys.executable, str(ROOT / "bench" / "invented.py"), tmp_path / "st" / "locomo-0-fork"],
                           capture_output=True, text=True, timeout=120)
    assert alone.returncode == 0 and "Zebulon" in alone.stdout and "nothing invented: 0/2" in alone.stdout, alone

    # resumed: the same command again asks the model nothing more and prints the same tables
    calls = len(openai_server.requests)
    again = run(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert len([q for q in openai_server.requests[calls:] if q.path.endswith("/chat/completions")]) == 0
    assert again.stdout.split("\n\n", 1)[1] == r.stdout.split("\n\n", 1)[1]

    # a run stopped before its answers were done is reported on what it has: with one arm's answer to one coding
    # prompt forgotten, --answered-only leaves that prompt out of every arm and asks the model nothing
    state = json.loads((tmp_path / "st" / "state.json").read_text("utf-8"))
    gone = next(k for k in state["answers"] if k.startswith("coding/fork/"))
    del state["answers"][gone]
    (tmp_path / "st" / "state.json").write_text(json.dumps(state), "utf-8")
    calls = len(openai_server.requests)
    part = run(*args, "--answered-only", cwd=tmp_path)
    assert part.returncode == 0, part.stderr
    assert len([q for q in openai_server.requests[calls:] if q.path.endswith("/chat/completions")]) == 0
    co = json.loads(out.read_text("utf-8"))["coding"]
    assert {a["qid"] for a in co["answers"]} == {row["qid"] for row in co["rows"]} - {gone.split("/", 2)[2]}
    assert len(co["answers"]) == 4 * 2


def test_answers_from_some_arms_asked_one_arm_after_another(openai_server, tmp_path):
    """``--answer-arms``: only those arms' contexts are answered; each arm's prompts are asked together, so the
    server's prompt cache keeps the arm's index (interleaved, every prompt would evaluate it again)."""
    openai_server.responder = model
    out = tmp_path / "r.json"
    r = run("--scenarios", FIX / "scenarios", "--base-url", openai_server.base_url, "--answer-model", "fake-model",
            "--answer-arms", "hand-written,none", "--state", tmp_path / "st", "--out", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    answers = json.loads(out.read_text("utf-8"))["coding"]["answers"]
    assert sorted({a["arm"] for a in answers}) == ["hand-written", "none"] and len(answers) == 2 * 3
    asked = [q.body for q in openai_server.requests if q.path.endswith("/chat/completions") and
             not q.body.get("tools")]
    with_memory = ["<memory>" in b["messages"][0]["content"] for b in asked]
    assert with_memory == [False] * 3 + [True] * 3         # "none" first (its rows come first), then the other arm


def test_offline_only_needs_no_model(tmp_path):
    r = run("--locomo", FIX / "locomo-tiny.json", "--scenarios", FIX / "scenarios", "--state", tmp_path / "st",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "| offline |" in r.stdout and "| fork |" not in r.stdout and "answered by the model" not in r.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_input_is_one_line(tmp_path):
    cases = [
        (("--locomo", tmp_path / "missing.json", "--no-scenarios"), "no dataset at"),
        (("--locomo", FIX / "locomo-tiny.json", "--no-scenarios", "--base-url",
          f"http://127.0.0.1:{free_port()}/v1"), "does not answer"),
        (("--locomo", FIX / "README.md", "--no-scenarios"), "not valid JSON"),
        (("--scenarios", tmp_path / "nowhere"), "no scenario folder"),
        (("--no-scenarios",), "nothing to run"),
        (("--answer-arms", "fork,memory"), "no arm 'memory' — --answer-arms takes some of none, offline, fork"),
        (("--fork-answer", "xml"), "invalid choice: 'xml'"),
        (("--skip-conversations", "abc"), "invalid int value: 'abc'"),
        (("--locomo", FIX / "locomo-tiny.json", "--no-scenarios", "--record", FIX / "README.md"),
         "is a file — pass a folder"),
        (("--locomo", FIX / "locomo-tiny.json", "--no-scenarios", "--second-look"),
         "--second-look reads the quoted turns of --fork-answer json"),
    ]
    for args, said in cases:
        r = run(*args, "--state", tmp_path / "st", cwd=tmp_path)
        # an argument that does not parse keeps argparse's status, 2; input that parses but is wrong is 1
        assert r.returncode == (2 if said.startswith("invalid") else 1), (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and said in lines[0] and " — " in lines[0], r.stderr
        assert not r.stdout
    assert not (tmp_path / "st").exists()   # nothing written for bad input
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "invented.py"), tmp_path / "nowhere"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.startswith("Error: no vault at") and r.stderr.count("\n") == 1


def test_state_of_another_run_is_refused(tmp_path):
    first = run("--locomo", FIX / "locomo-tiny.json", "--no-scenarios", "--state", tmp_path / "st", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    other = run("--locomo", FIX / "locomo-tiny.json", "--no-scenarios", "--k", 3, "--state", tmp_path / "st",
                cwd=tmp_path)
    assert other.returncode == 1 and other.stderr.count("\n") == 1 and "other settings" in other.stderr
    # the number of conversations is not a setting of the run: each has its own vaults (report on fewer, or extend)
    fewer = run("--locomo", FIX / "locomo-tiny.json", "--no-scenarios", "--conversations", 1, "--state",
                tmp_path / "st", cwd=tmp_path)
    assert fewer.returncode == 0, fewer.stderr


def test_the_fork_arm_with_json_answers(openai_server, tmp_path):
    """``--fork-answer json``: the fork vaults ask for one JSON object over the quoted turns (no tools), and each
    fact of the answer is an entry citing the turn that holds it."""
    def json_model(body: dict):
        assert "tools" not in body and body["response_format"]["type"] == "json_schema"
        return reply.text(json.dumps({"entries": [{"fact": "Caroline went to an LGBTQ support group."}]}))

    openai_server.responder = json_model
    out = tmp_path / "r.json"
    r = run("--locomo", FIX / "locomo-tiny.json", "--no-scenarios", "--base-url", openai_server.base_url,
            "--fork-answer", "json", "--state", tmp_path / "st", "--out", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text("utf-8"))
    assert res["settings"]["fork"]["answer"] == "json"
    forks = [f for f in res["locomo"]["forks"] if f["arm"] == "fork"]
    assert [f["status"] for f in forks] == ["written", "written"]
    cited = [x for x in res["locomo"]["invented"] if x["arm"] == "fork"]
    assert cited and all(x["checked"] and not x["missing"] for x in cited)   # each rests on a turn that says it
    bad = run("--locomo", FIX / "locomo-tiny.json", "--no-scenarios", "--conversations", 1, "--skip-conversations", 1,
              "--state", tmp_path / "st2", cwd=tmp_path)
    assert bad.returncode == 1 and bad.stderr.startswith("Error: ") and "--skip-conversations" in bad.stderr


def test_the_fork_arm_with_a_second_look(openai_server, tmp_path):
    """``--second-look``: the fork vaults turn ``[extraction] second_look`` on; a window whose answer rests on one of
    its turns is asked again about the others that say something, and the run's settings say so."""
    openai_server.responder = lambda body: reply.text(json.dumps(
        {"entries": [{"fact": "Caroline went to an LGBTQ support group."}]}))
    out = tmp_path / "r.json"
    r = run("--locomo", FIX / "locomo-tiny.json", "--no-scenarios", "--base-url", openai_server.base_url,
            "--fork-answer", "json", "--window-turns", 4, "--second-look", "--state", tmp_path / "st", "--out", out,
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text("utf-8"))
    assert res["settings"]["fork"]["second_look"] is True
    asked = [b["messages"][0]["content"] for b in openai_server.bodies if (b or {}).get("response_format")]
    quoted = [sum(ln.startswith("[turn ") for ln in text.splitlines()) for text in asked]
    forks = [f for f in res["locomo"]["forks"] if f["arm"] == "fork"]
    assert [f["status"] for f in forks] == ["written", "written"]
    assert len(asked) > len(forks)                            # a second look after each session's answer
    assert min(quoted) < max(quoted)                          # asked about fewer turns than the first time
