"""acpmem's reading of Claude Code transcripts, on files the real Claude Code 2.1.197 wrote
(tests/fixtures/claude-code, see its README): the messages, seq = line, the commit turn up to its call, and where a
tool call sits while Claude Code is still writing the file (acpmem.hosts.claude_code)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from acpmem.hosts.claude_code import tool_use_id, tool_use_line, wait_for_tool_use
from acpmem.hosts.transcripts import openai_messages, read_transcript

FIX = Path(__file__).parent / "fixtures" / "claude-code"
COMMIT = FIX / "commit-session.jsonl"


def test_the_commit_session_reads_as_claude_code_with_seq_the_line():
    t = read_transcript(COMMIT)
    assert t.format == "claude-code"
    assert [(m.seq, m.role) for m in t.messages] == [(4, "user"), (7, "assistant"), (8, "assistant"), (9, "user"),
                                                     (10, "assistant")]
    assert t.last_seq == 10
    # the fork's view at the commit's seq (the call's line): the decision text and the call, not the answer after
    said = json.dumps(openai_messages(t.upto(8)))
    assert "Decision: files over 100 MB go through /v2/uploads/chunked" in said
    assert "toolu_commit" in said and "Kept for later sessions." not in said
    # the two lines of one streamed reply become one assistant message with its text and its tool call
    (reply,) = [m for m in openai_messages(t.upto(8)) if m["role"] == "assistant"]
    assert "Decision:" in reply["content"] and reply["tool_calls"][0]["id"] == "toolu_commit"


def test_the_other_real_sessions_read():
    recall = read_transcript(FIX / "recall-session.jsonl")
    assert "/v2/uploads/chunked in 8 MB parts" in json.dumps(openai_messages(recall))
    denied = read_transcript(FIX / "denied-session.jsonl")
    assert "haven't granted it yet" in json.dumps(openai_messages(denied))


def test_the_call_line_is_found_by_its_tool_use_id():
    assert tool_use_line(COMMIT, "toolu_commit") == 8
    assert tool_use_line(COMMIT, "toolu_absent") is None
    assert tool_use_line(COMMIT.with_name("missing.jsonl"), "toolu_commit") is None
    # the id in a tool_result (line 9) or in text does not count: only the assistant's tool_use block
    assert tool_use_line(FIX / "recall-session.jsonl", "toolu_commit") is None


def test_a_line_still_being_written_does_not_count_and_the_wait_sees_it_once_written(tmp_path):
    lines = COMMIT.read_bytes().split(b"\n")
    live = tmp_path / "live.jsonl"
    live.write_bytes(b"\n".join(lines[:8]) + b"\n" + lines[8][:40])   # the call's line half written
    assert tool_use_line(live, "toolu_commit") is None

    def sleep(_):   # Claude Code finishes the turn while acpmem waits
        shutil.copyfile(COMMIT, live)
    now = iter(range(100))
    assert wait_for_tool_use(live, "toolu_commit", timeout=5, sleep=sleep, clock=lambda: next(now)) == 8


def test_the_wait_is_bounded(tmp_path):
    ticks = iter(range(100))
    slept = []
    got = wait_for_tool_use(tmp_path / "never.jsonl", "toolu_x", timeout=3, sleep=slept.append,
                            clock=lambda: next(ticks))
    assert got is None and len(slept) == 2   # clock 1 and 2: wait; 3: the deadline


def test_only_a_well_formed_tool_use_id_is_taken_from_meta():
    assert tool_use_id({"claudecode/toolUseId": "toolu_01AbC-x"}) == "toolu_01AbC-x"
    for bad in ({}, None, {"claudecode/toolUseId": 5}, {"claudecode/toolUseId": "a/../b"},
                {"claudecode/toolUseId": "x" * 200}, {"claudecode/toolUseId": ""}):
        assert tool_use_id(bad) is None


# (file, the compact_boundary's line, the first and last line the summary stands for): what Claude Code 2.1.197 and
# 2.1.337 wrote for the same four turns and `/compact` (2.1.337 adds lines of its own — request blobs holding the
# whole request, a system prompt among them, attachments, queue and cost states — none of them the conversation)
COMPACTED = [("compacted-session.jsonl", 26, 2, 21), ("compacted-session-2.1.337.jsonl", 58, 3, 48)]


@pytest.mark.parametrize("name,boundary,first,last", COMPACTED)
def test_a_real_claude_code_compaction_is_read_as_a_block_covering_the_turns_before_it(name, boundary, first, last):
    t = read_transcript(FIX / name)
    rows = [json.loads(line) for line in (FIX / name).read_bytes().split(b"\n") if line.strip()]
    assert rows[boundary]["subtype"] == "compact_boundary"
    # the conversation before it is Claude Code's user and assistant lines, and nothing else it writes
    assert [m.seq for m in t.events if m.seq < boundary] == [
        n for n, o in enumerate(rows[:boundary]) if o.get("type") in ("user", "assistant")]
    (block,) = t.blocks
    assert block.id == "b1" and t.warnings == ()
    assert "Files over 100 MB use /v2/uploads/chunked." in block.summary
    said = [m.seq for m in t.events if m.role in ("user", "assistant") and m.seq < boundary]
    assert block.seqs == tuple(said) and block.seqs[0] == first and block.seqs[-1] == last
    assert t.block("b1") == block


@pytest.mark.parametrize("name,boundary", [c[:2] for c in COMPACTED])
def test_the_session_start_of_a_compaction_names_the_block_it_makes(tmp_path, vault, name, boundary):
    from acpmem.hosts.claude_code import compactions
    from acpmem.integrations.claude_code import claude_code

    lines = (FIX / name).read_bytes().split(b"\n")
    live = tmp_path / "s.jsonl"
    live.write_bytes(b"\n".join(lines[:boundary + 1]) + b"\n")   # at the hook: the boundary written, not the summary
    assert compactions(live) == 1 and compactions(FIX / "commit-session.jsonl") == 0
    event = {"session_id": "s1", "transcript_path": str(live), "cwd": str(tmp_path), "hook_event_name": "SessionStart"}
    start = claude_code(json.dumps({**event, "source": "startup"}), vault=vault.root, env={})
    compact = claude_code(json.dumps({**event, "source": "compact"}), vault=vault.root, env={})
    index = json.loads(start.stdout)["hookSpecificOutput"]["additionalContext"]
    after = json.loads(compact.stdout)["hookSpecificOutput"]["additionalContext"]
    assert after.startswith(index) and after.endswith("Newest compression block: b1.")   # the index unchanged first
    assert "memory_commit" in after[len(index):]
    # and b1 is the block the finished file holds
    assert read_transcript(FIX / name).block("b1").id == "b1"
