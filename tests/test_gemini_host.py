"""acpmem inside the real Gemini CLI: `@google/gemini-cli` 0.61.0 from npm (integrations/gemini, installed by
integrations/install-hosts.sh), run as `gemini -p` against a scripted Gemini API server on 127.0.0.1
(tests/support/gemini_server.py, through GOOGLE_GEMINI_BASE_URL), with an isolated HOME and acpmem wired exactly as README.md's
Gemini CLI section says (settings.json: the MCP server with "trust": true, the SessionStart hook). `-m` names the
model so Gemini CLI's model router (its own extra model calls) stays out; `--skip-trust` stands for trusting the
folder; `GEMINI_CLI_NO_RELAUNCH=true` keeps Gemini CLI from starting itself a second time with a larger heap (on a
machine with more than ~8 GB it does: a second node process, ~1 s of CPU a run — the hooks, the MCP server and
what they see are the same either way). Nothing reaches the internet.

Session one: the model calls memory_commit with the `wait_for_previous` argument Gemini CLI adds to every tool —
accepted — and an entry is written (from the note: Gemini CLI gives the server no session to find the conversation
by). Session two: the index with the entry reaches the model on the first request (the hook's context) and
memory_recall returns the entry.

`npm ci` in integrations/gemini installs the host (.ci/run does, and sets ACPMEM_REQUIRE_GEMINI=1 so a missing host
fails there instead of skipping)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gemini_server import declarations, function_call, gemini_server, responses, text
from helpers_proc import wait_until
import surfacing

REPO = Path(__file__).resolve().parents[1]
GEMINI = REPO / "integrations" / "gemini" / "node_modules" / ".bin" / "gemini"
BIN = Path(sys.executable).parent
README = REPO / "README.md"
NOTE = "uploads are capped at 100 MB: the ingress proxy buffers bodies"
RUN_TIMEOUT = 240


def missing() -> str | None:
    if not GEMINI.exists():
        return f"Gemini CLI is not installed: run integrations/install-hosts.sh (npm ci in {GEMINI.parents[2]})"
    return None


pytestmark = pytest.mark.skipif(missing() is not None and not os.environ.get("ACPMEM_REQUIRE_GEMINI"),
                                reason=missing() or "")


def readme_settings() -> dict:
    text_ = README.read_text("utf-8")
    section = text_[text_.index("**Gemini CLI**"):]
    return json.loads(re.search(r"```json\n(.*?)```", section, re.S)[1])


def run_gemini(home: Path, project: Path, base_url: str, prompt: str) -> subprocess.CompletedProcess:
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(home), "LANG": "C.UTF-8",
           "TMPDIR": os.environ.get("TMPDIR", "/tmp"), "GEMINI_API_KEY": "unused-by-the-scripted-server",
           "GOOGLE_GEMINI_BASE_URL": base_url, "NO_COLOR": "1", "GEMINI_CLI_NO_RELAUNCH": "true"}
    r = subprocess.run([str(GEMINI), "-m", "gemini-2.5-pro", "--skip-trust", "-p", prompt], cwd=project, env=env,
                       capture_output=True, text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"gemini failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r


def first_user_text(body: dict) -> str:
    return json.dumps([c for c in body["contents"] if c.get("role") == "user"], ensure_ascii=False)


def test_gemini_cli_commits_with_its_extra_argument_and_the_next_session_gets_the_index_and_recalls(tmp_path):
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    r = subprocess.run([str(BIN / "acp"), "memory", "init", str(project / ".acp-memory")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    settings = readme_settings()
    assert settings["mcpServers"]["acpmem"]["trust"] is True
    settings["security"] = {"auth": {"selectedType": "gemini-api-key"}}   # the API key, not a Google login
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings), "utf-8")

    def first_session(body: dict) -> list[dict]:
        if not responses(body):
            return [text("Decision: 100 MB."), function_call("mcp_acpmem_memory_commit", {
                "type": "decision", "note": NOTE, "importance": 7, "wait_for_previous": False})]
        return [text("Saved.")]

    def second_session(body: dict) -> list[dict]:
        if not responses(body):
            return [function_call("mcp_acpmem_memory_recall", {"query": "upload limit", "wait_for_previous": True})]
        return [text("100 MB.")]

    script = {"turn": first_session}
    with gemini_server(lambda body: script["turn"](body)) as srv:
        run_gemini(home, project, srv.base_url, "Keep the upload limit decision for later sessions.")
        first = srv.bodies[0]
        tools = declarations(first)
        assert {"mcp_acpmem_memory_commit", "mcp_acpmem_memory_recall"} <= set(tools)   # on the first request
        assert "Long-term memory" in first_user_text(first)                              # the hook's index
        [ack] = responses(srv.bodies[1])
        assert "Noted" in json.dumps(ack), ack            # wait_for_previous did not get the call refused

        vault = project / ".acp-memory"
        entry = wait_until(lambda: next(iter((vault / "entries").glob("*.md")), None), timeout=120)
        entry_id = re.search(r"^id: (.*)$", entry.read_text("utf-8"), re.M)[1]

        script["turn"] = second_session
        n_before = len(srv.bodies)
        run_gemini(home, project, srv.base_url, "What is our upload limit?")
        second = srv.bodies[n_before:]
        assert f"#{entry_id}" in first_user_text(second[0])
        [recalled] = responses(second[1])
        assert "ingress proxy buffers bodies" in json.dumps(recalled), recalled


@pytest.mark.parametrize("prompt_surfacing", [True, False])
def test_gemini_cli_sends_the_memory_the_prompt_is_about_through_before_agent(tmp_path, prompt_surfacing):
    """README's BeforeAgent hook: the model never calls memory_recall, yet the request holds the entry the user's
    message is about (one among many), with the user's message; nothing of it with `[surface] prompt = false`."""
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    r = subprocess.run([str(BIN / "acp"), "memory", "init", str(project / ".acp-memory")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    target = surfacing.fill_vault(project / ".acp-memory")
    if not prompt_surfacing:
        surfacing.turn_off_prompt_surfacing(project / ".acp-memory")
    settings = readme_settings()
    settings["security"] = {"auth": {"selectedType": "gemini-api-key"}}
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings), "utf-8")
    with gemini_server(lambda body: [text("Port 8443.")]) as srv:
        run_gemini(home, project, srv.base_url, surfacing.PROMPT)
        [body] = srv.bodies
    sent = first_user_text(body)
    assert surfacing.PROMPT in sent and "Long-term memory" in sent
    if prompt_surfacing:
        assert surfacing.DETAIL in sent and f'id=\\"{target}\\"' in sent, sent[-3000:]
        assert sent.count('kind=\\"surface\\"') == 1                     # only the entry it is about
    else:
        assert surfacing.DETAIL not in sent
