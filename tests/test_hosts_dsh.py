"""Conformance: DSH session logs written by the host's own code (``tests/fixtures/hosts/dsh/``, see its README) read by
acpmem exactly as the host reads them. Each log's ``*.truth.json`` holds what the host's session reader and the
plugin's block ledger say; every message, every block and the model-visible surface (final, and at each compaction
point where the truth records it) is compared with it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from acpmem.hosts import dsh as hostlogs
from acpmem.hosts.dsh import last_message_seq, read_dsh
from acpmem.hosts.transcripts import openai_messages, read_transcript

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hosts" / "dsh"
ROLES = {"user/message": "user", "assistant/message": "assistant", "tool/result": "tool"}


def _logs() -> list[tuple[str, str]]:
    """(log file, truth file) pairs: ``X.truth.json`` is the truth of ``X.jsonl.zstd`` / ``X.jsonl``, and
    ``X.host.truth.json`` what ``tools/hostlogs/dsh/truth.mjs`` (the host's persistence reader, surface fold and
    block ledger) says about the same log — with full texts and the surface at each compaction point. Session 1's
    re-encodings (``compression: 'none'``, ``packChunks: false``) are also read against session 1's truth."""
    out = []
    for truth in sorted(FIXTURES.glob("*.truth.json")):
        stem = truth.name[:-len(".truth.json")].removesuffix(".host")
        for suffix in (".jsonl.zstd", ".jsonl"):
            if (FIXTURES / (stem + suffix)).is_file():
                out.append((stem + suffix, truth.name))
    out += [("plain-session.jsonl", "dsh-session1.truth.json"),
            ("unpacked-session.jsonl.zstd", "dsh-session1.truth.json")]
    return out


LOGS = _logs()


def _truth(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text("utf-8"))


def _text(message: dict) -> str:
    return message.get("content") or ""


@pytest.fixture(params=LOGS, ids=[log for log, _ in LOGS])
def case(request):
    log, truth = request.param
    return read_transcript(FIXTURES / log), _truth(truth), FIXTURES / log


def test_the_fixtures_are_there():
    assert {"dsh-session1.jsonl.zstd", "plain-session.jsonl", "unpacked-session.jsonl.zstd",
            "dsh-basic-resumed.jsonl.zstd"} <= {x for x, _ in LOGS}
    assert len([t for _, t in LOGS if t.endswith(".host.truth.json")]) == 3


def test_the_resumed_session_appended_frames_to_the_file_it_was_loaded_from():
    """The DSH-own-compaction session was written, loaded back by the persistence backend and continued: the
    header frame, the first run's batches, then the resumed run's, after a ``session/end-seed`` event."""
    import zstandard

    data = (FIXTURES / "dsh-basic-resumed.jsonl.zstd").read_bytes()
    frames, text, d = 0, b"", zstandard.ZstdDecompressor()
    while data:
        obj = d.decompressobj()
        text += obj.decompress(data)
        data, frames = obj.unused_data, frames + 1
    lines = [json.loads(x) for x in text.decode().splitlines()]
    assert frames >= 3 and lines[0]["type"] == "session" and "seq" not in lines[0]
    seed = next(x["seq"] for x in lines if x["type"] == "session/end-seed")
    assert any(x["type"] == "compaction/summary" and x["seq"] > seed for x in lines)
    assert all("tier" not in x["data"] and "kernelBlockId" not in x["data"] for x in lines
               if x["type"] == "compaction/summary")   # DSH's own compaction records neither


def test_every_message_reads_as_the_host_reads_it(case):
    t, truth, _ = case
    assert t.warnings == ()
    want = truth["messageEvents"]
    got = [m for m in t.events]
    # another run of the same script (plain, unpacked) has its own compaction ids, quoted in some texts
    rename = {b.compaction_id[:8]: r["blockId"][:8] for b, r in zip(t.blocks, truth["registry"])}
    assert [m.seq for m in got] == [w["seq"] for w in want]
    for m, w in zip(got, want):
        assert m.role == ROLES[w["type"]], m.seq
        full = w.get("fullText")
        if full is not None:
            assert _text(m.raw) == full, m.seq
        else:   # the truth keeps the first 60 characters of the host's text
            text = _text(m.raw)
            for mine, theirs in rename.items():
                text = text.replace(mine, theirs)
            assert text[:60] == w["text"], m.seq
        calls = [c["id"] for c in m.raw.get("tool_calls") or ()]
        assert calls == w["calls"], m.seq
        if m.role == "tool":
            assert m.raw["tool_call_id"] == w["source"]["callId"]
    # the ids the host gives the kernel: one per message, one per call for a message of two or more calls
    ids = [i for m in got for i in hostlogs.message_ids(m.seq, m.raw)]
    assert ids == truth["coreIds"]
    assert "319#call_a" in ids or not any(len(w["calls"]) > 1 for w in want)


