"""The vault's git under faults a team meets: a clone made with plain `git clone` and no git identity, a process killed
between `git add` and `git commit` (or after the commit, before the journal is gone) for every kind of change, git
missing from PATH, a corrupt `.git/index`, a vault folder without `.git`, a fetch that fails.

Real git repositories, real acpmem processes (the console script), and for the kills a real `kill -9` of the process
at the chosen git step (a `git` on PATH that runs the real one and kills its caller there).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import fresh_vault
from helpers_proc import git_out, head_files, leftovers, make_entry, status_porcelain
from acpmem.write.requests import pending_dir

from acpmem.core.entryfile import new_entry_text
from acpmem.vault.create import init_vault

REAL_GIT = shutil.which("git")
CHAT = Path(__file__).parent / "fixtures" / "transcripts" / "openai_chat.json"


def _no_identity_env(tmp_path: Path) -> dict:
    """An environment where git has no identity: an empty global config, no system config, no GIT_AUTHOR_* /
    GIT_COMMITTER_* / EMAIL variables, and (so that a host name with a domain cannot stand in for one)
    user.useConfigOnly, given on the command scope."""
    empty = tmp_path / "empty-gitconfig"
    empty.write_text("")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GIT_AUTHOR_", "GIT_COMMITTER_", "GIT_CONFIG_")) and k != "EMAIL"}
    env.update({"GIT_CONFIG_GLOBAL": str(empty), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "user.useConfigOnly", "GIT_CONFIG_VALUE_0": "true"})
    return env


def _run(env: dict, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def _acp(cli, root: Path, *args: str, env: dict | None = None):
    return cli("memory", "--vault", str(root), *args, env=env)


def _acp_in(env: dict, root: Path, *args: str) -> subprocess.CompletedProcess:
    """The console script with exactly ``env`` (``cli`` adds to the test's environment, it cannot take away)."""
    return _run(env, str(Path(sys.executable).parent / "acp"), "memory", "--vault", str(root), *args)


def _one_line(r: subprocess.CompletedProcess) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.fixture
def team(tmp_path, clock):
    """A vault with two entries pushed to a bare remote; returns (origin vault, bare remote)."""
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    a = fresh_vault(tmp_path / "a", clock)
    for ident, title in (("base01", "The queue is drained by one worker per vault"),
                         ("base02", "Deploys run from release branches")):
        a.write_entries([make_entry(ident, title, f"- {title}.").with_changes(path=a.path_for(ident, title))],
                        subject=f"add #{ident}", why="test")
    git_out(a.root, "remote", "add", "origin", str(bare))
    git_out(a.root, "push", "-q", "origin", "main")
    yield a, bare
    a.close()


# --------------------------------------------------------------------------------------------- 1. a plain clone

def test_forget_in_a_plain_git_clone_without_identity_commits_and_sets_up_the_clone(team, tmp_path, cli):
    _, bare = team
    env = _no_identity_env(tmp_path)
    clone = tmp_path / "teammate"
    assert _run(env, "git", "clone", "-q", str(bare), str(clone)).returncode == 0
    assert _run(env, "git", "-C", str(clone), "var", "GIT_AUTHOR_IDENT").returncode != 0  # git has no identity

    r = _acp_in(env, clone, "forget", "base01", "--reason", "moved to Postgres")
    assert r.returncode == 0, r.stderr
    # what is missing is said in one line, once, with how to set one's own
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("Warning:")]
    assert len(warnings) == 1 and "user.name" in warnings[0] and f"git -C {clone} config" in warnings[0], r.stderr
    assert "base01" not in " ".join(head_files(clone))
    assert "Acpmem-Kind: forget" in git_out(clone, "log", "-1", "--format=%B")
    assert git_out(clone, "log", "-1", "--format=%an <%ae>").strip() == "acpmem <acpmem@localhost>"
    # the clone is set up as `init` sets up a vault, and the fallback identity is not written into its config
    local = dict(ln.split(" ", 1) for ln in git_out(clone, "config", "--local", "--get-regexp",
                                                     r"^(user\.name|user\.email|core\.quotepath|gc\.autodetach)$")
                 .splitlines())
    assert local == {"core.quotepath": "off", "gc.autodetach": "false"}
    assert status_porcelain(clone) == "" and leftovers(clone) == []
    r = _acp_in(env, clone, "doctor")
    assert r.returncode == 0, r.stdout + r.stderr

    # once the person has an identity, the next write is theirs, without a word about it
    (tmp_path / "empty-gitconfig").write_text("[user]\n\tname = Ada Person\n\temail = ada@example.invalid\n")
    r = _acp_in(env, clone, "forget", "base02", "--reason", "gone")
    assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr
    assert git_out(clone, "log", "-1", "--format=%an <%ae>").strip() == "Ada Person <ada@example.invalid>"


