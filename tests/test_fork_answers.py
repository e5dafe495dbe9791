"""Answers of small models, end to end through the loopback OpenAI server and the real ``openai`` client: calls
written as text, near-miss arguments, the explicit "nothing to keep", failures that keep the model's text, the cap
on entries per answer, careful supersedes, duplicates, ``max_tokens`` and the context window."""
from __future__ import annotations

import json
import subprocess

import pytest

from openai_server import reply
from test_fork import CHAT, configure, fork_commits, git_log, run, submit
from acpmem.write import requests
from acpmem.write.answers import json_values, normalize_write_args, read_answer
from acpmem.write.llm import ToolCall

ALLOWED = ("content", "title", "supersedes")


# ------------------------------------------------------------------------------------------- reading, pure

@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "memory_write", "arguments": {"content": "- Use the lock.", "title": "Lock"}}\n</tool_call>',
    'Here is the entry:\n```json\n{"name": "memory_write", "arguments": {"content": "- Use the lock.", '
    '"title": "Lock"}}\n```',
    '{"content": "- Use the lock.", "title": "Lock"}',
    'memory_write({"content": "- Use the lock.", "title": "Lock"})',
    '```json\n{"function": {"name": "memory_write", "arguments": "{\\"content\\": \\"- Use the lock.\\", '
    '\\"title\\": \\"Lock\\"}"}}\n```',
    '{"name": "memory_write", "parameters": {"type": "object", "properties": {"content": "- Use the lock.", '
    '"title": "Lock"}}}',
])
def test_each_way_small_models_write_a_call_is_read(text):
    r = read_answer((), text)
    (call,) = r.writes
    args, notes = normalize_write_args(call.arguments, ALLOWED)
    assert r.source == "text" and args == {"content": "- Use the lock.", "title": "Lock"}, (r, args)


def test_several_calls_and_a_list_of_them_in_one_answer_are_all_read_once():
    text = ('```json\n[{"content": "- a"}, {"content": "- b"}]\n```\nand\n<tool_call>{"name": "memory_write", '
            '"arguments": {"content": "- c"}}</tool_call> and again {"content": "- a"}')
    r = read_answer((), text)
    assert [c.arguments["content"] for c in r.writes] == ["- a", "- b", "- c"]
    assert "a repeated memory_write call was read once" in r.notes


def test_json_values_skip_what_is_not_json_and_do_not_find_inner_objects_again():
    assert json_values('x {not json} {"a": {"b": 1}} [1, 2') == [{"a": {"b": 1}}]
    assert json_values('{"content": "line one\nline two"}') == [{"content": "line one\nline two"}]   # raw newline


@pytest.mark.parametrize("text", ["nothing to keep", "Nothing to keep.", "**Nothing to keep**", '"nothing to keep"',
                                  "无需记录", "无需记录。"])
def test_the_documented_reply_is_nothing(text):
    r = read_answer((), text)
    assert r.nothing and not r.calls


@pytest.mark.parametrize("text", ["Nothing here is worth keeping, I think, but the lock matters.",
                                  "**Memory write:** Title: Use the lock. Content: guard append.", ""])
def test_other_text_is_neither_a_call_nor_nothing(text):
    r = read_answer((), text)
    assert r.nothing is None and not r.writes


@pytest.mark.parametrize("text, title", [
    ("**Task 1: Sync API rate limit**\n\n- title: Sync API rate limit\n- content: The sync API allows 100 requests "
     "per minute per token.", "Sync API rate limit"),
    ("**Memory write:**\nTitle: Use the lock\nContent:\n- The sync API allows 100 requests per minute per token.\n"
     "\nThat is all.", "Use the lock"),
    ("内容：The sync API allows 100 requests per minute per token.", None),
])
def test_a_write_spelled_as_labelled_lines_is_read(text, title):
    r = read_answer((), text)
    (call,) = r.writes
    assert call.arguments.get("title") == title
    assert call.arguments["content"].lstrip("- ") == "The sync API allows 100 requests per minute per token."
    assert "memory_write read from 'title:' / 'content:' lines in the text" in r.notes


