"""The write-path commands through the real console script: commit, extract, tools, nudge, stats."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from openai_server import reply
from acpmem.write import requests, submit, worker
from test_fork import CHAT, SEQ, configure, fork_commits
from acpmem.write.requests import pending_dir

COMMIT = ("--type", "lesson", "--note", "re-entrant session.append", "--importance", "7", "--session", "s1",
          "--seq", "6", "--transcript", str(CHAT))


def test_commit_wait_json_with_the_offline_extractor(vault, cli):
    v = configure(vault)
    r = cli("memory", "--vault", str(v.root), "commit", *COMMIT, "--wait", "--json")
    assert r.returncode == 0, r.stderr
    ack = json.loads(r.stdout)
    assert ack["worker"] == "inline" and ack["outcome"]["status"] == "written"
    assert ack["outcome"]["extractor"] == "offline" and ack["outcome"]["commit"] == fork_commits(v)[0]
    (entry,) = ack["outcome"]["entries"]
    assert entry["type"] == "lesson" and entry["path"].startswith(f"entries/{entry['id']}")


def test_commit_human_output_and_errors(vault, cli):
    v = configure(vault, extractor="offline")
    r = cli("memory", "--vault", str(v.root), "commit", *COMMIT, "--wait")
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert first.startswith("Noted (r-") and first.endswith("it is distilled and written now.")   # not "in the background"
    assert "wrote 1 entry" in second
    bad = cli("memory", "--vault", str(v.root), "commit", "--type", "gossip", "--note", "n", "--importance", "5",
              "--session", "s", "--seq", "1")
    assert bad.returncode == 1 and bad.stderr.startswith("Error: ") and "field 'type'" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = cli("memory", "--vault", str(v.root), "commit", "--type", "lesson", "--note", "n")
    assert missing.returncode == 2 and "--importance" in missing.stderr
    assert requests.list_requests(v.state_dir) == ([], [])


def test_extract_ad_hoc_dry_run_prints_the_exact_body(vault, cli, openai_server):
    v = configure(vault, openai_server)
    args = ("memory", "--vault", str(v.root), "extract", "--transcript", str(CHAT), "--note", "re-entrant append",
            "--type", "lesson", "--importance", "7", "--session", "s1", "--seq", "6")
    r = cli(*args, "--dry-run")
    assert r.returncode == 0, r.stderr
    body = json.loads(r.stdout)
    assert body["model"] == "test-model" and body["messages"][:7] == json.loads(CHAT.read_text())
    assert body["messages"][-1]["content"].startswith("Focus: re-entrant append\n")
    assert [t["function"]["name"] for t in body["tools"]] == ["memory_write", "memory_nothing"]
    assert openai_server.requests == [] and requests.list_requests(v.state_dir) == ([], [])

    openai_server.enqueue(reply.writes(reply.write("- Guard it with the lock.", title="Use the lock"),
                                       usage=reply.usage(900, 40, cached=600)))
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "wrote 1 entry" in lines[0] and "900 prompt (600 cached)" in lines[0]
    assert lines[1].strip().startswith("#") and "[lesson] Use the lock" in lines[1]
    assert lines[-1] == "Model calls: 1; tokens: 900 prompt (600 cached, 67% cache hits), 40 completion."
    sent = openai_server.requests[0].body
    assert sent["messages"][:-2] == body["messages"][:7] + [
        {"role": "tool", "tool_call_id": "call_2", "content": sent["messages"][7]["content"]}]


def test_extract_pending_failure_exit_code_and_stats(vault, cli, openai_server):
    v = configure(vault, openai_server)
    fd = worker.try_worker_lock(v.state_dir)        # no background worker: the test drives extraction
    try:
        a = submit.submit(v, type="lesson", note="re-entrant session.append", importance=7, session="s1", seq=6,
                         transcript=CHAT)
        b = submit.submit(v, type="decision", note="never commit the index", importance=6, session="s2", seq=15,
                         transcript=SEQ)
    finally:
        import os
        os.close(fd)
    openai_server.enqueue(reply.writes(reply.write("- Use the lock.")), reply.server_error(500))
    r = cli("memory", "--vault", str(v.root), "extract", "--pending", "--json")
    assert r.returncode == 1
    outs = {o["request"]: o for o in json.loads(r.stdout)["outcomes"]}
    assert outs[a.request_id]["status"] == "written" and outs[b.request_id]["status"] == "retry"
    assert outs[b.request_id]["error"]["reason"] == "server_error"

    s = cli("memory", "--vault", str(v.root), "stats", "--json")
    assert s.returncode == 0, s.stderr
    stats = json.loads(s.stdout)
    assert stats["entries"]["live"] == 1 and stats["entries"]["by_type"]["lesson"] == 1
    assert stats["requests"]["pending"] == 1 and stats["requests"]["done"] == 1
    assert stats["requests"]["items"][0]["id"] == b.request_id and stats["requests"]["items"][0]["attempts"] == 1
    assert stats["costs"]["calls"] == 2 and stats["costs"]["failed"] == 1
    assert stats["costs"]["prompt_tokens"] == 100 and stats["disk"]["index_bytes"] > 0
    human = cli("memory", "--vault", str(v.root), "stats")
    assert "Requests: 1 pending, 0 failed, 1 done" in human.stdout
    assert "Extraction: 2 model calls (1 failed)" in human.stdout


def test_extract_usage_errors(vault, cli):
    v = configure(vault)
    r = cli("memory", "--vault", str(v.root), "extract")
    assert r.returncode == 2 and "nothing to extract" in r.stderr
    r = cli("memory", "--vault", str(v.root), "extract", "--transcript", str(CHAT))
    assert r.returncode == 2 and "go with --note" in r.stderr
    r = cli("memory", "--vault", str(v.root), "extract", "r-nosuchxx", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["outcomes"][0]["status"] == "missing"


@pytest.mark.parametrize("fmt,key", [("openai", "function"), ("anthropic", "input_schema"), ("mcp", "inputSchema")])
def test_tools_json(vault, cli, fmt, key):
    r = cli("memory", "--vault", str(vault.root), "tools", "--for", "main", "--format", fmt, "--lang", "zh")
    assert r.returncode == 0, r.stderr
    tools = json.loads(r.stdout)
    names = [t["function"]["name"] if fmt == "openai" else t["name"] for t in tools]
    assert names == ["memory_commit", "memory_recall"] and all(key in t for t in tools)
    fork_tools = json.loads(cli("memory", "--vault", str(vault.root), "tools", "--for", "fork").stdout)
    assert [t["function"]["name"] for t in fork_tools] == ["memory_write"]


def test_nudge(cli, tmp_path):
    en = cli("memory", "nudge", cwd=tmp_path)       # no vault needed
    assert en.returncode == 0 and en.stdout.startswith("[LONG-TERM MEMORY]") and "memory_commit(" in en.stdout
    assert 'block: "b12"' in en.stdout
    zh = cli("memory", "nudge", "--lang", "zh", cwd=tmp_path)
    assert zh.stdout.startswith("[长期记忆]")
    emergency = cli("memory", "nudge", "--voice", "emergency", cwd=tmp_path)
    assert emergency.returncode == 0 and "cannot afford to lose" in emergency.stdout


@pytest.mark.parametrize("command", ["commit", "extract", "tools", "nudge", "blocks", "stats"])
def test_every_command_has_help_with_an_example(cli, command):
    r = cli("memory", command, "--help")
    assert r.returncode == 0 and "Example: acp memory " + command in " ".join(r.stdout.split())


def test_commit_fast_path_without_typer(vault):
    """The fast path answers `commit` without importing typer or the vault's write machinery."""
    v = configure(vault, extractor="offline")
    code = ("import sys; from acpmem.cli.fast import try_fast; rc = try_fast(['commit', *sys.argv[1:]], 'acpmem'); "
            "assert rc is not None and 'typer' not in sys.modules and 'acpmem.vault.writer' not in sys.modules; "
            "sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, "--vault", str(v.root), *COMMIT, "--json"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    ack = json.loads(r.stdout)
    assert ack["worker"] in ("started", "running") and ack["request"].startswith("r-")
    from test_worker import wait_idle
    wait_idle(v)
    assert len(fork_commits(v)) == 1


def test_extract_refuses_a_request_id_that_is_a_path(vault, cli):
    v = configure(vault)
    r = cli("memory", "--vault", str(v.root), "extract", "../../etc/passwd")
    assert r.returncode == 2 and "not a request id" in r.stderr


def test_commit_checks_the_transcript_at_call_time(vault, cli, tmp_path):
    """A transcript that is not there is an error now, not a request that fails later in the background."""
    v = configure(vault, extractor="offline")
    for path, what in ((tmp_path / "nope.json", "no such transcript"), (tmp_path, "is not a file")):
        r = cli("memory", "--vault", str(v.root), "commit", "--type", "lesson", "--note", "n", "--importance", "5",
                "--session", "s", "--seq", "1", "--transcript", str(path))
        assert r.returncode == 1 and r.stdout == "" and what in r.stderr and r.stderr.count("\n") == 1, r.stderr
    bad_tools = cli("memory", "--vault", str(v.root), "commit", "--type", "lesson", "--note", "n", "--importance",
                    "5", "--session", "s", "--seq", "1", "--host-tools", str(tmp_path / "tools.json"))
    assert bad_tools.returncode == 1 and "no such tool definition file" in bad_tools.stderr
    assert not list(pending_dir(v.state_dir).glob("r-*.json"))      # nothing was queued


def test_an_endpoint_without_a_model_uses_the_one_it_serves_or_says_what_to_set(vault, cli, openai_server):
    """OPENAI_BASE_URL without OPENAI_MODEL: one served model is used (asked once, remembered); several are an
    error at commit time naming them — never a silent fall back to the offline extractor."""
    env = {"OPENAI_BASE_URL": openai_server.base_url, "OPENAI_MODEL": ""}
    commit = ("memory", "--vault", str(vault.root), "commit", "--type", "lesson", "--note", "re-entrant append",
              "--importance", "6", "--session", "s1", "--seq", "6", "--transcript", CHAT)
    openai_server.models = ["m-a", "m-b"]
    two = cli(*commit, env=env)
    assert two.returncode == 1 and two.stdout == "" and "serves 2 models (m-a, m-b)" in two.stderr
    assert "OPENAI_MODEL" in two.stderr and not list(pending_dir(vault.state_dir).glob("r-*.json"))
    openai_server.models = ["only-model"]
    openai_server.enqueue(reply.writes(reply.write("- Guard the append with the session lock.")))
    one = cli(*commit, "--wait", env=env)
    assert one.returncode == 0, one.stderr
    assert "wrote 1 entry" in one.stdout
    chat = [r for r in openai_server.requests if r.method == "POST"]
    assert chat[-1].body["model"] == "only-model"
    gets = len([r for r in openai_server.requests if r.method == "GET"])
    openai_server.enqueue(reply.text())
    assert cli(*commit, "--wait", env=env).returncode == 0
    assert len([r for r in openai_server.requests if r.method == "GET"]) == gets      # remembered, not asked again


def test_a_remembered_served_model_dated_later_than_now_is_asked_again(vault, cli, openai_server):
    """The model an endpoint serves is remembered for an hour from when it was asked: one dated later than now (a
    clock set back, or a file from elsewhere) would be used for good, so the endpoint is asked again."""
    import json
    import time

    env = {"OPENAI_BASE_URL": openai_server.base_url, "OPENAI_MODEL": ""}
    commit = ("memory", "--vault", str(vault.root), "commit", "--type", "lesson", "--note", "re-entrant append",
              "--importance", "6", "--session", "s1", "--seq", "6", "--transcript", CHAT, "--wait")
    cache = vault.state_dir / "models.json"
    cache.write_text(json.dumps({openai_server.base_url: {"model": "not-served", "at": time.time() + 30 * 86400}}))
    openai_server.models = ["only-model"]
    openai_server.enqueue(reply.writes(reply.write("- Guard the append with the session lock.")))
    one = cli(*commit, env=env)
    assert one.returncode == 0 and "wrote 1 entry" in one.stdout, one.stderr
    assert [r.body["model"] for r in openai_server.requests if r.method == "POST"] == ["only-model"]
    assert [r for r in openai_server.requests if r.method == "GET"]                  # asked
    assert json.loads(cache.read_text())[openai_server.base_url]["model"] == "only-model"


def test_ctrl_c_during_commit_wait_keeps_the_noted_line(vault, openai_server):
    """The acknowledgement is printed before the model is waited for: Ctrl-C while it works loses no request id."""
    import signal
    import threading
    from pathlib import Path

    from openai_server import wait_for_requests

    v = configure(vault, openai_server)
    gate = threading.Event()     # the model's answer never comes until the test is over
    openai_server.enqueue(reply.held(gate, reply.writes(reply.write("- never written"))))
    exe = Path(sys.executable).parent / "acp"
    proc = subprocess.Popen([str(exe), "memory", "--vault", str(v.root), "commit", *COMMIT, "--wait"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for_requests(openai_server, 1, timeout=120)             # the model is being waited for
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        gate.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    (line,) = [ln for ln in out.splitlines() if ln.startswith("Noted (r-")]
    rid = line.split("(", 1)[1].split(")", 1)[0]
    assert err == "Interrupted.\n", err
    assert (pending_dir(v.state_dir) / f"{rid}.json").exists()


def test_extract_counts_every_model_call_it_made_re_asks_included(vault, openai_server, cli):
    """A prompt the endpoint called too long is sent again shorter: two calls, as the cost ledger has them (the
    summary counted one per request)."""
    from acpmem.write import costs

    v = configure(vault, openai_server)
    too_long = reply.error(400, "maximum context length exceeded", kind="invalid_request_error")
    too_long.body["error"]["code"] = "context_length_exceeded"
    openai_server.enqueue(too_long, reply.writes(reply.write("- Appends hold the per-session lock."),
                                                 usage=reply.usage(300, 20)))
    r = cli("memory", "--vault", str(v.root), "extract", "--transcript", str(CHAT), "--note", "re-entrant append",
            "--type", "lesson", "--importance", "6", "--session", "s1", "--seq", "6", "--json")
    assert r.returncode == 0, r.stderr
    totals = json.loads(r.stdout)["totals"]
    assert len(openai_server.requests) == 2 and totals["calls"] == 2, totals
    assert len(costs.read(v.state_dir)) == 2 and totals["prompt_tokens"] == 300
