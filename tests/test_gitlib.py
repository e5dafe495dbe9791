"""The in-process commit of the write path (``acpmem.vault.gitlib``, libgit2) gives what ``git commit --only`` gives,
and hands over to the ``git`` executable where it would not: post-commit hooks, ``ACPMEM_GIT=exe``, no identity."""
from __future__ import annotations

import os
import shutil
import subprocess

from helpers_proc import git_out, make_entry, status_porcelain

from acpmem.vault.writer import Vault


def _add(v: Vault, ident: str, body: str = "- a line.") -> str:
    e = make_entry(ident, f"Entry {ident}", body)
    return v.write_entries([e.with_changes(path=v.path_for(ident, e.title))], subject=f"add #{ident}", why="test")


def _git_calls(tmp_path, monkeypatch, said: str = "$3") -> list[str]:
    """A ``git`` on PATH that logs its subcommand (``said``: what of its arguments) and runs the real one; returns
    the log (filled as it runs)."""
    log = tmp_path / "calls.log"
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "git").write_text(f'#!/bin/sh\necho "{said}" >> "{log}"\nexec "{shutil.which("git")}" "$@"\n')
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    return log


def test_a_write_runs_no_git_process_and_matches_the_executable(vault, tmp_path, monkeypatch):
    _add(vault, "warm01")                               # the vault is opened for writing (git var, once)
    log = _git_calls(tmp_path, monkeypatch)
    for i in range(5):
        _add(vault, f"new{i:03d}")
    assert not log.exists() or log.read_text().split() == []
    assert vault.in_process() is not None
    msg = git_out(vault.root, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%B")
    assert msg.startswith("Test User <test@example.invalid>|Test User <test@example.invalid>|acpmem: fork-write: add")
    assert "Acpmem-Kind: fork-write" in msg and "Acpmem-Entry: new004" in msg
    assert git_out(vault.root, "rev-list", "--count", "HEAD").strip() == "7"
    assert status_porcelain(vault.root) == ""
    assert subprocess.run(["git", "-C", str(vault.root), "fsck", "--strict"], capture_output=True).returncode == 0


def test_crlf_is_stored_as_lf_by_the_vaults_attributes_and_the_tree_stays_clean(vault):
    p = vault.root / "entries" / "crlf01-by-hand.md"
    p.write_bytes(b"---\r\nid: crlf01\r\ntitle: By hand\r\ntype: fact\r\nimportance: 5\r\n"
                  b"created: 2026-11-29T12:00:00Z\r\n---\r\n- written on Windows.\r\n")
    _add(vault, "after1")                                # commits the human edit first, in-process
    blob = subprocess.run(["git", "-C", str(vault.root), "show", "HEAD~1:entries/crlf01-by-hand.md"],
                          capture_output=True).stdout
    assert b"\r\n" not in blob and blob.startswith(b"---\nid: crlf01\n")
    assert git_out(vault.root, "log", "-1", "--format=%(trailers:key=Acpmem-Kind,valueonly)", "HEAD~1").strip() \
        == "human-edit"
    assert status_porcelain(vault.root) == ""


def test_what_a_person_staged_but_acpmem_cannot_commit_stays_staged_and_out_of_the_commit(vault):
    _add(vault, "first1")
    bad = vault.root / "entries" / "zzz-broken.md"
    bad.write_text("no frontmatter\n")
    git_out(vault.root, "add", "--", "entries/zzz-broken.md")
    sha = _add(vault, "second")
    changed = git_out(vault.root, "show", "--name-only", "--format=", sha).split()
    assert "entries/zzz-broken.md" not in changed and any(p.startswith("entries/second") for p in changed)
    assert git_out(vault.root, "diff", "--cached", "--name-only").split() == ["entries/zzz-broken.md"]
    assert any("not committed: entries/zzz-broken.md" in w for w in vault.warnings)


def test_a_post_commit_hook_or_acpmem_git_exe_uses_the_executable(vault, tmp_path, monkeypatch):
    hook = vault.root / ".git" / "hooks" / "post-commit"
    ran = tmp_path / "hook-ran"
    hook.write_text(f"#!/bin/sh\necho ran >> {ran}\n")
    hook.chmod(0o755)
    v = Vault(vault.root, clock=vault.clock)
    _add(v, "hooked")
    # the hook ran, as with git commit (libgit2 runs none): the commit went to the executable; the status stays
    # libgit2's
    assert v.in_process() is not None and ran.read_text() == "ran\n"
    v.close()
    hook.unlink()
    monkeypatch.setenv("ACPMEM_GIT", "exe")
    v = Vault(vault.root, clock=vault.clock)
    log = _git_calls(tmp_path, monkeypatch)
    _add(v, "viaexe")
    assert v.in_process() is None and {"add", "commit"} <= set(log.read_text().split())
    v.close()


def test_both_ways_write_the_same_trees(tmp_path, clock, monkeypatch):
    """The same writes, a human edit and a deletion among them, through the executable and through libgit2: the
    same tree after every commit."""
    import random

    from acpmem.vault.create import init_vault

    trees = {}
    for way in ("exe", "in-process"):
        if way == "exe":
            monkeypatch.setenv("ACPMEM_GIT", "exe")
        else:
            monkeypatch.delenv("ACPMEM_GIT")
        v = init_vault(tmp_path / way, clock=clock, rng=random.Random(1))
        _add(v, "same01")
        (v.root / "notes.txt").write_text("a person's note\n")
        v.forget("same01", "gone")
        _add(v, "same02")
        assert (v.in_process() is None) == (way == "exe")
        trees[way] = git_out(v.root, "log", "--format=%T %s").splitlines()
        assert status_porcelain(v.root) == ""
        v.close()
    assert trees["exe"] == trees["in-process"] and len(trees["exe"]) == 5


def test_a_one_command_process_commits_through_git_unless_pygit2_is_loaded(vault, tmp_path, monkeypatch):
    """The console scripts run one command and end: loading pygit2 would cost such a write more than the git
    processes of its commit, so it commits through the executable — unless pygit2 is loaded already (a process forked
    from one that loaded it). A process that stays (this one: the library, the MCP server, the worker) commits in
    process. Every way gives the same commit: the identity, the trailers, a clean work tree."""
    import sys

    vault.close()
    acp = [os.path.join(os.path.dirname(sys.executable), "acp"), "memory", "--vault", str(vault.root)]
    log = _git_calls(tmp_path, monkeypatch)
    ways = {"console script": acp,
            "pygit2 loaded first": [sys.executable, "-c", "import sys, pygit2\nfrom acpmem.cli.main import acp_main\n"
                                    "sys.argv[0] = 'acp'\nacp_main()", *acp[1:]]}
    for i, (way, cmd) in enumerate(ways.items()):
        log.unlink(missing_ok=True)
        p = subprocess.run([*cmd, "remember", f"Written by a {way}.", "--type", "fact"], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0 and "Remembered #" in p.stdout, (way, p.stderr)
        calls = log.read_text().split()
        assert ("commit" in calls and "add" in calls) == (way == "console script"), (way, calls)
        msg = git_out(vault.root, "log", "-1", "--format=%an <%ae>|%(trailers:key=Acpmem-Kind,valueonly)").strip()
        assert msg == "Test User <test@example.invalid>|human-write", (way, msg)
        assert status_porcelain(vault.root) == ""
    log.unlink(missing_ok=True)
    v = Vault(vault.root)
    _add(v, "inproc1")                                   # this process stays: in process, no git add or commit
    assert v.in_process() is not None
    assert not {"add", "commit"} & set(log.read_text().split() if log.exists() else [])
    v.close()
    assert git_out(vault.root, "rev-list", "--count", "HEAD").strip() == "4"   # init, two ways, in process


def test_a_fifo_in_place_of_a_committed_file_is_named_never_opened(vault):
    """git's status calls a FIFO in place of a tracked file modified (libgit2's: deleted), so a command's write,
    which asks git, checks it as a person's edit: read only as a regular file, it is named and left uncommitted —
    never opened, which would wait for a writer for ever. An entry and another file alike."""
    import sys

    for i in range(2):
        _add(vault, f"fifo0{i}")
    vault.close()
    acp = [os.path.join(os.path.dirname(sys.executable), "acp"), "memory", "--vault", str(vault.root)]
    assert "README.md" in git_out(vault.root, "ls-files").split()
    for rel in (vault.path_for("fifo00", "Entry fifo00"), "README.md"):
        (vault.root / rel).unlink()
        os.mkfifo(vault.root / rel)
        p = subprocess.run([*acp, "remember", f"Written beside a FIFO at {rel}.", "--type", "fact"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "Remembered #" in p.stdout, p.stderr
        assert f"not committed: {rel}: cannot be read (is a FIFO (named pipe), not a regular file)" in p.stderr
        assert "Traceback" not in p.stderr
        (vault.root / rel).unlink()


def _stat_stale(root) -> list[str]:
    """The tracked files whose inode git's index does not record as theirs (``git ls-files --debug``, which only
    reads the index): each such file is hashed again by every status until the index is brought up to date."""
    stale, path = [], None
    for line in git_out(root, "ls-files", "--debug").splitlines():
        if not line.startswith(" "):
            path = line
        elif "ino:" in line and int(line.split("ino:")[1].split()[0]) != os.lstat(root / path).st_ino:
            stale.append(path)
    return stale


def test_a_copied_vaults_first_write_brings_the_index_up_to_date(vault, tmp_path):
    """A vault copied (or restored, or moved to another disk) has a new inode and ctime on every file. libgit2's
    status hashes every such file and keeps no record of it; the in-process commit brings the index's record up to
    date, so the next status hashes none of them — the index as ``git status`` would have left it."""
    for i in range(3):
        _add(vault, f"orig{i:02d}")
    vault.close()
    copy = tmp_path / "copied"
    subprocess.run(["cp", "-a", str(vault.root), str(copy)], check=True)
    tracked = git_out(copy, "ls-files").split()
    assert sorted(_stat_stale(copy)) == sorted(tracked) and len(tracked) > 5
    v = Vault(copy)
    _add(v, "after1")
    assert v.in_process() is not None
    assert _stat_stale(copy) == []
    assert status_porcelain(copy) == ""
    assert [p for p in git_out(copy, "ls-files").split() if p not in tracked] == [v.path_for("after1", "Entry after1")]
    v.close()


def test_only_a_commit_asks_git_for_the_identity_and_once(vault, tmp_path, monkeypatch):
    """``git var -l`` (the identity, hooks and signing a commit needs) before the first commit of an open vault,
    once, and no strict ``git var GIT_AUTHOR_IDENT`` where the identity is the configured one as written; reading the
    status (what ``doctor`` does) starts no git process at all."""
    log = _git_calls(tmp_path, monkeypatch)
    v = Vault(vault.root, clock=vault.clock)
    (vault.root / "entries" / "by-hand.md").write_text("not an entry\n")
    assert [e.path for e in v.human_edits()] == ["entries/by-hand.md"]
    assert not log.exists() or log.read_text().split() == []
    (vault.root / "entries" / "by-hand.md").unlink()
    _add(v, "first1")
    _add(v, "second")
    assert log.read_text().split().count("var") == 1     # `git var -l`
    v.close()


def _strict_asked(vault, log, monkeypatch, env: dict) -> tuple[bool, str]:
    """Whether a vault opened with ``env`` asked the strict ``git var GIT_AUTHOR_IDENT`` before its first commit,
    and who that commit names as author and committer."""
    for k, val in env.items():
        monkeypatch.setenv(k, val)
    v = Vault(vault.root, clock=vault.clock)
    _add(v, "x" + os.urandom(3).hex())
    v.close()
    asked = log.read_text().split() if log.exists() else []
    log.unlink(missing_ok=True)
    for k in env:
        monkeypatch.delenv(k)
    return "GIT_AUTHOR_IDENT" in asked, git_out(vault.root, "log", "-1", "--format=%an <%ae>|%cn <%ce>").strip()


def test_the_strict_identity_check_is_skipped_only_for_the_configured_identity_as_written(vault, tmp_path,
                                                                                           monkeypatch):
    """Git's own answer decides whenever the identity is not exactly ``user.name`` and ``user.email`` as configured:
    another one in the environment, or a name git rewrites (surrounding "crud" stripped)."""
    import shutil

    log, shim = tmp_path / "var.log", tmp_path / "varshim"
    shim.mkdir()
    (shim / "git").write_text(f'#!/bin/sh\n[ "$3" = var ] && echo "$4" >> "{log}"\nexec "{shutil.which("git")}" "$@"\n')
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    me = "Test User <test@example.invalid>"
    assert _strict_asked(vault, log, monkeypatch, {}) == (False, f"{me}|{me}")
    assert _strict_asked(vault, log, monkeypatch, {"GIT_AUTHOR_NAME": "Other Person"}) \
        == (True, f"Other Person <test@example.invalid>|{me}")
    assert _strict_asked(vault, log, monkeypatch, {"GIT_COMMITTER_EMAIL": "bot@example.invalid"}) \
        == (True, f"{me}|Test User <bot@example.invalid>")
    subprocess.run(["git", "-C", str(vault.root), "config", "user.name", "Crud User."], check=True)
    assert _strict_asked(vault, log, monkeypatch, {}) \
        == (True, "Crud User <test@example.invalid>|Crud User <test@example.invalid>")


def test_init_sets_the_vaults_own_git_config_whatever_the_global_says(tmp_path, monkeypatch):
    """``init``'s repository gets ``core.quotepath off`` and ``gc.autoDetach false`` in its own config — also where
    the global config says the opposite, or already says the same — and no identity."""
    from acpmem.vault.create import init_vault

    glob = os.environ["GIT_CONFIG_GLOBAL"]
    for i, (quote, detach) in enumerate((("on", "true"), ("off", "false"))):
        subprocess.run(["git", "config", "--file", glob, "core.quotepath", quote], check=True)
        subprocess.run(["git", "config", "--file", glob, "gc.autodetach", detach], check=True)
        v = init_vault(tmp_path / f"v{i}")
        local = git_out(v.root, "config", "--local", "--get-regexp", r"^(user\.|core\.quotepath|gc\.autodetach)")
        assert dict(ln.split(" ", 1) for ln in local.splitlines()) == {"core.quotepath": "off",
                                                                       "gc.autodetach": "false"}
        assert git_out(v.root, "config", "--get", "core.quotepath").strip() == "off"
        v.close()


def test_doctor_reads_head_in_process_and_asks_git_only_where_libgit2_cannot(vault, tmp_path, monkeypatch):
    """``doctor`` (and ``--fix``) on a sound vault starts one git process: its ``fsck``; HEAD's commit and tree are
    read through libgit2. With ``ACPMEM_GIT=exe``, or a HEAD libgit2 cannot read, git is asked as before — and names
    an unreadable commit."""
    from acpmem.upkeep.doctor import HEAD_UNREADABLE, doctor, head_problem

    _add(vault, "sound1")
    log = _git_calls(tmp_path, monkeypatch, "$*")

    def asked() -> list[str]:
        said = log.read_text().splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        out = []
        for line in said:   # the subcommand and its arguments, without git's own options (-C DIR, -c KEY=VALUE)
            words = line.split()
            while words and words[0] in ("-C", "-c"):
                words = words[2:]
            out.append(" ".join(w for w in words if not w.startswith("-")))
        return out

    for fix in (False, True):
        v = Vault(vault.root, clock=vault.clock)
        assert doctor(v, fix=fix).ok
        v.close()
        assert asked() == ["fsck"], fix
    monkeypatch.setenv("ACPMEM_GIT", "exe")
    assert head_problem(vault.root) is None and asked() == ["rev-parse HEAD^{tree}"]
    monkeypatch.delenv("ACPMEM_GIT")
    # HEAD's commit object gone: libgit2 cannot read it, git is asked, and names it
    head = git_out(vault.root, "rev-parse", "HEAD").strip()
    asked()   # the test's own question
    obj = vault.root / ".git" / "objects" / head[:2] / head[2:]
    assert obj.exists()   # a loose object: the writes above made it
    obj.chmod(0o644)
    obj.unlink()
    assert head_problem(vault.root) == HEAD_UNREADABLE
    assert asked() == ["rev-parse HEAD^{tree}", "rev-parse HEAD"]


def test_doctors_in_process_look_at_head_reads_the_vaults_own_repository_only(tmp_path):
    """A vault whose ``.git`` is an empty folder inside a workspace: libgit2 would find the workspace's repository
    above it; ``head_readable`` opens only the vault's own, so git is asked, as before."""
    from acpmem.vault.gitlib import head_readable

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "commit", "-q", "--allow-empty", "-m", "base"], check=True)
    assert head_readable(tmp_path)
    (tmp_path / "v" / ".git").mkdir(parents=True)
    assert not head_readable(tmp_path / "v")
