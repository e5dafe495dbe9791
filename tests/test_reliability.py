"""Reliability of the write path under real concurrency and real crashes.

Every test counts what was acknowledged and finds it in HEAD: ``git fsck`` alone proves nothing (eight processes
committing through plain GitPython lose most of their commits while fsck stays clean). Writers are real processes
(``tests/support/helpers_proc.py``), git is the real executable, the catalog a real SQLite file. Bounded in count and time.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import helpers_proc as hp
from acpmem.upkeep import doctor as health
from acpmem.vault import reader
from acpmem.read import resident
from acpmem.core.errors import AcpmemError, GitStateError
from acpmem.vault.writer import Vault
from acpmem.write.requests import pending_dir

heavy = pytest.mark.heavy  # the slow ones; they still run in the default `pytest`


def _catalog_rows(root: Path) -> list[tuple]:
    con = sqlite3.connect(str(root / ".acpmem" / "index.sqlite"))
    try:
        return sorted(con.execute("SELECT path, sig, entry_id, ok, data FROM files").fetchall())
    finally:
        con.close()


def _rebuilt_catalog_rows(root: Path) -> list[tuple]:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(str(root / ".acpmem" / "index.sqlite") + suffix)
    v = Vault(root, clock=lambda: hp.PINNED)
    try:
        v.load()
    finally:
        v.close()
    return _catalog_rows(root)


def _assert_acked_in_head(root: Path, acks: list[list[str]]) -> None:
    head = hp.head_files(root)
    missing = [a for a in acks if a[1] not in head]
    assert not missing, f"{len(missing)} acknowledged writes are not in HEAD, e.g. {missing[:3]}"
    # the commit the writer was told about exists and holds the file, and HEAD's file is the entry (two git processes
    # for all the acknowledgements, not two each)
    held = hp.object_types(root, *(f"{sha}:{rel}" for _, rel, sha in acks))
    texts = hp.head_texts(root, *(rel for _, rel, _ in acks))
    for ident, rel, sha in acks:
        assert held[f"{sha}:{rel}"] == "blob", (ident, sha, rel)
        assert f"id: {ident}\n" in texts[rel], (ident, rel)


def _assert_clean(root: Path) -> None:
    assert hp.status_porcelain(root) == ""
    assert hp.leftovers(root) == []
    res = hp.fsck(root)
    assert res.returncode == 0 and "error" not in res.stderr.lower(), res.stderr


# --------------------------------------------------------------------------------------------- 1. concurrent writers

@heavy
def test_eight_processes_times_fifty_writes_lose_nothing(vault, tmp_path):
    root = vault.root
    vault.close()
    acks_path = tmp_path / "acks.tsv"
    procs, n_procs, n_each = [], 8, 50
    t0 = time.monotonic()
    for p in range(n_procs):
        procs.append(hp.start_writer(root, f"p{p}", n_each, acks_path))
    for pr in procs:
        out, err = pr.communicate(timeout=280)
        assert pr.returncode == 0, err[-2000:]
    elapsed = time.monotonic() - t0
    print(f"\n8 processes x 50 writes: {elapsed:.1f} s ({elapsed / (n_procs * n_each) * 1000:.0f} ms per write)")

    acks = hp.read_acks(acks_path)
    assert len(acks) == n_procs * n_each
    assert len({a[0] for a in acks}) == n_procs * n_each
    _assert_acked_in_head(root, acks)
    # exactly one commit per write, plus the init commit; every write commit is distinct
    assert hp.commit_count(root) == 1 + n_procs * n_each
    assert len({a[2] for a in acks}) == n_procs * n_each
    _assert_clean(root)
    # the derived catalog the writers left equals one rebuilt from the files
    left = _catalog_rows(root)
    assert len([r for r in left if r[3] == 1]) == n_procs * n_each
    assert left == _rebuilt_catalog_rows(root)


CHAT = Path(__file__).parent / "fixtures" / "transcripts" / "openai_chat.json"

CLI_WRITER = r"""
import json, os, subprocess, sys
acp, root, tag, n, acks, chat, wait = sys.argv[1:8]
for i in range(int(n)):
    r = subprocess.run([acp, "memory", "--vault", root, "commit", "--type", "lesson", "--note",
                        f"writer {tag} lesson {i} about re-entrant appends", "--importance", "6",
                        "--session", f"s-{tag}", "--seq", "6", "--transcript", chat, "--json",
                        *(["--wait", "--extractor", "offline"] if wait == "wait" else [])],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{tag}/{i}: exit {r.returncode}: {r.stderr}")
    ack = json.loads(r.stdout)
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (f"{tag}-{i}\t{ack['request']}\t{(ack.get('outcome') or {}).get('status', 'pending')}\n").encode())
    os.close(fd)
