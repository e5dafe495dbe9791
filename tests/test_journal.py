"""The journal of a write, exactly once: a fork write killed between its files and its commit is written once (project
vault, user vault, both layers); a journal left after its commit never overwrites what a person edited or committed
since; a malformed journal is set aside with its path named, never a wedge; ``consolidate`` never merges a cluster
twice; deleting ``.acpmem/`` while a write runs loses no acknowledged write.

Real processes killed with SIGKILL at a chosen step (``tests/support/crashpoints.py``; each forked from a process that
imported acpmem once, ``crashpoints.forked``), real git, the real command line.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import crashpoints as cp
import launcher
from conftest import fresh_vault
from helpers_proc import copy_tree, fsck, git_out, leftovers, make_entry, status_porcelain, wait_until
from openai_server import reply
from test_fork import configure

from acpmem.vault.create import init_vault
from acpmem.vault.writer import Vault
from acpmem.write.requests import pending_dir

CHAT = Path(__file__).parent / "fixtures" / "transcripts" / "openai_chat.json"
ACP = Path(sys.executable).parent / "acp"


def acp(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``acp memory --vault ROOT ARGS`` (never killed) in a process that imported acpmem once and runs plain
    commands one after another (``crashpoints.inline``)."""
    full = {**os.environ, "ACPMEM_NO_WATCH": "1", **(env or {})}
    r = cp.inline(["memory", "--vault", str(root), *args], env=full)
    return subprocess.CompletedProcess(args, r.code, r.out, r.err)


def init_user() -> None:
    r = cp.inline(["memory", "init", "--user"], no_watch=False)
    assert r.code == 0, r.err


def commit_args(root: Path, note: str, typ: str = "fact", extractor: str = "offline") -> list[str]:
    return ["memory", "--vault", str(root), "commit", "--wait", "--extractor", extractor, "--type", typ, "--note",
            note, "--importance", "4", "--session", "s-k", "--seq", "6", "--transcript", str(CHAT)]


def request_commits(root: Path) -> list[str]:
    return git_out(root, "log", "--format=%(trailers:key=Acpmem-Request,valueonly)").split()


def live_entries_of(root: Path, request: str) -> list[str]:
    v = Vault(root)
    try:
        return [e.id for e in v.load(with_reads=False).live() if (e.source or {}).get("request") == request]
    finally:
        v.close()


def pending(root: Path) -> list[str]:
    return sorted(p.stem for p in pending_dir(root / ".acpmem").glob("r-*.json"))


@pytest.fixture
def base(tmp_path, clock):
    v = fresh_vault(tmp_path / "vault", clock)
    for ident, title in (("base01", "The queue is drained by one worker per vault"),
                         ("base02", "Deploys run from release branches")):
        v.write_entries([make_entry(ident, title, f"- {title}.").with_changes(path=v.path_for(ident, title))],
                        subject=f"add #{ident}", why="test")
    root = v.root
    v.close()
    return root


# --------------------------------------------------------------------------------------------- a fork write, once

@pytest.mark.parametrize("layer", ["project", "user"])
def test_a_fork_write_killed_between_its_file_and_its_commit_is_written_once(layer, base, tmp_path, monkeypatch):
    """The reported duplicate: `commit --wait` killed after its journal and entry file, before its commit; the next
    `extract --pending` wrote the entry again — two commits with the same Acpmem-Request, two live entries."""
    target = base
    if layer == "user":
        user = tmp_path / "me" / ".acp-memory"
        monkeypatch.setenv("ACPMEM_USER_VAULT", str(user))
        init_user()
        target = user
    r = cp.forked(commit_args(base, "the queue worker", "user-preference" if layer == "user" else "fact"),
               inside=[base, target], after=f"rename {target}/entries/")
    assert r.killed, r.err
    assert (target / ".git" / "acpmem" / "journal.json").exists()
    (rid,) = pending(base)
    assert rid not in request_commits(target)

    r = acp(base, "extract", "--pending")
    assert r.returncode == 0, r.stdout + r.stderr
    assert request_commits(target).count(rid) == 1
    assert len(live_entries_of(target, rid)) == 1
    assert pending(base) == [] and not (target / ".git" / "acpmem" / "journal.json").exists()
    assert status_porcelain(target) == "" and fsck(target).returncode == 0


SIMILAR = "habits and deploys: make ship runs from the release branch after the tests pass and the diff is read"


@pytest.mark.parametrize("killed_in,texts", [
    ("user", ("- The person reviews diffs before pushing.", "- acme deploys with make ship.")),
    ("project", ("- The person reviews diffs before pushing.", "- acme deploys with make ship.")),
    # the two parts near the same: the rerun was shown the user part it had just written as related, and dropped
    # the project part as a repeat of it
    ("user", (f"- The person's {SIMILAR}.", f"- acme's {SIMILAR}."))])