def test_the_nothing_tool_and_its_json_spelling_are_nothing():
    native = read_answer((ToolCall("c1", "memory_nothing", {"reason": "only chit-chat"}, "{}"),), None)
    assert native.nothing == "only chit-chat" and not native.calls
    assert read_answer((), '{"name": "nothing to keep"}').nothing == "no reason given"
    both = read_answer((ToolCall("c1", "memory_nothing", {"reason": "x"}, "{}"),
                        ToolCall("c2", "memory_write", {"content": "- y"}, "{}")), None)
    assert both.nothing is None and len(both.writes) == 1


def test_near_miss_arguments_are_repaired_with_a_note_each():
    args, notes = normalize_write_args({"content": ["Use the lock", "- Never a flag"], "title": "Lock",
                                        "type": "lesson", "importance": 7, "supersedes": "#k3f9q2, ab12cd"}, ALLOWED)
    assert args == {"content": "- Use the lock\n- Never a flag", "title": "Lock", "supersedes": ["k3f9q2", "ab12cd"]}
    assert "memory_write content was a list of lines: joined" in notes
    assert "memory_write: unknown argument(s) dropped: importance, type" in notes
    echo, notes = normalize_write_args({"type": "object", "properties": {"content": {"type": "string",
                                                                                     "value": "- x"}}}, ALLOWED)
    assert echo == {"content": "- x"} and "echo of the tool schema" in notes[0]
    empty_echo, _ = normalize_write_args({"type": "object", "properties": {"content": {"type": "string"}}}, ALLOWED)
    assert "content" not in empty_echo        # the schema alone: nothing to write, the strict parser refuses it


# ------------------------------------------------------------------------------------------- end to end

def pending(v, req):
    return requests.load_request(v.state_dir, req.id)


