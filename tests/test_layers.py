"""Two layers: the project vault and the user vault read together (CLI, MCP, Python API), writes routed by type and
by the fork's choice, a broken user vault, two projects sharing one user vault without a leak, and the user vault
synced between two clones. Every user vault here is a temporary folder named by $ACPMEM_USER_VAULT (or a temporary
HOME): the real ~/.acp-memory is never touched."""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import fresh_vault
from helpers_proc import git_out, make_entry, run_readme_sh, warnings_said
from openai_server import reply
from acpmem.core.layout import USER_ID_PREFIX
from acpmem.infra.localstate import queue_home
from acpmem.vault.create import init_vault
from acpmem.read.layers import list_layered, recall_layered, resolve_layer
from acpmem.read.resident import resident_index
from acpmem.read.retrieval import surface
from acpmem.vault.writer import Vault
from acpmem.write import requests, worker
from acpmem.write.context import related_entries
from acpmem.write.requests import pending_dir
from helpers_person import set_person

FIX = Path(__file__).parent / "fixtures" / "transcripts"
KEY = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5oQ7s" + "T3BlbkFJ" + "u9wY1aC3eG5iK7mO9qS1uW3yA5cE7gI9"


def put(v: Vault, ident: str, title: str, body: str, *, typ: str = "fact", importance: int = 5) -> str:
    e = make_entry(ident, title, body, typ=typ, importance=importance)
    return v.write_entries([e.with_changes(path=v.path_for(ident, title))], subject=f"add #{ident}", why="test")


def project(tmp_path: Path, name: str, clock, seed: int = 7) -> Vault:
    """A project workspace with its vault in ``<name>/.acp-memory`` (a git workspace, as in real use): as ``git init``
    and ``init_vault(None, cwd=…, rng=random.Random(seed))`` leave it, copied from the ones this process made
    (``conftest.fresh_vault``)."""
    return fresh_vault(tmp_path / name, clock, seed=seed, workspace=True)


def user_copy(where: Path, clock, seed: int) -> Vault:
    """The user vault at ``where`` (``$ACPMEM_USER_VAULT``) as ``init_user_vault(rng=random.Random(seed))`` leaves
    it — a vault like any other, read as the user layer — copied (``conftest.fresh_vault``)."""
    from acpmem.core import layout

    v = fresh_vault(where, clock, seed=seed)
    v.layer = layout.LAYER_USER
    return v


@pytest.fixture
def user_vault(tmp_path, clock, monkeypatch):
    monkeypatch.setenv("ACPMEM_USER_VAULT", str(tmp_path / "me" / ".acp-memory"))
    u = user_copy(tmp_path / "me" / ".acp-memory", clock, seed=3)
    put(u, "u-short1", "Answer with the short version first, details after", "- The user wants the answer first.",
        typ="user-preference", importance=8)
    yield u
    u.close()


@pytest.fixture
def proj(tmp_path, clock, user_vault):
    v = project(tmp_path, "acme", clock)
    put(v, "q7dec1", "The job queue lives in SQLite with WAL", "- The job queue is one SQLite file in WAL mode.",
        typ="decision", importance=7)
    v.close()
    v = Vault(v.root, clock=clock, rng=random.Random(11))
    yield v
    v.close()


def configure(v: Vault, srv) -> Vault:
    p = v.root / "acpmem.toml"
    text = p.read_text()
    set_person("extraction", {"base_url": srv.base_url, "model": "test-model"})   # the person's own endpoint
    for key, val in {"timeout_seconds": 10.0, "max_retries": 0}.items():
        line = [ln for ln in text.splitlines() if ln.startswith(f"{key} = ")][0]
        text = text.replace(line, f"{key} = {json.dumps(val)}")
    p.write_text(text)
    v.close()
    return Vault(v.root, clock=v.clock, rng=random.Random(11))


def submit(v: Vault, *, type: str = "lesson", note: str = "re-entrant session.append", session: str = "s1"):
    req = requests.make_request(types=v.settings.types, type=type, note=note, importance=7, session=session, seq=6,
                                transcript=FIX / "openai_chat.json", host_tools=None, lang="en", created=v.now(),
                                request_id=requests.new_request_id(v.rng))
    v.ensure_state()
    requests.save_request(v.state_dir, req, new=True)
    return req


def run(v: Vault, req):
    (out,) = worker.process_now(v, [req.id])
    return out


def ids(v: Vault) -> set[str]:
    return {e.id for e in v.load(with_reads=False).entries}


# --------------------------------------------------------------------------------------------- one view

def test_every_list_format_names_the_layer_of_every_entry(proj, cli):
    base = ("memory", "--vault", str(proj.root), "list")
    data = json.loads(cli(*base, "--json").stdout)
    assert {(e["id"], e["layer"]) for e in data["entries"]} == {("q7dec1", "project"), ("u-short1", "user")}
    lines = cli(*base).stdout.splitlines()
    assert sorted(ln.split()[0] + " " + ln.split()[1] for ln in lines) == ["project #q7dec1", "user #u-short1"]
    md = cli(*base, "--format", "markdown").stdout.splitlines()
    assert md[0].startswith("| layer | id |") and any(ln.startswith("| user | `u-short1`") for ln in md)
    prompt = cli(*base, "--format", "prompt").stdout
    assert re.search(r'kind="index" layer="project" entries="1" of="1"', prompt)
    assert re.search(r'kind="index" layer="user" entries="1" of="1"', prompt)
    assert prompt.index("#q7dec1") < prompt.index('layer="user"') < prompt.index("#u-short1")