def test_a_two_layer_fork_write_killed_in_either_part_is_written_once(killed_in, texts, base, tmp_path, monkeypatch,
                                                                      openai_server):
    user = tmp_path / "me" / ".acp-memory"
    monkeypatch.setenv("ACPMEM_USER_VAULT", str(user))
    init_user()
    configure(Vault(base), openai_server).close()
    git_out(base, "commit", "-qam", "point at the model")
    openai_server.enqueue(reply.always(reply.writes(
        reply.call("memory_write", {"content": texts[0], "layer": "user"}),
        reply.call("memory_write", {"content": texts[1], "layer": "project"}))))
    target = user if killed_in == "user" else base
    r = cp.forked(commit_args(base, "habits and deploys", "lesson", "llm"), inside=[base, user],
               after=f"rename {target}/entries/")
    assert r.killed, r.err
    (rid,) = pending(base)
    r = acp(base, "extract", "--pending")
    assert r.returncode == 0, r.stdout + r.stderr
    for root in (user, base):
        assert request_commits(root).count(rid) == 1, root
        assert len(live_entries_of(root, rid)) == 1, root
        assert status_porcelain(root) == "" and not (root / ".git" / "acpmem" / "journal.json").exists()


# --------------------------------------------------------------------------------------------- a stale journal

def _edit_killed_after_its_commit(base: Path, tmp_path: Path) -> tuple[str, str]:
    """`edit base01 --from FILE` killed after its commit, before it removed its journal; the entry's path and the
    edited text."""
    path = next(p for p in git_out(base, "ls-files", "entries").split() if "base01" in p)
    text = (base / path).read_text() + "- The worker exits when the queue is empty.\n"
    new = tmp_path / "edited.md"
    new.write_text(text)
    r = cp.forked(["memory", "--vault", str(base), "edit", "base01", "--from", str(new), "-m", "more"], inside=[base],
               after="libgit2 commit")
    assert r.killed, r.err
    assert "The worker exits" in git_out(base, "show", f"HEAD:{path}")
    assert (base / ".git" / "acpmem" / "journal.json").exists()
    return path, text


@pytest.mark.parametrize("then", ["remember", "doctor --fix"])
def test_a_stale_journal_keeps_a_persons_uncommitted_edit(then, base, tmp_path):
    path, text = _edit_killed_after_its_commit(base, tmp_path)
    mine = text + "- A person's own line, not committed yet.\n"
    (base / path).write_text(mine)
    r = acp(base, *(["remember", "Another fact.", "--type", "fact", "--importance", "3"] if then == "remember"
                    else ["doctor", "--fix"]))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (base / path).read_text() == mine
    assert git_out(base, "show", f"HEAD:{path}") == mine        # committed as the person's edit
    assert not (base / ".git" / "acpmem" / "journal.json").exists()
    assert status_porcelain(base) == "" and leftovers(base) == []


def test_a_stale_journal_never_reverts_a_newer_commit(base, tmp_path):
    path, text = _edit_killed_after_its_commit(base, tmp_path)
    newer = text.replace("exits when", "stops when")
    (base / path).write_text(newer)
    git_out(base, "commit", "-qam", "a person's own commit")
    head = git_out(base, "rev-parse", "HEAD").strip()
    r = acp(base, "remember", "Another fact.", "--type", "fact", "--importance", "3")
    assert r.returncode == 0, r.stderr
    assert git_out(base, "show", f"HEAD:{path}") == newer and (base / path).read_text() == newer
    assert git_out(base, "rev-parse", "HEAD~1").strip() == head  # one commit: the remember
    assert "The worker exits" not in git_out(base, "log", "-p", "-1")


def test_a_journal_killed_before_its_commit_yields_to_a_later_hand_edit(base, tmp_path):
    """Killed between its file and its commit, then a person edits that file: the person's text wins, nothing of the
    killed change is committed, and a note says so."""
    path = next(p for p in git_out(base, "ls-files", "entries").split() if "base01" in p)
    new = tmp_path / "edited.md"
    new.write_text((base / path).read_text() + "- killed edit.\n")
    r = cp.forked(["memory", "--vault", str(base), "edit", "base01", "--from", str(new)], inside=[base],
               after=f"rename {base}/{path}")
    assert r.killed, r.err
    mine = (base / path).read_text().replace("- killed edit.\n", "- the person's line.\n")
    (base / path).write_text(mine)
    r = acp(base, "forget", "base02", "--reason", "gone")
    assert r.returncode == 0, r.stderr
    assert "dropped an interrupted change" in r.stderr and path in r.stderr
    assert git_out(base, "show", f"HEAD:{path}") == mine
    assert "killed edit" not in git_out(base, "log", "-p")