def test_an_identity_from_the_environment_is_used_and_never_written_into_the_config(tmp_path):
    env = _no_identity_env(tmp_path)
    env.update({"GIT_AUTHOR_NAME": "Env Author", "GIT_AUTHOR_EMAIL": "author@example.invalid",
                "GIT_COMMITTER_NAME": "Env Committer", "GIT_COMMITTER_EMAIL": "committer@example.invalid"})
    root = tmp_path / "v"
    r = _run(env, str(Path(sys.executable).parent / "acp"), "memory", "init", str(root))
    assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr
    r = _acp_in(env, root, "remember", "Identities come from the environment", "--type", "fact", "--importance", "3")
    assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr
    for rev in ("HEAD", "HEAD~1"):
        assert git_out(root, "log", "-1", "--format=%an <%ae> / %cn <%ce>", rev).strip() == \
            "Env Author <author@example.invalid> / Env Committer <committer@example.invalid>"
    assert git_out(root, "config", "--local", "--get-regexp", r"^user\.", check=False) == ""


def test_init_without_an_identity_says_how_to_set_one_and_writes_none(tmp_path):
    env = _no_identity_env(tmp_path)
    root = tmp_path / "v"
    r = _run(env, str(Path(sys.executable).parent / "acp"), "memory", "init", "--example", str(root))
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("Warning:")]
    assert len(warnings) == 1 and "acpmem <acpmem@localhost>" in warnings[0], r.stderr
    assert "git config --global user.name" in warnings[0]
    assert git_out(root, "config", "--local", "--get-regexp", r"^user\.", check=False) == ""
    assert set(git_out(root, "log", "--format=%an <%ae>").split("\n")) - {""} == {"acpmem <acpmem@localhost>"}


def test_the_identity_an_older_acpmem_wrote_into_a_clone_is_taken_out(team, tmp_path, cli):
    _, bare = team
    clone = tmp_path / "teammate"
    git_out(tmp_path, "clone", "-q", str(bare), str(clone))
    git_out(clone, "config", "user.name", "acpmem")
    git_out(clone, "config", "user.email", "acpmem@localhost")
    (clone / ".acpmem").mkdir()
    (clone / ".acpmem" / "git-setup").write_text("1\n")   # set up by an older acpmem
    r = _acp(cli, clone, "forget", "base01", "--reason", "x")
    assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr
    assert git_out(clone, "log", "-1", "--format=%an <%ae>").strip() == "Test User <test@example.invalid>"
    assert git_out(clone, "config", "--local", "--get-regexp", r"^user\.", check=False) == ""
    # a person's own identity in the vault's config is theirs: kept
    git_out(clone, "config", "user.name", "Only Here")
    (clone / ".acpmem" / "git-setup").write_text("1\n")
    assert _acp(cli, clone, "forget", "base02", "--reason", "y").returncode == 0
    assert git_out(clone, "config", "--local", "--get", "user.name").strip() == "Only Here"


def test_a_clone_with_an_identity_keeps_it_and_is_set_up_once(team, tmp_path, cli):
    _, bare = team
    clone = tmp_path / "teammate"
    git_out(tmp_path, "clone", "-q", str(bare), str(clone))
    r = _acp(cli, clone, "forget", "base01", "--reason", "x")
    assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr
    assert git_out(clone, "log", "-1", "--format=%an <%ae>").strip() == "Test User <test@example.invalid>"
    assert git_out(clone, "config", "--local", "--get", "user.name", check=False) == ""  # not pinned locally
    assert git_out(clone, "config", "--local", "--get", "gc.autoDetach").strip() == "false"
    assert git_out(clone, "config", "--local", "--get", "core.quotepath").strip() == "off"


