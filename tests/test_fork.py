"""The fork end to end against a real OpenAI-compatible server on 127.0.0.1: the request body we send, the entries and
the one commit we write, supersedes, secrets, failures and retries, exactly once, and the offline extractor."""
from __future__ import annotations

import json
import random
import subprocess

import pytest
from pathlib import Path

from openai_server import reply
from acpmem.write import context, costs, fork, requests, worker
from acpmem.vault.writer import Vault
from acpmem.write.requests import pending_dir
from helpers_person import set_person, split

FIX = Path(__file__).parent / "fixtures" / "transcripts"
CHAT = FIX / "openai_chat.json"
SEQ = FIX / "openai_seq.json"
KEY = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5oQ7s" + "T3BlbkFJ" + "u9wY1aC3eG5iK7mO9qS1uW3yA5cE7gI9"


def configure(v: Vault, srv=None, fork_check: bool = False, **extraction) -> Vault:
    """Point the vault at the fake server through acpmem.toml, and reopen it (settings are read once). The fork's
    check by meaning is off unless ``fork_check``: the answers these tests script restate the example vault's lesson
    (the transcript is about it), and what they test is how an answer is read and written; the check itself is
    tests/test_fork_duplicates.py."""
    from planted_duplicates import set_section

    set_section(v.root, "consolidate", {"fork_check": fork_check})
    p = v.root / "acpmem.toml"
    text = p.read_text()
    values = {"timeout_seconds": 10.0, "max_retries": 0, **extraction}
    if srv is not None:
        values.update(base_url=srv.base_url, model="test-model")
    mine, values = split(values)   # the endpoint and model: the person's own config; the rest: the vault's
    set_person("extraction", mine)
    for key, val in values.items():
        lines = [ln for ln in text.splitlines() if ln.startswith(f"{key} = ")]
        text = text.replace(lines[0], f"{key} = {json.dumps(val)}")
    p.write_text(text)
    v.close()
    return Vault(v.root, clock=v.clock, rng=random.Random(11))


def git_log(v: Vault, *args: str) -> str:
    return subprocess.run(["git", "-C", str(v.root), "log", *args], capture_output=True, text=True, check=True).stdout


def fork_commits(v: Vault) -> list[str]:
    return git_log(v, "--format=%H", "--grep=Acpmem-Request:").split()


def submit(v: Vault, note="re-entrant session.append", transcript=CHAT, seq=6, **kw):
    """A pending request, without starting a worker (the tests drive extraction themselves)."""
    req = requests.make_request(types=v.settings.types, type=kw.pop("type", "lesson"), note=note,
                             importance=kw.pop("importance", 7), session=kw.pop("session", "s1"), seq=seq,
                             transcript=transcript, host_tools=kw.pop("host_tools", None), lang=v.settings.language,
                             created=v.now(), request_id=requests.new_request_id(v.rng))
    v.ensure_state()
    requests.save_request(v.state_dir, req, new=True)
    return req


def run(v: Vault, req, **kw) -> fork.Outcome:
    (out,) = worker.process_now(v, [req.id], **kw)
    return out


