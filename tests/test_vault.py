"""The vault: discovery, init, reading with bad files skipped, commits, human edits, forget, log, reads, doctor."""
from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from acpmem.upkeep import doctor as health
from acpmem.vault import history, readlog, reader
from acpmem.core.errors import AmbiguousId, EntryNotFound, GitStateError, VaultExists, VaultNotFound
from acpmem.core.entry import Citation, Entry
from acpmem.core.entryfile import parse_entry
from acpmem.vault.writer import KIND_FORK, Vault
from acpmem.vault.discovery import discover
from acpmem.vault.create import init_vault


def g(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def make(v: Vault, title: str, body: str = "- a fact\n", typ: str = "fact", imp: int = 5, **kw) -> Entry:
    ident = v.new_id()
    e = Entry(id=ident, title=title, type=typ, importance=imp, created=v.now(), body=body,
              citation=(Citation("s1", 3),), source={"request": "r-test", "extractor": "test"}, **kw)
    return e.with_changes(path=v.path_for(ident, title))


def write(v: Vault, *entries: Entry) -> str:
    return v.write_entries(list(entries), subject="test write", why="because a test said so", kind=KIND_FORK)


# --------------------------------------------------------------------------------------------- discovery, init

def test_discovery_order(tmp_path, monkeypatch):
    a = init_vault(tmp_path / "proj" / ".acp-memory").root
    b = init_vault(tmp_path / "other").root
    deep = tmp_path / "proj" / "src" / "pkg"
    deep.mkdir(parents=True)
    assert discover(cwd=deep) == a                                   # nearest .acp-memory walking up
    monkeypatch.setenv("ACPMEM_VAULT", str(b))
    assert discover(cwd=deep) == b                                   # the environment beats walking up
    assert discover(str(a), cwd=deep) == a                           # --vault beats the environment
    monkeypatch.delenv("ACPMEM_VAULT")
    with pytest.raises(VaultNotFound) as ei:
        discover(cwd=tmp_path)
    assert "acp memory init" in str(ei.value)
    with pytest.raises(VaultNotFound):
        discover(str(tmp_path / "nothing-here"))


def test_init_creates_own_repo_and_excludes_it_from_the_workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    v = init_vault(cwd=ws)
    assert v.root == ws / ".acp-memory"
    assert g(v.root, "rev-parse", "--show-toplevel").strip() == str(v.root)
    assert g(v.root, "log", "--format=%s").strip() == "acpmem: init: create the vault"
    tracked = set(g(v.root, "ls-files").split())
    assert {"README.md", "acpmem.toml", "MEMORY.md", ".gitattributes", ".gitignore"} <= tracked
    assert "/.acp-memory/" in (ws / ".git" / "info" / "exclude").read_text()
    assert g(ws, "status", "--porcelain") == ""                      # the workspace does not see the vault
    with pytest.raises(VaultExists):
        init_vault(cwd=ws)


def test_init_deep_in_a_workspace_through_a_link_or_a_worktree_is_excluded_there_too(tmp_path):
    """The workspace is looked for from where git looks (the real folder above the vault, any depth up): a vault
    made deep inside one, through a symbolic link into one, or in a linked worktree (``.git`` a file) is listed in
    the workspace's own exclude file; outside any workspace nothing is written anywhere."""
    ws = tmp_path / "ws"
    (ws / "a" / "b").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(ws)], check=True)
    subprocess.run(["git", "-C", str(ws), "commit", "-q", "--allow-empty", "-m", "start"], check=True)
    exclude = ws / ".git" / "info" / "exclude"
    init_vault(ws / "a" / "b" / "deep").close()
    assert "/a/b/deep/" in exclude.read_text()
    (tmp_path / "link").symlink_to(ws / "a")
    init_vault(tmp_path / "link" / "linked").close()
    assert "/a/linked/" in exclude.read_text()
    subprocess.run(["git", "-C", str(ws), "worktree", "add", "-q", str(tmp_path / "wt")], check=True)
    init_vault(tmp_path / "wt" / "inwt").close()
    assert "/inwt/" in exclude.read_text()    # the common git folder's exclude, which every worktree reads
    assert g(tmp_path / "wt", "status", "--porcelain") == "" and g(ws, "status", "--porcelain") == ""
    alone = tmp_path / "alone"
    before = exclude.read_text()
    init_vault(alone / "v").close()
    assert exclude.read_text() == before and not (alone / ".git").exists()