def test_without_a_user_vault_the_output_is_as_before(tmp_path, clock, cli):
    v = project(tmp_path, "solo", clock)
    put(v, "k3f9q2", "One layer only", "- Nothing else is read.")
    lines = cli("memory", "--vault", str(v.root), "list").stdout
    assert lines.startswith("#k3f9q2 [fact] One layer only") and "layer=" not in cli(
        "memory", "--vault", str(v.root), "list", "--format", "prompt").stdout
    assert json.loads(cli("memory", "--vault", str(v.root), "list", "--json").stdout)["entries"][0]["layer"] == \
        "project"


def test_ids_acpmem_makes_are_unique_across_layers_by_their_prefix(proj, user_vault):
    rng_ids = {user_vault.new_id() for _ in range(50)}
    assert all(i.startswith(USER_ID_PREFIX) and len(i) == 8 for i in rng_ids)
    assert all("-" not in proj.new_id() for _ in range(50))
    put(user_vault, user_vault.new_id(), "Another preference", "- body")
    user_vault.close()
    assert all(p.name.split("-")[0] == "u" for p in user_vault.entries_dir.glob("*.md"))


def test_the_resident_index_splits_its_budget_and_each_part_says_what_it_cut(proj, user_vault, clock):
    entries = [make_entry(f"p{i:03d}", f"Project decision number {i} about the deploy pipeline", "- x",
                          importance=5) for i in range(40)]
    proj.write_entries([e.with_changes(path=proj.path_for(e.id, e.title)) for e in entries], subject="p", why="t")
    uentries = [make_entry(f"u-{i:03d}", f"Personal habit number {i} of the person", "- y", typ="user-preference")
                for i in range(40)]
    user_vault.write_entries([e.with_changes(path=user_vault.path_for(e.id, e.title)) for e in uentries],
                             subject="u", why="t")
    v = Vault(proj.root, clock=clock)
    text = resident_index(v, budget_tokens=800, seed=1)
    shown = {m.group(1): int(m.group(2)) for m in re.finditer(r'layer="(\w+)" entries="(\d+)" of="41"', text)}
    assert set(shown) == {"project", "user"} and 0 < shown["user"] < shown["project"] < 41
    assert f"({41 - shown['project']} more project entries not shown" in text
    assert f"({41 - shown['user']} more user entries not shown" in text
    # the share is a setting: all of it to the user layer leaves the project part nothing
    toml = proj.root / "acpmem.toml"
    toml.write_text(toml.read_text().replace("user_share = 0.3", "user_share = 1.0"))
    v2 = Vault(proj.root, clock=clock)
    text2 = resident_index(v2, budget_tokens=800, seed=1)
    assert 'layer="project" entries="0" of="41"' in text2 and "(41 more project entries" in text2
    # a part that runs out of entries hands its share on
    toml.write_text(toml.read_text().replace("user_share = 1.0", "user_share = 0.9"))
    for e in uentries[1:]:
        user_vault.forget(e.id, "fewer")
    v3 = Vault(proj.root, clock=clock)
    text3 = resident_index(v3, budget_tokens=800, seed=1)
    assert 'layer="user" entries="2" of="2"' in text3
    assert int(re.search(r'layer="project" entries="(\d+)"', text3).group(1)) >= shown["project"]


def test_the_index_is_frozen_per_session_across_both_layers(proj, user_vault, cli):
    first = cli("memory", "--vault", str(proj.root), "list", "--format", "prompt", "--session", "s-f").stdout
    put(user_vault, "u-later1", "A preference learnt later", "- later")
    again = cli("memory", "--vault", str(proj.root), "list", "--format", "prompt", "--session", "s-f").stdout
    assert again == first and "u-later1" not in again
    fresh = cli("memory", "--vault", str(proj.root), "list", "--format", "prompt", "--session", "s-g").stdout
    assert "u-later1" in fresh


