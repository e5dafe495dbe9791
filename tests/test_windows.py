"""The fork asked window by window (``[extraction] window_turns``) and an entry's evidence (the words of the turns it
cites, ``evidence``), end to end against the scripted OpenAI-compatible server on 127.0.0.1: what each call is sent,
the one commit, citations inside each window, a window whose answer is unusable, an endpoint that fails, recall
through the evidence."""
from __future__ import annotations

import json
import random

from openai_server import reply
from acpmem.core.entry import evidence_of
from acpmem.read.retrieval import recall, recall_text
from acpmem.write import requests
from test_fork import configure, fork_commits, run

# LoCoMo-like: one speaker's facts per turn, each with words no other turn has
FACTS = [
    ("Caroline", "I went to the LGBTQ support group on Tuesday, 7 May 2023; it was powerful."),
    ("Melanie", "I painted a sunrise over Lake Tahoe last weekend."),
    ("Caroline", "I am researching adoption agencies in Portland."),
    ("Melanie", "My daughter Lily starts pottery classes in June."),
    ("Caroline", "The counseling certificate exam is on 20 July."),
    ("Melanie", "We camped at Yosemite with the kids in August 2022."),
    ("Caroline", "My grandmother's necklace came from Sweden."),
    ("Melanie", "I run a charity 5K for mental health every spring."),
    ("Caroline", "I joined a transgender mentorship program at the library."),
    ("Melanie", "Our dog Oscar learned to fetch frisbees in Golden Gate Park."),
    ("Caroline", "Bowie's biography was the last book I finished."),
    ("Melanie", "The violin recital is scheduled for 3 October."),
]


def commit_call(seq: int, call_id: str, note: str) -> dict:
    """The host model's ``memory_commit`` call of a fact, as a transcript message."""
    return {"seq": seq, "role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "memory_commit", "arguments": json.dumps(
            {"type": "fact", "note": note, "importance": 5})}}]}


def chat_file(path, opening: str, said: list[tuple[str, str]], step: int, acks: tuple[str, ...],
              early_after: int | None, note: str):
    """A chat as a transcript file: the opening system message (seq 1), each statement (seq 10, then every ``step``)
    and its acknowledgement (the next seq; ``acks`` in turn), a memory_commit after statement ``early_after`` (at
    the acknowledgement's seq + 1, its result after it), and the commit's own call at seq 900."""
    msgs = [{"seq": 1, "role": "system", "content": opening}]
    for i, (who, text) in enumerate(said):
        msgs.append({"seq": 10 + step * i, "role": "user", "content": f"{who}: {text}"})
        msgs.append({"seq": 11 + step * i, "role": "assistant", "content": acks[i % len(acks)]})
        if early_after == i:   # its turns were asked about then
            msgs.append(commit_call(12 + step * i, "call_early", "facts so far"))
            msgs.append({"seq": 13 + step * i, "role": "tool", "tool_call_id": "call_early", "content": "queued"})
    msgs.append(commit_call(900, "call_c", note))
    path.write_text(json.dumps({"messages": msgs}))
    return path


def transcript(tmp_path, earlier_commit: bool = False):
    """A system message, 12 turns (a statement and an acknowledgement each), the commit's own call at seq 900;
    ``earlier_commit``: a commit after the sixth turn (seq 32)."""
    return chat_file(tmp_path / "chat.json", "A chat between Caroline and Melanie on 8 May 2023.", FACTS, 4,
                     ("Sounds good.", "Noted."), 5 if earlier_commit else None, "facts about Caroline and Melanie")


def submit(v, path, note="facts about Caroline and Melanie"):
    req = requests.make_request(types=v.settings.types, type="fact", note=note, importance=5, session="s1", seq=900,
                                transcript=str(path), host_tools=None, lang=v.settings.language, created=v.now(),
                                request_id=requests.new_request_id(v.rng))
    v.ensure_state()
    requests.save_request(v.state_dir, req, new=True)
    return req


def sent_turns(body: dict) -> list[str]:
    """The conversation's statements a call was sent (its user messages, the closing instruction left out)."""
    return [m["content"] for m in body["messages"] if m["role"] == "user" and ": " in (m["content"] or "")
            and m["content"].split(":")[0] in ("Caroline", "Melanie")]


