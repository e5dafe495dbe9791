"""No blind fork: a memory_commit that comes with no way to find its conversation says so in its answer ("only the
note will be kept"), in the CLI and the MCP server; and the fork, given no conversation, is not told about "the
conversation above"."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import launcher
from acpmem.write.prompts import fork_system

CHAT = Path(__file__).parent / "fixtures" / "claude-code" / "commit-session.jsonl"


def test_the_cli_commit_without_a_transcript_says_only_the_note_is_kept(vault, cli):
    blind = cli("memory", "--vault", str(vault.root), "commit", "--type", "fact", "--note", "ci uses pnpm 9",
                "--importance", "5", "--session", "s1", "--seq", "1", "--extractor", "offline")
    assert blind.returncode == 0, blind.stderr
    assert "Only the note will be kept: no conversation came with this commit" in blind.stdout
    seen = cli("memory", "--vault", str(vault.root), "commit", "--type", "fact", "--note", "ci uses pnpm 9",
               "--importance", "5", "--session", "s1", "--seq", "8", "--transcript", str(CHAT), "--extractor",
               "offline")
    assert seen.returncode == 0, seen.stderr
    assert "Only the note" not in seen.stdout


def _call(vault_root: Path, tmp_path, env_extra: dict) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_CODE_SESSION_ID", "CLAUDE_PROJECT_DIR")}
    env.update(ACPMEM_USER_VAULT="none", HOME=str(tmp_path), **env_extra)
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "memory_commit", "arguments": {
                "type": "fact", "note": "ci uses pnpm 9", "importance": 5}}}]
    # a real server process without a fresh interpreter (tests/support/launcher.py)
    p = subprocess.Popen([launcher.acp(), "memory", "serve", "--vault", str(vault_root)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        p.stdin.write("".join(json.dumps(m) + "\n" for m in msgs).encode())
        p.stdin.flush()
        answers = [json.loads(p.stdout.readline()) for _ in range(2)]
    finally:
        p.stdin.close()
        p.wait(timeout=60)
        p.stdout.close()
    return answers[1]["result"]["content"][0]["text"]


def test_the_mcp_commit_of_an_unknown_conversation_says_only_the_note_is_kept(vault, tmp_path):
    said = _call(vault.root, tmp_path, {})
    assert said.startswith("Noted (r-") and "Only the note will be kept" in said


def test_the_fork_without_a_conversation_is_told_it_has_only_the_note():
    assert "conversation above" in fork_system("fact", 5)
    for lang in ("en", "zh"):
        text = fork_system("fact", 5, lang, conversation=False)
        assert "conversation above" not in text and "上面对话" not in text
    assert "from that note alone" in fork_system("fact", 5, conversation=False)


def test_the_forks_request_for_a_commit_without_a_conversation(vault):
    from acpmem.write.context import build_body
    from acpmem.write.requests import make_request

    def body(transcript):
        req = make_request(types=vault.settings.types, type="fact", note="ci uses pnpm 9", importance=5,
                           session="s1", seq=8, transcript=transcript, host_tools=None, lang="en",
                           created="2026-12-04T00:00:00Z", request_id="r-test0001")
        return build_body(vault, req, "m", related=[])

    blind = body(None)
    assert [m["role"] for m in blind["messages"]] == ["system", "user"]          # no conversation at all
    assert "conversation above" not in blind["messages"][0]["content"]
    assert "from that note alone" in blind["messages"][0]["content"]
    seen = body(str(CHAT))
    assert "conversation above" in seen["messages"][-2]["content"]
    assert any("Decision: files over 100 MB" in json.dumps(m) for m in seen["messages"][:-2])


def test_a_json_answer_request_without_a_conversation_says_so_in_place_of_the_turns(vault):
    """Under ``[extraction] answer = "json"`` the turns are quoted in the one message: without a conversation the
    model is told there is none and to write only what the note states, never shown an empty quote."""
    from acpmem.write.context import build_body
    from acpmem.write.requests import make_request

    toml = vault.root / "acpmem.toml"
    toml.write_text(toml.read_text().replace('answer = "tools"', 'answer = "json"'))
    from acpmem.vault.reader import VaultReader

    with VaultReader(vault.root) as v:
        req = make_request(types=v.settings.types, type="fact", note="ci uses pnpm 9", importance=5, session="s1",
                           seq=8, transcript=None, host_tools=None, lang="en", created="2026-12-04T00:00:00Z",
                           request_id="r-test0002")
        (msg,) = build_body(v, req, "m", related=[])["messages"]
    turns = msg["content"].split("<conversation>\n", 1)[1].split("\n</conversation>", 1)[0]
    assert turns == "(none: this commit came without its conversation; write only what the focus itself states)"
