"""acpmem inside the real Codex CLI: `@openai/codex` 0.171.0 from npm (integrations/codex, installed by
integrations/install-hosts.sh), run as `codex exec` against a scripted OpenAI Responses API server on 127.0.0.1
(tests/support/responses_server.py) through a `model_provider` whose base_url points at it, with an isolated HOME and
CODEX_HOME, and acpmem wired exactly as README.md's Codex section says (the `[mcp_servers.acpmem]` table and the
SessionStart hook, both in config.toml). Nothing reaches the internet: the only provider is the loopback one.

Session one: the model states a decision and calls memory_commit; the fork — its model the loopback OpenAI server
(tests/openai_server.py), named in the person's ~/.config/acpmem/config.toml since Codex passes the MCP server no OPENAI_*
variable — is sent the conversation from the real rollout Codex wrote, and writes an entry that holds the decision's
reason only when its request held it (the note never said it); the entry cites the Codex thread at the line of the
call. Session two:
the first request already carries the index (the hook's context) with the entry, and memory_recall returns it.

`npm ci` in integrations/codex installs the host (.ci/run does, and sets ACPMEM_REQUIRE_CODEX=1 so a missing host
fails there instead of skipping). Set ACPMEM_KEEP_CODEX_ROLLOUTS=<dir> to keep the rollouts (how
tests/fixtures/hosts/codex/ was made)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from helpers_proc import wait_until
from openai_server import fake_openai, reply
from responses_server import call, input_text, outputs, responses_server, say
import surfacing

REPO = Path(__file__).resolve().parents[1]
CODEX = REPO / "integrations" / "codex" / "node_modules" / ".bin" / "codex"
BIN = Path(sys.executable).parent
README = REPO / "README.md"
REASON = "the ingress proxy buffers whole request bodies in RAM"
DECISION = f"Decision: uploads are capped at 100 MB, because {REASON}."
NOTE = "upload limit is 100 MB"
RUN_TIMEOUT = 240


def missing() -> str | None:
    if not CODEX.exists():
        return f"the Codex CLI is not installed: run integrations/install-hosts.sh (npm ci in {CODEX.parents[2]})"
    return None


pytestmark = pytest.mark.skipif(missing() is not None and not os.environ.get("ACPMEM_REQUIRE_CODEX"),
                                reason=missing() or "")


def readme_config() -> str:
    """The TOML block of README.md's Codex section, as a user copies it into ~/.codex/config.toml."""
    text = README.read_text("utf-8")
    section = text[text.index("**Codex**"):]
    return re.search(r"```toml\n(.*?)```", section, re.S)[1]