def test_several_writes_land_in_one_commit_and_the_body_is_the_conversation_then_the_instruction(example_vault,
                                                                                                  openai_server):
    v = configure(example_vault, openai_server)
    before = len(v.load().entries)
    lesson = next(e for e in v.load().entries if e.title.startswith("Session append must be re-entrant"))
    openai_server.enqueue(reply.writes(
        reply.write("- Guard `session.append` with the per-session lock in `state.ts`.",
                    title="session.append must hold the per-session lock"),
        reply.write("- A boolean `appending` flag is not re-entrant: the post-tool hook fires mid-write.\n- Use the lock."),
        usage=reply.usage(1200, 80, cached=1000)))
    req = submit(v)
    expected = context.build_body(v, req, "test-model")                  # what --dry-run prints
    out = run(v, req)

    assert out.status == "written" and len(out.entries) == 2
    (sent,) = openai_server.requests
    body = sent.body
    conversation = json.loads(CHAT.read_text())
    assert body["model"] == "test-model"
    assert body["messages"][:7] == conversation                      # unchanged and in order
    assert body["messages"][7] == {"role": "tool", "tool_call_id": "call_2", "content": req.ack}
    system, instruction = body["messages"][-2:]
    assert len(body["messages"]) == 10 and system["role"] == "system" and instruction["role"] == "user"
    assert system["content"].startswith("You are now the memory extractor") and "memory_nothing" in system["content"]
    assert instruction["content"].startswith("Focus: re-entrant session.append\n")
    assert instruction["content"].endswith("Now call memory_write for this focus (once per fact), or memory_nothing. "
                                           "Focus: re-entrant session.append")   # the focus, last
    assert f"\n- #{lesson.id} (lesson) {lesson.title}: " in instruction["content"]  # the entry on this, plainly
    assert [t["function"]["name"] for t in body["tools"]] == ["memory_write", "memory_nothing"]
    assert body["max_tokens"] == 1024                                # [extraction] max_tokens
    assert body["stream"] is True                                    # a local endpoint is streamed
    assert {k: x for k, x in body.items() if not k.startswith("stream")} == expected   # is what is sent

    loaded = v.load()
    assert len(loaded.entries) == before + 2
    new = {e.id: e for e in loaded.entries if e.id in {x["id"] for x in out.entries}}
    titles = sorted(e.title for e in new.values())
    assert titles == ["A boolean appending flag is not re-entrant: the post-tool hook fires mid-write.",
                      "session.append must hold the per-session lock"]
    for e in new.values():
        assert (e.type, e.importance) == ("lesson", 7)
        assert [(c.session, c.seq) for c in e.citation] == [("s1", 6)]
        assert e.source == {"request": req.id, "extractor": "llm:test-model"}
    (sha,) = fork_commits(v)
    assert sha == out.commit
    msg = git_log(v, "-1", "--format=%B", sha)
    for trailer in (f"Acpmem-Request: {req.id}", "Acpmem-Session: s1", "Acpmem-Seq: 6",
                    "Acpmem-Note: re-entrant session.append", "Acpmem-Model: test-model"):
        assert trailer in msg
    changed = git_log(v, "-1", "--name-only", "--format=", sha).split()
    assert sorted(p for p in changed if p.startswith("entries/")) == sorted(e.path for e in new.values())
    assert requests.load_request(v.state_dir, req.id) is None
    (cost,) = [json.loads(x) for x in (v.state_dir / "costs.jsonl").read_text().splitlines()]
    assert (cost["prompt_tokens"], cost["cached_tokens"], cost["completion_tokens"], cost["entries"], cost["ok"]) \
        == (1200, 1000, 80, 2, True)


def test_host_tools_come_first_unchanged(vault, openai_server, tmp_path):
    v = configure(vault, openai_server)
    host = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                              "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
    (tmp_path / "tools.json").write_text(json.dumps(host))
    openai_server.enqueue(reply.writes(reply.call("read_file", {"path": "x"}), reply.write("- Use the lock.")))
    out = run(v, submit(v, host_tools=str(tmp_path / "tools.json")))
    body = openai_server.requests[0].body
    assert body["tools"][0] == host[0]
    assert [t["function"]["name"] for t in body["tools"]] == ["read_file", "memory_write", "memory_nothing"]
    assert out.status == "written" and out.ignored_calls == ("read_file",) and len(out.entries) == 1


