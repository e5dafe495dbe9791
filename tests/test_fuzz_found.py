"""What the boundary fuzzers (``tests/support/fuzzing.py``) found, each pinned by the small input that showed it: every one
used to end in a traceback, an "internal error", a hang, or a bad value on disk."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acpmem.core.errors import AcpmemError, EntryInvalid, ExtractionError, SettingsError, TranscriptError, UsageError
from acpmem.write.requests import pending_dir

MAX = 2**63 - 1
HUGE = "1" * 5000        # Python's int() refuses more than 4,300 digits with a ValueError


def _one_error_line(r, codes=(1, 2), prefix="Error: "):
    assert r.returncode in codes, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(prefix), r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------------------- transcripts

@pytest.mark.parametrize("text", [
    '[{"role": "user", "content": "x", "seq": ' + HUGE + "}]",
    '{"role": "user", "content": "x", "seq": ' + HUGE + "}\n",
    "[" * 100_000,
    '{"role": "user", "content": "x"}\n' + "[" * 100_000 + "\n",
])
def test_a_transcript_number_or_nesting_json_cannot_read_is_a_transcript_error(text):
    from acpmem.hosts.transcripts import read_transcript

    with pytest.raises(TranscriptError):
        read_transcript(text)


ODD_SHAPES = [
    '[{"role": "user", "tool_calls": 1}]',
    '[{"role": "assistant", "content": "x", "tool_calls": [1, {"function": 5}, {"function": {"name": [], '
    '"arguments": {"a": 1}}}]}]',
    '{"messages": [], "system": [0]}',
    '{"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}], "system": [{"type": "text", '
    '"text": null}, {"type": "document", "source": 7}]}',
    '[{"role": "user", "content": [{"type": []}]}]',
    '{"messages": [{"role": "assistant", "content": [{"type": "text", "text": [1]}, {"type": "tool_use", '
    '"name": {}, "input": 1}]}, {"role": "user", "content": [{"type": "tool_result", "content": 5}, '
    '{"type": "image", "source": [1]}]}], "system": "s"}',
    '{"type": "user", "message": {"role": "user", "content": [1, {"type": "text", "text": 2}]}, "uuid": ["a"]}\n'
    '{"type": "assistant", "message": {"role": "assistant", "content": "y"}, "uuid": "b", "parentUuid": ["a"]}\n',
]


@pytest.mark.parametrize("text", ODD_SHAPES)
def test_a_transcript_of_odd_shape_is_read_or_refused_never_a_crash(text):
    from acpmem.write.offline import extract_offline
    from acpmem.hosts.transcripts import close_tool_calls, openai_messages, read_transcript

    try:
        t = read_transcript(text)
    except TranscriptError:
        return
    for m in t.messages:
        assert isinstance(t.text(m), str)
    close_tool_calls(openai_messages(t), "ack")
    if t.messages:
        extract_offline(t.upto(t.messages[-1].seq), "x")


@pytest.mark.parametrize("path", ["\x00", "x\ud800.json", "a/" * 3000 + "t.json"])
def test_a_transcript_path_that_is_no_file_name_is_a_transcript_error(path):
    from acpmem.hosts.transcripts import read_transcript

    with pytest.raises(TranscriptError):
        read_transcript(Path(path))


def test_a_transcript_that_is_not_a_regular_file_is_refused_at_once():
    """/dev/zero reports size 0 and never ends: reading it used to hang and eat memory."""
    code = ("from acpmem.hosts.transcripts import read_transcript\n"
            "from acpmem.core.errors import TranscriptError\n"
            "try:\n    read_transcript('/dev/zero')\nexcept TranscriptError as e:\n    print(e.message)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "not a regular file" in r.stdout, r


def test_the_offline_extractor_writes_a_transcript_holding_lone_surrogates(vault, tmp_path):
    """A JSON transcript may escape a lone surrogate ("\\udcff"); quoted into the entry it made the file unwritable
    (UnicodeEncodeError: the request failed as "internal" five times)."""
    from acpmem.write.submit import submit

    t = tmp_path / "t.json"
    t.write_text('[{"role": "user", "content": "we keep the sqlite queue \\udcff \\ud800"}]')
    ack = submit(vault, type="fact", note="sqlite queue", importance=5, session="s", seq=0, transcript=str(t),
                 wait=True, extractor="offline")
    assert ack.outcome.status == "written", ack.outcome
    (entry,) = vault.load().entries
    assert "sqlite queue \ufffd \ufffd" in entry.body


# ------------------------------------------------------------------------------------------------- the Claude Code hook

def test_hook_event_with_a_number_json_cannot_read(vault, cli):
    event = '{"hook_event_name": "SessionStart", "session_id": "s", "x": ' + HUGE + "}"
    r = cli("memory", "--vault", str(vault.root), "hook", "claude-code", input=event)
    _one_error_line(r, (1,), prefix="Error: ")
    assert "too long" in r.stderr


def test_hook_event_with_a_lone_surrogate_in_its_transcript_path(vault, cli):
    event = json.dumps({"hook_event_name": "SessionStart", "session_id": "s", "transcript_path": "/t/\udcff.jsonl"})
    r = cli("memory", "--vault", str(vault.root), "hook", "claude-code", input=event)
    _one_error_line(r, (1,), prefix="Error: ")
    assert not (vault.root / ".acpmem" / "sessions").exists() or not list(
        (vault.root / ".acpmem" / "sessions").rglob("claude-code.json"))


@pytest.mark.parametrize("source", ["\ud800", "a\x00b", 7, ["compact"]])
def test_hook_event_with_a_source_no_file_can_hold_is_refused(vault, cli, tmp_path, source):
    """SessionStart's ``source`` is kept in the session's record: a lone surrogate in it (valid JSON) could not be
    written, an internal error (the command-line fuzzer, on CI's draw)."""
    event = json.dumps({"hook_event_name": "SessionStart", "session_id": "s", "source": source,
                        "transcript_path": str(tmp_path / "t.jsonl")})
    r = cli("memory", "--vault", str(vault.root), "hook", "claude-code", input=event)
    _one_error_line(r, (1,), prefix="Error: ")
    assert "source" in r.stderr and not list((vault.root / ".acpmem").rglob("claude-code.json"))


def test_hook_event_with_a_nul_in_its_cwd(vault, cli, tmp_path):
    event = json.dumps({"hook_event_name": "SessionStart", "session_id": "s", "cwd": str(vault.root) + "\x00x"})
    r = cli("memory", "hook", "claude-code", input=event, cwd=tmp_path)
    _one_error_line(r, (1,), prefix="Error: ")


@pytest.mark.parametrize("where", ["cwd", "vault"])
def test_a_path_too_long_for_the_system_finds_no_vault(vault, cli, tmp_path, where):
    """A cwd (from a hook event) or a --vault of 300 characters in one name: ENAMETOOLONG was an internal error."""
    long = str(tmp_path / ("x" * 300))
    if where == "cwd":
        event = json.dumps({"hook_event_name": "SessionStart", "session_id": "s", "cwd": long})
        r = cli("memory", "hook", "claude-code", input=event, cwd=tmp_path)
        assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r    # no vault there: the hook stays quiet
    else:
        r = cli("memory", "--vault", long, "list")
        _one_error_line(r, (1,), prefix="Error: ")
        assert "not an acpmem vault" in r.stderr


# ---------------------------------------------------------------------------------------------------------- acpmem.toml

@pytest.mark.parametrize("toml", ['[vault]\nlanguage = ["x"]\n', "[vault]\ntypes = 0\n",
                                  "vault = 1\n", '[extraction]\nextractor = "gpt"\n'])
def test_every_settings_error_says_what_to_do(toml):
    import tomllib

    from acpmem.core.settings import settings_from_mapping

    with pytest.raises(SettingsError) as info:
        settings_from_mapping(tomllib.loads(toml), "acpmem.toml")
    assert info.value.hint, info.value.message


@pytest.mark.parametrize("toml", ["[score]\ntop_n = " + HUGE + "\n", "[score]\nimportance_weight = " + "9" * 400 + "\n",
                                  "[score]\ntop_n = " + "[" * 100_000 + "\n"])
def test_a_settings_number_python_cannot_read_is_one_warning_line(vault, cli, toml):
    (vault.root / "acpmem.toml").write_text(toml)
    r = cli("memory", "--vault", str(vault.root), "list")
    _one_error_line(r, (0,), prefix="Warning: ")   # the last good settings: a synced file never wedges a clone
    assert "acpmem.toml" in r.stderr and "using the last good settings" in r.stderr


# --------------------------------------------------------------------------------------------------------- the read API

def test_a_session_or_query_of_the_wrong_type_is_a_usage_error(example_vault):
    from acpmem.vault import reader
    from acpmem.read import resident, retrieval

    for call in (lambda: resident.resident_index(example_vault, session=5),
                 lambda: reader.scores(example_vault, session="\ud800"),   # salts the jitter's hash
                 lambda: reader.scores(example_vault, session=["s"]),
                 lambda: retrieval.surface(example_vault, [0]),
                 lambda: retrieval.recall(example_vault, "queue", session=7),
                 lambda: retrieval.recall(example_vault, 1),
                 lambda: retrieval.recall(example_vault, "a\udcffb")):
        with pytest.raises(UsageError):
            call()


@pytest.mark.parametrize("args", [("list", "--format", "prompt", "--session", "s\udcff"),
                                  ("recall", "q", "--session", "\udcff"), ("recall", "caf\udce9"),
                                  ("surface", "--session", "\udcff")])
def test_an_undecodable_command_line_argument_is_one_error_line(example_vault, cli, args):
    """Bytes that are not UTF-8 reach Python as lone surrogates; hashing or storing them failed."""
    r = cli("memory", "--vault", str(example_vault.root), *args)
    _one_error_line(r)


def test_a_commit_note_of_undecodable_bytes_is_refused_before_anything_is_written(example_vault, cli):
    r = cli("memory", "--vault", str(example_vault.root), "commit", "--type", "fact", "--note", "caf\udce9",
            "--importance", "5", "--session", "s", "--seq", "1")
    _one_error_line(r)
    assert not list(pending_dir(example_vault.root / ".acpmem").glob("*.json"))


# ---------------------------------------------------------------------------------------------------------- fork output

def _draft(vault, arguments: dict):
    from acpmem.write import draft, requests
    from acpmem.write.llm import ToolCall

    req = requests.make_request(types=vault.settings.types, type="fact", note="n", importance=5, session="s", seq=1,
                                transcript=None, host_tools=None, lang="en", created=vault.now(),
                                request_id=requests.new_request_id(vault.rng))
    return req, draft.draft_from_calls(vault, req, [ToolCall("c1", "memory_write", arguments, json.dumps(arguments))],
                                      "llm:test", set())


@pytest.mark.parametrize("content", ["- a \x00 b", "- a \ud800 b", "- a \udcff b"])
def test_memory_write_content_that_no_file_can_hold_is_a_malformed_call(vault, content):
    with pytest.raises(ExtractionError) as info:
        _draft(vault, {"content": content})
    assert info.value.data["reason"] == "malformed_call"


@pytest.mark.parametrize("title, content", [("Queue\x01 is \u0085sqlite\x7f", "- body"),
                                            (None, "- \x1b[31mQueue\x1b[0m is sqlite\x08")])
def test_control_characters_never_reach_an_entry_title(vault, title, content):
    """Not a crash before: the guard that the stricter title rule (no control characters, no line breaks) never makes
    the fork write an entry the vault then refuses — model titles and derived titles are cleaned instead."""
    from acpmem.write import fork

    args = {"content": content} if title is None else {"content": content, "title": title}
    req, draft = _draft(vault, args)
    fork.commit_draft(vault, req, draft, "m", "llm:test")
    loaded = vault.load()
    assert loaded.problems == [] and len(loaded.entries) == 1
    assert "Queue" in loaded.entries[0].title and "sqlite" in loaded.entries[0].title


@pytest.mark.parametrize("extra", ['title: "a\\x00b"\n', 'note: "a\\x00b"\n', 'source: {x: "\\x00"}\n',
                                  'title: "a\\rb"\n', 'title: "a\\u2028b"\n'])
def test_an_escaped_nul_or_line_break_in_a_hand_edited_entry_is_refused(extra):
    from acpmem.core.entryfile import parse_entry

    text = ("---\nid: e1\ntitle: T\ntype: fact\nimportance: 5\ncreated: 2026-11-29T12:00:00Z\n---\nbody\n")
    key = extra.split(":")[0]
    lines = [ln for ln in text.splitlines(keepends=True) if not ln.startswith(f"{key}:")]
    lines.insert(2, extra)
    with pytest.raises(EntryInvalid):
        parse_entry("".join(lines), "entries/e1.md")


# --------------------------------------------------------------------------------------------------- the model endpoint

@pytest.mark.parametrize("body, reason", [
    (b'{"choices": [{"message": {"role": "assistant", "content": "x"}}], "usage": {"prompt_tokens": ' + HUGE.encode()
     + b"}}", "bad_response"),
    (b"[" * 100_000, "bad_response"),
    (b"not json at all", "bad_response"),
])
def test_an_answer_python_cannot_read_is_a_bad_response_not_an_internal_error(body, reason):
    from openai_server import fake_openai, reply

    from acpmem.write import llm

    with fake_openai([reply.raw(body)]) as srv:
        cfg = llm.resolve_model_config({"base_url": srv.base_url, "model": "m", "max_retries": 0}, env={})
        with pytest.raises(ExtractionError) as info:
            llm.call_chat(cfg, {"messages": []})
    assert info.value.data["reason"] == reason


@pytest.mark.parametrize("arguments", ['{"content": ' + HUGE + "}", "[" * 100_000])
def test_tool_call_arguments_python_cannot_read_are_a_malformed_call(arguments):
    from openai_server import fake_openai, reply

    from acpmem.write import llm

    with fake_openai([reply.writes(reply.call("memory_write", arguments))]) as srv:
        cfg = llm.resolve_model_config({"base_url": srv.base_url, "model": "m", "max_retries": 0}, env={})
        result = llm.call_chat(cfg, {"messages": []})
    (call,) = result.tool_calls
    assert call.arguments is None and call.error


def test_token_counts_beyond_64_bits_never_reach_the_cost_ledger():
    from openai_server import fake_openai, reply

    from acpmem.write import llm

    usage = {"prompt_tokens": 10**30, "completion_tokens": -5, "prompt_tokens_details": {"cached_tokens": 2**63}}
    with fake_openai([reply.text("nothing", usage=usage)]) as srv:
        cfg = llm.resolve_model_config({"base_url": srv.base_url, "model": "m", "max_retries": 0}, env={})
        result = llm.call_chat(cfg, {"messages": []})
    assert (result.prompt_tokens, result.completion_tokens, result.cached_tokens) == (0, 0, 0)
    assert all(0 <= v <= MAX for v in (result.prompt_tokens, result.cached_tokens, result.completion_tokens))


def test_a_content_block_type_that_is_a_list_does_not_crash_the_dialect_guess():
    from acpmem.hosts.transcripts import read_transcript

    t = read_transcript('[{"role": "user", "content": [{"type": []}]}]')
    assert t.format == "openai"


# ----------------------------------------------------------------------------------------------- local and shared state

@pytest.mark.parametrize("time", ["zzzz", "9999-99-99T99:99:99Z", "2099-02-30T00:00:00Z"])
def test_a_bogus_time_in_a_teammates_reads_file_is_skipped(example_vault, cli, time):
    """reads/*.tsv arrive from other clones through sync; "zzzz" beat every real time and then failed every score
    (list --format prompt, score: "internal error: ValueError: Invalid isoformat string")."""
    root = example_vault.root
    ident = example_vault.load().entries[0].id
    (root / "reads").mkdir(exist_ok=True)
    (root / "reads" / "teammate.tsv").write_text(f"{ident}\t{time}\n")
    for args in (("list", "--format", "prompt"), ("score",), ("recall", "queue"), ("show", ident)):
        r = cli("memory", "--vault", str(root), *args)
        assert r.returncode == 0 and r.stderr == "", (args, r.stderr)


def _request_file(vault, **changes) -> Path:
    from acpmem.write import requests

    req = requests.make_request(types=vault.settings.types, type="fact", note="sqlite queue", importance=5,
                                session="s", seq=1, transcript=None, host_tools=None, lang="en",
                                created="2026-11-29T12:00:00Z", request_id="r-handedit1")
    vault.ensure_state()
    path = requests.save_request(vault.state_dir, req)
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("changes", [{"id": "r-other0001"}, {"next_attempt": "zzzz"}, {"attempts": 1e400},
                                     {"type": {"a": 1}}, {"errors": "oops"}, {"session": "a\nb"},
                                     {"note": "\ud800"}, {"transcript": "\udcff"}, {"ack": "\ud800"},
                                     {"errors": [{"message": "\ud800"}]}])
def test_a_hand_edited_request_file_is_broken_and_the_worker_does_not_spin(vault, changes):
    """A request whose id is not its file name made the worker process the same missing request for ever, holding
    the worker lock (every `commit --wait` then waited 300 s); a next_attempt of "zzzz" stopped it with a
    ValueError; attempts of 1e400 crashed every listing of requests, stats included; a lone surrogate (a "\\ud800"
    escape) in any of its text loaded, and its failure could then not be saved (a UnicodeEncodeError, found by the
    state-file fuzzer)."""
    from acpmem.write import requests
    from acpmem.upkeep import stats

    path = _request_file(vault, **changes)
    reqs, broken = requests.list_requests(vault.state_dir)
    assert reqs == [] and broken == [path.name]
    assert stats.stats(vault)["requests"]["broken"] == [path.name]
    code = ("import sys\nfrom acpmem.vault.writer import Vault\nfrom acpmem.write.worker import run_worker\n"
            f"print(run_worker(Vault({str(vault.root)!r}), idle_wait=0))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "0", r


@pytest.mark.parametrize("changes, field", [({"type": "gossip"}, "type"), ({"note": " "}, "note")])
def test_a_request_the_vault_cannot_take_fails_clearly_and_writes_nothing(vault, changes, field):
    """A hand-edited type (or a type the vault dropped from its list) and an empty note used to become entries the
    vault then reported invalid."""
    from acpmem.write import worker

    _request_file(vault, **changes)
    (out,) = worker.process_now(vault, ["r-handedit1"], extractor="offline")
    assert out.status == "retry" and out.error["kind"] == "EntryInvalid" and field in out.error["message"], out
    assert vault.load().entries == [] and list(vault.entries_dir.glob("*.md")) == []


def test_write_entries_never_writes_an_entry_the_vault_would_refuse(vault):
    import helpers_proc as hp

    bad = hp.make_entry("e00001", "A fine title", "body", typ="gossip")
    with pytest.raises(EntryInvalid) as info:
        vault.write_entries([bad.with_changes(path=vault.path_for(bad.id, bad.title))], subject="s", why="w")
    assert info.value.field == "type"
    assert list(vault.entries_dir.glob("*.md")) == []


@pytest.mark.parametrize("ledger", ['{"used_bytes": 1e400}', '{"used_bytes": -1e400}', '{"recalled": "\\ud800"}',
                                    '{"surfaced": ["\\udcff"]}'])
def test_a_hand_edited_surfacing_ledger_is_a_fresh_one(example_vault, ledger):
    from acpmem.read import retrieval

    sdir = example_vault.session_dir("led")
    sdir.mkdir(parents=True)
    (sdir / "surfaced.json").write_text(ledger)
    assert retrieval.surface(example_vault, "led").entries


def test_a_cost_ledger_line_nested_past_the_stack_is_skipped(vault):
    from acpmem.upkeep import stats

    vault.ensure_state()
    (vault.state_dir / "costs.jsonl").write_text("[" * 100_000 + "\n" + json.dumps(
        {"model": "m", "ok": True, "prompt_tokens": 7, "latency_s": 1e400}) + "\n")
    summary = stats.stats(vault)["costs"]
    assert summary["calls"] == 1 and summary["prompt_tokens"] == 7 and summary["latency_s"] == 0.0


def test_an_argument_holding_an_integer_no_str_can_write_is_a_clear_error(example_vault):
    """Error messages quoted the value with repr(), which raises ValueError for an int of more than 4,300 digits."""
    from acpmem.core.tools import parse_write_args
    from acpmem.integrations.mcp_server import MemoryService

    svc = MemoryService(example_vault.root, "huge")
    for args in ({"type": [10**5000], "note": "x", "importance": 5}, {"type": "fact", "note": "x",
                                                                      "importance": [10**5000]}):
        with pytest.raises(AcpmemError):
            svc.call("memory_commit", args)
    with pytest.raises(EntryInvalid):
        parse_write_args({"content": "x", "supersedes": [10**5000]})


# ---------------------------------------------------------------------------------------------------------------- init

def test_init_at_a_path_the_system_refuses_is_one_error_line(cli, tmp_path):
    """A folder name longer than the system allows was an internal error (ENAMETOOLONG while choosing the folder)."""
    r = cli("memory", "init", str(tmp_path / ("z" * 300)), cwd=tmp_path)
    _one_error_line(r, (1,), prefix="Error: ")
    assert "cannot create the vault" in r.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["a\x00b", 5, "\udc80x"])
def test_init_vault_refuses_a_path_that_is_not_a_usable_name(tmp_path, path):
    from acpmem.vault.create import init_vault

    with pytest.raises(UsageError) as info:
        init_vault(path if not isinstance(path, str) else str(tmp_path / path))
    assert "the vault path must be" in info.value.message
    assert list(tmp_path.iterdir()) == []
