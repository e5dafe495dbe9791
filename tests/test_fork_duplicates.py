"""The fork's check by meaning before it writes (``[consolidate] fork_check``): a write that restates an entry it
was shown is not a second entry (dropped with a note, or superseding it when it says more), a write that
contradicts one is a proposal — through the real fork on the loopback OpenAI server, on the planted set of
``tests/fixtures/duplicates/planted.json``; and how often a restated fact became a second entry before the check."""
from __future__ import annotations

import pytest

import planted_duplicates as pd
from embeddings_server import embeddings_server
from openai_server import reply
from test_fork import configure, run, submit

from acpmem.upkeep import review as rv


def _vault(vault, srv, *, check=True, embeddings=None):
    pd.plant(vault, only=pd.firsts)
    v = configure(vault, srv, fork_check=check)
    if embeddings is not None:
        v = pd.configure(v, embeddings=embeddings, embedding_threshold=0.45)
    return v


def _live_titles(v) -> list[str]:
    return sorted(e.title for e in v.load().live())


def test_a_restated_fact_is_dropped_with_a_note(vault, openai_server):
    v = _vault(vault, openai_server)
    before = _live_titles(v)
    openai_server.enqueue(reply.writes(reply.write("- This repo uses pnpm instead of npm.",
                                                   title="This repo uses pnpm instead of npm")))
    out = run(v, submit(v, note="pnpm instead of npm", type="fact"))
    assert out.status == "nothing" and out.entries == ()
    assert any("restating" in n and "Use pnpm, never npm" in n and "was dropped" in n for n in out.notes), out.notes
    assert _live_titles(v) == before
    # the fork was shown the entry it restates: the check compares with what the model saw
    shown = openai_server.bodies[-1]["messages"][-1]["content"]
    assert "Use pnpm, never npm" in shown
    v.close()


def test_a_restatement_that_says_more_supersedes_the_entry(vault, openai_server):
    v = _vault(vault, openai_server)
    old = next(e for e in v.load().live() if e.title.startswith("Use pnpm"))
    openai_server.enqueue(reply.writes(reply.write(
        "- This repository uses pnpm, never npm; CI runs pnpm install --frozen-lockfile and a package-lock.json "
        "fails the lint job.", title="pnpm, never npm, in this repository")))
    out = run(v, submit(v, note="pnpm never npm repository", type="fact"))
    assert out.status == "written" and out.superseded == (old.id,), out.notes
    assert any("supersedes it: it says more" in n for n in out.notes)
    assert v.resolve(old.id).superseded_by == out.entries[0]["id"]
    v.close()


def test_a_contradiction_becomes_a_proposal(vault, openai_server):
    v = _vault(vault, openai_server)
    old = next(e for e in v.load().live() if e.title.startswith("Deploys happen on Fridays"))
    openai_server.enqueue(reply.writes(reply.write("- Production deploys never happen on Fridays.",
                                                   title="Never deploy on Fridays")))
    out = run(v, submit(v, note="deploys on Fridays", type="fact"))
    assert out.status == "proposed" and out.entries[0]["path"].startswith("proposals/"), out.notes
    assert any("contradicting" in n and "proposal" in n for n in out.notes)
    assert v.resolve(old.id).superseded_by is None                      # untouched until a person decides
    (item,) = [i for i in rv.queue(v) if i.kind == "proposal"]
    assert item.entry.supersedes == (old.id,)
    rv.decide(v, item, "accept")
    assert v.resolve(old.id).superseded_by == item.id
    v.close()


def test_a_new_fact_is_written(vault, openai_server):
    v = _vault(vault, openai_server)
    openai_server.enqueue(reply.writes(reply.write("- pnpm install runs with --frozen-lockfile in CI.",
                                                   title="CI installs with a frozen lockfile")))
    out = run(v, submit(v, note="pnpm in CI", type="fact"))
    assert out.status == "written" and len(out.entries) == 1, out.notes
    v.close()


def test_the_words_miss_a_paraphrase_the_vectors_catch(vault, openai_server):
    from acpmem.write.duplicates import check_write

    text = "- The database keeps all dates in UTC and the frontend turns them into the user's local time."
    with embeddings_server(dim=512, synonyms=pd.SYNONYMS) as emb:
        v = _vault(vault, openai_server, embeddings=emb)
        shown = [e for e in v.load().live() if e.title == "Timestamps are stored in UTC"]
        assert check_write(pd.configure(v, similarity="lexical"), text, shown) is None   # the words alone: new
        v = pd.configure(v, similarity="auto")
        openai_server.enqueue(reply.writes(reply.write(text, title="Dates in the database are UTC")))
        before = len(v.load().live())
        # the note shares two words with the old entry, so the fork is shown it (context.shares_words)
        out = run(v, submit(v, note="timestamps stored as UTC dates", type="fact"))
        assert len(v.load().live()) == before, out.notes         # not a second entry: it took the old one's place
        assert out.superseded == tuple(e.id for e in v.load().entries if e.title == "Timestamps are stored in UTC")
        assert any("Timestamps are stored in UTC" in n and "cosine" in n for n in out.notes), out.notes
        assert emb.texts >= 2
    v.close()


