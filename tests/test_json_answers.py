"""``[extraction] answer = "json"``: the fork quotes the turns in one message and asks for one JSON object held to a
schema (``response_format``), against the scripted OpenAI-compatible server on 127.0.0.1: what each call is sent,
how the object is read into entries (citations, evidence, titles), an empty list, an answer cut off, a supersede
only of an entry shown, a bad setting; and a recorded answer of the real 1.5B model."""
from __future__ import annotations

import json

import pytest

from openai_server import reply
from acpmem.core.entry import evidence_of
from acpmem.core.errors import SettingsError
from acpmem.vault.config import load_settings
from acpmem.write import requests
from test_fork import configure, fork_commits, run
from test_windows import REAL, chat_file, commit_call, submit, transcript


def entries_answer(*contents: str, finish: str = "stop", text: str | None = None, **extra):
    """A completion whose text is the JSON object ``{"entries": [{"content": ...}, ...]}`` (or ``text`` as is)."""
    body = text if text is not None else json.dumps({"entries": [{"fact": c, **extra} for c in contents]})
    r = reply.text(body)
    r.body["choices"][0]["finish_reason"] = finish
    return r


def test_each_window_is_quoted_in_one_message_with_a_schema_and_each_item_is_an_entry_citing_its_turns(
        example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server, window_turns=4, answer="json")
    openai_server.enqueue(
        entries_answer("- Caroline went to the LGBTQ support group on Tuesday, 7 May 2023.",
                       "- Melanie painted a sunrise over Lake Tahoe."),
        entries_answer("- Melanie camped at Yosemite with the kids in August 2022."),
        entries_answer("- Melanie's violin recital is scheduled for 3 October."))
    before = len(fork_commits(v))
    out = run(v, submit(v, transcript(tmp_path)))

    assert out.status == "written" and len(out.entries) == 4
    assert len(fork_commits(v)) == before + 1
    bodies = openai_server.bodies
    assert len(bodies) == 3
    for i, b in enumerate(bodies, 1):
        assert "tools" not in b and "tool_choice" not in b
        (msg,) = b["messages"]
        assert msg["role"] == "user" and f"(part {i} of 3)" in msg["content"]
        assert "The conversation opens with: A chat between Caroline and Melanie on 8 May 2023." in msg["content"]
        fmt = b["response_format"]
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
        item = fmt["json_schema"]["schema"]["properties"]["entries"]["items"]
        assert item["required"] == ["fact"] and item["properties"]["fact"]["maxLength"] == 300
        assert "title" not in item["properties"]
        # as many items as the draft takes from one answer (`max_entries_per_answer`, 8 by default): a window with
        # more facts than a smaller bound was cut short (at 6, 60 of 146 LoCoMo windows filled it)
        assert fmt["json_schema"]["schema"]["properties"]["entries"]["maxItems"] == 8
    first = bodies[0]["messages"][0]["content"]
    quoted = [ln for ln in first.splitlines() if ln.startswith("[turn ")]
    assert quoted[0] == "[turn 10, user] Caroline: I went to the LGBTQ support group on Tuesday, 7 May 2023; it " \
                        "was powerful."
    assert quoted[1] == "[turn 11, assistant] Sounds good."
    assert len(quoted) == 8 and not any("memory_commit" in ln for ln in quoted)
    last = [ln for ln in bodies[2]["messages"][0]["content"].splitlines() if ln.startswith("[turn ")]
    assert last[-1] == "[turn 55, assistant] Noted."               # the commit's own call is not quoted

    entries = {e.body.strip(): e for e in v.load().entries if e.source and e.source.get("request") == out.request}
    lgbtq = entries["- Caroline went to the LGBTQ support group on Tuesday, 7 May 2023."]
    assert lgbtq.title == "Caroline went to the LGBTQ support group on Tuesday, 7 May 2023."   # from the content
    assert lgbtq.citation[0].turns == "10"
    assert evidence_of(lgbtq.extra)[0].startswith("Caroline: I went to the LGBTQ support group on Tuesday")
    tahoe = entries["- Melanie painted a sunrise over Lake Tahoe."]
    assert tahoe.citation[0].turns == "14"
    recital = entries["- Melanie's violin recital is scheduled for 3 October."]
    assert recital.citation[0].turns == "54"


