"""The write policy, the review queue, ``remember`` and the extraction budgets, with real forks against the loopback
OpenAI server, real git, real clones and the real CLI."""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from datetime import timedelta

import pytest

from helpers_proc import git_out, make_entry
from openai_server import reply
from test_fork import CHAT, configure, submit

from acpmem.upkeep import review as rv
from acpmem.vault.reader import list_entries
from acpmem.read.retrieval import recall, surface
from acpmem.vault.writer import Vault
from acpmem.write import fork, requests, worker
from acpmem.write.submit import submit as submit_commit

PY = sys.executable


def _add(v: Vault, ident: str, title: str, body: str) -> None:
    e = make_entry(ident, title, body)
    v.write_entries([e.with_changes(path=v.path_for(ident, title))], subject=f"add #{ident}", why="test")


def _trailers(v: Vault, sha: str) -> dict:
    msg = git_out(v.root, "log", "-1", "--format=%B", sha)
    return dict(line.split(": ", 1) for line in msg.splitlines() if line.startswith("Acpmem-"))


def _run(v: Vault, req) -> fork.Outcome:
    (out,) = worker.process_now(v, [req.id])
    return out


def _visible(v: Vault) -> dict:
    """What every reader shows: the listing, MEMORY.md, recall and surfacing."""
    listed = {e.id for e in list_entries(v, include_superseded=True)[0]}
    memory_md = (v.root / "MEMORY.md").read_text()
    recalled = {h.entry.id for h in recall(v, "session append lock per-session", limit=20, mark_read=False)}
    surfaced = {s.entry.id for s in surface(v, "s-visible", seed=1).entries}
    return {"list": listed, "memory_md": memory_md, "recall": recalled, "surface": surfaced}


@pytest.fixture
def reviewing(vault, openai_server):
    _add(vault, "old001", "session.append uses a boolean flag", "- A boolean `appending` flag guards session.append.")
    v = configure(vault, openai_server, policy="review")
    (v.root / "acpmem.toml").write_text((v.root / "acpmem.toml").read_text().replace("enabled = false",
                                                                                     "enabled = true"))
    v.close()
    v = Vault(v.root, clock=v.clock, rng=random.Random(3))
    yield v
    v.close()


def test_review_policy_turns_fork_writes_into_proposals_no_reader_sees(reviewing, openai_server):
    v = reviewing
    openai_server.enqueue(reply.writes(reply.write("- Use the per-session lock in session.append.",
                                                   title="session.append holds the per-session lock",
                                                   supersedes=["old001"])))
    req = submit(v, type="fact")   # a supersede is taken only of a shown entry of its type, with overlap
    out = _run(v, req)
    assert out.status == "proposed" and len(out.entries) == 1, out.error
    pid = out.entries[0]["id"]
    assert out.entries[0]["path"].startswith("proposals/")
    assert _trailers(v, out.commit)["Acpmem-Kind"] == "proposal"
    assert _trailers(v, out.commit)["Acpmem-Request"] == req.id           # exactly-once still holds
    assert git_out(v.root, "status", "--porcelain") == ""                  # committed
    seen = _visible(v)
    assert pid not in seen["list"] | seen["recall"] | seen["surface"] and pid not in seen["memory_md"]
    assert "old001" in seen["list"] and v.resolve("old001").superseded_by is None   # untouched until accepted

    (item,) = rv.queue(v)
    assert (item.id, item.kind, item.note, item.request) == (pid, "proposal", req.note, req.id)
    # the commit, naming the turn the entry rests on (and the cited turn's digest); then the citations of the
    # entry it would supersede
    first, *rest = item.entry.citation
    assert (first.session, first.seq, first.turns) == ("s1", 6, "4") and re.fullmatch(r"[0-9a-f]{32}", first.hash)
    assert rest == list(v.resolve("old001").citation)
    (sup,) = item.supersedes
    assert sup["id"] == "old001" and "-- A boolean `appending` flag" in sup["diff"] and "+- Use the per-session" \
        in sup["diff"]

    (d,) = rv.decide_ids(v, [pid[:4]], "accept")
    t = _trailers(v, d.commit)
    assert (t["Acpmem-Kind"], t["Acpmem-Decision"], t["Acpmem-Entry"]) == ("human-review", "accept", pid)
    changed = set(git_out(v.root, "show", "--no-renames", "--name-only", "--format=", d.commit).split())
    assert {item.path, d.path, "entries/old001-session-append-uses-a-boolean-flag.md"} <= changed
    assert not (v.root / item.path).exists() and d.path.startswith("entries/")
    seen = _visible(v)
    assert pid in seen["list"] and pid in seen["recall"] and pid in seen["memory_md"]
    assert v.resolve("old001").superseded_by == pid
    assert rv.queue(v) == []
    assert git_out(v.root, "status", "--porcelain") == ""