@pytest.mark.parametrize("check", [False, True])
def test_how_often_a_restated_fact_becomes_a_second_entry(vault, openai_server, check):
    v = _vault(vault, openai_server, check=check)
    got = pd.restate(v, openai_server)
    dup, contra = got["duplicate"], got["contradiction"]
    assert dup["restated"] == 9 and contra["restated"] == 6
    if not check:   # before: the fork's own rule (a near-verbatim repeat) lets almost every paraphrase through
        assert dup["second_entry"] >= 7 and contra["proposed"] == 0
    else:
        assert dup["second_entry"] <= 4 and dup["dropped"] + dup["superseded"] >= 5, got
        assert contra["proposed"] >= 3, got
    v.close()


def test_a_restatement_of_another_type_is_kept_with_a_note(vault, openai_server):
    v = _vault(vault, openai_server)
    openai_server.enqueue(reply.writes(reply.write("- This repo uses pnpm instead of npm.",
                                                   title="This repo uses pnpm instead of npm")))
    out = run(v, submit(v, note="pnpm instead of npm", type="decision"))   # the planted entry is a fact
    assert out.status == "written" and len(out.entries) == 1 and out.superseded == ()
    assert any("is kept: it is a decision, that one a fact" in n for n in out.notes), out.notes
    v.close()


FRIENDS = [   # facts about the two people of a conversation: each names both, and no two say the same thing
    ("Caroline and Melanie discussed mental health", "- Caroline and Melanie discussed mental health, with Caroline "
                                                     "thanking Melanie for her support."),
    ("Melanie and Caroline went camping in the forest", "- Melanie and Caroline went camping in the forest in July."),
    ("Caroline showed Melanie her adoption papers", "- Caroline showed Melanie the adoption agency's papers."),
    ("Melanie painted a sunset for Caroline", "- Melanie painted a sunset over the lake for Caroline."),
    ("Caroline and Melanie joined the pride parade", "- Caroline and Melanie joined the pride parade in June."),
    ("Melanie told Caroline about her kids' dinosaur trip", "- Melanie told Caroline her kids loved the dinosaur "
                                                            "exhibit."),
]


def _friends(v):
    from acpmem.core.entry import Citation, Entry

    taken, entries = set(), []
    for m, (title, body) in enumerate(FRIENDS):
        ident = v.new_id(taken)
        taken.add(ident)
        e = Entry(id=ident, title=title, type="fact", importance=5, created=f"2026-11-{10 + m:02d}T12:00:00Z",
                  body=body + "\n", citation=(Citation(f"chat-{m}", 10 * m + 1),))
        entries.append(e.with_changes(path=v.path_for(ident, title)))
    v.write_entries(entries, subject="two friends", why="test")


def test_two_facts_about_the_same_two_people_are_not_one_fact(vault, openai_server):
    # Names are key terms (no English list knows them); two entries sharing both names and nothing else were a
    # restatement by the key-term rule, and the fork dropped the new fact. A key held by most entries is what the
    # vault is about, not a sign of sameness.
    v = configure(vault, openai_server, fork_check=True)
    _friends(v)
    before = len(v.load().live())
    openai_server.enqueue(reply.writes(reply.write("- Melanie and Caroline made their own pots at the pottery "
                                                   "workshop.", title="Melanie and Caroline made pots")))
    out = run(v, submit(v, note="Caroline and Melanie pottery workshop", type="fact"))
    shown = openai_server.bodies[-1]["messages"][-1]["content"]
    assert "Caroline and Melanie discussed mental health" in shown     # the check had entries to compare with
    assert out.status == "written" and len(out.entries) == 1, out.notes
    assert not any("restating" in n for n in out.notes), out.notes
    assert len(v.load().live()) == before + 1
    from acpmem.write.duplicates import find
    assert find(v, mode="lexical").clusters == ()     # nor does `acp memory consolidate` put them together
    # a fact about them said again is still a restatement
    openai_server.enqueue(reply.writes(reply.write("- Melanie and Caroline went camping in the forest.",
                                                   title="Caroline and Melanie camped in the forest")))
    out = run(v, submit(v, note="Caroline and Melanie camping forest", type="fact"))
    assert out.status == "nothing" and any("restating" in n and "went camping" in n for n in out.notes), out.notes
    v.close()


def test_a_name_in_most_entries_does_not_make_two_entries_duplicates():
    from acpmem.search import similar

    a = similar.features("Melanie and Caroline made their own pots at the pottery workshop.")
    b = similar.features("Caroline and Melanie discussed mental health, with Caroline thanking Melanie.")
    assert a.keys & b.keys == {"carolin", "melani"}
    df = {"carolin": 9, "melani": 10, "pot": 1, "potteri": 1, "workshop": 1, "mental": 1, "health": 1}
    common = similar.TermWeights(10, df)            # the names are in nine and ten of ten entries
    assert similar.judge(a, b, common) is None
    rare = similar.TermWeights(200, df)             # … of two hundred: two tools named together, still one subject
    assert similar.judge(a, b, rare)[0] == "duplicate"
    few = similar.TermWeights(3, {"carolin": 2, "melani": 2})   # fewer holders than KEY_COMMON_MIN: still counted
    assert similar.judge(a, b, few)[0] == "duplicate"
