"""The watcher (``acpmem.search.watch``): a real detached process with real inotify watches, a real socket and the vault's
real SQLite file. Every change a full scan notices, the watcher must report before it answers "ok"; when it
cannot vouch (a replaced database, a vault gone) it must say no and go away."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from conftest import fresh_vault
from helpers_proc import queued_on
from acpmem.core.layout import DB_NAME
from acpmem.infra import db
from acpmem.search import catalog, watch
from acpmem.vault.config import load_settings
from acpmem.vault.reader import VaultReader
from acpmem.vault.writer import git
from test_store import has_term, ids, make, top, write

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux only")


def configure(root: Path, **index_settings) -> None:
    toml = root / "acpmem.toml"
    text = toml.read_text("utf-8")
    for key, value in index_settings.items():
        lines = [ln for ln in text.splitlines() if not ln.startswith(f"{key} =")]
        at = lines.index("[index]") + 1
        lines.insert(at, f"{key} = {value}")
        text = "\n".join(lines) + "\n"
    toml.write_text(text, "utf-8")


def wait_for(cond, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (our own child, not yet reaped) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def watchers_of(root: Path) -> list[int]:
    """The live watcher processes started for ``root``, from /proc (no procps needed)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if "acpmem.search.watch import main" in cmd and str(root) in cmd and alive(int(d.name)):
            out.append(int(d.name))
    return out


def kill_watcher(state_dir: Path) -> None:
    pid = watch.running_pid(state_dir)
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not alive(pid), what="the watcher to die")


@pytest.fixture
def new_vault(tmp_path, clock):
    """Vaults with the given ``[index]`` settings; each is closed and its watcher stopped at the end."""
    made = []

    def make(path: Path | None = None, **index_settings):
        v = fresh_vault(path or tmp_path / "vault", clock)
        configure(v.root, **index_settings)
        made.append(v)
        return v

    yield make
    for v in made:
        v.close()
        kill_watcher(v.state_dir)


@pytest.fixture
def watched(new_vault):
    return new_vault(watch_min_entries=1, watch_idle_minutes=5.0)


def open_(v):
    return watch.open_fresh(v.state_dir, v.root, load_settings(v.root, v.state_dir))


def start_watching(v) -> int:
    """One entry, a recall that starts the watcher, and the watcher answering: its pid."""
    write(v, make(v, "Kafka consumers commit offsets manually", "Auto-commit lost messages."))
    open_(v)[0].close()
    ready(v)
    return watch.running_pid(v.state_dir)


def ready(v) -> None:
    """Until the watcher answers (asked even while marked as not answering: a slow answer on a loaded machine must
    not keep a test from waiting for it; an answer removes the mark)."""
    wait_for(lambda: watch.sync(v.state_dir, v.state_dir / catalog.DB_NAME, heed_mark=False),
             what="the watcher to answer")


def test_watcher_notices_every_kind_of_change(watched):
    v = watched
    a = make(v, "Cache invalidation uses version stamps", "Every key carries a version stamp.")
    write(v, a)
    con, res = open_(v)
    assert res.via == "scan"                 # no watcher yet: this call scanned and started one
    pid = watch.running_pid(v.state_dir)
    assert pid and alive(pid)
    ready(v)
    first_commit = git(v.root, "rev-parse", "HEAD").out.strip()

    def check() -> object:
        con, res = open_(v)
        assert res.via == "watcher"
        return con

    # an acpmem write
    b = make(v, "Kafka consumers commit offsets manually", "Auto-commit lost messages on rebalance.")
    write(v, b)
    assert top(check(), "kafka offsets") == b.path

    # a human edit in place that keeps the size and the mtime
    p = v.root / a.path
    text, st = p.read_text("utf-8"), p.stat()
    edited = text.replace("carries a version stamp.", "holds hashed etags.")
    edited += " " * (len(text.encode()) - len(edited.encode()))
    with open(p, "r+b") as fh:
        fh.write(edited.encode())
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size and p.stat().st_mtime_ns == st.st_mtime_ns
    con = check()
    assert top(con, "hashed etags") == a.path and not has_term(con, "carries")

    # git checkout of an older commit: b disappears, a's text comes back
    git(v.root, "checkout", "-q", "--", a.path)
    git(v.root, "checkout", "-q", first_commit)
    con = check()
    assert b.path not in ids(con, "kafka offsets") and not has_term(con, "kafka")
    assert top(con, "carries version stamp") == a.path
    git(v.root, "checkout", "-q", "main")

    # a rename by hand, then a file dropped in
    moved = v.root / "entries" / "renamed-by-hand.md"
    os.rename(v.root / a.path, moved)
    (v.root / "entries" / "hand01.md").write_text(
        "---\nid: hand01\ntitle: Written by hand\ntype: lesson\nimportance: 4\ncreated: 2026-11-02T00:00:00Z\n"
        "---\nThe flamingo deployment pipeline needs a manual approval.\n", "utf-8")
    con = check()
    assert top(con, "version stamps") == "entries/renamed-by-hand.md"
    assert top(con, "flamingo approval") == "entries/hand01.md"

    # entries/ itself replaced: removed and restored from git
    shutil.rmtree(v.root / "entries")
    con = check()
    assert ids(con, "flamingo approval") == [] and ids(con, "kafka offsets") == []
    git(v.root, "checkout", "-q", "--", "entries")
    con = check()
    assert top(con, "kafka offsets") == b.path
    # the same answers a full scan gives
    assert watch.running_pid(v.state_dir) == pid
    rows = dict(con.execute("SELECT path, sig FROM files").fetchall())
    assert rows == catalog.scan(v.root / "entries")