def test_a_call_written_in_a_fenced_block_with_extra_keys_is_written_with_a_note(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    openai_server.enqueue(reply.text(
        'I will save this.\n```json\n{"name": "memory_write", "arguments": {"content": ["Guard session.append '
        'with the per-session lock", "A boolean flag is not re-entrant"], "title": "session.append needs the lock",'
        ' "type": "lesson", "importance": 8}}\n```'))
    req = submit(v)
    out = run(v, req)
    assert out.status == "written" and [e["title"] for e in out.entries] == ["session.append needs the lock"]
    entry = next(e for e in v.load().entries if e.id == out.entries[0]["id"])
    assert entry.body == "- Guard session.append with the per-session lock\n- A boolean flag is not re-entrant\n"
    assert "memory_write: unknown argument(s) dropped: importance, type" in out.notes
    msg = git_log(v, "-1", "--format=%B", out.commit)
    assert "Notes:\n" in msg and "unknown argument(s) dropped: importance, type" in msg
    assert pending(v, req) is None


def test_a_text_answer_without_a_write_fails_keeps_the_request_and_the_text(example_vault, openai_server, cli):
    v = configure(example_vault, openai_server)
    answer = "I will now call memory_write for the given focus, following the provided rules."   # the 1.5B's words
    openai_server.enqueue(reply.text(answer))
    req = submit(v)
    out = run(v, req)
    assert out.status == "retry" and out.error["reason"] == "no_usable_write"
    assert "does not say nothing to keep" in out.error["message"] and "«I will now call memory_write for" in out.error["message"]
    assert out.error["text"] == answer and not fork_commits(v)
    kept = pending(v, req)
    assert kept.attempts == 1 and kept.last_error["text"] == answer       # the whole answer, in the request
    (cost,) = [json.loads(x) for x in (v.state_dir / "costs.jsonl").read_text().splitlines()]
    assert cost["ok"] is False
    doctor = cli("memory", "--vault", str(v.root), "doctor")
    assert f"request {req.id} failed 1 time(s) (Unusable answer" in doctor.stdout + doctor.stderr
    stats = json.loads(cli("memory", "--vault", str(v.root), "stats", "--json").stdout)
    (item,) = stats["requests"]["items"]
    assert item["id"] == req.id and "«I will now call memory_write" in item["last_error"]
    # retried: a usable answer the next time writes it
    openai_server.enqueue(reply.writes(reply.write("- Guard session.append with the per-session lock.")))
    again = run(v, req)
    assert again.status == "written" and again.attempts == 2 and pending(v, req) is None


def test_a_truncated_answer_is_a_failure_even_with_a_complete_call(example_vault, openai_server):
    v = configure(example_vault, openai_server, max_tokens=64)
    r = reply.writes(reply.write("- Use the lock."))
    r.body["choices"][0]["finish_reason"] = "length"
    openai_server.enqueue(r)
    req = submit(v)
    out = run(v, req)
    assert out.status == "retry" and out.error["reason"] == "truncated" and "cut off" in out.error["message"]
    assert openai_server.requests[0].body["max_tokens"] == 64 and not fork_commits(v)
    assert pending(v, req).attempts == 1


def test_max_tokens_zero_sends_none(example_vault, openai_server):
    v = configure(example_vault, openai_server, max_tokens=0)
    openai_server.enqueue(reply.text())
    run(v, submit(v))
    assert "max_tokens" not in openai_server.requests[0].body


def test_temperature_is_sent_when_set_and_each_retry_is_warmer(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    openai_server.enqueue(reply.text())
    run(v, submit(v))
    assert "temperature" not in openai_server.requests[0].body              # default: the server's own
    v = configure(v, openai_server, temperature=0.0)
    openai_server.enqueue(reply.text("Sure, here is a summary."), reply.text("Still prose."), reply.text())
    req = submit(v)
    for _ in range(3):
        run(v, req)
    # the same prompt at temperature 0 gives the same unusable answer again: each retry samples a little warmer
    assert [r.body["temperature"] for r in openai_server.requests[1:]] == [0.0, 0.3, 0.6]


def test_a_write_that_gives_back_the_forks_own_instructions_is_dropped_with_a_note(example_vault, openai_server):
    """Qwen2.5-Coder-0.5B, run as the fork, wrote the rule for ``content`` as the content of its answer, three answers
    of three: never an entry. What the model was told — a line of the system message, a description of the
    memory_write tool, in either language — given back as a write is dropped with a note; the real write beside it is
    written."""
    from acpmem.core.tools import tool_definitions

    v = configure(example_vault, openai_server)
    zh = tool_definitions("fork", lang="zh")[0]["function"]["parameters"]["properties"]["content"]["description"]
    openai_server.enqueue(reply.writes(
        reply.call("memory_write", {"content": 'one to a few markdown bullets ("- ..."), self-contained: name the '
                                               'files, commands, components and reasons; never write "above", '
                                               '"this" or "earlier".'}),
        reply.call("memory_write", {"content": zh}),
        reply.write("- Guard session.append with the per-session lock.")))
    req = submit(v)
    out = run(v, req)
    assert out.status == "written" and len(out.entries) == 1, out
    (entry,) = [e for e in v.load().entries if e.id == out.entries[0]["id"]]
    assert "per-session lock" in entry.body
    assert out.notes.count("a write repeating the fork's own instructions, not the conversation, was dropped") == 1
    # an answer of such writes alone is no answer: retried, as a text without a write is
    openai_server.enqueue(reply.always(reply.text('title: one to a few markdown bullets\ncontent: one to a few markdown bullets '
                                     '("- ..."), self-contained: name the files, commands, components and reasons; '
                                     'never write "above", "this" or "earlier".')))
    before = len(fork_commits(v))
    req = submit(v)
    out = run(v, req)
    assert out.status == "retry" and out.entries == () and len(fork_commits(v)) == before, out
    assert "gave back the fork's own instructions" in out.error["message"], out.error
    assert pending(v, req) is not None
    assert not [e for e in v.load().entries if "markdown bullets" in e.body]


def test_nothing_by_the_tool_is_done_without_a_commit_and_says_why(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    openai_server.enqueue(reply.writes(reply.call("memory_nothing", {"reason": "the lock is already an entry"})))
    req = submit(v)
    out = run(v, req)
    assert out.status == "nothing" and "memory_nothing: the lock is already an entry" in out.notes
    assert not fork_commits(v) and pending(v, req) is None
    assert requests.find_done(v.state_dir, req.id)["notes"] == ["memory_nothing: the lock is already an entry"]


def test_only_host_tool_calls_are_no_answer(example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server)
    host = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    (tmp_path / "tools.json").write_text(json.dumps(host))
    openai_server.enqueue(reply.writes(reply.call("read_file", {"path": "state.ts"})))
    out = run(v, submit(v, host_tools=str(tmp_path / "tools.json")))
    assert out.status == "retry" and "(it called read_file)" in out.error["message"]


def test_a_quoted_memory_commit_in_the_text_is_ignored_beside_a_write(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    openai_server.enqueue(reply.text(
        '{"name": "memory_commit", "arguments": {"type": "lesson", "note": "x", "importance": 7}}\n'
        '{"name": "memory_write", "arguments": {"content": "- Guard session.append with the lock."}}'))
    out = run(v, submit(v))
    assert out.status == "written" and len(out.entries) == 1
    assert "a call to 'memory_commit' written in the text was ignored (not a fork tool)" in out.notes


def test_an_answer_of_60_writes_writes_the_cap_and_names_what_it_dropped(example_vault, openai_server):
    v = configure(example_vault, openai_server, max_entries_per_answer=5)
    before = len(v.load().entries)
    openai_server.enqueue(reply.writes(*[reply.write(f"- Distinct fact number {i} about queue shard q{i}.",
                                                     title=f"Queue shard q{i} fact") for i in range(60)]))
    out = run(v, submit(v, note="queue shards"))
    assert out.status == "written" and len(out.entries) == 5 and len(v.load().entries) == before + 5
    (note,) = [n for n in out.notes if "over the cap" in n]
    assert note.startswith("55 memory_write call(s) over the cap of 5 per answer dropped")
    assert "'Queue shard q5 fact'" in note and note.endswith("…")
    assert "55 memory_write call(s) over the cap" in git_log(v, "-1", "--format=%B", out.commit)


def _entry(v, title_start):
    return next(e for e in v.load().entries if e.title.startswith(title_start))


def test_supersedes_only_of_shown_entries_of_the_same_type_with_overlap(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    lesson = _entry(v, "Session append must be re-entrant")      # shown as related to this note
    others = [e for e in v.load().entries if e.type != "lesson"]
    other = others[0]
    openai_server.enqueue(reply.writes(
        reply.write("- session.append takes the per-session lock in state.ts; a re-entrant append waits for it.",
                    title="Session append waits on the per-session lock", supersedes=[lesson.id]),
        reply.write("- Unrelated words entirely: kafka consumer lag budget.", title="Kafka lag",
                    supersedes=[other.id])))
    req = submit(v)
    out = run(v, req)
    assert out.status == "written" and out.superseded == (lesson.id,)
    assert any(n.startswith(f"supersede of #{other.id} dropped:") for n in out.notes), out.notes
    assert _entry(v, other.title).superseded_by is None


def test_a_supersede_across_types_is_dropped_with_a_note(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    lesson = _entry(v, "Session append must be re-entrant")
    openai_server.enqueue(reply.writes(reply.write(
        "- session.append must be re-entrant: take the per-session lock.", title="Session append lock",
        supersedes=[lesson.id])))
    out = run(v, submit(v, type="fact"))
    assert out.status == "written" and out.superseded == ()
    assert f"supersede of #{lesson.id} dropped: it is a lesson, the new entry a fact" in out.notes


def test_the_same_note_twice_does_not_write_the_same_entry_twice(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    write = reply.write("- Shard the queue by tenant id; one SQLite file per shard under .acpmem/queue/.",
                        title="The queue is sharded by tenant id")
    openai_server.enqueue(reply.writes(write), reply.writes(write), reply.writes(write))
    first = run(v, submit(v, note="queue sharded by tenant id"))
    second = run(v, submit(v, note="queue sharded by tenant id"))
    assert first.status == "written" and second.status == "nothing"
    assert any(n.startswith(f"a write repeating #{first.entries[0]['id']}") for n in second.notes), second.notes
    related = openai_server.requests[1].body["messages"][-1]["content"]
    assert f'- #{first.entries[0]["id"]} (lesson) ' in related            # it was shown as related
    # every write repeated it: asked once more without the related entries, and the repeat still dropped
    assert len(openai_server.requests) == 3 and first.entries[0]["id"] not in \
        openai_server.requests[2].body["messages"][-1]["content"]
    assert "asked again without the related entries" in "; ".join(second.notes)
    assert sum(e.title == "The queue is sharded by tenant id" for e in v.load().entries) == 1
    # extract's summary counts every call made, the re-ask included, as the cost ledger does
    from acpmem.write.extract import totals

    assert second.usage["calls"] == 2 and second.usage["prompt_tokens"] == 2 * first.usage["prompt_tokens"]
    assert totals([first, second])["calls"] == 3 == len(openai_server.requests)


def test_an_entry_sharing_too_few_words_with_the_note_is_not_shown_as_related(example_vault, openai_server):
    from acpmem.read.layers import recall_layered
    from acpmem.write.context import related_entries, shares_words

    v = configure(example_vault, openai_server)
    note = "release runs: tag push publishes the wheel"
    ranked = recall_layered(v, note, limit=5, mark_read=False)
    assert ranked                                                   # recall ranks something for any note
    shown = related_entries(v, note)
    assert all(shares_words(note, f"{e.title}\n{e.body}") for e in shown)
    assert len(shown) < len(ranked)                                 # the ones sharing under two words left out
    assert shares_words("re-entrant session.append", "Session append must be re-entrant")   # words split at dots


def test_a_copy_of_the_shown_entry_is_asked_again_and_the_new_fact_written(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    old = reply.write("- Shard the queue by tenant id; one SQLite file per shard under .acpmem/queue/.",
                      title="The queue is sharded by tenant id")
    new = reply.write("- Queue shards are compacted nightly by `acp queue compact`.", title="Nightly shard compaction")
    openai_server.enqueue(reply.writes(old), reply.writes(old), reply.writes(new))
    run(v, submit(v, note="queue sharded by tenant id"))
    out = run(v, submit(v, note="queue shards tenant id compaction"))
    assert out.status == "written" and [e["title"] for e in out.entries] == ["Nightly shard compaction"]
    assert len(openai_server.requests) == 3


def test_an_entry_cites_the_turns_it_rests_on_beside_the_commit(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    openai_server.enqueue(reply.writes(
        reply.write("- The boolean flag in state.ts is not re-entrant: the post-tool hook fires again before the "
                    "first append returns.", title="session.append needs the per-session lock"),
        reply.write("- Deploys go through the blue-green pipeline.", title="Deploy pipeline")))
    out = run(v, submit(v, note="session.append re-entrancy"))
    assert out.status == "written"
    by_title = {e.title: e for e in v.load().entries}
    lock, deploy = by_title["session.append needs the per-session lock"], by_title["Deploy pipeline"]
    # turn 4 says why; turn 3 (the read file) shares too few words; the commit call (6) stays the seq
    assert [(c.session, c.seq, c.turns) for c in lock.citation] == [("s1", 6, "4")]
    assert [(c.session, c.seq, c.turns) for c in deploy.citation] == [("s1", 6, None)]   # nothing said it: the commit
    from acpmem.read.sources import entry_source
    (src,) = entry_source(v, lock.id, transcript=str(CHAT)).sources
    assert [t.seq for t in src.turns] == [4] and "not re-entrant" in src.turns[0].text   # `source` shows that turn


def test_a_superseding_entry_keeps_the_citations_of_the_one_it_replaces(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    first = reply.write("- The ingest queue is sharded by tenant id, one SQLite file per shard.",
                        title="The ingest queue is sharded by tenant id")
    openai_server.enqueue(reply.writes(first))
    one = run(v, submit(v, note="ingest queue sharding", session="s-early"))
    old_id = one.entries[0]["id"]
    openai_server.enqueue(reply.writes(reply.write(
        "- The ingest queue is sharded by tenant id and region now, one SQLite file per shard.",
        title="The ingest queue is sharded by tenant id and region", supersedes=[old_id])))
    two = run(v, submit(v, note="ingest queue sharding", session="s-late"))
    assert two.status == "written" and two.superseded == (old_id,)
    new = v.resolve(two.entries[0]["id"])
    assert [c.session for c in new.citation] == ["s-late", "s-early"]     # its own first, then the replaced one's
    assert new.citation[1] == v.resolve(old_id).citation[0]


def test_the_context_window_from_props_trims_the_oldest_turns_never_the_cited_one(example_vault, openai_server):
    convo = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(40):
        convo += [{"role": "user", "content": f"Question {i}: " + "padding words " * 60},
                  {"role": "assistant", "content": f"Answer {i}: " + "more padding " * 60}]
    convo += [{"role": "user", "content": "Remember: the queue is sharded by tenant id."},
              {"role": "assistant", "content": None, "tool_calls": [{"id": "c9", "type": "function", "function": {
                  "name": "memory_commit", "arguments": "{}"}}]}]
    path = example_vault.root.parent / "long.json"
    path.write_text(json.dumps(convo))
    v = configure(example_vault, openai_server)
    openai_server.props = {"default_generation_settings": {"n_ctx": 4096}}
    openai_server.enqueue(reply.writes(reply.write("- The queue is sharded by tenant id.")))
    out = run(v, submit(v, note="queue sharded by tenant id", transcript=path, seq=len(convo) - 1))
    assert out.status == "written" and openai_server.props_requests == 1
    sent = openai_server.requests[0].body["messages"]
    assert sent[0] == convo[0] and convo[-2] in sent and convo[-1] in sent      # system kept; the cited turn kept
    assert convo[1] not in sent and len(sent) < len(convo)                     # the oldest left out
    kept = [m for m in sent if m in convo]
    assert kept == [m for m in convo if m in kept]                             # order unchanged
    (note,) = [n for n in out.notes if "left out to fit" in n]
    assert "context of 4096 tokens" in note
    from acpmem.write.context import estimate_tokens
    assert sum(estimate_tokens(m) for m in sent) + estimate_tokens(openai_server.requests[0].body["tools"]) \
        <= 4096 - 1024


def test_dry_run_trims_to_the_context_window_as_the_call_does(example_vault, openai_server, cli):
    convo = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(40):
        convo += [{"role": "user", "content": f"Question {i}: " + "padding words " * 60},
                  {"role": "assistant", "content": f"Answer {i}: " + "more padding " * 60}]
    convo += [{"role": "user", "content": "Remember: the queue is sharded by tenant id."},
              {"role": "assistant", "content": None, "tool_calls": [{"id": "c9", "type": "function", "function": {
                  "name": "memory_commit", "arguments": "{}"}}]}]
    path = example_vault.root.parent / "long.json"
    path.write_text(json.dumps(convo))
    v = configure(example_vault, openai_server)
    openai_server.props = {"default_generation_settings": {"n_ctx": 4096}}
    args = ("memory", "--vault", str(v.root), "extract", "--transcript", str(path), "--note", "queue sharded",
            "--type", "lesson", "--importance", "7", "--session", "s1", "--seq", str(len(convo) - 1))
    r = cli(*args, "--dry-run")
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert openai_server.requests == [] and openai_server.props_requests == 1
    assert len(shown["messages"]) < len(convo) and convo[1] not in shown["messages"]
    openai_server.enqueue(reply.writes(reply.write("- The queue is sharded by tenant id.")))
    assert cli(*args).returncode == 0
    sent = openai_server.requests[0].body
    ack = [i for i, m in enumerate(sent["messages"]) if m.get("tool_call_id") == "c9"]
    assert len(ack) == 1 and len(sent["messages"]) == len(shown["messages"])
    assert [m for i, m in enumerate(sent["messages"]) if i not in ack] == \
        [m for i, m in enumerate(shown["messages"]) if i not in ack]          # the dry run showed what was sent
    assert {k: v for k, v in sent.items() if k != "messages"} == {k: v for k, v in shown.items() if k != "messages"}


def test_a_local_endpoint_gets_the_local_timeout_unless_one_is_set():
    from acpmem.core.settings import ExtractionSettings
    from acpmem.write.llm import resolve_model_config

    local = resolve_model_config(ExtractionSettings(base_url="http://127.0.0.1:8088/v1", model="q"), env={})
    remote = resolve_model_config(ExtractionSettings(base_url="https://api.example.com/v1", model="q"), env={})
    mine = resolve_model_config(ExtractionSettings(base_url="http://localhost:11434/v1", model="q",
                                                   timeout_seconds=20.0), env={})
    assert (local.timeout, remote.timeout, mine.timeout) == (900.0, 60.0, 20.0)
    assert resolve_model_config({"base_url": "http://[::1]:1/v1", "model": "q", "local_timeout_seconds": 300},
                                env={}).timeout == 300.0


def _long_conversation(root, turns: int, pad: int) -> tuple[list, object]:
    convo = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(turns):
        convo += [{"role": "user", "content": f"Question {i}: " + "padding words " * pad},
                  {"role": "assistant", "content": f"Answer {i}: " + "more padding " * pad}]
    convo += [{"role": "user", "content": "Remember: the queue is sharded by tenant id."},
              {"role": "assistant", "content": None, "tool_calls": [{"id": "c9", "type": "function", "function": {
                  "name": "memory_commit", "arguments": "{}"}}]}]
    path = root.parent / "long.json"
    path.write_text(json.dumps(convo))
    return convo, path


def test_an_endpoint_that_says_no_window_gets_the_default_window_not_the_whole_transcript(example_vault,
                                                                                          openai_server):
    from acpmem.write.context import DEFAULT_CONTEXT_TOKENS, estimate_tokens

    convo, path = _long_conversation(example_vault.root, 300, 200)      # ~1.6 MB: far over the default window
    v = configure(example_vault, openai_server)
    assert openai_server.props is None                                   # /props: 404, as on hosted APIs
    openai_server.enqueue(reply.writes(reply.write("- The queue is sharded by tenant id.")))
    out = run(v, submit(v, note="queue sharded by tenant id", transcript=path, seq=len(convo) - 1))
    assert out.status == "written", out.error
    sent = openai_server.requests[0]
    assert len(sent.raw) < len(path.read_bytes()) // 3
    assert sum(estimate_tokens(m) for m in sent.body["messages"]) <= DEFAULT_CONTEXT_TOKENS
    assert convo[-2] in sent.body["messages"]                            # the cited turn kept


def test_one_message_bigger_than_the_window_is_clipped_not_sent_whole(example_vault, openai_server):
    convo, path = _long_conversation(example_vault.root, 1, 20)
    convo[-2]["content"] = "Remember: the queue is sharded by tenant id. " + "log line " * 20000   # 180 KB
    path.write_text(json.dumps(convo))
    v = configure(example_vault, openai_server, context_tokens=8192)
    openai_server.enqueue(reply.writes(reply.write("- The queue is sharded by tenant id.")))
    out = run(v, submit(v, note="queue sharded by tenant id", transcript=path, seq=len(convo) - 1))
    assert out.status == "written", out.error
    sent = openai_server.requests[0]
    assert len(sent.raw) < 8192 * 4
    (cited,) = [m for m in sent.body["messages"] if str(m.get("content", "")).startswith("Remember: the queue")]
    assert "characters left out to fit the model's context" in cited["content"]


def test_context_length_exceeded_is_sent_again_shorter_never_the_same(example_vault, openai_server):
    convo, path = _long_conversation(example_vault.root, 60, 60)
    v = configure(example_vault, openai_server)
    too_long = reply.error(400, "This model's maximum context length is 4096 tokens. However, your messages "
                                "resulted in 20000 tokens.", kind="invalid_request_error")
    too_long.body["error"]["code"] = "context_length_exceeded"
    openai_server.enqueue(too_long, too_long, reply.writes(reply.write("- The queue is sharded by tenant id.")))
    out = run(v, submit(v, note="queue sharded by tenant id", transcript=path, seq=len(convo) - 1))
    assert out.status == "written", out.error
    sizes = [len(r.raw) for r in openai_server.requests]
    assert len(sizes) == 3 and sizes[1] < sizes[0] * 0.6 and sizes[2] < sizes[1] * 0.6, sizes
    assert any("over its context" in n for n in out.notes)


def test_context_length_exceeded_every_time_gives_up_after_a_few_shorter_tries(example_vault, openai_server):
    from acpmem.write.windows import CONTEXT_SHRINKS

    convo, path = _long_conversation(example_vault.root, 60, 60)
    v = configure(example_vault, openai_server)
    openai_server.enqueue(reply.always(reply.error(400, "the request exceeds the available context size, try "
                                                        "increasing it", kind="exceed_context_size_error")))
    req = submit(v, note="queue sharded by tenant id", transcript=path, seq=len(convo) - 1)
    out = run(v, req)
    assert out.status == "retry" and out.error["reason"] == "context_length", out.error
    sizes = [len(r.raw) for r in openai_server.requests]
    assert len(sizes) == CONTEXT_SHRINKS + 1 and sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    assert requests.load_request(v.state_dir, req.id) is not None       # kept pending