"""


def _cli_writers(root: Path, acks_path: Path, n_procs: int, n_each: int, wait: bool, tag: str) -> None:
    acp = str(Path(sys.executable).parent / "acp")
    procs = [subprocess.Popen([sys.executable, "-c", CLI_WRITER, acp, str(root), f"{tag}{p}", str(n_each),
                               str(acks_path), str(CHAT), "wait" if wait else "bg"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for p in range(n_procs)]
    for pr in procs:
        _, err = pr.communicate(timeout=280)
        assert pr.returncode == 0, err[-2000:]


def _wait_for_worker(root: Path, timeout: float = 240.0) -> None:
    """Until no request is pending and no background worker holds the worker lock."""
    import fcntl

    deadline = time.monotonic() + timeout
    from acpmem.write.worker import lock_path

    lock = lock_path(root / ".acpmem")
    while time.monotonic() < deadline:
        if not list(pending_dir(root / ".acpmem").glob("r-*.json")):
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError:
                pass
            finally:
                os.close(fd)
        time.sleep(0.2)
    raise AssertionError("the background worker did not drain the queue in time")


@heavy
def test_eight_processes_times_ten_commits_through_the_real_cli(vault, tmp_path):
    """8 x 10 `acp memory commit` (the hook's path: a durable request, the background worker extracts; no model is
    configured, so the extractor is the offline one) and 4 x 1 `commit --wait --extractor offline` at the same
    time, every one a separate console-script process."""
    root = vault.root
    vault.close()
    acks_path = tmp_path / "acks.tsv"
    bg = threading.Thread(target=_cli_writers, args=(root, acks_path, 8, 10, False, "c"))
    bg.start()
    _cli_writers(root, acks_path, 4, 1, True, "w")
    bg.join()
    _wait_for_worker(root)
    acks = hp.read_acks(acks_path)
    assert len(acks) == 84
    # --wait extracts inline, unless the background worker got to that request first ("already")
    assert all(a[2] in ("written", "already") for a in acks if a[0].startswith("w")), acks
    # every acknowledged request is in exactly one commit, and that commit's entry is in HEAD
    log = hp.git_out(root, "log", "--format=%H%x1f%(trailers:key=Acpmem-Request,valueonly)%x1f"
                                  "%(trailers:key=Acpmem-Entry,valueonly)%x1e")
    by_request: dict[str, list[tuple[str, str]]] = {}
    for rec in filter(str.strip, log.split("\x1e")):
        sha, req, ents = (x.strip() for x in rec.split("\x1f"))
        if req:
            by_request.setdefault(req, []).append((sha, ents))
    head = hp.head_files(root)
    for a in acks:
        assert len(by_request.get(a[1], [])) == 1, (a, by_request.get(a[1]))
        (_, ents), = by_request[a[1]]
        assert ents and all(any(p.startswith(f"entries/{e}") for p in head) for e in ents.split())
    assert hp.commit_count(root) == 1 + 84
    _assert_clean(root)
    assert not list(pending_dir(root / ".acpmem").glob("r-*.json"))
    assert _catalog_rows(root) == _rebuilt_catalog_rows(root)
    # the search index answers the same after a rebuild from nothing
    from acpmem.core.layout import DB_NAME
    from acpmem.infra import db
    from acpmem.read.retrieval import recall

    def ids(query: str) -> list[str]:
        v = Vault(root, clock=lambda: hp.PINNED)
        try:
            return [h.entry.id for h in recall(v, query, limit=10)]
        finally:
            v.close()

    before = {q: ids(q) for q in ("writer c3 lesson 7", "re-entrant appends", "w2")}
    assert all(before.values())
    db.delete(root / ".acpmem" / DB_NAME)
    assert {q: ids(q) for q in before} == before


# --------------------------------------------------------------------------------------------- 2. same entry, many hands

def test_same_entry_many_hands_lose_no_update(vault, tmp_path):
    root = vault.root
    target = hp.make_entry("tgt001", "Shared target", "Original body.")
    vault.write_entries([target.with_changes(path="entries/tgt001-shared-target.md")], subject="seed", why="test")
    vault.close()
    base = hp.commit_count(root)
    edit_acks, sup_acks = tmp_path / "edits.tsv", tmp_path / "sups.tsv"
    procs = [hp.start("edit", root, "tgt001", f"e{k}", 6, edit_acks) for k in range(4)]
    procs += [hp.start("supersede", root, "tgt001", f"s{k}", sup_acks) for k in range(3)]
    procs += [hp.start("read", root, "tgt001", 25) for _ in range(2)]
    for pr in procs:
        _, err = pr.communicate(timeout=200)
        assert pr.returncode == 0, err[-2000:]

    edits = [a[0] for a in hp.read_acks(edit_acks)]
    assert len(edits) == 24
    sups = hp.read_acks(sup_acks)
    ok_sups = [ident for status, ident in sups if status == "ok"]
    assert len(sups) == 3 and ok_sups, sups
    final = hp.git_out(root, "show", "HEAD:entries/tgt001-shared-target.md")
    for tag in edits:
        t, i = tag.split("-")
        assert f"- {t} line {i}\n" in final, f"acknowledged update {tag} was lost"
    assert "Original body." in final
    marked = [ln.split(":", 1)[1].strip() for ln in final.splitlines() if ln.startswith("superseded_by:")]
    assert len(marked) == 1 and marked[0] in ok_sups, (marked, ok_sups)
    head = hp.head_files(root)
    for ident in ok_sups:
        assert any(p.startswith(f"entries/{ident}-") for p in head)
    # one commit per acknowledged change; the reads made none
    assert hp.commit_count(root) == base + len(edits) + len(ok_sups)
    _assert_clean(root)
    v = Vault(root, clock=lambda: hp.PINNED)
    try:
        for _ in range(5):
            reader.show(v, "tgt001")
            resident.resident_index(v, session="s-read")
    finally:
        v.close()
    assert hp.commit_count(root) == base + len(edits) + len(ok_sups)
    assert hp.status_porcelain(root) == ""


# --------------------------------------------------------------------------------------------- 3. a foreign index.lock

def _set_git_setting(root: Path, key: str, value: str) -> None:
    toml = root / "acpmem.toml"
    text = toml.read_text("utf-8")
    prefix = f"{key} = "
    lines = [f"{prefix}{value}" if ln.startswith(prefix) else ln for ln in text.splitlines()]
    toml.write_text("\n".join(lines) + "\n", "utf-8")
    hp.git_out(root, "commit", "-q", "-m", f"set {key}", "--", "acpmem.toml")


def _hold_foreign_lock(root: Path, seconds: float, seen: dict) -> threading.Thread:
    """A person's git: create .git/index.lock, keep it ``seconds``, then remove it — noting whether it was still
    there (nobody else may delete it)."""
    lock = root / ".git" / "index.lock"
    lock.write_bytes(b"foreign")
    seen["ino"] = lock.stat().st_ino

    def release() -> None:
        time.sleep(seconds)
        try:
            seen["still_there"] = lock.stat().st_ino == seen["ino"] and lock.read_bytes() == b"foreign"
            lock.unlink()
        except FileNotFoundError:
            seen["still_there"] = False

    t = threading.Thread(target=release)
    t.start()
    return t


def test_foreign_index_lock_is_waited_for_and_never_deleted(vault):
    root = vault.root
    seen: dict = {}
    t = _hold_foreign_lock(root, 1.0, seen)
    try:
        sha = vault.write_entries([hp.make_entry("wait01", "Waited", "It waited.")], subject="add", why="test")
    finally:
        t.join()
    assert seen["still_there"] is True
    assert "entries/wait01-waited.md" in hp.head_files(root)
    assert hp.git_out(root, "rev-parse", "HEAD").strip() == sha
    _assert_clean(root)


def test_foreign_index_lock_held_too_long_fails_clearly_and_keeps_the_write_out(vault):
    root = vault.root
    _set_git_setting(root, "foreign_lock_wait_seconds", "0.5")
    vault.close()
    v = Vault(root, clock=lambda: hp.PINNED)
    head = hp.git_out(root, "rev-parse", "HEAD")
    lock = root / ".git" / "index.lock"
    lock.write_bytes(b"foreign")
    # our own marker left by a killed acpmem long ago does not make a fresh foreign lock ours
    marker = root / ".acpmem" / "locks" / "git-running"
    marker.write_text("999999999\n")
    old = time.time() - 3600
    os.utime(marker, (old, old))
    with pytest.raises(GitStateError) as exc:
        v.write_entries([hp.make_entry("late01", "Too late", "Never written.")], subject="add", why="test")
    assert "index.lock" in exc.value.message and exc.value.hint
    assert lock.read_bytes() == b"foreign"  # never deleted, never touched
    assert hp.git_out(root, "rev-parse", "HEAD") == head
    assert not list((root / "entries").glob("late01*"))
    assert not (root / ".git" / "acpmem" / "journal.json").exists()
    lock.unlink()  # the person's git finished
    v.write_entries([hp.make_entry("late01", "Too late", "Written now.")], subject="add", why="test")
    assert "entries/late01-too-late.md" in hp.head_files(root)
    v.close()
    _assert_clean(root)


def test_fresh_marker_of_a_killed_process_does_not_make_a_live_foreign_lock_ours(vault):
    """acpmem was killed mid-commit a moment ago (its marker is fresh, its pid dead) and a person's git now holds
    index.lock open: that lock is not ours and must be waited for, not removed."""
    root = vault.root
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (root / ".acpmem" / "locks" / "git-running").write_text(f"{dead.pid}\n")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\n"
        "p = sys.argv[1]\n"
        "fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)\n"
        "ino = os.fstat(fd).st_ino\n"
        "print('held', flush=True)\n"
        "time.sleep(1.5)\n"
        "ok = os.path.exists(p) and os.stat(p).st_ino == ino\n"
        "os.close(fd)\n"
        "os.unlink(p) if ok else None\n"
        "print('ok' if ok else 'deleted by someone else', flush=True)\n"), str(root / ".git" / "index.lock")],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    vault.write_entries([hp.make_entry("live01", "Live lock", "Waited for a live lock.")], subject="add", why="t")
    assert holder.stdout.readline().strip() == "ok"
    holder.wait(timeout=30)
    assert "entries/live01-live-lock.md" in hp.head_files(root)


# --------------------------------------------------------------------------------------------- 4. kill -9

def _kill_group(pr: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pr.pid, signal.SIGKILL)  # the writer and its git children, mid-flight
    pr.wait(timeout=30)
    pr.stdout.close()
    pr.stderr.close()


@heavy
def test_kill_minus_nine_at_random_moments_loses_no_acknowledged_write(vault, tmp_path, cli):
    root = vault.root
    vault.close()
    rng = random.Random(20261129)
    acks_path = tmp_path / "acks.tsv"
    rounds = 32
    for k in range(rounds):
        pr = subprocess.Popen([sys.executable, str(Path(hp.__file__)), "write", str(root), f"k{k:02d}", "500",
                               str(acks_path), "--ready"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
        # killed at a random moment of its writes (a write ~10–20 ms: up to a few dozen of them): counted from when
        # its vault is open, not from its start, so that on a loaded machine the kills still land in writes — and
        # a run's CPU is its writes, not the seconds a fixed delay would give it
        assert pr.stdout.readline() == "ready\n", pr.stderr.read()
        time.sleep(rng.random() * 0.4)
        _kill_group(pr)
        if k % 4 == 3:
            res = cli("memory", "--vault", str(root), "doctor", "--fix")
            assert res.returncode == 0, res.stdout + res.stderr
    acks = [a for a in hp.read_acks(acks_path) if len(a) == 3]
    assert len(acks) >= rounds // 4, "too few writes were acknowledged for the test to mean anything"

    res = cli("memory", "--vault", str(root), "doctor", "--fix")
    assert res.returncode == 0, res.stdout + res.stderr
    _assert_acked_in_head(root, acks)
    res = hp.fsck(root, "--no-dangling")
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr
    assert hp.status_porcelain(root) == ""
    assert not [p for p in hp.head_files(root) if p.endswith(".tmp")], "a temp file was committed"
    assert hp.leftovers(root) == []
    # no partial entry file, on disk or in HEAD
    v = Vault(root, clock=lambda: hp.PINNED)
    try:
        loaded = v.load()
        assert loaded.problems == []
        on_disk = {e.path for e in loaded.entries}
        assert {p for p in hp.head_files(root) if p.startswith("entries/") and p.endswith(".md")} == on_disk
        assert not [p for p in os.listdir(root / "entries") if p.endswith(".tmp")]
        # and the vault still takes writes
        v.write_entries([hp.make_entry("after1", "After the storm", "Still works.")], subject="add", why="t")
    finally:
        v.close()
    _assert_clean(root)


# --------------------------------------------------------------------------------------------- 5. disk full

@pytest.fixture
def tiny_fs(tmp_path):
    """A 4 MB tmpfs (we are root in CI and here); None where mounting is not allowed."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        yield None
        return
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(path: Path) -> Path:
    filler = path / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (65536, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


def _snapshot_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted((root / "entries").glob("*.md"))}