def test_recall_merges_both_layers_and_marks_each_read_in_its_own_vault(proj, user_vault, clock):
    put(user_vault, "u-queue1", "Prefers the queue drained by a worker", "- queue worker style", typ="user-preference")
    hits = recall_layered(proj, "queue", limit=5, session="s-r")
    assert {("q7dec1", "project"), ("u-queue1", "user")} <= {(h.entry.id, h.layer) for h in hits}
    assert all(h.entry.last_read for h in hits)
    assert "u-queue1" in (user_vault.state_dir / "reads.log").read_text()
    assert "u-queue1" not in (proj.state_dir / "reads.log").read_text()
    assert [h.entry.id for h in recall_layered(proj, "queue", limit=1)] != []
    assert len(recall_layered(proj, "queue", limit=1)) == 1
    # without previews (a prompt's surfacing): the same hits from both layers, none previewed
    full = recall_layered(proj, "queue", limit=5, mark_read=False)
    bare = recall_layered(proj, "queue", limit=5, mark_read=False, previews=False)
    assert [(h.entry.id, h.layer, h.score) for h in bare] == [(h.entry.id, h.layer, h.score) for h in full]
    assert {h.layer for h in full} == {"project", "user"} and any(h.preview for h in full)
    assert not any(h.preview for h in bare)
    # skipping (what a prompt's surfacing does with the entries its session has seen): each layer's hits hold their
    # places in the merged ranking, then the skipped ones are left out
    for skip in ({"u-queue1"}, {"q7dec1"}, {"u-queue1", "q7dec1"}):
        said: dict = {}
        got = recall_layered(proj, "queue", limit=5, mark_read=False, previews=False, skip=skip, report=said)
        assert [(h.entry.id, h.layer, h.score) for h in got] == \
            [(h.entry.id, h.layer, h.score) for h in bare if h.entry.id not in skip]
        assert said["left_out"] == len(skip)
        said = {}
        best = bare[0].entry.id
        assert recall_layered(proj, "queue", limit=1, mark_read=False, skip={best}, report=said) == []
        assert said["left_out"] == 1
    for upto in (0, 1):   # cut after the layers' hits are merged
        said = {}
        got = recall_layered(proj, "queue", limit=5, mark_read=False, previews=False, upto=upto, report=said)
        assert [(h.entry.id, h.layer) for h in got] == [(h.entry.id, h.layer) for h in bare][:upto]
        assert said["left_out"] == len(bare) - upto
    got = recall_layered(proj, "queue", limit=5, mark_read=False, previews=False, matched=True)
    assert [h.entry.id for h in got] == [h.entry.id for h in bare if h.explain.get("terms", True)]
    # the session ledger (the project's) knows both: surfacing does not repeat them
    s = surface(proj, "s-r", seed=1)
    assert {e.entry.id for e in s.entries}.isdisjoint({h.entry.id for h in hits})


def test_cli_recall_surface_score_and_stats_say_the_layer(proj, user_vault, cli):
    base = ("memory", "--vault", str(proj.root))
    rec = json.loads(cli(*base, "recall", "short answer first", "--json").stdout)
    assert [(h["id"], h["layer"]) for h in rec["hits"]] == [("u-short1", "user")]
    text = cli(*base, "recall", "short answer first").stdout
    assert 'id="u-short1" layer="user"' in text
    sur = json.loads(cli(*base, "surface", "--session", "s-cli", "--seed", "1", "--json").stdout)
    assert {(e["id"], e["layer"]) for e in sur["entries"]} == {("q7dec1", "project"), ("u-short1", "user")}
    rows = json.loads(cli(*base, "score", "--seed", "1", "--json").stdout)["rows"]
    assert {(r["id"], r["layer"]) for r in rows} == {("q7dec1", "project"), ("u-short1", "user")}
    assert re.search(r"^\*\s+\S+\s+user\s+#u-short1", cli(*base, "score", "--seed", "1").stdout, re.M)
    st_ = json.loads(cli(*base, "stats", "--json").stdout)
    assert st_["layer"] == "project" and st_["entries"]["live"] == 1
    assert st_["user"]["vault"] == str(user_vault.root) and st_["user"]["entries"]["live"] == 1
    assert "User layer (" in cli(*base, "stats").stdout


