"""Pending requests and the background worker, with real processes: validation before anything is written, the
detached worker drains the queue and exits, two commits at once start one worker, kill -9 mid-request loses nothing and
a rerun writes exactly once."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers_proc import wait_until
from openai_server import reply, wait_for_requests
from acpmem.write import requests, submit, worker
from acpmem.upkeep.stats import stats as vault_stats
from acpmem.core.errors import EntryInvalid, UsageError
from acpmem.vault.writer import Vault
from test_fork import CHAT, configure, fork_commits
from acpmem.write.requests import pending_dir

ACP = Path(sys.executable).parent / "acp"


def commit_proc(v: Vault, *extra: str, note: str = "re-entrant session.append") -> subprocess.Popen:
    return subprocess.Popen([str(ACP), "memory", "--vault", str(v.root), "commit", "--type", "lesson", "--note", note,
                             "--importance", "7", "--session", "s1", "--seq", "6", "--transcript", str(CHAT), "--json",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_idle(v: Vault, timeout: float = 60.0, require_empty: bool = True) -> None:
    """Bounded wait until no request is pending (unless not ``require_empty``) and no worker holds the worker or the
    retry lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not require_empty or not requests.list_requests(v.state_dir)[0]:
            fd = worker.try_worker_lock(v.state_dir)
            if fd is not None:
                os.close(fd)
                if worker.retry_waiter(v.state_dir) is None:
                    return
        time.sleep(0.05)
    raise AssertionError(f"still busy after {timeout} s: {requests.list_requests(v.state_dir)}")


