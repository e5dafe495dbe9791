"""`show --source` reads an entry's turns from the transcript its commit named — the file the fork read — even when
the session's first-sighted transcript (an earlier commit's, the Claude Code hook's, the MCP server's) is another
file."""
from __future__ import annotations

import json


def _chat(path, words: str):
    path.write_text("\n".join(json.dumps(m) for m in (
        {"role": "user", "content": f"Tell me about {words}."},
        {"role": "assistant", "content": f"Decision: {words} stay as they are."})) + "\n")
    return path


def test_show_source_reads_the_transcript_the_commit_named(vault, cli, tmp_path):
    first = _chat(tmp_path / "first.jsonl", "the nightly backups")
    second = _chat(tmp_path / "second.jsonl", "the upload limits")
    ids = []
    for t, note in ((first, "nightly backups"), (second, "upload limits")):
        r = cli("memory", "--vault", str(vault.root), "commit", "--type", "decision", "--note", note, "--importance",
                "6", "--session", "s1", "--seq", "1", "--transcript", str(t), "--wait", "--extractor", "offline",
                "--json")
        assert r.returncode == 0, r.stderr
        ids.append(json.loads(r.stdout)["outcome"]["entries"][0]["id"])
    shown = []
    for ident in ids:
        r = cli("memory", "--vault", str(vault.root), "show", ident, "--source", "--json")
        assert r.returncode == 0, r.stderr
        shown.append(r.stdout)
    assert str(first) in shown[0] and "nightly backups stay" in shown[0]
    assert str(second) in shown[1] and "upload limits stay" in shown[1]       # not the session's first file
    assert "nightly" not in shown[1]
