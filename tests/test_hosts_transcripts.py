"""Transcript readers: the four input shapes, seqs, the fork's prefix, the OpenAI conversion, and broken input."""
import json
from pathlib import Path

import pytest

from acpmem.core.errors import TranscriptError
from acpmem.hosts.transcripts import close_tool_calls, openai_messages, read_transcript

FIX = Path(__file__).parent / "fixtures" / "transcripts"


def test_openai_list_is_sent_unchanged_and_in_order():
    t = read_transcript(FIX / "openai_chat.json")
    assert t.format == "openai" and t.container == "json"
    assert [m.seq for m in t.messages] == list(range(7))
    original = json.loads((FIX / "openai_chat.json").read_text())
    sent = openai_messages(t)
    assert sent == original
    # byte-identical when serialised the way a client does
    assert json.dumps(sent) == json.dumps(original)


def test_openai_seq_field_is_the_seq_and_is_not_sent():
    t = read_transcript(str(FIX / "openai_seq.json"))
    assert [m.seq for m in t.messages] == [10, 11, 14, 15]
    prefix = t.upto(14)
    assert [m.seq for m in prefix.messages] == [10, 11, 14]
    sent = openai_messages(prefix)
    assert sent[-1] == {"role": "user", "content": "We decided: never commit the index."}
    assert all("seq" not in m for m in sent)


def test_upto_position_is_inclusive():
    t = read_transcript(FIX / "openai_chat.json")
    assert [m.role for m in t.upto(3).messages] == ["system", "user", "assistant", "tool"]
    assert t.upto(-1).messages == ()


def test_anthropic_conversion_is_faithful():
    t = read_transcript(FIX / "anthropic.json")
    assert t.format == "anthropic"
    assert t.system == [{"type": "text", "text": "You are a helpful agent."}]
    assert [m.seq for m in t.messages] == [0, 1, 2, 3]
    sent = openai_messages(t)
    assert sent == [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": "List the files in /repo and tell me which one holds the lock."},
        {"role": "assistant", "content": "Let me look.",
         "tool_calls": [{"id": "toolu_01", "type": "function",
                         "function": {"name": "bash", "arguments": json.dumps({"command": "ls /repo"})}}]},
        {"role": "tool", "tool_call_id": "toolu_01", "content": "state.ts\nlock.ts"},
        {"role": "user", "content": "Also check lock.ts."},
        {"role": "assistant", "content": "lock.ts holds the per-session lock; 用户偏好：中文回复。"},
    ]
    # the prefix keeps the system prompt
    assert openai_messages(t.upto(0))[0]["role"] == "system"


def test_anthropic_images_become_data_urls():
    doc = {"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAAA"}},
        {"type": "text", "text": "what is this?"}]}]}
    t = read_transcript(json.dumps(doc))
    assert t.format == "anthropic"
    assert openai_messages(t) == [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
        {"type": "text", "text": "what is this?"}]}]


def test_jsonl_one_message_per_line():
    t = read_transcript(FIX / "messages.jsonl")
    assert t.container == "jsonl" and t.format == "openai"
    assert [m.seq for m in t.messages] == [0, 1, 2]
    assert t.messages[2].content == [{"type": "text", "text": "And run tests with pnpm test -r."}]
    assert openai_messages(t)[0] == {"role": "user", "content": "Prefer pnpm over npm in this repo."}