def test_disk_full_gives_a_clean_error_keeps_old_content_and_recovers(tiny_fs, tmp_path, monkeypatch):
    import acpmem.vault.writer as writer
    from acpmem.vault.create import init_vault

    if tiny_fs is None:
        return _disk_full_by_rlimit(tmp_path)
    runs = []   # a full disk is not a person's git holding the index lock: no git run again and again meanwhile
    monkeypatch.setattr(writer, "git", lambda *a, _git=writer.git, **kw: runs.append(a[1:2]) or _git(*a, **kw))
    v = init_vault(tiny_fs / "vault", clock=lambda: hp.PINNED, rng=random.Random(3))
    root = v.root
    v.write_entries([hp.make_entry("old001", "Old entry", "Old content stays.")], subject="add", why="t")
    before, head = _snapshot_bytes(root), hp.git_out(root, "rev-parse", "HEAD")
    failures = 0
    for k in range(8):  # leave 0..7 free pages: fail in the journal, the entry file, git add, git commit
        filler = _fill(tiny_fs)
        os.truncate(filler, max(0, filler.stat().st_size - 4096 * k))
        runs.clear()
        try:
            v.write_entries([hp.make_entry(f"full0{k}", f"Full {k}", "Does not fit. " * 80)], subject="add",
                            why="t")
        except AcpmemError as exc:
            failures += 1
            assert "space" in str(exc).lower() or "disk is full" in str(exc).lower(), str(exc)
        assert len(runs) <= 12, (k, runs)
        for rel, data in before.items():
            assert (root / rel).read_bytes() == data
        filler.unlink()
    assert failures >= 4
    assert hp.git_out(root, "rev-parse", "HEAD") != head or failures == 8
    sha = v.write_entries([hp.make_entry("back01", "Space is back", "Written.")], subject="add", why="t")
    v.close()
    assert hp.git_out(root, "rev-parse", "HEAD").strip() == sha
    head_files = hp.head_files(root)
    assert "entries/back01-space-is-back.md" in head_files
    for rel, data in before.items():
        assert hp.git_bytes(root, "show", f"HEAD:{rel}") == data
    # a write that failed is either wholly committed (its journal was finished by the next write) or wholly absent
    for k in range(8):
        on_disk = list((root / "entries").glob(f"full0{k}-*.md"))
        assert len(on_disk) == len([p for p in head_files if p.startswith(f"entries/full0{k}-")])
    # git leaves tmp_obj_* files when it cannot write an object; doctor --fix removes them
    res = health.check_vault(Vault(root), fix=True)
    assert res.ok, [f.what for f in res.findings]
    _assert_clean(root)


