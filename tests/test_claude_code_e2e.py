"""acpmem inside the real Claude Code: `@anthropic-ai/claude-code` 2.1.337 from npm (integrations/claude-code, installed
by integrations/install-hosts.sh), run as `claude -p` against a scripted Anthropic Messages API server of ours on
127.0.0.1 (tests/support/anthropic_server.py), wired exactly as the README says: the hooks, permissions and
`autoMemoryEnabled` of its `.claude/settings.json` block, `claude mcp add acpmem -- acp memory serve`,
`--allowedTools` for `-p`. The fork goes to the loopback OpenAI server. What is asserted is what Claude Code sent the
model (every request is recorded), what it wrote (its session transcript) and what acpmem wrote (the vault).

Nothing reaches the internet: ANTHROPIC_BASE_URL is the scripted server, telemetry, the auto-updater and all
non-essential traffic are off, HOME and CLAUDE_CONFIG_DIR are the test's own folders. Five `claude -p` runs in all.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from anthropic_server import fake_anthropic, text, tool_use
from helpers_proc import wait_until
from openai_server import reply

from acpmem import Vault
from acpmem.core.tools import tool_definitions

ROOT = Path(__file__).resolve().parents[1]
CLAUDE = ROOT / "integrations" / "claude-code" / "node_modules" / ".bin" / "claude"
ACP = Path(sys.executable).parent / "acp"
RUN_S = 180   # one `claude -p` run, bounded

pytestmark = pytest.mark.skipif(not CLAUDE.exists() and not os.environ.get("ACPMEM_REQUIRE_CLAUDE_CODE"),
                                reason="Claude Code is not installed here: run integrations/install-hosts.sh")

TOOLS = ("mcp__acpmem__memory_recall", "mcp__acpmem__memory_commit")
DECISION = "Decision: files over 100 MB go through /v2/uploads/chunked in 8 MB parts; the plain endpoint times out."
# what Claude Code's own file memory tells the model when it is on (2.1.337's system prompt)
AUTO_MEMORY = "You have a persistent file-based memory"
NOTE = "how big uploads are sent"   # the note alone does not say what was decided: only the turn's text does


def readme_setup() -> tuple[dict, str]:
    """The README's Claude Code setup: the .claude/settings.json it shows, and its shell block."""
    text_ = (ROOT / "README.md").read_text("utf-8")
    section = text_[text_.index("**Claude Code**"):text_.index("**Any MCP client**")]
    settings = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))
    shell = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return settings, shell


def _env(tmp_path: Path, base_url: str, openai=None) -> dict:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": f"{ACP.parent}{os.pathsep}{os.environ['PATH']}", "HOME": str(home),
           "CLAUDE_CONFIG_DIR": str(home / ".claude"), "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "dummy",
           "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "DISABLE_ERROR_REPORTING": "1", "ACPMEM_USER_VAULT": "none", "GIT_CONFIG_GLOBAL": os.environ.get(
               "GIT_CONFIG_GLOBAL", os.devnull)}
    if openai is not None:
        env.update(OPENAI_BASE_URL=openai.base_url, OPENAI_MODEL="fake-model", OPENAI_API_KEY="sk-test")
    return env