def test_reject_a_proposal_with_a_reason_and_edit_one(reviewing, openai_server):
    v = reviewing
    openai_server.enqueue(reply.writes(reply.write("- The build uses pnpm 9.", title="We pin pnpm 9"),
                                       reply.write("- Tabs, not spaces.", title="Indent with tabs")))
    out = _run(v, submit(v))
    ids = [e["id"] for e in out.entries]
    with pytest.raises(Exception, match="needs a reason"):
        rv.decide_ids(v, [ids[1]], "reject")
    (d,) = rv.decide_ids(v, [ids[1]], "reject", reason="we indent with spaces")
    t = _trailers(v, d.commit)
    assert (t["Acpmem-Decision"], t["Acpmem-Reason"]) == ("reject", "we indent with spaces")
    assert [i.id for i in rv.queue(v)] == [ids[0]]
    item = rv.queue(v)[0]
    text = (v.root / item.path).read_text().replace("- The build uses pnpm 9.", "- The build uses pnpm 9.1.")
    with pytest.raises(Exception, match="must stay"):
        rv.decide(v, item, "edit", text=text.replace(f"id: {item.id}", "id: zzzzzz"))
    with pytest.raises(Exception, match="secret"):
        rv.decide(v, item, "edit", text=text + "\naws AKIAIOSFODNN7EXAMPLE\n")
    d = rv.decide(v, item, "edit", text=text)
    assert _trailers(v, d.commit)["Acpmem-Decision"] == "edit"
    assert v.resolve(item.id).body.strip() == "- The build uses pnpm 9.1."
    # the marker records every decision of this clone, in its own file
    marker = (v.root / rv.marker_rel(v)).read_text()
    assert f"{ids[1]}\treject\t" in marker and f"{item.id}\tedit\t" in marker
    assert rv.queue(v) == []


def test_off_answers_that_writes_are_off_and_queues_nothing(vault):
    v = configure(vault, None, policy="off")
    ack = submit_commit(v, type="lesson", note="anything", importance=5, session="s1", seq=1)
    assert ack.worker == "off" and ack.request_id == "" and "writes are off" in ack.text
    assert requests.list_requests(v.state_dir) == ([], [])
    with pytest.raises(Exception, match="not one of|Unknown type|type"):   # bad arguments are still refused
        submit_commit(v, type="nonsense", note="x", importance=5, session="s1", seq=1)
    # a request queued before writes were turned off stays pending; the worker leaves it alone
    req = submit(v)
    log: list[str] = []
    assert worker.run_worker(v, idle_wait=0, log=log.append) == 0
    assert requests.load_request(v.state_dir, req.id) is not None and "writes are off" in log[0]


def test_the_acknowledgement_names_the_policy(vault, openai_server):
    v = configure(vault, openai_server, policy="review")
    ack = submit_commit(v, type="lesson", note="n", importance=5, session="s1", seq=6, transcript=CHAT)
    assert "proposal that a person reviews" in ack.text and ack.policy == "review"
    assert requests.load_request(v.state_dir, ack.request_id).ack == ack.text   # the fork closes the call with it
    v = configure(v, openai_server, policy="auto")
    ack = submit_commit(v, type="lesson", note="n", importance=5, session="s1", seq=6, transcript=CHAT)
    assert "will be distilled and written in the background" in ack.text