def _disk_full_by_rlimit(tmp_path: Path) -> None:
    """Where no tmpfs can be mounted: a writer process whose file-size limit is below the entry's size."""
    from acpmem.vault.create import init_vault

    v = init_vault(tmp_path / "vault", clock=lambda: hp.PINNED)
    root = v.root
    v.close()
    head = hp.git_out(root, "rev-parse", "HEAD")
    code = ("import resource, signal, sys; sys.path.insert(0, sys.argv[2])\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))\n"
            "import helpers_proc as hp\n"
            "from acpmem.errors import AcpmemError\n"
            "from acpmem.vault.writer import Vault\n"
            "v = Vault(__import__('pathlib').Path(sys.argv[1]))\n"
            "try:\n"
            "    v.write_entries([hp.make_entry('big001', 'Big', 'x' * 50000)], subject='a', why='t')\n"
            "except AcpmemError as exc:\n"
            "    print('clean', exc)\n")
    res = subprocess.run([sys.executable, "-c", code, str(root), str(Path(hp.__file__).parent)], capture_output=True,
                         text=True, timeout=60)
    assert res.stdout.startswith("clean"), res.stdout + res.stderr
    assert hp.git_out(root, "rev-parse", "HEAD") == head
    v = Vault(root)
    v.write_entries([hp.make_entry("back01", "Space is back", "Written.")], subject="add", why="t")
    v.close()
    _assert_clean(root)


