"""examples/agent_loop.py, run as a real process against the fake OpenAI-compatible server: the main model commits,
the fork writes, the entry lands in the vault."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from openai_server import reply

from acpmem.vault.writer import Vault
from acpmem.write.requests import pending_dir

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent_loop.py"


def _run(vault_root: Path, srv, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update({"OPENAI_BASE_URL": srv.base_url, "OPENAI_MODEL": "test-model", "OPENAI_API_KEY": "sk-test-not-real"})
    return subprocess.run([sys.executable, str(EXAMPLE), "--vault", str(vault_root), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_agent_commits_the_fork_writes_and_the_entry_lands(example_vault, openai_server, tmp_path):
    note = "Deploys go out from release/* branches only"
    openai_server.enqueue(
        reply.writes(reply.call("memory_commit", {"type": "decision", "note": note, "importance": 8},
                                call_id="call_commit1")),
        reply.writes(reply.write("- Production and staging deploy only from `release/*` branches; `main` deploys "
                                 "nowhere.", title="Deploys go out from release/* branches only")),
        reply.text("Got it — I will remember that deploys go out from release/* only."),
    )
    transcript = tmp_path / "conversation.json"
    r = _run(example_vault.root, openai_server, "--session", "demo-1", "--transcript", str(transcript),
             "From now on we deploy only from release/* branches. Remember that.", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "I will remember" in r.stdout

    main1, fork, main2 = openai_server.bodies
    # the main conversation: the index in the system prompt, the two main tools, never memory_write
    assert main1["messages"][0]["role"] == "system" and "Long-term memory" in main1["messages"][0]["content"]
    assert "Session append must be re-entrant" in main1["messages"][0]["content"]
    assert sorted(t["function"]["name"] for t in main1["tools"]) == ["memory_commit", "memory_recall"]
    # the fork repeats the conversation unchanged (prefix cache), closes the commit call with the ack, asks once
    assert fork["messages"][:3] == main2["messages"][:3]
    assert [t["function"]["name"] for t in fork["tools"]] == ["memory_write", "memory_nothing"]
    ack = main2["messages"][3]
    assert ack["role"] == "tool" and ack["tool_call_id"] == "call_commit1" and ack["content"].startswith("Noted (r-")
    assert fork["messages"][3]["content"] == ack["content"]
    assert note in fork["messages"][-1]["content"]

    # the entry is in the vault, cited to the session and the seq of the assistant's memory_commit message
    v = Vault(example_vault.root)
    try:
        written = [e for e in v.load().entries if e.title == "Deploys go out from release/* branches only"]
        assert len(written) == 1
        e = written[0]
        assert (e.type, e.importance) == ("decision", 8)
        assert [(c.session, c.seq) for c in e.citation] == [("demo-1", 2)]
        assert "release/*" in e.body
        assert not list(pending_dir(v.state_dir).glob("*.json"))
    finally:
        v.close()
    # the transcript the loop keeps is OpenAI JSON: system, user, assistant(call), tool(ack), assistant(answer)
    kept = json.loads(transcript.read_text())
    assert [m["role"] for m in kept] == ["system", "user", "assistant", "tool", "assistant"]
    assert kept == main2["messages"] + [kept[-1]]


def test_agent_recall_returns_entries_framed_as_data(example_vault, openai_server, tmp_path):
    openai_server.enqueue(
        reply.writes(reply.call("memory_recall", {"query": "search API rate limit"}, call_id="call_r")),
        reply.text("10 requests per second per key."),
    )
    r = _run(example_vault.root, openai_server, "What is the search API rate limit?", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    tool_msg = openai_server.bodies[1]["messages"][-1]
    assert tool_msg["role"] == "tool" and tool_msg["tool_call_id"] == "call_r"
    assert "10 requests per second per key" in tool_msg["content"] and "<<acpmem-data" in tool_msg["content"]


def test_a_bad_tool_call_is_answered_to_the_model_not_fatal(vault, openai_server, tmp_path):
    openai_server.enqueue(
        reply.writes(reply.call("memory_commit", {"type": "gossip", "note": "x", "importance": 3})),
        reply.text("Sorry."),
    )
    r = _run(vault.root, openai_server, "hi", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    err = openai_server.bodies[1]["messages"][-1]["content"]
    assert err.startswith("Error:") and "type" in err
    assert not list(pending_dir(vault.state_dir).glob("*.json"))