def test_an_empty_entries_list_is_nothing_to_keep_and_a_reply_that_is_no_object_is_unusable(
        example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server, answer="json")
    openai_server.enqueue(entries_answer())
    out = run(v, submit(v, transcript(tmp_path)))
    assert out.status == "nothing" and not out.entries
    assert "memory_nothing: the answer's entries list was empty" in out.notes

    openai_server.enqueue(entries_answer(text="Caroline and Melanie are friends."))
    out = run(v, submit(v, transcript(tmp_path), note="facts again"))
    assert out.status == "retry" and out.error["reason"] == "no_usable_write"
    assert "Caroline and Melanie are friends." in out.error["message"]


def test_a_window_cut_at_the_token_limit_keeps_its_complete_items_and_repeats_are_read_once(
        example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server, window_turns=6, answer="json")
    cut = ('{"entries": [{"content": "- Caroline is researching adoption agencies in Portland."}, '
           '{"content": "- Caroline is researching adoption agencies in Portland."}, '
           '{"content": "- Melanie\'s daughter Lily starts pottery cla')
    openai_server.enqueue(entries_answer(text=cut, finish="length"),
                          entries_answer("- Caroline's grandmother's necklace came from Sweden."))
    out = run(v, submit(v, transcript(tmp_path)))
    assert out.status == "written" and len(out.entries) == 2
    assert any(n.startswith("window part 1 of 2: the answer was cut off at the token limit; its 1 memory_write")
               for n in out.notes), out.notes
    assert "a repeated entries item was read once" in out.notes
    bodies = {e.body.strip() for e in v.load().entries if e.source and e.source.get("request") == out.request}
    assert bodies == {"- Caroline is researching adoption agencies in Portland.",
                      "- Caroline's grandmother's necklace came from Sweden."}


def test_the_entries_already_in_memory_are_not_shown_and_a_fact_repeating_one_is_dropped(example_vault,
                                                                                          openai_server, tmp_path):
    """The 1.5B model copied the related entries it was shown into its answer instead of reading its window, so
    under ``answer = "json"`` they are not shown (and the schema has no ``supersedes``); a fact that repeats one of
    them is still dropped, with a note."""
    v = configure(example_vault, openai_server, answer="json")
    openai_server.enqueue(entries_answer("- Melanie's violin recital is scheduled for 3 October."))
    first = run(v, submit(v, transcript(tmp_path), note="Melanie's violin recital date"))
    old = first.entries[0]["id"]
    openai_server.enqueue(entries_answer("- Melanie's violin recital is scheduled for 3 October.",
                                         "- Caroline's grandmother's necklace came from Sweden."))
    out = run(v, submit(v, transcript(tmp_path), note="Melanie's violin recital date"))
    assert out.status == "written" and len(out.entries) == 1
    assert any(n.startswith(f"a write repeating #{old}") and n.endswith("was dropped") for n in out.notes)
    sent = openai_server.bodies[-1]
    assert f"#{old}" not in sent["messages"][0]["content"] and "Existing entries" not in sent["messages"][0]["content"]
    assert "supersedes" not in sent["response_format"]["json_schema"]["schema"]["properties"]["entries"]["items"][
        "properties"]
    assert len(openai_server.bodies) == 2                    # not asked again


def test_a_note_in_chinese_is_asked_in_chinese(example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server, answer="json")
    openai_server.enqueue(entries_answer("- Caroline 在 2023 年 5 月 7 日参加了 LGBTQ 支持小组。"))
    out = run(v, submit(v, transcript(tmp_path), note="卡罗琳和梅兰妮的事实：事件和日期"))
    assert out.status == "written"
    msg = openai_server.bodies[-1]["messages"][0]["content"]
    assert msg.startswith("你是记忆提炼器。") and "重点：卡罗琳和梅兰妮的事实：事件和日期" in msg
    assert msg.rstrip().endswith("每个事实一项。")


