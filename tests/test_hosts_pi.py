"""pi session logs written by pi itself (``tests/fixtures/hosts/pi/``, see its README) read exactly as pi and
billion-context-pi's kernel read them: the live path of the session tree (``truth.json``: pi's
``buildContextEntries()``), one message per tool call with the kernel's raw ids (the ``messageRefs`` of the kernel
state pi wrote), every block of the kernel state, pi's own compactions and branch summaries, and the view the model
saw (``kernelView``: acp-kernel's ``processTurn()``) — at the end and at each compaction point.

The expectations come from the host's files (``truth.json``, the ``.acp.json`` the host wrote, the log's own JSON),
never from acpmem's reader."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from acpmem.core.errors import TranscriptError
from acpmem.hosts.transcripts import openai_messages, read_transcript

PI = Path(__file__).parent / "fixtures" / "hosts" / "pi"
_ACP_PREFIX = re.compile(r'<acp tokens="[0-9]+" type="[a-z-]+">m[0-9]+</acp>\n')


def fixtures():
    return sorted(p.name for p in PI.iterdir() if (p / "truth.json").is_file())


def load(name: str):
    folder = PI / name
    (log,) = [p for p in folder.iterdir() if p.name.endswith(".jsonl")]
    truth = json.loads((folder / "truth.json").read_text())
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    state_file = Path(str(log) + ".acp.json")
    state = json.loads(state_file.read_text()) if state_file.is_file() else None
    return log, truth, rows, state


def live_path(truth: dict) -> list[dict]:
    """The leaf's chain of parents, from truth's entries (pi's own reading)."""
    by_id = {e["id"]: e for e in truth["entries"] if e["type"] != "session"}
    path, node = [], truth["leaf"]
    while node is not None:
        path.append(by_id[node])
        node = by_id[node].get("parentId")
    return path[::-1]


def expected_messages(truth: dict, rows: list[dict]) -> list[tuple[int, str, str]]:
    """``(seq, raw id, role)`` for every message on the live path: one per tool call of a multi-call assistant
    message (raw id ``entryId#callId``, as billion-context-pi gives the kernel)."""
    out = []
    for e in live_path(truth):
        row = rows[e["line"]]
        if e["type"] == "message":
            m = row["message"]
            if m.get("role") == "bashExecution" and m.get("excludeFromContext"):
                continue
            if m.get("role") == "system":      # pi 1.x's system prompt, kept in the session: not the conversation
                continue
            calls = [b for b in m.get("content") or () if isinstance(b, dict) and b.get("type") == "toolCall"] \
                if isinstance(m.get("content"), list) else []
            role = {"toolResult": "tool", "assistant": "assistant"}.get(m["role"], "user")
            if m["role"] == "assistant" and len(calls) > 1:
                out.extend((e["line"], f"{e['id']}#{c['id']}", role) for c in calls)
            else:
                out.append((e["line"], e["id"], role))
        elif e["type"] in ("custom_message", "branch_summary", "compaction"):
            out.append((e["line"], e["id"], "user"))          # what pi turns these entries into on the path
    return out


def kernel_text(m) -> str:
    """A message as the kernel's view writes it: its text, then each tool call's arguments as compact JSON."""
    parts = [m.content] if isinstance(m.content, str) and m.content else []
    for call in m.raw.get("tool_calls") or ():
        parts.append(call["function"]["arguments"])
    return "\n".join(parts)


@pytest.mark.parametrize("name", fixtures())
def test_every_message_on_the_live_path_as_the_host_reads_it(name):
    log, truth, rows, state = load(name)
    t = read_transcript(log)
    assert t.container == "pi" and t.warnings == ()          # every entry the host wrote is one acpmem reads
    want = expected_messages(truth, rows)
    assert [(m.seq, m.id, m.role) for m in t.events] == want
    if state is not None:                                       # the kernel's own list of raw message ids
        assert [m.id for m in t.events] == list(state["messageRefs"]["byRaw"])
    live = {e["line"] for e in live_path(truth)}
    assert {m.seq for m in t.events} <= live                   # nothing of an abandoned branch
    for m in t.events:
        row = rows[m.seq]
        if row["type"] != "message":
            continue
        msg = row["message"]
        content = msg.get("content")
        texts = [b["text"] for b in content if b.get("type") == "text"] if isinstance(content, list) else [content]
        calls = [b for b in content if b.get("type") == "toolCall"] if isinstance(content, list) else []
        if msg["role"] == "assistant":
            mine = [c for c in calls if m.id == row["id"] or m.id == f"{row['id']}#{c['id']}"]
            assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                    for c in m.raw.get("tool_calls") or ()] == [(c["id"], c["name"], c["arguments"]) for c in mine]
            first = m.id == row["id"] or m.id.endswith("#" + calls[0]["id"])
            assert (m.content or "") == ("\n".join(x for x in texts if x) if first else "")
            for b in content:                                   # thinking is not sent back
                assert b.get("type") != "thinking" or b["thinking"] not in json.dumps(m.raw)
        elif msg["role"] == "toolResult":
            assert m.raw["tool_call_id"] == msg["toolCallId"] and m.content == "\n".join(texts)
        elif msg["role"] == "bashExecution":
            assert m.content == f"$ {msg['command']}\n{msg['output']}"
        else:
            assert m.content == "\n".join(texts)


