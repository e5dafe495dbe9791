"""A read-only vault (a read-only mount, a folder the user cannot write): every read works — the derived state goes
to the user's cache, said once — and every write fails with one line, changing nothing.

The vault is made read-only the way users meet it: a read-only bind mount where this process may mount (root, as
in CI); when not root, a copy without write permission. (Root without the right to mount cannot be kept from
writing: that environment skips, saying so.) Each command is a real process, without a fresh interpreter
(``tests/support/launcher.py``).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import launcher


class ReadOnly:
    """A read-only view of a vault, and how to run commands on it."""

    def __init__(self, root: Path, home: Path, as_user: int | None, cleanup) -> None:
        self.root, self.home, self.cleanup = root, home, cleanup

    def run(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACPMEM_")}
        env.update(HOME=str(self.home), XDG_CACHE_HOME=str(self.home / ".cache"))
        return subprocess.run([launcher.acp(), "memory", "--vault", str(self.root), *args], capture_output=True,
                              text=True, env=env, input=input, timeout=120, cwd=str(self.home))


def _try_bind_ro(src: Path, dst: Path) -> bool:
    dst.mkdir()
    if subprocess.run(["mount", "--bind", str(src), str(dst)], capture_output=True).returncode != 0:
        return False
    if subprocess.run(["mount", "-o", "remount,bind,ro", str(dst)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(dst)], capture_output=True)
        return False
    return True


@pytest.fixture
def readonly(example_vault, tmp_path):
    src = example_vault.root
    example_vault.close()
    home = tmp_path / "home"
    home.mkdir()
    mnt = tmp_path / "ro"
    if os.geteuid() == 0:
        if not _try_bind_ro(src, mnt):
            pytest.skip("root may not mount here, and root ignores file permissions: no read-only vault to test")
        view = ReadOnly(mnt, home, None, lambda: subprocess.run(["umount", "-l", str(mnt)], capture_output=True))
    else:
        base = tmp_path / "copy"
        shutil.copytree(src, base / "vault", symlinks=True)
        for d, dirs, files in os.walk(base / "vault"):
            for name in files:
                os.chmod(Path(d) / name, 0o444)
            os.chmod(d, 0o555)
        view = ReadOnly(base / "vault", home, None, lambda: _make_writable(base))
    try:
        yield view
    finally:
        view.cleanup()


def _make_writable(base: Path) -> None:
    for d, dirs, files in os.walk(base):
        os.chmod(d, 0o755)


def _status(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True).stdout


def test_reads_work_and_say_once_where_the_index_is(readonly, example_vault):
    ids = sorted(e.id for e in example_vault.load().entries)
    first = readonly.run("list", "--json")
    assert first.returncode == 0, first.stderr
    assert sorted(e["id"] for e in __import__("json").loads(first.stdout)["entries"]) == ids
    assert first.stderr.count("\n") == 1 and "read-only" in first.stderr and "Traceback" not in first.stderr
    for args in (("list",), ("list", "--format", "prompt"), ("list", "--format", "prompt", "--session", "s1"),
                 ("list", "--format", "prompt", "--session", "s1"), ("recall", "sqlite queue", "-n", "1"),
                 ("recall", "上传大文件", "--json"), ("show", ids[0]), ("score", "--seed", "1"), ("stats", "--json"),
                 ("log", "-n", "3"), ("tools",), ("surface", "--session", "s2", "--json")):
        r = readonly.run(*args)
        assert r.returncode == 0 and r.stdout and r.stderr == "", (args, r.stderr)
    hit = readonly.run("recall", "sqlite queue", "-n", "1")
    assert "Use SQLite WAL mode" in hit.stdout
    frozen = [readonly.run("list", "--format", "prompt", "--session", "s9").stdout for _ in range(2)]
    assert frozen[0] == frozen[1] and "<<acpmem-data" in frozen[0]
    cache = readonly.home / ".cache" / "acpmem" / "vaults"
    assert any(cache.glob("*/index.sqlite")), "the derived state went to the user's cache"


def test_doctor_reads_a_read_only_vault(readonly):
    r = readonly.run("doctor")
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert "read-only" in r.stdout + r.stderr and "valid entries" in r.stdout


@pytest.mark.parametrize("args", [
    ("commit", "--type", "lesson", "--note", "n", "--importance", "5", "--session", "s", "--seq", "1"),
    ("forget", "ID", "--reason", "x"), ("edit", "ID", "--from", "NEWTEXT"), ("sync",), ("doctor", "--fix"),
    ("extract", "--note", "n", "--type", "fact", "--importance", "3", "--session", "s", "--seq", "0"),
])
def test_writes_fail_with_one_line_and_change_nothing(readonly, example_vault, tmp_path, args):
    entry = example_vault.load().entries[0]
    new = readonly.home / "new.md"
    new.write_text((example_vault.root / entry.path).read_text().replace(entry.title, "Changed"))
    os.chmod(new, 0o644)
    args = tuple(entry.id if a == "ID" else str(new) if a == "NEWTEXT" else a for a in args)
    before = (_status(example_vault.root), subprocess.run(["git", "-C", str(example_vault.root), "rev-parse", "HEAD"],
                                                           capture_output=True, text=True).stdout)
    r = readonly.run(*args)
    assert r.returncode == 1, (args, r.stdout, r.stderr)
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "read-only" in errors[0] and "nothing was changed" in errors[0], r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    after = (_status(example_vault.root), subprocess.run(["git", "-C", str(example_vault.root), "rev-parse", "HEAD"],
                                                          capture_output=True, text=True).stdout)
    assert after == before


def test_init_on_a_file_or_a_read_only_folder_is_one_line_and_leaves_nothing(tmp_path, cli):
    afile = tmp_path / "notes.txt"
    afile.write_text("mine\n")
    r = cli("memory", "init", str(afile))
    assert r.returncode == 1 and r.stderr.startswith("Error: ") and "is a file" in r.stderr, r.stderr
    assert afile.read_text() == "mine\n"
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        if not _try_bind_ro(ro, tmp_path / "ro-view"):
            pytest.skip("root may not mount here: no read-only folder to test")
        target, cleanup = tmp_path / "ro-view", lambda: subprocess.run(["umount", "-l", str(tmp_path / "ro-view")])
    else:
        os.chmod(ro, 0o555)
        target, cleanup = ro, lambda: os.chmod(ro, 0o755)
    try:
        r = cli("memory", "init", str(target / "vault"))
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and "cannot create the vault" in r.stderr, r.stderr
        assert not list(target.iterdir())
    finally:
        cleanup()


def test_a_state_folder_another_process_deletes_as_the_vault_opens_is_no_read_only_vault(vault, monkeypatch, cli):
    """``.acpmem/`` is derived state a person (or a script) may delete at any moment. Deleted just as a command asks
    whether it may write there, the vault is still writable: the command goes on and makes it again (it said "the
    vault is read-only" once, under ``test_reliability``'s deleter: a look at the folder, then at its permissions)."""
    from acpmem.vault import discovery

    root = vault.root
    vault.close()
    state = root / ".acpmem"
    assert state.is_dir()
    real_access, deleted = os.access, []

    def access(path, mode, *a, **kw):   # the other process deletes the folder the moment it is first asked about
        if not deleted and os.fspath(path) == str(state):
            shutil.rmtree(state)
            deleted.append(path)
        return real_access(path, mode, *a, **kw)

    monkeypatch.setattr(os, "access", access)   # deletes once, at the first look after ``deleted`` is emptied
    assert discovery.state_location(root) == (state, False) and deleted
    assert cli("memory", "--vault", str(root), "list").returncode == 0 and state.is_dir()   # made again
    deleted.clear()
    r = cli("memory", "--vault", str(root), "remember", "Deploys wait for the smoke tests", "--type", "fact")
    assert r.returncode == 0 and deleted and state.is_dir(), r.stderr
    listed = cli("memory", "--vault", str(root), "list")
    assert "Deploys wait for the smoke tests" in listed.stdout, listed.stderr


# --------------------------------------------------------------------------------------------- a full disk

@pytest.fixture
def small_disk(tmp_path):
    """A real file system of 2 MB (tmpfs) that the test fills until the OS answers ENOSPC. Mounting needs root (CI
    runs as root); elsewhere the test skips, saying so."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root); not root here")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"this root may not mount a tmpfs (no CAP_SYS_ADMIN): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(folder: Path, name: str = "filler") -> None:
    """Write until the file system refuses with ENOSPC (a real one, from the kernel)."""
    import errno

    with open(folder / name, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            return


def test_reads_on_a_full_disk_are_served_from_the_files(small_disk):
    """The index cannot be updated (an entry was added by hand, then the disk filled): `list`, `recall`, the prompt
    index and the hook still answer, from the files, with one warning; a write says "the disk is full" in one line."""
    def acp(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([launcher.acp(), "memory", "--vault", str(root), *args], capture_output=True, text=True,
                              input=input, timeout=300)

    root = small_disk / "v"
    r = subprocess.run([launcher.acp(), "memory", "init", "--example", str(root)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    before = json.loads(acp("list", "--json").stdout)["entries"]    # the index on disk is built
    first = before[0]
    text = next((root / "entries").glob(f"{first['id']}*.md")).read_text("utf-8")
    (root / "entries" / "fullz1-by-hand.md").write_text(
        text.replace(f"id: {first['id']}", "id: fullz1").replace(first["title"], "Written by hand on a full disk"),
        "utf-8")
    _fill(small_disk)
    r = acp("list", "--json")
    assert r.returncode == 0, r.stderr
    assert "fullz1" in [e["id"] for e in json.loads(r.stdout)["entries"]]
    for args in (("list",), ("recall", "Written by hand on a full disk"), ("list", "--format", "prompt")):
        r = acp(*args)
        assert r.returncode == 0 and "internal error" not in r.stderr, (args, r.stderr)
        said = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(said) == 1 and said[0].startswith("Warning: the disk holding") and "is full" in said[0], r.stderr
    assert "Written by hand on a full disk" in acp("recall", "Written by hand on a full disk").stdout
    event = json.dumps({"session_id": "s-full", "hook_event_name": "SessionStart", "cwd": str(root)})
    r = subprocess.run([launcher.acp(), "memory", "hook", "claude-code", "--vault", str(root)], input=event,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "Written by hand on a full disk" in r.stdout, r.stdout + r.stderr
    r = acp("remember", "Nothing fits on a full disk", "--type", "fact", "--importance", "3")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and lines[-1].startswith("Error: ") and "full" in lines[-1], r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr


def test_doctor_on_a_full_disk_says_so_and_still_checks_the_files(small_disk):
    """`doctor` and `doctor --fix` on a full disk: one error says "the disk is full" and what to do, the checks
    that need only the files still report (a hand edit, an invalid file), no internal error, nothing lost; once
    space is freed, the hand edit is committed."""
    def acp(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([launcher.acp(), "memory", "--vault", str(root), *args], capture_output=True, text=True,
                              timeout=300)

    root = small_disk / "v"
    r = subprocess.run([launcher.acp(), "memory", "init", "--example", str(root)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    first = json.loads(acp("list", "--json").stdout)["entries"][0]
    edited = next((root / "entries").glob(f"{first['id']}*.md"))
    edited.write_text(edited.read_text("utf-8") + "- Added by hand before the disk filled.\n", "utf-8")
    (root / "entries" / "broken.md").write_text("not an entry\n", "utf-8")
    _fill(small_disk)
    for args in (("doctor",), ("doctor", "--fix")):
        r = acp(*args)
        assert r.returncode == 1 and "internal error" not in r.stderr and "Traceback" not in r.stderr, \
            (args, r.stdout, r.stderr)
        lines = r.stdout.splitlines()
        full = [i for i, ln in enumerate(lines) if ln.startswith("error") and "the disk is full" in ln]
        assert len(full) == 1 and "free some space" in lines[full[0] + 1], (args, r.stdout)
        assert sum("is full" in ln for ln in lines) == 1, (args, r.stdout)     # said once
        # a commit small enough for what is left may still fit: then --fix made it, else it is still said
        assert f"uncommitted human edit: {edited.relative_to(root)}" in r.stdout or \
            (args == ("doctor", "--fix") and "committed 1 human edit(s)" in r.stdout), (args, r.stdout)
        assert "entries/broken.md" in r.stdout and "valid entries, 1 invalid file(s)" in r.stdout, (args, r.stdout)
    assert "Added by hand before the disk filled." in edited.read_text("utf-8")
    (small_disk / "filler").unlink()
    r = acp("doctor", "--fix")
    assert "the disk is full" not in r.stdout and "internal error" not in r.stderr, r.stdout + r.stderr
    head = subprocess.run(["git", "-C", str(root), "show", f"HEAD:{edited.relative_to(root)}"], capture_output=True,
                          text=True).stdout
    assert "Added by hand before the disk filled." in head


def test_show_and_recall_on_a_full_disk_serve_the_entry_even_when_the_read_cannot_be_recorded(small_disk):
    """The read log needs a new block just when the disk is full (it holds exactly one block): recording the read
    failed with ENOSPC, so `show` and `recall` said "the disk is full" and exit 1 while `list` read the files; now
    the entry is served, the read not recorded, with one warning."""
    def acp(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([launcher.acp(), "memory", "--vault", str(root), *args], capture_output=True, text=True,
                              timeout=300)

    root = small_disk / "v"
    r = subprocess.run([launcher.acp(), "memory", "init", "--example", str(root)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    first = json.loads(acp("list", "--json").stdout)["entries"][0]
    assert acp("show", first["id"]).returncode == 0
    log = root / ".acpmem" / "reads.log"
    text = log.read_text("utf-8")
    log.write_text(text + "#" * (4096 - len(text) - 1) + "\n", "utf-8")   # one full block: the next read needs more
    entry = next((root / "entries").glob(f"{first['id']}*.md"))
    entry.write_text(entry.read_text("utf-8") + "- A line added by hand: the index is behind the files.\n", "utf-8")
    _fill(small_disk)
    from acpmem.vault.reader import VaultReader

    v = VaultReader(root)
    v.mark_read([first["id"]])                 # the record's append is refused (ENOSPC): the read goes on
    assert [w for w in v.warnings if "is full" in w] and log.stat().st_size == 4096
    v.close()
    for args in (("show", first["id"]), ("recall", first["title"])):
        r = acp(*args)
        assert r.returncode == 0 and first["title"] in r.stdout, (args, r.stderr)
        said = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(said) == 1 and said[0].startswith("Warning: the disk holding") and "is full" in said[0], r.stderr