def test_an_unknown_answer_format_is_one_line_with_the_fix(example_vault):
    p = example_vault.root / "acpmem.toml"
    p.write_text(p.read_text().replace('answer = "tools"', 'answer = "xml"'))
    with pytest.raises(SettingsError) as err:
        load_settings(example_vault.root, example_vault.state_dir)
    assert "extraction.answer must be tools or json, got 'xml'" in str(err.value)
    assert 'answer = "tools"' in err.value.hint


def test_recorded_json_answers_of_the_real_model_are_written(example_vault, openai_server, tmp_path):
    """The 1.5B model's answers (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, llama-server, schema-constrained, temperature
    0) to this test's own transcript in windows of 4 turns (``tests/fixtures/real_model/README.md``): 10 of the 12
    statements become entries, each citing, and quoting, the turn that says it (the model left out the exam date
    and the Yosemite trip)."""
    from test_windows import FACTS, _recorded

    names = sorted(p.name for p in REAL.glob("json-window-*.json"))
    assert len(names) == 3
    v = configure(example_vault, openai_server, window_turns=4, answer="json")
    openai_server.enqueue(*[_recorded(n) for n in names])
    out = run(v, submit(v, transcript(tmp_path)))
    assert out.status == "written" and len(out.entries) == 10
    mine = [e for e in v.load().entries if e.source and e.source.get("request") == out.request]
    left_out = (4, 5)                                          # the exam date, the Yosemite trip
    assert sorted(int(e.citation[0].turns) for e in mine) == [10 + 4 * i for i in range(len(FACTS))
                                                              if i not in left_out]
    for e in mine:
        (quote,) = evidence_of(e.extra)
        said = FACTS[(int(e.citation[0].turns) - 10) // 4][1]
        assert quote.endswith(said)                            # the turn that says it, quoted


def test_a_note_naming_what_the_answer_left_out_is_kept_as_an_entry_of_its_own(example_vault, openai_server,
                                                                                 tmp_path):
    """A small model paraphrases away the identifiers and numbers of the session's note ("the 5K" without
    "charity 5K", no date): the note is written as one more entry, cited and quoted like a write, with a note
    naming what was missing. An answer that holds every such word, and a general note, add nothing."""
    from acpmem.write.windows import note_words

    assert note_words("Use `make replay`, errors.Is, MaxConns=20, pm_card_visa, 3 s, e.g. CI; not freezegun") == [
        "make replay", "errors.Is", "MaxConns=20", "pm_card_visa", "3"]          # an acronym alone is no such word
    assert note_words("facts about Caroline and Melanie") == [] == note_words("对话用中文；注释用英文")

    v = configure(example_vault, openai_server, answer="json")
    note = "Melanie runs the charity 5K for mental health; recital on 3 October"
    openai_server.enqueue(entries_answer("- Melanie runs a race for mental health every spring."))
    out = run(v, submit(v, transcript(tmp_path), note=note))
    assert out.status == "written" and len(out.entries) == 2
    assert "the commit's note was kept as an entry: the answer left out 5K, 3" in out.notes
    mine = {e.body.strip(): e for e in v.load().entries if e.source and e.source.get("request") == out.request}
    kept = mine[f"- {note}"]
    assert kept.title.startswith("Melanie runs the charity 5K")
    assert sorted(kept.citation[0].turns.split(",")) == ["38", "54"]       # the 5K turn and the recital turn
    assert any("charity 5K" in q for q in evidence_of(kept.extra))

    openai_server.enqueue(entries_answer("- Melanie runs a charity 5K for mental health; her recital is on "
                                         "3 October."))                # the same again: in memory already
    out = run(v, submit(v, transcript(tmp_path), note=note))
    assert out.status == "nothing" and not any("note was kept" in n for n in out.notes)

    openai_server.enqueue(entries_answer("- Bowie's biography was the last book Caroline finished (in 2023)."))
    out = run(v, submit(v, transcript(tmp_path), note="Caroline finished Bowie's biography in 2023"))
    assert out.status == "written" and len(out.entries) == 1       # the answer holds "2023": nothing added
    assert not any("note was kept" in n for n in out.notes)

    openai_server.enqueue(entries_answer())                # nothing to keep, and a note naming nothing in particular
    out = run(v, submit(v, transcript(tmp_path), note="what Melanie likes"))
    assert out.status == "nothing"


def test_the_note_is_kept_when_the_model_keeps_nothing(example_vault, openai_server, tmp_path):
    """The session's model asked for this memory: an empty answer of the fork does not lose it."""
    v = configure(example_vault, openai_server, answer="json")
    openai_server.enqueue(entries_answer())
    out = run(v, submit(v, transcript(tmp_path), note="Oscar fetches frisbees in Golden Gate Park at 9am"))
    assert out.status == "written" and len(out.entries) == 1
    (e,) = [e for e in v.load().entries if e.source and e.source.get("request") == out.request]
    assert e.body.strip() == "- Oscar fetches frisbees in Golden Gate Park at 9am" and e.citation[0].turns == "46"


def test_under_tool_answers_the_note_is_not_added(example_vault, openai_server, tmp_path):
    """``answer = "tools"`` (a model that writes its own entries, and titles them): its answer is taken as it is."""
    t = configure(example_vault, openai_server, answer="tools")
    openai_server.enqueue(reply.writes(reply.write("Melanie runs a race for mental health every spring.")))
    out = run(t, submit(t, transcript(tmp_path), note="Melanie runs the charity 5K for mental health"))
    assert out.status == "written" and len(out.entries) == 1


def test_a_note_too_long_for_an_entry_is_said_and_the_facts_are_written(example_vault, openai_server, tmp_path):
    """``[extraction] max_entry_bytes`` smaller than the note (a note may hold 500 characters): the note is not
    kept, the result says why, and the answer's facts are written — never a request failing on every attempt."""
    v = configure(example_vault, openai_server, answer="json", max_entry_bytes=256)
    note = "Melanie runs the charity 5K for mental health every spring (5K_RUN); " + "details " * 30
    openai_server.enqueue(entries_answer("- Melanie runs a race for mental health every spring."))
    out = run(v, submit(v, transcript(tmp_path), note=note.strip()))
    assert out.status == "written" and len(out.entries) == 1
    assert any(n.startswith("the commit's note could not be kept as an entry (") for n in out.notes), out.notes


def test_the_schema_asks_for_as_many_items_as_one_answer_may_write(example_vault, openai_server, tmp_path):
    """The schema's bound is the person's own cap on writes per answer, so the model is never stopped before the draft
    would stop taking its items, nor asked for items the draft would drop."""
    v = configure(example_vault, openai_server, window_turns=4, answer="json", max_entries_per_answer=3)
    openai_server.responder = lambda body: entries_answer("- Melanie painted a sunrise over Lake Tahoe.")
    out = run(v, submit(v, transcript(tmp_path)))
    assert out.status == "written"
    assert {b["response_format"]["json_schema"]["schema"]["properties"]["entries"]["maxItems"]
            for b in openai_server.bodies} == {3}


# Two windows of two turns; each statement says enough (10 words or more) to be asked again on its own.
LONG = [
    ("Jon", "Took a short trip last week to Rome to clear my mind a little before the studio opens."),
    ("Gina", "My store got featured in a fashion magazine this week and the orders doubled overnight."),
    ("Jon", "The grand opening of my dance studio is on Friday evening, with a live band from Lisbon."),
    ("Gina", "I signed the lease for a second shop downtown near the river market on Tuesday morning."),
]


def long_transcript(tmp_path, earlier_commit: bool = False):
    """The four statements, each acknowledged (seqs 10, 12, 14, 16); ``earlier_commit``: a memory_commit after the
    second one (seq 22; the statements at 10, 20, 30, 40)."""
    return chat_file(tmp_path / "long.json", "A chat between Jon and Gina on 19 June 2023.", LONG,
                     10 if earlier_commit else 2, ("Nice.",), 1 if earlier_commit else None, "facts about Jon and Gina")


def quoted_turns(body: dict) -> list[str]:
    return [ln for ln in body["messages"][0]["content"].splitlines() if ln.startswith("[turn ")]


def test_a_second_look_asks_again_the_turns_no_fact_rests_on_and_keeps_what_it_finds(
        example_vault, openai_server, tmp_path):
    """``second_look``: the first window's answer passes over its first turn (what the 1.5B model did with "Took a
    short trip last week to Rome"); that turn alone is asked again, and its fact is written citing it. The second
    window's answer rests on both its turns: nothing is asked again."""
    v = configure(example_vault, openai_server, window_turns=2, answer="json", second_look=True)
    openai_server.enqueue(
        entries_answer("- Gina's store was featured in a fashion magazine and orders doubled."),
        entries_answer("- Jon took a short trip to Rome last week to clear his mind."),
        entries_answer("- Jon's dance studio has its grand opening on Friday with a band from Lisbon.",
                       "- Gina signed the lease for a second shop downtown on Tuesday."))
    out = run(v, submit(v, long_transcript(tmp_path), note="facts about Jon and Gina"))

    assert out.status == "written" and len(out.entries) == 4
    bodies = openai_server.bodies
    assert len(bodies) == 3
    assert [len(quoted_turns(b)) for b in bodies] == [4, 1, 4]
    (again,) = quoted_turns(bodies[1])
    assert again.startswith("[turn 10, user] Jon: Took a short trip last week to Rome")
    assert "(part 1 of 2)" in bodies[1]["messages"][0]["content"]
    assert "The conversation opens with: A chat between Jon and Gina on 19 June 2023." in bodies[1]["messages"][0][
        "content"]
    rome = next(e for e in v.load().entries if "Rome" in e.body)
    assert rome.citation[0].turns == "10"
    assert evidence_of(rome.extra)[0].startswith("Jon: Took a short trip last week to Rome")
    assert "window part 1 of 2: 1 turn(s) no fact rested on were asked again: 1 more entry" in out.notes


def test_a_second_look_asks_only_about_the_turns_since_the_previous_commit(example_vault, openai_server, tmp_path):
    """The turns before the transcript's previous memory_commit were that commit's to keep: a commit whose own turns
    fit one window asks its second look about its own turns only."""
    v = configure(example_vault, openai_server, window_turns=4, answer="json", second_look=True)
    openai_server.enqueue(
        entries_answer("- Jon's dance studio has its grand opening on Friday with a band from Lisbon."),
        entries_answer("- Gina signed the lease for a second shop downtown on Tuesday."))
    out = run(v, submit(v, long_transcript(tmp_path, earlier_commit=True), note="facts about Jon and Gina"))
    assert out.status == "written" and len(out.entries) == 2, (out.error, out.notes, len(openai_server.bodies))
    first, again = openai_server.bodies
    assert [ln.split("]")[0] for ln in quoted_turns(again)] == ["[turn 40, user"]


def test_without_second_look_a_turn_passed_over_is_not_asked_again(example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server, window_turns=2, answer="json")
    assert v.settings.extraction.second_look is False   # off unless the vault turns it on
    openai_server.enqueue(
        entries_answer("- Gina's store was featured in a fashion magazine and orders doubled."),
        entries_answer("- Jon's dance studio has its grand opening on Friday with a band from Lisbon."))
    out = run(v, submit(v, long_transcript(tmp_path), note="facts about Jon and Gina"))
    assert out.status == "written" and len(out.entries) == 2
    assert len(openai_server.bodies) == 2
    assert not any("Rome" in e.body for e in v.load().entries)


def test_an_unusable_second_look_leaves_the_window_as_it_was(example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server, window_turns=2, answer="json", second_look=True)
    openai_server.enqueue(
        entries_answer("- Gina's store was featured in a fashion magazine and orders doubled."),
        entries_answer(text="Jon went to Rome."),           # no JSON object: unusable
        entries_answer("- Jon's dance studio has its grand opening on Friday with a band from Lisbon.",
                       "- Gina signed the lease for a second shop downtown on Tuesday."))
    out = run(v, submit(v, long_transcript(tmp_path), note="facts about Jon and Gina"))
    assert out.status == "written" and len(out.entries) == 3
    assert len(openai_server.bodies) == 3
    assert any(n.startswith("window part 1 of 2: the second look at 1 turn(s) gave an unusable answer")
               for n in out.notes), out.notes


def test_a_second_look_that_finds_nothing_adds_nothing(example_vault, openai_server, tmp_path):
    v = configure(example_vault, openai_server, window_turns=2, answer="json", second_look=True)
    openai_server.enqueue(
        entries_answer("- Gina's store was featured in a fashion magazine and orders doubled."),
        entries_answer(),                                    # an empty list: nothing more to keep
        entries_answer("- Jon's dance studio has its grand opening on Friday with a band from Lisbon.",
                       "- Gina signed the lease for a second shop downtown on Tuesday."))
    out = run(v, submit(v, long_transcript(tmp_path), note="facts about Jon and Gina"))
    assert out.status == "written" and len(out.entries) == 3
    assert "window part 1 of 2: 1 turn(s) no fact rested on were asked again: 0 more entries" in out.notes


ROME = [   # LoCoMo conv-30, session 15, turns 1-8: the window of the recorded answers
    ('user', "Jon: Hey Gina, hope you're doing great! Still working on my biz. Took a short trip last "
             'week to Rome to clear my mind a little.'),
    ('assistant', 'Gina: Hi! Good for you! It definitely will help you to concentrate on your biz better.'),
    ('user', 'Jon: Thanks, Gina. Still working on opening a dance studio.'),
    ('assistant', 'Gina: When are you opening the studio?'),
    ('user', "Jon: The official opening night is tomorrow. I'm working hard to make everything just "
             "right. Can't wait to see it all come together!"),
    ('assistant', "Gina: Congrats, Jon! The studio looks amazing. You've put a lot of work into this and I'm "
                  "so pumped for the launch tomorrow. Don't miss a beat!"),
    ('user', "Jon: Thanks, Gina! I'm excited! It's been a wild ride, but I'm feeling good and ready to "
             'give it my best.'),
    ('assistant', "Gina: Wow, Jon, you must be so excited! You've come so far since we last talked, and "
                  "tomorrow's gonna be a blast! All those long nights were worth it - so take some time to "
                  "savor it. Capture the joy and thrill that dance brings - it's magical!"),
]


def test_the_recorded_second_look_of_the_real_model_writes_the_turn_its_first_answer_passed_over(
        example_vault, openai_server, tmp_path):
    """The 1.5B model's two recorded answers to one LoCoMo window (``tests/fixtures/real_model/README.md``): the
    first writes four facts about the studio's opening and passes over the window's first turn, the trip to Rome;
    the turns no fact rests on are asked again, and the second answer writes the trip, cited to its turn."""
    from test_windows import _recorded

    msgs = [{"seq": 1, "role": "system", "content": "A chat between Jon and Gina on 10:04 am on 19 June, 2023."}]
    msgs += [{"seq": 15001 + i, "role": role, "content": text} for i, (role, text) in enumerate(ROME)]
    msgs.append(commit_call(15900, "call_c", "facts about Jon and Gina from this conversation"))
    path = tmp_path / "rome.json"
    path.write_text(json.dumps({"messages": msgs}))
    v = configure(example_vault, openai_server, window_turns=4, answer="json", second_look=True)
    openai_server.enqueue(_recorded("second-look-window.json"), _recorded("second-look-again.json"))
    req = requests.make_request(types=v.settings.types, type="fact", note="facts about Jon and Gina from this "
                                "conversation", importance=5, session="s15", seq=15900, transcript=str(path),
                                host_tools=None, lang=v.settings.language, created=v.now(),
                                request_id=requests.new_request_id(v.rng))
    v.ensure_state()
    requests.save_request(v.state_dir, req, new=True)
    out = run(v, req)

    assert out.status == "written"
    first, again = openai_server.bodies
    assert len(quoted_turns(first)) == 8
    assert [ln.split("]")[0] for ln in quoted_turns(again)] == ["[turn 15001, user", "[turn 15002, assistant",
                                                                  "[turn 15007, user"]
    mine = [e for e in v.load().entries if e.source and e.source.get("request") == out.request]
    rome = next(e for e in mine if "Rome" in e.title and "trip" in e.title)
    assert rome.citation[0].turns == "15001"
    assert evidence_of(rome.extra)[0].startswith("Jon: Hey Gina, hope you're doing great!")