def test_cli_recall_through_the_watcher_sees_an_edit_at_once(watched, cli):
    v = watched
    a = make(v, "Deploys need a green build", "Never deploy a red main branch.")
    write(v, a)
    first = cli("memory", "recall", "--vault", str(v.root), "--json", "green build")
    assert first.returncode == 0, first.stderr
    ready(v)
    p = v.root / a.path
    p.write_text(p.read_text("utf-8").replace("red main branch", "pelican hotfix"), "utf-8")
    out = cli("memory", "recall", "--vault", str(v.root), "--json", "pelican hotfix")
    assert out.returncode == 0, out.stderr
    assert '"id": "%s"' % a.id in out.stdout and "pelican hotfix" in out.stdout


def test_a_listing_takes_the_watchers_word_a_write_looks_at_every_file(watched, cli):
    """``show`` and ``list`` in a vault the size of ``watch_min_entries`` start its watcher, as a recall does, and then
    take its word instead of looking at every entry file (~35 ms at 10,000 entries); a write's own listings still
    look at every file. Which of the two ran is seen through the one change a watcher is never told of (an entry
    file edited through another hard link of it), and in how many files a listing says it looked at."""
    v = watched
    a = make(v, "Deploys need a green build", "Never deploy a red main branch.")
    write(v, a)
    vault = ("--vault", str(v.root))
    assert watch.running_pid(v.state_dir) is None
    listed = cli("memory", "list", *vault)
    assert listed.returncode == 0 and "Deploys need a green build" in listed.stdout, listed.stderr
    wait_for(lambda: watch.running_pid(v.state_dir), what="a listing to start the watcher")
    ready(v)

    # an edit in place that keeps the size and the mtime: the watcher reports it, the next listing has it
    p = v.root / a.path
    text, st = p.read_text("utf-8"), p.stat()
    edited = text.replace("green build", "brown build")
    with open(p, "r+b") as fh:
        fh.write(edited.encode())
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    shown = cli("memory", "show", a.id, *vault)
    assert shown.returncode == 0 and "Deploys need a brown build" in shown.stdout, shown.stderr
    assert "Deploys need a brown build" in cli("memory", "list", *vault).stdout

    # through another hard link: the kernel tells the watcher nothing, so the listings say what it last knew
    link = v.root.parent / "a-link.md"
    os.link(p, link)
    with open(link, "r+b") as fh:
        fh.write(edited.replace("brown build", "khaki build").encode())
    for args in (("show", a.id), ("list",)):
        out = cli("memory", *args, *vault)
        assert out.returncode == 0 and "brown build" in out.stdout and "khaki build" not in out.stdout, out
    # … while a look at every file finds it
    off = cli("memory", "show", a.id, *vault, env={"ACPMEM_NO_WATCH": "1"})
    assert off.returncode == 0 and "Deploys need a khaki build" in off.stdout, off.stderr
    # a write's listing looks at every file (what it found says how many it looked at); a reader's does not
    link.unlink()
    with VaultReader(v.root) as reader:
        assert reader.load().changes.files == 0
    assert v.load().changes.files == 1 and "khaki build" in v.load().entries[0].title


