"""Codex rollouts read as the model saw them (acpmem.hosts.codex), on rollouts the real Codex CLI 0.171.0 wrote
(tests/fixtures/hosts/codex, README there); what Codex tells the MCP server (the request's _meta) resolved to the
session, its rollout and the line of the call; arguments clients add to every tool call dropped, no others."""
from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from helpers_proc import wait_until
from acpmem.core.errors import AcpmemError, TranscriptError
from acpmem.hosts.codex import call_seq, find_rollout, meta_values
from acpmem.hosts.transcripts import close_tool_calls, openai_messages, read_transcript
from acpmem.integrations.mcp_server import MemoryService

FIXTURES = Path(__file__).parent / "fixtures" / "hosts" / "codex"
COMMIT = FIXTURES / "commit-session.jsonl"
RECALL = FIXTURES / "recall-session.jsonl"
THREAD = "01a24149-d60e-7613-a865-620705a5ea55"       # the commit session's id (its session_meta)
REASON = "the ingress proxy buffers whole request bodies in RAM"


def _meta(thread: str = THREAD, call: str = "call_2") -> dict:
    """A tools/call _meta as Codex 0.171.0 sends it (recorded from a real run; the turn metadata shortened)."""
    return {"progress_token": 1, "callId": call, "threadId": thread, "sessionId": thread,
            "windowId": f"{thread}:0", "itemId": "fc_2",
            "x-codex-turn-metadata": {"session_id": thread, "thread_id": thread, "turn_id": "01a2414a-0000-7000",
                                      "codex_version": "0.171.0"}}


def test_a_real_rollout_reads_as_the_conversation_with_tool_calls_and_line_seqs():
    t = read_transcript(COMMIT)
    assert (t.format, t.container) == ("openai", "codex")
    assert [(m.seq, m.role) for m in t.messages] == [(3, "user"), (8, "user"), (11, "assistant"), (12, "assistant"),
                                                     (15, "tool"), (18, "assistant")]
    # developer messages (Codex's instructions, the hook's index) are not the conversation
    assert not any("Long-term memory" in t.text(m) for m in t.messages)
    assert t.messages[1].content == "We settled the upload limit; keep it for later sessions."
    assert REASON in t.messages[2].content
    [tool_call] = t.messages[3].raw["tool_calls"]
    assert tool_call["id"] == "call_2" and tool_call["function"]["name"] == "mcp__acpmem__memory_commit"
    assert json.loads(tool_call["function"]["arguments"]) == {"type": "decision", "note": "upload limit is 100 MB",
                                                              "importance": 7}
    assert t.messages[4].raw["tool_call_id"] == "call_2" and "Noted" in t.messages[4].content
    assert t.last_seq == 18


def test_the_fork_sees_the_turn_up_to_the_commit_as_one_assistant_reply():
    t = read_transcript(COMMIT).upto(12)
    msgs = openai_messages(t)
    assert [m["role"] for m in msgs] == ["user", "user", "assistant"]
    assert REASON in msgs[-1]["content"] and msgs[-1]["tool_calls"][0]["id"] == "call_2"   # text and call joined
    closed = close_tool_calls(msgs, "ok")
    assert closed[-1] == {"role": "tool", "tool_call_id": "call_2", "content": "ok"}


def test_the_recall_session_holds_the_recalled_entry_as_the_tool_output():
    t = read_transcript(RECALL)
    [out] = [m for m in t.messages if m.role == "tool"]
    assert REASON in out.content
    assert [m.raw["tool_calls"][0]["function"]["name"] for m in t.messages if m.raw.get("tool_calls")] == [
        "mcp__acpmem__memory_recall"]


def test_a_last_line_codex_is_still_writing_is_not_read_yet(tmp_path):
    data = COMMIT.read_bytes()
    cut = data[:data.rindex(b'"type":"response_item"') + 40]   # the last response_item, half written
    path = tmp_path / "rollout-torn.jsonl"
    path.write_bytes(cut)
    t = read_transcript(path)
    assert t.last_seq == 15            # the reply at line 18 is not there yet
    # the same cut in the middle of the file is damage, named by its line
    lines = data.split(b"\n")
    lines[11] = lines[11][:50]
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(TranscriptError, match=r"rollout-torn.jsonl:12: not valid JSON"):
        read_transcript(path)


def test_a_rollout_line_that_is_not_one_is_named(tmp_path):
    lines = COMMIT.read_text("utf-8").splitlines()
    bad = json.loads(lines[11])
    bad["payload"]["role"] = "narrator"
    lines[11] = json.dumps(bad)
    path = tmp_path / "rollout-bad.jsonl"
    path.write_text("\n".join(lines) + "\n", "utf-8")
    with pytest.raises(TranscriptError, match=r"rollout-bad.jsonl:12: message with unknown role 'narrator'"):
        read_transcript(path)