def test_init_example_seeds_realistic_entries(tmp_path):
    v = init_vault(tmp_path / "ex", example=True)
    entries = v.load().entries
    assert 8 <= len(entries) <= 12
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in e.title) for e in entries)
    assert len({e.type for e in entries}) >= 4
    assert g(v.root, "status", "--porcelain") == ""
    assert "example entries" in g(v.root, "log", "-1", "--format=%s")


# --------------------------------------------------------------------------------------------- reading

def test_bad_files_are_reported_and_skipped_never_fatal(vault):
    write(vault, make(vault, "A good entry"))
    bad = vault.entries_dir / "broken.md"
    bad_bytes = b"---\nid: broken\ntitle: [unclosed\n---\nbody\n"
    bad.write_bytes(bad_bytes)
    loaded = vault.load()
    assert [e.title for e in loaded.entries] == ["A good entry"]
    assert [p.path for p in loaded.problems] == ["entries/broken.md"]
    assert "not valid YAML" in loaded.problems[0].reason
    assert bad.read_bytes() == bad_bytes                             # left untouched


def test_resolve_by_prefix_and_ambiguity(vault):
    a = make(vault, "first").with_changes(id="k3f9q2", path="entries/k3f9q2.md")
    b = make(vault, "second").with_changes(id="k3aa10", path="entries/k3aa10.md")
    write(vault, a, b)
    assert vault.resolve("k3f").id == "k3f9q2"
    assert vault.resolve("#k3aa10").id == "k3aa10"
    with pytest.raises(AmbiguousId) as ei:
        vault.resolve("k3")
    assert "k3aa10, k3f9q2" in str(ei.value) and "more characters" in str(ei.value)
    with pytest.raises(EntryNotFound):
        vault.resolve("zz")


# --------------------------------------------------------------------------------------------- writing

def test_write_is_one_commit_with_trailers_and_memory_md(vault):
    e1, e2 = make(vault, "Use WAL mode"), make(vault, "Deploys run from release branches")
    sha = write(vault, e1, e2)
    assert g(vault.root, "rev-parse", "HEAD").strip() == sha
    msg = g(vault.root, "log", "-1", "--format=%B")
    assert msg.startswith("acpmem: fork-write: test write\n\nbecause a test said so\n")
    assert "Acpmem-Kind: fork-write" in msg and f"Acpmem-Entry: {e1.id} {e2.id}" in msg
    files = set(g(vault.root, "show", "--name-only", "--format=", "HEAD").split())
    assert files == {e1.path, e2.path, "MEMORY.md"}
    assert "Use WAL mode" in (vault.root / "MEMORY.md").read_text()
    assert g(vault.root, "status", "--porcelain") == ""


def test_forget_and_log_show_kinds(vault):
    e = make(vault, "Temporary fact")
    write(vault, e)
    entry, sha = vault.forget(e.id[:4], "it was wrong")
    assert not (vault.root / e.path).exists()
    assert "it was wrong" in g(vault.root, "log", "-1", "--format=%B")
    kinds = [i.kind for i in history.log(vault, e.id)]
    assert kinds == ["forget", "fork-write"]
    assert [i.kind for i in history.log(vault)][-1] == "init"


# --------------------------------------------------------------------------------------------- human edits

def test_human_edit_is_committed_separately_before_acpmem_commits_and_never_overwritten(vault):
    e = make(vault, "Rate limit is 10/s")
    write(vault, e)
    path = vault.root / e.path
    edited = path.read_text().replace("- a fact", "- a fact, corrected by hand: 20/s")
    path.write_text(edited)
    other = make(vault, "Another memory")
    write(vault, other)
    subjects = g(vault.root, "log", "-3", "--format=%s").splitlines()
    assert subjects[0] == "acpmem: fork-write: test write"
    assert subjects[1].startswith(f"acpmem: human-edit: human edit: {e.path}")
    assert "Acpmem-Kind: human-edit" in g(vault.root, "log", "-1", "--skip=1", "--format=%B")
    assert path.read_text() == edited                               # kept, byte for byte
    assert [i.kind for i in history.log(vault, e.id)] == ["human-edit", "fork-write"]
    assert g(vault.root, "status", "--porcelain") == ""