def test_the_event_count_and_numbering_are_the_hosts(case):
    t, truth, path = case
    assert truth["firstSeq"] == 0
    # the last-seq scan: the last message event's seq; every event (packed rows expanded) numbered from 0
    assert last_message_seq(path, str(path)) == truth["messageEvents"][-1]["seq"]
    assert t.last_seq == truth["messageEvents"][-1]["seq"]


def test_every_block_reads_as_the_hosts_registry_and_ledger(case):
    t, truth, _ = case
    registry, ledger = truth["registry"], truth["ledger"]
    assert [b.id for b in t.blocks] == [r["kernelBlockId"] for r in registry]
    by_cid = {r["blockId"]: r["kernelBlockId"] for r in registry}
    same_run = t.blocks[0].compaction_id == registry[0]["blockId"]
    for b, r, led in zip(t.blocks, registry, ledger):
        assert b.tier == r["tier"] and b.active == r["active"], b.id
        assert b.at == r["summarySeq"], b.id   # the checkpoint message's seq
        if same_run:
            assert list(b.nested) == [by_cid[p] for p in r["parentBlockIds"]], b.id
        covered = sorted({int(i.split("#")[0]) for i in led["effectiveMessageIds"]}) \
            if "effectiveMessageIds" in led else None
        if covered is not None:
            assert list(b.seqs) == covered, b.id
        if "expandedSeqs" in led:   # the host's expandShadowedSeqs: the originals behind nested checkpoints
            assert list(b.seqs) == sorted(set(led["expandedSeqs"])), b.id
        if "summary" in led:
            assert b.summary == led["summary"], b.id
            assert b.topic == led.get("topic"), b.id
        if same_run:
            assert b.compaction_id == r["blockId"]
        # the block's summary is the text of its checkpoint message (DSH's own compaction frames it)
        cp = _text(next(m for m in t.events if m.seq == r["summarySeq"]).raw)
        assert b.summary.startswith(cp[:60]) or ("<compacted-summary>" in cp and b.summary in cp)
    if not same_run:   # another run of the same script: other compaction ids, the same nesting
        assert [b.nested for b in t.blocks] == [tuple(by_cid[p] for p in r["parentBlockIds"]) for r in registry]


def test_the_model_visible_surface_is_the_hosts(case):
    t, truth, _ = case
    assert [m.seq for m in t.messages] == truth["surface"]
    assert len(openai_messages(t)) == truth["derivedCount"]
    for point in truth.get("surfaceAt", ()):   # at each compaction point (and each prune replacement)
        assert [m.seq for m in t.upto(point["seq"]).messages] == point["surface"], point["seq"]
    assert "surfaceAt" in truth or truth_name_is_shared(truth)


def truth_name_is_shared(truth: dict) -> bool:
    return "writtenBy" not in truth   # the shared session-1 truth records no compaction points


def test_the_compress_call_is_hidden_by_the_prune_replacement(case):
    t, truth, path = case
    if "basic" in path.name:   # DSH's own compaction has no compress tool: nothing to hide, no prune event
        assert not any(m.raw.get("tool_calls") and m.raw["tool_calls"][0]["function"]["name"] == "compress"
                       for m in t.events)
        return
    on_surface = {m.seq for m in t.messages}
    calls = {m.seq for m in t.events if m.role == "assistant"
             and any(c["function"]["name"] == "compress" for c in m.raw.get("tool_calls") or ())}
    assert calls and not calls & on_surface
    results = {m.seq for m in t.events if m.role == "tool" and m.raw["content"].startswith("Compressed ")}
    assert results and not results & on_surface


def test_reading_only_some_turns_finds_the_same_blocks(case):
    t, truth, path = case
    want = {truth["messageEvents"][0]["seq"], truth["messageEvents"][-1]["seq"]}
    part = read_dsh(path, str(path), only=frozenset(want))
    assert part.blocks == t.blocks and {e.seq for e in part.events} == want and part.warnings == ()


# ------------------------------------------------------------------- the memory commands on each host-written log

BLOCK_LOGS = sorted({log for log, _ in LOGS})