# --------------------------------------------------------------------------------------------- 9. long-running use

@heavy
def test_two_thousand_operations_keep_children_and_descriptors_bounded(vault):
    """A host process doing writes, lists, shows, recalls and resident indexes: no git child outlives its call and
    the number of open descriptors does not grow."""
    from acpmem.read.retrieval import recall

    v = vault
    ops = {"write": 0, "read": 0}

    def op(i: int) -> None:
        kind = i % 40
        if kind == 0:
            ident = f"lr{i:05d}"
            v.write_entries([hp.make_entry(ident, f"Long run note {i}", f"Note {i} on sqlite wal and git locks.")],
                            subject=f"add #{ident}", why="long run")
            ops["write"] += 1
            return
        ops["read"] += 1
        if kind % 4 == 1:
            reader.list_entries(v)
        elif kind % 4 == 2:
            recall(v, f"note {i // 40 * 40} sqlite", limit=3)
        elif kind % 4 == 3:
            resident.resident_index(v, session=f"s{i % 7}", refresh=(i % 3 == 0))
        else:
            entries, _ = reader.list_entries(v)
            if entries:
                reader.show(v, entries[i % len(entries)].id)

    for i in range(80):  # warm up: connections and caches that stay open by design
        op(i)
    fds, kids = hp.fd_count(), hp.child_pids()
    peak_fds, peak_kids = fds, len(kids)
    for i in range(80, 2000):
        op(i)
        if i % 50 == 0:
            peak_fds, peak_kids = max(peak_fds, hp.fd_count()), max(peak_kids, len(hp.child_pids()))
    print(f"\n{ops}: fds {fds} -> {hp.fd_count()} (peak {peak_fds}), children {len(kids)} -> "
          f"{len(hp.child_pids())} (peak {peak_kids})")
    assert ops["write"] == 50 and ops["read"] == 1950
    assert hp.fd_count() <= fds + 2 and peak_fds <= fds + 4
    assert hp.child_pids() == kids and peak_kids <= len(kids)
    assert hp.commit_count(v.root) == 1 + 50  # reads never commit
    _assert_clean(v.root)