def test_invalid_human_edit_is_not_committed_and_left_alone(vault):
    e = make(vault, "Will be broken by hand")
    write(vault, e)
    path = vault.root / e.path
    broken = path.read_bytes().replace(b"importance: 5", b"importance: eleven")
    path.write_bytes(broken)
    write(vault, make(vault, "Unrelated"))
    assert path.read_bytes() == broken
    assert any("importance" in w for w in vault.warnings)
    assert f" M {e.path}" in g(vault.root, "status", "--porcelain")
    rep = health.check_vault(vault)
    assert not rep.ok and any(e.path in f.what and "importance" in f.what for f in rep.findings)


def test_hand_deleted_and_hand_added_entries_are_recorded_as_human_edits(vault):
    e = make(vault, "To be deleted by hand")
    write(vault, e)
    (vault.root / e.path).unlink()
    new = vault.entries_dir / "handmade.md"
    new.write_text("---\nid: handmade\ntitle: Written by a person\ntype: fact\nimportance: 4\n"
                   "created: 2026-11-29T10:00:00Z\n---\n- by hand\n")
    rep = health.check_vault(vault, fix=True)
    assert any(f.level == "fixed" and "human edit" in f.what for f in rep.findings)
    assert g(vault.root, "status", "--porcelain") == ""
    assert [x.title for x in vault.load().entries] == ["Written by a person"]


def test_update_refuses_when_the_file_changed_under_it(vault):
    e = make(vault, "Original")
    write(vault, e)
    loaded = vault.resolve(e.id)
    (vault.root / e.path).write_text((vault.root / e.path).read_text().replace("Original", "Changed by hand"))
    from acpmem.core.errors import AcpmemError
    with pytest.raises(AcpmemError, match="changed while"):
        vault.write_entries([make(vault, "New")], subject="s", why="w",
                            updates=[loaded.with_changes(superseded_by="abcdef")])
    assert "Changed by hand" in (vault.root / e.path).read_text()


# --------------------------------------------------------------------------------------------- reads

def test_reads_never_commit_and_are_folded_into_the_next_commit(vault):
    e = make(vault, "Read me")
    write(vault, e)
    head = g(vault.root, "rev-parse", "HEAD")
    reader.show(vault, e.id)
    assert g(vault.root, "rev-parse", "HEAD") == head               # (a) no commit per read
    assert vault.resolve(e.id).last_read == vault.now()
    write(vault, make(vault, "Something else"))
    clone = readlog.clone_id(vault.state_dir)
    tsv = (vault.root / "reads" / f"{clone}.tsv").read_text()
    assert tsv == f"{e.id}\t{vault.now()}\n"
    assert [i.kind for i in history.log(vault, e.id)] == ["fork-write"]       # (c) the entry's log has no read noise
    assert not (vault.state_dir / "reads.log").exists()


def test_the_last_reads_of_some_ids_are_what_all_the_last_reads_say_of_them(vault):
    """``show`` asks the reads of one entry (``last_reads(only=…)``): the same times the whole table gives for those
    ids — committed files, the local log, a newer time later in the log, a line that is not a time — and no other id."""
    (vault.root / "reads").mkdir(exist_ok=True)
    (vault.root / "reads" / "aaaa.tsv").write_text("a1\t2026-11-01T10:00:00Z\nb2\t2026-11-02T10:00:00Z\n")
    vault.state_dir.mkdir(exist_ok=True)
    (vault.state_dir / "reads.log").write_text("a1\t2026-11-03T10:00:00Z\nc3\t2026-11-04T10:00:00Z\n"
                                               "a1\tzzzz\nb2\t2026-11-01T09:00:00Z\nc3\t2026-11-05T10:00:00Z\n")
    whole = readlog.last_reads(vault.root, vault.state_dir)
    assert whole == {"a1": "2026-11-03T10:00:00Z", "b2": "2026-11-02T10:00:00Z", "c3": "2026-11-05T10:00:00Z"}
    for only in ({"a1"}, {"b2", "c3"}, {"zz"}, set()):
        assert readlog.last_reads(vault.root, vault.state_dir, frozenset(only)) == {
            k: v for k, v in whole.items() if k in only}