def test_a_long_conversation_is_asked_in_windows_and_each_entry_cites_and_quotes_turns_of_its_own(
        example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server, window_turns=4)
    openai_server.enqueue(
        reply.writes(reply.write("Caroline went to an LGBTQ support group on 7 May 2023.")),
        reply.writes(reply.write("Melanie camped at Yosemite with the kids in August 2022."),
                     reply.write("Caroline's counseling certificate exam is on 20 July.")),
        reply.writes(reply.write("Melanie's violin recital is on 3 October.")))
    before = len(fork_commits(v))
    out = run(v, submit(v, transcript(tmp_path)))

    assert out.status == "written" and len(out.entries) == 4
    assert len(fork_commits(v)) == before + 1                       # one commit for the whole request
    bodies = openai_server.bodies
    assert len(bodies) == 3
    # each call is sent the system message and its own four turns, and told which part it reads
    assert [len(sent_turns(b)) for b in bodies] == [4, 4, 4]
    assert sent_turns(bodies[0])[0].startswith("Caroline: I went to the LGBTQ")
    assert sent_turns(bodies[2])[-1].startswith("Melanie: The violin recital")
    for i, b in enumerate(bodies, 1):
        assert b["messages"][0]["content"].startswith("A chat between Caroline and Melanie")
        assert f"part {i} of 3" in b["messages"][-1]["content"]
    assert any(m.get("tool_calls") for m in bodies[2]["messages"])   # the commit's own call ends the last window
    assert "asked in 3 windows of at most 4 turns" in out.notes

    entries = {e.title: e for e in v.load().entries if e.source and e.source.get("request") == out.request}
    lgbtq = next(e for t, e in entries.items() if "LGBTQ" in t)
    (cite,) = lgbtq.citation
    assert cite.turns == "10"                                        # the turn it rests on, in window 1
    assert evidence_of(lgbtq.extra) == ("Caroline: I went to the LGBTQ support group on Tuesday, 7 May 2023; it "
                                        "was powerful.",)
    recital = next(e for t, e in entries.items() if "recital" in t)
    assert recital.citation[0].turns == "54" and "3 October" in evidence_of(recital.extra)[0]
    yosemite = next(e for t, e in entries.items() if "Yosemite" in t)
    assert yosemite.citation[0].turns == "30"


def test_recall_finds_a_terse_entry_by_the_words_of_the_turn_it_cites_and_shows_them(example_vault, openai_server,
                                                                                      tmp_path):
    v = configure(example_vault, openai_server)
    # a terse entry: "powerful", "Tuesday" and "support group" are only in the turn it cites
    openai_server.enqueue(reply.writes(reply.write("Caroline went to an LGBTQ meeting on 7 May 2023.")))
    out = run(v, submit(v, transcript(tmp_path)))
    assert out.status == "written"
    (e,) = [e for e in v.load().entries if e.source and e.source.get("request") == out.request]
    assert "Tuesday" in evidence_of(e.extra)[0] and "Tuesday" not in e.body

    hits = recall(v, "what happened on Tuesday at the support group", limit=3, session="q1")
    assert hits and hits[0].entry.id == e.id
    text = recall_text(v, hits[:1])
    assert "Said in the turns it cites:" in text and "> Caroline: I went to the LGBTQ support group on Tuesday" in text

    # with evidence off the same answer keeps no quotes, and the turn's own words no longer find it
    w = configure(v, openai_server, evidence=False)
    w._rng = random.Random(12)   # not the request ids the first vault drew
    openai_server.enqueue(reply.writes(reply.write("Melanie painted a sunrise at a lake.")))
    out2 = run(w, submit(w, transcript(tmp_path), note="Melanie's painting"))
    (e2,) = [e for e in w.load().entries if e.source and e.source.get("request") == out2.request]
    assert evidence_of(e2.extra) == ()
    assert all(h.entry.id != e2.id for h in recall(w, "Tahoe weekend", limit=5, session="q2"))


def test_a_window_with_an_unusable_answer_is_left_out_with_a_note_and_the_others_are_written(
        example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server, window_turns=4)
    openai_server.enqueue(
        reply.writes(reply.write("Caroline went to an LGBTQ support group on 7 May 2023.")),
        reply.text("I think these are nice people."),                      # no write, not "nothing to keep"
        reply.writes(reply.write("Melanie's violin recital is on 3 October.")))
    out = run(v, submit(v, transcript(tmp_path)))
    assert out.status == "written" and len(out.entries) == 2
    assert any("window part 2 of 3 gave an unusable answer (no_usable_write)" in n for n in out.notes)


