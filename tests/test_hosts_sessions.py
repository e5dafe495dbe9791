"""The compression hosts' sessions: DSH zstd event logs and pi session logs with their kernel state, built here as
real files; compression summaries inside ordinary transcripts; committing a block (the fork's request through the
loopback server, the citation written and read back); ``show --source``; hostile logs refused cleanly."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import zstandard

from acpmem.core.blocks import parse_turns, summary_message, turns_text
from acpmem.core.entryfile import parse_entry
from acpmem.core.errors import EntryInvalid, TranscriptError, UsageError
from acpmem.write import context, requests, worker
from acpmem.read import sources
from acpmem.write.submit import submit as real_submit
from acpmem.hosts.transcripts import openai_messages, read_transcript
from openai_server import reply

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "dsh"))
import make_session  # noqa: E402


def zst(path: Path, lines: list, *, frames: int = 1, last_newline: bool = True) -> Path:
    """Write rows (dicts, or raw str/bytes lines) as zstd JSONL, split over ``frames`` frames like appends."""
    raw = [(json.dumps(x, separators=(",", ":")) if isinstance(x, dict) else x) for x in lines]
    data = [(r if isinstance(r, bytes) else r.encode()) + b"\n" for r in raw]
    if not last_newline:
        data[-1] = data[-1][:-1]
    c = zstandard.ZstdCompressor()
    step = max(1, len(data) // frames)
    out = b"".join(c.compress(b"".join(data[i:i + step])) for i in range(0, len(data), step))
    path.write_bytes(out)
    return path


class Log(make_session.DshLog):
    """A DSH event log under construction in the host's shape (``examples/dsh/make_session.py``): the header line,
    then events numbered from 0, streamed replies as packed rows."""

    def __init__(self) -> None:
        super().__init__("session-t1", "/w")

    @property
    def events(self) -> list[dict]:
        return self.rows

    @property
    def last(self) -> int:
        return self.next - 1

    def user(self, text: str) -> int:
        return super().user(text, turn=False)

    def assistant(self, text: str, *calls: tuple[str, str]) -> int:
        return super().assistant(text, [(cid, name, {"q": cid}) for cid, name in calls])

    def compact(self, n: int, lo: int, hi: int, tier: int = 1, summary: str = "", parents=(), **extra) -> int:
        """A compaction of the surface run ``lo`` … ``hi`` (no compress call: checkpoint only)."""
        return self.compaction(n, summary or f"summary {n}", lo, hi, tier=tier, topic=f"topic {n}",
                               parents=parents, **extra)


def five_users() -> list[str]:
    """The lines of a short log: the header and five user messages, seqs 0-4."""
    g = Log()
    for i in range(5):
        g.user(f"u{i}")
    return g.lines()


def three_tiers() -> Log:
    """Turns, then b1 (tier 1), b2 (tier 2 over b1's checkpoint and newer turns), b3 (tier 3 over b2), with an
    assistant turn of two tool calls inside b1, and the rest of a real log between them (turns, steps, streamed
    chunks packed in rows, tool calls)."""
    g = Log()
    g.first = g.user("Design the auth flow")
    g.a = g.assistant("reading the login module and grepping for sessions", ("call_a", "read"), ("call_b", "grep"))
    g.ra = g.result("call_a", "login.ts body")
    g.rb = g.result("call_b", "grep hits")
    g.end_turn()
    g.answer = g.assistant("JWT 15m, refresh in Redis")
    g.cp1 = g.compact(1, g.a, g.answer, 1, "JWT access 15m; refresh in Redis 30d.",
                      effective=[f"{g.a}#call_a", f"{g.a}#call_b", str(g.ra), str(g.rb), str(g.answer)])
    g.t1 = g.user("now tests")
    g.t1b = g.assistant("tests green")
    g.cp2 = g.compact(2, g.cp1, g.t1b, 2, "Auth done; tests green.", parents=[g.cp1])
    g.t2 = g.user("lint")
    g.t2b = g.assistant("lint fixed")
    g.cp3 = g.compact(3, g.cp2, g.t2b, 3, "Source: b2 (3K→0.3K tok, 10x). [auth]\nAuth shipped.", parents=[g.cp2])
    g.tail = g.user("remember it")
    return g


# ---------------------------------------------------------------------------------------------------------- DSH

def test_dsh_log_reads_messages_surface_and_nested_blocks_to_tier_3(tmp_path):
    g = three_tiers()
    t = read_transcript(zst(tmp_path / "session.jsonl.zstd", g.events, frames=3))   # appended frames
    assert t.container == "dsh" and t.format == "openai" and t.warnings == ()
    assert any(e["type"] == "text-chunks" for e in g.events) and "seq" not in g.events[0]   # the real shape
    b1, b2, b3 = t.blocks
    b1_turns = (g.a, g.ra, g.rb, g.answer)
    assert (b1.id, b1.tier, b1.seqs, b1.active, b1.at) == ("b1", 1, b1_turns, False, g.cp1)
    assert b1.compaction_id == "7f3c9a1e-0000-4000-8000-000000000001" and b1.topic == "topic 1"
    # nesting from parentBlockIds (compaction ids); covered turns followed back through checkpoints
    assert (b2.tier, b2.nested, b2.seqs, b2.active) == (2, ("b1",), (*b1_turns, g.t1, g.t1b), False)
    assert (b3.tier, b3.nested, b3.seqs, b3.active) == (3, ("b2",), (*b1_turns, g.t1, g.t1b, g.t2, g.t2b), True)
    # the surface the model saw last: the first turn, the tier-3 checkpoint, the last user turn
    msgs = openai_messages(t)
    assert [m["content"] for m in msgs] == ["Design the auth flow", b3.summary, "remember it"]
    # at the second user turn's reply, before the second compaction: b1's checkpoint in place of its turns
    early = openai_messages(t.upto(g.t1b))
    assert [m["content"] for m in early] == ["Design the auth flow", b1.summary, "now tests", "tests green"]
    # two tool calls in one turn: one assistant message with both calls, results answering them
    before = openai_messages(t.upto(g.rb))
    assert [c["id"] for c in before[1]["tool_calls"]] == ["call_a", "call_b"]
    assert [m.get("tool_call_id") for m in before[2:]] == ["call_a", "call_b"]
    assert [m.seq for m in t.turns(b1.seqs)] == list(b1_turns)
    assert t.last_seq == g.tail == g.last
    # reading only some turns (a scan: event lines that start with their type and seq are not parsed) finds the
    # same blocks, whatever the key order
    for events in (g.events, [dict(reversed(list(e.items()))) for e in g.events]):   # type first, then last
        part = read_transcript(zst(tmp_path / "p.zst", events), turns={g.ra, g.t1})
        assert part.blocks == t.blocks and [m.seq for m in part.events] == [g.ra, g.t1]
        assert read_transcript(tmp_path / "p.zst", turns=()).block("b3") == b3


def test_the_example_session_and_a_plain_jsonl_dsh_log_read_alike(tmp_path):
    z = make_session.write(tmp_path / "s.jsonl.zstd")
    p = make_session.write(tmp_path / "s.jsonl", compressed=False)
    a, b = read_transcript(z), read_transcript(p)
    assert a.blocks == b.blocks and openai_messages(a) == openai_messages(b)
    assert [x.id for x in a.blocks] == ["b1", "b2"] and a.blocks[1].nested == ("b1",)
    assert read_transcript(p, format="dsh").blocks == a.blocks


def test_dsh_unknown_events_truncation_and_a_cut_last_line_are_warnings(tmp_path):
    g = Log()
    g.user("hi")
    g.add("plugin/telemetry", {})                                # a type DSH does not write: one warning
    g.add("plugin/other", {})
    g.add("plugin/telemetry", {})
    g.add("vendor/x", {})
    g.rows[-1]["ignorable"] = True                               # marked ignorable: skipped silently
    g.end_turn()                                                 # the normal vocabulary: no warning
    g.assistant("a reply long enough to be streamed in a packed row")
    t = read_transcript(zst(tmp_path / "u.zst", g.events))
    (w,) = t.warnings
    assert "'plugin/other' ×1, 'plugin/telemetry' ×2" in w and "vendor/x" not in w and "more types" not in w
    assert [m.seq for m in t.events] == [0, g.last]
    many = Log()
    for i in range(20):
        many.add(f"plugin/kind{i:02d}", {})
    many.user("hi")
    (w,) = read_transcript(zst(tmp_path / "m.zst", many.events)).warnings
    assert "'plugin/kind11' ×1" in w and "plugin/kind12" not in w and "and 8 more types" in w   # never a silent cut
    # a half-written last line
    raw = [json.dumps(e) for e in g.events] + ['{"type": "user/message", "seq": ' + str(g.next) + ', "da']
    t = read_transcript(zst(tmp_path / "cut.zst", raw, last_newline=False))
    assert any("cut off" in w for w in t.warnings) and t.events[-1].seq == g.last
    # a file cut in the middle of a frame: what is complete is read, with a warning
    whole = zst(tmp_path / "whole.zst", three_tiers().events, frames=4).read_bytes()
    (tmp_path / "trunc.zst").write_bytes(whole[:int(len(whole) * 0.8)])
    t = read_transcript(tmp_path / "trunc.zst")
    assert any("middle of a zstd frame" in w for w in t.warnings)
    assert 0 < len(t.events) < len(read_transcript(tmp_path / "whole.zst").events)


def test_dsh_packed_rows_stand_for_their_events_and_a_broken_row_is_an_error(tmp_path):
    g = Log()
    g.user("hi")
    g.assistant("one two three four five six seven eight nine ten eleven twelve thirteen")
    rows = [e for e in g.events if e["type"] == "text-chunks"]
    assert rows and len(rows[0]["data"]["texts"]) >= 3
    t = read_transcript(zst(tmp_path / "p.zst", g.events))
    assert t.last_seq == g.last == rows[0]["seq0"] + len(rows[0]["data"]["texts"]) + 3   # block-end, usage, finish
    broken = [e if e is not rows[0] else {**e, "data": {**e["data"], "texts": []}} for e in g.events]
    with pytest.raises(TranscriptError, match="text-chunks row without its texts list"):
        read_transcript(zst(tmp_path / "b.zst", broken))
    off = [e if e is not rows[0] else {**e, "seq0": e["seq0"] + 1} for e in g.events]
    with pytest.raises(TranscriptError, match=rf"seq {rows[0]['seq0'] + 1} where seq {rows[0]['seq0']} was expected"):
        read_transcript(zst(tmp_path / "o.zst", off))


def test_dsh_parent_block_ids_are_compaction_ids_and_an_unknown_one_is_said(tmp_path):
    g = Log()
    a = g.user("one")
    b = g.assistant("two")
    cp = g.compact(1, a, b, 1, "first")
    c = g.user("three")
    g.compact(2, cp, c, 2, "second", parents=[cp])
    g.rows[-3]["data"]["parentBlockIds"].append("0c0c0c0c-0000-4000-8000-00000000dead")
    t = read_transcript(zst(tmp_path / "n.zst", g.events))
    b1, b2 = t.blocks
    assert b2.nested == ("b1",) and not b1.active and b2.active
    (w,) = t.warnings
    assert "names a parent compaction '0c0c0c0c-0000-4000-8000-00000000dead'" in w and "not recorded" in w


def test_dsh_own_compaction_is_rolling_tier_1_summaries_numbered_by_order(tmp_path):
    """``dsh-compaction-basic`` records no tier, kernelBlockId, topic or parents: each compaction re-summarises the
    previous checkpoint. As the host's registry reads it: b1, b2, … all tier 1, none nested, all active; each
    covers what the earlier checkpoint covered."""
    g = Log()
    u = g.user("first")
    r = g.assistant("reply")
    cp1 = g.compaction(1, "summary one", u, r, tier=None, kernel_id=None)
    u2 = g.user("second")
    r2 = g.assistant("reply two")
    g.compaction(2, "summary two", cp1, r2, tier=None, kernel_id=None)
    t = read_transcript(zst(tmp_path / "basic.zst", g.events))
    assert [(b.id, b.tier, b.topic, b.nested, b.active) for b in t.blocks] == [
        ("b1", 1, None, (), True), ("b2", 1, None, (), True)]
    assert t.blocks[1].seqs == (u, r, u2, r2) and t.warnings == ()


@pytest.mark.parametrize("case, message", [
    ("corrupt", "corrupt zstd data"),
    ("huge", "line is over"),
    ("not_utf8", "not UTF-8"),
    ("deep", "nested too deeply"),
    ("seq_back", "where seq 5 was expected"),
    ("not_object", "expected a JSON object"),
    ("bad_json_mid", "not valid JSON"),
    ("header_twice", "where seq 5 was expected"),
])
def test_hostile_dsh_logs_are_one_clean_error(tmp_path, case, message):
    good = five_users()
    path = tmp_path / "bad.zst"
    if case == "corrupt":
        data = bytearray(zst(path, good).read_bytes())
        data[12:40] = b"\xff" * 28
        path.write_bytes(bytes(data))
    elif case == "huge":
        zst(path, [*good, '{"type": "user/message", "seq": 5, "data": {"content": "' + "x" * (17 << 20) + '"}}'])
    elif case == "not_utf8":
        zst(path, [*good, b'{"type": "user/message", "seq": 5, "data": {"content": "\xff\xfe"}}'])
    elif case == "deep":
        zst(path, [*good, "[" * 200_000 + "]" * 200_000, *good[:1]])
    elif case == "seq_back":
        zst(path, [*good, json.dumps({"type": "user/message", "seq": 2, "data": {"content": "x"}})])
    elif case == "not_object":
        zst(path, [*good, "[1, 2]"])
    elif case == "header_twice":   # a header is line 1 only; elsewhere it is an event without its seq in order
        zst(path, [*good, good[0].replace('"version"', '"seq": 0, "version"')])
    else:
        zst(path, [*good, "{not json", *good[:1]])
    with pytest.raises(TranscriptError) as err:
        read_transcript(path)
    line = err.value.line()
    assert message in line and "\n" not in line and str(path) in line and len(line) < 300


# ---------------------------------------------------------------------------------------------------------- pi

def pi_rows(entries: list[dict], session: str = "01a232f6-0000-7000-8000-000000000001") -> list[dict]:
    """A pi session as pi 0.83 writes it: the header, then entries with 8-hex ids each naming the one before as
    ``parentId`` (an entry may name another parent with ``"parentId"``: a branch)."""
    rows = [{"type": "session", "version": 3, "id": session, "timestamp": "2026-12-01T10:00:00.000Z", "cwd": "/w"}]
    prev = None
    for i, e in enumerate(entries):
        ident = e.get("id", f"{0xa0000000 + i:08x}")
        row = {"type": e.get("type", "message"), "id": ident, "parentId": e.get("parentId", prev),
               "timestamp": f"2026-12-01T10:00:{i:02d}.000Z"}
        row.update({k: v for k, v in e.items() if k not in ("type", "id", "parentId")})
        rows.append(row)
        prev = ident
    return rows


def pi_session(tmp_path: Path, state: dict | None, envelope: bool = True) -> Path:
    rows = pi_rows([{"type": "model_change", "id": "0000000a", "provider": "faux", "modelId": "faux-1"},
                    {"id": "000000a1", "message": {"role": "user", "content": [{"type": "text", "text": "Design auth"}]}},
                    {"id": "000000a2", "message": {"role": "assistant", "content": [
                        {"type": "text", "text": "reading"},
                        {"type": "toolCall", "id": "t1", "name": "read", "arguments": {}},
                        {"type": "toolCall", "id": "t2", "name": "grep", "arguments": {"p": 1}}]}},
                    {"id": "000000a3", "message": {"role": "toolResult", "toolCallId": "t1", "toolName": "read",
                                                   "content": [{"type": "text", "text": "file"}], "isError": False}},
                    {"id": "000000a4", "message": {"role": "toolResult", "toolCallId": "t2", "toolName": "grep",
                                                   "content": [{"type": "text", "text": "hits"}], "isError": False}},
                    {"type": "thinking_level_change", "id": "0000000b", "thinkingLevel": "off"},
                    {"id": "000000a5", "message": {"role": "assistant", "content": [{"type": "text", "text": "JWT 15m"}]}},
                    {"id": "000000a6", "message": {"role": "user", "content": [{"type": "text", "text": "remember"}]}}])
    log = tmp_path / "2026-12-01T10-00-00-000Z_01a232f6-0000-7000-8000-000000000001.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if state is not None:
        doc = {"version": 1, "savedAt": 1, "id": rows[0]["id"], "payload": state} if envelope else state
        Path(str(log) + ".acp.json").write_text(json.dumps(doc))
    return log


PI_STATE = {"blocks": [
    {"blockId": "b1", "runId": "r1", "tier": 1, "topic": "reading", "summary": "Read login and grep.",
     "effectiveMessageIds": ["000000a2#t1", "000000a2#t2", "m00003", "000000a4"], "directBlockIds": [],
     "active": False},
    {"blockId": "b2", "runId": "r2", "tier": 2, "topic": "auth", "summary": "Auth: JWT 15m.",
     "effectiveMessageIds": ["000000a2#t1", "000000a2#t2", "000000a3", "000000a4", "000000a5", "gone-id"],
     "directBlockIds": ["b1"], "active": True}],
    "messageRefs": {"byRaw": {"000000a3": "m00003"}, "byRef": {"m00003": "000000a3"}}, "nextBlockId": 3}


@pytest.mark.parametrize("envelope", [True, False])
def test_pi_log_with_kernel_state_beside_it(tmp_path, envelope):
    t = read_transcript(pi_session(tmp_path, PI_STATE, envelope))
    assert t.container == "pi"
    b1, b2 = t.blocks
    assert (b1.seqs, b1.active, b2.seqs, b2.nested, b2.tier) == ((3, 4, 5), False, (3, 4, 5, 7), ("b1",), 2)
    msgs = openai_messages(t)
    assert msgs[0] == {"role": "user", "content": "Design auth"}
    assert msgs[1] == {"role": "user", "content": "[Compressed conversation section] — auth\nAuth: JWT 15m."}
    assert msgs[2] == {"role": "user", "content": "remember"} and len(msgs) == 3
    (tmp_path / "bare").mkdir()
    raw = read_transcript(pi_session(tmp_path / "bare", None))
    assert raw.blocks == () and len(openai_messages(raw)) == 6 and len(raw.messages) == 7   # one message per call
    assert [c["id"] for c in openai_messages(raw)[1]["tool_calls"]] == ["t1", "t2"]
    assert [m.id for m in raw.messages[1:3]] == ["000000a2#t1", "000000a2#t2"]


def test_a_kernel_state_that_is_not_json_is_a_clean_error(tmp_path):
    log = pi_session(tmp_path, None)
    Path(str(log) + ".acp.json").write_text('{"blocks": [')
    with pytest.raises(TranscriptError, match="kernel state is not valid JSON"):
        read_transcript(log)


# ------------------------------------------------------------------------------------- summaries in transcripts

def test_kernel_summary_messages_and_claude_code_compactions_are_blocks(tmp_path):
    chat = [{"role": "system", "content": "sys"},
            {"role": "system", "id": "acp_summary_b4", "content": "[Compressed conversation section] — JWT design\n"
                                                                   "Access 15m; refresh 30d."},
            {"role": "user", "content": "[Compressed conversation section]\nTests green.\n\n"
                                        "[b7 | 12 messages | topic: \"tests\"]"},
            {"role": "user", "content": "go on"}]
    t = read_transcript(json.dumps(chat))
    assert [(b.id, b.topic, b.summary, b.at) for b in t.blocks] == [
        ("b4", "JWT design", "Access 15m; refresh 30d.", 1), ("b7", "tests", "Tests green.", 2)]
    assert openai_messages(t) == chat                         # recognised, never changed
    assert summary_message("plain text") is None
    cc = [{"type": "user", "uuid": "u1", "parentUuid": None, "message": {"role": "user", "content": "hi"}},
          {"type": "assistant", "uuid": "u2", "parentUuid": "u1", "message": {"role": "assistant", "content": "yo"}},
          {"type": "user", "uuid": "u3", "parentUuid": None, "isCompactSummary": True,
           "message": {"role": "user", "content": "Summary: greeted."}},
          {"type": "user", "uuid": "u4", "parentUuid": "u3", "message": {"role": "user", "content": "next"}}]
    p = tmp_path / "cc.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in cc))
    (b,) = read_transcript(p).blocks
    assert (b.id, b.summary, b.seqs, b.at) == ("b1", "Summary: greeted.", (0, 1), 2)


def test_turns_text_round_trips_and_is_bounded():
    assert turns_text([5, 2, 3, 4, 10, 12, 13]) == "2-5,10,12-13"
    assert parse_turns("2-5,10,12-13") == (2, 3, 4, 5, 10, 12, 13)
    assert turns_text(range(0, 5000, 2)) == "0-4998"            # too many runs: the span
    for bad in ("", "1-", "5-2", "a", "1,,2", "0-99999999", ",".join(["1"] * 600)):
        assert parse_turns(bad) is None, bad


# ------------------------------------------------------------------------------------- committing a block

def _request(v, transcript, seq, block="b2", note="auth token design"):
    req = requests.make_request(types=v.settings.types, type="decision", note=note, importance=8, session="s-dsh",
                                seq=seq, transcript=transcript, host_tools=None, lang=v.settings.language,
                                created=v.now(), request_id=requests.new_request_id(v.rng), block=block)
    v.ensure_state()
    requests.save_request(v.state_dir, req, new=True)
    return req


def test_a_block_commit_sends_the_conversation_unchanged_and_names_the_block_last(example_vault, openai_server,
                                                                                  tmp_path):
    from test_fork import configure

    log = make_session.write(tmp_path / "s.jsonl.zstd")
    t = read_transcript(log)
    seq = t.last_seq
    v = configure(example_vault, openai_server)
    openai_server.enqueue(reply.writes(reply.write("- Access JWT 15m in memory; refresh 30d in Redis, httpOnly cookie.",
                                                   title="Auth tokens: JWT 15m + Redis refresh 30d")))
    req = _request(v, str(log), seq)
    out = worker.process_now(v, [req.id])[0]
    assert out.status == "written", out
    (sent,) = openai_server.requests
    msgs = sent.body["messages"]
    seen = openai_messages(t.upto(seq))
    assert msgs[:len(seen)] == seen                                   # exactly what the model saw, in order
    assert msgs[len(seen)]["role"] == "tool" and msgs[len(seen)]["tool_call_id"] == "call_m"
    # then the fork's instruction: the extraction rules as a system message, and one closing user message
    assert len(msgs) == len(seen) + 3 and msgs[len(seen) + 1]["role"] == "system"
    last = msgs[-1]
    assert last["role"] == "user"
    b2 = t.block("b2")
    assert "compression block" in last["content"] and 'id="b2"' in last["content"] and 'tier="2"' in last["content"]
    assert 'topic="Auth + tests"' in last["content"] and b2.summary in last["content"]
    # the citation: the block, its tier, the host's id and the turns it covers — and it reads back strictly
    e = next(x for x in v.load().entries if x.id == out.entries[0]["id"])
    (c,) = e.citation
    assert (c.session, c.seq, c.block, c.tier, c.compaction, c.turns) == (
        "s-dsh", f"{b2.seqs[0]}-{b2.seqs[-1]}", "b2", 2, b2.compaction_id, turns_text(b2.seqs))
    text = (v.root / e.path).read_text()
    assert "  block: b2\n  tier: 2\n" in text
    again = parse_entry(text, e.path)
    assert again.citation == e.citation


def test_block_errors_come_at_commit_time_and_nothing_is_queued(example_vault, tmp_path):
    log = make_session.write(tmp_path / "s.jsonl.zstd")
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    v = example_vault
    kw = dict(type="decision", note="n", importance=5, session="s1", seq=3)
    with pytest.raises(TranscriptError, match=r"no compression block 'b9' \(it has b1, b2\)"):
        real_submit(v, transcript=str(log), block="b9", **kw)
    with pytest.raises(TranscriptError, match="has no compression blocks"):
        real_submit(v, transcript=str(chat), block="b1", **kw)
    with pytest.raises(UsageError, match="without a transcript"):
        real_submit(v, block="b1", **kw)
    with pytest.raises(EntryInvalid, match="block id like b12"):
        real_submit(v, transcript=str(log), block="B 1", **kw)
    assert requests.list_requests(v.state_dir) == ([], [])


def test_old_and_new_citations_are_both_valid_and_bad_block_fields_are_refused():
    base = "---\nid: a1\ntitle: t\ntype: fact\nimportance: 5\ncreated: 2026-11-29T14:03:11Z\ncitation:\n" \
           "- session: s1\n  seq: 4\n{extra}---\nbody\n"
    assert parse_entry(base.format(extra=""), "a1.md").citation[0].to_dict() == {"session": "s1", "seq": 4}
    new = parse_entry(base.format(extra="  block: b3\n  tier: 3\n  compaction: 7f-1\n  turns: 2-5,9\n"), "a1.md")
    assert new.citation[0].to_dict() == {"session": "s1", "seq": 4, "block": "b3", "tier": 3,
                                         "compaction": "7f-1", "turns": "2-5,9"}
    for extra, field in [("  block: x3\n", "block"), ("  tier: 4\n", "tier"), ("  turns: 5-2\n", "turns"),
                         ("  compaction: 'a b'\n", "compaction")]:
        with pytest.raises(EntryInvalid, match=field):
            parse_entry(base.format(extra=extra), "a1.md")


# ------------------------------------------------------------------------------------- show --source

def test_show_source_for_a_dsh_block_a_plain_transcript_and_a_missing_source(example_vault, tmp_path, cli):
    v = example_vault
    log = make_session.write(tmp_path / "s.jsonl.zstd")
    req = _request(v, str(log), read_transcript(log).last_seq)
    (out,) = worker.process_now(v, [req.id], extractor="offline")
    assert out.status == "written"
    assert sources.record_transcript(v, "s-dsh", log, "commit")      # as submit does
    src = sources.entry_source(v, out.entries[0]["id"])
    (s,) = src.sources
    b2 = read_transcript(log).block("b2")
    assert s.status == "ok" and s.block.id == "b2" and tuple(t.seq for t in s.turns) == b2.seqs
    text = sources.source_text(src)
    assert '<<acpmem-data kind="block" id="b2" tier="2"' in text
    assert f'kind="turn" seq="{b2.seqs[-1]}" role="assistant"' in text
    r = cli("memory", "--vault", str(v.root), "show", out.entries[0]["id"], "--source")
    assert r.returncode == 0 and f'kind="turn" seq="{b2.seqs[0]}" role="assistant"' in r.stdout
    r = cli("memory", "--vault", str(v.root), "doctor", "--json")
    found = [f["what"] for f in json.loads(r.stdout)["findings"]]
    assert any(w.endswith(" 0 invalid file(s)") for w in found), found     # block citations pass doctor

    # a plain transcript: the offline extractor cites the seqs it quoted; show --source prints exactly those
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": f"turn {i}: the pnpm lockfile question"} for i in range(8)]))
    preq = requests.make_request(types=v.settings.types, type="fact", note="pnpm lockfile", importance=5,
                                 session="s-plain", seq=7, transcript=str(chat), host_tools=None, lang="en",
                                 created=v.now(), request_id=requests.new_request_id(v.rng))
    requests.save_request(v.state_dir, preq, new=True)
    (pout,) = worker.process_now(v, [preq.id], extractor="offline")
    sources.record_transcript(v, "s-plain", chat, "commit")
    r = cli("memory", "--vault", str(v.root), "show", pout.entries[0]["id"], "--source", "--json")
    doc = json.loads(r.stdout)
    cited = [c["seq"] for c in doc["sources"] and [s["citation"] for s in doc["sources"]]]
    assert r.returncode == 0 and all(s["status"] == "ok" for s in doc["sources"]) and cited
    assert [s["turns"][0]["seq"] for s in doc["sources"]] == cited
    assert doc["sources"][0]["turns"][0]["text"].startswith(f"turn {cited[0]}:")
    plain = next(e for e in v.load().entries if e.citation and e.citation[0].session not in ("s-plain", "s-dsh"))

    # not recorded; then recorded but gone
    r = cli("memory", "--vault", str(v.root), "show", plain.id, "--source")
    assert r.returncode == 0 and "was not recorded on this machine" in r.stdout
    gone = tmp_path / "gone.json"
    gone.write_text("[]")
    assert sources.record_transcript(v, plain.citation[0].session, gone, "commit")
    gone.unlink()
    r = cli("memory", "--vault", str(v.root), "show", plain.id, "--source")
    assert r.returncode == 0 and f"The recorded transcript {gone} is gone" in r.stdout


def test_show_source_says_which_turns_of_a_block_are_missing(example_vault, tmp_path):
    v = example_vault
    g = three_tiers()
    path = zst(tmp_path / "cut.zst", g.events)
    req = _request(v, str(path), g.last, block="b3")
    (out,) = worker.process_now(v, [req.id], extractor="offline")
    assert out.status == "written"
    # the log is replaced by one whose turns t1, t1b lost their text (the host rewrote it): the citation names
    # them still
    lost = (g.t1, g.t1b)
    kept = [e if e.get("seq") not in lost else {**e, "data": {}} for e in g.events]
    zst(path, kept)
    (s,) = sources.entry_source(v, out.entries[0]["id"], transcript=str(path)).sources
    assert s.status == "ok" and s.missing == lost
    assert [t.seq for t in s.turns] == [g.a, g.ra, g.rb, g.answer, g.t2, g.t2b]
    assert f"Turns not in the transcript: {turns_text(lost)}" in sources.source_text(sources.entry_source(
        v, out.entries[0]["id"], transcript=str(path)))


def test_the_transcript_record_keeps_the_first_sighting(vault, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("[]")
    b.write_text("[]")
    vault.ensure_state()
    assert sources.record_transcript(vault, "s9", a, "hook")
    assert not sources.record_transcript(vault, "s9", b, "commit")     # first seen wins while it exists
    assert sources.recorded_transcript(vault, "s9") == str(a)
    a.unlink()
    assert sources.record_transcript(vault, "s9", b, "commit")         # gone: the new one is recorded
    assert sources.recorded_transcript(vault, "s9") == str(b)


def test_mcp_source_resource_text(example_vault, tmp_path):
    from acpmem.integrations.mcp_server import MemoryService

    log = make_session.write(tmp_path / "s.jsonl.zstd")
    svc = MemoryService(example_vault.root, "s-dsh", str(log), clock=example_vault.clock)
    svc.record()
    req = _request(example_vault, str(log), read_transcript(log).last_seq)
    (out,) = worker.process_now(example_vault, [req.id], extractor="offline")
    text = svc.source(f"memory://entry/{out.entries[0]['id']}/source")
    assert 'kind="block" id="b2"' in text and "from " + str(log) in text
    assert svc.source("memory://entry/../source") is None
    # the MCP commit takes block like the CLI: an unknown one is the model's error, nothing is queued
    (commit,) = [t for t in svc.tools() if t["name"] == "memory_commit"]
    assert commit["inputSchema"]["properties"]["block"]["pattern"] == "^(b[0-9]{1,9}|pi-compaction-[A-Za-z0-9_-]{1,64})$"
    with pytest.raises(TranscriptError, match="no compression block 'b7'"):
        svc.commit({"type": "decision", "note": "n", "importance": 5, "block": "b7"}, {"seq": 3})
    assert requests.list_requests(example_vault.state_dir) == ([], [])


def test_dry_run_body_of_a_block_request_matches_the_fork(example_vault, tmp_path):
    log = make_session.write(tmp_path / "s.jsonl.zstd")
    t = read_transcript(log)
    req = _request(example_vault, str(log), t.last_seq, block="b1")
    body = context.build_body(example_vault, req, "m")
    assert 'id="b1" tier="1" topic="JWT auth design"' in body["messages"][-1]["content"]
    assert context.request_citations(req, t)[0].turns == turns_text(t.block("b1").seqs)


def test_the_worked_example_runs_offline(tmp_path):
    import subprocess

    env = {k: v for k, v in __import__("os").environ.items() if k != "ACPMEM_VAULT"}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "dsh" / "run_loop.py"), "--keep", str(tmp_path)],
                       capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    t = read_transcript(tmp_path / "session.jsonl.zstd")
    b1, b2 = (t.block("b1").seqs, t.block("b2").seqs)
    assert f'b1 (tier 1, "JWT auth design")  turns {turns_text(b1)}  (consumed)' in out
    assert f'b2 (tier 2, "Auth + tests")  turns {turns_text(b2)}  nested b1\n' in out
    assert f"citations: session-3aa366c3#{b2[0]}-{b2[-1]} (b2)" in out
    assert f'<<acpmem-data kind="block" id="b2" tier="2" topic="Auth + tests" turns="{turns_text(b2)}"' in out
    assert f'kind="turn" seq="{b2[-1]}" role="assistant"' in out and "Traceback" not in r.stderr


def test_the_source_resource_over_a_real_mcp_session(example_vault, tmp_path):
    from test_mcp import _server_params, _session_run

    v = example_vault
    log = make_session.write(tmp_path / "s.jsonl.zstd")
    req = _request(v, str(log), read_transcript(log).last_seq)
    (out,) = worker.process_now(v, [req.id], extractor="offline")
    ident = out.entries[0]["id"]
    root = v.root
    v.close()

    async def body(s):
        templates = (await s.list_resource_templates()).resource_templates
        text = (await s.read_resource(f"memory://entry/{ident}/source")).contents[0].text
        try:
            await s.read_resource("memory://entry/zzzzzz/source")
            missing = None
        except Exception as exc:   # the client raises the server's error answer
            missing = str(exc)
        return [t.uri_template for t in templates], text, missing

    errlog = tmp_path / "server.err"
    # the server's --transcript is recorded for its session (s-dsh), so the entry's turns are found
    uris, text, missing = _session_run(_server_params(root, "--session", "s-dsh", "--transcript", str(log)), body,
                                       str(errlog))
    assert uris == ["memory://entry/{id}/source"]
    t = read_transcript(log)
    user_turn = next(m.seq for m in t.turns(t.block("b2").seqs) if m.role == "user")
    assert 'kind="block" id="b2" tier="2"' in text and f'kind="turn" seq="{user_turn}" role="user"' in text
    assert missing and "no entry with id 'zzzzzz'" in missing and "Traceback" not in errlog.read_text()


# ------------------------------------------------------------------------------------- properties

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 2**40), max_size=600))
def test_turns_text_is_exact_or_the_span(seqs):
    text = turns_text(seqs)
    if not seqs:
        assert text == ""
        return
    back = parse_turns(text)
    assert back is not None
    if back != tuple(sorted(seqs)):   # too many runs for a citation: the span that holds them all
        assert text == f"{min(seqs)}-{max(seqs)}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(block=st.none() | st.integers(1, 10**9 - 1).map(lambda n: f"b{n}"), tier=st.none() | st.integers(1, 3),
       compaction=st.none() | st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,40}", fullmatch=True),
       seqs=st.sets(st.integers(0, 10**6), max_size=40))
def test_block_citations_round_trip_through_the_entry_file(block, tier, compaction, seqs):
    from acpmem.core.entry import Citation, Entry
    from acpmem.core.entryfile import dump_entry

    c = Citation("s-1", turns_span_or(seqs), block, tier, compaction, turns_text(seqs) or None)
    e = Entry(id="a1", title="t", type="fact", importance=5, created="2026-11-29T14:03:11Z", body="- x\n",
              citation=(c,))
    back = parse_entry(dump_entry(e), "entries/a1.md")
    assert back.citation == (c,) and back.citation[0].to_dict() == c.to_dict()


def turns_span_or(seqs):
    from acpmem.core.blocks import turns_span

    return turns_span(seqs) if seqs else 7


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(st.tuples(st.sampled_from(["user", "assistant", "compact"]), st.integers(0, 6)), min_size=1,
                     max_size=25))
def test_the_replayed_surface_is_what_each_compaction_left(tmp_path, plan):
    """A generated session: messages and compactions of random stretches of the surface. At every seq, the
    conversation the fork gets holds no turn a checkpoint replaced, every checkpoint in place, in surface order."""
    g = Log()
    surface: list[int] = []
    checkpoints: set[int] = set()
    n = 0
    for kind, k in plan:
        if kind != "compact" or len(surface) < 2:
            surface.append(g.user(f"u{len(g.events)}") if kind != "assistant" else g.assistant("a"))
            continue
        i = min(k, len(surface) - 2)
        lo, hi = surface[i], surface[i + 1]
        n += 1
        cp = g.compact(n, lo, hi, 1, f"summary {n}")   # the run from node lo to node hi
        surface[i:i + 2] = [cp]
        checkpoints.add(cp)
    path = zst(tmp_path / "h.zst", g.events)
    t = read_transcript(path)
    assert [m.seq for m in t.messages] == surface
    assert all(b.tier in (1, 2, 3) for b in t.blocks) and len(t.blocks) == n
    for b in t.blocks:   # covered turns are original turns: nested checkpoints were followed back to theirs
        assert b.seqs and not set(b.seqs) & checkpoints and set(b.seqs) <= {m.seq for m in t.events}


def test_concurrent_first_sightings_leave_one_valid_record(vault, tmp_path):
    """Eight processes record different transcripts for one new session at once: one wins, the record is whole."""
    import subprocess

    vault.ensure_state()
    paths = []
    for i in range(8):
        p = tmp_path / f"t{i}.json"
        p.write_text("[]")
        paths.append(p)
    code = ("import sys; from acpmem.vault.reader import VaultReader; from acpmem.read.sources import "
            "record_transcript; v = VaultReader(sys.argv[1]); print(record_transcript(v, 'race', sys.argv[2], 'x'))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(vault.root), str(p)], stdout=subprocess.PIPE,
                              text=True) for p in paths]
    said = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert said.count("True") == 1 and said.count("False") == 7, said
    recorded = sources.recorded_transcript(vault, "race")
    assert recorded == str(paths[said.index("True")])
    doc = json.loads((vault.session_dir("race") / sources.RECORD).read_text())
    assert doc == {"session": "race", "transcript": recorded, "origin": "x"}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_fork_instruction_names_the_block_before_the_rules(lang):
    from acpmem.write.prompts import fork_instruction

    block = '<<acpmem-data kind="block" id="b2" tier="2" topic="t" nonce="ab">>\nsum\n<</acpmem-data nonce="ab">>'
    text = fork_instruction("auth design", "decision", 8, None, lang, block)
    assert text.index(block) < text.index("Rules:" if lang == "en" else "规则：")
    assert text.endswith("(none)" if lang == "en" else "（无）")
    assert block not in fork_instruction("auth design", "decision", 8, None, lang)


def test_an_older_citation_of_a_kernel_block_ref_shows_that_block(vault, tmp_path):
    from acpmem.core.entry import Citation, Entry

    log = make_session.write(tmp_path / "s.jsonl.zstd")
    e = Entry(id="k1ref", title="JWT design from b1", type="decision", importance=6, created=vault.now(),
              body="- JWT 15m\n", citation=(Citation("session-3aa366c3", "b1"),))
    vault.write_entries([e.with_changes(path=vault.path_for(e.id, e.title))], subject="s", why="w")
    (s,) = sources.entry_source(vault, "k1ref", transcript=str(log)).sources
    assert s.status == "ok" and s.block.id == "b1" and tuple(t.seq for t in s.turns) == read_transcript(log).block(
        "b1").seqs


def test_the_blocks_command_lists_what_commit_can_name(tmp_path, cli):
    log = make_session.write(tmp_path / "s.jsonl.zstd")
    r = cli("memory", "blocks", str(log), "--json", cwd=tmp_path)
    doc = json.loads(r.stdout)
    t = read_transcript(log)
    assert r.returncode == 0 and [(b["id"], b["tier"], b["turns"], b["active"]) for b in doc["blocks"]] == [
        ("b1", 1, turns_text(t.block("b1").seqs), False), ("b2", 2, turns_text(t.block("b2").seqs), True)]
    assert doc["blocks"][1]["nested"] == ["b1"] and doc["blocks"][1]["at"] == t.block("b2").at
    chat = tmp_path / "chat.json"
    chat.write_text('[{"role": "user", "content": "hi"}]')
    r = cli("memory", "blocks", str(chat), cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip().endswith("no compression blocks")
    r = cli("memory", "blocks", str(tmp_path / "none.zst"), cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1


def test_extract_note_takes_block_with_the_commit_time_check(example_vault, tmp_path, cli):
    """``extract --note`` queues a request and runs it, so ``--block`` is checked as ``commit --block`` checks it:
    an unknown block or a transcript without blocks is one line, and nothing is queued."""
    from acpmem.write import extract as ex

    log = make_session.write(tmp_path / "s.jsonl.zstd")
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    v = example_vault
    base = ["memory", "--vault", str(v.root), "extract", "--note", "auth token design", "--type", "decision",
            "--importance", "8", "--session", "s-dsh", "--seq", "999", "--extractor", "offline"]
    for transcript, block, message in ((log, "b9", "no compression block 'b9' (it has b1, b2)"),
                                       (chat, "b1", "has no compression blocks"),
                                       (None, "b1", "without a transcript")):
        r = cli(*base, *(["--transcript", str(transcript)] if transcript else []), "--block", block)
        assert r.returncode != 0 and message in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("Error: ")
        assert requests.list_requests(v.state_dir) == ([], [])
    r = cli("memory", "--vault", str(v.root), "extract", "--pending", "--block", "b2")
    assert r.returncode != 0 and "--block" in r.stderr and "go with --note" in r.stderr
    # the Python API: the same check before anything is saved
    with pytest.raises(TranscriptError, match="no compression block"):
        ex.new_request(v, type="decision", note="n", importance=5, session="s1", seq=3, transcript=str(log),
                       host_tools=None, block="b7")
    assert requests.list_requests(v.state_dir) == ([], [])
    # a known block: the entry cites it
    r = cli(*base, "--transcript", str(log), "--block", "b2", "--json")
    assert r.returncode == 0, r.stderr
    (ident,) = [e["id"] for o in json.loads(r.stdout)["outcomes"] for e in o["entries"]]
    (c,) = next(e for e in v.load().entries if e.id == ident).citation
    assert (c.block, c.tier) == ("b2", 2)


# ------------------------------------------------------------------------------------- the last seq, scanned

def _event_lines(plan, compact_json: bool) -> tuple[list[str], Log]:
    g = Log()
    surface: list[int] = []
    n = 0
    for kind, k in plan:
        if kind == "compact" and len(surface) >= 2:
            i = min(k, len(surface) - 2)
            n += 1
            surface[i:i + 2] = [g.compact(n, surface[i], surface[i + 1], 1, f"s{n}")]
        elif kind == "assistant":
            surface.append(g.assistant("a", *[(f"c{len(g.events)}_{j}", "grep") for j in range(k % 3)]))
        elif kind == "result":
            surface.append(g.result(f"c{k}", "r"))
        elif kind == "other":
            g.add("plugin/telemetry", {"k": k})
        else:
            surface.append(g.user(f"u{len(g.events)}"))
    sep = (",", ":") if compact_json else (", ", ": ")
    lines = []
    for e in g.events:
        if e.get("seq", 0) % 5 == 4:   # some events with their keys in another order: read by parsing the line
            e = {"seq": e["seq"], **{k: v for k, v in e.items() if k != "seq"}}
        lines.append(json.dumps(e, separators=sep))
    return lines, g


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(st.tuples(st.sampled_from(["user", "assistant", "result", "compact", "other"]),
                               st.integers(0, 6)), max_size=30),
       compact_json=st.booleans(), cut=st.sampled_from([None, "half", "whole"]), frames=st.integers(1, 3))
def test_the_scanned_last_seq_is_the_read_transcripts(tmp_path, plan, compact_json, cut, frames):
    """A generated DSH log (any mix of events, key order, JSON spacing, frames, a last line cut or whole without its
    newline): the bounded scan the MCP server uses finds the same last message seq as reading the whole log."""
    from acpmem.hosts.transcripts import last_seq

    lines, g = _event_lines(plan, compact_json)
    if cut == "half":
        lines.append(json.dumps({"type": "user/message", "seq": g.next, "data": {"content": "x"}})[:30])
    path = zst(tmp_path / "l.zst", lines, frames=frames, last_newline=cut is None)
    try:
        expected = read_transcript(path).last_seq
    except TranscriptError as exc:     # a log without messages: the same error
        with pytest.raises(TranscriptError) as err:
            last_seq(path)
        assert err.value.line() == exc.line() and "no messages" in exc.line()
        return
    assert last_seq(path) == expected


def test_the_scanned_last_seq_of_a_plain_transcript_and_of_a_log_without_messages(tmp_path):
    from acpmem.hosts.transcripts import last_seq

    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]))
    assert last_seq(chat) == read_transcript(chat).last_seq == 1
    only = zst(tmp_path / "o.zst", [Log().events[0], {"type": "plugin/x", "seq": 0, "data": {}}])
    with pytest.raises(TranscriptError, match="no messages in this session log"):
        last_seq(only)


@pytest.mark.parametrize("case, message", [
    ("huge", "line is over"), ("not_utf8", "not UTF-8"), ("deep", "nested too deeply"),
    ("seq_back", "where seq 5 was expected"), ("not_object", "expected a JSON object"),
    ("bad_json_mid", "not valid JSON"),
    ("corrupt", "corrupt zstd data")])
def test_the_last_seq_scan_refuses_hostile_logs_like_the_reader(tmp_path, case, message):
    from acpmem.hosts.transcripts import last_seq

    good = five_users()
    path = tmp_path / "bad.zst"
    bad = {"huge": '{"type": "user/message", "seq": 5, "data": {"content": "' + "x" * (17 << 20) + '"}}',
           "not_utf8": b'{"type": "user/message", "seq": 5, "data": {"content": "\xff\xfe"}}',
           "deep": "[" * 200_000 + "]" * 200_000,
           "seq_back": json.dumps({"type": "user/message", "seq": 2, "data": {"content": "x"}}),
           "not_object": "[1, 2]", "bad_json_mid": "{not json", "corrupt": None}[case]
    if bad is None:
        data = bytearray(zst(path, good).read_bytes())
        data[12:40] = b"\xff" * 28
        path.write_bytes(bytes(data))
    else:
        zst(path, [*good, bad, good[0]])
    with pytest.raises(TranscriptError) as err:
        last_seq(path)
    line = err.value.line()
    assert message in line and "\n" not in line and str(path) in line


def test_the_mcp_server_cites_the_last_seq_of_a_dsh_log_when_the_host_passes_none(example_vault, tmp_path):
    from helpers_proc import wait_until
    from test_mcp import _server_params, _session_run

    log = make_session.write(tmp_path / "s.jsonl.zstd")
    last = read_transcript(log).last_seq

    async def body(s):
        return await s.call_tool("memory_commit", {"type": "decision", "note": "auth token design", "importance": 8},
                                 meta={"acpmem/session": "s-dsh", "acpmem/transcript": str(log)})

    r = _session_run(_server_params(example_vault.root), body)
    assert r.is_error is False, r.content[0].text
    done = wait_until(lambda: requests.read_done(example_vault.state_dir))
    assert done[-1]["session"] == "s-dsh" and done[-1]["seq"] == last and done[-1]["status"] == "written"