def worker_pid(v: Vault, timeout: float = 120.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = worker.lock_path(v.state_dir).read_text().strip()
        if text:
            return int(text)
        time.sleep(0.02)
    raise AssertionError("no worker pid recorded")


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# --------------------------------------------------------------------------------------------- submit

def test_submit_validates_before_writing_anything(vault):
    v = configure(vault)
    for kwargs, err in ((dict(type="gossip"), EntryInvalid), (dict(importance=11), EntryInvalid),
                        (dict(importance="7x"), EntryInvalid), (dict(seq=-1), UsageError),
                        (dict(session=""), UsageError),
                        (dict(note="two\nlines " + "x" * 600), EntryInvalid)):
        args = dict(type="lesson", note="n", importance=5, session="s", seq=1, **{})
        args.update(kwargs)
        with pytest.raises(err):
            submit.submit(v, **args)
    assert requests.list_requests(v.state_dir) == ([], [])


def test_submit_writes_a_durable_request_and_answers_with_the_ack(vault, tmp_path):
    v = configure(vault, extractor="offline")
    # hold the worker lock: submit must find the worker "running" and start nothing
    fd = worker.try_worker_lock(v.state_dir)
    try:
        ack = submit.submit(v, type="decision", note="pin pnpm 9", importance="6", session="s9", seq="6",
                           transcript=CHAT)
    finally:
        os.close(fd)
    assert ack.worker == "running"
    assert ack.text == f"Noted ({ack.request_id}): it will be distilled and written in the background."
    saved = json.loads(Path(ack.path).read_text())
    assert {k: saved[k] for k in ("id", "type", "note", "importance", "session", "seq", "transcript", "status",
                                  "attempts", "ack")} == {
        "id": ack.request_id, "type": "decision", "note": "pin pnpm 9", "importance": 6, "session": "s9", "seq": 6,
        "transcript": str(CHAT), "status": "pending", "attempts": 0, "ack": ack.text}
    assert saved["extractor"] == "offline" and "base_url" not in saved and "model" not in saved   # as it runs
    assert not list(pending_dir(v.state_dir).glob(".*.tmp"))


def test_wait_runs_inline(vault):
    v = configure(vault, extractor="offline")
    ack = submit.submit(v, type="lesson", note="re-entrant session.append", importance=7, session="s1", seq=6,
                       transcript=CHAT, wait=True)
    assert ack.worker == "inline" and ack.outcome.status == "written"
    assert fork_commits(v) == [ack.outcome.commit]


def test_the_worker_in_process_respects_backoff_and_releases_the_lock(vault):
    v = configure(vault, extractor="offline")
    fd = worker.try_worker_lock(v.state_dir)
    a = submit.submit(v, type="lesson", note="re-entrant session.append", importance=7, session="s1", seq=6,
                     transcript=CHAT)
    os.close(fd)
    later = requests.record_failure(v.state_dir, requests.load_request(v.state_dir, a.request_id),
                                     {"message": "boom"}, v.clock(), v.rng)
    assert later.next_attempt > v.now()
    assert worker.run_worker(v, idle_wait=0) == 0                          # not due: left for later
    assert requests.load_request(v.state_dir, a.request_id).attempts == 1
    os.close(worker.try_worker_lock(v.state_dir))                          # and the lock is free again
    requests.save_request(v.state_dir, requests.Request.from_json({**later.to_json(), "next_attempt": None}))
    assert worker.run_worker(v, idle_wait=0) == 1
    assert requests.list_requests(v.state_dir) == ([], []) and len(fork_commits(v)) == 1


def test_a_commit_made_while_an_inline_extraction_holds_the_lock_is_still_extracted(vault):
    """A background commit that finds the worker lock taken is told a worker runs. When the holder is an inline
    extraction (`commit --wait`, `extract`), not the worker, it must hand the queue over when it lets go."""
    from acpmem.write import worker

    v = configure(vault, extractor="offline")
    fd = worker.try_worker_lock(v.state_dir)
    own = submit.submit(v, type="lesson", note="re-entrant session.append", importance=7, session="s1", seq=6,
                       transcript=CHAT)
    os.close(fd)
    late: list = []

    def meanwhile(rid: str, what: str) -> None:     # runs while process_requests holds the lock
        if not late:
            late.append(submit.submit(v, type="lesson", note="the appender must flush before rotate",
                                     importance=6, session="s1", seq=6, transcript=CHAT))

    outs = worker.process_now(v, [own.request_id], progress=meanwhile)
    assert [o.status for o in outs] == ["written"]
    assert late and late[0].worker == "running"     # it found the lock taken
    wait_idle(v)                                   # and is extracted all the same, by a worker started on release
    assert requests.find_done(v.state_dir, late[0].request_id)["status"] == "written"
    assert len(fork_commits(v)) == 2


# --------------------------------------------------------------------------------------------- real processes

def test_commit_starts_a_detached_worker_that_drains_and_exits(vault):
    v = configure(vault, extractor="offline")
    p = commit_proc(v)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 0, stderr
    ack = json.loads(stdout)
    assert ack["worker"] == "started" and ack["text"].startswith(f"Noted ({ack['request']})")
    pid = worker_pid(v)
    wait_idle(v)
    deadline = time.monotonic() + 120   # a bound for a hang, not a speed: generous on a loaded machine
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)                                                # no process left behind
    (sha,) = fork_commits(v)
    assert f"Acpmem-Request: {ack['request']}" in subprocess.run(
        ["git", "-C", str(v.root), "log", "-1", "--format=%B", sha], capture_output=True, text=True).stdout
    assert ack["request"] in (v.state_dir / "worker.log").read_text()


def test_two_commits_at_once_start_one_worker_and_both_are_written(vault, openai_server):
    v = configure(vault, openai_server)
    # the first extraction is slow, so the worker is busy when the second commit arrives
    openai_server.enqueue(reply.slow(2, reply.writes(reply.write("- first", title="First"))),
                          reply.writes(reply.write("- second", title="Second")))
    procs = [commit_proc(v, note="first focus"), commit_proc(v, note="second focus")]
    acks = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        acks.append(json.loads(out))
    assert sorted(a["worker"] for a in acks) == ["running", "started"]
    wait_idle(v)
    assert len(fork_commits(v)) == 2 and len(openai_server.requests) == 2
    titles = {e.title for e in v.load().entries}
    assert {"First", "Second"} <= titles