@pytest.mark.parametrize("name", fixtures())
def test_every_block_as_the_host_state_says(name):
    log, truth, rows, state = load(name)
    t = read_transcript(log)
    line_of = {e["id"]: e["line"] for e in truth["entries"]}
    want = []
    for b in (state or {}).get("blocks", []):
        seqs = tuple(sorted({line_of[i.split("#")[0]] for i in b["effectiveMessageIds"]}))
        want.append((b["blockId"], b["tier"], b.get("topic"), b["summary"], seqs, tuple(b["directBlockIds"]),
                     b["active"]))
    path = live_path(truth)
    compactions = [e for e in path if e["type"] == "compaction"]
    for k, e in enumerate(compactions):        # pi's own compactions on the live path: blocks with no kernel id
        row = rows[e["line"]]
        kept = next((p["line"] for p in path if p["id"] == row["firstKeptEntryId"]), e["line"])
        covered = tuple(s for s, _, _ in expected_messages(truth, rows) if s < kept
                        and s not in {c["line"] for c in compactions})
        nested = (f"pi-compaction-{compactions[k - 1]['id']}",) if k else ()
        want.append((f"pi-compaction-{e['id']}", None, None, row["summary"], tuple(sorted(set(covered))), nested,
                     k == len(compactions) - 1))
    got = [(b.id, b.tier, b.topic, b.summary, b.seqs, b.nested, b.active) for b in t.blocks]
    assert got == want
    for b, e in zip([b for b in t.blocks if b.id.startswith("pi-compaction-")], compactions):
        details = rows[e["line"]].get("details") or {}
        assert (list(b.read_files), list(b.modified_files)) == (details.get("readFiles", []),
                                                                details.get("modifiedFiles", []))
        assert b.compaction_id == e["id"] and b.at == e["line"]


@pytest.mark.parametrize("name", [n for n in fixtures() if "kernelView" not in json.loads((PI / n / "truth.json")
                                                                                         .read_text())])