def test_show_forget_log_and_edit_work_on_either_layer_by_id(proj, user_vault, cli, tmp_path):
    base = ("memory", "--vault", str(proj.root))
    shown = json.loads(cli(*base, "show", "u-sh", "--json").stdout)
    assert shown["id"] == "u-short1" and shown["layer"] == "user"
    assert "(user vault)" in cli(*base, "show", "u-short1").stdout
    assert json.loads(cli(*base, "show", "q7d", "--json").stdout)["layer"] == "project"
    assert "u-short1" in cli(*base, "log", "u-short1").stdout or cli(*base, "log", "u-short1").stdout.strip()
    assert json.loads(cli(*base, "log", "u-short1", "--json").stdout)["changes"][0]["kind"] == "fork-write"

    new = (user_vault.entries_dir / next(p.name for p in user_vault.entries_dir.glob("u-short1*"))).read_text()
    fixed = tmp_path / "fixed.md"
    fixed.write_text(new.replace("The user wants the answer first.", "Answer first, then the reasons."))
    r = cli(*base, "edit", "u-short1", "--user", "--from", str(fixed), "-m", "clearer")
    assert r.returncode == 0 and "Saved #u-short1" in r.stdout, r.stderr
    assert "Answer first, then the reasons." in cli(*base, "show", "u-short1").stdout
    # a project path in a user-layer edit is refused: the user vault is read in every project
    leaky = tmp_path / "leaky.md"
    leaky.write_text(fixed.read_text().replace("Answer first", f"See {proj.root.parent}/docs/style.md. Answer first"))
    r = cli(*base, "edit", "u-short1", "--from", str(leaky))
    assert r.returncode == 1 and "holds a path of this project" in r.stderr
    assert str(proj.root.parent) not in cli(*base, "show", "u-short1").stdout
    # --user looks in the user vault only
    r = cli(*base, "edit", "q7dec1", "--user", "--from", str(fixed))
    assert r.returncode == 1 and "no entry with id 'q7dec1'" in r.stderr

    r = cli(*base, "forget", "u-short1", "--reason", "changed my mind", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["layer"] == "user"
    assert "u-short1" not in ids(Vault(user_vault.root)) and ids(Vault(proj.root)) == {"q7dec1"}
    kinds = [c["kind"] for c in json.loads(cli(*base, "log", "u-short1", "--json").stdout)["changes"]]
    assert kinds[0] == "forget" and "edit" in kinds
    assert json.loads(cli(*base, "log", "--user", "--json").stdout)["changes"][0]["kind"] == "forget"


def test_an_ambiguous_prefix_lists_both_layers(proj, user_vault):
    put(proj, "u-clash1", "A hand-made project id that looks like a user id", "- x")
    put(user_vault, "u-clash2", "A user entry", "- y")
    from acpmem.core.errors import AmbiguousId

    with pytest.raises(AmbiguousId) as exc:
        resolve_layer(proj, "u-clash")
    assert "u-clash1 (project)" in exc.value.message and "u-clash2 (user)" in exc.value.message
    lv, e = resolve_layer(proj, "u-clash1")
    assert lv is proj and e.id == "u-clash1"


# --------------------------------------------------------------------------------------------- MCP

def test_mcp_resource_and_recall_read_both_layers(proj, tmp_path):
    from test_mcp import _server_params, _session_run

    async def body(s):
        index = (await s.read_resource("memory://index")).contents[0].text
        rec = await s.call_tool("memory_recall", {"query": "short answer first"})
        return index, rec.content[0].text

    index, rec = _session_run(_server_params(proj.root, "--session", "s-mcp2"), body)
    assert 'layer="project"' in index and 'layer="user"' in index and "#u-short1" in index and "#q7dec1" in index
    assert 'id="u-short1" layer="user"' in rec


# --------------------------------------------------------------------------------------------- routing

def test_a_user_preference_goes_to_the_user_vault_by_default_and_the_fork_is_told_both_layers(proj, user_vault,
                                                                                             openai_server):
    v = configure(proj, openai_server)
    openai_server.enqueue(reply.writes(reply.write("- Comments in English, commit messages in Chinese.",
                                                   title="Comments in English, commits in Chinese")))
    out = run(v, submit(v, type="user-preference", note="answer short first; language of comments and commits"))
    assert out.status == "written" and out.entries[0]["layer"] == "user"
    new = out.entries[0]["id"]
    assert new.startswith(USER_ID_PREFIX) and new in ids(Vault(user_vault.root)) and new not in ids(Vault(v.root))
    body = openai_server.requests[0].body
    tool = body["tools"][-2]["function"]
    assert tool["parameters"]["properties"]["layer"]["enum"] == ["project", "user"]
    instruction = body["messages"][-1]["content"]
    rules = body["messages"][-2]["content"]     # the fork's system message
    assert "- layer: user for the person's own preferences" in rules and "(default: user)" in rules
    # related entries come from both layers, each framed with its layer
    assert re.search(r'\n- #u-short1 \([a-z-]+, user layer\) ', instruction)
    # one commit in the user vault carrying the request; none in the project vault
    assert git_out(user_vault.root, "log", "-1", "--format=%B").count(f"Acpmem-Request: {out.request}") == 1
    assert f"Acpmem-Request: {out.request}" not in git_out(v.root, "log", "--format=%B")


def test_the_fork_chooses_the_layer_per_entry(proj, user_vault, openai_server):
    v = configure(proj, openai_server)
    openai_server.enqueue(reply.writes(
        reply.call("memory_write", {"content": "- The person reviews diffs before pushing.", "layer": "user"}),
        reply.call("memory_write", {"content": "- acme deploys with make ship.", "layer": "project"}),
        reply.write("- No layer: a lesson defaults to the project.")))
    out = run(v, submit(v, type="lesson", note="habits and deploys"))
    layers = {e["title"]: e["layer"] for e in out.entries}
    assert layers == {"The person reviews diffs before pushing.": "user", "acme deploys with make ship.": "project",
                      "No layer: a lesson defaults to the project.": "project"}
    assert len(ids(Vault(user_vault.root))) == 2 and len(ids(Vault(v.root))) == 3
    assert f"Acpmem-Request: {out.request}" in git_out(user_vault.root, "log", "-1", "--format=%B")
    assert f"Acpmem-Request: {out.request}" in git_out(v.root, "log", "-1", "--format=%B")


@pytest.mark.parametrize("bad", ["team", 3, "", ["user"]])
def test_an_invalid_layer_rejects_the_answer_and_nothing_is_written(proj, user_vault, openai_server, bad):
    v = configure(proj, openai_server)
    openai_server.enqueue(reply.writes(reply.call("memory_write", {"content": "- x", "layer": bad})))
    out = run(v, submit(v))
    assert out.status == "retry" and "layer" in out.error["message"]
    assert ids(Vault(user_vault.root)) == {"u-short1"} and ids(Vault(v.root)) == {"q7dec1"}


def test_without_a_user_vault_the_schema_has_no_layer_and_a_layer_is_dropped(tmp_path, clock, openai_server):
    v = configure(project(tmp_path, "solo", clock), openai_server)
    openai_server.enqueue(reply.writes(reply.call("memory_write", {"content": "- x", "layer": "user"})))
    out = run(v, submit(v, type="user-preference"))
    assert "layer" not in openai_server.requests[0].body["tools"][-2]["function"]["parameters"]["properties"]
    assert "layer:" not in openai_server.requests[0].body["messages"][-2]["content"]
    # an argument the schema does not have is dropped with a note, never a reason to throw the answer away
    assert out.status == "written" and out.entries[0]["layer"] == "project"
    assert "memory_write: unknown argument(s) dropped: layer" in out.notes


def test_user_layer_entries_hold_no_project_path_and_no_secret(proj, user_vault, openai_server):
    v = configure(proj, openai_server)
    ws = str(proj.root.parent)
    leaky = (f"- The person wants tests run before commit, e.g. `pytest {ws}/tests/test_api.py`.\n"
             f"- Their token {KEY} is in {ws}/.env.")
    openai_server.enqueue(reply.writes(reply.call("memory_write", {"content": leaky, "layer": "user",
                                                                   "title": f"Run {ws}/tests before committing"})))
    out = run(v, submit(v, type="user-preference", note=f"tests before commit in {ws}"))
    assert "project-path" in out.redacted and any(r != "project-path" for r in out.redacted)
    u = Vault(user_vault.root)
    e = u.resolve(out.entries[0]["id"])
    text = (u.root / e.path).read_text()
    assert ws not in text and KEY not in text and "<project path>" in text and "[REDACTED:" in text
    assert ws not in git_out(u.root, "log", "-1", "--format=%B")


def test_exactly_once_across_the_layers_when_killed_between_the_two_commits(proj, user_vault, openai_server):
    v = configure(proj, openai_server)
    req = submit(v, note="both layers")
    saved = (pending_dir(v.state_dir) / f"{req.id}.json").read_bytes()
    two = reply.writes(reply.call("memory_write", {"content": "- user part", "layer": "user"}),
                       reply.call("memory_write", {"content": "- project part", "layer": "project"}))
    openai_server.enqueue(two, two)
    first = run(v, req)
    assert first.status == "written"
    # the state a kill -9 after the user commit, before the project commit, leaves behind
    git_out(v.root, "reset", "-q", "--hard", "HEAD~1")
    (pending_dir(v.state_dir) / f"{req.id}.json").write_bytes(saved)
    (queue_home(v.state_dir) / "done.jsonl").unlink()
    user_commits = git_out(user_vault.root, "log", "--format=%H").split()
    again = run(Vault(v.root, clock=v.clock, rng=random.Random(5)), req)
    assert again.status == "written" and [e["layer"] for e in again.entries] == ["project"]
    assert git_out(user_vault.root, "log", "--format=%H").split() == user_commits   # no second user entry
    assert [e.title for e in Vault(user_vault.root).load().entries].count("user part") == 1
    # and run once more: found in the project history
    (pending_dir(v.state_dir) / f"{req.id}.json").write_bytes(saved)
    assert run(Vault(v.root), req).status == "already"


def test_offline_extraction_routes_by_type(proj, user_vault):
    out = run(proj, submit(proj, type="user-preference", note="short answers first"))
    assert out.status == "written" and out.entries[0]["layer"] == "user"
    assert out.entries[0]["id"].startswith(USER_ID_PREFIX)
    out = run(proj, submit(proj, type="lesson", note="session append re-entrant"))
    assert out.entries[0]["layer"] == "project" and "-" not in out.entries[0]["id"]


# --------------------------------------------------------------------------------------------- a broken user vault

def _warnings(r) -> list[str]:
    return warnings_said(r.stderr)


def test_a_default_user_vault_never_created_is_silent(tmp_path, clock, cli, monkeypatch):
    v = project(tmp_path, "solo", clock)
    put(v, "k3f9q2", "One layer only", "- x")
    for args in (("list",), ("list", "--format", "prompt"), ("recall", "layer"), ("score",)):
        r = cli("memory", "--vault", str(v.root), *args)
        assert r.returncode == 0 and r.stderr == "", (args, r.stderr)


def _broken(kind: str, path: Path, clock) -> None:
    if kind == "missing":
        return
    if kind == "a file":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("not a folder")
        return
    u = init_vault(path, clock=clock)
    u.close()
    if kind == "not a git repository":
        subprocess.run(["rm", "-rf", str(path / ".git")], check=True)
    elif kind == "bad settings":
        (path / "acpmem.toml").write_text("[index]\nbudget_tokens = -3\n")
    elif kind == "not a vault":
        subprocess.run(["rm", "-rf", str(path / "entries")], check=True)
    elif kind == "unreadable":   # the tests run as root, which reads any mode: a file that cannot be read as one
        (path / "acpmem.toml").unlink()
        (path / "acpmem.toml").mkdir()


@pytest.mark.parametrize("kind,said", [("missing", "does not exist"), ("a file", "is not a folder"),
                                       ("not a git repository", "is not a git repository"),
                                       ("bad settings", "using the last good settings"),   # read, as defaults
                                       ("not a vault", "is not an acpmem vault"),
                                       ("unreadable", "cannot be read")])
def test_a_broken_user_vault_leaves_the_project_working_with_one_warning(tmp_path, clock, cli, monkeypatch, kind,
                                                                        said):
    broken = tmp_path / "broken-user"
    _broken(kind, broken, clock)
    monkeypatch.setenv("ACPMEM_USER_VAULT", str(broken))
    v = project(tmp_path, "solo", clock)
    put(v, "k3f9q2", "The project vault keeps working", "- x")
    for args in (("list",), ("list", "--json"), ("list", "--format", "prompt"), ("recall", "project vault"),
                 ("score",), ("surface", "--session", "s-b"), ("stats",), ("show", "k3f")):
        r = cli("memory", "--vault", str(v.root), *args)
        assert r.returncode == 0, (args, r.stderr)
        assert "k3f9q2" in r.stdout or args[0] == "stats", args
        w = _warnings(r)
        assert len(w) == 1 and said in w[0] and str(broken) in w[0], (args, r.stderr)


def test_a_broken_configured_user_vault_warns_and_none_turns_it_off(tmp_path, clock, cli, monkeypatch):
    v = project(tmp_path, "solo", clock)
    put(v, "k3f9q2", "Configured in acpmem.toml", "- x")
    set_person("layers", {"user_vault": str(tmp_path / "nowhere")})   # the person's own config: never a vault's
    r = cli("memory", "--vault", str(v.root), "list")
    assert r.returncode == 0 and len(_warnings(r)) == 1 and "nowhere does not exist" in r.stderr
    set_person("layers", {"user_vault": "none"})
    r = cli("memory", "--vault", str(v.root), "list")
    assert r.returncode == 0 and r.stderr == ""
    # $ACPMEM_USER_VAULT wins over the file
    monkeypatch.setenv("ACPMEM_USER_VAULT", str(tmp_path / "elsewhere"))
    assert "elsewhere does not exist" in cli("memory", "--vault", str(v.root), "list").stderr


def test_the_user_vault_is_not_a_project_vault_found_by_walking_up(tmp_path, clock, cli, monkeypatch):
    home = tmp_path / "h"
    (home / "work" / "noproject").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    r = cli("memory", "init", "--user")
    assert r.returncode == 0 and str(home / ".acp-memory") in r.stdout
    r = cli("memory", "list", cwd=home / "work" / "noproject")
    assert r.returncode == 1 and "is your user vault" in r.stderr and r.stderr.count("\n") == 1
    put(Vault(home / ".acp-memory"), "u-mine01", "Mine", "- x", typ="user-preference")
    r = cli("memory", "--vault", str(home / ".acp-memory"), "list", "--json")
    assert [(e["id"], e["layer"]) for e in json.loads(r.stdout)["entries"]] == [("u-mine01", "user")]
    assert cli("memory", "init", "--user").returncode == 1   # it exists


# --------------------------------------------------------------------------------------------- no leak

def _everything_b_reads(b: Vault, srv, tmp_path, cli) -> str:
    """Every text project B's session is given: list in every format, the prompt index, recall, surface, stats,
    the MCP resource and recall, and the fork's request body."""
    from test_mcp import _server_params, _session_run

    base = ("memory", "--vault", str(b.root))
    out = [cli(*base, "list", *a).stdout for a in ((), ("--json",), ("--format", "markdown"),
                                                   ("--format", "prompt"), ("--all", "--json"))]
    # a typo of A's marker word (the search tolerates typos): the query itself is echoed, the marker must not be
    for q in ("alphasecretwrod", "deploy", "queue", "acme", "preference"):
        out.append(cli(*base, "recall", q, "--json", "--all").stdout)
    out.append(cli(*base, "surface", "--session", "s-b", "--json").stdout)
    out.append(cli(*base, "score", "--json").stdout)
    out.append(cli(*base, "stats", "--json").stdout)

    async def body(s):
        idx = (await s.read_resource("memory://index")).contents[0].text
        rec = await s.call_tool("memory_recall", {"query": "alphasecretwrod deploy acme"})
        return idx + rec.content[0].text

    out.append(_session_run(_server_params(b.root, "--session", "s-bm"), body))
    vb = configure(b, srv)
    srv.enqueue(reply.text())
    run(vb, submit(vb, note="alphasecretwrod deploy acme preference", type="user-preference"))
    out.append(json.dumps(srv.requests[-1].body))
    return "\n".join(out)


def test_two_projects_sharing_one_user_vault_never_leak_into_each_other(tmp_path, clock, user_vault, cli,
                                                                        openai_server):
    a = project(tmp_path, "alpha", clock, seed=1)
    b = project(tmp_path, "beta", clock, seed=2)
    put(a, "a1dec", "alphasecretword: acme deploys with the blue pipeline", "- alphasecretword deploy queue")
    put(b, "b1dec", "Beta builds with bazel", "- beta build")
    # project A's fork writes one entry to each layer, the user one naming A's paths
    va = configure(a, openai_server)
    openai_server.enqueue(reply.writes(
        reply.call("memory_write", {"content": f"- alphasecretword lives in {a.root.parent}/deploy.sh",
                                    "layer": "project"}),
        reply.call("memory_write", {"content": f"- The person likes dry runs first, see {a.root.parent}/Makefile",
                                    "layer": "user", "title": "Dry runs first"})))
    assert run(va, submit(va, note="deploys and dry runs")).status == "written"

    seen = _everything_b_reads(b, openai_server, tmp_path, cli)
    assert "alphasecretword" not in seen and "a1dec" not in seen and str(a.root.parent) not in seen
    assert "/alpha" not in seen and "blue pipeline" not in seen
    # what B does see: its own entries and the shared user layer (the preference A's session wrote, path redacted)
    assert "b1dec" in seen and "u-short1" in seen and "Dry runs first" in seen and "<project path>" in seen


WORDS = st.sampled_from(["cedar", "maple", "birch", "larch", "alder", "rowan", "hazel", "aspen"])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sets=st.lists(st.tuples(st.sampled_from(["A", "B", "U"]), WORDS, st.integers(1, 10)), min_size=1,
                     max_size=12))