def test_an_identity_lost_after_the_setup_is_supplied_when_git_asks(team, tmp_path, cli):
    _, bare = team
    clone = tmp_path / "teammate"
    git_out(tmp_path, "clone", "-q", str(bare), str(clone))
    assert _acp(cli, clone, "forget", "base01", "--reason", "x").returncode == 0  # set up with the global identity
    env = _no_identity_env(tmp_path)  # then the global identity goes away
    r = _acp_in(env, clone, "forget", "base02", "--reason", "y")
    assert r.returncode == 0, r.stderr
    assert "user.name" in r.stderr  # said once, when it is supplied
    assert git_out(clone, "log", "-1", "--format=%an").strip() == "acpmem"
    assert status_porcelain(clone) == "" and leftovers(clone) == []


# --------------------------------------------------------------------------------------------- 1. idempotent recovery

KILLING_GIT = r"""#!/bin/sh
# The real git; at a commit, the process that runs git is killed (-9) before or after the real commit.
case " $* " in
  *" commit "*)
    if [ "$ACPMEM_TEST_KILL" = before-commit ]; then kill -9 "$PPID"; exit 137; fi
    "$ACPMEM_TEST_GIT" "$@"; rc=$?
    if [ "$ACPMEM_TEST_KILL" = after-commit ]; then kill -9 "$PPID"; fi
    exit $rc;;
esac
exec "$ACPMEM_TEST_GIT" "$@"
"""

# The in-process write path (pygit2) killed the same way, at the library's boundary: before the commit is created (the
# index already holds the paths) or right after it (the journal and the request still there).
KILLING_PYGIT2 = r"""
import os
import pygit2
_real = pygit2.Repository.create_commit
def _killing(self, *a, **k):
    if os.environ["ACPMEM_TEST_KILL"] == "before-commit":
        os.kill(os.getpid(), 9)
    out = _real(self, *a, **k)
    if os.environ["ACPMEM_TEST_KILL"] == "after-commit":
        os.kill(os.getpid(), 9)
    return out
pygit2.Repository.create_commit = _killing
"""

OPERATION = r"""
import os, sys
sys.path.insert(0, sys.argv[3])
if len(sys.argv) > 4:
    exec(sys.argv[4])
from pathlib import Path
from helpers_proc import make_entry, PINNED
from acpmem.vault.writer import Vault, KIND_EDIT
root, op = Path(sys.argv[1]), sys.argv[2]
v = Vault(root, clock=lambda: PINNED)
e = v.resolve("base01")
if op == "add":
    n = make_entry("new001", "A new entry", "- new.")
    v.write_entries([n.with_changes(path=v.path_for("new001", n.title))], subject="add #new001", why="op")
elif op == "modify":
    text = v.entry_path(e).read_text()
    v.replace_entry_text(e, text + "- one more line.\n", subject="edit #base01", why="op", kind=KIND_EDIT)
elif op == "delete":
    v.forget("base01", "op")
elif op == "rename":
    text = v.entry_path(e).read_text()
    v.apply({"entries/base01-renamed.md": text}, [e.path], subject="rename #base01", why="op", kind=KIND_EDIT)
print("not killed")
"""


def _expected(op: str, root: Path, before: set[str]) -> set[str]:
    base = next(p for p in before if p.startswith("entries/base01"))
    return {"add": before | {"entries/new001-a-new-entry.md"}, "modify": before,
            "delete": before - {base}, "rename": (before - {base}) | {"entries/base01-renamed.md"}}[op]