def _project(tmp_path: Path, settings: dict) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    r = subprocess.run([str(ACP), "memory", "init"], cwd=project, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HOME": str(tmp_path / "home"), "ACPMEM_USER_VAULT": "none"})
    assert r.returncode == 0, r.stderr
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text(json.dumps(settings, indent=2))
    return project


def _claude(project: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([str(CLAUDE), *args], cwd=project, env=env, capture_output=True, text=True, timeout=RUN_S)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    return r


def _mcp_add(project: Path, env: dict, shell: str) -> None:
    line = next(x for x in shell.splitlines() if x.startswith("claude mcp add"))
    _claude(project, env, *line.split()[1:])


def _p_line(shell: str) -> str:
    return next(x for x in shell.splitlines() if "claude -p" in x)


def _allowed(shell: str) -> list[str]:
    return ["--allowedTools", re.search(r"--allowedTools (\S+)", _p_line(shell)).group(1)]


def _readme_env(shell: str) -> dict:
    """The variables the README's `claude -p` line sets (MCP_CONNECTION_NONBLOCKING=0)."""
    return dict(re.findall(r"(\w+)=(\S+)\s", _p_line(shell).split("claude -p")[0]))


def _main(srv) -> list[dict]:
    """The requests of the main conversation (those that offer tools)."""
    return [b for b in srv.messages() if b.get("tools")]


def _results(body: dict) -> list[dict]:
    last = body["messages"][-1]["content"]
    return [c for c in last if isinstance(c, dict) and c.get("type") == "tool_result"] if isinstance(last, list) \
        else []


def _text(block: dict) -> str:
    c = block.get("content")
    return c if isinstance(c, str) else "".join(x.get("text", "") for x in c or [])


def _transcript(home: Path, session: str) -> Path:
    (found,) = (home / ".claude" / "projects").glob(f"*/{session}.jsonl")
    return found


def _session_of(srv) -> str:
    # Claude Code names the session in a header of every model request
    return next(r.headers["x-claude-code-session-id"] for r in srv.requests if "x-claude-code-session-id" in r.headers)


def test_the_readme_setup_commits_distils_the_commit_turn_and_the_next_session_recalls(tmp_path, openai_server):
    settings, shell = readme_setup()
    assert _readme_env(shell) == {"MCP_CONNECTION_NONBLOCKING": "0"}
    project = _project(tmp_path, settings)
    home = tmp_path / "home"

    # the fork: writes what the commit turn said — the entry exists only if the fork read that turn
    def fork(body):
        said = json.dumps(body["messages"])
        m = re.search(r"Decision: ([^\"\\]+)", said)
        return reply.writes(reply.write(f"- {m.group(1) if m else 'the fork never saw the decision'}",
                                        title="Big uploads go through the chunked endpoint"))
    openai_server.responder = fork

    # ---- session one: the model states the decision and commits it in the same turn
    def one(body):
        if any(r.get("tool_use_id") == "toolu_commit" for r in _results(body)):
            return [text("Kept for later sessions.")]
        return [text(DECISION), tool_use("mcp__acpmem__memory_commit",
                                         {"type": "decision", "note": NOTE, "importance": 8}, "toolu_commit")]

    with fake_anthropic(one) as srv:
        env = {**_env(tmp_path, srv.base_url, openai_server), **_readme_env(shell)}
        _mcp_add(project, env, shell)
        _claude(project, env, "-p", "We settled how big uploads work; keep it.", *_allowed(shell))
    first, second = _main(srv)
    sid = _session_of(srv)
    offered = {t["name"]: t for t in first["tools"] if t["name"].startswith("mcp__acpmem__")}
    assert set(offered) == set(TOOLS)                                   # both tools, on the first request
    assert settings["autoMemoryEnabled"] is False and AUTO_MEMORY not in json.dumps(first)   # one memory, not two
    ours = {t["name"]: t for t in tool_definitions(for_="main", format="mcp")}
    for name in ("memory_recall", "memory_commit"):
        schema = offered[f"mcp__acpmem__{name}"]["input_schema"]
        assert schema["properties"] == ours[name]["inputSchema"]["properties"], name   # acpmem's schema, unchanged
    (ack,) = _results(second)
    assert ack.get("is_error") is not True and _text(ack).startswith("Noted (r-"), ack
    assert "only the note" not in _text(ack)                          # the conversation was found

    # the fork read Claude Code's own transcript up to and including the commit turn
    transcript = _transcript(home, sid)
    lines = transcript.read_text("utf-8").splitlines()
    call_line = next(n for n, x in enumerate(lines) if '"toolu_commit"' in x and '"tool_use"' in x)

    def written():
        v = Vault(project / ".acp-memory")
        try:
            return [e for e in v.load().entries if any(c.session == sid for c in e.citation)]
        finally:
            v.close()
    (entry,) = wait_until(written, timeout=120)
    assert "/v2/uploads/chunked in 8 MB parts" in entry.body, entry.body
    assert entry.type == "decision" and entry.importance == 8
    assert [c.seq for c in entry.citation] == [call_line]               # cites the call's own line
    fork_request = json.dumps(openai_server.requests[0].body["messages"])
    assert DECISION.split(";")[0] in fork_request and "We settled how big uploads work" in fork_request

    # the index (SessionStart hook): where Claude Code put it, byte-identical on both requests of the session
    index = subprocess.run([str(ACP), "memory", "list", "--format", "prompt", "--session", sid], cwd=project,
                           capture_output=True, text=True, env=env, timeout=120).stdout.strip()
    placed = [[m for m in b["messages"] if index.splitlines()[0] in json.dumps(m)] for b in (first, second)]
    # the same text on both: Claude Code marks its newest message for the prompt cache (2.1.337 writes the marked
    # message as a list of blocks and an unmarked one as a plain string), which changes neither the text nor what
    # the cache matches
    assert placed[0] and [(m["role"], _text(m)) for m in placed[0]] == [(m["role"], _text(m)) for m in placed[1]]
    assert index in _text(placed[0][0])
    (where,) = placed[0]
    at = first["messages"].index(where)
    assert where["role"] == "system" and first["messages"][at - 1]["role"] == "user"   # right after the user's first

    # ---- session two: the index is in context on the first request, recall finds the entry
    def two(body):
        if any(r.get("tool_use_id") == "toolu_recall" for r in _results(body)):
            return [text("Big files use the chunked endpoint.")]
        return [tool_use("mcp__acpmem__memory_recall", {"query": "upload limit big files"}, "toolu_recall")]

    with fake_anthropic(two) as srv2:
        env2 = {**_env(tmp_path, srv2.base_url, openai_server), **_readme_env(shell)}
        _claude(project, env2, "-p", "What is the upload limit for big files?", *_allowed(shell))
    first2, second2 = _main(srv2)
    assert {t["name"] for t in first2["tools"]} >= set(TOOLS)
    assert entry.title in json.dumps(first2["messages"])               # the index, first request, names the entry
    # the UserPromptSubmit hook: the entry the prompt is about, in full (the index gives titles only), on the first
    # request, after the user's prompt (2.1.337 puts it in the system message that holds the index)
    asked = [n for n, m in enumerate(first2["messages"]) if "What is the upload limit for big files?" in json.dumps(m)]
    brought = [n for n, m in enumerate(first2["messages"]) if "/v2/uploads/chunked in 8 MB parts" in json.dumps(m)]
    assert asked and brought and brought[0] > asked[0]
    (recalled,) = _results(second2)
    assert "/v2/uploads/chunked in 8 MB parts" in _text(recalled) and entry.id in _text(recalled)

    # a later prompt of the same session (`--resume`): the message that holds the index is the same text as on the
    # session's first request, so the prefix the provider's prompt cache matches stays put
    sid2 = _session_of(srv2)
    with fake_anthropic(lambda body: [text("The chunked one.")]) as srv3:
        env3 = {**_env(tmp_path, srv3.base_url, openai_server), **_readme_env(shell)}
        _claude(project, env3, "-p", "Which endpoint takes them?", "--resume", sid2, *_allowed(shell))
    (later,) = _main(srv3)
    index2 = subprocess.run([str(ACP), "memory", "list", "--format", "prompt", "--session", sid2], cwd=project,
                            capture_output=True, text=True, env=env3, timeout=120).stdout.strip()
    head = index2.splitlines()[0]
    held = [[_text(m) for m in b["messages"] if head in _text(m)] for b in (first2, later)]
    assert len(held[0]) == 1 and held[0] == held[1] and index2 in held[0][0]   # once, unchanged (no second on resume)
    at = next(n for n, m in enumerate(later["messages"]) if head in _text(m))
    assert "Which endpoint takes them?" in json.dumps(later["messages"][at + 1:])   # the new prompt comes after it


def test_permissions_under_p_allowed_tools_or_a_trusted_folder(tmp_path):
    """What makes the tools allowed under `claude -p` (measured): the project's permissions.allow is ignored until
    the folder is trusted (Claude Code's trust dialog, answered in its config) — the hooks of the same file run
    either way — so the README passes --allowedTools for -p."""
    settings, shell = readme_setup()
    project = _project(tmp_path, settings)

    def recall(body):
        if _results(body):
            return [text("done")]
        return [tool_use("mcp__acpmem__memory_recall", {"query": "anything"}, "toolu_r")]

    answers = []
    for trusted in (False, True):
        with fake_anthropic(recall) as srv:
            env = {**_env(tmp_path, srv.base_url), **_readme_env(shell)}
            if not trusted:
                _mcp_add(project, env, shell)
            else:   # what accepting the trust dialog of an interactive `claude` in this folder records
                config = Path(env["CLAUDE_CONFIG_DIR"]) / ".claude.json"
                data = json.loads(config.read_text())
                data["projects"][str(project)]["hasTrustDialogAccepted"] = True
                config.write_text(json.dumps(data))
            _claude(project, env, "-p", "look it up")
        (answer,) = _results(_main(srv)[-1])
        answers.append(answer)
        assert "Long-term memory" in json.dumps(_main(srv)[0]["messages"])   # the SessionStart hook ran both times
    denied, allowed = answers
    assert denied.get("is_error") is True and "haven't granted" in _text(denied)
    assert allowed.get("is_error") is not True and "Error" not in _text(allowed)