def test_a_long_local_log_is_summed_up_once_and_reads_as_the_whole_log(vault, monkeypatch):
    """The local read log grows by a line a read until a commit folds it; past ``SEEN_FROM`` what its whole lines
    gave is kept (``reads.log.seen``) and a later read parses only what was appended. Through appends (a line cut
    short at the end, lines that are not times, older times), an edit inside the part already summed up, a fold
    that starts a new log, a summary that is garbage or not a regular file: every answer is the whole log's, for
    every set of ids asked."""
    monkeypatch.setattr(readlog, "SEEN_FROM", 1500)
    rng = random.Random(5)
    (vault.root / "reads").mkdir(exist_ok=True)
    (vault.root / "reads" / "aaaa.tsv").write_text("i01\t2026-11-01T10:00:00Z\ni02\t2026-12-30T10:00:00Z\n")
    vault.state_dir.mkdir(exist_ok=True)
    log, seen = vault.state_dir / "reads.log", vault.state_dir / readlog.SEEN
    ids = [f"i{n:02d}" for n in range(40)]

    def line() -> str:
        r = rng.random()
        if r < 0.05:
            return "not a read\n"
        if r < 0.1:
            return f"{rng.choice(ids)}\t2026-13-01T10:00:00Z\n"      # not a time
        return f"{rng.choice(ids)}\t2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z\n"

    def whole_log() -> dict[str, str]:
        want: dict[str, str] = {}
        readlog._parse_lines((vault.root / "reads" / "aaaa.tsv").read_text(), want)
        readlog._parse_lines(log.read_bytes().decode("utf-8", "replace") if log.exists() else "", want)
        return want

    summed = 0
    for step in range(160):
        r = rng.random()
        if r < 0.04 and log.exists() and log.stat().st_size > 100:      # an edit inside what was summed up
            data = bytearray(log.read_bytes())
            at = rng.randrange(0, len(data) // 2)
            data[at:at + 1] = b"9" if data[at:at + 1] != b"9" else b"8"
            with open(log, "r+b") as f:                                    # in place: the same file, its length
                f.write(bytes(data))
        elif r < 0.07:                                                     # a fold: the log starts again
            log.unlink(missing_ok=True)
        elif r < 0.09:
            seen.write_text(rng.choice(["", "acpmem-reads-seen-1 10 x\n", "garbage\nmore\n",
                                        "acpmem-reads-seen-1 999999999 1\ni01\t2026-01-01T00:00:00Z\n",
                                        f"acpmem-reads-seen-1 {'9' * 5000} 1\n"]))     # int() refuses it
        else:
            with open(log, "a") as f:
                f.write("".join(line() for _ in range(rng.randint(1, 60))))
                if rng.random() < 0.2:
                    f.write(line()[:rng.randint(1, 12)])                  # an append cut short (for now)
        want = whole_log()
        assert readlog.last_reads(vault.root, vault.state_dir) == want, step
        only = frozenset(rng.sample(ids, 5))
        assert readlog.last_reads(vault.root, vault.state_dir, only) == {k: v for k, v in want.items() if k in only}
        summed += seen.exists() and seen.read_text().startswith("acpmem-reads-seen-1 ")
    assert summed > 50
    # a later read takes what was summed up from the summary, and parses only what came after: a time put into the
    # summary (its bytes of the log unchanged) is what it answers
    with open(log, "a") as f:
        f.write("".join(line() for _ in range(200)))
    readlog.last_reads(vault.root, vault.state_dir)
    head, _, body = seen.read_text().partition("\n")
    assert int(head.split()[1]) == log.stat().st_size
    seen.write_text(f"{head}\ni99\t2027-01-01T00:00:00Z\n{body}")
    assert readlog.last_reads(vault.root, vault.state_dir)["i99"] == "2027-01-01T00:00:00Z"
    with open(log, "a") as f:
        f.write("i00\t2026-12-31T23:00:00Z\n")
    got = readlog.last_reads(vault.root, vault.state_dir)
    assert got["i99"] == "2027-01-01T00:00:00Z" and got["i00"] == "2026-12-31T23:00:00Z"


def test_a_fifo_in_place_of_the_read_log_or_its_summary_is_skipped_never_opened(vault):
    """A FIFO where the local read log (or its summary) should be: the listing's read times skip it instead of
    waiting for a writer for ever (opening a FIFO to read blocks), as for the committed ``reads/*.tsv``."""
    import os
    import sys

    (vault.root / "reads").mkdir(exist_ok=True)
    (vault.root / "reads" / "aaaa.tsv").write_text("i01\t2026-11-01T10:00:00Z\n")
    vault.state_dir.mkdir(exist_ok=True)
    for name in ("reads.log", readlog.SEEN):
        for p in (vault.state_dir / "reads.log", vault.state_dir / readlog.SEEN):
            p.unlink(missing_ok=True)
        if name == readlog.SEEN:   # a log long enough to be summed up, beside a FIFO summary
            (vault.state_dir / "reads.log").write_text("i02\t2026-11-02T10:00:00Z\n" * 4000)
        os.mkfifo(vault.state_dir / name)
        got = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                              "from acpmem.vault import readlog; "
                              "print(sorted(readlog.last_reads(Path(sys.argv[1]), Path(sys.argv[2])).items()))",
                              str(vault.root), str(vault.state_dir)], capture_output=True, text=True, timeout=60)
        assert got.returncode == 0, got.stderr
        want = [("i01", "2026-11-01T10:00:00Z")] + ([("i02", "2026-11-02T10:00:00Z")] if name == readlog.SEEN else [])
        assert got.stdout.strip() == repr(want), name