def test_every_window_unusable_fails_the_request_as_one_call_would_and_an_outage_retries_it_whole(
        example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server, window_turns=6)
    openai_server.enqueue(reply.text("hmm"), reply.text("hmm"))
    out = run(v, submit(v, transcript(tmp_path)))
    assert out.status == "retry" and out.error["reason"] == "no_usable_write"
    assert len(openai_server.bodies) == 2

    openai_server.enqueue(reply.writes(reply.write("Caroline went to an LGBTQ support group on 7 May 2023.")),
                          reply.error(500, "the server fell over"))
    out = run(v, submit(v, transcript(tmp_path), note="another request"))
    assert out.status == "retry" and out.entries == () and out.error["reason"] != "no_usable_write"
    assert len(openai_server.bodies) == 4
    assert all(not (e.source and e.source.get("request") == out.request) for e in v.load().entries)


def test_windows_start_after_the_previous_commit_and_a_short_span_is_one_call(example_vault, openai_server,
                                                                               tmp_path):
    v = configure(example_vault, openai_server, window_turns=4)
    openai_server.enqueue(reply.writes(reply.write("Melanie's dog Oscar fetches frisbees in Golden Gate Park.")),
                          reply.writes(reply.write("Melanie's violin recital is on 3 October.")))
    out = run(v, submit(v, transcript(tmp_path, earlier_commit=True)))
    assert out.status == "written"
    bodies = openai_server.bodies
    assert len(bodies) == 2                                            # turns 7-12 only: two windows, 4 + 2
    assert sent_turns(bodies[0])[0].startswith("Caroline: My grandmother's necklace")
    assert [len(sent_turns(b)) for b in bodies] == [4, 2]

    # twelve turns under a window of 12: one call, the body exactly as without windows
    w = configure(v, openai_server, window_turns=12)
    w._rng = random.Random(12)
    openai_server.enqueue(reply.writes(reply.write("Caroline's certificate exam is on 20 July.")))
    out = run(w, submit(w, transcript(tmp_path), note="exam"))
    assert out.status == "written" and len(openai_server.bodies) == 3
    last = openai_server.bodies[-1]
    assert len(sent_turns(last)) == 12 and "part 1 of" not in last["messages"][-1]["content"]


def test_a_conversation_the_assistant_opens_keeps_its_first_words(example_vault, openai_server, tmp_path):
    """A conversation whose first message is the assistant's (LoCoMo's sessions that the second speaker opens; a host
    whose agent greets first): that message is the first window's, not skipped as a tool's result. After an earlier
    commit only that commit's tool result is skipped, and what the assistant said after it is asked."""
    p = transcript(tmp_path)
    msgs = json.loads(p.read_text())["messages"]
    msgs.insert(1, {"seq": 2, "role": "assistant", "content": "Melanie: We celebrated my daughter's birthday with a "
                                                                "Matt Patterson concert last night."})
    p.write_text(json.dumps({"messages": msgs}))
    v = configure(example_vault, openai_server, window_turns=4)
    openai_server.enqueue(*[reply.writes(reply.write(f"fact {i}.")) for i in range(4)])
    out = run(v, submit(v, p))
    assert out.status == "written"
    first = openai_server.bodies[0]
    assert any("Matt Patterson" in (m.get("content") or "") for m in first["messages"])
    assert len(openai_server.bodies) == 4                 # 13 turns (the opening one alone is a turn): 4 windows

    p = transcript(tmp_path, earlier_commit=True)
    msgs = [dict(m, seq=m["seq"] * 10 if m["seq"] < 900 else m["seq"]) for m in json.loads(p.read_text())["messages"]]
    at = next(i for i, m in enumerate(msgs) if m.get("tool_call_id") == "call_early") + 1
    msgs.insert(at, {"seq": 335, "role": "assistant", "content": "Kept. Melanie's necklace story is next."})
    p.write_text(json.dumps({"messages": msgs}))
    w = configure(v, openai_server, window_turns=4)
    w._rng = random.Random(13)
    openai_server.enqueue(*[reply.writes(reply.write(f"later fact {i}.")) for i in range(2)])
    out = run(w, submit(w, p, note="later facts"))
    assert out.status == "written", (out.error, len(openai_server.bodies))
    later = openai_server.bodies[4:]
    said = [m.get("content") or "" for m in later[0]["messages"]]
    assert any("necklace story is next" in c for c in said) and not any(c == "queued" for c in said)


def test_max_windows_keeps_the_most_recent_and_says_what_was_left_out(example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server, window_turns=3, max_windows=2)
    openai_server.enqueue(reply.writes(reply.write("Melanie's dog Oscar fetches frisbees in Golden Gate Park.")),
                          reply.writes(reply.write("Melanie's violin recital is on 3 October.")))
    out = run(v, submit(v, transcript(tmp_path)))
    assert out.status == "written" and len(openai_server.bodies) == 2
    assert sent_turns(openai_server.bodies[0])[0].startswith("Caroline: My grandmother's necklace")
    assert any(n.startswith("6 turn(s) before the last 2 windows of 3 turns were not asked") for n in out.notes)