def test_a_foreign_index_lock_keeps_a_fork_request_pending(vault):
    """The fork path under a person's long git command: the request stays pending with the reason, the lock is not
    touched, and the next run writes it exactly once."""
    from acpmem.write import requests, worker

    root = vault.root
    _set_git_setting(root, "foreign_lock_wait_seconds", "0.3")
    vault.close()
    v = Vault(root, clock=lambda: hp.PINNED, rng=random.Random(5))
    req = requests.make_request(types=v.settings.types, type="lesson", note="re-entrant append", importance=7,
                             session="s1", seq=6, transcript=CHAT, host_tools=None, lang="en", created=v.now(),
                             request_id=requests.new_request_id(v.rng))
    requests.save_request(v.state_dir, req, new=True)
    head = hp.git_out(root, "rev-parse", "HEAD")
    lock = root / ".git" / "index.lock"
    lock.write_bytes(b"foreign")
    try:
        (out,) = worker.process_now(v, [req.id], extractor="offline")
        assert out.status in ("retry", "failed"), out
        assert "index.lock" in json.dumps(out.to_json() if hasattr(out, "to_json") else str(out))
        assert requests.load_request(v.state_dir, req.id) is not None
        assert lock.read_bytes() == b"foreign"
        assert hp.git_out(root, "rev-parse", "HEAD") == head
        assert not list((root / "entries").glob("*.md"))
    finally:
        lock.unlink()
    (out,) = worker.process_now(v, [req.id], extractor="offline")
    assert out.status == "written", out
    assert requests.load_request(v.state_dir, req.id) is None
    v.close()
    assert hp.git_out(root, "log", "--format=%(trailers:key=Acpmem-Request,valueonly)").split().count(req.id) == 1
    _assert_clean(root)