def test_auto_fork_writes_are_reviewed_and_a_rejection_is_a_revert_commit(vault, openai_server):
    _add(vault, "old001", "session.append uses a boolean flag", "- A boolean flag guards session.append.")
    v = configure(vault, openai_server)
    openai_server.enqueue(reply.writes(reply.write("- session.append is guarded by the per-session lock, not a flag.",
                                                   title="session.append uses the per-session lock",
                                                   supersedes=["old001"])))
    out = _run(v, submit(v, type="fact"))
    new = out.entries[0]["id"]
    assert v.resolve("old001").superseded_by == new
    (item,) = rv.queue(v)
    assert (item.id, item.kind, item.commit) == (new, "fork-write", out.commit)
    head_before = git_out(v.root, "rev-parse", "HEAD").strip()
    (d,) = rv.decide_ids(v, [new], "reject", reason="the flag is still used in v1")
    t = _trailers(v, d.commit)
    assert (t["Acpmem-Kind"], t["Acpmem-Decision"], t["Acpmem-Reviewed-Commit"]) == \
        ("human-review", "reject", out.commit)
    # history is kept: the fork's commit is an ancestor of the undo
    assert git_out(v.root, "merge-base", "--is-ancestor", out.commit, "HEAD", check=False) == ""
    assert git_out(v.root, "rev-list", "--count", f"{head_before}..HEAD").strip() == "1"
    assert new not in {e.id for e in v.load().entries}
    assert v.resolve("old001").superseded_by is None           # live again
    assert rv.queue(v) == []
    through, decided = rv.read_marker(v)
    assert through == head_before and decided == {new: "reject"}

    # a later fork write shows up; accepting it commits only this clone's marker
    openai_server.enqueue(reply.writes(reply.write("- Another lesson.", title="Another lesson")))
    out2 = _run(v, submit(v))
    (item,) = rv.queue(v)
    assert item.id == out2.entries[0]["id"]
    (d,) = rv.decide_ids(v, [item.id], "accept")
    assert git_out(v.root, "show", "--name-only", "--format=", d.commit).split() == [rv.marker_rel(v)]
    assert rv.queue(v) == []
    # an entry already reviewed can still be undone by name; one a person wrote is not a fork write
    (d,) = rv.decide_ids(v, [item.id], "reject", reason="on second thought")
    assert item.id not in {e.id for e in v.load().entries}
    with pytest.raises(Exception, match="not written by the fork"):
        rv.decide_ids(v, ["old001"], "reject", reason="x")


def test_review_over_two_clones_with_sync(tmp_path, clock, cli, openai_server):
    from acpmem.vault.create import init_vault

    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    a = init_vault(tmp_path / "a", clock=clock)
    a = configure(a, openai_server, policy="review")
    git_out(a.root, "add", "-A")
    git_out(a.root, "commit", "-qm", "review policy")
    git_out(a.root, "remote", "add", "origin", str(bare))
    openai_server.enqueue(reply.writes(reply.write("- Releases are cut on Mondays.", title="Release day"),
                                       reply.write("- Wrong fact.", title="Wrong fact")))
    out = _run(a, submit(a))
    keep, drop = (e["id"] for e in out.entries)
    assert cli("memory", "--vault", str(a.root), "sync").returncode == 0
    subprocess.run(["git", "clone", "-q", str(bare), str(tmp_path / "b")], check=True)

    r = cli("memory", "--vault", str(tmp_path / "b"), "review", "--json")
    assert r.returncode == 0, r.stderr
    queue_b = json.loads(r.stdout)
    assert queue_b["policy"] == "review" and sorted(i["id"] for i in queue_b["items"]) == sorted([keep, drop])
    assert queue_b["items"][0]["note"] == "re-entrant session.append"
    r = cli("memory", "--vault", str(tmp_path / "b"), "review", "accept", keep, "--json")
    assert r.returncode == 0, r.stderr
    r = cli("memory", "--vault", str(tmp_path / "b"), "review", "reject", drop, "--reason", "not true")
    assert r.returncode == 0 and "Rejected proposal" in r.stdout, r.stderr
    assert cli("memory", "--vault", str(tmp_path / "b"), "sync").returncode == 0

    # meanwhile clone A decides nothing but reads; after sync it sees B's decisions, without conflicts
    a.mark_read([])
    r = cli("memory", "--vault", str(a.root), "sync", "--json")
    assert r.returncode == 0, r.stderr
    a.close()
    a = Vault(a.root, clock=clock)
    assert keep in {e.id for e in a.load().entries} and drop not in {e.id for e in a.load().entries}
    assert rv.queue(a) == []
    kinds = git_out(a.root, "log", "--format=%(trailers:key=Acpmem-Decision,valueonly)").split()
    assert sorted(kinds) == ["accept", "reject"]
    assert git_out(a.root, "status", "--porcelain") == ""
    a.close()


