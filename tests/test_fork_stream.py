"""Streamed fork calls through the loopback OpenAI server and the real ``openai`` client: the chunks put together
into the answer, the timeout counting from the last chunk received (tokens still arriving are never cut off, a
silence is), a server that ignores or refuses streaming, and a stream cut before its end.

No assert depends on how fast the machine is: a held answer waits on an event the test sets once the server's own
clock says it has held it past the timeout; a silence is only ever waited out, never raced."""
from __future__ import annotations

import threading
import time

from openai_server import fake_openai, reply, sse_chunks
from test_fork import configure, run, submit
from acpmem.write import requests
from acpmem.write.llm import _add_chunk

TIMEOUT = 2.0


def _write():
    return reply.writes(reply.write("- The per-session lock guards session.append in state.ts.",
                                    title="session.append holds the per-session lock"),
                        usage=reply.usage(900, 40, cached=600))


def test_chunks_are_put_together_into_the_answer_a_plain_call_gets():
    done = _write()
    answer = {"content": [], "calls": {}, "finish": None, "usage": None, "model": None, "extra": {}}
    chunks = sse_chunks(done.body, piece=3)
    assert len(chunks) > 10                           # the arguments really come in pieces
    for c in chunks:
        _add_chunk(answer, c)
    (call,) = answer["calls"].values()
    assert call == done.body["choices"][0]["message"]["tool_calls"][0]
    assert answer["finish"] == "tool_calls" and answer["usage"]["prompt_tokens"] == 900