def test_a_replaced_database_is_not_vouched_for(watched):
    v = watched
    old = start_watching(v)
    db.delete(v.state_dir / DB_NAME)
    con, res = open_(v)          # a new database: the old watcher must not answer for it
    assert res.via == "scan" and res.rebuilt
    assert top(con, "kafka offsets")
    con.close()
    wait_for(lambda: not alive(old), what="the old watcher to exit")
    # the next reader starts a new one, which answers for the new database
    con, res = open_(v)
    wait_for(lambda: watch.running_pid(v.state_dir) not in (None, old), what="a new watcher")
    ready(v)
    assert open_(v)[1].via == "watcher"


def test_idle_watcher_exits_and_cleans_up(new_vault):
    v = new_vault(watch_min_entries=1, watch_idle_minutes=0.02)   # 1.2 s
    write(v, make(v, "Kafka consumers commit offsets manually", "Auto-commit lost messages."))
    open_(v)
    pid = watch.running_pid(v.state_dir)
    assert pid
    wait_for(lambda: not alive(pid), what="the idle watcher to exit")
    assert not (v.state_dir / watch.SOCK).exists()
    assert watch.running_pid(v.state_dir) is None
    log = (v.state_dir / watch.LOG).read_text()
    assert "stopped: idle" in log


def test_deleting_the_vault_stops_its_watcher(watched):
    v = watched
    pid = start_watching(v)
    v.close()
    shutil.rmtree(v.root)
    wait_for(lambda: not alive(pid), what="the watcher of a deleted vault to exit")


@pytest.mark.parametrize("how", ["setting", "env", "small"])
def test_no_watcher_when_turned_off_or_small(new_vault, monkeypatch, how):
    if how == "setting":
        v = new_vault(watch_min_entries=1, watch="false")
    elif how == "env":
        v = new_vault(watch_min_entries=1)
        monkeypatch.setenv("ACPMEM_NO_WATCH", "1")
    else:
        v = new_vault(watch_min_entries=3)
    write(v, make(v, "Kafka consumers commit offsets manually", "Auto-commit lost messages."),
          make(v, "Deploys need a green build", "Never deploy a red main branch."))
    for _ in range(2):
        con, res = open_(v)
        assert res.via == "scan" and top(con, "kafka offsets")
        con.close()
    assert watch.running_pid(v.state_dir) is None
    assert not (v.state_dir / watch.SOCK).exists()


def test_one_watcher_per_vault_and_a_long_path(new_vault, tmp_path):
    v = new_vault(tmp_path / ("d" * 60) / ("e" * 60) / "vault", watch_min_entries=1)
    assert len(str(v.state_dir / watch.SOCK)) > 108     # longer than an AF_UNIX address can be
    write(v, make(v, "Kafka consumers commit offsets manually", "Auto-commit lost messages."))
    open_(v)[0].close()
    first = watch.running_pid(v.state_dir)
    assert watch.start(v.root, v.state_dir, 60.0) is None       # the lock is held: no second watcher
    ready(v)
    assert watchers_of(v.root) == [first]
    (v.root / "entries" / "hand02.md").write_text(
        "---\nid: hand02\ntitle: Written by hand\ntype: lesson\nimportance: 4\ncreated: 2026-11-02T00:00:00Z\n"
        "---\nThe heron cache warms at nine.\n", "utf-8")
    con, res = open_(v)
    assert res.via == "watcher" and top(con, "heron cache") == "entries/hand02.md"


def test_a_killed_watcher_is_replaced(watched):
    v = watched
    pid = start_watching(v)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid), what="the watcher to die")
    # its socket file is left behind; a reader must not hang on it, and scans instead
    con, res = open_(v)
    assert res.via == "scan" and top(con, "kafka offsets")
    wait_for(lambda: watch.running_pid(v.state_dir) not in (None, pid), what="a new watcher")
    ready(v)
    assert open_(v)[1].via == "watcher"


def test_a_terminated_watcher_cleans_up(watched):
    v = watched
    pid = start_watching(v)
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not alive(pid), what="the watcher to stop")
    assert not (v.state_dir / watch.SOCK).exists()
    assert "stopped: terminated" in (v.state_dir / watch.LOG).read_text()
    assert not watch.sync(v.state_dir, v.state_dir / catalog.DB_NAME)


def test_doctor_reports_the_watcher(watched, cli):
    v = watched
    write(v, make(v, "Kafka consumers commit offsets manually", "Auto-commit lost messages."))
    out = cli("memory", "doctor", "--vault", str(v.root))
    assert "no index watcher is running" in out.stdout + out.stderr
    open_(v)[0].close()
    ready(v)
    pid = watch.running_pid(v.state_dir)
    out = cli("memory", "doctor", "--vault", str(v.root))
    assert f"the index watcher (process {pid}) is running and answers" in out.stdout + out.stderr


