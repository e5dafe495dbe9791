"""Memory that follows the code's branches (``acpmem.vault.branches``): an entry learned on a project branch is
seen where that branch's work is — on the branch, its children, and the default branch once merged (a merge, a
squash merge, a rebase) — and decided by a person when the branch dies unmerged.

Real parts: real project git repositories with the vault at ``<project>/.acp-memory``, linked worktrees, a bare
remote for the project and one for the vault (two clones of each), the real console script, and a ``git`` on PATH
that logs each call before running the real git (to count the git processes of a per-turn read).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import launcher
from acpmem.core.entryfile import dump_entry, parse_entry
from acpmem.core.errors import EntryInvalid


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(proj: Path, name: str, text: str = "x\n") -> str:
    (proj / name).parent.mkdir(parents=True, exist_ok=True)
    (proj / name).write_text(text)
    _git(proj, "add", name)
    _git(proj, "commit", "-qm", f"add {name}")
    return _git(proj, "rev-parse", "HEAD")


@pytest.fixture
def proj(tmp_path, cli) -> Path:
    """A project on main with one commit and its vault at .acp-memory."""
    p = tmp_path / "proj"
    subprocess.run(["git", "init", "-q", "-b", "main", str(p)], check=True)
    _commit(p, "README.md", "readme\n")
    r = cli("memory", "init", cwd=p)
    assert r.returncode == 0, r.stderr
    return p


def _remember(cli, where: Path, text: str, *flags: str, env: dict | None = None) -> dict:
    r = cli("memory", "remember", text, "--json", *flags, cwd=where, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _meta(proj: Path, ident: str) -> dict:
    (path,) = (proj / ".acp-memory" / "entries").glob(f"{ident}*.md")
    return parse_entry(path.read_text(), str(path)).extra


def _listed(cli, where: Path, *flags: str, env: dict | None = None) -> set[str]:
    r = cli("memory", "list", "--json", *flags, cwd=where, env=env)
    assert r.returncode == 0, r.stderr
    return {e["id"] for e in json.loads(r.stdout)["entries"]}


def _prompt(cli, where: Path) -> str:
    r = cli("memory", "list", "--format", "prompt", cwd=where)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _recalled(cli, where: Path, query: str) -> set[str]:
    r = cli("memory", "recall", query, "--json", "--limit", "20", cwd=where)
    assert r.returncode == 0, r.stderr
    return {h["id"] for h in json.loads(r.stdout)["hits"]}


# --------------------------------------------------------------------------------------------- scoped at write

def test_an_entry_learned_on_a_branch_records_the_branch_and_commit_by_its_type(proj, cli):
    on_main = _remember(cli, proj, "The importer reads CSV with the csv module", "--type", "fact")
    assert on_main["branch"] is None and "branch" not in _meta(proj, on_main["id"])
    _git(proj, "checkout", "-qb", "feature/arrow")
    head = _commit(proj, "importer.py", "import pyarrow\n")
    fact = _remember(cli, proj, "The new importer uses pyarrow", "--type", "fact")
    assert fact["branch"] == "feature/arrow"
    assert _meta(proj, fact["id"]) == {"branch": "feature/arrow", "commit": head}
    pref = _remember(cli, proj, "Answer with the short version first", "--type", "user-preference")
    ref = _remember(cli, proj, "The pyarrow docs live at arrow.apache.org", "--type", "reference")
    assert "branch" not in _meta(proj, pref["id"]) and "branch" not in _meta(proj, ref["id"])
    glob = _remember(cli, proj, "We review every importer change", "--type", "decision", "--global")
    assert "branch" not in _meta(proj, glob["id"])
    forced = _remember(cli, proj, "The arrow docs link is pinned here", "--type", "reference", "--branch")
    assert _meta(proj, forced["id"])["branch"] == "feature/arrow"
    both = cli("memory", "remember", "x", "--branch", "--global", cwd=proj)
    assert both.returncode == 2 and both.stderr.startswith("Error: ") and both.stderr.count("\n") == 1
    # the setting chooses the types: none scoped
    toml = proj / ".acp-memory" / "acpmem.toml"
    toml.write_text(toml.read_text().replace('scoped = "decision,lesson,fact"', 'scoped = ""'))
    plain = _remember(cli, proj, "The importer logs each row it skips", "--type", "fact")
    assert "branch" not in _meta(proj, plain["id"])


def test_learned_before_the_branchs_first_commit_it_waits_for_that_commit(proj, cli):
    _git(proj, "checkout", "-qb", "feature")
    fresh = _remember(cli, proj, "The legacy_id column is dropped", "--type", "decision")
    meta = _meta(proj, fresh["id"])
    assert meta == {"branch": "feature", "commit": _git(proj, "rev-parse", "main"), "anchor": "next"}
    assert fresh["id"] in _listed(cli, proj)   # on its branch, by name
    _git(proj, "checkout", "-q", "main")
    assert fresh["id"] not in _listed(cli, proj)   # main holds the commit it was learned at, not the work
    _git(proj, "checkout", "-q", "feature")
    _commit(proj, "migrations/0002_drop_legacy_id.sql", "ALTER TABLE t DROP COLUMN legacy_id;\n")
    _git(proj, "checkout", "-q", "main")
    assert fresh["id"] not in _listed(cli, proj)
    _git(proj, "merge", "-q", "--no-ff", "feature", "-m", "merge feature")
    assert fresh["id"] in _listed(cli, proj)


def test_branch_and_anchor_are_checked_strictly_and_kept_as_written():
    base = "---\nid: e1\ntitle: t\ntype: fact\nimportance: 5\ncreated: 2026-11-29T12:00:00Z\n"
    text = base + "branch: feature/x\ncommit: 3f2a9c1\nanchor: next\n---\nbody\n"
    e = parse_entry(text, "entries/e1.md")
    assert e.extra == {"branch": "feature/x", "commit": "3f2a9c1", "anchor": "next"}
    assert dump_entry(e) == text
    for bad, field in (("branch: a b\n", "branch"), ("branch: ../x\n", "branch"), ("branch: x.lock\n", "branch"),
                       ("branch: [x]\n", "branch"), ("branch: x\ncommit: 3f2a9c1\nanchor: later\n", "anchor"),
                       ("anchor: next\ncommit: 3f2a9c1\n", "anchor")):
        with pytest.raises(EntryInvalid) as got:
            parse_entry(base + bad + "---\nbody\n", "entries/e1.md")
        assert got.value.field == field, bad


def test_the_default_branch_is_origins_head_else_init_default_else_main_else_master(tmp_path):
    from acpmem.vault.branches import default_branch

    p = tmp_path / "p"
    subprocess.run(["git", "init", "-q", "-b", "trunk", str(p)], check=True)
    _commit(p, "a")
    assert default_branch(p) is None                     # neither origin/HEAD, init.defaultBranch, main nor master
    _git(p, "branch", "master")
    assert default_branch(p) == "master"
    _git(p, "branch", "main")
    assert default_branch(p) == "main"
    _git(p, "config", "init.defaultBranch", "trunk")
    assert default_branch(p) == "trunk"
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(p), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "symbolic-ref", "HEAD", "refs/heads/master"], check=True)
    c = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(bare), str(c)], check=True)
    assert default_branch(c) == "master"                 # refs/remotes/origin/HEAD


# --------------------------------------------------------------------------------------------- seen where true

def test_done_when_invisible_on_main_visible_on_feature_its_children_and_after_a_merge(proj, cli):
    _git(proj, "checkout", "-qb", "feature")
    _commit(proj, "importer.py", "import pyarrow\n")
    e = _remember(cli, proj, "The new importer uses pyarrow for parquet files", "--type", "fact")["id"]
    assert e in _listed(cli, proj) and e in _recalled(cli, proj, "pyarrow importer")
    _git(proj, "checkout", "-q", "main")
    assert e not in _listed(cli, proj)
    assert e not in _recalled(cli, proj, "pyarrow importer")
    prompt = _prompt(cli, proj)
    assert "pyarrow" not in prompt
    assert "(1 entry learned on other branches hidden: its work is not in this checkout; " \
           "`acp memory list --all-branches` shows them)" in prompt
    listed = cli("memory", "list", cwd=proj).stdout
    assert "1 entry learned on other branches hidden" in listed
    hidden = json.loads(cli("memory", "list", "--json", cwd=proj).stdout)["hidden"]
    assert hidden["count"] == 1 and hidden["pending"] == 0
    assert e in _listed(cli, proj, "--all-branches")
    shown = cli("memory", "show", e, cwd=proj)
    assert shown.returncode == 0 and "pyarrow" in shown.stdout            # show shows everything
    s = cli("memory", "surface", "--session", "s1", "--json", cwd=proj)
    assert s.returncode == 0 and e not in {x["id"] for x in json.loads(s.stdout)["entries"]}
    # a child of feature, made after the entry was learned
    _git(proj, "checkout", "-qb", "feature-child", "feature")
    assert e in _listed(cli, proj)
    # a merge into main: seen there with no step by anyone
    _git(proj, "checkout", "-q", "main")
    _commit(proj, "CHANGELOG.md", "main moved on\n")
    _git(proj, "merge", "-q", "--no-ff", "feature", "-m", "merge feature")
    assert e in _listed(cli, proj) and "hidden" not in _prompt(cli, proj)


def test_a_squash_merge_brings_the_branchs_memory_into_main(proj, cli):
    _git(proj, "checkout", "-qb", "feature")
    _commit(proj, "src/a.py", "a = 1\n")
    e = _remember(cli, proj, "Module a holds the constant", "--type", "fact")["id"]
    _commit(proj, "src/a.py", "a = 2\n")    # the branch goes on changing the same file after the entry
    _commit(proj, "src/b.py", "b = 1\n")
    _git(proj, "checkout", "-q", "main")
    assert e not in _listed(cli, proj)
    _git(proj, "merge", "-q", "--squash", "feature")
    _git(proj, "commit", "-qm", "feature, squashed")
    assert e in _listed(cli, proj)           # the branch's whole change is in (its tip's files read the same)
    _git(proj, "branch", "-D", "feature")
    assert e in _listed(cli, proj)
    assert json.loads(cli("memory", "review", "--branches", "--json", cwd=proj).stdout)["orphans"] == []


def test_a_squash_merge_after_the_branch_is_deleted_still_counts(proj, cli):
    _git(proj, "checkout", "-qb", "feature")
    _commit(proj, "src/a.py", "a = 1\n")
    e = _remember(cli, proj, "Module a holds the constant", "--type", "fact")["id"]
    _git(proj, "checkout", "-q", "main")
    _git(proj, "merge", "-q", "--squash", "feature")
    _git(proj, "commit", "-qm", "feature, squashed")
    _git(proj, "branch", "-D", "feature")
    assert e in _listed(cli, proj)           # the learned-at commit's change reads the same in main


def test_a_rebased_branch_keeps_its_memory_and_brings_it_on_merge(proj, cli):
    _git(proj, "checkout", "-qb", "feature")
    before = _commit(proj, "src/a.py", "a = 1\n")
    e = _remember(cli, proj, "Module a holds the constant", "--type", "fact")["id"]
    _git(proj, "checkout", "-q", "main")
    _commit(proj, "docs.md", "docs\n")
    _git(proj, "checkout", "-q", "feature")
    _git(proj, "rebase", "-q", "main")
    assert _git(proj, "rev-parse", "HEAD") != before
    assert e in _listed(cli, proj)           # on its branch
    _git(proj, "checkout", "-qb", "child")
    assert e in _listed(cli, proj)           # a child of the rebased branch: equal patches (git cherry)
    _git(proj, "checkout", "-q", "main")
    assert e not in _listed(cli, proj)
    _git(proj, "merge", "-q", "--ff-only", "feature")
    _git(proj, "branch", "-D", "feature", "child")
    assert e in _listed(cli, proj)


def test_a_linked_worktree_writes_and_sees_its_own_branch(proj, cli, tmp_path):
    wt = tmp_path / "wt"
    _git(proj, "worktree", "add", "-q", "-b", "feature", str(wt))
    _commit(wt, "importer.py", "import pyarrow\n")
    env = {"ACPMEM_VAULT": str(proj / ".acp-memory")}
    e = _remember(cli, wt, "The worktree's importer uses pyarrow", "--type", "fact", env=env)
    assert _meta(proj, e["id"]) == {"branch": "feature", "commit": _git(wt, "rev-parse", "HEAD")}
    assert e["id"] in _listed(cli, wt, env=env)
    assert e["id"] not in _listed(cli, proj, env=env)      # the main work tree is on main


def test_per_turn_reads_run_no_git_at_an_unchanged_head_and_not_one_per_entry(proj, cli, tmp_path):
    _git(proj, "checkout", "-qb", "feature")
    _commit(proj, "a.py")
    vault = proj / ".acp-memory"
    head = _git(proj, "rev-parse", "HEAD")
    for i in range(12):   # written in one session: one commit
        (vault / "entries" / f"e{i:02d}.md").write_text(
            f"---\nid: e{i:02d}\ntitle: fact {i} of the feature\ntype: fact\nimportance: 5\n"
            f"created: 2026-11-29T12:00:00Z\nbranch: feature\ncommit: {head}\n---\nbody {i}\n")
    _git(proj, "checkout", "-q", "main")
    shim = tmp_path / "bin"
    shim.mkdir()
    log = tmp_path / "git-calls.log"
    (shim / "git").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {shutil.which("git")} "$@"\n')
    (shim / "git").chmod(stat.S_IRWXU)
    env = {"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    r = cli("memory", "list", "--format", "prompt", cwd=proj, env=env)
    assert r.returncode == 0 and "12 entries learned on other branches hidden" in r.stdout
    first = log.read_text().splitlines() if log.exists() else []
    assert 1 <= len([c for c in first if " merge-base " in f" {c} "]) <= 2   # one anchor: not one per entry
    log.unlink()
    for args in (("list", "--format", "prompt"), ("recall", "feature fact")):
        r = cli("memory", *args, cwd=proj, env=env)
        assert r.returncode == 0
    assert not log.exists() or not log.read_text().strip()   # the same HEAD: the cache answers
    # a commit on main: the verdicts carry over (is HEAD~ in HEAD, the new commits, the files they changed)
    _commit(proj, "unrelated.txt")
    r = cli("memory", "list", "--format", "prompt", cwd=proj, env=env)
    assert r.returncode == 0 and "12 entries learned on other branches hidden" in r.stdout
    calls = log.read_text().splitlines()
    assert len(calls) <= 3 and not [c for c in calls if " cherry " in f" {c} "], calls
    # to the branch and back: the verdicts at main are kept
    _git(proj, "checkout", "-q", "feature")
    assert "hidden" not in cli("memory", "list", "--format", "prompt", cwd=proj, env=env).stdout
    _git(proj, "checkout", "-q", "main")
    log.unlink()
    r = cli("memory", "list", "--format", "prompt", cwd=proj, env=env)
    assert "12 entries learned on other branches hidden" in r.stdout
    assert not log.exists() or not log.read_text().strip()


# --------------------------------------------------------------------------------------------- merge diff, dead

def test_diff_lists_what_a_merge_brings_into_the_base(proj, cli):
    _git(proj, "checkout", "-qb", "feature")
    _commit(proj, "a.py")
    e = _remember(cli, proj, "Module a is new on the feature", "--type", "fact")["id"]
    g = _remember(cli, proj, "We name modules by their role", "--type", "decision", "--global")["id"]
    _git(proj, "checkout", "-q", "main")
    doc = json.loads(cli("memory", "diff", "main..feature", "--json", cwd=proj).stdout)
    assert [x["id"] for x in doc["entries"]] == [e] and doc["branch_commit"] == _git(proj, "rev-parse", "feature")
    assert doc["entries"][0]["branch"] == "feature" and g not in {x["id"] for x in doc["entries"]}
    text = cli("memory", "diff", "main..feature", cwd=proj).stdout
    assert "brings 1 entry" in text and f"#{e}" in text
    _git(proj, "merge", "-q", "feature")
    assert json.loads(cli("memory", "diff", "main..feature", "--json", cwd=proj).stdout)["entries"] == []
    for bad in ("main", "main..", "main..nosuch"):
        r = cli("memory", "diff", bad, cwd=proj)
        assert r.returncode == 2 and r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, bad


def test_a_dead_branchs_entries_are_listed_and_decided_never_dropped_silently(proj, cli):
    _git(proj, "checkout", "-qb", "experiment")
    _commit(proj, "exp.py")
    keep = _remember(cli, proj, "The cache must be warmed before the first request", "--type", "lesson")["id"]
    drop = _remember(cli, proj, "The experiment stores rows in redis", "--type", "fact")["id"]
    _git(proj, "checkout", "-q", "main")
    _git(proj, "branch", "-D", "experiment")
    assert {keep, drop}.isdisjoint(_listed(cli, proj))       # nothing leaks into main
    doctor = cli("memory", "doctor", cwd=proj).stdout
    assert "2 entries were learned on a branch that is gone unmerged" in doctor
    orphans = json.loads(cli("memory", "review", "--branches", "--json", cwd=proj).stdout)["orphans"]
    assert {o["id"] for o in orphans} == {keep, drop} and all(o["branch"] == "experiment" for o in orphans)
    assert (proj / ".acp-memory" / "entries").glob(f"{drop}*.md")
    no_global = cli("memory", "review", "keep", keep, cwd=proj)
    assert no_global.returncode == 2 and "--global" in no_global.stderr
    kept = json.loads(cli("memory", "review", "keep", keep, "--global", "--json", cwd=proj).stdout)
    assert kept["decisions"][0]["decision"] == "keep"
    assert "branch" not in _meta(proj, keep) and keep in _listed(cli, proj)
    dropped = json.loads(cli("memory", "review", "drop", drop, "--json", cwd=proj).stdout)
    assert dropped["decisions"][0]["decision"] == "drop"
    assert not list((proj / ".acp-memory" / "entries").glob(f"{drop}*.md"))
    assert "experiment, which died unmerged" in _git(proj / ".acp-memory", "log", "-1", "--format=%B")
    assert json.loads(cli("memory", "review", "--branches", "--json", cwd=proj).stdout)["orphans"] == []
    assert "gone unmerged" not in cli("memory", "doctor", cwd=proj).stdout


# --------------------------------------------------------------------------------------------- a team

def test_two_clones_on_different_branches_each_see_their_own_branchs_memory(tmp_path, cli):
    code = tmp_path / "code.git"
    mem = tmp_path / "memory.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(code)], check=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(mem)], check=True)
    seed = tmp_path / "seed"
    subprocess.run(["git", "clone", "-q", str(code), str(seed)], check=True)
    _commit(seed, "README.md")
    _git(seed, "push", "-q", "origin", "main")
    assert cli("memory", "init", cwd=seed).returncode == 0
    _git(seed / ".acp-memory", "remote", "add", "origin", str(mem))
    assert cli("memory", "sync", cwd=seed).returncode == 0
    a, b = tmp_path / "alice", tmp_path / "bob"
    for p in (a, b):
        subprocess.run(["git", "clone", "-q", str(code), str(p)], check=True)
        subprocess.run(["git", "clone", "-q", str(mem), str(p / ".acp-memory")], check=True)
        (p / ".git" / "info" / "exclude").write_text(".acp-memory/\n")
    _git(a, "checkout", "-qb", "feature")
    _commit(a, "importer.py", "import pyarrow\n")
    _git(a, "push", "-q", "origin", "feature")
    ea = _remember(cli, a, "The new importer uses pyarrow", "--type", "fact")["id"]
    _git(b, "checkout", "-qb", "other")
    _commit(b, "exporter.py", "import csv\n")
    eb = _remember(cli, b, "The exporter writes CSV by hand", "--type", "fact")["id"]
    for p in (a, b, a):
        r = cli("memory", "sync", cwd=p)
        assert r.returncode == 0, r.stderr
    assert ea in _listed(cli, a) and eb not in _listed(cli, a)
    assert eb in _listed(cli, b) and ea not in _listed(cli, b)
    _git(b, "fetch", "-q", "origin")
    _git(b, "checkout", "-q", "-b", "feature", "origin/feature")    # Bob reviews Alice's branch
    assert ea in _listed(cli, b) and eb not in _listed(cli, b)
    # Alice's branch is merged upstream by squash and deleted; Bob's main, once pulled, sees its memory
    _git(a, "checkout", "-q", "main")
    _git(a, "merge", "-q", "--squash", "feature")
    _git(a, "commit", "-qm", "importer (squashed)")
    _git(a, "push", "-q", "origin", "main", ":feature")
    _git(b, "checkout", "-q", "main")
    _git(b, "branch", "-q", "-D", "feature")
    _git(b, "pull", "-q", "--prune", "origin", "main")
    assert ea in _listed(cli, b) and eb not in _listed(cli, b)


# --------------------------------------------------------------------------------------------- consolidate

def test_consolidate_never_merges_entries_of_different_branches_and_keeps_one_branchs_scope(proj, openai_server,
                                                                                            cli):
    """A merged entry is seen where all its members were: entries of different scopes are not merged (a merge with
    a global one would carry a branch's claim into main); entries of one branch merge into an entry of it."""
    import random

    from openai_server import reply
    from planted_duplicates import set_section
    from test_fork import configure

    from acpmem.core.entry import Entry
    from acpmem.upkeep.consolidate import consolidate
    from acpmem.vault.writer import Vault

    _git(proj, "checkout", "-qb", "feature")
    head = _commit(proj, "worker.py")
    v = Vault(proj / ".acp-memory", rng=random.Random(3))
    set_section(v.root, "consolidate", {"similarity": "lexical"})
    v = configure(v, openai_server)
    pairs = [("The worker drains the queue once per vault",
              "- One background worker per vault drains the pending queue and exits when it is empty."),
             ("One worker per vault drains the pending queue",
              "- A single background worker per vault drains the pending queue, then exits when empty.")]
    entries = []
    for n, (scope, (title, body)) in enumerate(zip(({"branch": "feature", "commit": head}, {}), pairs)):
        ident = f"w{n}"
        e = Entry(id=ident, title=title, type="fact", importance=5, created=f"2026-11-1{n}T12:00:00Z",
                  body=body + "\n", extra=scope)
        entries.append(e.with_changes(path=v.path_for(ident, title)))
    v.write_entries(entries, subject="two scopes", why="test")
    res = consolidate(v)
    assert [o.status for o in res.outcomes] == ["skipped"] and "different branches" in res.outcomes[0].error
    assert openai_server.requests == []
    # both on the branch: merged, and the merged entry is the branch's
    text = (v.root / entries[1].path).read_text()
    (v.root / entries[1].path).write_text(text.replace("tier: 3\n", f"tier: 3\nbranch: feature\ncommit: {head}\n"))
    openai_server.enqueue(reply.writes(reply.write("- One worker per vault drains the queue.", title="One worker")))
    res = consolidate(v)
    (done,) = res.outcomes
    assert done.status == "written", done
    assert _meta(proj, done.entry["id"])["branch"] == "feature"
    v.close()
    _git(proj, "checkout", "-q", "main")
    assert done.entry["id"] not in _listed(cli, proj)


def test_the_forks_entries_are_scoped_by_type_and_by_the_commits_branch_or_global(proj, cli):
    chat = Path(__file__).parent / "fixtures" / "transcripts" / "openai_chat.json"
    _git(proj, "checkout", "-qb", "feature")
    head = _commit(proj, "queue.py")

    def commit(seq: int, *flags: str, note: str = "the queue is sqlite") -> list[str]:
        r = cli("memory", "commit", "--type", "fact", "--note", note, "--importance", "4",
                "--session", "s-b", "--seq", str(seq), "--transcript", str(chat), "--extractor", "offline",
                "--wait", "--json", *flags, cwd=proj)
        assert r.returncode == 0, r.stderr
        return [e["id"] for e in json.loads(r.stdout)["outcome"]["entries"]]

    (scoped,) = commit(1)
    assert _meta(proj, scoped)["branch"] == "feature" and _meta(proj, scoped)["commit"] == head
    # another note: an exact repeat of the offline extractor's entry is not written twice
    globals_ = commit(2, "--global", note="the queue's worker is one process per vault")
    assert globals_ and all("branch" not in _meta(proj, i) for i in globals_)
    both = cli("memory", "commit", "--type", "fact", "--note", "n", "--importance", "4", "--session", "s-b",
               "--seq", "3", "--transcript", str(chat), "--branch", "--global", cwd=proj)
    assert both.returncode == 2 and both.stderr.startswith("Error: ")


def test_the_mcp_tools_serve_only_what_the_checkout_holds(proj, cli):
    """The MCP server (a real stdio session with the mcp client): memory_recall and the index resource on main
    leave out the entry learned on feature, and serve it on feature."""
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    _git(proj, "checkout", "-qb", "feature")
    _commit(proj, "importer.py")
    e = _remember(cli, proj, "The new importer reads parquet files with pyarrow", "--type", "fact")["id"]

    def served() -> tuple[str, str]:
        got = {}
        exe = launcher.acp()   # a real server process without a fresh interpreter (tests/support/launcher.py)
        params = StdioServerParameters(command=str(exe), args=["memory", "serve"], cwd=str(proj),
                                       env={k: v for k, v in os.environ.items() if k != "ACPMEM_VAULT"})

        async def main():
            with open(os.devnull, "w") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write):
                    async with ClientSession(read, write) as s:
                        await s.initialize()
                        got["recall"] = (await s.call_tool("memory_recall", {"query": "pyarrow parquet"})
                                         ).content[0].text
                        got["index"] = (await s.read_resource("memory://index")).contents[0].text

        anyio.run(main)
        return got["recall"], got["index"]

    recall, index = served()
    assert f"#{e}" in index and "pyarrow" in recall
    _git(proj, "checkout", "-q", "main")
    recall, index = served()
    assert f"#{e}" not in index and "pyarrow" not in recall
    assert "1 entry learned on other branches hidden" in index


def test_confirming_a_pending_entry_anchors_it_at_the_confirmed_commit(proj, cli):
    _git(proj, "checkout", "-qb", "feature")
    base = _git(proj, "rev-parse", "HEAD")
    (proj / ".acp-memory" / "entries" / "p1.md").write_text(
        "---\nid: p1\ntitle: The reader is streaming\ntype: fact\nimportance: 5\ncreated: 2026-11-29T12:00:00Z\n"
        f"files: [README.md]\nbranch: feature\ncommit: {base}\nanchor: next\n---\nbody\n")
    _commit(proj, "README.md", "changed\n")
    r = cli("memory", "review", "confirm", "p1", cwd=proj)
    assert r.returncode == 0, r.stderr
    assert _meta(proj, "p1") == {"files": ["README.md"], "branch": "feature", "commit": _git(proj, "rev-parse", "HEAD")}