def test_kill_9_mid_request_leaves_it_pending_and_a_rerun_writes_it_exactly_once(vault, openai_server):
    v = configure(vault, openai_server)
    openai_server.enqueue(reply.slow(30, reply.writes(reply.write("- never arrives"))))
    p = commit_proc(v)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    rid = json.loads(out)["request"]
    wait_for_requests(openai_server, 1, timeout=30)
    pid = worker_pid(v)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 120   # a bound for a hang, not a speed: generous on a loaded machine
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    kept = requests.load_request(v.state_dir, rid)
    assert kept is not None and kept.status == "pending"
    assert fork_commits(v) == []
    os.close(worker.try_worker_lock(v.state_dir))                          # the kernel released the lock

    openai_server.enqueue(reply.writes(reply.write("- Use the lock.", title="Use the lock")))
    env = dict(os.environ)
    rerun = subprocess.run([str(ACP), "memory", "--vault", str(v.root), "extract", "--pending", "--json"],
                           capture_output=True, text=True, timeout=60, env=env)
    assert rerun.returncode == 0, rerun.stderr
    (outcome,) = json.loads(rerun.stdout)["outcomes"]
    assert outcome["request"] == rid and outcome["status"] == "written"
    again = subprocess.run([str(ACP), "memory", "--vault", str(v.root), "extract", rid, "--json"],
                           capture_output=True, text=True, timeout=60)
    assert json.loads(again.stdout)["outcomes"][0]["status"] == "already"
    assert len(fork_commits(v)) == 1 and len(openai_server.requests) == 2


def test_the_worker_prunes_temp_files_a_killed_submit_left(vault):
    v = configure(vault, extractor="offline")
    v.ensure_state()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()                                                            # a pid no process has now
    stale = pending_dir(v.state_dir) / f".r-abc.json.{dead.pid}.0123abcd.tmp"
    fresh = pending_dir(v.state_dir) / f".r-abd.json.{os.getpid()}.0123abce.tmp"   # a live writer's
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("{")
    fresh.write_text("{")
    assert worker.run_worker(v, idle_wait=0) == 0
    assert not stale.exists() and fresh.exists()


def test_the_commit_fast_path_reads_the_current_settings(vault):
    from acpmem.vault.config import load_settings
    from acpmem.vault.reader import VaultReader

    v = configure(vault)
    toml = v.root / "acpmem.toml"
    toml.write_text(toml.read_text().replace('language = "en"', 'language = "zh"')
                    .replace('types = ["decision",', 'types = ["incident", "decision",'))
    light = VaultReader(v.root)
    full = load_settings(v.root, v.state_dir)
    assert (light.settings.types, light.settings.language) == (full.types, full.language) == (
        ("incident", "decision", "lesson", "fact", "user-preference", "reference"), "zh")
    ack = submit.submit(VaultReader(v.root), type="incident", note="n", importance=3, session="s", seq=0)
    assert ack.text.startswith(f"已记录（{ack.request_id}）")


def test_a_failed_request_is_retried_on_its_own_schedule(vault, openai_server):
    """No later commit is needed: the worker that saw the failure waits for the scheduled retry (holding the retry
    lock, not the worker lock) and tries again then."""
    # the retry comes 3–5 s after the failure: the wait must stay observable on a loaded CI machine
    v = configure(vault, openai_server, retry_base_seconds=4.0)
    openai_server.enqueue(reply.server_error(500), reply.writes(reply.write("- Guard the append.")))
    ack = submit.submit(v, type="lesson", note="re-entrant session.append", importance=7, session="s1", seq=6,
                        transcript=CHAT)
    assert ack.worker == "started"
    failed_once = wait_until(lambda: (r := requests.load_request(v.state_dir, ack.request_id)) and r.attempts == 1
                             and r)
    assert failed_once.next_attempt and failed_once.status == "pending"
    stats = wait_until(lambda: (s := vault_stats(v))["requests"]["retry_waiter"] and s)
    assert stats["requests"]["next_retry"] == failed_once.next_attempt
    fd = worker.try_worker_lock(v.state_dir)      # the waiting worker leaves the worker lock free meanwhile
    assert fd is not None
    os.close(fd)
    wait_until(lambda: len(fork_commits(v)) == 1)
    wait_idle(v)
    done = requests.find_done(v.state_dir, ack.request_id)
    assert done["status"] == "written" and len(openai_server.requests) == 2
    assert "waiting" in (v.state_dir / worker.WORKER_LOG).read_text()