# --------------------------------------------------------------------------------------------- deleting .acpmem/

DELETER = r"""
import os, shutil, sys, time
state, stop = sys.argv[1:3]
n = 0
while not os.path.exists(stop):
    if os.path.isdir(state):
        shutil.rmtree(state, ignore_errors=True)
        n += 1
    time.sleep(0.002)
print(n)
"""

COMMITTER = r"""
import os, subprocess, sys
acp, root, tag, n, acks, chat = sys.argv[1:7]
for i in range(int(n)):
    r = subprocess.run([acp, "memory", "--vault", root, "commit", "--type", "lesson", "--note",
                        f"writer {tag} lesson {i} kept while the cache goes", "--importance", "5",
                        "--session", f"s-{tag}", "--seq", "6", "--transcript", chat, "--json"],
                       capture_output=True, text=True)
    line = f"{tag}-{i}\t{r.returncode}\t{r.stdout.strip()}\t{r.stderr.strip()}".replace("\n", "\\n")
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (line + "\n").encode())
    os.close(fd)
"""


@heavy
def test_deleting_acpmem_while_writers_run_loses_no_acknowledged_request(vault, tmp_path):
    """4 processes x 5 `commit` (each a durable request for the background worker) while another process deletes
    `.acpmem/` over and over: every request that was acknowledged is committed exactly once (after `extract
    --pending` takes what a worker left), and no command ends in an internal error."""
    root = vault.root
    vault.close()
    toml = root / "acpmem.toml"   # an attempt that met a deleted index is retried soon, not in 15 s
    toml.write_text(toml.read_text().replace("retry_base_seconds = 15.0", "retry_base_seconds = 0.2"))
    hp.git_out(root, "commit", "-qam", "retry soon")
    acp, acks_path, stop = str(Path(sys.executable).parent / "acp"), tmp_path / "acks.tsv", tmp_path / "stop"
    deleter = subprocess.Popen([sys.executable, "-c", DELETER, str(root / ".acpmem"), str(stop)],
                               stdout=subprocess.PIPE, text=True)
    writers = [subprocess.Popen([sys.executable, "-c", COMMITTER, acp, str(root), f"d{p}", "5", str(acks_path),
                                 str(CHAT)]) for p in range(4)]
    for w in writers:
        assert w.wait(timeout=280) == 0
    stop.touch()
    assert int(deleter.communicate(timeout=60)[0]) > 0     # it did delete, while they ran
    rows = [ln.split("\t") for ln in acks_path.read_text().splitlines()]
    assert len(rows) == 20
    acked = []
    for tag, code, out, err in rows:
        assert "internal error" not in err and "Traceback" not in err, (tag, err)
        if code == "0":
            acked.append(json.loads(out.replace("\\n", "\n"))["request"])
        else:   # `--json`: one JSON error naming what went wrong (never "read-only": the vault never was)
            said = json.loads(err.replace("\\n", "\n"))["error"]
            assert said["message"] and said["code"] != "read_only" and said["exit"] == int(code), (tag, err)
    assert len(acked) >= 10, rows    # most were acknowledged: the test exercises the queue, not only refusals
    r = subprocess.run([acp, "memory", "--vault", str(root), "extract", "--pending", "--failed"], capture_output=True,
                       text=True, timeout=280)
    assert r.returncode == 0 and "internal error" not in r.stderr, r.stdout + r.stderr
    _settle_workers(root)
    trailers = hp.git_out(root, "log", "--format=%(trailers:key=Acpmem-Request,valueonly)").split()
    for rid in acked:
        assert trailers.count(rid) == 1, (rid, trailers.count(rid))
    assert not list(pending_dir(root / ".acpmem").glob("r-*.json"))
    _assert_clean(root)