def test_claude_code_session_follows_the_live_branch():
    t = read_transcript(FIX / "claude_code.jsonl")
    assert t.format == "claude-code"
    # line numbers are the seqs; the sidechain (6), the system line (8) and the abandoned branch (9) are not in it
    assert [m.seq for m in t.messages] == [1, 2, 3, 4, 5, 7, 10]
    sent = openai_messages(t)
    assert sent == [
        {"role": "user", "content": "Why does session.append lose entries?"},
        {"role": "assistant", "content": "Reading state.ts.",
         "tool_calls": [{"id": "toolu_1", "type": "function",
                         "function": {"name": "Read", "arguments": json.dumps({"file_path": "/repo/state.ts"})}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "let appending = false;"},
        {"role": "assistant", "content": "A boolean flag is not re-entrant; use the per-session lock."},
        {"role": "user", "content": "Remember the lock lesson."},
    ]


def test_claude_code_upto_takes_the_branch_live_at_that_seq():
    t = read_transcript(FIX / "claude_code.jsonl")
    prefix = t.upto(9)
    # u7 hangs off the system line y1, which hangs off u6: the chain passes through non-message events
    assert [m.seq for m in prefix.messages] == [1, 2, 3, 4, 5, 7, 9]
    assert openai_messages(prefix)[-1] == {"role": "user", "content": "Try a mutex instead."}
    assert [m.seq for m in t.upto(5).messages] == [1, 2, 3, 4, 5]


def test_close_tool_calls_answers_the_open_commit_call():
    t = read_transcript(FIX / "openai_chat.json")
    sent = openai_messages(t)
    closed = close_tool_calls(sent, "Noted.")
    assert closed[:len(sent)] == sent
    assert closed[len(sent):] == [{"role": "tool", "tool_call_id": "call_2", "content": "Noted."}]
    # nothing to close: unchanged
    assert close_tool_calls(sent[:5], "Noted.") == sent[:5]


def test_text_flattens_tool_calls_for_search():
    t = read_transcript(FIX / "anthropic.json")
    assert 'bash({"command": "ls /repo"})' in t.text(t.messages[1])
    assert "state.ts" in t.text(t.messages[2])


@pytest.mark.parametrize("text, fragment", [
    ('[{"role": "user", "content": "hi"},', "<text>:1: not valid JSON"),
    ('[{"role": "robot", "content": "hi"}]', "message 0: missing or unknown role 'robot'"),
    ('[{"role": "user", "content": 5}]', "message 0: content must be text"),
    ('{"role": "user", "content": "a"}\n{"role": "user", "content": "b"\n', "<text>:2: not valid JSON"),
    ('{"role": "user", "content": "a"}\n[1]\n', "<text>:2: expected a JSON object"),
    ('{"messages": [{"seq": 3, "role": "user", "content": "a"}, {"seq": 2, "role": "user", "content": "b"}]}',
     "seq 2 does not follow seq 3"),
    ('{"messages": [{"seq": "x", "role": "user", "content": "a"}]}', "seq must be an integer"),
    ('   \n', "transcript is empty"),
])
def test_broken_transcripts_raise_one_line_errors(text, fragment):
    with pytest.raises(TranscriptError) as info:
        read_transcript(text)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value) and info.value.hint


def test_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "s.jsonl"
    bad.write_text('{"type":"user","message":{"role":"user","content":"a"},"uuid":"1"}\n{"type":"assistant"}\n')
    with pytest.raises(TranscriptError, match=r"s\.jsonl:2: assistant event has no \"message\""):
        read_transcript(bad)
    with pytest.raises(TranscriptError, match="no such transcript file"):
        read_transcript(tmp_path / "missing.json")
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'[{"role": "user",\n "content": "caf\xe9"}]')
    with pytest.raises(TranscriptError, match=r"latin\.json:2: not UTF-8"):
        read_transcript(latin)


def test_forced_format_mismatch_is_explained(tmp_path):
    with pytest.raises(TranscriptError, match="format claude-code"):
        read_transcript(FIX / "claude_code.jsonl", format="jsonl")
    with pytest.raises(TranscriptError, match="Unknown transcript format"):
        read_transcript(FIX / "messages.jsonl", format="yaml")
    with pytest.raises(TranscriptError, match="pass --format jsonl"):
        read_transcript(FIX / "messages.jsonl", format="openai")


def test_anthropic_jsonl_is_converted(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text("\n".join(json.dumps(m) for m in [
        {"seq": 3, "role": "user", "content": "run it"},
        {"seq": 4, "role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
        {"seq": 5, "role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok",
                                                "is_error": True}]},
    ]) + "\n")
    t = read_transcript(f)
    assert (t.format, t.container, [m.seq for m in t.messages]) == ("anthropic", "jsonl", [3, 4, 5])
    assert openai_messages(t)[1:] == [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "[error] ok"},
    ]


def test_claude_code_api_error_lines_are_not_conversation():
    lines = [
        {"type": "user", "uuid": "a", "parentUuid": None, "message": {"role": "user", "content": "hi"}},
        {"type": "assistant", "uuid": "b", "parentUuid": "a", "isApiErrorMessage": True,
         "message": {"id": "e", "role": "assistant", "content": [{"type": "text", "text": "API Error: 529"}]}},
        {"type": "assistant", "uuid": "c", "parentUuid": "b",
         "message": {"id": "m", "role": "assistant", "content": [{"type": "text", "text": "hello"}]}},
    ]
    t = read_transcript("\n".join(json.dumps(x) for x in lines))
    assert openai_messages(t) == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