def test_a_worker_waiting_for_a_retry_stops_when_the_vault_is_deleted(vault):
    """A person deletes the vault (or a test its folder) while the worker waits for a scheduled retry: the worker
    stops at its next look instead of writing a stray ``.acpmem/`` where the vault was."""
    import shutil

    v = configure(vault, extractor="offline")
    fd = worker.try_worker_lock(v.state_dir)
    a = submit.submit(v, type="lesson", note="re-entrant session.append", importance=7, session="s1", seq=6,
                      transcript=CHAT)
    os.close(fd)
    requests.record_failure(v.state_dir, requests.load_request(v.state_dir, a.request_id), {"message": "boom"},
                            v.clock(), v.rng)
    slept, log = [], []

    def deleting_sleep(seconds: float) -> None:
        slept.append(seconds)
        shutil.rmtree(v.root)

    assert worker.run_worker(v, idle_wait=3600, sleep=deleting_sleep, log=log.append) == 0
    assert len(slept) == 1 and any("waiting" in line for line in log)
    assert not v.root.exists()                      # nothing made again where the vault was


def test_failed_for_good_is_shown_and_has_a_way_back(vault, openai_server, cli):
    v = configure(vault, openai_server, retry_base_seconds=0.2, max_attempts=2)
    openai_server.enqueue(reply.server_error(500), reply.server_error(503))
    ack = submit.submit(v, type="lesson", note="re-entrant session.append", importance=7, session="s1", seq=6,
                        transcript=CHAT)
    wait_until(lambda: (r := requests.load_request(v.state_dir, ack.request_id)) and r.status == "failed")
    wait_idle(v, require_empty=False)
    doc = cli("memory", "--vault", str(v.root), "doctor", "--json")
    assert doc.returncode == 1
    (finding,) = [f for f in json.loads(doc.stdout)["findings"] if ack.request_id in f["what"]]
    assert finding["level"] == "error" and "failed for good after 2 attempts" in finding["what"]
    assert "--failed" in finding["fix"]
    openai_server.enqueue(reply.writes(reply.write("- Guard the append.")))
    again = cli("memory", "--vault", str(v.root), "extract", "--failed", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["outcomes"][0]["status"] == "written"
    assert cli("memory", "--vault", str(v.root), "doctor").returncode == 0


def _old_style_request(v: Vault, rid: str, note: str) -> Path:
    """A request file where an older acpmem queued it: ``.acpmem/pending/``."""
    req = requests.make_request(types=v.settings.types, type="lesson", note=note, importance=5, session="s-old",
                                seq=6, transcript=str(CHAT), host_tools=None, lang="en",
                                created="2026-11-29T12:00:00Z", request_id=rid, extractor="offline")
    old = v.state_dir / "pending" / f"{rid}.json"
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_text(json.dumps(req.to_json()))
    return old


def test_the_queue_is_kept_in_the_git_folder_and_survives_deleting_acpmem(vault):
    """An acknowledged request lives in `.git/acpmem/pending/`: deleting `.acpmem/` (derived state) keeps it, and the
    worker then commits it once."""
    import shutil

    v = configure(vault, extractor="offline")
    req = requests.make_request(types=v.settings.types, type="lesson", note="kept in the git folder", importance=5,
                                session="s-q", seq=6, transcript=str(CHAT), host_tools=None, lang="en",
                                created="2026-11-29T12:00:00Z", request_id="r-ingitdir", extractor="offline")
    path = requests.save_request(v.state_dir, req, new=True)
    assert path == v.root / ".git" / "acpmem" / "pending" / "r-ingitdir.json"
    v.close()
    shutil.rmtree(v.root / ".acpmem")
    v = Vault(v.root)
    assert [r.id for r in requests.list_requests(v.state_dir)[0]] == ["r-ingitdir"]
    assert worker.run_worker(v, idle_wait=0) == 1
    assert fork_commits(v) and "r-ingitdir" in subprocess.run(
        ["git", "-C", str(v.root), "log", "-1", "--format=%B"], capture_output=True, text=True).stdout
    assert not path.exists()
    v.close()


def test_requests_an_older_acpmem_queued_in_acpmem_pending_are_still_taken(vault):
    """Migration: a request file in the old place (`.acpmem/pending/`) is listed, moved to the queue, extracted
    once and removed from both places; an old copy older than the queue's own copy of that request is dropped."""
    v = configure(vault, extractor="offline")
    old = _old_style_request(v, "r-oldplace", "queued by an older acpmem")
    listed, broken = requests.list_requests(v.state_dir)
    assert [r.id for r in listed] == ["r-oldplace"] and broken == []
    assert not old.exists() and (pending_dir(v.state_dir) / "r-oldplace.json").exists()
    old = _old_style_request(v, "r-oldplace2", "another one, taken by the worker straight away")
    assert worker.run_worker(v, idle_wait=0) == 2
    assert len(fork_commits(v)) == 2 and not old.exists()
    assert requests.list_requests(v.state_dir) == ([], [])
    # both copies of one request: the newer one wins
    new = requests.save_request(v.state_dir, requests.load_request(v.state_dir, _old_style_request(
        v, "r-twice", "twice").stem).with_changes(attempts=2))
    stale = _old_style_request(v, "r-twice", "twice")
    os.utime(stale, ns=(new.stat().st_mtime_ns - 10**9,) * 2)
    assert requests.load_request(v.state_dir, "r-twice").attempts == 2 and not stale.exists()
    v.close()


def test_an_older_acpmems_done_log_is_read_unless_git_tracks_it(vault):
    """``.acpmem/done.jsonl``, where an older acpmem logged finished requests, is still read; one git tracks came
    with a commit (a teammate's ``git add -f``) and would say which of this clone's requests are done: not read."""
    v = configure(vault, extractor="offline")
    old = v.state_dir / requests.DONE_LOG
    old.write_text(json.dumps({"request": "r-olddone1", "status": "written"}) + "\n")
    requests.append_done(v.state_dir, {"request": "r-newdone1", "status": "nothing"})
    assert [r["request"] for r in requests.read_done(v.state_dir)] == ["r-olddone1", "r-newdone1"]
    git = ["git", "-C", str(v.root)]
    subprocess.run([*git, "add", "-f", str(old)], check=True, capture_output=True)
    subprocess.run([*git, "commit", "-q", "-m", "a teammate's done log"], check=True, capture_output=True)
    assert requests.find_done(v.state_dir, "r-olddone1") is None
    assert [r["request"] for r in requests.read_done(v.state_dir)] == ["r-newdone1"]
    v.close()


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_done_log_that_is_not_a_file_is_read_as_empty_never_waited_on(vault, kind):
    """Something other than a file where the old done log was (a folder, a FIFO): ``stats`` answers from the
    queue's own log (it crashed on the folder and waited forever on the FIFO)."""
    v = configure(vault, extractor="offline")
    requests.append_done(v.state_dir, {"request": "r-newdone1", "status": "nothing"})
    old = v.state_dir / requests.DONE_LOG
    old.mkdir() if kind == "folder" else os.mkfifo(old)
    assert [r["request"] for r in requests.read_done(v.state_dir)] == ["r-newdone1"]
    p = subprocess.run([str(Path(sys.executable).parent / "acp"), "memory", "--vault", str(v.root), "stats",
                        "--json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout)["requests"]["done"] == 1, p.stderr
    v.close()


def test_the_queue_of_a_linked_worktree_is_in_its_own_git_folder(vault, tmp_path):
    v = configure(vault, extractor="offline")
    subprocess.run(["git", "-C", str(v.root), "worktree", "add", "-q", "-b", "other", str(tmp_path / "wt")],
                   check=True, capture_output=True)
    wt = tmp_path / "wt"
    home = requests.queue_home(wt / ".acpmem")
    gitdir = subprocess.run(["git", "-C", str(wt), "rev-parse", "--absolute-git-dir"], capture_output=True,
                            text=True, check=True).stdout.strip()
    assert home == Path(gitdir) / "acpmem" and home != requests.queue_home(v.state_dir)
    v.close()


def test_a_fifo_in_the_queue_is_named_not_read(vault):
    """A FIFO where a request file should be (in the queue or in the old place it is moved from) is reported as
    not a valid request file; nothing waits on it."""
    v = configure(vault, extractor="offline")
    folder = pending_dir(v.state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    os.mkfifo(folder / "r-fifo0001.json")
    (v.state_dir / "pending").mkdir(parents=True, exist_ok=True)
    os.mkfifo(v.state_dir / "pending" / "r-fifo0002.json")
    r = subprocess.run([str(ACP), "memory", "--vault", str(v.root), "doctor"], capture_output=True, text=True,
                       timeout=60)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    for name in ("r-fifo0001.json", "r-fifo0002.json"):
        assert f"{folder / name} is not a valid request file" in r.stdout, r.stdout
    v.close()