def test_a_local_endpoint_is_streamed_and_its_answer_written(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    openai_server.enqueue(_write())
    out = run(v, submit(v))
    assert out.status == "written", out.error
    body = openai_server.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert openai_server.chunks_sent > 10
    assert (out.usage["prompt_tokens"], out.usage["cached_tokens"]) == (900, 600)   # from the last chunk
    assert any(e.title == "session.append holds the per-session lock" for e in v.load().entries)


def test_stream_off_sends_a_plain_request(example_vault, openai_server):
    v = configure(example_vault, openai_server, stream="off")
    openai_server.enqueue(_write())
    assert run(v, submit(v)).status == "written"
    assert "stream" not in openai_server.requests[0].body and openai_server.chunks_sent == 0


def _hold_past_the_timeout(srv, gate: threading.Event) -> None:
    """Set ``gate`` once the server has held its answer for twice the timeout (its clock, not ours)."""
    deadline = time.monotonic() + 120
    while srv.held_s < 2 * TIMEOUT and time.monotonic() < deadline:
        time.sleep(0.02)
    gate.set()


def test_tokens_still_arriving_past_the_timeout_are_not_cut_off(example_vault, openai_server):
    v = configure(example_vault, openai_server, timeout_seconds=TIMEOUT)
    gate = threading.Event()
    openai_server.enqueue(reply.streamed(_write(), hold_after=3, gate=gate, tick=0.05))
    helper = threading.Thread(target=_hold_past_the_timeout, args=(openai_server, gate))
    helper.start()
    try:
        out = run(v, submit(v))
    finally:
        gate.set()
        helper.join()
    assert out.status == "written" and out.attempts == 1, out.error
    assert openai_server.held_s >= 2 * TIMEOUT            # the answer took longer than the timeout, and was read


def test_a_silence_past_the_timeout_fails_and_keeps_the_request(example_vault, openai_server):
    v = configure(example_vault, openai_server, timeout_seconds=TIMEOUT)
    gate = threading.Event()   # never set: after three chunks the server says nothing more
    openai_server.enqueue(reply.streamed(_write(), hold_after=3, gate=gate))
    req = submit(v)
    out = run(v, req)
    gate.set()
    assert out.status == "retry" and out.error["reason"] == "timeout"
    assert out.error["message"] == f"Model call sent no token for {TIMEOUT:g} s"
    assert requests.load_request(v.state_dir, req.id).attempts == 1


def test_a_plain_answer_to_a_streamed_request_is_read(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    openai_server.enqueue(reply.plain(_write()))
    assert run(v, submit(v)).status == "written"
    assert openai_server.requests[0].body["stream"] is True and openai_server.chunks_sent == 0


def test_a_server_that_refuses_streaming_is_asked_again_plainly_in_the_same_attempt(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    openai_server.enqueue(reply.error(400, "stream is not supported by this server", kind="invalid_request_error"),
                          _write())
    out = run(v, submit(v))
    assert out.status == "written" and out.usage["attempts"] == 1, out.error
    first, second = (r.body for r in openai_server.requests)
    assert first["stream"] is True and "stream" not in second and "stream_options" not in second
    assert {k: x for k, x in first.items() if not k.startswith("stream")} == second


def test_a_stream_cut_before_its_end_is_a_failure_not_nothing(example_vault, openai_server):
    v = configure(example_vault, openai_server)
    openai_server.enqueue(reply.streamed(_write(), cut=4))
    req = submit(v)
    out = run(v, req)
    assert out.status == "retry" and out.error["reason"] == "connection", out.error
    assert "before the answer finished" in out.error["message"]
    assert requests.load_request(v.state_dir, req.id) is not None


def test_an_answer_caught_in_a_loop_is_stopped_and_retried(example_vault, openai_server):
    loop = "".join(f'"- Caroline ran a charity race for mental health last Saturday at 10 AM.", '
                   f'"- Caroline is starting to think about taking care of her mind.", ' for _ in range(40))
    openai_server.enqueue(reply.text('{"name": "memory_write", "arguments": {"content": [' + loop))
    v = configure(example_vault, openai_server)
    req = submit(v)
    out = run(v, req)
    assert out.status == "retry" and out.error["reason"] == "repetition", out.error
    assert out.error["message"].startswith("The answer repeats itself: stopped after ")
    assert requests.load_request(v.state_dir, req.id).attempts == 1


def test_a_long_answer_that_does_not_repeat_is_read_whole(example_vault, openai_server):
    bullets = "\\n".join(f"- Step {i}: run shard {i} of the migration with its own lock file {i}.lock"
                          for i in range(60))
    openai_server.enqueue(reply.text('{"name": "memory_write", "arguments": {"content": "' + bullets + '"}}'))
    v = configure(example_vault, openai_server)
    out = run(v, submit(v))
    assert out.status == "written", out.error


def _release_after(srv, gate: threading.Event, chunks: int, stop: threading.Event) -> None:
    """Set ``gate`` once the server has sent ``chunks`` chunks (counted, not timed): the old code, which read an
    endless answer without end, then finishes instead of hanging the test."""
    while srv.chunks_sent < chunks and not stop.wait(0.01):
        pass
    gate.set()


def test_an_answer_that_never_ends_is_stopped_at_its_bound_and_the_queue_moves_on(example_vault, openai_server):
    from acpmem.write import worker
    from acpmem.write.llm import answer_bounds

    v = configure(example_vault, openai_server, max_tokens=16)
    gate, stop = threading.Event(), threading.Event()
    # after three chunks, empty tokens without end (a model that never stops): bounded by chunks, not by time
    openai_server.enqueue(reply.streamed(_write(), hold_after=3, gate=gate, tick=1e-6), _write())
    limit, _ = answer_bounds({"max_tokens": 16})
    helper = threading.Thread(target=_release_after, args=(openai_server, gate, limit * 20, stop))
    helper.start()
    first, second = submit(v), submit(v, note="the lock in state.ts")
    try:
        out1, out2 = worker.process_now(v, [first.id, second.id])
    finally:
        stop.set()
        gate.set()
        helper.join()
    assert out1.status == "retry" and out1.error["reason"] == "runaway", out1.error
    assert out1.error["message"] == f"The answer did not end: stopped after {limit} chunks"
    assert requests.load_request(v.state_dir, first.id).attempts == 1          # kept pending, retried later
    assert out2.status == "written", out2.error                                # the queue moved on
    assert len(openai_server.requests) == 2


def test_the_time_bound_of_one_answer_is_the_injected_clock():
    from acpmem.core.errors import ExtractionError
    from acpmem.write.llm import ModelConfig, call_chat, stream_body

    ticks = iter(range(0, 10_000_000, 100))                                     # 100 s pass between two looks
    config = ModelConfig("http://127.0.0.1:1/v1", "m", timeout=10.0, max_retries=0, stream=True, answer_seconds=250)
    with fake_openai([_write()]) as srv:
        config = config.with_changes(base_url=srv.base_url)
        try:
            call_chat(config, stream_body({"messages": [], "max_tokens": 1000}), clock=lambda: next(ticks))
            raise AssertionError("not stopped")
        except ExtractionError as exc:
            assert exc.data["reason"] == "runaway" and exc.message.endswith("stopped after 250 s"), exc.message