def test_interactive_review_driven_through_stdin(reviewing, openai_server, cli, tmp_path):
    v = reviewing
    openai_server.enqueue(reply.writes(reply.write("- First.", title="First fact"),
                                       reply.write("- Second.", title="Second fact"),
                                       reply.write("- Third.", title="Third fact"),
                                       reply.write("- Fourth.", title="Fourth fact")))
    _run(v, submit(v))
    ids = [i.id for i in rv.queue(v)]                                  # the order review shows them in
    editor = tmp_path / "ed.py"
    editor.write_text("import re, sys\np = sys.argv[1]\nt = re.sub(r'(?m)^- (First|Second|Third|Fourth)[.]$', '- Corrected.', open(p).read())\n"
                      "open(p, 'w').write(t)\n")
    r = cli("memory", "--vault", str(v.root), "review", input="x\na\nr\n\nr\nduplicate\ne\ns\n",
            env={"EDITOR": f"{PY} {editor}"})
    assert r.returncode == 0, r.stderr
    assert "Answer a, e, r, s or q." in r.stdout and "A rejection needs a reason" in r.stdout
    assert "Reviewed: 1 accepted, 1 edited, 1 rejected, 1 skipped." in r.stdout
    assert "[1/4] proposal #" in r.stdout and "Asked for: re-entrant session.append" in r.stdout
    live = {e.id: e for e in v.load().entries}
    assert ids[0] in live and ids[2] in live and ids[1] not in live
    assert live[ids[2]].body.strip() == "- Corrected."
    assert [i.id for i in rv.queue(v)] == [ids[3]]                  # skipped: still waiting
    # quitting at once (end of input) decides nothing
    r = cli("memory", "--vault", str(v.root), "review", input="")
    assert r.returncode == 0 and [i.id for i in rv.queue(v)] == [ids[3]]


def test_remember_verbatim_from_text_stdin_and_editor_and_secrets_refused(vault, cli, tmp_path):
    root = str(vault.root)
    r = cli("memory", "--vault", root, "remember", "We deploy on Tuesdays.\n\n- Fridays need a second reviewer.",
            "--type", "decision", "--importance", "7", "--json")
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    e = vault.resolve(made["id"])
    assert (e.title, e.type, e.importance, e.body) == ("We deploy on Tuesdays.", "decision", 7,
                                                      "We deploy on Tuesdays.\n\n- Fridays need a second reviewer.\n")
    assert e.source == {"by": "human", "command": "remember"}
    t = _trailers(vault, made["commit"])
    assert t["Acpmem-Kind"] == "human-write" and t["Acpmem-Entry"] == made["id"]

    r = cli("memory", "--vault", root, "remember", "--type", "fact", "--importance", "3", "--title", "From stdin",
            input="piped text\n")
    assert r.returncode == 0, r.stderr
    editor = tmp_path / "ed.py"
    editor.write_text("import sys\nopen(sys.argv[1], 'w').write('written in the editor\\n')\n")
    r = cli("memory", "--vault", root, "remember", "--edit", "--type", "fact", "--importance", "3",
            env={"EDITOR": f"{PY} {editor}"})
    assert r.returncode == 0, r.stderr
    bodies = {x.body for x in vault.load().entries}
    assert {"piped text\n", "written in the editor\n"} <= bodies

    before = git_out(vault.root, "rev-parse", "HEAD")
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    r = cli("memory", "--vault", root, "remember", f"the token is {secret}", "--type", "fact", "--importance", "3")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("Error: the text contains what looks like a secret") and "nothing was written" in r.stderr
    assert git_out(vault.root, "rev-parse", "HEAD") == before and secret not in git_out(vault.root, "log", "-p")
    r = cli("memory", "--vault", root, "remember", "x", "--type", "nope", "--importance", "3")
    assert r.returncode == 1 and "unknown entry type" in r.stderr   # a type this vault lacks: content, exit 1


