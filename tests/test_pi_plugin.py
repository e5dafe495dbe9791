"""The pi extension (integrations/pi) inside the real pi host: pi 1.6.0 from npm in its RPC mode, installed with
`pi install` as docs/hosts.md says, the model played by pi-ai's faux provider from a script, the fork going to the
loopback OpenAI server. What is asserted is what pi itself wrote (its session file) and sent (every model request,
recorded by the scripted model), and what acpmem wrote (the vault).

`npm ci` in integrations/pi installs the host (.ci/run does, and sets ACPMEM_REQUIRE_PI=1 so a missing host fails
there instead of skipping)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import launcher
from helpers_proc import wait_until
from openai_server import reply
from pi_host import PiHost, call, entries, missing, say
import surfacing

from acpmem import Vault
from acpmem.hosts.transcripts import read_transcript

pytestmark = pytest.mark.skipif(missing() is not None and not os.environ.get("ACPMEM_REQUIRE_PI"),
                                reason=missing() or "")

BIN = Path(sys.executable).parent   # the installed console scripts: where the read server is the point
# pi's `acp` (and these tests' own) is the launcher's (tests/support/launcher.py): a real process on the caller's
# descriptors, folder and environment, forked from one that imported acpmem, not a fresh interpreter
ACP = launcher.acp
DECISION = "We decided to pin pnpm 9: npm broke the lockfile twice, so CI must run pnpm install --frozen-lockfile."
SUMMARY = ("## Goal\nSet up the project's CI.\n\n## Key Decisions\n- Pin pnpm 9: npm broke the lockfile twice.\n\n"
           "## Next Steps\n- Add the CI job.")
NOTE = "pnpm 9 is pinned: npm broke the lockfile twice"
ENTRY = "- pnpm 9 is pinned for this project: npm broke the lockfile twice; CI runs pnpm install --frozen-lockfile."


def _acp(*args: str, cwd: Path) -> str:
    r = subprocess.run([ACP(), "memory", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    _acp("init", cwd=project)
    return project


def _env(srv=None, path: str | None = None) -> dict:
    env = {"PATH": path if path is not None else launcher.path_env()}
    if srv is not None:
        env.update({"OPENAI_BASE_URL": srv.base_url, "OPENAI_MODEL": "fake-model", "OPENAI_API_KEY": "sk-test"})
    return env


def _host(tmp_path: Path, project: Path, name: str = "agent") -> PiHost:
    # keepRecentTokens 1: a compaction of a short conversation still folds its earlier turns
    return PiHost(project, tmp_path / name, settings={"compaction": {"keepRecentTokens": 1}})


def _line_of(session_file: str, pred) -> int:
    return next(n for n, e in enumerate(entries(session_file)) if pred(e))


def _is_call(name: str):
    return lambda e: e.get("type") == "message" and e["message"].get("role") == "assistant" and any(
        c.get("type") == "toolCall" and c.get("name") == name for c in e["message"]["content"])


def _tool_result(session_file: str, name: str) -> dict:
    found = [e["message"] for e in entries(session_file) if e.get("type") == "message"
             and e["message"].get("role") == "toolResult" and e["message"].get("toolName") == name]
    assert len(found) == 1, found
    return found[0]


def _cited(project: Path, session: str):
    def written():
        v = Vault(project / ".acp-memory")
        try:
            return [e for e in v.load().entries if any(c.session == session for c in e.citation)]
        finally:
            v.close()
    return written


def _session_one(host: PiHost, srv, *, block: bool) -> tuple[dict, object]:
    """The user states a decision, pi compacts, the model commits it (naming the compaction's block or not)."""
    srv.enqueue(reply.writes(reply.write(ENTRY, title="pnpm 9 pinned")))
    args = {"type": "decision", "note": NOTE, "importance": 8}
    if block:
        args["block"] = "{{block}}"
    with host.session(_env(srv)) as pi:
        pi.prompt(DECISION, [say("Noted: pnpm 9, frozen lockfile in CI.")])
        pi.prompt("Now add the CI job.", [say("Added .github/workflows/ci.yml running pnpm install --frozen-lockfile.")])
        compaction = pi.compact([say(SUMMARY), say(SUMMARY)])  # pi asks twice when it cuts inside a turn
        pi.prompt("Keep that decision for later sessions.", [call("memory_commit", **args), say("Kept.")])
        state = pi.state()
        notices = pi.notices()
    assert notices == [], notices
    ack = _tool_result(state["sessionFile"], "memory_commit")
    assert ack["isError"] is False, ack["content"]
    written = wait_until(_cited(host.project, state["sessionId"]), timeout=120)
    assert len(written) == 1, written
    return {**state, "compaction": compaction}, written[0]


def test_a_decision_committed_after_pis_compaction_is_in_the_next_sessions_prompt_and_recalled(tmp_path, openai_server):
    project = _project(tmp_path)
    host = _host(tmp_path, project)
    one, entry = _session_one(host, openai_server, block=False)
    sid, file = one["sessionId"], one["sessionFile"]
    log = entries(file)

    # pi 1.x keeps its system prompt in the session file, as a message: the conversation the fork reads leaves it
    # out, without a word
    kept = [e["message"] for e in log if e.get("type") == "message" and e["message"].get("role") == "system"]
    assert kept
    said = [t for t in [kept[0].get("content"), *(kept[0].get("sections") or {}).values()] if isinstance(t, str) and t]
    read = read_transcript(file)
    assert said and read.warnings == () and read.messages
    assert not any(said[0][:80] in json.dumps(m.content, ensure_ascii=False) for m in read.messages)

    # session 1 — the tools pi offered the model are acpmem's own, schema and description unchanged
    exported = {t["function"]["name"]: t["function"] for t in json.loads(_acp("tools", "--for", "main", "--format",
                                                                              "openai", cwd=project))}
    first = host.requests()[0]
    assert {"memory_commit", "memory_recall"} <= set(first["tools"])

    # after pi's compaction the guidance (acpmem's nudge text) is in the session, so the model saw it
    nudge = _acp("nudge", cwd=project).rstrip("\n")
    guidance = [e for e in log if e.get("type") == "custom_message" and e.get("customType") == "acpmem-guidance"]
    assert len(guidance) == 1 and guidance[0]["content"].startswith(nudge)
    assert _line_of(file, lambda e: e.get("type") == "compaction") < log.index(guidance[0])
    asked = [r for r in host.requests() if r["tools"] and any(nudge.splitlines()[0] in json.dumps(m)
                                                              for m in r["messages"])]
    assert asked, "the guidance never reached the model"

    # the commit: acknowledged at once, citing this session at the entry of the call, distilled from pi's own file
    ack = _tool_result(file, "memory_commit")
    assert ack["isError"] is False and ack["content"][0]["text"].startswith("Noted (r-")
    assert entry.type == "decision" and entry.importance == 8
    assert [(c.session, c.seq) for c in entry.citation] == [(sid, _line_of(file, _is_call("memory_commit")))]
    fork = openai_server.requests[0].body
    assert any("Keep that decision for later sessions." in json.dumps(m) for m in fork["messages"]), \
        "the fork did not read pi's session"
    assert NOTE in json.dumps(fork["messages"][-1])

    # the index in session 1's system prompt: acpmem's list for this session, byte-identical on every turn —
    # also on the turn after the entry was written (frozen for the session)
    index = _acp("list", "--format", "prompt", "--session", sid, cwd=project).rstrip("\n")
    turns = [r["systemPrompt"] for r in host.requests() if r["tools"]]
    assert len(turns) >= 4 and all(p.endswith("\n\n" + index) for p in turns)
    assert "(no entries yet)" in index

    # session 2: a new pi session in the same project sees the entry in its system prompt and recalls it
    before = len(host.requests())
    with host.session(_env()) as pi:
        pi.prompt("Which package manager do we use?", [call("memory_recall", query="pnpm lockfile"),
                                                       say("pnpm 9, pinned.")])
        pi.prompt("And in CI?", [say("pnpm install --frozen-lockfile.")])
        two = pi.state()
        shown = [e["message"] for e in pi.command("/memory") if e.get("method") == "notify"]
        found = [e["message"] for e in pi.command("/memory recall pnpm") if e.get("method") == "notify"]
        queue = [e["message"] for e in pi.command("/memory review") if e.get("method") == "notify"]
        notices = [n for n in pi.notices() if n.get("notifyType") == "warning"]
    assert notices == []
    assert two["sessionId"] != sid
    prompts = [r["systemPrompt"] for r in host.requests()[before:] if r["tools"]]
    assert len(prompts) == 3 and len(set(prompts)) == 1
    index2 = _acp("list", "--format", "prompt", "--session", two["sessionId"], cwd=project).rstrip("\n")
    assert prompts[0].endswith("\n\n" + index2) and f"#{entry.id}" in index2 and "pnpm 9 pinned" in index2
    recalled = _tool_result(two["sessionFile"], "memory_recall")
    assert recalled["isError"] is False
    assert entry.id in recalled["content"][0]["text"] and "frozen-lockfile" in recalled["content"][0]["text"]

    # /memory: the index, a recall, the review queue (the fork's write waits for a person to look at it)
    assert shown == [index2]
    assert len(found) == 1 and entry.id in found[0] and "frozen-lockfile" in found[0]
    assert len(queue) == 1 and f"#{entry.id}" in queue[0]


def test_the_model_commits_pis_compaction_as_a_block_and_the_entry_cites_it(tmp_path, openai_server):
    project = _project(tmp_path)
    host = _host(tmp_path, project)
    one, entry = _session_one(host, openai_server, block=True)
    blocks = json.loads(_acp("blocks", one["sessionFile"], "--json", cwd=project))["blocks"]
    named = [e for e in entries(one["sessionFile"]) if e.get("customType") == "acpmem-guidance"][0]["content"]
    newest = max(blocks, key=lambda b: b["at"] if b["at"] is not None else -1)
    assert f"compaction that just ran is block {newest['id']}" in named
    assert [(c.session, c.block) for c in entry.citation] == [(one["sessionId"], newest["id"])]
    fork = openai_server.requests[0].body["messages"]
    assert SUMMARY.splitlines()[-1] in json.dumps(fork[-1])        # the block, named as the focus
    # what the model saw at the commit: pi's summary in place of the turns it compacted, not those turns
    assert any("Pin pnpm 9: npm broke the lockfile twice." in json.dumps(m) for m in fork[:-1])
    assert not any(DECISION in json.dumps(m) for m in fork)



def _texts(message: dict) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else "\n".join(b.get("text", "") for b in content or ())


def test_each_user_prompt_brings_the_memory_it_is_about_once_after_the_users_message(tmp_path):
    """The model never calls memory_recall: the entry the user's message is about (one among many) still reaches the
    request, right after that message and not in the system prompt (which stays the same bytes); the session keeps
    it, so the next turn repeats it as history, and a second prompt on the same subject adds nothing new."""
    project = _project(tmp_path)
    target = surfacing.fill_vault(project / ".acp-memory")
    host = _host(tmp_path, project)
    with host.session(_env()) as pi:
        pi.prompt(surfacing.PROMPT, [say("Port 8443.")])
        pi.prompt("And the billing webhook port in staging once more?", [say("Still 8443.")])
        state = pi.state()
        notices = pi.notices()
    assert notices == []
    one, two = host.requests()
    assert surfacing.DETAIL not in one["systemPrompt"] and one["systemPrompt"] == two["systemPrompt"]
    texts = [_texts(m) for m in one["messages"]]
    assert texts[0] == surfacing.PROMPT and surfacing.DETAIL in texts[1] and f'id="{target}"' in texts[1]
    assert len(texts) == 2 and texts[1].count('kind="surface"') == 1     # only the entry it is about
    again = [_texts(m) for m in two["messages"]]
    assert again[:2] == texts and sum(surfacing.DETAIL in t for t in again) == 1
    kept = [e for e in entries(state["sessionFile"]) if e.get("type") == "custom_message"]
    assert [(e["customType"], e["display"]) for e in kept] == [("acpmem-surfaced", False)]


def test_pis_per_prompt_reads_through_the_read_server_bring_the_same_memory(tmp_path):
    """With ``ACPMEM_READ_SERVER=1`` in pi's environment, the extension's `acp` calls are handed to the read server
    (the client says so in its CPU log) and the request holds what it holds without: the entry the message is about,
    once, after the user's message."""
    project = _project(tmp_path)
    target = surfacing.fill_vault(project / ".acp-memory")
    host = _host(tmp_path, project)
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    log = tmp_path / "served.log"
    # the installed console scripts: their start-up is where a read goes to the server
    env = {**_env(path=f"{BIN}{os.pathsep}{os.environ['PATH']}"), "ACPMEM_READ_SERVER": "1",
           "XDG_RUNTIME_DIR": str(run), "ACPMEM_READ_SERVER_CPU_LOG": str(log)}
    # the server the first read starts is up before the session (the session's first calls may run alone)
    subprocess.run([str(BIN / "acp"), "memory", "list"], cwd=project, env={**os.environ, **env}, check=True,
                   capture_output=True, timeout=120)
    wait_until(lambda: list((run / "acpmem").glob("read-*.sock")))
    with host.session(env) as pi:
        pi.prompt(surfacing.PROMPT, [say("Port 8443.")])
        pi.prompt("And the billing webhook port in staging once more?", [say("Still 8443.")])
        notices = pi.notices()
    assert notices == []
    assert log.exists() and len(log.read_text().split()) >= 2, "pi's reads were not served"
    one, two = host.requests()
    texts = [_texts(m) for m in one["messages"]]
    assert texts[0] == surfacing.PROMPT and surfacing.DETAIL in texts[1] and f'id="{target}"' in texts[1]
    assert len(texts) == 2 and texts[1].count('kind="surface"') == 1
    assert sum(surfacing.DETAIL in _texts(m) for m in two["messages"]) == 1


def test_with_prompt_surfacing_off_the_request_holds_only_the_users_message(tmp_path):
    project = _project(tmp_path)
    surfacing.fill_vault(project / ".acp-memory")
    surfacing.turn_off_prompt_surfacing(project / ".acp-memory")
    host = _host(tmp_path, project)
    with host.session(_env()) as pi:
        pi.prompt(surfacing.PROMPT, [say("I do not know.")])
        notices = pi.notices()
    assert notices == []
    (req,) = host.requests()
    assert [_texts(m) for m in req["messages"]] == [surfacing.PROMPT]
    assert surfacing.DETAIL not in json.dumps(req) and "Long-term memory" in req["systemPrompt"]

def test_without_acpmem_on_path_the_session_completes_with_one_warning(tmp_path):
    project = _project(tmp_path)
    host = _host(tmp_path, project)
    node_only = str(Path(shutil.which("git")).parent)  # no `acp` there
    assert not (Path(node_only) / "acp").exists()
    with host.session(_env(path=node_only)) as pi:
        pi.prompt(DECISION, [say("Noted.")])
        pi.prompt("Keep that.", [call("memory_commit", type="decision", note=NOTE, importance=8), say("Could not.")])
        pi.command("/memory")
        state = pi.state()
        notices = pi.notices()
    warnings = [n["message"] for n in notices]
    assert len(warnings) == 1 and "`acp` not found" in warnings[0] and "carries on without memory" in warnings[0]
    assert all(n["notifyType"] == "warning" for n in notices)
    reqs = host.requests()
    assert len(reqs) == 3 and all("memory_commit" not in r["tools"] for r in reqs)
    assert all("Long-term memory" not in r["systemPrompt"] for r in reqs)
    last = [e for e in entries(state["sessionFile"]) if e.get("type") == "message"][-1]["message"]
    assert last["role"] == "assistant" and last["content"][0]["text"] == "Could not."


def test_without_a_vault_the_session_completes_with_one_warning(tmp_path):
    project = tmp_path / "proj"
    host = _host(tmp_path, project)
    with host.session(_env()) as pi:
        pi.prompt("Hello.", [say("Hi.")])
        pi.prompt("Again.", [say("Hi again.")])
        notices = pi.notices()
    assert len(notices) == 1 and "no vault found" in notices[0]["message"], notices
    reqs = host.requests()
    assert len(reqs) == 2 and all("Long-term memory" not in r["systemPrompt"] for r in reqs)
    assert all("memory_commit" not in r["tools"] and "read" in r["tools"] for r in reqs)


def test_acpmem_pi_off_loads_nothing(tmp_path):
    project = _project(tmp_path)
    host = _host(tmp_path, project)
    with host.session({**_env(), "ACPMEM_PI": "off"}) as pi:
        pi.prompt("Hello.", [say("Hi.")])
        notices = pi.notices()
    assert notices == []
    (req,) = host.requests()
    assert "memory_commit" not in req["tools"] and "Long-term memory" not in req["systemPrompt"]


def test_the_pi_example_runs_as_the_readme_says(tmp_path):
    r = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "examples" / "pi" / "run_session.py")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert r.returncode == 0, r.stdout + r.stderr
    one, two = r.stdout.split("--- session 2")
    assert "[acpmem guidance, after the compaction]\n[LONG-TERM MEMORY]" in one
    assert "[memory_commit → ] Noted (r-" in one and "extractor=offline" in one
    entry = one.split("$ acp memory show ")[1].split("\n")[0]
    assert f"(#{entry}, importance 8" in two and f'kind="recall" id="{entry}"' in two