# --------------------------------------------------------------------------------------------- a malformed journal

BAD_JOURNALS = {
    "empty object": "{}",
    "wrong types": json.dumps({"writes": ["entries/x.md"], "deletes": {}, "subject": 1, "why": None,
                               "trailers": []}),
    "dotdot path": json.dumps({"writes": {"../outside.md": "x"}, "deletes": [], "subject": "s", "why": "w",
                               "trailers": {"Acpmem-Kind": "edit"}}),
    "absolute path": json.dumps({"writes": {}, "deletes": ["/etc/hostname"], "subject": "s", "why": "w",
                                 "trailers": {"Acpmem-Kind": "forget"}}),
    "git folder": json.dumps({"writes": {".git/config": "x"}, "deletes": [], "subject": "s", "why": "w",
                              "trailers": {"Acpmem-Kind": "edit"}}),
    "cut short": '{"writes": {"entries/a.md": "---\\nid: a',
    "not a dict": "[1, 2]",
    "a FIFO": None,      # reading it would wait for a writer forever
    "a folder": None,
}


@pytest.mark.parametrize("name", sorted(BAD_JOURNALS))
def test_a_malformed_journal_is_named_and_set_aside_never_a_wedge(name, base, tmp_path):
    jp = base / ".git" / "acpmem" / "journal.json"
    if name == "a FIFO":
        os.mkfifo(jp)
    elif name == "a folder":
        jp.mkdir()
    else:
        jp.write_text(BAD_JOURNALS[name])
    before = git_out(base, "rev-parse", "HEAD").strip()
    r = acp(base, "doctor")
    assert r.returncode != 0 and "journal" in r.stdout + r.stderr
    if name != "cut short":
        assert "malformed" in r.stdout + r.stderr, r.stdout
    r = acp(base, "remember", "A fact after the bad journal.", "--type", "fact", "--importance", "3")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert str(jp) in r.stderr and "Warning:" in r.stderr
    assert not os.path.lexists(jp) and len(list(jp.parent.glob("journal.json.bad-*"))) == 1
    assert git_out(base, "rev-list", "--count", f"{before}..HEAD").strip() == "1"
    assert not (tmp_path / "outside.md").exists() and "x" != (base / ".git" / "config").read_text()
    r = acp(base, "doctor", "--fix")
    assert r.returncode == 0, r.stdout + r.stderr
    assert acp(base, "forget", "base02", "--reason", "later").returncode == 0


# --------------------------------------------------------------------------------------------- consolidate, once

def test_a_supersede_from_a_stale_read_is_refused_once_another_writer_superseded_it(base, clock):
    """Two consolidate runs overlap: both read the cluster, the first merges it. The second's "changed while
    updating" check must see the superseded_by the first set."""
    v = Vault(base, clock=clock)
    stale = v.resolve("base01")                     # read before the other writer's commit (from the catalog)
    other = Vault(base, clock=clock)
    a = make_entry("mrg001", "Merged first", "- first merge.").with_changes(supersedes=("base01",))
    other.write_entries([a.with_changes(path=other.path_for("mrg001", a.title))],
                        updates=[other.resolve("base01").with_changes(superseded_by="mrg001")], subject="m1",
                        why="t", kind="consolidate")
    other.close()
    b = make_entry("mrg002", "Merged second", "- second merge.").with_changes(supersedes=("base01",))
    with pytest.raises(Exception, match="changed while"):
        v.write_entries([b.with_changes(path=v.path_for("mrg002", b.title))],
                        updates=[stale.with_changes(superseded_by="mrg002")], subject="m2", why="t", kind="consolidate")
    v.close()
    v = Vault(base)
    assert v.resolve("base01").superseded_by == "mrg001" and "mrg002" not in {e.id for e in v.load().entries}
    v.close()