class _Clock:
    def __init__(self, start):
        self.now = start

    def __call__(self):
        return self.now


def test_budgets_defer_requests_with_the_reason_and_resume_when_they_free(vault, openai_server, clock):
    pinned = _Clock(clock())
    v = configure(vault, openai_server, max_requests_per_hour=1, max_tokens_per_day=5000)
    v.close()
    v = Vault(v.root, clock=pinned, rng=random.Random(5))
    openai_server.enqueue(reply.writes(reply.write("- One."), usage=reply.usage(1000, 50)))
    assert _run(v, submit(v)).status == "written"

    # over the hourly budget: the next request is not sent, stays pending with the reason and when it frees
    req = submit(v)
    out = _run(v, req)
    assert out.status == "deferred" and out.ok and len(openai_server.requests) == 1
    kept = requests.load_request(v.state_dir, req.id)
    assert "max_requests_per_hour 1" in kept.deferred and kept.attempts == 0
    assert kept.next_attempt == "2026-11-29T13:00:00Z"
    # the acknowledgement of a commit made now says it is deferred
    ack = submit_commit(v, type="lesson", note="later", importance=5, session="s1", seq=6, transcript=CHAT,
                        wait=True)
    assert "deferred" in ack.text and ack.deferred and ack.outcome.status == "deferred"
    assert len(requests.list_requests(v.state_dir)[0]) == 2
    from acpmem.upkeep.doctor import doctor
    from acpmem.upkeep.stats import stats

    s = stats(v)
    assert s["budget"]["over"] and "max_requests_per_hour" in s["budget"]["reason"]
    assert any("over the extraction budget" in f.what for f in doctor(v).findings)
    # the worker leaves it alone until then, then extracts it
    log: list[str] = []
    assert worker.run_worker(v, idle_wait=0, log=log.append) == 0
    pinned.now += timedelta(hours=1, seconds=1)
    openai_server.enqueue(reply.writes(reply.write("- Two."), usage=reply.usage(1000, 50)),
                          reply.writes(reply.write("- Three."), usage=reply.usage(3000, 50)))
    assert worker.run_worker(v, idle_wait=0, log=log.append) == 2     # one sent, the next deferred again
    assert len(openai_server.requests) == 2 and any("deferred" in line for line in log)
    pinned.now += timedelta(hours=1, seconds=1)
    assert worker.run_worker(v, idle_wait=0, log=log.append) == 1
    assert len(openai_server.requests) == 3 and requests.list_requests(v.state_dir)[0] == []
    # 1050 + 1050 + 3050 tokens in 24 hours: over the daily budget until a day after the first call
    req = submit(v)
    assert _run(v, req).status == "deferred"
    kept = requests.load_request(v.state_dir, req.id)
    assert "max_tokens_per_day" in kept.deferred and kept.next_attempt == "2026-11-30T12:00:00Z"
    v.close()


@pytest.mark.parametrize("policy", ["sometimes", 3])
def test_a_bad_policy_is_one_clear_settings_error(vault, policy):
    from acpmem.core.errors import SettingsError
    from acpmem.vault.config import load_settings

    p = vault.root / "acpmem.toml"
    p.write_text(p.read_text().replace('policy = "auto"', f"policy = {json.dumps(policy)}"))
    with pytest.raises(SettingsError, match="write.policy|must be str"):
        load_settings(vault.root)


def test_budget_state_frees_when_the_oldest_calls_leave_the_window(clock):
    from acpmem.core.settings import ExtractionSettings
    from acpmem.write.budget import state

    now = clock()
    recs = [{"at": "2026-11-28T13:00:00Z", "prompt_tokens": 600, "completion_tokens": 0},
            {"at": "2026-11-29T11:00:00Z", "prompt_tokens": 500, "completion_tokens": 0},
            {"at": "garbage", "prompt_tokens": 10 ** 9}]
    st = state(recs, now, ExtractionSettings(max_tokens_per_day=1000))
    assert st.over and st.tokens_24h == 1100 and st.frees_at == "2026-11-29T13:00:00Z"
    assert not state(recs, now, ExtractionSettings(max_tokens_per_day=2000)).over
    assert not state(recs, now, ExtractionSettings()).over
    os.environ.pop("ACPMEM_NONE", None)


