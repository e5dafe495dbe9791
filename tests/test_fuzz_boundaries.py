"""Boundary fuzzing of every input a user or a model controls — command lines, MCP tool arguments, the Python API,
fork output, entry files, transcripts, acpmem.toml and the state files a person or a teammate's clone can change —
with generated hostile values (``tests/support/fuzzing.py`` has the generators and the property). Sized for CI (the whole
module well under a minute on the 2-core machine); ``python bench/fuzz_boundaries.py --examples N`` runs the same
fuzzers longer.

The property: success or one clear error (``AcpmemError``; on the command line one ``Error: … — …`` line with exit 1
or 2, never a traceback or "internal error"), and no bad value reaches disk or the index: after each example the
good entries still list and recall, every request and entry file acpmem wrote is valid, the index holds only
storable numbers, and doctor names exactly the bad files."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, strategies as st

import fuzzing
from acpmem.core import limits
from acpmem.write.requests import pending_dir

# generated values are large on purpose; hypothesis says so when it prints one
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")

# examples per fuzzer in CI
EXAMPLES = {"cli": 500, "mcp": 400, "api": 500, "fork": 250, "entry_files": 250, "transcripts": 1000, "settings": 400,
            "state_files": 150}


@pytest.fixture
def ctx(tmp_path):
    c = fuzzing.Ctx(tmp_path)
    yield c
    c.done()


def _run(ctx, name: str) -> None:
    ran = fuzzing.FUZZERS[name](ctx, EXAMPLES[name])
    assert ran >= EXAMPLES[name] // 2, (name, ran)     # hypothesis may stop early only when it ran out of inputs


def test_fuzz_command_lines(ctx):
    _run(ctx, "cli")
    fuzzing.check_vault(ctx.root, doctor=True)


def test_fuzz_mcp_tool_arguments_in_process(ctx):
    _run(ctx, "mcp")


def test_fuzz_the_python_api(ctx):
    _run(ctx, "api")


def test_fuzz_fork_output(ctx):
    _run(ctx, "fork")
    fuzzing.check_vault(ctx.root, doctor=True)


def test_fuzz_entry_files(ctx):
    _run(ctx, "entry_files")


def test_fuzz_transcripts(ctx):
    _run(ctx, "transcripts")


def test_fuzz_settings(ctx):
    _run(ctx, "settings")


def test_fuzz_state_files(ctx):
    """reads/*.tsv from a teammate, the read log, a surfacing ledger, a pending request and the cost ledger."""
    _run(ctx, "state_files")
    fuzzing.check_vault(ctx.root, doctor=True)


# --------------------------------------------------------------------------------------------- through the real servers

def _json_safe(value):
    """What an MCP client can send at all: JSON without NaN or infinities, text without lone surrogates."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return limits.without_surrogates(value)
    if isinstance(value, int) and not limits.int_between(value, -(10**4000), 10**4000):
        return "an integer of more than 4,300 digits"     # json.dumps cannot write it
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {_json_safe(k): _json_safe(v) for k, v in value.items()}
    return value


@fuzzing.hyp_settings(2)
@given(st.lists(fuzzing.mcp_args().map(lambda c: (c[0], _json_safe(c[1]))), min_size=10, max_size=10))
def test_fuzz_mcp_through_the_real_server(tmp_path_factory, calls):
    """Generated tool calls through ``acp memory serve`` and the ``mcp`` package's own client: each answer is a tool
    result or a one-line tool error, and the vault is sound afterwards."""
    from test_mcp import _server_params, _session_run

    ctx = fuzzing.Ctx(tmp_path_factory.mktemp("mcp"))
    try:
        async def body(s):
            return [await s.call_tool(name, args) for name, args in calls]

        results = _session_run(_server_params(ctx.root, "--session", "fuzz-real"), body)
        for (name, args), r in zip(calls, results):
            text = r.content[0].text
            assert text, (name, args)
            if r.is_error:
                assert text.startswith("Error: ") and "internal error" not in text, (name, args, text)
        fuzzing.check_vault(ctx.root)
    finally:
        ctx.done()


RAW_ARGUMENTS = [
    '{"content": ' + "1" * 5000 + "}",                       # int() refuses it: was an "internal" failure
    "[" * 100_000,                                            # nesting deeper than the stack
    '{"content": NaN}', '{"content": "- a \\ud800 b"}', '{"content": "- a \\u0000 b"}',
    '{"content": "- ok", "title": "t\\u0001 \\u202e\\u0085x"}', '{"content": "- ok", "title": "' + "x" * 400 + '"}',
    '{"content": {"nested": [1, 2]}}', '"just a string"', "", "null", '{"content": "- ok", "supersedes": [1e400]}',
    '{"content": "- sqlite queue fine", "supersedes": ["' + "a" * 70 + '"]}',
    '{"content": "- The queue is sqlite in WAL mode.", "title": "Queue: sqlite WAL", "supersedes": ["zzzzzz"]}',
]
RAW_BODIES = [
    b'{"choices": [{"message": {"role": "assistant", "content": "x"}}], "usage": {"prompt_tokens": ' + b"1" * 5000
    + b"}}",
    b'{"choices": [{"message": {"role": "assistant", "content": "x"}}], "usage": {"prompt_tokens": '
    b'100000000000000000000000000, "completion_tokens": NaN, "prompt_tokens_details": {"cached_tokens": -5}}}',
    b"[" * 100_000, b"not json", b"", b'{"choices": "x"}',
]


def test_fuzz_fork_end_to_end_through_the_fake_openai_server(example_vault, openai_server):
    """Hostile tool-call arguments and hostile answers from a real HTTP endpoint: each request ends written, with
    nothing to keep, or retried with a clear reason — never an "internal" failure — and what reaches disk (entries,
    the cost ledger) holds only valid values."""
    from openai_server import reply
    from test_fork import configure, run, submit

    v = configure(example_vault, openai_server)
    replies = [reply.writes(reply.call("memory_write", raw)) for raw in RAW_ARGUMENTS] + \
        [reply.raw(body) for body in RAW_BODIES]
    outcomes = []
    for r in replies:
        openai_server.enqueue(r)
        out = run(v, submit(v, note="sqlite queue"))
        outcomes.append((out.status, (out.error or {}).get("reason")))
        assert out.status in ("written", "nothing", "retry"), out
        if out.status == "retry":
            assert out.error["kind"] != "internal", out.error
            # runaway: a generated answer streamed in more chunks than max_tokens allows (the bound on one answer);
            # repetition: one that repeats a stretch (the loop check)
            assert out.error.get("reason") in ("malformed_call", "bad_response", "no_usable_write", "truncated",
                                               "runaway", "repetition"), \
                out.error
    statuses = [o for o, _ in outcomes]
    assert statuses.count("written") >= 2 and statuses.count("retry") >= 10, outcomes
    for rec in map(json.loads, (v.state_dir / "costs.jsonl").read_text().splitlines()):
        for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
            assert key not in rec or limits.int_between(rec[key], 0, limits.MAX_INT), rec
    v.close()
    for p in pending_dir(example_vault.root / ".acpmem").glob("*.json"):
        p.unlink()
    fuzzing.check_vault(example_vault.root, doctor=True)