@pytest.mark.parametrize("way", ["exe", "in-process"])
@pytest.mark.parametrize("moment", ["before-commit", "before-commit-staged", "after-commit"])
@pytest.mark.parametrize("op", ["add", "modify", "delete", "rename"])
def test_a_change_killed_around_its_commit_is_finished_exactly_once(op, moment, way, team, tmp_path, cli):
    a, _ = team
    root = a.root
    a.close()
    before = head_files(root)
    commits = int(git_out(root, "rev-list", "--count", "HEAD"))
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "git").write_text(KILLING_GIT)
    (shim / "git").chmod(0o755)
    env = dict(os.environ, PATH=f"{shim}{os.pathsep}{os.environ['PATH']}", ACPMEM_TEST_GIT=REAL_GIT,
               ACPMEM_TEST_KILL=moment.replace("-staged", ""))
    if way == "exe":
        env["ACPMEM_GIT"] = "exe"
    p = subprocess.run([sys.executable, "-c", OPERATION, str(root), op, str(Path(__file__).parent / "support"),
                        *([KILLING_PYGIT2] if way == "in-process" else [])],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == -9 and "not killed" not in p.stdout, p.stderr
    assert (root / ".git" / "acpmem" / "journal.json").exists()
    if moment == "before-commit-staged":
        git_out(root, "add", "-A")  # all of it staged already (a person's `git add -A`, an older acpmem's add)
    if moment.startswith("before-commit"):
        assert git_out(root, "diff", "--cached", "--name-only").strip()  # git add had staged (part of) it

    # the interrupted change is finished by doctor --fix, once
    r = _acp(cli, root, "doctor", "--fix")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "finished an interrupted change" in r.stdout
    assert head_files(root) == _expected(op, root, before)
    assert int(git_out(root, "rev-list", "--count", "HEAD")) == commits + 1
    assert status_porcelain(root) == "" and leftovers(root) == []
    if op == "modify":
        assert "one more line" in git_out(root, "show", f"HEAD:{a.resolve('base01').path}")
    # and the vault takes the next write
    r = _acp(cli, root, "forget", "base02", "--reason", "after the kill")
    assert r.returncode == 0, r.stderr
    assert status_porcelain(root) == ""


@pytest.mark.real_process("the command is killed (-9) by its git")
def test_a_forget_killed_before_its_commit_is_finished_by_the_next_write(team, tmp_path, cli):
    """The reported wedge: the journal left and the deletion already staged (a failed or killed commit after
    `git add -A`); replaying the journal added the deletion again and every later write failed."""
    a, _ = team
    root = a.root
    a.close()
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "git").write_text(KILLING_GIT)
    (shim / "git").chmod(0o755)
    env = dict(os.environ, PATH=f"{shim}{os.pathsep}{os.environ['PATH']}", ACPMEM_TEST_GIT=REAL_GIT,
               ACPMEM_TEST_KILL="before-commit", ACPMEM_GIT="exe")
    r = cli("memory", "--vault", str(root), "forget", "base01", "--reason", "gone", env=env)
    assert r.returncode == -9, r.stderr
    git_out(root, "add", "-A", "--", "entries")
    assert git_out(root, "status", "--porcelain", "--", "entries").startswith("D  entries/base01")

    r = _acp(cli, root, "forget", "base02", "--reason", "also gone")
    assert r.returncode == 0, r.stderr
    subjects = git_out(root, "log", "-2", "--format=%s").splitlines()
    assert subjects[0].startswith("acpmem: forget: forget #base02") and subjects[1].startswith(
        "acpmem: forget: forget #base01")
    assert not [p for p in head_files(root) if p.startswith("entries/") and p.endswith(".md")]
    assert status_porcelain(root) == "" and leftovers(root) == []


# --------------------------------------------------------------------------------------------- 3. faults