def test_the_final_view_is_pis_context(name):
    """Without the kernel, the view is pi's own context: the latest compaction, the kept entries, what followed."""
    log, truth, rows, state = load(name)
    t = read_transcript(log)
    if "contextMessages" in truth:                              # sessionEntryToContextMessages, one per message
        # pi 1.x's system prompt is in its context (a system message at the head, and again at the head of a
        # compaction's summary); the conversation the fork reads leaves it out
        want = [(c["entry"], {"assistant": "assistant", "toolResult": "tool"}.get(c["role"], "user"))
                for c in truth["contextMessages"] if c["role"] != "system"]
    else:
        want = [(e["id"], None) for e in truth["contextEntries"] if e["type"] == "message"]
    got, last = [], None
    for m in t.messages:                                        # the parts of a multi-call message are one
        entry = m.id.split("#")[0]
        if "#" not in m.id or entry != last:
            got.append((entry, m.role if want and want[0][1] else None))
        last = entry
    assert got == want
    sent = openai_messages(t)
    assert len(sent) == len(want) and all("id" not in m for m in sent)
    for c in [e for e in truth["contextEntries"] if e["type"] in ("compaction", "branch_summary")]:
        (m,) = [m for m in t.messages if m.id == c["id"]]
        assert rows[c["line"]]["summary"] in m.content


def test_the_final_view_is_what_the_kernel_sent_the_model():
    log, truth, rows, state = load("pi-acp")
    t = read_transcript(log)
    view = truth["kernelView"]
    assert [m.id for m in t.messages] == [v["id"] for v in view]
    for m, v in zip(t.messages, view):
        # pi's adapter sends a kernel summary as a plain user message (hosts.md §2); the rest keep their roles
        assert m.role == ("user" if v["role"] == "system" else v["role"]), v["id"]
        text = _ACP_PREFIX.sub("", v["text"], count=1)
        assert kernel_text(m).startswith(text), (v["id"], kernel_text(m)[:80], text)
    first_user = next(m for m in t.events if m.role == "user")
    assert t.messages[1] == first_user                        # kept although b4 covers it
    sent = openai_messages(t)
    assert sent[0] == {"role": "user", "content": "[Compressed conversation section] — Auth workstream\n"
                                                  + state["blocks"][3]["summary"]}
    assert all("id" not in m for m in sent)                   # the raw ids are bookkeeping, never sent


def test_the_view_at_each_compression_point():
    """At each compress call's result, the view holds the blocks made so far (a block consumed later still shown),
    the first user message, and hides the compress pairs of the blocks consumed by then."""
    log, truth, rows, state = load("pi-acp")
    t = read_transcript(log)
    blocks = state["blocks"]
    result_seq = {rows[e["line"]]["message"].get("toolCallId"): e["line"] for e in truth["entries"]
                  if e.get("role") == "toolResult"}
    call_ids = {b["blockId"]: b["compressCallId"] for b in blocks}
    for k, b in enumerate(blocks):
        seq = result_seq[b["compressCallId"]]
        made = blocks[:k + 1]
        consumed = {x for m in made for x in m["directBlockIds"]}
        active = [m["blockId"] for m in made if m["blockId"] not in consumed]
        view = t.upto(seq).messages
        assert [m.id[12:] for m in view if m.id.startswith("acp_summary_")] == active, seq
        assert view[0].id == f"acp_summary_{active[0]}" and view[1].id == "d33f46e4"
        hidden_calls = {call_ids[x] for x in consumed}
        ids = [m.id for m in view]
        for x, cid in call_ids.items():
            call = next(m for m in t.events if any(c["id"] == cid for c in m.raw.get("tool_calls") or ()))
            if call.seq > seq:
                continue
            assert (call.id in ids) == (cid not in hidden_calls), (seq, x)
        covered = {i for m in made if m["blockId"] in active for i in m["effectiveMessageIds"]} - {"d33f46e4"}
        assert not covered & set(ids)
        assert ids[-1] == rows[seq]["id"]                    # the compress result itself is the last message
    assert [m.id for m in t.upto(t.last_seq).messages] == [v["id"] for v in truth["kernelView"]]