def test_reads_survive_a_clone_and_two_clones_merge_without_conflict(vault, tmp_path, clock):
    e = make(vault, "Shared memory")
    write(vault, e)
    other_root = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(vault.root), str(other_root)], check=True)
    later = lambda: clock().replace(hour=15)  # noqa: E731
    other = Vault(other_root, clock=later, rng=random.Random(3))
    reader.show(vault, e.id)
    reader.show(other, e.id)
    write(vault, make(vault, "From A"))
    write(other, make(other, "From B"))
    g(vault.root, "pull", "-q", "--no-rebase", "--no-edit", str(other_root), "main")  # (d) no conflict
    assert g(vault.root, "status", "--porcelain") == ""
    fresh = Vault(vault.root, clock=clock)
    assert fresh.resolve(e.id).last_read == "2026-11-29T15:00:00Z"   # (b) the latest read of both clones


# --------------------------------------------------------------------------------------------- doctor, locks

def test_doctor_finishes_an_interrupted_change(vault):
    e = make(vault, "Interrupted")
    import json
    (vault.state_dir / "journal.json").write_text(json.dumps({
        "writes": {e.path: __import__("acpmem.core.entryfile", fromlist=["x"]).new_entry_text(e)}, "deletes": [],
        "subject": "interrupted write", "why": "a process was killed", "trailers": {"Acpmem-Kind": "fork-write"}}))
    rep = health.check_vault(vault)
    assert not rep.ok and any("interrupted" in f.what for f in rep.findings)
    rep = health.check_vault(vault, fix=True)
    assert rep.ok, rep.findings
    assert vault.resolve(e.id).title == "Interrupted"
    assert g(vault.root, "status", "--porcelain") == ""


def test_foreign_index_lock_is_waited_for_and_never_deleted(vault):
    vault._settings = vault.settings.with_changes(git=vault.settings.git.with_changes(foreign_lock_wait_seconds=0.3))
    lock = vault.root / ".git" / "index.lock"
    lock.write_text("")
    with pytest.raises(GitStateError, match="someone is running git"):
        write(vault, make(vault, "Blocked"))
    assert lock.exists()
    lock.unlink()
    write(vault, make(vault, "Blocked"))
    assert [e.title for e in vault.load().entries] == ["Blocked"]


def test_entry_file_round_trips_through_the_vault(vault):
    e = make(vault, "上传大文件必须分片", body="- 网关限制 100 MB。\n", typ="lesson", imp=8)
    write(vault, e)
    text = (vault.root / e.path).read_text("utf-8")
    assert parse_entry(text, e.path).title == "上传大文件必须分片"
    assert e.path == f"entries/{e.id}.md"                          # no ASCII slug for a Chinese title


