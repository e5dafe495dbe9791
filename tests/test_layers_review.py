"""The two layers and the review workflow together: ``remember --user``, ``review`` over both vaults (real forks
through the loopback OpenAI server, each vault under its own policy), ``show`` of a proposal, ``consolidate`` one
layer at a time, ``doctor`` and ``stats`` of the user vault. Every user vault is a temporary folder named by
$ACPMEM_USER_VAULT; the real ~/.acp-memory is never touched."""
from __future__ import annotations

import json
import os
import random
import re
import string
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings, strategies as st

from helpers_proc import git_out, run_readme_sh, warnings_said
from openai_server import reply
from test_consolidate import DUPLICATES
from test_fork import configure as set_toml
from test_layers import configure, ids, project, put, run, submit, user_copy
import test_layers

from acpmem.core.errors import AmbiguousId, EntryNotFound, Refused
from acpmem.core.redact import find_secrets
from acpmem.upkeep import review as rv
from acpmem.vault.writer import Vault
from acpmem.write.remember import remember

proj, user_vault = test_layers.proj, test_layers.user_vault   # the fixtures of tests/test_layers.py


def _kinds(root, n: int = 1) -> list[str]:
    out = git_out(root, "log", f"-{n}", "--format=%(trailers:key=Acpmem-Kind,valueonly)%x1e")
    return [k.strip() for k in out.split("\x1e") if k.strip()]


def _head(root) -> str:
    return git_out(root, "rev-parse", "HEAD").strip()


# --------------------------------------------------------------------------------------------- remember --user