def test_generated_entry_sets_never_leak_and_ids_stay_unique(tmp_path_factory, clock, monkeypatch, sets):
    root = tmp_path_factory.mktemp("gen")
    monkeypatch.setenv("ACPMEM_USER_VAULT", str(root / "user"))
    vaults = {"U": user_copy(root / "user", clock, seed=1),
              "A": project(root, "a", clock, 2), "B": project(root, "b", clock, 3)}
    tag = {"A": "zzproja", "B": "zzprojb", "U": "zzuser"}
    written: dict[str, set[str]] = {k: set() for k in vaults}
    for k in vaults:
        mine = [(w, imp) for who, w, imp in sets if who == k]
        taken = {i for s in written.values() for i in s}
        entries = []
        for w, imp in mine:
            ident = vaults[k].new_id(taken)
            taken.add(ident)
            title = f"{tag[k]} {w} {ident}"
            entries.append(make_entry(ident, title, f"- {tag[k]} {w}", importance=imp).with_changes(
                path=vaults[k].path_for(ident, title)))
        if entries:
            vaults[k].write_entries(entries, subject="gen", why="gen")
        written[k] = {e.id for e in entries}
    all_ids = [i for s in written.values() for i in s]
    assert len(all_ids) == len(set(all_ids))
    for me, other in (("A", "B"), ("B", "A")):
        v = Vault(vaults[me].root, clock=clock)
        items, _ = list_layered(v)
        assert {i.entry.id for i in items} == written[me] | written["U"]
        assert {i.entry.id for i in items if i.layer == "user"} == written["U"]
        text = resident_index(v, seed=1, budget_tokens=100_000)
        assert tag[other] not in text
        for w in ("cedar", "maple", tag[other], "zzuser"):
            assert all(h.entry.id not in written[other] for h in recall_layered(v, w, limit=50, mark_read=False))
            assert all(e.id not in written[other] for e in related_entries(v, f"{w} {tag[other]}", limit=20))
        s = surface(v, f"gen-{me}", seed=1)
        assert all(e.entry.id in written[me] | written["U"] for e in s.entries)
        v.close()