def test_doctor_sends_a_broken_entry_to_an_edit_that_finds_it(example_vault, cli, tmp_path):
    """`doctor` names the command that repairs a file that does not parse, and `edit` and `show` find that file."""
    e = example_vault.load().entries[0]
    path = example_vault.root / e.path
    good = path.read_text()
    path.write_text(good.replace("importance: ", "importance: lots # ", 1))
    doc = cli("memory", "--vault", str(example_vault.root), "doctor", "--json")
    (finding,) = [f for f in json.loads(doc.stdout)["findings"] if f["what"].startswith(e.path)]
    assert finding["fix"].startswith(f"fix it with `acp memory edit {e.path}`")
    shown = cli("memory", "--vault", str(example_vault.root), "show", e.id)
    assert shown.returncode == 1 and f"{e.path} does not parse" in shown.stderr and "acp memory edit" in shown.stderr
    fixed = tmp_path / "fixed.md"
    fixed.write_text(good.replace(e.title, e.title + " (checked)"))
    r = cli("memory", "--vault", str(example_vault.root), "edit", e.id, "--from", str(fixed))
    assert r.returncode == 0 and r.stdout.startswith(f"Saved #{e.id} (commit "), r.stderr
    assert path.read_text() == fixed.read_text()
    assert cli("memory", "--vault", str(example_vault.root), "doctor").returncode == 0
    assert history.log(example_vault, e.id)[0].kind == "edit"
    # repairing by the path, back to exactly what the last commit holds: saved, nothing to commit
    path.write_text(fixed.read_text().replace("importance: ", "importance: lots # ", 1))
    back = cli("memory", "--vault", str(example_vault.root), "edit", e.path, "--from", str(fixed))
    assert back.returncode == 0 and "nothing to commit" in back.stdout and path.read_text() == fixed.read_text()


# --------------------------------------------------------------------------------------------- ids changed by hand

def _two_entries(vault):
    import helpers_proc as hp

    for ident, title in (("keep01", "The committed entry stays valid"), ("other1", "Another committed entry")):
        vault.write_entries([hp.make_entry(ident, title, f"- {title}.").with_changes(path=f"entries/{ident}.md")],
                            subject=f"add #{ident}", why="t")
    return vault.root


def test_recall_never_answers_with_a_file_another_file_with_its_id_comes_before(vault, cli):
    """A copy whose words a query matches best is still not what recall (or a prompt's surfacing) returns: of the
    files with one id, the first path is the entry."""
    root = _two_entries(vault)
    text = (root / "entries" / "keep01.md").read_text()
    (root / "entries" / "zzz-copy.md").write_text(text.replace("The committed entry stays valid",
                                                               "Zebras graze on the copied savanna"))
    r = cli("memory", "--vault", str(root), "recall", "zebras savanna", "--json")
    assert r.returncode == 0, r.stderr
    assert not any("Zebras" in h["title"] for h in json.loads(r.stdout)["hits"]), r.stdout
    r = cli("memory", "--vault", str(root), "surface", "--session", "s-copy", "--prompt", "zebras on the savanna",
            "--json")
    assert r.returncode == 0 and "Zebras" not in r.stdout, r.stdout


def test_a_copied_id_makes_the_copy_invalid_never_the_committed_entry(vault, cli):
    import helpers_proc as hp

    root = _two_entries(vault)
    text = (root / "entries" / "keep01.md").read_text()
    # the copy's name sorts first: the order of paths must not decide which one is valid
    (root / "entries" / "aaa-copy.md").write_text(text.replace("The committed entry stays valid", "A copy of it"))
    r = cli("memory", "--vault", str(root), "list", "--json")
    doc = json.loads(r.stdout)
    assert [e["title"] for e in doc["entries"] if e["id"] == "keep01"] == ["The committed entry stays valid"]
    assert [p["path"] for p in doc["problems"]] == ["entries/aaa-copy.md"], doc["problems"]
    assert "duplicate id 'keep01' (also in entries/keep01.md)" in doc["problems"][0]["reason"]
    # and the copy is not committed as a human edit: the next write leaves it out, saying why
    r = cli("memory", "--vault", str(root), "remember", "Copies are not entries", "--type", "fact", "--importance", "3")
    assert r.returncode == 0 and "not committed: entries/aaa-copy.md" in r.stderr and "keep01" in r.stderr, r.stderr
    assert "entries/aaa-copy.md" not in hp.head_files(root)


