"""`acp memory sync`: two real clones of a vault and a bare repository on disk, driven through the real CLI."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers_proc import git_out, make_entry, warnings_said

from acpmem.vault.writer import Vault
from acpmem.vault.create import init_vault


def _write(v: Vault, ident: str, title: str, body: str) -> str:
    e = make_entry(ident, title, body)
    return v.write_entries([e.with_changes(path=v.path_for(ident, title))], subject=f"add #{ident}", why="test")


@pytest.fixture
def clones(tmp_path, clock):
    """Clone A (made by init, pushed first) and clone B (a git clone of the bare remote)."""
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    a = init_vault(tmp_path / "a", clock=clock)
    _write(a, "base01", "The queue is drained by one worker per vault", "- One worker per vault drains the queue.")
    git_out(a.root, "remote", "add", "origin", str(bare))
    subprocess.run(["git", "clone", "-q", str(bare), str(tmp_path / "b")], check=False)  # empty remote: nothing yet
    yield a, bare, tmp_path
    a.close()


def _sync(cli, root: Path, *extra: str):
    return cli("memory", "--vault", str(root), "sync", *extra)


def test_no_remote_is_a_clear_error_with_the_next_step(vault, cli):
    r = _sync(cli, vault.root)
    assert r.returncode == 1
    assert f"git -C {vault.root} remote add origin URL" in r.stderr
    assert "Traceback" not in r.stderr
    r = _sync(cli, vault.root, "--remote", "team")
    assert r.returncode == 1 and "remote add team URL" in r.stderr


def test_two_clones_with_different_entries_and_reads_merge_cleanly(clones, cli, clock):
    a, bare, tmp = clones
    r = _sync(cli, a.root, "--json")
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    assert first["merge"] == "first-push" and first["pushed"] is True
    assert git_out(bare, "rev-parse", "main").strip() == first["head"]

    subprocess.run(["git", "clone", "-q", str(bare), str(tmp / "b2")], check=True)
    b = Vault(tmp / "b2", clock=clock)
    assert [e.id for e in b.load().entries] == ["base01"]

    # both sides read the shared entry and write a different new one
    a.mark_read(["base01"])
    b.mark_read(["base01"])
    _write(a, "alpha1", "Clone A uses pnpm for installs", "- Clone A: pnpm, not npm.")
    _write(b, "beta01", "Clone B pins Python 3.12", "- Clone B: Python 3.12.")

    ra = _sync(cli, a.root, "--json")
    assert ra.returncode == 0, ra.stderr
    rb = _sync(cli, b.root, "--json")
    assert rb.returncode == 0, rb.stderr
    res_b = json.loads(rb.stdout)
    # B's own commit is replayed on top of A's: no merge commit, no commit of the exchange's own
    assert res_b["merge"] == "replay" and res_b["incoming"] >= 1 and res_b["pushed"] is True
    assert res_b["merge_commit"] is None and res_b["regenerated"] is None and res_b["outgoing"] == 1
    ra = _sync(cli, a.root, "--json")
    assert ra.returncode == 0, ra.stderr
    assert json.loads(ra.stdout)["merge"] == "fast-forward"

    for v in (a, b):
        assert sorted(e.id for e in v.load().entries) == ["alpha1", "base01", "beta01"]
        assert git_out(v.root, "status", "--porcelain").strip() == ""
        assert not (v.root / ".git" / "MERGE_HEAD").exists()
        memory = (v.root / "MEMORY.md").read_text()
        assert "<<<<<<<" not in memory and memory.count("`alpha1`") == 1 and memory.count("`beta01`") == 1
        assert "3 entries" in memory
        # both clones' read logs travelled: two reads/<clone-id>.tsv files, each naming base01
        tsv = sorted((v.root / "reads").glob("*.tsv"))
        assert len(tsv) == 2 and all("base01\t" in p.read_text() for p in tsv)
    assert git_out(a.root, "rev-parse", "HEAD") == git_out(b.root, "rev-parse", "HEAD") \
        == git_out(bare, "rev-parse", "main")
    # the history stays linear: every commit on the remote is a write, none an exchange
    assert git_out(bare, "rev-list", "--merges", "main").strip() == ""
    kinds = git_out(bare, "log", "--format=%(trailers:key=Acpmem-Kind,valueonly)", "main").split()
    assert "sync" not in kinds and kinds.count("fork-write") + kinds.count("human-write") >= 2
    # B's replayed commit carries the regenerated MEMORY.md: the remote's tip lists all three entries
    memory = git_out(bare, "show", "main:MEMORY.md")
    assert memory.count("`alpha1`") == 1 and memory.count("`beta01`") == 1 and "3 entries" in memory


def test_same_entry_edited_on_both_sides_keeps_both_versions_then_finishes(clones, cli, clock):
    a, bare, tmp = clones
    assert _sync(cli, a.root).returncode == 0
    subprocess.run(["git", "clone", "-q", str(bare), str(tmp / "b2")], check=True)
    b = Vault(tmp / "b2", clock=clock)
    path_a = a.root / a.resolve("base01").path
    path_b = b.root / b.resolve("base01").path
    original = path_a.read_text()
    # two people correct the same line by hand, differently
    path_a.write_text(original.replace("drains the queue.", "drains the queue; it exits when idle."))
    path_b.write_text(original.replace("drains the queue.", "drains the queue under a flock."))
    assert _sync(cli, a.root).returncode == 0
    remote_before = git_out(bare, "rev-parse", "main")

    r = _sync(cli, b.root)
    assert r.returncode == 1, r.stdout + r.stderr
    rel = str(path_b.relative_to(b.root))
    assert f"conflict: {rel}" in r.stderr
    assert "run `acp memory sync` again" in r.stderr and "merge --abort" in r.stderr
    assert "Traceback" not in r.stderr
    # nothing lost: both versions are in the file, the merge is in progress, nothing was pushed
    text = path_b.read_text()
    assert "it exits when idle." in text and "under a flock." in text and "<<<<<<< HEAD" in text
    assert (b.root / ".git" / "MERGE_HEAD").exists()
    assert git_out(bare, "rev-parse", "main") == remote_before

    # running sync again before resolving refuses and names the file again
    r = _sync(cli, b.root)
    assert r.returncode == 1 and f"conflict: {rel}" in r.stderr

    # the person keeps both facts and runs sync again: the merge is finished and pushed
    resolved = original.replace("drains the queue.", "drains the queue under a flock; it exits when idle.")
    path_b.write_text(resolved)
    r = _sync(cli, b.root, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["merge"] == "finished-merge" and out["pushed"] is True
    assert not (b.root / ".git" / "MERGE_HEAD").exists()
    assert git_out(bare, "show", f"main:{rel}") == resolved
    assert _sync(cli, a.root).returncode == 0
    assert path_a.read_text() == resolved
    assert b.resolve("base01").body.count("it exits when idle") == 1


def test_human_output_and_help(clones, cli):
    a, _, _ = clones
    r = _sync(cli, a.root)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Synced with origin/main:") and "pushed" in r.stdout
    h = cli("memory", "sync", "--help")
    assert h.returncode == 0 and "Example: acp memory sync" in h.stdout


def test_an_invalid_human_edit_stays_local_and_is_reported(clones, cli):
    a, bare, _ = clones
    assert _sync(cli, a.root).returncode == 0
    path = a.root / a.resolve("base01").path
    broken = path.read_text().replace("importance: 5", "importance: eleven")
    path.write_text(broken)
    a.mark_read(["base01"])
    r = _sync(cli, a.root, "--json")
    assert r.returncode == 0, r.stderr
    said = warnings_said(r.stderr)   # --json: each warning a JSON object on its line
    assert any(w.startswith("Warning: not committed:") and "importance" in w for w in said), r.stderr
    rel = str(path.relative_to(a.root))
    assert "eleven" not in git_out(bare, "show", f"main:{rel}")
    assert path.read_text() == broken  # the person's text is untouched, still uncommitted
    assert git_out(a.root, "status", "--porcelain", "--", rel).startswith(" M")
    # the read bookkeeping did travel
    assert "base01\t" in git_out(bare, "show", f"main:reads/{(a.state_dir / 'clone-id').read_text().strip()}.tsv")


def test_forgotten_on_one_side_and_edited_on_the_other_needs_an_explicit_choice(clones, cli, clock):
    a, bare, tmp = clones
    assert _sync(cli, a.root).returncode == 0
    subprocess.run(["git", "clone", "-q", str(bare), str(tmp / "b2")], check=True)
    b = Vault(tmp / "b2", clock=clock)
    rel = a.resolve("base01").path
    a.forget("base01", "the queue moved to Postgres")
    assert _sync(cli, a.root).returncode == 0
    edited = (b.root / rel).read_text().replace("drains the queue.", "drains the queue; keep this.")
    (b.root / rel).write_text(edited)

    r = _sync(cli, b.root)
    assert r.returncode == 1 and f"conflict: {rel}" in r.stderr
    assert f"git -C {b.root} add FILE" in r.stderr and f"git -C {b.root} rm FILE" in r.stderr
    assert (b.root / rel).read_text() == edited  # the changed version is kept in the folder
    r = cli("memory", "--vault", str(b.root), "doctor")
    assert f"a sync is in progress: edit these files, then `acp memory sync`: {rel}" in r.stdout, r.stdout
    assert f"git -C {b.root} add FILE" in r.stdout and "marker" not in r.stdout, r.stdout
    # sync again without choosing: still refused, nothing decided silently
    r = _sync(cli, b.root)
    assert r.returncode == 1 and f"conflict: {rel}" in r.stderr
    # the person keeps the entry
    git_out(b.root, "add", "--", rel)
    r = _sync(cli, b.root, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["merge"] == "finished-merge"
    assert git_out(bare, "show", f"main:{rel}") == edited
    assert [e.id for e in b.load().entries] == ["base01"]


def test_a_separately_created_vault_is_not_merged(clones, cli, tmp_path, clock):
    a, bare, _ = clones
    assert _sync(cli, a.root).returncode == 0
    other = init_vault(tmp_path / "other", clock=clock)
    git_out(other.root, "remote", "add", "origin", str(bare))
    r = _sync(cli, other.root)
    assert r.returncode == 1 and "different history" in r.stderr and "git clone" in r.stderr
    assert not (other.root / ".git" / "MERGE_HEAD").exists()
    other.close()


# --------------------------------------------------------------------------------------------- conflict markers

def _conflicted_clones(clones, cli, clock):
    """A and B (a plain `git clone`) correct the same line of base01 differently; A syncs first, B's sync stops
    with a conflict. Returns (a, b, bare, rel, original text, remote head before B)."""
    a, bare, tmp = clones
    assert _sync(cli, a.root).returncode == 0
    subprocess.run(["git", "clone", "-q", str(bare), str(tmp / "b2")], check=True)
    b = Vault(tmp / "b2", clock=clock)
    rel = a.resolve("base01").path
    original = (a.root / rel).read_text()
    (a.root / rel).write_text(original.replace("drains the queue.", "drains the queue; it exits when idle."))
    (b.root / rel).write_text(original.replace("drains the queue.", "drains the queue under a flock."))
    assert _sync(cli, a.root).returncode == 0
    r = _sync(cli, b.root)
    assert r.returncode == 1 and f"conflict: {rel}" in r.stderr, r.stderr
    assert "<<<<<<< HEAD" in (b.root / rel).read_text()
    return a, b, bare, rel, original, git_out(bare, "rev-parse", "main")


def _served(cli, root: Path) -> str:
    out = ""
    for args in (("list", "--all"), ("list", "--format", "prompt"), ("recall", "queue worker flock")):
        r = cli("memory", "--vault", str(root), *args)
        out += r.stdout
    return out


def test_doctor_during_a_sync_conflict_names_the_files_and_fix_never_stages_markers(clones, cli, clock):
    a, b, bare, rel, original, remote_before = _conflicted_clones(clones, cli, clock)

    r = cli("memory", "--vault", str(b.root), "doctor")
    assert r.returncode == 1
    assert f"a sync is in progress: edit these files, then `acp memory sync`: {rel}" in r.stdout, r.stdout
    assert "uncommitted human edit" not in r.stdout and "doctor --fix" not in r.stdout, r.stdout

    r = cli("memory", "--vault", str(b.root), "doctor", "--fix")
    assert r.returncode == 1 and "a sync is in progress" in r.stdout, r.stdout + r.stderr
    assert git_out(b.root, "status", "--porcelain", "--", rel).startswith("UU")  # never staged
    # the markers are not memory: neither listed nor recalled, and no write goes through meanwhile
    served = _served(cli, b.root)
    assert "<<<<<<<" not in served and "under a flock" not in served, served
    r = _sync(cli, b.root)
    assert r.returncode == 1 and f"conflict: {rel}" in r.stderr
    assert git_out(bare, "rev-parse", "main") == remote_before

    # resolved with a markdown heading underline ('=======' alone is not a marker): sync finishes
    resolved = original.replace("drains the queue.", "drains the queue under a flock; it exits when idle.\n\n"
                                                      "Notes\n=======\n- both facts kept.")
    (b.root / rel).write_text(resolved)
    r = cli("memory", "--vault", str(b.root), "doctor")
    assert "conflicts are resolved" in r.stdout and "run `acp memory sync`" in r.stdout, r.stdout
    r = _sync(cli, b.root, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["merge"] == "finished-merge"
    assert git_out(bare, "show", f"main:{rel}") == resolved
    assert "Notes" in b.resolve("base01").body


def test_a_conflicted_file_staged_by_hand_is_not_committed_or_pushed(clones, cli, clock):
    a, b, bare, rel, original, remote_before = _conflicted_clones(clones, cli, clock)
    git_out(b.root, "add", "--", rel)  # git now calls it resolved; the markers are still in it
    assert git_out(b.root, "status", "--porcelain", "--", rel).startswith("M ")

    r = cli("memory", "--vault", str(b.root), "doctor")
    assert f"a sync is in progress: edit these files, then `acp memory sync`: {rel}" in r.stdout, r.stdout
    r = _sync(cli, b.root)
    assert r.returncode == 1 and f"conflict: {rel}" in r.stderr and "still hold conflict markers" in r.stderr
    assert "Traceback" not in r.stderr
    assert (b.root / ".git" / "MERGE_HEAD").exists()
    assert git_out(bare, "rev-parse", "main") == remote_before
    assert "<<<<<<<" not in _served(cli, b.root)
    # the other clone gets nothing with markers
    assert _sync(cli, a.root).returncode == 0
    assert "<<<<<<<" not in (a.root / rel).read_text() and "<<<<<<<" not in _served(cli, a.root)


def test_markers_committed_with_plain_git_are_never_pushed_nor_served(clones, cli, clock):
    a, b, bare, rel, original, remote_before = _conflicted_clones(clones, cli, clock)
    git_out(b.root, "commit", "-q", "-a", "--no-edit")  # a person finishes the merge with git, markers and all
    assert not (b.root / ".git" / "MERGE_HEAD").exists()
    assert "<<<<<<<" in git_out(b.root, "show", f"HEAD:{rel}")
    r = _sync(cli, b.root)
    assert r.returncode == 1 and rel in r.stderr and "nothing was pushed" in r.stderr, r.stderr
    assert git_out(bare, "rev-parse", "main") == remote_before
    served = _served(cli, b.root)
    assert "<<<<<<<" not in served
    r = cli("memory", "--vault", str(b.root), "doctor")
    assert r.returncode == 1 and rel in r.stdout and "conflict markers" in r.stdout, r.stdout
    # fixing the file is all it takes: sync commits the correction and pushes
    (b.root / rel).write_text(original.replace("drains the queue.", "drains the queue under a flock."))
    r = _sync(cli, b.root)
    assert r.returncode == 0, r.stderr
    assert "<<<<<<<" not in git_out(bare, "show", f"main:{rel}")


def test_a_pulled_file_with_markers_is_reported_not_served(clones, cli, clock):
    """Markers another tool pushed: the entry is kept out of the index and named by doctor, never shown as memory."""
    a, bare, tmp = clones
    assert _sync(cli, a.root).returncode == 0
    subprocess.run(["git", "clone", "-q", str(bare), str(tmp / "b2")], check=True)
    rel = a.resolve("base01").path
    text = (tmp / "b2" / rel).read_text()
    (tmp / "b2" / rel).write_text(text + "<<<<<<< HEAD\n- ours\n=======\n- theirs\n>>>>>>> other\n")
    git_out(tmp / "b2", "commit", "-q", "-am", "pushed by hand")
    git_out(tmp / "b2", "push", "-q", "origin", "main")
    a.load()  # the catalog knew the valid version
    assert _sync(cli, a.root).returncode == 0
    assert "<<<<<<<" in (a.root / rel).read_text()
    assert "<<<<<<<" not in _served(cli, a.root) and "- ours" not in _served(cli, a.root)
    r = cli("memory", "--vault", str(a.root), "doctor")
    assert r.returncode == 1 and f"{rel}: the file holds unresolved merge conflict markers" in r.stdout, r.stdout


# --------------------------------------------------------------------------------------------- non-regular files

def _sync_bounded(root: Path, pygit2_first: bool = False) -> subprocess.CompletedProcess:
    """`sync` in its own process, given a bound: a FIFO read would wait for a writer for ever. The console script
    commits through the git executable; a process that loaded pygit2 first (``pygit2_first``) through libgit2."""
    import sys

    acp = [str(Path(sys.executable).parent / "acp")]
    if pygit2_first:
        acp = [sys.executable, "-c", "import sys, pygit2\nfrom acpmem.cli.main import acp_main\nsys.argv[0] = 'acp'\n"
               "acp_main()"]
    return subprocess.run([*acp, "memory", "--vault", str(root), "sync"], capture_output=True, text=True,
                          timeout=60)


def test_a_fifo_in_place_of_a_conflicted_entry_does_not_hang_sync(clones, cli, clock):
    import os

    a, b, bare, rel, original, remote_before = _conflicted_clones(clones, cli, clock)
    (b.root / rel).unlink()
    os.mkfifo(b.root / rel)
    r = _sync_bounded(b.root)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert rel in r.stderr and "FIFO" in r.stderr, r.stderr
    assert git_out(bare, "rev-parse", "main") == remote_before   # nothing pushed
    (b.root / rel).unlink()
    (b.root / rel).write_text(original.replace("drains the queue.", "drains the queue under a flock."))
    r = _sync_bounded(b.root)
    assert r.returncode == 0, r.stderr
    assert "under a flock" in git_out(bare, "show", f"main:{rel}")


@pytest.mark.parametrize("pygit2_first", [False, True], ids=["git", "libgit2"])
def test_a_fifo_in_place_of_memory_md_does_not_hang_sync(clones, cli, clock, pygit2_first):
    import os

    a, bare, tmp = clones
    assert _sync(cli, a.root).returncode == 0
    subprocess.run(["git", "clone", "-q", str(bare), str(tmp / "b3")], check=True)
    b = Vault(tmp / "b3", clock=clock)
    _write(b, "fromb1", "Written in clone B", "- From B.")
    b.close()
    _write(a, "froma1", "Written in clone A", "- From A.")
    assert _sync(cli, a.root).returncode == 0
    (b.root / "MEMORY.md").unlink()
    os.mkfifo(b.root / "MEMORY.md")
    r = _sync_bounded(b.root, pygit2_first)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stderr
    assert (b.root / "MEMORY.md").is_file() and "Written in clone A" in (b.root / "MEMORY.md").read_text()
    assert "fromb1" in git_out(bare, "ls-tree", "-r", "--name-only", "main")