def test_the_view_at_each_compression_point_is_the_kernels():
    """``views.json``: acp-kernel's own ``prune`` + ``hideConsumedCompressCalls`` at each compress call's result
    (``tools/hostlogs/pi/kernel-views.mjs``; its final view equals the ``kernelView`` billion-context-pi recorded)."""
    log, truth, rows, state = load("pi-acp")
    t = read_transcript(log)
    points = json.loads((PI / "pi-acp" / "views.json").read_text())["points"]
    assert len(points) == len(state["blocks"])
    for p in points:
        assert [m.id for m in t.upto(p["seq"]).messages] == p["ids"], p["seq"]


def test_an_abandoned_branch_is_not_conversation():
    log, truth, rows, state = load("pi-branch")
    t = read_transcript(log)
    texts = " ".join(t.text(m) for m in t.events)
    assert "Option B" in texts and "Option A" not in texts and "batching" not in texts
    assert t.blocks == ()                                       # its compaction is on the abandoned branch
    assert [m.id for m in t.messages] == [e["id"] for e in truth["contextEntries"] if e["type"] == "message"]
    assert t.last_seq == max(e["line"] for e in live_path(truth))
    with pytest.raises(TranscriptError, match="no compression blocks"):
        t.block("b1")


# ------------------------------------------------------------------------------- kernel summaries on the wire

def test_a_kernel_summary_that_lost_its_id_on_the_wire_is_not_named(tmp_path):
    """pi's adapter sends a summary as a plain user message without an id: the block id is unknown, not ``b1``."""
    chat = [{"role": "user", "content": "Design auth"},
            {"role": "user", "content": "[Compressed conversation section] — JWT design\nAccess 15m; refresh 30d."},
            {"role": "assistant", "content": "[Compressed conversation section]\nTests green.\n\n"
                                             "[b7 | 12 messages | topic: \"(none)\"]"},
            {"role": "user", "content": "go on"}]
    path = tmp_path / "wire.json"
    path.write_text(json.dumps(chat))
    t = read_transcript(path)
    assert [(b.id, b.topic, b.summary) for b in t.blocks] == [(None, "JWT design", "Access 15m; refresh 30d."),
                                                              ("b7", None, "Tests green.")]
    assert t.blocks[0].label() == 'id unknown (tier unknown, "JWT design")'
    assert t.block("b7").summary == "Tests green."
    with pytest.raises(TranscriptError, match="no compression block 'b4' .it has b7, and 1 whose id was lost"):
        t.block("b4")
    only_lost = tmp_path / "lost.json"
    only_lost.write_text(json.dumps(chat[:2]))
    with pytest.raises(TranscriptError) as err:
        read_transcript(only_lost).block("b1")
    line = err.value.line()
    assert "no block id (the id is lost on the wire), so 'b1' cannot be found" in line
    assert ".acp.json" in line and "\n" not in line


def test_a_kernel_state_file_passed_as_the_transcript_names_the_session_log():
    log, *_ = load("pi-acp")
    with pytest.raises(TranscriptError, match="pass the pi session log it sits beside"):
        read_transcript(Path(str(log) + ".acp.json"))


# ------------------------------------------------------------------------------- forks and broken trees

def test_a_fork_without_blocks_reads_its_parents_kernel_state(tmp_path):
    log, truth, rows, state = load("pi-acp")
    parent = tmp_path / log.name
    parent.write_text(log.read_text())
    Path(str(parent) + ".acp.json").write_text(Path(str(log) + ".acp.json").read_text())
    header = {**rows[0], "id": "01a232f6-ffff-7000-8000-00000000000f", "parentSession": str(parent)}
    fork = tmp_path / "2026-12-01T19-00-00-000Z_01a232f6-ffff-7000-8000-00000000000f.jsonl"
    fork.write_text("".join(json.dumps(r) + "\n" for r in [header, *rows[1:]]))
    t = read_transcript(fork)
    assert [b.id for b in t.blocks] == ["b1", "b2", "b3", "b4"]
    assert [m.id for m in t.messages] == [v["id"] for v in truth["kernelView"]]
    empty = {**state, "blocks": []}                          # a state of its own, with no blocks yet
    Path(str(fork) + ".acp.json").write_text(json.dumps(empty))
    assert [b.id for b in read_transcript(fork).blocks] == ["b1", "b2", "b3", "b4"]
    Path(str(parent) + ".acp.json").unlink()                   # the parent's is gone: the fork has none
    assert read_transcript(fork).blocks == ()


