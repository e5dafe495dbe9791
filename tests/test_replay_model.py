"""``bench/replay_model.py``: a recorded model served again on 127.0.0.1. The real 1.5B model's recorded answers to
a windowed json fork (``tests/fixtures/real_model/json-window-*.json``) are replayed to the real fork, through the
real ``openai`` client, streamed and not: the same entries are written as from the model itself; a request the
record does not hold is refused with its reason, never answered with another's answer."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_fork import configure, run
from test_windows import REAL, submit, transcript

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench_module(name: str):
    """A bench script as a module, loaded from its file (bench/ is not put on sys.path: its ``team_model.py``
    would shadow the tests' own)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


Replay = _bench_module("replay_model").Replay


def record(tmp_path: Path) -> Path:
    folder = tmp_path / "record"
    folder.mkdir()
    for i, name in enumerate(sorted(p.name for p in REAL.glob("json-window-*.json")), 1):
        shutil.copy(REAL / name, folder / f"answer-{i:03d}.json")
    return folder


@pytest.mark.parametrize("stream", ["on", "off"])
def test_the_recorded_answers_are_written_again_by_the_fork(stream, example_vault, tmp_path):
    replay = Replay(record(tmp_path)).start()
    try:
        v = configure(example_vault, None, window_turns=4, answer="json", stream=stream,
                      base_url=replay.base_url, model="qwen2.5-coder-1.5b-instruct")
        out = run(v, submit(v, transcript(tmp_path)))
    finally:
        replay.close()
    assert out.status == "written" and len(out.entries) == 10   # as tests/test_json_answers.py has it from the model
    assert sum(replay.served.values()) == 3 and replay.missed == 0


def test_a_request_not_in_the_record_is_refused_with_its_reason(tmp_path):
    import openai

    replay = Replay(record(tmp_path)).start()
    try:
        client = openai.OpenAI(base_url=replay.base_url, api_key="local", max_retries=0)
        assert [m.id for m in client.models.list()] == ["qwen2.5-coder-1.5b-instruct"]
        with pytest.raises(openai.NotFoundError) as err:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a prompt never asked"}])
        assert "not in the record" in str(err.value)
    finally:
        replay.close()
    assert replay.missed == 1


def test_a_request_not_in_the_record_is_asked_upstream_and_recorded(openai_server, tmp_path):
    """``--upstream``: what the record lacks is asked of the real endpoint once, written to the record as a
    ``--record`` run writes it, and served from the record after that (streamed too)."""
    import openai

    from openai_server import reply

    folder = record(tmp_path)
    openai_server.enqueue(reply.text('{"entries": []}'))
    replay = Replay(folder, upstream=openai_server.base_url).start()
    try:
        client = openai.OpenAI(base_url=replay.base_url, api_key="local", max_retries=0)
        ask = dict(model="m", messages=[{"role": "user", "content": "a new prompt"}])
        first = client.chat.completions.create(**ask)
        again = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**ask, stream=True)
                        if c.choices)
    finally:
        replay.close()
    assert first.choices[0].message.content == again == '{"entries": []}'
    assert len(openai_server.requests) == 1 and "stream" not in openai_server.requests[0].body
    assert replay.asked == 1 and replay.missed == 0
    added = sorted(folder.glob("answer-*.json"))[-1]
    assert added.name == "answer-004.json" and Replay(folder).answers   # the record reads back with it


def test_a_folder_without_a_record_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(BENCH / "replay_model.py"), str(tmp_path), "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("Error: no answer-*.json in") and r.stderr.count("\n") == 1


@pytest.mark.parametrize("args, said", [(("--port", "99999"), "invalid port (0-65535) value: '99999'"),
                                        (("--upstream", "localhost:8088"), "invalid http(s) URL value")])
def test_a_port_out_of_range_or_an_upstream_without_a_scheme_is_refused_at_once(args, said, tmp_path):
    r = subprocess.run([sys.executable, str(BENCH / "replay_model.py"), str(record(tmp_path)), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_answers_asked_upstream_never_overwrite_a_record_with_gaps(openai_server, tmp_path):
    """A record with answers removed by hand (answer-001, answer-003): each answer asked upstream is written after
    the highest number. Named by the count of files, the first new one overwrote answer-003, and every later one the
    same file — a run's new answers were lost but the last."""
    import openai

    from openai_server import reply

    folder = record(tmp_path)
    (folder / "answer-002.json").unlink()
    kept = {p.name: p.read_text() for p in folder.glob("answer-*.json")}
    openai_server.enqueue(reply.text('{"entries": []}'), reply.text('{"entries": [{"fact": "b"}]}'))
    replay = Replay(folder, upstream=openai_server.base_url).start()
    try:
        client = openai.OpenAI(base_url=replay.base_url, api_key="local", max_retries=0)
        for prompt in ("a new prompt", "another new prompt"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
    finally:
        replay.close()
    assert {p.name: p.read_text() for p in folder.glob("answer-*.json") if p.name in kept} == kept
    assert sorted(p.name for p in folder.glob("answer-*.json")) == ["answer-001.json", "answer-003.json",
                                                                    "answer-004.json", "answer-005.json"]
    assert len(Replay(folder).answers) == 4