def test_an_unwatchable_entries_folder_is_never_vouched_for(new_vault, tmp_path):
    """entries/ as a symlink: inotify would watch nothing inside it, so the watcher must not answer for it."""
    v = new_vault(watch_min_entries=1)
    a = make(v, "Deploys need a green build", "Never deploy a red main branch.")
    write(v, a)
    real = tmp_path / "real-entries"
    shutil.move(str(v.root / "entries"), real)
    (v.root / "entries").symlink_to(real)
    con, res = open_(v)
    assert res.via == "scan" and top(con, "green build") == a.path
    con.close()
    pid = watch.running_pid(v.state_dir)
    if pid:
        wait_for(lambda: not alive(pid), what="the watcher to give up")
    assert "cannot be watched" in (v.state_dir / watch.LOG).read_text()
    p = real / Path(a.path).name
    p.write_text(p.read_text("utf-8").replace("red main branch", "pelican hotfix"), "utf-8")
    con, res = open_(v)
    assert res.via == "scan" and top(con, "pelican hotfix") == a.path


def test_a_failing_watcher_is_not_restarted_on_every_recall(watched):
    v = watched
    write(v, make(v, "Kafka consumers commit offsets manually", "Auto-commit lost messages."))
    (v.state_dir / watch.SOCK).mkdir()          # the watcher cannot bind its socket there
    open_(v)[0].close()
    wait_for(lambda: (v.state_dir / watch.FAILED).exists(), what="the watcher to fail")
    wait_for(lambda: watch.running_pid(v.state_dir) is None, what="the failed watcher to exit")
    assert "stopped on error" in (v.state_dir / watch.LOG).read_text()
    for _ in range(3):                            # readers scan, and do not start another watcher yet
        con, res = open_(v)
        assert res.via == "scan" and top(con, "kafka offsets")
        con.close()
    assert watch.running_pid(v.state_dir) is None
    assert (v.state_dir / watch.LOG).read_text().count("watching") == 1
    # ten minutes later (the marker's age) a reader tries again, and a working watcher removes the marker
    (v.state_dir / watch.SOCK).rmdir()
    old = time.time() - watch.RETRY_AFTER_S - 1
    os.utime(v.state_dir / watch.FAILED, (old, old))
    open_(v)[0].close()
    ready(v)
    assert not (v.state_dir / watch.FAILED).exists()