@pytest.mark.parametrize("change, message", [
    (lambda rows: rows[3].update(parentId=rows[5]["id"]), "parentId chain loops"),
    (lambda rows: rows[5].update(id=rows[4]["id"]), "is used twice"),
])
def test_a_broken_tree_is_one_clear_line(tmp_path, change, message):
    log, truth, rows, state = load("pi-branch")
    change(rows)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TranscriptError, match=message) as err:
        read_transcript(bad)
    assert str(bad) in err.value.line() and "\n" not in err.value.line()


@pytest.mark.parametrize("name", fixtures())
def test_the_view_at_each_pi_compaction(name):
    """Right after each of pi's compactions the view is that compaction's summary and the entries it kept (pi's
    ``buildContextEntries`` on the path up to there); a later one replaces it."""
    log, truth, rows, state = load(name)
    t = read_transcript(log)
    path = live_path(truth)
    messages = expected_messages(truth, rows)
    for c in [e for e in path if e["type"] == "compaction"]:
        first = rows[c["line"]]["firstKeptEntryId"]
        kept = next(p["line"] for p in path if p["id"] == first)
        want = [c["id"]] + [i for s, i, _ in messages if kept <= s < c["line"]]
        assert [m.id for m in t.upto(c["line"]).messages] == want
        block = t.block(f"pi-compaction-{c['id']}")
        assert block.summary == rows[c["line"]]["summary"] and max(block.seqs) < kept


# ------------------------------------------------------------------------------- committing from each pi log

BLOCKS = {"pi-acp": "b3", "pi-compaction": None}    # None: the latest pi compaction (its name is made of its id)


def _block_of(name: str) -> tuple[Path, str, dict]:
    log, truth, rows, state = load(name)
    if BLOCKS[name] is not None:
        return log, BLOCKS[name], truth
    last = [e for e in live_path(truth) if e["type"] == "compaction"][-1]
    return log, f"pi-compaction-{last['id']}", truth


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_commit_block_offline_and_show_source(name, example_vault, cli):
    from acpmem.core.blocks import turns_text

    log, block_id, truth = _block_of(name)
    t = read_transcript(log)
    block = t.block(block_id)
    v = example_vault
    r = cli("memory", "--vault", str(v.root), "commit", "--type", "decision", "--note", "auth token design",
            "--importance", "8", "--session", "s-pi", "--seq", str(t.last_seq), "--transcript", str(log),
            "--block", block_id, "--wait", "--extractor", "offline", "--json")
    assert r.returncode == 0, r.stderr
    v.close()
    entries = [e for e in v.load().entries if e.citation and e.citation[0].session == "s-pi"]
    assert entries
    (c,) = entries[0].citation
    assert (c.block, c.tier, c.turns) == (block_id, block.tier, turns_text(block.seqs))
    r = cli("memory", "--vault", str(v.root), "show", entries[0].id, "--source", "--json")
    assert r.returncode == 0, r.stderr
    (src,) = json.loads(r.stdout)["sources"]
    assert src["status"] == "ok"
    live = {e["line"] for e in live_path(truth)}
    shown = [turn["seq"] for turn in src["turns"]]
    assert shown and set(shown) <= set(block.seqs) <= live
    assert src["block"]["id"] == block_id


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_extract_block_sends_what_the_model_saw(name, example_vault, openai_server, cli):
    from openai_server import reply
    from test_fork import configure

    log, block_id, truth = _block_of(name)
    t = read_transcript(log)
    seq = t.last_seq
    v = configure(example_vault, openai_server)
    openai_server.enqueue(reply.writes(reply.write("- Access JWT 15m; refresh tokens in Redis for 30 days.",
                                                   title="Auth tokens: JWT 15m + Redis refresh 30d")))
    r = cli("memory", "--vault", str(v.root), "extract", "--transcript", str(log), "--block", block_id, "--note",
            "auth token design", "--type", "decision", "--importance", "8", "--session", "s-pi", "--seq", str(seq))
    assert r.returncode == 0, r.stderr
    (sent,) = openai_server.requests
    msgs = sent.body["messages"]
    seen = openai_messages(t.upto(seq))
    assert msgs[:len(seen)] == seen                      # the prefix the model saw, byte for byte
    assert all("id" not in m for m in seen)
    assert f'id="{block_id}"' in msgs[-1]["content"] and t.block(block_id).summary.strip()[:60] in msgs[-1]["content"]
    v.close()
    (e,) = [e for e in v.load().entries if e.citation and e.citation[0].session == "s-pi"]
    assert e.citation[0].block == block_id