# --------------------------------------------------------------------------------------------- generated inputs

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from fuzzing import SCALAR, TEXT, VALUE  # noqa: E402


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(TEXT, st.text(max_size=300)), title=st.one_of(st.none(), TEXT), importance=SCALAR,
       typ=st.one_of(st.just("fact"), TEXT))
def test_remember_takes_any_input_verbatim_or_refuses_it_cleanly(vault, text, title, importance, typ):
    from acpmem.core.errors import AcpmemError
    from acpmem.write.remember import remember

    head = git_out(vault.root, "rev-parse", "HEAD")
    try:
        entry, sha = remember(vault, text, type=typ, importance=importance, title=title)
    except AcpmemError as exc:
        assert exc.message and "\n" not in exc.message
        assert git_out(vault.root, "rev-parse", "HEAD") == head and git_out(vault.root, "status", "--porcelain") == ""
        return
    got = vault.resolve(entry.id)
    # no importance given means the documented default, 5
    assert got.body == text.strip("\n") + "\n" and got.type == typ and got.importance == (5 if importance is None else importance)
    assert git_out(vault.root, "status", "--porcelain") == ""


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.one_of(TEXT, st.tuples(TEXT, st.sampled_from(["accept", "reject", "edit", "x"]), TEXT)
                                .map("\t".join)), max_size=8))
def test_a_hand_edited_review_file_never_breaks_the_queue(tmp_path_factory, lines):
    from acpmem.vault.reader import VaultReader

    root = tmp_path_factory.mktemp("rf")
    (root / "entries").mkdir()
    (root / "reviews").mkdir()
    text = "\n".join(lines)
    try:
        (root / "reviews" / "x.tsv").write_text(text, "utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return
    v = VaultReader(root)
    decided = rv.decided_anywhere(v)
    assert all(isinstance(i, str) and i and "\t" not in i for i in decided)


@settings(max_examples=200, deadline=None)
@given(records=st.lists(st.dictionaries(st.sampled_from(["at", "prompt_tokens", "completion_tokens", "x"]), VALUE),
                        max_size=6), tok=st.integers(0, 10**6), req=st.integers(0, 100))
def test_budgets_over_any_ledger_never_fail(records, tok, req):
    from acpmem.core.settings import ExtractionSettings
    from acpmem.write.budget import state

    from conftest import PINNED

    st_ = state(records, PINNED, ExtractionSettings(max_tokens_per_day=tok, max_requests_per_hour=req))
    assert st_.over == bool(st_.reason) and (st_.frees_at is None) == (not st_.over)
    assert st_.tokens_24h >= 0 and st_.calls_1h >= 0


def test_interactive_review_of_fork_writes_shows_the_superseded_diff_and_undoes_a_rejection(vault, openai_server,
                                                                                              cli):
    _add(vault, "old001", "session.append uses a boolean flag", "- A boolean flag guards session.append.")
    v = configure(vault, openai_server)
    openai_server.enqueue(reply.writes(reply.write("- Use the per-session lock.",
                                                   title="session.append uses the per-session lock",
                                                   supersedes=["old001"])))
    out = _run(v, submit(v, type="fact"))
    new = out.entries[0]["id"]
    r = cli("memory", "--vault", str(v.root), "review", input="r\nthe flag stays in v1\n")
    assert r.returncode == 0, r.stderr
    assert f"[1/1] fork-write #{new}" in r.stdout and "Supersedes #old001 session.append uses a boolean flag:" \
        in r.stdout
    assert "-- A boolean flag guards session.append." in r.stdout and "+- Use the per-session lock." in r.stdout
    assert "Reviewed: 1 rejected." in r.stdout
    assert v.resolve("old001").superseded_by is None and new not in {e.id for e in v.load().entries}
    assert git_out(v.root, "log", "-1", "--format=%(trailers:key=Acpmem-Reason,valueonly)").strip() == \
        "the flag stays in v1"
    r = cli("memory", "--vault", str(v.root), "review")
    assert r.returncode == 0 and r.stdout.strip() == "Nothing to review."