def test_finding_an_id_through_the_index_gives_what_the_whole_listing_gives(vault, cli):
    """`show` and every command that takes an id find it through the id index (`catalog.by_id`), not by listing the
    whole vault: for every prefix of every id (and prefixes that match nothing), the entries found are the whole
    listing's entries with that prefix — a copied id settled the same way, a type the vault does not know left out —
    and every file that does not parse is there for the error message."""
    import helpers_proc as hp
    from acpmem.search import catalog

    root = _two_entries(vault)
    for ident in ("ab1111", "ab2222", "abc333", "b00000"):
        vault.write_entries([hp.make_entry(ident, f"Entry {ident}", f"- {ident}.").with_changes(
            path=f"entries/{ident}.md")], subject=f"add #{ident}", why="t")
    entries = root / "entries"
    (entries / "aaa-copy.md").write_text((entries / "ab1111.md").read_text().replace("Entry ab1111", "A copy"))
    (entries / "zz-type.md").write_text((entries / "abc333.md").read_text().replace("abc333", "abd444")
                                        .replace("type: fact", "type: bogus"))
    (entries / "broken.md").write_text("---\nid: [unclosed\n---\nbody\n")
    con = catalog.connect(vault.state_dir / catalog.DB_NAME)
    whole = catalog.snapshot(con, root, vault.settings.types, light=True)
    assert {p.path for p in whole.problems} == {"entries/aaa-copy.md", "entries/zz-type.md", "entries/broken.md"}
    unparsed = {p for p in whole.problems if p.path == "entries/broken.md"}
    ids = [e.id for e in whole.entries] + ["abd444"]
    prefixes = {i[:n] for i in ids for n in range(1, len(i) + 1)} | {"", "c", "ab9", "keep011", "\U0010ffff", "\udcff"}
    for prefix in sorted(prefixes):
        found = catalog.by_id(con, root, vault.settings.types, prefix)
        assert found.entries == [e for e in whole.entries if e.id.startswith(prefix)], prefix
        assert unparsed <= set(found.problems), prefix
    con.close()
    # the copy sorts first and still loses; the unknown type is not an entry
    doc = json.loads(cli("memory", "--vault", str(root), "show", "ab1111", "--json").stdout)
    assert doc["title"] == "Entry ab1111"
    r = cli("memory", "--vault", str(root), "show", "abd")
    assert r.returncode != 0 and "no entry with id 'abd'" in r.stderr, r.stderr
    r = cli("memory", "--vault", str(root), "show", "ab")
    assert r.returncode != 0 and "ab1111" in r.stderr and "abc333" in r.stderr and "b00000" not in r.stderr, r.stderr
    r = cli("memory", "--vault", str(root), "show", "brok")
    assert r.returncode != 0 and "entries/broken.md does not parse" in r.stderr, r.stderr


@pytest.mark.parametrize("git_way", ["libgit2", "exe"])
@pytest.mark.parametrize("new_id", ["fresh9", "other1", "u-abc123"])
def test_an_id_changed_by_hand_is_refused_as_edit_refuses_it(vault, cli, tmp_path, new_id, git_way, monkeypatch):
    """A hand edit of an entry's id (to a new id, another entry's, a user-vault `u-` id) is never committed as a human
    edit, and `acp memory edit` refuses the same text with the same reason — the id HEAD has read through libgit2 or
    the ``git`` executable (``ACPMEM_GIT=exe``)."""
    import helpers_proc as hp

    if git_way == "exe":
        monkeypatch.setenv("ACPMEM_GIT", "exe")
    root = _two_entries(vault)
    path = root / "entries" / "keep01.md"
    changed = path.read_text().replace("id: keep01", f"id: {new_id}")
    draft = tmp_path / "draft.md"
    draft.write_text(changed)
    r = cli("memory", "--vault", str(root), "edit", "keep01", "--from", str(draft))
    assert r.returncode == 1 and "must stay 'keep01'" in r.stderr, r.stderr
    edit_reason = r.stderr
    path.write_text(changed)
    head = hp.git_out(root, "rev-parse", "HEAD")
    for args in (("doctor", "--fix"), ("remember", "Ids are stable", "--type", "fact", "--importance", "3")):
        r = cli("memory", "--vault", str(root), *args)
        assert "entries/keep01.md" in r.stdout + r.stderr and "must stay 'keep01'" in r.stdout + r.stderr, r
    assert "must stay 'keep01' (ids are stable; citations refer to them)" in edit_reason
    assert "id: keep01" in hp.git_out(root, "show", "HEAD:entries/keep01.md")
    assert hp.git_out(root, "log", "--format=%B", f"{head.strip()}..HEAD").count("human edit: ") == 0
    r = cli("memory", "--vault", str(root), "doctor")
    assert r.returncode == 1 and "uncommitted human edit entries/keep01.md is invalid" in r.stdout, r.stdout