def test_without_git_on_path_reads_work_and_writes_fail_in_one_line_keeping_the_request(team, tmp_path, cli):
    a, _ = team
    root = a.root
    nogit = tmp_path / "empty-path"
    nogit.mkdir()
    env = {"PATH": str(nogit)}
    for args in (("list",), ("recall", "queue worker"), ("show", "base01"), ("list", "--format", "prompt")):
        r = _acp(cli, root, *args, env=env)
        assert r.returncode == 0 and r.stdout.strip(), (args, r.stderr)
    for args in (("forget", "base01", "--reason", "x"), ("doctor",), ("doctor", "--fix"), ("sync",)):
        r = _acp(cli, root, *args, env=env)
        line = _one_line(r)
        assert r.returncode == 1 and "git was not found" in line and "PATH" in line, (args, line)
    r = _acp(cli, root, "commit", "--type", "lesson", "--note", "appends must be re-entrant", "--importance", "6",
             "--session", "s1", "--seq", "6", "--transcript", str(CHAT), "--wait", "--extractor", "offline",
             "--json", env=env)
    (line,) = r.stderr.strip().splitlines()   # under --json: the error object, one line
    err = json.loads(line)["error"]
    assert r.returncode == 1 and err["exit"] == 1 and "git was not found" in err["message"], r.stderr
    pending = list(pending_dir(root / ".acpmem").glob("r-*.json"))
    assert len(pending) == 1
    # in the background: the worker stops with one line in its log, the requests stay
    r = _acp(cli, root, "commit", "--type", "lesson", "--note", "the worker keeps what it cannot write",
             "--importance", "5", "--session", "s1", "--seq", "6", "--transcript", str(CHAT), env=env)
    assert r.returncode == 0 and r.stdout.startswith("Noted"), r.stderr
    log = root / ".acpmem" / "worker.log"
    deadline = time.monotonic() + 60
    while "stopped:" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "stopped: git was not found" in log.read_text() and "Traceback" not in log.read_text()
    assert len(list(pending_dir(root / ".acpmem").glob("r-*.json"))) == 2
    assert "base01" in " ".join(head_files(root)) and status_porcelain(root) == ""
    # git is back: the kept request is written
    r = _acp(cli, root, "extract", "--pending", "--extractor", "offline")
    assert r.returncode == 0, r.stderr
    assert not list(pending_dir(root / ".acpmem").glob("r-*.json"))
    assert git_out(root, "log", "--format=%B").count("Acpmem-Request: r-") == 2


def test_a_corrupt_git_index_is_named_and_doctor_fix_rebuilds_it_keeping_every_file(team, cli):
    a, _ = team
    root = a.root
    path = root / a.resolve("base02").path
    edited = path.read_text().replace("Deploys run", "Deploys run only")
    path.write_text(edited)  # a person's edit, not yet committed
    (root / ".git" / "index").write_bytes(b"DIRC\0\0\0\2" + os.urandom(40))

    r = _acp(cli, root, "forget", "base01", "--reason", "x")
    line = _one_line(r)
    assert "corrupt" in line and ".git/index" in line and "doctor --fix" in line, line
    assert (root / a.resolve("base01").path).exists()
    r = _acp(cli, root, "doctor")
    assert r.returncode == 1 and "corrupt" in r.stdout and "doctor --fix" in r.stdout, r.stdout + r.stderr
    assert "Traceback" not in r.stderr

    r = _acp(cli, root, "doctor", "--fix")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rebuilt" in r.stdout
    assert path.read_text() == edited  # the person's edit is kept (and committed as a human edit)
    assert "only" in git_out(root, "show", f"HEAD:{a.resolve('base02').path}")
    r = _acp(cli, root, "forget", "base01", "--reason", "x")
    assert r.returncode == 0, r.stderr
    assert status_porcelain(root) == ""


def test_doctor_checks_a_commit_graph_and_a_multi_pack_index_where_there_is_one(team, cli):
    """``doctor``'s fsck leaves out the commit-graph and multi-pack-index checks only where the repository has
    neither (two git processes fewer a ``doctor``); where git wrote one, it is checked, and a corrupt one is named."""
    from acpmem.vault.gitrun import fsck_options

    a, _ = team
    git_dir = a.root / ".git"
    assert fsck_options(git_dir) == ["-c", "core.commitGraph=false", "-c", "core.multiPackIndex=false"]
    assert _acp(cli, a.root, "doctor").returncode == 0
    for write, name, said, option in (
            (["commit-graph", "write", "--reachable"], "info/commit-graph",
             "the commit-graph file has incorrect checksum", "core.commitGraph=false"),
            (["multi-pack-index", "write"], "pack/multi-pack-index", "incorrect checksum", "core.multiPackIndex=false")):
        git_out(a.root, "repack", "-d", "-q")
        git_out(a.root, *write)
        assert fsck_options(git_dir) == []
        made = git_dir / "objects" / name
        data = bytearray(made.read_bytes())
        data[-1] ^= 0xFF     # its checksum
        made.write_bytes(bytes(data))
        r = _acp(cli, a.root, "doctor")
        assert r.returncode == 1 and f"git fsck: {said}" in r.stdout, r.stdout
        git_out(a.root, "-c", option, "fsck")    # what finds it is the check left out where there is none
        made.unlink()
    (git_dir / "objects" / "info" / "alternates").write_text(str(git_dir / "objects") + "\n")
    assert fsck_options(git_dir) == []


