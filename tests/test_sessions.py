"""A session's read state ages out (``acpmem.read.sessions``): when a new session begins, the frozen index and the
ledger of every session unused for ``KEEP_DAYS`` go, the records ``show --source`` needs stay, and a session in use
is left alone."""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time

from acpmem.core.layout import SESSIONS_DIR
from acpmem.read import sessions
from acpmem.read.ledger import LEDGER
from acpmem.read.snapshot import SNAPSHOT
from acpmem.read.sources import RECORD, record_transcript
from acpmem.vault.discovery import session_folder
from acpmem.vault.reader import VaultReader

DAY = 86400


def _age(folder, days: float) -> None:
    t = time.time() - days * DAY
    os.utime(folder, (t, t))


def test_a_new_session_ages_out_the_state_of_sessions_unused_for_a_month(example_vault, cli, tmp_path):
    v = example_vault.root
    state = example_vault.state_dir
    run = lambda *a: cli("memory", *a, "--vault", str(v))  # noqa: E731
    for s in ("old", "kept-record", "recent", "in-use"):
        assert run("list", "--format", "prompt", "--session", s).returncode == 0
        assert run("surface", "--session", s).returncode == 0
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("{}\n")
    with VaultReader.open(v) as r:
        assert record_transcript(r, "kept-record", transcript, "test")
    folder = {s: session_folder(state, s) for s in ("old", "kept-record", "recent", "in-use", "new")}
    for s in ("old", "kept-record", "in-use"):
        assert {SNAPSHOT, LEDGER} <= set(os.listdir(folder[s])), s
        _age(folder[s], sessions.KEEP_DAYS + 1)
    _age(folder["recent"], sessions.KEEP_DAYS - 1)
    recent_before = sorted(os.listdir(folder["recent"]))
    fd = os.open(folder["in-use"] / sessions.LOCK, os.O_RDWR)   # a session surfacing at this moment
    fcntl.flock(fd, fcntl.LOCK_EX)
    sessions._AGED.clear()   # (in-process: the command line below stands for a process of its own)
    try:
        new = run("list", "--format", "prompt", "--session", "new")
    finally:
        os.close(fd)
    assert new.returncode == 0, new.stderr
    assert (folder["new"] / SNAPSHOT).read_text("utf-8") == new.stdout
    assert not folder["old"].exists()                                        # nothing else was in it
    assert sorted(os.listdir(folder["kept-record"])) == sorted([RECORD, sessions.LOCK])   # the record stays
    assert json.loads((folder["kept-record"] / RECORD).read_text())["transcript"] == str(transcript)
    assert sorted(os.listdir(folder["recent"])) == recent_before
    assert {SNAPSHOT, LEDGER} <= set(os.listdir(folder["in-use"]))
    # the session that comes back starts again: a new frozen index, an empty ledger
    back = run("list", "--format", "prompt", "--session", "old")
    assert back.returncode == 0 and (folder["old"] / SNAPSHOT).read_text("utf-8") == back.stdout
    stats = json.loads(run("stats", "--json").stdout)
    assert stats["sessions"]["count"] == len(os.listdir(state / SESSIONS_DIR)) == 5


def test_every_way_a_session_begins_ages_the_others_out(example_vault, cli, tmp_path):
    """The frozen index, surfacing by score and by prompt, recall in a session and a recorded transcript each make a
    session's folder; each is where a session may begin."""
    v = example_vault.root
    state = example_vault.state_dir
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("{}\n")
    begins = {
        "index": ("list", "--format", "prompt", "--session", "b-index"),
        "surface": ("surface", "--session", "b-surface"),
        "prompt": ("surface", "--session", "b-prompt", "--prompt", "how do we deploy?"),
        "recall": ("recall", "deploy", "--session", "b-recall"),
    }
    for name, argv in begins.items():
        old = session_folder(state, f"old-{name}")
        old.mkdir(parents=True)
        (old / SNAPSHOT).write_text("an old frozen index\n")
        _age(old, sessions.KEEP_DAYS + 2)
        sessions._AGED.clear()   # (in-process: each command line here stands for a process of its own)
        r = cli("memory", *argv, "--vault", str(v))
        assert r.returncode == 0, (name, r.stderr)
        assert not old.exists(), name
    old = session_folder(state, "old-record")
    old.mkdir(parents=True)
    (old / LEDGER).write_text('{"surfaced": [], "recalled": [], "used_bytes": 0}')
    _age(old, sessions.KEEP_DAYS + 2)
    sessions._AGED.clear()
    with VaultReader.open(v) as r:
        assert record_transcript(r, "b-record", transcript, "test")
    assert not old.exists()


def _gone_pid() -> int:
    p = subprocess.Popen(["true"])   # a process that has ended (and been reaped): its pid names no writer now
    p.wait()
    return p.pid


def test_age_out_leaves_what_it_cannot_tell_and_reads_nothing_outside_sessions(tmp_path):
    base = tmp_path / SESSIONS_DIR
    base.mkdir()
    now = time.time()
    stale = base / "s-1"
    stale.mkdir()
    (stale / SNAPSHOT).write_text("x")
    (stale / f".surfaced.json.{_gone_pid()}.0123abcd.tmp").write_text("half")   # a killed write's temporary file
    writer = subprocess.Popen(["sleep", "60"])                                   # a writer still at work
    live = stale / f".index.txt.{writer.pid}.89abcdef.tmp"
    live.write_text("being written")
    (stale / "request-r-1.json").write_text("{}")                 # a commit's record
    _age(stale, 40)
    link = base / "s-link"
    os.symlink(tmp_path, link)                                      # never followed
    (tmp_path / SNAPSHOT).write_text("outside")
    (base / "a-file").write_text("not a folder")
    old = now - 40 * DAY
    for p in (link, base / "a-file"):
        os.utime(p, (old, old), follow_symlinks=False)
    try:
        assert sessions.age_out(base, now) == ["s-1"]
    finally:
        writer.kill()
        writer.wait()
    assert sorted(os.listdir(stale)) == sorted(["request-r-1.json", live.name])
    assert (tmp_path / SNAPSHOT).read_text() == "outside" and (base / "a-file").exists()
    assert sessions.age_out(tmp_path / "missing", now) == []