def run_codex(home: Path, project: Path, prompt: str, extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(home), "CODEX_HOME": str(home / ".codex"),
           "LANG": "C.UTF-8", "TMPDIR": os.environ.get("TMPDIR", "/tmp"), **(extra or {})}
    r = subprocess.run([str(CODEX), "exec", "--skip-git-repo-check", "--dangerously-bypass-hook-trust",
                        "-C", str(project), prompt], cwd=project, env=env, capture_output=True, text=True,
                       timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"codex exec failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r


def developer_text(body: dict) -> str:
    return "\n".join(c.get("text", "") for i in body["input"] if i.get("role") == "developer"
                     for c in i.get("content") or () if isinstance(c, dict))


def index_message(body: dict) -> str | None:
    """The text of the developer message that carries acpmem's index (the SessionStart hook's context)."""
    for i in body["input"]:
        for c in i.get("content") or () if i.get("role") == "developer" else ():
            if isinstance(c, dict) and c.get("text", "").startswith("# Long-term memory"):
                return c["text"]
    return None


def tools_of(body: dict) -> dict:
    """{namespace or "": {tool name: tool}} of a request."""
    out: dict = {}
    for t in body.get("tools") or ():
        if t.get("type") == "namespace":
            out[t["name"]] = {s["name"]: s for s in t.get("tools") or ()}
        else:
            out.setdefault("", {})[t.get("name")] = t
    return out


def rollouts(home: Path) -> list[Path]:
    return sorted((home / ".codex" / "sessions").glob("*/*/*/rollout-*.jsonl"))


def fork_answer(body: dict):
    """The fork's model: it writes the reason only when the conversation it was sent holds it."""
    seen = json.dumps(body.get("messages"), ensure_ascii=False)
    content = f"- Uploads are capped at 100 MB: {REASON}." if REASON in seen else "- Uploads are capped at 100 MB."
    return reply.writes(reply.write(content, title="Upload limit is 100 MB"))


@pytest.fixture
def fork_model():
    with fake_openai() as srv:
        srv.responder = fork_answer
        yield srv


def test_codex_commits_from_its_rollout_and_the_next_session_gets_the_index_and_recalls(tmp_path, fork_model):
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    r = subprocess.run([str(BIN / "acp"), "memory", "init", str(project / ".acp-memory")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # the fork's model: the person's own config (Codex passes the server HOME, no OPENAI_*); a vault's endpoint
    # would be ignored (only the person decides where their conversation goes)
    person = home / ".config" / "acpmem" / "config.toml"
    person.parent.mkdir(parents=True)
    person.write_text(f'[extraction]\nbase_url = "{fork_model.base_url}"\nmodel = "m"\n', "utf-8")

    def first_session(body: dict) -> list[dict]:
        if not outputs(body):
            return [say(DECISION), call("memory_commit", {"type": "decision", "note": NOTE, "importance": 7},
                                        namespace="mcp__acpmem")]
        return [say("Saved to long-term memory.")]

    def second_session(body: dict) -> list[dict]:
        if not outputs(body):
            return [call("memory_recall", {"query": "upload limit"}, namespace="mcp__acpmem")]
        return [say("The limit is 100 MB.")]

    script = {"turn": first_session}
    with responses_server(lambda body: script["turn"](body)) as srv:
        config = readme_config()
        assert tomllib.loads(config)["mcp_servers"]["acpmem"]["required"] is True   # what the README tells
        provider = (f'model = "scripted"\nmodel_provider = "loopback"\n\n[model_providers.loopback]\n'
                    f'name = "loopback"\nbase_url = "{srv.base_url}"\nwire_api = "responses"\n\n')
        (home / ".codex" / "config.toml").write_text(provider + config, "utf-8")

        # Session one: a decision, committed.
        run_codex(home, project, "We settled the upload limit; keep it for later sessions.")
        first = srv.bodies[0]
        acp_tools = tools_of(first).get("mcp__acpmem", {})
        assert set(acp_tools) == {"memory_commit", "memory_recall"}, tools_of(first).keys()   # on the first request
        assert index_message(first) is not None                                              # the hook's index
        acked = outputs(srv.bodies[1])[0]
        assert "Noted" in json.dumps(acked["output"]), acked
        [rollout] = rollouts(home)
        thread = rollout.stem[-36:]
        lines = rollout.read_text("utf-8").splitlines()
        call_line = next(n for n, line in enumerate(lines) if '"function_call"' in line and "memory_commit" in line)

        vault = project / ".acp-memory"
        entry = wait_until(lambda: next(iter((vault / "entries").glob("*.md")), None), timeout=120)
        text = entry.read_text("utf-8")
        [fork] = [q.body for q in fork_model.requests if q.path.endswith("/chat/completions")]
        sent = json.dumps(fork["messages"], ensure_ascii=False)
        assert "We settled the upload limit" in sent and DECISION in sent   # the rollout, up to the commit's turn
        assert "Saved to long-term memory." not in sent                       # and not past it
        assert REASON in text            # only the conversation had it: the note did not
        assert "extractor: offline" not in text   # the model wrote it
        assert f"session: {thread}" in text
        assert re.search(rf"session: {thread}\n  seq: {call_line}\n", text), text   # the call's own line
        title = re.search(r"^title: (.*)$", text, re.M)[1]
        entry_id = re.search(r"^id: (.*)$", text, re.M)[1]
        shown = subprocess.run([str(BIN / "acp"), "memory", "show", entry_id, "--source"], cwd=project,
                               capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0 and REASON in shown.stdout, shown.stdout + shown.stderr   # the cited turns

        # Session two: the index carries the entry from the first request on; recall returns it.
        script["turn"] = second_session
        n_before = len(srv.bodies)
        run_codex(home, project, "What is our upload limit?")
        second = srv.bodies[n_before:]
        assert title in developer_text(second[0])
        assert index_message(second[0]) and index_message(second[0]) == index_message(second[1])   # same bytes
        assert set(tools_of(second[0]).get("mcp__acpmem", {})) == {"memory_commit", "memory_recall"}
        recalled = json.dumps(outputs(second[1])[0]["output"])
        assert REASON in recalled, recalled

    keep = os.environ.get("ACPMEM_KEEP_CODEX_ROLLOUTS")
    if keep:
        for i, path in enumerate(rollouts(home), 1):
            shutil.copy(path, Path(keep) / f"session-{i}.jsonl")


@pytest.mark.parametrize("prompt_surfacing, served", [(True, False), (False, False), (True, True)],
                         ids=["surfacing", "surfacing-off", "served"])
def test_codex_sends_the_memory_the_prompt_is_about_through_the_user_prompt_hook(tmp_path, prompt_surfacing, served):
    """README's UserPromptSubmit hook: the model never calls memory_recall, yet the first request of the turn holds
    the entry the user's message is about (one among many) — and nothing of it with `[surface] prompt = false`. With
    ``ACPMEM_READ_SERVER=1`` in Codex's environment, its hooks (the session's start, the prompt) are answered by the
    read server (its client says so in the CPU log), and the request holds the same."""
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    r = subprocess.run([str(BIN / "acp"), "memory", "init", str(project / ".acp-memory")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    target = surfacing.fill_vault(project / ".acp-memory")
    if not prompt_surfacing:
        surfacing.turn_off_prompt_surfacing(project / ".acp-memory")
    extra = {}
    if served:
        run, log = tmp_path / "run", tmp_path / "served.log"
        run.mkdir(mode=0o700)
        extra = {"ACPMEM_READ_SERVER": "1", "XDG_RUNTIME_DIR": str(run), "ACPMEM_READ_SERVER_CPU_LOG": str(log)}
        # the server the first read starts is up before the session (else the session's first hooks run alone)
        subprocess.run([str(BIN / "acp"), "memory", "list"], cwd=project, check=True, capture_output=True,
                       env={**os.environ, "LANG": "C.UTF-8", **extra}, timeout=120)
        wait_until(lambda: list((run / "acpmem").glob("read-*.sock")))
    with responses_server(lambda body: [say("Port 8443.")]) as srv:
        provider = (f'model = "scripted"\nmodel_provider = "loopback"\n\n[model_providers.loopback]\n'
                    f'name = "loopback"\nbase_url = "{srv.base_url}"\nwire_api = "responses"\n\n')
        (home / ".codex" / "config.toml").write_text(provider + readme_config(), "utf-8")
        run_codex(home, project, surfacing.PROMPT, extra)
        [body] = srv.bodies
    if served:   # the session's start and the prompt, both answered by the server
        assert log.exists() and len(log.read_text().split()) >= 2, "Codex's hooks were not served"
    sent = json.dumps(body["input"], ensure_ascii=False)
    assert surfacing.PROMPT in sent and index_message(body) is not None
    assert surfacing.DETAIL not in index_message(body)
    if prompt_surfacing:
        assert surfacing.DETAIL in sent and f'id=\\"{target}\\"' in sent, sent[-3000:]
        assert sent.count('kind=\\"surface\\"') == 1                     # only the entry it is about
    else:
        assert surfacing.DETAIL not in sent
