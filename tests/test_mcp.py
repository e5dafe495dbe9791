"""`acp memory serve`: the `mcp` package's own client (stdio_client + ClientSession) against a real server process
(started through ``tests/support/launcher.py``: a process of its own on the client's pipes, without a fresh
interpreter's ~0.5 s of imports; ``tests/test_mcp_handshake.py`` and the real clients start the installed ``acp``)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import launcher
from helpers_proc import wait_until
from acpmem.core.tools import tool_definitions
from acpmem.vault import history
from acpmem.vault.writer import Vault
from acpmem.write.requests import pending_dir


def _server_params(vault_root: Path, *extra: str, env: dict | None = None):
    from mcp import StdioServerParameters

    exe = launcher.acp()   # a real server process, forked from one that imported acpmem and mcp once
    full = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_CODE_SESSION_ID", "CLAUDE_PROJECT_DIR")}
    full.update(env or {})
    return StdioServerParameters(command=str(exe), args=["memory", "serve", "--vault", str(vault_root), *extra],
                                 env=full, cwd=str(vault_root))


def _session_run(params, body, errlog_path: str = os.devnull):
    """Run ``body(session)`` inside an initialised MCP client session; returns what it returns. The server's
    stderr goes to ``errlog_path``."""
    import anyio
    from mcp import ClientSession, stdio_client

    result = {}

    async def main():
        with open(errlog_path, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    result["value"] = await body(session)

    anyio.run(main)
    return result["value"]


def test_tools_resource_recall_and_commit_end_to_end(example_vault, tmp_path):
    root = example_vault.root
    head_before = history.log(example_vault, limit=1)[0].commit

    async def body(s):
        tools = (await s.list_tools()).tools
        recall = await s.call_tool("memory_recall", {"query": "rate limit search API Retry-After"})
        bad = await s.call_tool("memory_commit", {"type": "gossip", "note": "x", "importance": 3})
        commit = await s.call_tool("memory_commit", {"type": "decision", "importance": 7,
                                                     "note": "Ship the MCP server over stdio only"})
        resources = (await s.list_resources()).resources
        index1 = (await s.read_resource("memory://index")).contents[0].text
        index2 = (await s.read_resource("memory://index")).contents[0].text
        return tools, recall, bad, commit, resources, index1, index2

    tools, recall, bad, commit, resources, index1, index2 = _session_run(
        _server_params(root, "--session", "s-mcp"), body)

    # exactly the two main-conversation tools, with acpmem's own descriptions and schemas; never memory_write
    expected = {t["name"]: t for t in tool_definitions(for_="main", format="mcp")}
    assert sorted(t.name for t in tools) == ["memory_commit", "memory_recall"]
    for t in tools:
        assert t.description == expected[t.name]["description"]
        assert t.input_schema == expected[t.name]["inputSchema"]
        assert t.annotations.read_only_hint is (t.name == "memory_recall")

    # recall finds the entry, framed as data, with its provenance
    text = recall.content[0].text
    assert recall.is_error is False
    assert "10 requests per second per key" in text and "<<acpmem-data" in text
    rate = [e for e in example_vault.load().entries if e.title.startswith("Rate limits")][0]
    assert rate.id in text

    # a wrong argument comes back as a tool error the model can read, not a protocol failure
    assert bad.is_error is True and "type" in bad.content[0].text and "decision" in bad.content[0].text

    # commit answers at once with the acknowledgement; the offline extractor writes the entry in the background
    assert commit.is_error is False
    ack = commit.content[0].text
    assert ack.startswith("Noted (r-") and "background" in ack

    def written():
        v = Vault(root)
        try:
            return [e for e in v.load().entries if any(c.session == "s-mcp" for c in e.citation)]
        finally:
            v.close()

    entries = wait_until(written)
    assert len(entries) == 1, "the commit made through MCP never became an entry"
    e = entries[0]
    assert e.type == "decision" and e.importance == 7 and e.citation[0].seq == 1
    assert ack.split("(")[1].split(")")[0] == e.source.get("request")
    wait_until(lambda: not list(pending_dir(root / ".acpmem").glob("*.json")))
    assert history.log(example_vault, limit=1)[0].commit != head_before

    # the index resource: the resident index, frozen for the server's session
    assert [str(r.uri) for r in resources] == ["memory://index"]
    assert index1 == index2
    assert "Long-term memory" in index1 and "Session append must be re-entrant" in index1


def test_host_passes_session_and_seq_in_meta_and_sessions_differ_per_process(vault, tmp_path):
    root = vault.root
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps([
        {"role": "user", "content": "Which package manager do we use?"},
        {"role": "assistant", "content": "We use pnpm; npm broke the lockfile twice."},
    ]))

    async def body(s):
        args = {"type": "fact", "note": "pnpm is the package manager", "importance": 6}
        # the schema says additionalProperties: false, and the server holds to it: host values go in _meta
        extra = await s.call_tool("memory_commit", {**args, "session": "host-7", "seq": 1})
        r = await s.call_tool("memory_commit", args, meta={"acpmem/session": "host-7", "acpmem/seq": 1,
                                                         "acpmem/transcript": str(transcript)})
        idx = (await s.read_resource("memory://index")).contents[0].text
        try:
            await s.read_resource("memory://nope")
            unknown = None
        except Exception as exc:   # the client raises the server's error answer
            unknown = str(exc)
        return extra, r, idx, unknown

    errlog = tmp_path / "server.err"
    extra, r, _, unknown = _session_run(_server_params(root), body, str(errlog))
    assert "Traceback" not in errlog.read_text()
    assert extra.is_error is True and "is not an argument of this tool" in extra.content[0].text
    assert extra.content[0].text.startswith("Error: ")
    assert r.is_error is False, r.content[0].text
    assert unknown and "unknown resource memory://nope" in unknown

    def written():
        v = Vault(root)
        try:
            return [e for e in v.load().entries if any(c.session == "host-7" for c in e.citation)]
        finally:
            v.close()

    entries = wait_until(written)
    assert len(entries) == 1 and "pnpm" in (entries[0].title + entries[0].body)
    assert {c.seq for c in entries[0].citation} <= {0, 1}
    wait_until(lambda: not list(pending_dir(root / ".acpmem").glob("*.json")))
    # two server processes without --session get two different generated sessions (two frozen snapshots)
    snaps = sorted(p.name for p in (root / ".acpmem" / "sessions").iterdir() if p.name.startswith("mcp-"))
    _session_run(_server_params(root), lambda s: s.read_resource("memory://index"))
    snaps2 = sorted(p.name for p in (root / ".acpmem" / "sessions").iterdir() if p.name.startswith("mcp-"))
    assert len(snaps) == 1 and len(snaps2) == 2


def test_claude_code_session_uses_the_transcript_its_session_start_hook_recorded(vault, cli, tmp_path):
    """Claude Code gives its MCP servers CLAUDE_CODE_SESSION_ID; the SessionStart hook recorded that session's
    transcript, so a commit through MCP is distilled (offline extractor here) from the real conversation."""
    root = vault.root
    fixture = Path(__file__).parent / "fixtures" / "transcripts" / "claude_code.jsonl"
    transcript = tmp_path / "claude" / "7d2c1e0a.jsonl"
    transcript.parent.mkdir()
    transcript.write_bytes(fixture.read_bytes())
    event = {"session_id": "7d2c1e0a", "transcript_path": str(transcript), "cwd": str(root),
             "hook_event_name": "SessionStart", "source": "startup"}
    h = cli("memory", "hook", "claude-code", input=json.dumps(event), cwd=tmp_path)
    assert h.returncode == 0, h.stderr

    r = _session_run(_server_params(root, env={"CLAUDE_CODE_SESSION_ID": "7d2c1e0a"}),
                     lambda s: s.call_tool("memory_commit", {"type": "lesson", "importance": 8,
                                                             "note": "why session.append lost entries: boolean flag"}))
    assert r.is_error is False, r.content[0].text

    def written():
        v = Vault(root)
        try:
            return [e for e in v.load().entries if any(c.session == "7d2c1e0a" for c in e.citation)]
        finally:
            v.close()

    entries = wait_until(written)
    assert len(entries) == 1
    e = entries[0]
    assert e.source.get("extractor") == "offline"
    # it cites messages of the recorded transcript and quotes them (the note alone says nothing of this)
    assert e.citation and {c.seq for c in e.citation} <= {1, 2, 3, 4, 5, 7, 10}
    assert "use the per-session lock" in e.body and "seq 7" in e.body
    wait_until(lambda: not list(pending_dir(root / ".acpmem").glob("*.json")))


def test_serve_help_and_no_vault(cli, tmp_path):
    h = cli("memory", "serve", "--help")
    assert h.returncode == 0 and "memory://index" in h.stdout and "claude mcp add" in h.stdout
    r = cli("memory", "serve", cwd=tmp_path, input="")
    assert r.returncode == 1 and "acp memory init" in r.stderr


def test_recall_tells_the_client_what_the_embedding_channel_did_and_the_model_one_line_on_fallback(vault, tmp_path):
    """With [embeddings] on, a recall result's _meta carries the vectors' counts; when the endpoint fails, the
    warning too (and in the server's stderr), and the text the model reads gains exactly one closing line."""
    from embeddings_server import embeddings_server
    from test_embedding import SYNONYMS, TOPICS, configure, write
    from acpmem.read import embedding
    from acpmem.read.retrieval import lexical_fallback_note

    write(vault)
    query = {"query": "retry uploads backoff"}
    errlog = tmp_path / "serve.err"
    with embeddings_server(synonyms=SYNONYMS) as srv:
        reader = configure(vault, srv, dimensions=64, batch_timeout_seconds=1.0)
        embedding.run_pass(reader)

        async def body(s):
            ok = await s.call_tool("memory_recall", query)
            srv.status = 500
            failed = await s.call_tool("memory_recall", query)
            return ok, failed

        ok, failed = _session_run(_server_params(vault.root, "--session", "s-vec"), body, str(errlog))
    assert not ok.is_error and not failed.is_error
    meta_ok, meta_bad = ok.meta or {}, failed.meta or {}
    said = meta_ok["acpmem/vectors"]
    assert (said["model"], said["present"], said["missing"], said["used"]) == ("hash-64", len(TOPICS), 0, True)
    assert "acpmem/warning" not in meta_ok
    assert "HTTP 500" in meta_bad["acpmem/warning"] and "lexical search alone" in meta_bad["acpmem/warning"]
    assert meta_bad["acpmem/vectors"]["used"] is False
    text_ok, text_bad = ok.content[0].text, failed.content[0].text
    note = lexical_fallback_note(reader)
    assert note not in text_ok and text_bad.endswith("\n\n" + note)
    assert text_bad.count("\n") > 3 and "HTTP 500" not in text_bad          # the endpoint's error stays out
    assert "Retry uploads with exponential backoff" in text_bad             # lexical still finds it
    assert errlog.read_text().count("Warning: ") == 1 and "HTTP 500" in errlog.read_text()


def test_recall_tells_the_client_what_the_rerank_stage_did_and_the_model_nothing(vault, tmp_path):
    """With [rerank] on, a recall result's _meta carries what the stage did; a failing rerank model puts its
    warning there and in the server's stderr, and the text the model reads is recall's own order, unannotated."""
    from embeddings_server import embeddings_server
    from test_reranking import NOTES, configure
    from test_embedding import write

    write(vault, NOTES)
    query = {"query": "deploy notes"}
    errlog = tmp_path / "serve.err"
    with embeddings_server() as srv:
        configure(vault, srv)

        async def body(s):
            ok = await s.call_tool("memory_recall", query)
            srv.rerank_status = 500
            failed = await s.call_tool("memory_recall", query)
            return ok, failed

        ok, failed = _session_run(_server_params(vault.root, "--session", "s-rr"), body, str(errlog))
    assert not ok.is_error and not failed.is_error
    assert ok.meta == {"acpmem/rerank": {"model": "cross-test", "candidates": 6, "used": True}}
    said = failed.meta["acpmem/rerank"]
    assert said["used"] is False and "HTTP 500" in said["warning"] and "acpmem/warning" not in failed.meta
    text = failed.content[0].text
    assert "Deploy notes" in text and "HTTP 500" not in text and "lexical" not in text
    log = errlog.read_text()
    assert log.count("Warning: ") == 1 and "HTTP 500" in log and "kept its own order" in log


def test_recall_result_has_no_meta_with_the_channel_off(example_vault):
    async def body(s):
        return await s.call_tool("memory_recall", {"query": "rate limit search API Retry-After"})

    r = _session_run(_server_params(example_vault.root, "--session", "s-off"), body)
    assert not r.is_error and not r.meta and "Meaning-based" not in r.content[0].text


def test_memory_commit_refuses_what_its_extraction_could_never_read(vault, tmp_path):
    """A transcript that is not UTF-8, a corrupt zstd log, a seq beyond the transcript's end, a block it does not
    hold: a tool error with one `Error:` line (the model sees it), nothing recorded, no "Noted"."""
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(b'[{"role": "user", "content": "caf\xe9"}]')
    zstd = tmp_path / "session.jsonl.zstd"
    zstd.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x07garbage" * 8)
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "Which package manager?"},
                                {"role": "assistant", "content": "pnpm."}]))
    args = {"type": "fact", "note": "pnpm is the package manager", "importance": 6}
    cases = [({"acpmem/transcript": str(latin1)}, args, "not UTF-8"),
             ({"acpmem/transcript": str(zstd)}, args, "zstd"),
             ({"acpmem/transcript": str(chat), "acpmem/seq": 5}, args, "no turn at seq 5"),
             ({"acpmem/transcript": str(chat), "acpmem/seq": 1}, {**args, "block": "b3"}, "no compression blocks")]

    async def body(s):
        return [await s.call_tool("memory_commit", a, meta=m) for m, a, _ in cases]

    errlog = tmp_path / "server.err"
    results = _session_run(_server_params(vault.root, "--session", "s-mcp"), body, str(errlog))
    for (_, _, said), r in zip(cases, results):
        text = r.content[0].text
        assert r.is_error is True, text
        assert text.startswith("Error: ") and "\n" not in text and " — " in text and said in text, text
        assert "Noted" not in text
    assert "Traceback" not in errlog.read_text()
    assert not list(pending_dir(vault.root / ".acpmem").glob("r-*.json"))