def test_a_damaged_object_store_is_named_by_doctor_and_nothing_is_committed_over_it(team, cli):
    """A pack cut short (a disk that lost the end of a file): the files cannot be compared with HEAD's, so
    ``doctor`` names the damage — not every file as an uncommitted edit — and ``doctor --fix`` commits nothing over
    it; a write refuses before it writes anything (libgit2's status would call every file added; git's refuses),
    in one line that says git's complaint once."""
    a, _ = team
    root = a.root
    git_out(root, "repack", "-a", "-d", "-q")
    (pack,) = (root / ".git" / "objects" / "pack").glob("*.pack")
    pack.chmod(0o644)
    pack.write_bytes(pack.read_bytes()[: pack.stat().st_size // 2])
    head = git_out(root, "rev-parse", "HEAD")    # the ref still names it; its object cannot be read
    for args in (("doctor",), ("doctor", "--fix")):
        r = _acp(cli, root, *args)
        assert r.returncode == 1 and "HEAD's commit cannot be read" in r.stdout and "git fsck: " in r.stdout, \
            (args, r.stdout, r.stderr)
        assert "uncommitted human edit" not in r.stdout and "fixed" not in r.stdout, r.stdout
        assert r.stderr.startswith("Error: 2 problems found") and "Traceback" not in r.stderr, r.stderr
    assert git_out(root, "rev-parse", "HEAD") == head
    before = sorted((root / "entries").iterdir())
    line = _one_line(_acp(cli, root, "remember", "A fact on a damaged repository.", "--type", "fact"))
    assert line.count("does not match index") == 1 and "git status failed" in line, line
    assert sorted((root / "entries").iterdir()) == before     # refused before anything was written


def test_the_object_files_a_killed_git_left_are_counted_once_and_removed(team, cli):
    """What a git killed while writing objects leaves: an empty temporary object (git's ``tmp_obj_*`` before its
    first byte), a temporary one half written and an empty object file. ``doctor`` counts each file once (the empty
    temporary one is both empty and temporary); ``doctor --fix`` removes those three and nothing else."""
    a, _ = team
    objects = a.root / ".git" / "objects"
    (objects / "ab").mkdir(exist_ok=True)
    (objects / "ab" / "tmp_obj_Xy12Ab").write_bytes(b"")
    (objects / "ab" / "tmp_obj_Zq34Cd").write_bytes(b"x\x9c half an object")
    (objects / "cd").mkdir(exist_ok=True)
    (objects / "cd" / ("0" * 38)).write_bytes(b"")
    real = sorted(p for p in objects.glob("??/*") if p.stat().st_size and not p.name.startswith("tmp_obj_"))
    r = _acp(cli, a.root, "doctor")
    assert r.returncode == 1 and "3 empty or temporary git object file(s) left by a crash" in r.stdout, r.stdout
    r = _acp(cli, a.root, "doctor", "--fix")
    assert "removed 3 empty or temporary git object file(s) left by a crash" in r.stdout, r.stdout
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(objects.glob("??/*")) == real

def test_doctor_says_so_when_git_dies_without_a_word(team, tmp_path, cli):
    """A git killed by a signal before it says anything (git crashes on some damaged repositories) is one finding
    naming the signal, never an internal error."""
    a, _ = team
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "git").write_text(f'#!/bin/sh\ncase " $* " in *" fsck "*) kill -SEGV $$;; esac\nexec {REAL_GIT} "$@"\n')
    (shim / "git").chmod(0o755)
    r = _acp(cli, a.root, "doctor", env={"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"})
    assert r.returncode == 1 and "git fsck: git stopped on SIGSEGV without saying why" in r.stdout, r.stdout
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_vault_folder_without_git_gives_the_real_next_step_and_never_writes_elsewhere(tmp_path, cli, clock):
    workspace = tmp_path / "project"
    workspace.mkdir()
    git_out(workspace, "init", "-q", "-b", "main")
    (workspace / "code.py").write_text("print(1)\n")
    git_out(workspace, "add", "-A")
    git_out(workspace, "commit", "-q", "-m", "code")
    v = init_vault(workspace, clock=clock)  # .acp-memory inside the project, its own repository
    v.write_entries([make_entry("base01", "One fact", "- a fact.").with_changes(path="entries/base01-one-fact.md")],
                    subject="add", why="t")
    root = v.root
    v.close()
    shutil.rmtree(root / ".git")
    project_head = git_out(workspace, "rev-parse", "HEAD")

    for args in (("list",), ("show", "base01")):
        r = _acp(cli, root, *args)
        assert r.returncode == 0, r.stderr
    r = cli("memory", "list", cwd=root)  # found from inside the folder too
    assert r.returncode == 0 and "base01" in r.stdout, r.stderr
    commit = ("commit", "--type", "fact", "--note", "a note", "--importance", "5", "--session", "s", "--seq", "1")
    for args in (("forget", "base01", "--reason", "x"), ("doctor",), ("doctor", "--fix"), ("sync",), commit):
        r = _acp(cli, root, *args)
        text = _one_line(r) if args != ("doctor",) else r.stdout
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert "no .git" in text and f"git -C {root} init -b main" in text, (args, text)
        assert "run `acp memory doctor`" not in text, (args, text)
        assert "Noted" not in r.stdout, (args, r.stdout)
    assert not list(pending_dir(root / ".acpmem").glob("r-*.json"))   # nothing left to fail in the background
    r = cli("memory", "init", cwd=root)
    assert r.returncode == 1 and "no .git" in _one_line(r)
    assert not (root / ".acp-memory").exists()
    # nothing went into the surrounding project's repository
    assert git_out(workspace, "rev-parse", "HEAD") == project_head
    assert git_out(workspace, "status", "--porcelain") == ""

    # the next step it gives works
    git_out(root, "init", "-q", "-b", "main")
    r = _acp(cli, root, "doctor", "--fix")
    assert r.returncode == 0, r.stdout + r.stderr
    r = _acp(cli, root, "forget", "base01", "--reason", "x")
    assert r.returncode == 0, r.stderr
    assert status_porcelain(root) == ""


def test_a_failed_fetch_says_what_git_said_in_one_line(vault, tmp_path, cli):
    git_out(vault.root, "remote", "add", "origin", str(tmp_path / "no-such-remote.git"))
    r = _acp(cli, vault.root, "sync")
    line = _one_line(r)
    assert r.returncode == 1
    assert "does not appear to be a git repository" in line and "Could not read from remote repository" in line, line
    assert "and the repository exists" not in line
    assert f"git -C {vault.root} fetch" in line


# --------------------------------------------------------------------------------------------- 4. rebase, detached HEAD

def _start_rebase(root: Path) -> None:
    """Stop a real interactive rebase at its last commit (``edit``): `.git/rebase-merge` exists, HEAD is detached."""
    env = dict(os.environ, GIT_SEQUENCE_EDITOR="sed -i -e s/^pick/edit/", GIT_EDITOR="true")
    r = subprocess.run(["git", "-C", str(root), "rebase", "-i", "HEAD~1"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and (root / ".git" / "rebase-merge").is_dir(), r.stderr


def _writes_all_refused(cli, root: Path, tmp_path: Path, word: str) -> None:
    """Every write refuses in one line naming ``word`` and the next step; nothing is committed or left written; a
    fork request stays pending without an attempt used; doctor names the state and `--fix` commits nothing."""
    head = git_out(root, "rev-parse", "HEAD").strip()
    fixed = tmp_path / "fixed.md"
    text = next((root / "entries").glob("base01*.md")).read_text()
    fixed.write_text(text.replace("The queue is drained", "The queue is always drained"))
    (root / "entries" / "hand01.md").write_text(new_entry_text(make_entry("hand01", "Written by hand", "- by hand.")))
    writes = [("remember", "Rebases orphan writes", "--type", "fact", "--importance", "3"),
              ("forget", "base01", "--reason", "x"),
              ("edit", "base01", "--from", str(fixed)),
              ("commit", "--type", "lesson", "--note", "appends must be re-entrant", "--importance", "6",
               "--session", "s1", "--seq", "6", "--transcript", str(CHAT), "--wait", "--extractor", "offline"),
              ("extract", "--pending", "--extractor", "offline")]
    for args in writes:
        r = _acp(cli, root, *args)
        line = _one_line(r)
        assert r.returncode == 1 and word in line and "then run the command again" in line, (args, line)
    assert git_out(root, "rev-parse", "HEAD").strip() == head
    assert "hand01" not in " ".join(head_files(root))
    pending = list(pending_dir(root / ".acpmem").glob("r-*.json"))
    assert len(pending) == 1 and json.loads(pending[0].read_text())["attempts"] == 0
    r = _acp(cli, root, "doctor")
    assert r.returncode == 1 and word in r.stdout, r.stdout
    r = _acp(cli, root, "doctor", "--fix")
    assert git_out(root, "rev-parse", "HEAD").strip() == head and word in r.stdout, r.stdout + r.stderr


def test_writes_during_a_rebase_are_refused_and_kept_until_it_is_done(team, tmp_path, cli):
    a, _ = team
    root = a.root
    branch_head = git_out(root, "rev-parse", "main").strip()
    _start_rebase(root)
    _writes_all_refused(cli, root, tmp_path, "rebase")
    subprocess.run(["git", "-C", str(root), "rebase", "--abort"], check=True, capture_output=True)
    assert git_out(root, "rev-parse", "HEAD").strip() == branch_head
    # on the branch again: the kept request is written there, with the hand edit before it
    r = _acp(cli, root, "extract", "--pending", "--extractor", "offline")
    assert r.returncode == 0, r.stderr
    assert not list(pending_dir(root / ".acpmem").glob("r-*.json"))
    assert git_out(root, "log", "main", "--format=%B").count("Acpmem-Request: r-") == 1
    assert "entries/hand01.md" in head_files(root)


def test_writes_on_a_detached_head_are_refused_and_doctor_names_it(team, tmp_path, cli):
    a, _ = team
    root = a.root
    git_out(root, "checkout", "-q", "--detach")
    _writes_all_refused(cli, root, tmp_path, "detached HEAD")
    git_out(root, "checkout", "-q", "main")
    r = _acp(cli, root, "extract", "--pending", "--extractor", "offline")
    assert r.returncode == 0, r.stderr
    assert git_out(root, "log", "main", "--format=%B").count("Acpmem-Request: r-") == 1


def test_doctor_names_a_gitattributes_encoding_that_hides_every_entry_in_a_clone(team, tmp_path, cli):
    a, _ = team
    (a.root / ".gitattributes").write_text("entries/*.md working-tree-encoding=UTF-16\n")
    git_out(a.root, "add", ".gitattributes")
    git_out(a.root, "commit", "-q", "-m", "a teammate's attributes")
    clone = tmp_path / "clone"
    git_out(tmp_path, "clone", "-q", str(a.root), str(clone))
    r = _acp(cli, clone, "doctor")
    assert r.returncode == 1
    (line,) = [ln for ln in r.stdout.splitlines() if "working-tree-encoding" in ln and ln.startswith("error")]
    assert "working-tree-encoding=UTF-16 in .gitattributes" in line and "2 entry file(s)" in line, r.stdout
    # the steps it gives work
    (clone / ".gitattributes").write_text("")
    git_out(clone, "commit", "-q", "-m", "entries are UTF-8", "--", ".gitattributes")
    git_out(clone, "rm", "-r", "-q", "--cached", "entries")
    git_out(clone, "checkout", "HEAD", "--", "entries")
    r = _acp(cli, clone, "doctor")
    assert r.returncode == 0 and "2 valid entries, 0 invalid" in r.stdout, r.stdout
