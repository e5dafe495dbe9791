"""The model call through the real `openai` client against a real HTTP server, config resolution, the cost ledger."""
import json
import multiprocessing
import os
import random
import socket
from pathlib import Path

import pytest

from acpmem.core.errors import ExtractionError, SettingsError
from acpmem.write.llm import ModelConfig, call_chat, resolve_model_config
from acpmem.infra.files import append_record
from acpmem.write import costs
from openai_server import fake_openai, reply

BODY = {
    "model": "gpt-test",
    "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Prefer pnpm; 用中文回答。"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "memory_commit", "arguments": "{\"type\": \"user-preference\", \"note\": \"pnpm\", \"importance\": 6}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Noted."},
        {"role": "user", "content": "Extract the memories needed now; focus: pnpm"},
    ],
    "tools": [{"type": "function", "function": {"name": "memory_write", "description": "d", "parameters": {
        "type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]}}}],
    "tool_choice": "auto",
    "temperature": 0,
}


class Ticks:
    """A clock that advances one second per reading: latency is exact and has nothing to do with wall time."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 1.0
        return self.t


def config(srv, **kw):
    return ModelConfig(kw.pop("base_url", srv.base_url), kw.pop("model", "gpt-test"), kw.pop("api_key", "sk-test"),
                       kw.pop("timeout", 10.0), kw.pop("max_retries", 3))


def test_body_is_sent_exactly_and_tool_calls_are_parsed():
    script = [reply.writes(reply.write("- Use pnpm, never npm.", title="The repo uses pnpm", call_id="w1"),
                           reply.write("- Answer in Chinese.", supersedes=["k3f9q2"], call_id="w2"),
                           model="gpt-test-2026", usage=reply.usage(1200, 80, 1024))]
    sleeps = []
    with fake_openai(script) as srv:
        result = call_chat(config(srv), BODY, clock=Ticks(), sleep=sleeps.append)
    (req,) = srv.requests
    assert req.path == "/v1/chat/completions"
    assert req.body == BODY
    assert list(req.body) == list(BODY) and req.body["messages"] == BODY["messages"]
    assert req.headers["authorization"] == "Bearer sk-test"
    assert sleeps == []
    assert [(c.id, c.name, c.arguments, c.error) for c in result.tool_calls] == [
        ("w1", "memory_write", {"content": "- Use pnpm, never npm.", "title": "The repo uses pnpm"}, None),
        ("w2", "memory_write", {"content": "- Answer in Chinese.", "supersedes": ["k3f9q2"]}, None),
    ]
    assert (result.prompt_tokens, result.cached_tokens, result.completion_tokens) == (1200, 1024, 80)
    assert result.model == "gpt-test-2026" and result.attempts == 1 and result.latency_s == 1.0
    assert result.finish_reason == "tool_calls"
    assert "response" not in result.to_json() and result.to_json()["cached_tokens"] == 1024


def test_plain_text_answer_means_no_write():
    with fake_openai([reply.text("Nothing worth keeping.", usage=reply.usage(50, 5, None))]) as srv:
        result = call_chat(config(srv), BODY, clock=Ticks(), sleep=lambda s: None)
    assert result.tool_calls == () and result.text == "Nothing worth keeping."
    assert result.cached_tokens == 0 and result.prompt_tokens == 50


def test_malformed_tool_arguments_are_reported_per_call():
    script = [reply.writes(reply.malformed(call_id="bad"), reply.call("memory_write", "[1, 2]", "list"),
                           reply.write("- ok", call_id="good"))]
    with fake_openai(script) as srv:
        result = call_chat(config(srv), BODY, clock=Ticks(), sleep=lambda s: None)
    bad, lst, good = result.tool_calls
    assert bad.arguments is None and "not valid JSON" in bad.error and bad.raw_arguments == '{"content": "- unterminated'
    assert lst.arguments is None and "must be a JSON object, got list" in lst.error
    assert good.arguments == {"content": "- ok"} and good.error is None


def test_model_is_filled_only_when_missing_and_path_without_v1_works():
    body = {k: v for k, v in BODY.items() if k != "model"}
    with fake_openai([reply.text()]) as srv:
        call_chat(config(srv, base_url=srv.base_url[:-3], model="from-config"), body, clock=Ticks(),
                  sleep=lambda s: None)
    assert srv.requests[0].path == "/chat/completions"
    assert srv.requests[0].body == {**body, "model": "from-config"}


@pytest.mark.parametrize("limited, expected", [
    (reply.rate_limited(retry_after=7), 7.0),
    (reply.rate_limited(retry_after_ms=250), 0.25),
    (reply.rate_limited(retry_after=1.5, retry_after_ms=40), 0.04),
])
def test_429_honours_retry_after_then_succeeds(limited, expected):
    sleeps = []
    with fake_openai([limited, reply.writes(reply.write("- x"))]) as srv:
        result = call_chat(config(srv), BODY, clock=Ticks(), sleep=sleeps.append)
    assert sleeps == [expected]
    assert result.attempts == 2 and len(srv.requests) == 2
    assert srv.bodies == [BODY, BODY]


def test_500_every_time_stops_at_the_bound_with_backoff_and_jitter():
    sleeps = []
    with fake_openai([reply.always(reply.server_error(500, "boom"))]) as srv:
        with pytest.raises(ExtractionError) as info:
            call_chat(config(srv, max_retries=3), BODY, clock=Ticks(), sleep=sleeps.append, rng=random.Random(4))
    err = info.value
    assert len(srv.requests) == 4
    assert err.message == "HTTP 500 after 4 tries: boom"
    assert err.data["reason"] == "server_error" and err.data["attempts"] == 4 and err.data["retryable"]
    assert len(sleeps) == 3
    for i, s in enumerate(sleeps):   # exponential ceiling 0.5·2^i, jitter keeps it in [half, full]
        assert 0.25 * 2 ** i <= s <= 0.5 * 2 ** i
    assert sleeps[0] < sleeps[2]


def test_rate_limited_every_time_and_a_wait_too_long_to_honour():
    sleeps = []
    with fake_openai([reply.always(reply.rate_limited())]) as srv:
        with pytest.raises(ExtractionError, match="Rate limited after 2 tries"):
            call_chat(config(srv, max_retries=1), BODY, clock=Ticks(), sleep=sleeps.append, rng=random.Random(1))
    assert len(srv.requests) == 2 and len(sleeps) == 1
    with fake_openai([reply.rate_limited(retry_after=3600), reply.text()]) as srv:
        with pytest.raises(ExtractionError, match="asks to wait 3600 s") as info:
            call_chat(config(srv), BODY, clock=Ticks(), sleep=sleeps.append)
    assert len(srv.requests) == 1 and info.value.data["reason"] == "rate_limited"


def test_timeout_raises_extraction_error_without_retrying():
    with fake_openai([reply.slow(5.0, reply.text()), reply.text()]) as srv:
        with pytest.raises(ExtractionError) as info:
            call_chat(config(srv, timeout=0.3), BODY, sleep=lambda s: None)
    assert info.value.data["reason"] == "timeout" and info.value.data["retryable"]
    assert "timed out after 0.3 s" in info.value.message
    assert len(srv.requests) == 1


def test_every_call_of_a_process_goes_through_one_http_client_and_keeps_its_connection(monkeypatch):
    import openai

    from acpmem.write import llm

    with fake_openai([reply.text(), reply.text(), reply.text()]) as srv:
        call_chat(config(srv), BODY)
        call_chat(config(srv), BODY)
        first, second = srv.requests
        assert first.peer == second.peer       # the second call came on the first one's connection
        before = llm._http_client(openai)
        monkeypatch.setenv("NO_PROXY", "proxy.invalid")   # what the client read from the environment changed
        call_chat(config(srv), BODY)
    assert srv.requests[2].peer != first.peer and llm._http_client(openai) is not before and before.is_closed
    shared = llm._http_client(openai)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # a child forked after the client was made makes its own (with the same TLS context),
                   # and leaves the parent's open
        os.close(read)
        contexts = dict(llm._TLS_CONTEXTS)
        own = llm._http_client(openai) is not shared and not shared.is_closed and llm._TLS_CONTEXTS == contexts
        os.write(write, b"own" if own else b"shared")
        os._exit(0)
    os.close(write)
    said = os.read(read, 10)
    os.close(read)
    os.waitpid(pid, 0)
    assert said == b"own" and not shared.is_closed


TLS = Path(__file__).parent / "fixtures" / "tls"   # a self-signed certificate for 127.0.0.1 (openssl req -x509)


def test_a_tls_endpoint_is_trusted_only_through_the_ca_store_the_environment_names(monkeypatch):
    from acpmem.write import llm

    with fake_openai([reply.text("over TLS")], tls=(TLS / "endpoint-cert.pem", TLS / "endpoint-key.pem")) as srv:
        assert srv.base_url.startswith("https://")
        for var in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
            monkeypatch.delenv(var, raising=False)
        sleeps = []
        with pytest.raises(ExtractionError) as info:   # the system's CAs never signed it: refused, not sent, and
            call_chat(config(srv, max_retries=3), BODY, sleep=sleeps.append)   # not tried again at once
        assert info.value.data["reason"] == "connection" and srv.base_url in info.value.message
        assert sleeps == [] and info.value.data["attempts"] == 1 and info.value.message.endswith("after 1 try")
        assert info.value.data["retryable"]   # the queue retries it later, when the CA store may name it
        assert "TLS certificate is not trusted (self-signed certificate)" in info.value.message
        assert "SSL_CERT_FILE" in info.value.hint
        assert srv.requests == []
        contexts = dict(llm._TLS_CONTEXTS)
        monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "endpoint-cert.pem"))   # a CA store naming it
        result = call_chat(config(srv, max_retries=0), BODY)
        assert result.text == "over TLS" and len(srv.requests) == 1
        assert len(llm._TLS_CONTEXTS) == len(contexts) + 1    # a TLS context of its own for that store
        monkeypatch.delenv("SSL_CERT_FILE")
        with pytest.raises(ExtractionError):   # and the earlier one again without it
            call_chat(config(srv, max_retries=0), BODY, sleep=lambda s: None)
        assert len(srv.requests) == 1 and len(llm._TLS_CONTEXTS) == len(contexts) + 1


@pytest.mark.parametrize("ca", ["missing.pem", "endpoint-key.pem"])   # no file; a file without a certificate
def test_a_ca_store_that_cannot_be_read_is_one_clear_error_and_nothing_is_sent(monkeypatch, ca):
    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / ca))
    with fake_openai([reply.text()]) as srv:
        with pytest.raises(ExtractionError) as info:
            call_chat(config(srv), BODY, sleep=lambda s: None)
    assert info.value.message.startswith(f"Cannot read the CA certificates SSL_CERT_FILE names ({TLS / ca}): ")
    assert "SSL_CERT_FILE" in info.value.hint and info.value.data["retryable"] and srv.requests == []


def test_client_errors_are_not_retried():
    with fake_openai([reply.error(401, "Incorrect API key provided", kind="invalid_request_error"), reply.text()]) as srv:
        with pytest.raises(ExtractionError) as info:
            call_chat(config(srv), BODY, clock=Ticks(), sleep=lambda s: None)
    assert len(srv.requests) == 1
    assert info.value.message == "Endpoint rejected the request: HTTP 401 Incorrect API key provided"
    assert "API key" in info.value.hint and not info.value.data["retryable"]


def test_connection_refused_is_retried_then_reported():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()   # nothing listens on this port now
    sleeps = []
    cfg = ModelConfig(f"http://127.0.0.1:{port}/v1", "m", None, 2.0, 2)
    with pytest.raises(ExtractionError, match=f"Cannot connect to http://127.0.0.1:{port}/v1 after 3 tries") as info:
        call_chat(cfg, BODY, clock=Ticks(), sleep=sleeps.append, rng=random.Random(0))
    assert info.value.data["reason"] == "connection" and len(sleeps) == 2


@pytest.mark.parametrize("answer", [reply.raw(b"<html>gateway</html>", content_type="text/html"),
                                    reply.raw(b'{"choices": []}'),
                                    reply.raw(b'{"choices": [{"message": {"tool_calls": [{"id": "x"}]}}]}')])
def test_malformed_answers_are_extraction_errors(answer):
    with fake_openai([answer]) as srv:
        with pytest.raises(ExtractionError, match="Malformed answer") as info:
            call_chat(config(srv), BODY, clock=Ticks(), sleep=lambda s: None)
    assert info.value.data["reason"] == "bad_response"


def test_no_endpoint_configured_sends_nothing():
    with pytest.raises(ExtractionError, match="no endpoint configured") as info:
        call_chat(resolve_model_config({}, env={}), BODY)
    assert info.value.data["reason"] == "no_endpoint" and "offline" in info.value.hint
    with pytest.raises(ExtractionError, match="no model configured"):
        call_chat(resolve_model_config({"base_url": "http://127.0.0.1:1/v1"}, env={}), BODY)


def test_config_settings_win_and_environment_fills_gaps():
    env = {"OPENAI_API_KEY": "sk-env", "OPENAI_BASE_URL": "http://env:8000/v1/", "OPENAI_MODEL": "env-model",
           "MY_KEY": "sk-mine"}
    c = resolve_model_config({"model": "vault-model", "timeout": 12, "max_retries": 1}, env=env)
    assert (c.base_url, c.model, c.api_key, c.timeout, c.max_retries) == (
        "http://env:8000/v1", "vault-model", "sk-env", 12.0, 1)
    c = resolve_model_config({"base_url": "http://localhost:11434/v1", "api_key_env": "MY_KEY"}, env=env)
    assert (c.base_url, c.model, c.api_key) == ("http://localhost:11434/v1", "env-model", "sk-mine")
    assert c.extractor == "llm:env-model" and c.configured
    # OpenAI itself gets a default model; a key never shows in repr or describe()
    c = resolve_model_config({}, env={"OPENAI_API_KEY": "sk-secret"})
    assert c.model == "gpt-4.1-mini" and c.configured
    assert "sk-secret" not in repr(c) and "sk-secret" not in json.dumps(c.describe())
    # a local server needs no key, but must name its model
    assert resolve_model_config({"base_url": "http://localhost:8080/v1", "model": "qwen"}, env={}).configured
    assert not resolve_model_config({"base_url": "http://localhost:8080/v1"}, env={}).configured


@pytest.mark.parametrize("settings, fragment", [
    ({"timeout": 0}, "timeout must be"), ({"timeout": "60"}, "timeout must be"),
    ({"max_retries": 99}, "max_retries must be"), ({"max_retries": True}, "max_retries must be"),
    ({"modle": "x"}, "Unknown extraction setting(s): modle"), ({"model": 5}, "'model' must be text"),
])
def test_bad_settings_are_settings_errors(settings, fragment):
    with pytest.raises(SettingsError) as info:
        resolve_model_config(settings, env={})
    assert fragment in info.value.message and info.value.hint


def test_cost_ledger_round_trip_and_summary(tmp_path):
    state = tmp_path / ".acpmem"
    ledger = state / costs.COSTS_FILE
    assert costs.read(state) == []
    with fake_openai([reply.writes(reply.write("- a"), model="m1", usage=reply.usage(1000, 50, 800)),
                      reply.text(model="m2", usage=reply.usage(400, 10, 0))]) as srv:
        r1 = call_chat(config(srv), BODY, clock=Ticks(), sleep=lambda s: None)
        r2 = call_chat(config(srv), BODY, clock=Ticks(), sleep=lambda s: None)
    costs.append(state, costs.record(r1, at="2026-11-29T10:00:00Z", request="r-1", session="s", entries=1))
    # a writer that died mid-line leaves a partial record behind
    with open(ledger, "a") as fh:
        fh.write('{"at": "2026-11-29T10:30')
    costs.append(state, costs.record(r2, at="2026-11-29T11:00:00Z", request="r-2", entries=0))
    err = ExtractionError("Rate limited after 4 tries", "later", reason="rate_limited", attempts=4)
    costs.append(state, costs.record(None, at="2026-11-29T12:00:00Z", request="r-3", error=err, model="m1"))
    records = costs.read(state)
    assert [r["request"] for r in records] == ["r-1", "r-2", "r-3"]
    assert records[0] == {"at": "2026-11-29T10:00:00Z", "request": "r-1", "session": "s", "model": "m1", "ok": True,
                          "prompt_tokens": 1000, "cached_tokens": 800, "completion_tokens": 50, "latency_s": 1.0,
                          "attempts": 1, "entries": 1}
    assert records[2]["ok"] is False and records[2]["reason"] == "rate_limited" and records[2]["attempts"] == 4
    s = costs.summarize(records)
    assert (s["calls"], s["failed"], s["prompt_tokens"], s["cached_tokens"], s["completion_tokens"]) == (3, 1, 1400, 800, 60)
    assert s["cache_hit_rate"] == round(800 / 1400, 4) and s["latency_s"] == 2.0
    assert s["by_model"]["m1"]["calls"] == 2 and s["by_model"]["m2"]["prompt_tokens"] == 400
    assert costs.summarize(records, since="2026-11-29T11:00:00Z")["calls"] == 2


def _append_many(path, worker):
    for i in range(50):
        append_record(path, {"at": f"2026-11-29T00:00:{i:02d}Z", "request": f"r-{worker}-{i}", "pad": "x" * 300})


def test_concurrent_appends_keep_whole_lines(tmp_path):
    ledger = tmp_path / "costs.jsonl"
    procs = [multiprocessing.get_context("fork").Process(target=_append_many, args=(ledger, w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=30)
    assert all(p.exitcode == 0 for p in procs)
    lines = ledger.read_text().splitlines()
    assert len(lines) == 200
    assert sorted(json.loads(line)["request"] for line in lines) == sorted(f"r-{w}-{i}" for w in range(4) for i in range(50))


def test_config_from_the_vault_settings_object():
    from acpmem.core.settings import ExtractionSettings
    c = resolve_model_config(ExtractionSettings(), env={"OPENAI_API_KEY": "sk-x"})
    assert (c.base_url, c.model, c.api_key, c.timeout, c.max_retries) == (None, "gpt-4.1-mini", "sk-x", 60.0, 3)
    c = resolve_model_config(ExtractionSettings(base_url="http://127.0.0.1:9/v1", model="llama", timeout_seconds=5.0),
                             env={"OPENAI_BASE_URL": "http://ignored/v1"})
    assert (c.base_url, c.model, c.api_key, c.timeout) == ("http://127.0.0.1:9/v1", "llama", None, 5.0)


def test_fork_pieces_compose_and_the_prefix_is_byte_identical_on_the_wire():
    from pathlib import Path

    from acpmem.core.tools import parse_write_args, tool_definitions

    from acpmem.write.prompts import fork_instruction
    from acpmem.hosts.transcripts import close_tool_calls, openai_messages, read_transcript

    fixture = Path(__file__).parent / "fixtures" / "transcripts" / "openai_chat.json"
    conversation = json.loads(fixture.read_text())
    transcript = read_transcript(fixture)

    def body(note):
        msgs = close_tool_calls(openai_messages(transcript.upto(6)), "Noted (r-1): it will be distilled and written.")
        msgs.append({"role": "user", "content": fork_instruction(note, "lesson", 7, None)})
        return {"model": "gpt-test", "messages": msgs, "tools": tool_definitions("fork", "openai"),
                "tool_choice": "auto"}

    script = [reply.writes(reply.write("- Guard `session.append` with the per-session lock in `state.ts`.",
                                       title="session.append must be re-entrant")), reply.text()]
    with fake_openai(script) as srv:
        first = call_chat(config(srv), body("re-entrant append"), clock=Ticks(), sleep=lambda s: None)
        call_chat(config(srv), body("another focus"), clock=Ticks(), sleep=lambda s: None)
    one, two = srv.requests
    assert one.body["messages"][:7] == conversation
    assert one.body["messages"][7] == {"role": "tool", "tool_call_id": "call_2",
                                       "content": "Noted (r-1): it will be distilled and written."}
    cut = one.raw.index(b"Extract the memories needed now")
    assert two.raw[:cut] == one.raw[:cut]   # the provider sees the same bytes up to the instruction
    (call,) = first.tool_calls
    args = parse_write_args(call.arguments)
    assert args.title == "session.append must be re-entrant" and args.content.startswith("- Guard")