def test_memory_commit_in_a_vault_folder_without_git_is_refused_at_once(vault, tmp_path):
    """The model must not be told "Noted" for a memory the worker can never write (no .git: no history)."""
    import shutil

    shutil.rmtree(vault.root / ".git")

    async def body(s):
        return await s.call_tool("memory_commit", {"type": "fact", "note": "pnpm is the package manager",
                                                   "importance": 6}, meta={"acpmem/seq": 1})

    r = _session_run(_server_params(vault.root, "--session", "s-mcp"), body)
    text = r.content[0].text
    assert r.is_error is True and text.startswith("Error: ") and "no .git folder" in text, text
    assert not list(pending_dir(vault.root / ".acpmem").glob("r-*.json"))


def test_lines_that_are_not_one_json_rpc_message_get_an_error_answer_over_real_stdio(vault):
    """The real server process over real pipes: each bad line gets its JSON-RPC error (a client must never wait
    forever), and the server goes on answering."""
    import queue
    import subprocess
    import threading

    exe = launcher.acp()
    proc = subprocess.Popen([str(exe), "memory", "serve", "--vault", str(vault.root), "--session", "s-rpc"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=str(vault.root))
    answers: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [answers.put(json.loads(ln)) for ln in proc.stdout], daemon=True)
    reader.start()

    def send(line: str) -> dict:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
        return answers.get(timeout=60)    # a bound for a hung server, not a measurement

    try:
        init = send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}))
        assert init["id"] == 1 and "result" in init
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        cases = [("this is not json", -32700, None), ("{}", -32600, None), ("[]", -32600, None),
                 (json.dumps([{"jsonrpc": "2.0", "id": 2, "method": "ping"}]), -32600, None),
                 (json.dumps({"jsonrpc": "2.0", "id": 3}), -32600, 3),
                 (json.dumps({"jsonrpc": "2.0", "id": 4, "method": 7}), -32600, 4),
                 (json.dumps({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}), -32600, None)]
        for line, code, ident in cases:
            got = send(line)
            assert got["jsonrpc"] == "2.0" and got["error"]["code"] == code and got["id"] == ident, (line, got)
        assert send(json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"})) == {"jsonrpc": "2.0", "id": 9,
                                                                                   "result": {}}
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