def test_supersede_marks_the_old_entry_and_unknown_ids_are_reported(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    old = next(e for e in v.load().entries if e.title.startswith("Session append must be re-entrant"))
    openai_server.enqueue(reply.writes(reply.write("- Use the per-session lock; the flag is gone since v2.",
                                                   title="session.append holds the per-session lock since v2",
                                                   supersedes=[old.id, "zzzzzz"])))
    out = run(v, submit(v))
    assert out.status == "written" and out.superseded == (old.id,) and out.unknown_supersedes == ("zzzzzz",)
    after = {e.id: e for e in v.load().entries}
    new_id = out.entries[0]["id"]
    assert after[old.id].superseded_by == new_id
    assert after[new_id].supersedes == (old.id,)
    assert after[old.id].body == old.body
    (sha,) = fork_commits(v)
    changed = git_log(v, "-1", "--name-only", "--format=", sha).split()
    assert old.path in changed and out.entries[0]["path"] in changed     # one commit holds both
    assert old.id not in {e.id for e in v.load().live()}


def test_a_model_that_writes_nothing_is_recorded_without_a_commit(vault, openai_server):
    v = configure(vault, openai_server)
    head = git_log(v, "-1", "--format=%H")
    openai_server.enqueue(reply.text("nothing to keep"))
    req = submit(v)
    out = run(v, req)
    assert out.status == "nothing" and out.commit is None
    assert git_log(v, "-1", "--format=%H") == head
    assert requests.load_request(v.state_dir, req.id) is None
    assert requests.find_done(v.state_dir, req.id)["status"] == "nothing"
    (cost,) = [json.loads(x) for x in (v.state_dir / "costs.jsonl").read_text().splitlines()]
    assert cost["entries"] == 0 and cost["ok"] is True


def test_malformed_arguments_keep_the_request_pending_with_the_reason(vault, openai_server):
    v = configure(vault, openai_server)
    head = git_log(v, "-1", "--format=%H")
    openai_server.enqueue(reply.writes(reply.write("- fine"), reply.malformed()))
    req = submit(v)
    out = run(v, req)
    assert out.status == "retry" and out.error["reason"] == "malformed_call"
    assert "not valid JSON" in out.error["message"]
    kept = requests.load_request(v.state_dir, req.id)
    assert kept.attempts == 1 and kept.status == "pending" and kept.next_attempt > v.now()
    assert "memory_write call 2" in kept.last_error["message"]
    assert git_log(v, "-1", "--format=%H") == head                        # the good call was not written either
    openai_server.enqueue(reply.writes(reply.write("- fine", title="Fine")))
    assert run(v, req).status == "written"                                # the retry completes it


def test_rate_limited_then_success(vault, openai_server):
    v = configure(vault, openai_server, max_retries=2)
    openai_server.enqueue(reply.rate_limited(retry_after_ms=20), reply.writes(reply.write("- Use the lock.")))
    out = run(v, submit(v))
    assert out.status == "written" and out.usage["attempts"] == 2 and len(openai_server.requests) == 2


def test_server_error_every_time_is_retried_then_failed_but_kept(vault, openai_server):
    v = configure(vault, openai_server, max_retries=1)
    openai_server.enqueue(reply.always(reply.server_error(500)))
    req = submit(v)
    for attempt in range(1, requests.MAX_ATTEMPTS + 1):
        out = run(v, req)
        assert out.attempts == attempt and out.error["reason"] == "server_error"
    assert out.status == "failed"
    kept = requests.load_request(v.state_dir, req.id)
    assert kept.status == "failed" and kept.next_attempt is None and len(kept.errors) == 5
    # failed for good: the worker and --pending leave it alone, naming it retries it
    skip = fork.process_request(v, req.id)
    assert skip.status == "skipped"
    costs = [json.loads(x) for x in (v.state_dir / "costs.jsonl").read_text().splitlines()]
    assert len(costs) == requests.MAX_ATTEMPTS and not any(c["ok"] for c in costs)
    assert fork_commits(v) == []


def test_slower_than_the_timeout(vault, openai_server):
    v = configure(vault, openai_server, timeout_seconds=0.5)
    openai_server.enqueue(reply.slow(3, reply.writes(reply.write("- late"))))
    req = submit(v)
    out = run(v, req)
    assert out.status == "retry" and out.error["reason"] == "timeout"
    assert requests.load_request(v.state_dir, req.id).attempts == 1
    (row,) = costs.read(v.state_dir)                 # the ledger counts the time a timeout took, not 0.0 s
    assert row["ok"] is False and row["reason"] == "timeout" and row["latency_s"] >= 0.5


@pytest.mark.parametrize("garbage", [b"{not json", b"<html>502 Bad Gateway</html>", b"[]", b"{}"])
def test_a_garbage_reply_is_a_failed_attempt_with_a_ledger_row(vault, openai_server, garbage):
    v = configure(vault, openai_server)
    openai_server.enqueue(reply.raw(garbage))
    req = submit(v)
    out = run(v, req)
    assert out.status == "retry" and out.error["reason"] == "bad_response", out.error
    (row,) = costs.read(v.state_dir)
    assert row["ok"] is False and row["reason"] == "bad_response" and row["request"] == req.id
    assert row["latency_s"] is not None


def test_secrets_are_redacted_before_anything_touches_disk(vault, openai_server):
    v = configure(vault, openai_server)
    openai_server.enqueue(reply.writes(reply.write(f"- The CI deploy key is {KEY}; rotate it monthly.",
                                                   title="CI deploy key rotation")))
    out = run(v, submit(v))
    assert out.status == "written" and out.redacted
    e = v.resolve(out.entries[0]["id"])
    assert KEY not in e.body and "[REDACTED:" in e.body
    blobs = subprocess.run(["git", "-C", str(v.root), "cat-file", "--batch-all-objects", "--batch"],
                           capture_output=True).stdout
    assert KEY.encode() not in blobs


def test_the_note_is_redacted_in_the_pending_file(vault):
    v = configure(vault)
    req = submit(v, note=f"the key {KEY} is in vault X")
    raw = (pending_dir(v.state_dir) / f"{req.id}.json").read_text()
    assert KEY not in raw and "[REDACTED:" in raw and req.redacted


def test_exactly_once_when_killed_after_the_commit_before_removing_the_request(vault, openai_server):
    v = configure(vault, openai_server)
    req = submit(v)
    saved = (pending_dir(v.state_dir) / f"{req.id}.json").read_bytes()
    openai_server.enqueue(reply.writes(reply.write("- Use the lock.")))
    first = run(v, req)
    assert first.status == "written"
    # the state a kill -9 between the commit and the unlink leaves behind
    (pending_dir(v.state_dir) / f"{req.id}.json").write_bytes(saved)
    again = run(v, req)
    assert again.status == "already" and again.commit == first.commit
    assert fork_commits(v) == [first.commit] and len(openai_server.requests) == 1
    assert requests.load_request(v.state_dir, req.id) is None
    assert run(v, req).status == "already"                                # from the done log


def test_a_broken_transcript_keeps_the_request_pending(vault, tmp_path):
    v = configure(vault, extractor="offline")
    bad = tmp_path / "half.jsonl"
    bad.write_text('{"role": "user", "content": "hi"}\n{"role": "assis')
    req = submit(v, transcript=bad, seq=1)
    out = run(v, req)
    assert out.status == "retry" and out.error["kind"] == "TranscriptError" and "half.jsonl:2" in out.error["message"]
    missing = submit(v, transcript=tmp_path / "nope.json", seq=1)
    assert "no such transcript" in run(v, missing).error["message"]
    assert {r.id for r in requests.list_requests(v.state_dir)[0]} == {req.id, missing.id}


def test_llm_without_an_endpoint_fails_and_stays_pending(vault):
    v = configure(vault, extractor="llm")
    req = submit(v)
    out = run(v, req)
    assert out.status == "retry" and out.error["reason"] == "no_endpoint"
    assert requests.load_request(v.state_dir, req.id) is not None


def test_offline_extractor_cites_exactly_the_seqs_it_quotes(vault):
    v = configure(vault)                      # no endpoint: auto means offline
    req = submit(v, note="never commit the index", transcript=SEQ, seq=15, type="decision")
    out = run(v, req)
    assert out.status == "written" and out.extractor == "offline"
    e = v.resolve(out.entries[0]["id"])
    seqs = [c.seq for c in e.citation]
    assert seqs and set(seqs) <= {10, 11, 14, 15}
    for s in seqs:
        assert f"- seq {s} (" in e.body
    assert e.body.startswith("Offline extract (no model was used)")
    assert "We decided: never commit the index." in e.body
    assert e.source == {"request": req.id, "extractor": "offline"}
    assert "Acpmem-Model: offline" in git_log(v, "-1", "--format=%B")


def test_offline_extractor_is_deterministic_and_bounded():
    from acpmem.write.offline import extract_offline
    from acpmem.hosts.transcripts import read_transcript

    msgs = [{"role": "user", "content": f"message {i} about the pnpm lockfile " + "filler " * 400} for i in range(30)]
    t = read_transcript(json.dumps(msgs))
    a = extract_offline(t, "pnpm lockfile", max_bytes=2000)
    b = extract_offline(t, "pnpm lockfile", max_bytes=2000)
    assert a == b and len(a.body.encode()) <= 2000 and 1 <= len(a.seqs) <= 3
    assert list(a.seqs) == sorted(a.seqs)


def test_a_model_quoting_a_merge_conflict_writes_a_valid_entry(vault, openai_server):
    """Conflict marker lines make a file invalid (an unresolved merge); a memory that quotes one keeps it indented."""
    v = configure(vault, openai_server)
    quote = "- A sync stopped with:\n\n```\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> origin/main\n```\n"
    openai_server.enqueue(reply.writes(reply.write(quote, title="What a sync conflict looks like")))
    out = run(v, submit(v))
    assert out.status == "written", out
    (e,) = [x for x in v.load().entries if x.id == out.entries[0]["id"]]
    assert " <<<<<<< HEAD\n" in e.body and " >>>>>>> origin/main\n" in e.body and "\n=======\n" in e.body


def test_identical_commits_with_the_offline_extractor_make_one_entry(vault):
    """Twenty identical commits made twenty identical entries: the extractor is deterministic, so a repeat of a live
    offline extract is not written again (the outcome says which entry it repeats)."""
    v = configure(vault, extractor="offline")
    before = len(v.load().live())
    outs = [run(v, submit(v, note="the deploy script is make ship, not make deploy")) for _ in range(4)]
    assert [o.status for o in outs] == ["written", "nothing", "nothing", "nothing"], [o.error for o in outs]
    first = outs[0].entries[0]["id"]
    assert all(f"the same offline extract as #{first}" in "; ".join(o.notes) for o in outs[1:])
    assert len(v.load().live()) == before + 1
    other = run(v, submit(v, note="the queue is drained by one worker per vault"))
    assert other.status == "written"                                     # a different note still writes


def test_the_fork_is_instructed_in_the_language_of_the_note(example_vault):
    """A note written in Chinese gets the Chinese instructions in an English vault (a small model told in English
    to distil a Chinese note answered nothing); an English note, the vault's."""
    zh = context.build_body(example_vault, submit(example_vault, note="导出 PDF 时中文字体缺失：安装 fonts-noto-cjk"),
                            "m")
    en = context.build_body(example_vault, submit(example_vault, note="re-entrant session.append"), "m")
    assert zh["messages"][-1]["content"].startswith("重点：导出 PDF")
    assert en["messages"][-1]["content"].startswith("Focus: re-entrant session.append")
    assert context.note_language("部署 staging", "en") == "zh"
    assert context.note_language("deploy to staging", "zh") == "en"
    assert context.note_language("v2 → 3", "zh") == "zh"