def test_mcp_memory_commit_names_a_pi_block(example_vault, tmp_path):
    from test_mcp import _server_params, _session_run
    from test_worker import wait_idle

    log, block_id, truth = _block_of("pi-compaction")
    t = read_transcript(log)
    root = example_vault.root
    example_vault.close()

    async def body(s):
        ok = await s.call_tool("memory_commit", {"type": "decision", "note": "auth token design", "importance": 8,
                                                 "block": block_id},
                               meta={"acpmem/session": "s-mcp-pi", "acpmem/seq": t.last_seq,
                                     "acpmem/transcript": str(log)})
        bad = await s.call_tool("memory_commit", {"type": "decision", "note": "n", "importance": 5, "block": "b1"},
                                meta={"acpmem/session": "s-mcp-pi", "acpmem/seq": 3, "acpmem/transcript": str(log)})
        return ok, bad

    ok, bad = _session_run(_server_params(root), body, str(tmp_path / "server.err"))
    assert ok.is_error is False and ok.content[0].text.startswith("Noted (r-"), ok.content[0].text
    assert bad.is_error and "no compression block 'b1'" in bad.content[0].text
    from acpmem.vault.writer import Vault

    v = Vault(root, clock=example_vault.clock)
    wait_idle(v)
    (e,) = [e for e in v.load().entries if e.citation and e.citation[0].session == "s-mcp-pi"]
    assert e.citation[0].block == block_id and e.citation[0].compaction == block_id.rsplit("-", 1)[1]
    v.close()


@pytest.mark.parametrize("name", ["pi-branch", "pi-branch-summary"])
def test_an_offline_commit_cites_only_the_live_branch(name, example_vault, cli):
    log, truth, rows, state = load(name)
    t = read_transcript(log)
    v = example_vault
    r = cli("memory", "--vault", str(v.root), "commit", "--type", "decision", "--note",
            "option cookie sessions JWT batching token store", "--importance", "7", "--session", "s-branch", "--seq",
            str(t.last_seq), "--transcript", str(log), "--wait", "--extractor", "offline", "--json")
    assert r.returncode == 0, r.stderr
    v.close()
    entries = [e for e in v.load().entries if e.citation and e.citation[0].session == "s-branch"]
    assert entries
    from acpmem.core.blocks import parse_turns

    live = {e["line"] for e in live_path(truth)}
    for e in entries:
        for c in e.citation:
            seqs = parse_turns(c.turns) if c.turns else parse_turns(str(c.seq))
            assert set(seqs) <= live, (c, sorted(live))
        body = (v.root / e.path).read_text().split("\n---\n", 1)[1]
        for abandoned in ("simpler but no mobile support", "checked by count", "cookie sessions kept"):
            assert abandoned not in body
    with pytest.raises(TranscriptError, match="has no compression blocks"):
        t.block("b1")
