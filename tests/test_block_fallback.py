"""A commit that named a compression block keeps the block's summary when the model's answer is unusable at the
request's last attempt (the host's own words, quoted, marked offline); earlier attempts are retried, a server that
does not answer is never replaced, and a commit without a block still fails as before. Real fork, real vault, the
loopback OpenAI server."""
from __future__ import annotations

import json

from openai_server import reply
from acpmem.write import requests, worker
from test_fork import configure

SUMMARY = ("Stripe retries a webhook after 10 s, so the handler only verifies the signature, stores the event id in "
           "processed_events and enqueues an RQ job.")


def transcript(tmp_path):
    msgs = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "id": "acp_summary_b1",
             "content": f"[Compressed conversation section] — webhook timeouts\n{SUMMARY}"},
            {"role": "user", "content": "Keep that design."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "memory_commit", "arguments": json.dumps(
                    {"type": "decision", "note": "webhook handler design", "importance": 8, "block": "b1"})}}]}]
    for i, m in enumerate(msgs):
        m["seq"] = i
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"messages": msgs}), "utf-8")
    return p


def request(v, path, block="b1"):
    req = requests.make_request(types=v.settings.types, type="decision", note="webhook handler design",
                                importance=8, session="s1", seq=3, transcript=path, host_tools=None,
                                lang=v.settings.language, created=v.now(), request_id=requests.new_request_id(v.rng),
                                block=block)
    v.ensure_state()
    requests.save_request(v.state_dir, req, new=True)
    return req


def test_unusable_answer_at_the_last_attempt_keeps_the_block_summary(vault, openai_server, tmp_path):
    v = configure(vault, openai_server, max_attempts=2)
    req = request(v, transcript(tmp_path))
    openai_server.enqueue(reply.text("Sure! Here is what I think about webhooks."),
                          reply.text("I cannot help with that."))
    (first,) = worker.process_now(v, [req.id], then_hand_over=False)
    assert first.status == "retry" and first.error["reason"] == "no_usable_write"   # the model gets another try
    (second,) = worker.process_now(v, [req.id], then_hand_over=False)
    assert second.status == "written" and second.extractor == "offline", second.error
    assert any("block's summary" in n for n in second.notes)
    (e,) = [x for x in v.load().entries if x.id == second.entries[0]["id"]]
    assert SUMMARY in " ".join(e.body.split()).replace("> ", "")
    assert any(c.block == "b1" for c in e.citation)
    assert requests.load_request(v.state_dir, req.id) is None     # done, not failed for good


def test_no_block_or_no_answer_is_not_replaced(vault, openai_server, tmp_path):
    v = configure(vault, openai_server, max_attempts=1)
    path = transcript(tmp_path)
    plain = request(v, path, block=None)
    openai_server.enqueue(reply.text("Sure! Here is what I think about webhooks."))
    (out,) = worker.process_now(v, [plain.id], then_hand_over=False)
    assert out.status == "failed" and not out.entries and out.error["reason"] == "no_usable_write"
    down = request(v, path)
    openai_server.enqueue(reply.server_error(500))
    (out,) = worker.process_now(v, [down.id], then_hand_over=False)
    assert out.status == "failed" and not out.entries and out.error["reason"] == "server_error"
    assert len(openai_server.requests) == 2


def test_a_commit_naming_a_block_has_no_second_look(vault, openai_server, tmp_path):
    """A block's commit is about the block's summary: the turns its answer does not rest on (here the summary's own
    message) are not asked again, whatever ``second_look`` says."""
    v = configure(vault, openai_server, window_turns=4, answer="json", second_look=True)
    req = request(v, transcript(tmp_path))
    openai_server.enqueue(reply.text(json.dumps({"entries": [{"fact": "The design stays as it is."}]})),
                          reply.text(json.dumps({"entries": []})))
    (out,) = worker.process_now(v, [req.id], then_hand_over=False)
    assert out.status == "written", out.error
    assert len(openai_server.bodies) == 1