def test_remember_user_writes_a_u_id_in_one_human_commit_of_the_user_vault(proj, user_vault, cli):
    before_p, before_u = _head(proj.root), _head(user_vault.root)
    r = cli("memory", "--vault", str(proj.root), "remember", "Answer in English, even when asked in Chinese.",
            "--type", "user-preference", "--importance", "8", "--user", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["id"].startswith("u-") and got["layer"] == "user"
    assert got["id"] in ids(Vault(user_vault.root)) and got["id"] not in ids(Vault(proj.root))
    assert _head(proj.root) == before_p                                   # nothing in the project
    assert git_out(user_vault.root, "rev-list", "--count", f"{before_u}..HEAD").strip() == "1"
    assert _kinds(user_vault.root) == ["human-write"] and _head(user_vault.root) == got["commit"]
    # it is read from the project at once, with its layer
    listed = json.loads(cli("memory", "--vault", str(proj.root), "list", "--json").stdout)["entries"]
    assert {"id": got["id"], "layer": "user"}.items() <= next(e for e in listed if e["id"] == got["id"]).items()
    # the text form says where it went
    r = cli("memory", "--vault", str(proj.root), "remember", "Prefer tables to bullet lists.", "-t", "user-preference",
            "-i", "5", "--user")
    assert r.returncode == 0 and "in the user vault" in r.stdout and "#u-" in r.stdout


def test_remember_user_through_the_python_api(proj, user_vault):
    e, sha = remember(proj, "Short answers first.", type="user-preference", importance=7, user=True)
    assert e.id.startswith("u-") and (user_vault.root / e.path).is_file() and not (proj.root / e.path).exists()
    assert _head(user_vault.root) == sha
    # opened on the user vault itself, user=True is that vault
    u = Vault(user_vault.root)
    e2, _ = remember(u, "Prefer tables.", type="user-preference", importance=4, user=True)
    assert e2.id.startswith("u-") and e2.id in ids(Vault(user_vault.root))


def test_a_project_path_is_refused_in_the_user_vault_and_nothing_is_written(proj, user_vault, cli):
    ws = proj.root.parent
    heads = _head(proj.root), _head(user_vault.root)
    for text in (f"The billing code is in {ws}/src/billing.py.", f"See {proj.root}/entries for the old notes."):
        r = cli("memory", "--vault", str(proj.root), "remember", text, "-t", "user-preference", "-i", "5", "--user")
        assert r.returncode != 0 and r.stdout == ""
        assert r.stderr.strip().startswith("Error: the text holds a path of this project") and \
            "drop --user" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    with pytest.raises(Refused, match="path of this project"):
        remember(proj, "x", type="user-preference", importance=5, title=f"Notes in {ws}/docs", user=True)
    assert (_head(proj.root), _head(user_vault.root)) == heads
    # the same text is fine in the project vault, and a path elsewhere is fine in the user vault
    assert cli("memory", "--vault", str(proj.root), "remember", f"The billing code is in {ws}/src/billing.py.",
               "-t", "fact", "-i", "5").returncode == 0
    r = cli("memory", "--vault", str(proj.root), "remember", "My dotfiles live in /opt/dotfiles/zshrc.",
            "-t", "user-preference", "-i", "3", "--user")
    assert r.returncode == 0, r.stderr


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(tail="", before="TOKEN")   # found by CI: read as a bearer token, refused as a secret
@example(tail="x", before="key:")
@given(tail=st.text(string.ascii_letters + string.digits + "._-/", max_size=30),
       before=st.text(string.ascii_letters + " :", max_size=20))
def test_any_path_under_the_project_is_refused_for_the_user_vault(proj, user_vault, tail, before):
    text = f"{before} {proj.root.parent}/{tail} end"
    # a text the secret scanner refuses first ("token /tmp/pytest-3/…" reads as a bearer token) is refused for that,
    # tested on its own: the property is about every other text
    assume(not find_secrets(text, deep=True))
    head = _head(user_vault.root)
    with pytest.raises(Refused, match="path of this project"):
        remember(proj, text, type="user-preference", importance=5, user=True)
    assert _head(user_vault.root) == head


def test_remember_user_refuses_a_secret(proj, user_vault, cli):
    from test_layers import KEY

    head = _head(user_vault.root)
    r = cli("memory", "--vault", str(proj.root), "remember", f"My key is {KEY}", "-t", "user-preference", "-i", "5",
            "--user")
    assert r.returncode != 0 and "looks like a secret" in r.stderr and KEY not in r.stderr + r.stdout
    assert _head(user_vault.root) == head


def test_remember_user_without_a_user_vault_says_init_user(tmp_path, clock, cli):
    v = project(tmp_path, "solo", clock)
    head = _head(v.root)
    r = cli("memory", "--vault", str(v.root), "remember", "Short answers.", "-t", "user-preference", "-i", "5",
            "--user")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("Error: there is no user vault") and "acp memory init --user" in r.stderr
    assert _head(v.root) == head
    # and nowhere: no project vault, no user vault
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = cli("memory", "remember", "Short answers.", "-t", "user-preference", "-i", "5", "--user", cwd=elsewhere)
    assert r.returncode != 0 and "acp memory init --user" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_remember_user_outside_any_project_writes_the_user_vault(user_vault, tmp_path, cli):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = cli("memory", "remember", "Short answers first.", "-t", "user-preference", "-i", "6", "--user", "--json",
            cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["id"] in ids(Vault(user_vault.root))


# --------------------------------------------------------------------------------------------- review, both layers

def _fork_both(v: Vault, srv, session: str = "s1", deploy: str = "make ship") -> None:
    srv.enqueue(reply.writes(
        reply.call("memory_write", {"content": f"- The person reviews diffs before pushing; see {v.root.parent}/x.",
                                    "title": "The person reviews diffs before pushing", "layer": "user"}),
        reply.call("memory_write", {"content": f"- acme deploys with {deploy}.", "title": f"acme deploys with {deploy}",
                                    "layer": "project"})))
    out = run(v, submit(v, type="lesson", note="habits and deploys", session=session))
    assert out.ok and out.entries, out


@pytest.fixture
def user_reviews(proj, user_vault, openai_server):
    """The user vault under policy = "review", the project under "auto", after one real fork that wrote to both."""
    set_toml(user_vault, policy="review")
    v = configure(proj, openai_server)
    _fork_both(v, openai_server)
    yield v
    v.close()


def test_a_review_user_vault_gets_proposals_and_the_auto_project_its_entries(user_reviews, user_vault):
    v = user_reviews
    props = list((user_vault.root / "proposals").glob("*.md"))
    assert len(props) == 1 and props[0].name.startswith("u-")
    assert "<project path>" in props[0].read_text() and str(v.root.parent) not in props[0].read_text()
    assert not (v.root / "proposals").exists() or not list((v.root / "proposals").glob("*.md"))
    assert _kinds(user_vault.root) == ["proposal"] and _kinds(v.root) == ["fork-write"]
    assert ids(Vault(user_vault.root)) == {"u-short1"}        # a proposal is no entry


def test_review_json_lists_both_layers_and_decisions_commit_where_the_item_is(user_reviews, user_vault, cli):
    v = user_reviews
    data = json.loads(cli("memory", "--vault", str(v.root), "review", "--json").stdout)
    assert data["policies"] == {"project": "auto", "user": "review"} and data["policy"] == "auto"
    # (q7dec1, written by the fixture with the fork's commit kind, is a fork write to review too)
    by_layer = sorted((i["layer"], i["kind"]) for i in data["items"])
    assert by_layer == [("project", "fork-write"), ("project", "fork-write"), ("user", "proposal")]
    uid = next(i["id"] for i in data["items"] if i["layer"] == "user")
    pid = next(i["id"] for i in data["items"] if i["layer"] == "project" and i["id"] != "q7dec1")
    assert uid.startswith("u-") and not pid.startswith("u-")
    heads = _head(v.root), _head(user_vault.root)
    r = cli("memory", "--vault", str(v.root), "review", "accept", uid, "--json")
    assert r.returncode == 0, r.stderr
    (d,) = json.loads(r.stdout)["decisions"]
    assert d["layer"] == "user" and d["kind"] == "proposal" and d["path"].startswith("entries/u-")
    assert _head(v.root) == heads[0] and _kinds(user_vault.root) == ["human-review"]
    assert uid in ids(Vault(user_vault.root)) and not list((user_vault.root / "proposals").glob("*.md"))
    # the per-clone marker lives in the vault that holds the item
    assert list((user_vault.root / "reviews").glob("*.tsv")) and not (v.root / "reviews").exists()
    r = cli("memory", "--vault", str(v.root), "review", "reject", pid[:5], "--reason", "we ship with CI")
    assert r.returncode == 0 and f"Rejected fork-write #{pid} in the project vault" in r.stdout
    assert _kinds(v.root) == ["human-review"] and pid not in ids(Vault(v.root))
    marker = next((v.root / "reviews").glob("*.tsv")).read_text()
    assert f"{pid}\treject\t" in marker and "@through" not in marker    # q7dec1 still waits in this vault
    assert cli("memory", "--vault", str(v.root), "review", "accept", "q7dec1").returncode == 0
    marker = next((v.root / "reviews").glob("*.tsv")).read_text()
    assert marker.startswith("@through\t") and "q7dec1\taccept\t" in marker
    assert json.loads(cli("memory", "--vault", str(v.root), "review", "--json").stdout)["items"] == []


def test_a_review_project_and_an_auto_user_vault(proj, user_vault, openai_server, cli):
    v = configure(proj, openai_server)
    v = set_toml(v, policy="review")
    _fork_both(v, openai_server)
    (p,) = [i for _, i in rv.queue_layered(v) if i.layer == "project"]
    (u,) = [i for _, i in rv.queue_layered(v) if i.layer == "user" and i.id != "u-short1"]
    assert p.kind == "proposal" and u.kind == "fork-write" and u.id in ids(Vault(user_vault.root))
    assert _kinds(user_vault.root) == ["fork-write"] and _kinds(v.root) == ["proposal"]
    done = rv.decide_ids(v, [p.id, u.id], "reject", reason="not worth keeping")
    assert [(d.layer, d.kind) for d in done] == [("project", "proposal"), ("user", "fork-write")]
    assert u.id not in ids(Vault(user_vault.root)) and _kinds(user_vault.root) == ["human-review"]
    assert [i.id for _, i in rv.queue_layered(v)] == ["u-short1"]   # the fixture's entry, a fork write
    # a proposal already decided cannot be found as a proposal either
    with pytest.raises(EntryNotFound):
        rv.find_layered(v, p.id)


def test_interactive_review_covers_both_layers_and_names_each_layer(user_reviews, user_vault, cli):
    v = user_reviews
    r = cli("memory", "--vault", str(v.root), "review", input="a\na\na\n")
    assert r.returncode == 0, r.stderr
    assert "[1/3] fork-write #" in r.stdout and "(project layer)" in r.stdout
    assert "[3/3] proposal #u-" in r.stdout and "(user layer)" in r.stdout
    assert "Reviewed: 3 accepted." in r.stdout
    assert _kinds(user_vault.root) == ["human-review"] and _kinds(v.root) == ["human-review"]
    assert rv.queue_layered(v) == []


def test_an_edit_of_a_user_item_may_not_add_a_project_path(user_reviews, user_vault):
    v = user_reviews
    (lv, item) = next(p for p in rv.queue_layered(v) if p[1].layer == "user")
    text = (user_vault.root / item.path).read_text().replace("<project path>", f"{v.root.parent}/x")
    from acpmem.core.errors import EntryInvalid
    from acpmem.read.layers import project_path_forms

    with pytest.raises(EntryInvalid, match="path of this project"):
        rv.decide(lv, item, "edit", text=text, forbid_paths=project_path_forms(v))
    assert (user_vault.root / item.path).is_file()


def test_an_ambiguous_prefix_names_the_candidates_and_their_layers(proj, user_vault):
    put(proj, "ub1234", "A project id that starts with u", "- x")
    put(user_vault, "u-b999", "A user id", "- y")
    v = Vault(proj.root)
    with pytest.raises(AmbiguousId) as exc:
        rv.find_layered(v, "u", [])
    assert "(project)" in exc.value.message or "(project)" in str(exc.value.matches)


# --------------------------------------------------------------------------------------------- show a proposal

def test_show_of_a_proposal_says_it_awaits_review_in_either_layer(user_reviews, user_vault, cli, tmp_path, clock,
                                                                  openai_server):
    v = user_reviews
    (u,) = [i for _, i in rv.queue_layered(v) if i.kind == "proposal"]
    r = cli("memory", "--vault", str(v.root), "show", u.id)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("Proposal awaiting review (user layer)") and f"acp memory review accept {u.id}" in first
    assert f"#{u.id} [" in r.stdout
    data = json.loads(cli("memory", "--vault", str(v.root), "show", u.id[:5], "--json").stdout)
    assert data["proposal"] is True and data["layer"] == "user" and data["accept"] == f"acp memory review accept {u.id}"
    # a project proposal too, and an entry's JSON has no proposal key
    set_toml(Vault(v.root), policy="review").close()
    w = Vault(v.root, clock=clock, rng=random.Random(99))     # another request id than the first fork's
    _fork_both(w, openai_server, session="s2", deploy="the release pipeline")   # a repeat would be dropped
    (p,) = [i for _, i in rv.queue_layered(w) if i.kind == "proposal" and i.layer == "project"]
    r = cli("memory", "--vault", str(v.root), "show", p.id)
    assert r.stdout.startswith("Proposal awaiting review (project layer)")
    assert "proposal" not in json.loads(cli("memory", "--vault", str(v.root), "show", "q7dec1", "--json").stdout)
    r = cli("memory", "--vault", str(v.root), "show", "zzzz99")
    assert r.returncode != 0 and "no entry" in r.stderr


# --------------------------------------------------------------------------------------------- consolidate

def test_consolidate_runs_per_layer_and_no_cluster_mixes_layers(proj, user_vault, cli):
    (a, a2), (b, b2), (c, c2) = DUPLICATES[0], DUPLICATES[2], DUPLICATES[3]
    put(proj, "pa0001", *a)
    put(user_vault, "u-a0002", *a2)          # a duplicate split across the layers: never one cluster
    put(proj, "pb0001", *b)
    put(proj, "pb0002", *b2)                 # a project pair
    put(user_vault, "u-c0001", *c)
    put(user_vault, "u-c0002", *c2)          # a user pair
    data = json.loads(cli("memory", "--vault", str(proj.root), "consolidate", "--dry-run", "--json").stdout)
    clusters = [set(c["ids"]) for c in data["clusters"]]
    assert {"pb0001", "pb0002"} in clusters
    assert all(not i.startswith("u-") for c in clusters for i in c)
    data = json.loads(cli("memory", "--vault", str(proj.root), "consolidate", "--user", "--dry-run", "--json").stdout)
    clusters = [set(c["ids"]) for c in data["clusters"]]
    assert {"u-c0001", "u-c0002"} in clusters
    assert all(i.startswith("u-") for c in clusters for i in c)


# --------------------------------------------------------------------------------------------- doctor and stats

def test_doctor_checks_the_user_vault_and_its_problems_are_warnings(proj, user_vault, cli):
    (user_vault.entries_dir / "u-bad001-broken.md").write_text("no front matter here\n")
    subprocess.run(["git", "-C", str(user_vault.root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(user_vault.root), "commit", "-qm", "a broken entry"], check=True)
    r = cli("memory", "--vault", str(proj.root), "doctor", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(r.stdout)
    mine = [f for f in data["findings"] if f["layer"] == "user"]
    assert data["ok"] is True and mine and all(f["level"] != "error" for f in mine)
    assert any("u-bad001-broken.md" in f["what"] and f["what"].startswith("user vault: ") for f in mine)
    assert all(f["layer"] in ("project", "user") for f in data["findings"])
    # the same broken file in the project vault is an error of the project
    (proj.entries_dir / "pbad01-broken.md").write_text("no front matter here\n")
    r = cli("memory", "--vault", str(proj.root), "doctor", "--json")
    assert r.returncode == 1
    assert any(f["level"] == "error" and f["layer"] == "project" for f in json.loads(r.stdout)["findings"])


def test_doctor_with_a_user_vault_that_is_not_a_git_repository(proj, user_vault, cli):
    import shutil

    shutil.rmtree(user_vault.root / ".git")
    r = cli("memory", "--vault", str(proj.root), "doctor", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    findings = json.loads(r.stdout)["findings"]
    assert any(f["layer"] == "user" and f["level"] == "warning" and "not a git repository" in f["what"]
               for f in findings)
    # review still works from the project, and says once why the user vault's items are missing
    r = cli("memory", "--vault", str(proj.root), "review", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["policies"] == {"project": "auto"}
    said = warnings_said(r.stderr)   # --json: the warning is a JSON object on its line
    assert len(said) == 1 and said[0].startswith("Warning: the user vault") and "not a git repository" in said[0]


def test_stats_reports_policy_and_proposals_per_layer(user_reviews, cli):
    v = user_reviews
    s = json.loads(cli("memory", "--vault", str(v.root), "stats", "--json").stdout)
    assert s["review"] == {"policy": "auto", "proposals": 0, "invalid_proposals": 0}
    assert s["user"]["review"] == {"policy": "review", "proposals": 1, "invalid_proposals": 0}
    text = cli("memory", "--vault", str(v.root), "stats").stdout
    assert "  write policy: review; 1 proposal(s) waiting for review" in text
    assert "Write policy (project layer): auto; 0 proposal(s)" in text



def test_the_readme_both_layers_example_runs_as_written(tmp_path):
    r = run_readme_sh("**Both layers.**", tmp_path)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert "Error" not in r.stderr and "Warning" not in r.stderr and '{"error"' not in r.stderr and not warnings_said(r.stderr)
    assert "[('user', 'proposal')]" in r.stdout
    assert re.search(r"^Proposal awaiting review \(user layer\).*acp memory review accept u-\w+", r.stdout, re.M)
    assert re.search(r"^Accepted proposal #u-\w+ in the user vault", r.stdout, re.M)
    assert "info     user vault: 1 valid entries" in r.stdout
    assert "  write policy: review; 0 proposal(s)" in r.stdout and "Write policy (project layer): auto" in r.stdout
    assert not (Path(os.environ["HOME"]) / ".acp-memory").exists()


def _propose(v: Vault, ident: str, title: str) -> None:
    from test_layers import make_entry

    e = make_entry(ident, title, f"- {title}.", typ="user-preference" if ident.startswith("u-") else "fact")
    v.write_entries([e.with_changes(path=v.path_for(ident, title, "proposals"))], subject=f"propose #{ident}",
                    why="test", kind="proposal")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(st.tuples(st.booleans(), st.sampled_from(["accept", "reject"])), min_size=1, max_size=5),
       order=st.randoms(use_true_random=False))
def test_any_mix_of_decisions_over_both_layers_lands_in_the_vault_of_each_item(tmp_path_factory, clock, plan, order,
                                                                               monkeypatch):
    base = tmp_path_factory.mktemp("mix")
    monkeypatch.setenv("ACPMEM_USER_VAULT", str(base / "me"))
    u = user_copy(base / "me", clock, seed=1)
    p = project(base, "proj", clock)
    made = []
    for n, (user, decision) in enumerate(plan):
        ident = f"u-m{n:04d}" if user else f"m{n:04d}x"
        _propose(u if user else p, ident, f"Proposal number {n}")
        made.append((ident, "user" if user else "project", decision))
    order.shuffle(made)
    counts = {r: int(git_out(v.root, "rev-list", "--count", "HEAD")) for r, v in (("user", u), ("project", p))}
    v = Vault(p.root, clock=clock)
    for ident, layer, decision in made:
        (d,) = rv.decide_ids(v, [ident], decision, reason="no" if decision == "reject" else None)
        assert d.layer == layer and d.id == ident
    want = {layer: sum(1 for _, lyr, _ in made if lyr == layer) for layer in ("user", "project")}
    for layer, vault in (("user", u), ("project", p)):
        assert int(git_out(vault.root, "rev-list", "--count", "HEAD")) == counts[layer] + want[layer]
        live = ids(Vault(vault.root))
        for ident, lyr, decision in made:
            assert (ident in live) == (lyr == layer and decision == "accept")
        assert not list((vault.root / "proposals").glob("*.md"))
    assert rv.queue_layered(Vault(p.root)) == []


def test_doctor_fix_repairs_the_user_vault_too(proj, user_vault, cli):
    (user_vault.root / "acpmem.toml").write_text((user_vault.root / "acpmem.toml").read_text() + "\n# mine\n")
    r = cli("memory", "--vault", str(proj.root), "doctor", "--fix", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    fixed = [f for f in json.loads(r.stdout)["findings"] if f["level"] == "fixed"]
    assert any(f["layer"] == "user" and "committed 1 human edit" in f["what"] for f in fixed)
    assert _kinds(user_vault.root) == ["human-edit"]


def test_remember_user_into_a_broken_user_vault_says_what_is_wrong(proj, user_vault, cli):
    import shutil

    shutil.rmtree(user_vault.root / ".git")
    head = _head(proj.root)
    r = cli("memory", "--vault", str(proj.root), "remember", "Short answers.", "-t", "user-preference", "-i", "5",
            "--user")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith(f"Error: the user vault {user_vault.root} is not a git repository; nothing was written")
    assert _head(proj.root) == head and not list(user_vault.entries_dir.glob("u-*short-answers*"))


# --------------------------------------------------------------------------------------------- log / forget of a proposal

def test_log_of_a_proposal_shows_its_history_in_either_layer_before_and_after_the_decision(user_reviews, user_vault,
                                                                                           cli):
    v = user_reviews
    (u,) = [i for _, i in rv.queue_layered(v) if i.kind == "proposal"]
    r = cli("memory", "--vault", str(v.root), "log", u.id, "--json")
    assert r.returncode == 0, r.stderr
    changes = json.loads(r.stdout)["changes"]
    assert [c["kind"] for c in changes] == ["proposal"] and changes[0]["paths"] == [u.path]
    r = cli("memory", "--vault", str(v.root), "log", u.id[:5])          # a prefix, text
    assert r.returncode == 0 and "proposal" in r.stdout and "no entry" not in r.stderr
    # rejected: its file is gone, its history stays readable by id
    assert cli("memory", "--vault", str(v.root), "review", "reject", u.id, "--reason", "not a habit").returncode == 0
    kinds = [c["kind"] for c in json.loads(cli("memory", "--vault", str(v.root), "log", u.id, "--json").stdout)
             ["changes"]]
    assert kinds == ["human-review", "proposal"]
    r = cli("memory", "--vault", str(v.root), "log", "zzzz99")
    assert r.returncode != 0 and "no entry" in r.stderr


def test_log_of_an_accepted_proposal_follows_it_back_to_the_proposal(user_reviews, user_vault, cli):
    v = user_reviews
    (u,) = [i for _, i in rv.queue_layered(v) if i.kind == "proposal"]
    assert cli("memory", "--vault", str(v.root), "review", "accept", u.id).returncode == 0
    kinds = [c["kind"] for c in json.loads(cli("memory", "--vault", str(v.root), "log", u.id, "--json").stdout)
             ["changes"]]
    assert kinds == ["human-review", "proposal"]


def test_forget_of_a_proposal_rejects_it_with_the_reason_like_review_reject(user_reviews, user_vault, cli):
    v = user_reviews
    (u,) = [i for _, i in rv.queue_layered(v) if i.kind == "proposal"]
    r = cli("memory", "--vault", str(v.root), "forget", u.id, "--reason", "")
    assert r.returncode != 0 and "reason" in r.stderr and (user_vault.root / u.path).exists()
    r = cli("memory", "--vault", str(v.root), "forget", u.id[:5], "--reason", "not a habit of mine")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Rejected proposal #{u.id}") and "(user layer" in r.stdout
    assert f"acp memory review reject {u.id}" in r.stdout
    assert not (user_vault.root / u.path).exists()
    body = git_out(user_vault.root, "log", "-1", "--format=%B")
    assert "Acpmem-Decision: reject" in body and "Acpmem-Reason: not a habit of mine" in body
    assert _kinds(user_vault.root) == ["human-review"]
    assert not [i for _, i in rv.queue_layered(v) if i.kind == "proposal"]
    r = cli("memory", "--vault", str(v.root), "forget", u.id, "--reason", "again")     # now gone: no entry
    assert r.returncode != 0 and "no entry" in r.stderr
    r = cli("memory", "--vault", str(v.root), "show", u.id)          # the error names what does find it ...
    assert r.returncode != 0 and "`acp memory log ID` shows the history of a forgotten entry or a rejected proposal" \
        in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("memory", "--vault", str(v.root), "log", u.id, "--json")  # ... and it does
    assert [c["kind"] for c in json.loads(r.stdout)["changes"]] == ["human-review", "proposal"]


def test_forget_of_a_project_proposal_as_json(proj, user_vault, openai_server, cli):
    set_toml(proj, policy="review").close()
    v = configure(proj, openai_server)
    _fork_both(v, openai_server)
    (p,) = [i for _, i in rv.queue_layered(v) if i.kind == "proposal" and i.layer == "project"]
    data = json.loads(cli("memory", "--vault", str(v.root), "forget", p.id, "--reason", "wrong", "--json").stdout)
    assert data == {"forgotten": p.id, "commit": data["commit"], "layer": "project", "proposal": True,
                    "decision": "reject"}
    assert _head(v.root).startswith(data["commit"][:12]) and not (v.root / p.path).exists()
    v.close()