# --------------------------------------------------------------------------------------------- sync

def test_the_user_vault_syncs_between_two_clones(tmp_path, clock, cli, monkeypatch):
    bare = tmp_path / "me.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    one = tmp_path / "laptop" / ".acp-memory"
    r = cli("memory", "init", "--user", env={"ACPMEM_USER_VAULT": str(one)})
    assert r.returncode == 0, r.stderr
    git_out(one, "remote", "add", "origin", str(bare))
    put(Vault(one), "u-pref001", "Prefers tabs in Makefiles only", "- tabs", typ="user-preference")
    r = cli("memory", "sync", "--user", env={"ACPMEM_USER_VAULT": str(one)}, cwd=tmp_path)
    assert r.returncode == 0 and "first push" in r.stdout, r.stderr
    two = tmp_path / "desktop" / ".acp-memory"
    subprocess.run(["git", "clone", "-q", str(bare), str(two)], check=True)
    put(Vault(two), "u-pref002", "Wants commit messages in Chinese", "- zh commits", typ="user-preference")
    r = cli("memory", "sync", "--user", "--json", env={"ACPMEM_USER_VAULT": str(two)}, cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["pushed"], r.stderr
    r = cli("memory", "sync", "--user", env={"ACPMEM_USER_VAULT": str(one)}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # a project on the laptop reads both preferences from its user layer
    monkeypatch.setenv("ACPMEM_USER_VAULT", str(one))
    p = project(tmp_path, "proj", clock)
    got = json.loads(cli("memory", "--vault", str(p.root), "list", "--json").stdout)["entries"]
    assert {(e["id"], e["layer"]) for e in got} == {("u-pref001", "user"), ("u-pref002", "user")}
    # the project vault was never involved
    assert git_out(p.root, "log", "--format=%s").count("\n") == 1


def test_sync_user_without_a_user_vault_says_how_to_make_one(tmp_path, cli):
    r = cli("memory", "sync", "--user", env={"ACPMEM_USER_VAULT": str(tmp_path / "none-here")}, cwd=tmp_path)
    assert r.returncode == 1 and "init --user" in r.stderr and r.stderr.count("\n") == 1


def test_python_api_reads_both_layers(proj):
    import acpmem

    assert sys.modules["acpmem"] is acpmem
    items, problems = list_layered(proj)
    assert {(i.layer, i.entry.id) for i in items} == {("project", "q7dec1"), ("user", "u-short1")} and not problems
    assert [lv.layer for lv in proj.layers()] == ["project", "user"]
    text = resident_index(proj, seed=3)
    assert "#u-short1" in text and "#q7dec1" in text


def test_the_readme_two_layers_example_runs_as_written(tmp_path):
    r = run_readme_sh("# Two layers: your memory and the project's", tmp_path)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert "Error" not in r.stderr and "Warning" not in r.stderr and '{"error"' not in r.stderr and not warnings_said(r.stderr)
    assert "['project', 'user']" in r.stdout and "[redacted: project-path]" in r.stdout
    assert re.search(r'layer="user" entries="1" of="1"', r.stdout) and "User layer (" in r.stdout
    assert re.search(r"^user +#u-\w+ \[user-preference\] .*<project path>", r.stdout, re.M)
    assert str(tmp_path) + "/proj" not in r.stdout.split("User layer")[0].split("wrote 1 entry")[1]
    assert not (Path(os.environ["HOME"]) / ".acp-memory").exists()


def test_the_claude_code_hook_gives_both_layers(proj, cli, tmp_path):
    toml = proj.root / "acpmem.toml"
    toml.write_text(toml.read_text().replace("enabled = false", "enabled = true", 1))
    ws = proj.root.parent

    def hook(name: str, **more):
        ev = json.dumps({"session_id": "cc-l", "transcript_path": str(ws / "t.jsonl"), "cwd": str(ws),
                         "hook_event_name": name, **more})
        r = cli("memory", "hook", "claude-code", input=ev, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]

    start = hook("SessionStart", source="startup")
    assert 'layer="project"' in start and 'layer="user"' in start and "#u-short1" in start
    # the prompt hook surfaces what the prompt is about: words of an entry in each layer
    turn = hook("UserPromptSubmit", prompt="should the answer come first, and where does the job queue live?")
    assert 'id="u-short1" layer="user"' in turn and 'id="q7dec1" layer="project"' in turn


def test_working_on_the_user_vault_itself_writes_user_ids_there(user_vault, cli, tmp_path):
    r = cli("memory", "--vault", str(user_vault.root), "commit", "--type", "lesson", "--note",
            "pytest -x stops at the first failure", "--importance", "5", "--session", "s-u", "--seq", "1", "--wait",
            "--json")
    assert r.returncode == 0, r.stderr
    e = json.loads(r.stdout)["outcome"]["entries"][0]
    got = json.loads(cli("memory", "--vault", str(user_vault.root), "list", "--json").stdout)["entries"]
    new = [x for x in got if x["id"] != "u-short1"]
    assert len(new) == 1 and new[0]["id"].startswith(USER_ID_PREFIX) and new[0]["layer"] == "user"
    assert e["id"] == new[0]["id"] and e["layer"] == "user"


def test_a_type_the_user_vault_lacks_stays_in_the_project(proj, user_vault, openai_server):
    toml = user_vault.root / "acpmem.toml"
    toml.write_text(toml.read_text().replace('types = ["decision", "lesson", "fact", "user-preference", "reference"]',
                                             'types = ["user-preference"]'))
    v = configure(proj, openai_server)
    openai_server.enqueue(reply.writes(reply.call("memory_write", {"content": "- a lesson", "layer": "user"})))
    out = run(v, submit(v, type="lesson"))
    assert out.status == "written" and out.entries[0]["layer"] == "project"


def test_a_block_committed_as_a_user_preference_lands_in_the_user_vault_and_its_source_shows(proj, user_vault,
                                                                                             tmp_path, cli):
    """Compression blocks and layers together: the offline fork routes a user-preference block to the user vault
    with a u- id, cites the block, and `show --source` finds the u- id."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "dsh"))
    import make_session
    from acpmem.read import sources
    from acpmem.hosts.transcripts import read_transcript

    log = make_session.write(tmp_path / "s.jsonl.zstd")
    t = read_transcript(log)
    blk = t.blocks[0]
    req = requests.make_request(types=proj.settings.types, type="user-preference", note="how the person works",
                                importance=6, session="s-dsh", seq=t.last_seq, transcript=str(log), host_tools=None,
                                lang="en", created=proj.now(), request_id=requests.new_request_id(proj.rng),
                                block=blk.id)
    proj.ensure_state()
    requests.save_request(proj.state_dir, req, new=True)
    (out,) = worker.process_now(proj, [req.id], extractor="offline")
    assert out.status == "written" and out.entries[0]["layer"] == "user"
    new = out.entries[0]["id"]
    assert new.startswith(USER_ID_PREFIX) and new in ids(Vault(user_vault.root))
    _, entry = resolve_layer(Vault(proj.root), new)
    assert entry.citation[0].block == blk.id
    assert sources.record_transcript(proj, "s-dsh", log, "commit")
    r = cli("memory", "--vault", str(proj.root), "show", new, "--source")
    assert r.returncode == 0, r.stderr
    assert f'kind="block" id="{blk.id}"' in r.stdout


def test_tools_for_the_fork_show_the_layer_field_only_when_a_user_vault_is_read(proj, user_vault, cli, monkeypatch):
    r = cli("memory", "--vault", str(proj.root), "tools", "--for", "fork")
    props = json.loads(r.stdout)[0]["function"]["parameters"]["properties"]
    assert r.returncode == 0 and props["layer"]["enum"] == ["project", "user"]
    monkeypatch.setenv("ACPMEM_USER_VAULT", "none")
    r = cli("memory", "--vault", str(proj.root), "tools", "--for", "fork")
    assert r.returncode == 0 and "layer" not in json.loads(r.stdout)[0]["function"]["parameters"]["properties"]