def test_consolidate_killed_after_its_merged_entry_and_rerun_merges_once(tmp_path, clock, openai_server):
    from test_consolidate import DUPLICATES

    v = init_vault(tmp_path / "vault", clock=clock, rng=random.Random(9))
    group = DUPLICATES[2]
    entries = []
    for i, (title, body) in enumerate(group):
        ident = f"dup00{i}"
        entries.append(make_entry(ident, title, body).with_changes(path=v.path_for(ident, title)))
    v.write_entries(entries, subject="planted", why="test")
    configure(v, openai_server).close()
    root = v.root
    git_out(root, "commit", "-qam", "point at the model")
    openai_server.enqueue(reply.always(reply.writes(reply.write("- One worker per vault drains the queue.",
                                                                title="One worker drains the queue"))))
    # the merged entry's file is written (the first file after the journal), the members not yet marked
    r = cp.forked(["memory", "--vault", str(root), "consolidate"], inside=[root], after=f"rename {root}/entries/")
    assert r.killed, r.err
    r = acp(root, "consolidate", "--json")
    assert r.returncode == 0, r.stderr
    v = Vault(root)
    merged = [e for e in v.load().entries if e.supersedes]
    assert len(merged) == 1, [(e.id, e.supersedes) for e in merged]
    assert {e.superseded_by for e in v.load().entries if not e.supersedes} == {merged[0].id}
    v.close()
    assert status_porcelain(root) == "" and fsck(root).returncode == 0


# --------------------------------------------------------------------------------------------- deleting .acpmem/

DELETE_AND_WRITE = r"""
import shutil as _shutil, subprocess as _subprocess
_root = _sys.argv[3]
_step = int(_os.environ["ACPMEM_TEST_DELETE_AT"])
_done = [False]
def _deleting(event, args):
    # runs after the counting hook: when it has just counted step k (about to happen), .acpmem/ goes and a second
    # writer starts, running beside this one
    if _busy[0] or _done[0] or len(_steps) != _step:
        return
    _done[0] = _busy[0] = True
    try:
        _shutil.rmtree(_os.path.join(_root, ".acpmem"), ignore_errors=True)
        _subprocess.Popen(["sh", "-c", '"$0" memory --vault "$1" remember "Written while the other ran." --type fact '
                           '--importance 3 >"$2.out" 2>&1; echo $? >"$2"', _os.environ["ACPMEM_TEST_ACP"], _root,
                           _os.environ["ACPMEM_TEST_OTHER"]], start_new_session=True)
    finally:
        _busy[0] = False
_sys.addaudithook(_deleting)
"""


DEBUG = """
import acpmem.vault.writer as _w, traceback as _tb
_orig = _w.storage_error
def _se(exc, outcome):
    _tb.print_exception(exc)
    return _orig(exc, outcome)
_w.storage_error = _se
"""


def test_deleting_acpmem_at_every_step_of_a_write_loses_no_acknowledged_write(base, tmp_path):
    """`.acpmem/` deleted at each step of a `remember` while another writer runs to completion in that moment: both
    writes that were acknowledged are in HEAD, none is lost, neither ends in an internal error, and the vault takes
    the next write."""
    probe = cp.forked(["memory", "--vault", str(base), "remember", "Probe.", "--type", "fact", "--importance", "3"],
                   inside=[base], count=True, cwd=tmp_path)
    assert probe.code == 0, probe.err
    git_out(base, "reset", "-q", "--hard", "HEAD~1")
    n = len(probe.steps)
    template = tmp_path / "template"
    copy_tree(base, template)
    for k in range(1, n + 1):
        root = tmp_path / f"v{k}"
        copy_tree(template, root)
        other = tmp_path / f"other{k}.txt"
        # the second writer: an `acp` forked from the launch server (``tests/support/launcher.py``: a real process
        # of its own, started as a shell starts it, without an interpreter start-up of its own)
        env = {**os.environ, "ACPMEM_TEST_DELETE_AT": str(k), "ACPMEM_TEST_ACP": launcher.acp(),
               "ACPMEM_TEST_OTHER": str(other), "ACPMEM_DEBUG": "1"}
        r = cp.forked(["memory", "--vault", str(root), "remember", "Written by the first writer.", "--type", "fact",
                    "--importance", "3"], inside=[root], env=env,
                   prelude=DELETE_AND_WRITE + DEBUG)
        assert "Traceback" not in r.err and "internal error" not in r.err, (k, r.err)
        wait_until(other.exists)
        log = git_out(root, "log", "-p")
        if r.code == 0:
            assert "Written by the first writer." in log, (k, r.out)
        else:
            assert r.err.strip().startswith("Error:") and len(r.err.strip().splitlines()) == 1, (k, r.err)
        said = Path(f"{other}.out").read_text()
        assert "internal error" not in said and "Traceback" not in said, (k, said)
        if other.read_text().strip() == "0":
            assert "Written while the other ran." in log, (k, said)
        assert acp(root, "forget", "base02", "--reason", "after").returncode == 0, k
        assert status_porcelain(root) == "" and fsck(root).returncode == 0, k
        texts = [p.read_text() for p in (root / "entries").glob("*.md")]
        assert sum("Written by the first writer." in t for t in texts) == (1 if r.code == 0 else 0), \
            (k, probe.steps[k - 1], r.err, said)
        assert sum("Written while the other ran." in t for t in texts) <= 1, k
        shutil.rmtree(root)