@pytest.mark.parametrize("log", BLOCK_LOGS)
def test_commit_block_extract_block_and_show_source_on_a_host_log(example_vault, tmp_path, cli, log):
    """Through the CLI, the offline extractor as the fork: ``commit --block`` of the log's last block and
    ``extract --note --block`` of its first cite the block, its tier and the turns it covers; ``show --source``
    prints the block and those turns read back from the log; an unknown block is one line naming the blocks."""
    path = FIXTURES / log
    t = read_transcript(path)
    last, first = t.blocks[-1], t.blocks[0]
    v = example_vault
    base = ["memory", "--vault", str(v.root)]
    r = cli(*base, "commit", "--type", "decision", "--note", "auth design", "--importance", "8", "--session",
            "s-host", "--seq", str(t.last_seq), "--transcript", str(path), "--block", last.id, "--extractor",
            "offline", "--wait", "--json")
    assert r.returncode == 0, r.stderr
    (entry,) = json.loads(r.stdout)["outcome"]["entries"]
    r = cli(*base, "extract", "--note", "auth design", "--type", "decision", "--importance", "7", "--session",
            "s-host", "--seq", str(t.last_seq), "--transcript", str(path), "--block", first.id, "--extractor",
            "offline", "--json")
    assert r.returncode == 0, r.stderr
    (other,) = [e["id"] for o in json.loads(r.stdout)["outcomes"] for e in o["entries"]]
    from acpmem.core.blocks import turns_text

    entries = {e.id: e for e in v.load().entries}
    for ident, b in ((entry["id"], last), (other, first)):
        (c,) = entries[ident].citation
        assert (c.block, c.tier, c.compaction, c.turns) == (b.id, b.tier, b.compaction_id, turns_text(b.seqs))
    r = cli(*base, "show", entry["id"], "--source", "--transcript", str(path))
    assert r.returncode == 0, r.stderr
    assert f'kind="block" id="{last.id}" tier="{last.tier}"' in r.stdout and last.summary[:40] in r.stdout
    shown = [int(x) for x in __import__("re").findall(r'kind="turn" seq="([0-9]+)"', r.stdout)]
    assert shown == list(last.seqs)
    assert "Turns not in the transcript" not in r.stdout
    r = cli(*base, "commit", "--type", "decision", "--note", "n", "--importance", "5", "--session", "s-host",
            "--seq", "3", "--transcript", str(path), "--block", "b9")
    assert r.returncode != 0 and r.stderr.count("\n") == 1
    assert f"no compression block 'b9' (it has {', '.join(b.id for b in t.blocks)})" in r.stderr


@pytest.mark.parametrize("log", BLOCK_LOGS)
def test_mcp_memory_commit_of_a_block_on_a_host_log(example_vault, log):
    """The MCP server given the host's log: ``memory_commit`` with a block and no seq cites the log's last message
    (the streamed scan) and the fork writes an entry citing the block."""
    from helpers_proc import wait_until
    from test_mcp import _server_params, _session_run

    from acpmem.write import requests

    path = FIXTURES / log
    t = read_transcript(path)
    b = t.blocks[0]

    async def body(s):
        return await s.call_tool("memory_commit", {"type": "decision", "note": "auth design", "importance": 8,
                                                   "block": b.id},
                                 meta={"acpmem/session": "s-host", "acpmem/transcript": str(path)})

    r = _session_run(_server_params(example_vault.root), body)
    assert r.is_error is False, r.content[0].text
    done = wait_until(lambda: requests.read_done(example_vault.state_dir))
    assert done[-1]["seq"] == t.last_seq and done[-1]["status"] == "written", done[-1]
    (entry,) = [e for e in example_vault.load().entries if e.citation and e.citation[0].session == "s-host"]
    assert (entry.citation[0].block, entry.citation[0].tier) == (b.id, b.tier)


def test_a_broken_host_log_is_one_line_and_the_streaming_check_finds_it(tmp_path):
    """A real log with one line damaged, or cut before its last message: the reader and the cheap check both
    answer one ``TranscriptError`` line naming the file and line."""
    from acpmem.core.errors import TranscriptError
    from acpmem.hosts.dsh import check_dsh

    lines = (FIXTURES / "plain-session.jsonl").read_text("utf-8").split("\n")
    assert check_dsh(FIXTURES / "plain-session.jsonl", "x") == _truth("dsh-session1.truth.json")["messageEvents"][-1]["seq"]
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([*lines[:40], lines[40][:-30], *lines[41:]]), "utf-8")
    dropped = tmp_path / "dropped.jsonl"
    dropped.write_text("\n".join([*lines[:40], *lines[41:]]), "utf-8")   # a line lost: the numbering says so
    for bad, where in ((broken, ":41: not valid JSON"), (dropped, ":41: seq ")):
        for read in (lambda p: read_transcript(p), lambda p: check_dsh(p, str(p))):
            with pytest.raises(TranscriptError) as err:
                read(bad)
            line = err.value.line()
            assert where in line and str(bad) in line and "\n" not in line
    only_header = tmp_path / "header.jsonl"
    only_header.write_text(lines[0] + "\n", "utf-8")
    with pytest.raises(TranscriptError, match="no messages in this session log"):
        check_dsh(only_header, str(only_header))