def _settle_workers(root: Path, timeout: float = 240.0) -> None:
    """Until no detached worker of this vault is running and nobody holds its lock (a state is compared, not a
    moment of a race; ``team_model.settle`` says why the lock too)."""
    import crashpoints
    from acpmem.write.worker import lock_path

    deadline = time.monotonic() + timeout
    while crashpoints.helpers_of(root) or hp.flock_held(lock_path(root / ".acpmem")):
        assert time.monotonic() < deadline, "a background worker did not finish"
        time.sleep(0.1)


def test_making_a_folder_survives_it_being_deleted_meanwhile(tmp_path):
    """``Path.mkdir(parents=True, exist_ok=True)`` raises FileExistsError when the folder vanishes between its
    mkdir and its is_dir check (a person deleting ``.acpmem/`` while writers run: one CI run failed on exactly
    this). ``files.ensure_dir`` makes it again instead."""
    import shutil

    from acpmem.infra import files

    target = tmp_path / "state" / "locks"
    stop = threading.Event()

    def deleter():
        while not stop.is_set():
            shutil.rmtree(tmp_path / "state", ignore_errors=True)

    t = threading.Thread(target=deleter)
    t.start()
    failures = []
    try:
        for _ in range(5000):
            try:
                files.ensure_dir(target)
            except OSError as exc:
                failures.append(repr(exc))
    finally:
        stop.set()
        t.join()
    assert failures == []
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "plain").write_text("x")
    with pytest.raises(FileExistsError):            # a file where the folder should be is still an error
        files.ensure_dir(tmp_path / "state" / "plain")


def test_a_foreign_index_lock_that_appears_after_the_check_is_waited_for_at_git_add(vault, monkeypatch):
    """The person's git takes .git/index.lock between acpmem's check and its `git add` (the audit hook plays the
    person: as acpmem's first `git add` starts, it takes the lock for a second). The old code failed at once; now
    `git add` waits for the lock, as the check does, and never deletes it."""
    monkeypatch.setenv("ACPMEM_GIT", "exe")           # the git executable's path (libgit2's is tried first else)
    root = vault.root
    seen: dict = {}
    holders: list[threading.Thread] = []

    def person(event: str, args: tuple) -> None:
        if holders or event != "subprocess.Popen":
            return
        argv = [str(a) for a in (args[1] or ())]
        if argv and "git" in argv[0] and "add" in argv and str(root) in argv:
            holders.append(_hold_foreign_lock(root, 1.0, seen))

    sys.addaudithook(person)   # inert once it has fired (audit hooks cannot be removed)
    try:
        sha = vault.write_entries([hp.make_entry("race01", "Raced", "A lock came in between.")], subject="add",
                                  why="test")
    finally:
        for t in holders:
            t.join()
    assert holders and seen["still_there"] is True
    assert "entries/race01-raced.md" in hp.head_files(root)
    assert hp.git_out(root, "rev-parse", "HEAD").strip() == sha
    _assert_clean(root)