def test_a_fork_write_killed_at_each_step_after_its_journal_then_acpmem_deleted_is_written_once(base, tmp_path):
    """A kill *and* a person deleting `.acpmem/` between a fork's journal and its commit: the journal lives beside
    the queue in `.git/acpmem/`, so the next `extract --pending` finishes (or finds) that write — one commit with
    the request, one live entry — instead of committing the orphaned file as a human edit and writing it again."""
    template = tmp_path / "template"
    copy_tree(base, template)
    probe_root = tmp_path / "probe"
    copy_tree(template, probe_root)
    probe = cp.forked(commit_args(probe_root, "the queue worker"), inside=[probe_root], count=True,
                   cwd=tmp_path)
    assert probe.code == 0, probe.err
    steps = probe.steps
    first = next(i for i, s in enumerate(steps, 1) if s.endswith("/journal.json") and s.startswith("rename"))
    last = next(i for i, s in enumerate(steps, 1) if s.endswith("/journal.json") and s.startswith("remove"))
    points = [k for k in cp.distinct_points(steps, probe.sites, probe_root) if first < k <= last + 1]
    assert len(points) >= 8, points           # the entry file, MEMORY.md, the commit's own steps, the removal
    for k in points:
        root = tmp_path / f"k{k}"
        copy_tree(template, root)
        r = cp.forked(commit_args(root, "the queue worker"), inside=[root], at=k, cwd=tmp_path)
        assert r.killed, (k, steps[k - 1], r.err)
        (rid,) = pending(root)
        shutil.rmtree(root / ".acpmem")
        r = acp(root, "extract", "--pending")
        assert r.returncode == 0, (k, steps[k - 1], r.stdout + r.stderr)
        assert request_commits(root).count(rid) == 1, (k, steps[k - 1])
        assert len(live_entries_of(root, rid)) == 1, (k, steps[k - 1])
        assert pending(root) == [] and not (root / ".git" / "acpmem" / "journal.json").exists(), k
        assert status_porcelain(root) == "" and fsck(root).returncode == 0, k
        shutil.rmtree(root)


def test_a_journal_an_older_acpmem_left_in_acpmem_is_finished_from_there(base):
    """An older acpmem kept the journal in `.acpmem/journal.json`: the next write moves it beside the queue and
    finishes it (exactly once), and `doctor` names it before that."""
    v = Vault(base)
    e = make_entry("old001", "Written by an older acpmem", "- An older acpmem wrote this.")
    e = e.with_changes(path=v.path_for(e.id, e.title))
    from acpmem.core.entryfile import new_entry_text
    text = new_entry_text(e)
    (base / e.path).write_text(text)
    (base / ".acpmem" / "journal.json").write_text(json.dumps({
        "writes": {e.path: text}, "deletes": [], "subject": "add an entry", "why": "an older acpmem was killed",
        "trailers": {"Acpmem-Kind": "fork-write"}}))
    v.close()
    r = acp(base, "doctor")
    assert r.returncode == 1 and "interrupted" in r.stdout + r.stderr, r.stdout + r.stderr
    r = acp(base, "remember", "A newer write.", "--type", "fact", "--importance", "3")
    assert r.returncode == 0, r.stderr
    assert not (base / ".acpmem" / "journal.json").exists()
    assert not (base / ".git" / "acpmem" / "journal.json").exists()
    log = git_out(base, "log", "--format=%s")
    assert log.splitlines()[1] == "acpmem: fork-write: add an entry" and log.count("add an entry") == 1, log
    assert status_porcelain(base) == ""


def test_a_request_is_still_known_as_done_after_acpmem_is_deleted(base):
    """The log of finished requests lives beside the queue: `extract ID` of a request written before `.acpmem/`
    was deleted says it is already done (with its commit), never that it does not exist."""
    r = acp(base, *commit_args(base, "the queue worker")[3:], "--json")
    assert r.returncode == 0, r.stderr
    rid = json.loads(r.stdout)["request"]
    (sha,) = [line.split()[0] for line in git_out(base, "log", "--format=%H %(trailers:key=Acpmem-Request,valueonly)")
              .splitlines() if line.endswith(rid)]
    shutil.rmtree(base / ".acpmem")
    r = acp(base, "extract", rid)
    assert r.returncode == 0 and "already done" in r.stdout and sha[:12] in r.stdout, r.stdout + r.stderr