def test_what_codex_sends_in_meta_names_the_thread_and_the_call():
    assert meta_values(_meta()) == {"session": THREAD, "call_id": "call_2"}
    as_text = {"x-codex-turn-metadata": json.dumps({"session_id": THREAD})}   # the header form: JSON text
    assert meta_values(as_text) == {"session": THREAD}
    assert meta_values({"threadId": "../../etc/passwd", "callId": "x"}) == {}   # not an id: ignored
    assert meta_values({"acpmem/session": "s1"}) == {} and meta_values(None) == {}


def _codex_home(tmp_path: Path) -> Path:
    home = tmp_path / "codex-home"
    day = home / "sessions" / "2026" / "12" / "04"
    day.mkdir(parents=True)
    shutil.copy(COMMIT, day / f"rollout-2026-12-04T13-41-07-{THREAD}.jsonl")
    return home


def test_the_rollout_is_found_by_thread_and_the_call_by_its_id(tmp_path):
    home = _codex_home(tmp_path)
    path = find_rollout(THREAD, {"CODEX_HOME": str(home)})
    assert path is not None and path.name.endswith(f"{THREAD}.jsonl")
    assert find_rollout(THREAD, {"HOME": str(tmp_path)}) is None          # ~/.codex holds no such thread
    assert find_rollout("*", {"CODEX_HOME": str(home)}) is None           # a pattern is not an id
    assert call_seq(path, "call_2") == 12
    assert call_seq(path, "call_999", wait_s=0) is None


def test_call_seq_waits_for_the_line_codex_writes_after_the_request(tmp_path):
    lines = COMMIT.read_text("utf-8").splitlines(keepends=True)
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(lines[:12]), "utf-8")     # the MCP request arrived before line 12 was written
    go = threading.Event()

    def codex_writes():
        go.wait()
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("".join(lines[12:]))

    writer = threading.Thread(target=codex_writes)
    writer.start()
    go.set()
    try:
        assert call_seq(path, "call_2", wait_s=60) == 12
    finally:
        writer.join()


def test_a_commit_through_mcp_from_codex_cites_the_thread_at_the_call_and_reads_the_rollout(vault, tmp_path,
                                                                                         monkeypatch):
    home = _codex_home(tmp_path)
    monkeypatch.setenv("CODEX_HOME", str(home))
    svc = MemoryService(vault.root, "mcp-server-own-session")
    said = svc.call("memory_commit", {"type": "decision", "note": "upload limit is 100 MB", "importance": 7},
                    _meta())
    assert "Noted" in said
    entry = wait_until(lambda: next(iter((vault.root / "entries").glob("*.md")), None), timeout=120)
    text = entry.read_text("utf-8")
    assert f"session: {THREAD}\n  seq: 12\n" in text
    assert REASON in text                     # from the rollout: the note never said it


def test_arguments_clients_add_to_every_tool_are_dropped_and_no_others(vault):
    svc = MemoryService(vault.root, "s1")
    plain = svc.call("memory_recall", {"query": "upload limit"})
    assert svc.call("memory_recall", {"query": "upload limit", "wait_for_previous": True}) == plain
    with pytest.raises(AcpmemError, match="bogus"):
        svc.call("memory_recall", {"query": "upload limit", "bogus": 1})
    with pytest.raises(AcpmemError, match="bogus"):
        svc.call("memory_commit", {"type": "decision", "note": "n", "importance": 5, "bogus": 1,
                                   "wait_for_previous": True})


@pytest.mark.parametrize("payload", [
    {"type": "message", "role": "user", "content": 7},
    {"type": "message", "role": ["user"], "content": "x"},
    {"type": "message", "role": "user", "content": [1, None, {"type": "input_text", "text": 5}]},
    {"type": "function_call", "name": None, "arguments": "{}", "call_id": "c"},
    {"type": "function_call", "name": "f", "arguments": {"a": 1}, "call_id": 3},
    {"type": "function_call_output", "call_id": "c", "output": {"content": {"content": "deep"}}},
    {"type": "function_call_output", "call_id": None, "output": "x"},
    {"type": "custom_tool_call", "name": "apply_patch", "input": None, "call_id": "c"},
    {"type": "reasoning", "encrypted_content": "…"},
])
def test_odd_rollout_items_are_read_or_named_never_a_crash(payload):
    head = json.dumps({"timestamp": "t", "type": "session_meta", "payload": {"id": THREAD}})
    user = json.dumps({"timestamp": "t", "type": "response_item",
                       "payload": {"type": "message", "role": "user", "content": "hi"}})
    odd = json.dumps({"timestamp": "t", "type": "response_item", "payload": payload})
    try:
        t = read_transcript(f"{head}\n{user}\n{odd}\n")
    except TranscriptError as exc:
        assert ":3:" in exc.message      # the odd line, named
    else:
        assert t.container == "codex" and t.messages[0].content == "hi"
        openai_messages(t)


def test_a_recall_from_codex_is_noted_under_its_thread(example_vault):
    svc = MemoryService(example_vault.root, "mcp-server-own-session")
    text = svc.call("memory_recall", {"query": "rate limit search API"}, _meta())
    assert "<<acpmem-data" in text
    assert any(example_vault.session_dir(THREAD).iterdir())          # the thread's ledger, as the hook's index
    assert not example_vault.session_dir("mcp-server-own-session").exists()