def test_an_evidence_field_a_person_breaks_is_refused_with_the_fix(example_vault):
    from acpmem.core.entryfile import parse_entry
    from acpmem.core.errors import EntryInvalid
    import pytest

    e = example_vault.load().entries[0]
    text = (example_vault.root / e.path).read_text()
    bad = text.replace("\ntier: ", "\nevidence: {a: 1}\ntier: ", 1)
    with pytest.raises(EntryInvalid) as exc:
        parse_entry(bad, e.path)
    assert "evidence" in str(exc.value) and "at most 8 quotes" in str(exc.value)
    good = parse_entry(text.replace("\ntier: ", "\nevidence: one quote, written by hand\ntier: ", 1), e.path)
    assert evidence_of(good.extra) == ("one quote, written by hand",)


REAL = __import__("pathlib").Path(__file__).parent / "fixtures" / "real_model"


def _recorded(name: str):
    from openai_server import Reply

    return Reply(body=json.loads((REAL / name).read_text("utf-8"))["response"])


def test_recorded_calls_named_after_the_speakers_with_memory_writes_arguments_are_read_as_writes(
        example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server, window_turns=8, stream="on")
    openai_server.enqueue(_recorded("window-calls-named-after-speakers.json"),
                          reply.writes(reply.write("Melanie's violin recital is on 3 October.")))
    out = run(v, submit(v, transcript(tmp_path)))
    assert out.status == "written" and len(out.entries) == 3
    assert "a call to 'Caroline' written in the text with memory_write's arguments was read as memory_write" \
        in out.notes
    titles = [e["title"] for e in out.entries]
    assert titles[:2] == ["Caroline's activities", "Melanie's activities"]


def test_a_recorded_loop_inside_one_calls_content_list_keeps_its_lines_once(example_vault, openai_server,
                                                                            tmp_path):
    v = configure(example_vault, openai_server, window_turns=8, stream="on")
    openai_server.enqueue(reply.writes(reply.write("Caroline went to an LGBTQ support group on 7 May 2023.")),
                          _recorded("window-loop-inside-a-content-list.json"))
    out = run(v, submit(v, transcript(tmp_path)))
    assert out.status == "written" and len(out.entries) == 2
    assert any(n.startswith("window part 2 of 2: the answer was stopped as a repetition loop; its 1 memory_write")
               for n in out.notes), out.notes
    (e,) = [e for e in v.load().entries if e.id == out.entries[1]["id"]]
    lines = [ln for ln in e.body.splitlines() if ln.strip()]
    assert len(lines) == len(set(lines)) == 3 and "charity race" in lines[0]


def test_a_loop_is_not_read_up_to_its_cut_when_windows_are_off(example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server, stream="on")
    openai_server.enqueue(_recorded("window-loop-inside-a-content-list.json"))
    out = run(v, submit(v, transcript(tmp_path)))
    assert out.status == "retry" and out.error["reason"] == "repetition"


def test_a_cut_json_value_is_closed_after_its_last_complete_item():
    from acpmem.write.windows import closed_json

    assert json.loads(closed_json('{"a": ["x, y", "z"], "b": {"c": "d", "e": "f\\"g')) == \
        {"a": ["x, y", "z"], "b": {"c": "d"}}
    assert json.loads(closed_json('[{"n": 1}, {"n": 2}, {"n"')) == [{"n": 1}, {"n": 2}]
    assert closed_json('{"content": "no comma at all') is None


def test_a_fact_cites_the_turn_with_its_rarer_words_not_the_one_naming_the_same_people():
    """Counted plainly, a fact naming both speakers shares as many words with a turn that names them as with the
    turn that says it; weighed by how few turns hold each word, the turn with the fact's own words is cited first."""
    from acpmem.search.overlap import terms
    from acpmem.write.draft import cited_turns

    said = ["Caroline: Melanie, how are the kids doing?",
            "Melanie: We painted together last weekend, a lake at sunrise.",
            "Caroline: Melanie, the kids are lovely."]
    turns = [(10 + i, terms(s)) for i, s in enumerate(said)]
    fact = "Melanie and Caroline painted together with the kids."
    assert cited_turns(fact, turns, limit=1) == (11,)
    assert cited_turns(fact, turns) == (11, 12)          # then the turn that adds the kids
    assert cited_turns("Oscar the dog", turns) == ()     # nothing shared: no citation