def test_a_watcher_that_does_not_answer_costs_one_reader_one_wait(new_vault, monkeypatch):
    """A watcher stopped (SIGSTOP) holds its socket and answers nobody. The first reader waits its timeout, scans,
    and marks it; readers after it scan without connecting (no request queued), a vector search too, until the mark
    is old; then one asks again. Resumed, the watcher's first "ok" removes the mark and readers take its word."""
    import tempfile

    short = Path(tempfile.mkdtemp(prefix="acpw-", dir="/tmp"))   # the socket bound by its path, named in the table
    try:
        v = new_vault(short / "vault", watch_min_entries=1, watch_idle_minutes=5.0)
        a = make(v, "Deploys need a green build", "Never deploy a red main branch.")
        write(v, a)
        pid = start_watching(v)
        sock = v.state_dir / watch.SOCK
        wait_for(lambda: queued_on(sock) == 1, what="the watcher to close the connections it answered")
        monkeypatch.setattr(watch, "SYNC_TIMEOUT_S", 0.5)   # a stopped watcher never answers: no need to wait 10 s
        os.kill(pid, signal.SIGSTOP)
        try:
            p = v.root / a.path
            p.write_text(p.read_text("utf-8").replace("red main branch", "pelican hotfix"), "utf-8")
            con, res = open_(v)                     # waits, gives up, scans: the edit is found all the same
            assert res.via == "scan" and top(con, "pelican hotfix") == a.path
            con.close()
            assert (v.state_dir / watch.UNANSWERED).is_file() and queued_on(sock) == 2
            for word in ("pelican", "green build", "kafka offsets"):
                con, res = open_(v)
                assert res.via == "scan" and top(con, word)
                con.close()
            assert watch.near(v.state_dir, None, "m", [0.5, 0.5], None, False, 5) is None
            assert queued_on(sock) == 2               # not one more request: nobody connected
            old = time.time() - watch.ASK_AGAIN_AFTER_S - 1
            os.utime(v.state_dir / watch.UNANSWERED, (old, old))
            con, res = open_(v)                     # the mark is old: asked once more, in vain
            assert res.via == "scan" and top(con, "pelican hotfix") == a.path
            con.close()
            assert queued_on(sock) == 3 and watch.unanswered_since(v.state_dir) > old + 1
        finally:
            os.kill(pid, signal.SIGCONT)
        monkeypatch.undo()
        wait_for(lambda: queued_on(sock) == 1, what="the watcher to take the queued requests")
        assert (v.state_dir / watch.UNANSWERED).is_file()   # the requests it answered late were not readers' asks
        future = time.time() + 3600                           # a clock set back: not a mark to heed
        os.utime(v.state_dir / watch.UNANSWERED, (future, future))
        assert watch.sync(v.state_dir, v.state_dir / catalog.DB_NAME)   # a reader's ask: answered, the mark gone
        assert not (v.state_dir / watch.UNANSWERED).exists()
        con, res = open_(v)
        assert res.via == "watcher" and top(con, "pelican hotfix") == a.path
        con.close()
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_a_new_watcher_removes_the_mark_an_old_one_left(watched):
    """A watcher killed while marked as not answering: its successor, once it answers, is asked at once."""
    v = watched
    pid = start_watching(v)
    (v.state_dir / watch.UNANSWERED).touch()
    assert not watch.sync(v.state_dir, v.state_dir / catalog.DB_NAME)   # marked: not asked
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid), what="the watcher to die")
    open_(v)[0].close()                                                  # scans, and starts another
    wait_for(lambda: watch.running_pid(v.state_dir) not in (None, pid), what="a new watcher")
    wait_for(lambda: not (v.state_dir / watch.UNANSWERED).exists(), what="the new watcher to remove the mark")
    ready(v)
    assert open_(v)[1].via == "watcher"


def test_a_failure_mark_from_the_future_does_not_keep_a_watcher_from_starting(watched):
    """A failure mark dated ahead of the clock (a clock set back) is not heeded, as the not-answering mark is not:
    a recent one is."""
    v = watched
    write(v, make(v, "Kafka consumers commit offsets manually", "Auto-commit lost messages."))
    failed = v.state_dir / watch.FAILED
    failed.touch()
    assert watch.start(v.root, v.state_dir, 300.0) is None                 # a recent failure: not yet
    future = time.time() + 3600
    os.utime(failed, (future, future))
    assert watch.start(v.root, v.state_dir, 300.0) is not None
    ready(v)
    assert not failed.exists()


def test_deleting_the_local_state_while_the_watcher_runs_loses_nothing(watched, cli):
    """`rm -rf .acpmem` under a running watcher: the watcher stops (it cannot vouch for a database that is gone),
    the next recall rebuilds everything from the files, and a write still works."""
    v = watched
    pid = start_watching(v)
    v.close()
    shutil.rmtree(v.state_dir)
    wait_for(lambda: not alive(pid), what="the watcher to stop")
    r = cli("memory", "--vault", str(v.root), "recall", "kafka offsets", "--json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["hits"][0]["title"] == "Kafka consumers commit offsets manually"
    c = cli("memory", "--vault", str(v.root), "forget", v.load().entries[0].id, "--reason", "test")
    assert c.returncode == 0, c.stderr
    d = cli("memory", "--vault", str(v.root), "doctor")
    assert d.returncode == 0, d.stdout + d.stderr


def test_no_watcher_for_a_vault_on_a_network_file_system(new_vault, monkeypatch):
    """On NFS, SMB or FUSE inotify never reports a change made on another machine: a watcher there would vouch for
    an index that misses it, so readers scan, every time."""
    from acpmem.infra import inotify

    v = new_vault(watch_min_entries=1)
    monkeypatch.setattr(inotify, "filesystem_of", lambda path, mountinfo=None: "nfs4")
    write(v, make(v, "Kafka consumers commit offsets manually", "Auto-commit lost messages."))
    for _ in range(2):
        con, res = open_(v)
        assert res.via == "scan" and top(con, "kafka offsets")
        con.close()
    assert watch.running_pid(v.state_dir) is None
    monkeypatch.setattr(inotify, "filesystem_of", lambda path, mountinfo=None: "ext4")   # and on a local one, one
    open_(v)[0].close()
    ready(v)
    assert watch.running_pid(v.state_dir)
