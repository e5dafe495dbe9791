"""A commit refuses at call time what its extraction could never do, and a request carries its own settings.

Through the real console script (with and without ``--wait``) and the Python ``submit``: a transcript or host log
that does not parse, is empty, is not UTF-8, is not JSON, a corrupt zstd log, a ``--seq`` beyond its end, a
malformed ``--host-tools`` file, a ``--block`` that is not there — one ``Error:`` line, exit 1, nothing recorded.
A request records its extractor, endpoint and model, and whoever runs it honours them; a failed ``commit --wait``
is retried by the background worker as its message says; Ctrl-C is "Interrupted.", exit 130, no attempt used.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from helpers_proc import wait_until
from openai_server import fake_openai, reply, wait_for_requests
from acpmem.core.errors import AcpmemError, TranscriptError
from acpmem.infra import locks
from acpmem.write import requests, submit, worker
from test_fork import CHAT, configure, fork_commits
from acpmem.write.requests import pending_dir

FIX = Path(__file__).parent / "fixtures" / "transcripts"
ACP = str(Path(sys.executable).parent / "acp")


def commit_args(transcript, seq: int = 6, *extra: str) -> tuple[str, ...]:
    return ("commit", "--type", "lesson", "--note", "re-entrant session.append", "--importance", "7",
            "--session", "s1", "--seq", str(seq), *(("--transcript", str(transcript)) if transcript else ()), *extra)


def pending(v) -> list[Path]:
    return sorted(pending_dir(v.state_dir).glob("r-*.json"))


def summary_chat(tmp_path: Path) -> Path:
    """An OpenAI chat holding a kernel summary of block b4 (a compression block a commit can name)."""
    p = tmp_path / "with-summary.json"
    p.write_text(json.dumps([
        {"role": "user", "id": "acp_summary_b4", "content": "[Compressed conversation section] — auth tokens\n"
                                                            "We chose short-lived JWTs refreshed by the gateway."},
        {"role": "user", "content": "And the refresh window?"},
        {"role": "assistant", "content": "Five minutes before expiry."},
    ]))
    return p


def broken_inputs(tmp_path: Path) -> list[tuple[str, tuple[str, ...], str]]:
    """(case, commit arguments, what the error line says) for every input whose extraction could never run."""
    def file(name: str, data: bytes) -> Path:
        p = tmp_path / name
        p.write_bytes(data)
        return p

    tools = file("tools-bad.json", b'[{"type": "function", "function": {"name": "Read"}}, ')
    shapeless = file("tools-shape.json", b'[{"name": "Read"}]')
    return [
        ("not UTF-8", commit_args(file("latin1.json", b'[{"role": "user", "content": "caf\xe9"}]'), 0),
         "not UTF-8"),
        ("empty", commit_args(file("empty.json", b""), 0), "empty"),
        ("blank", commit_args(file("blank.jsonl", b"\n\n  \n"), 0), "empty"),
        ("not JSON", commit_args(file("cut.json", b'[{"role": "user", "content": "hi"'), 0), "not valid JSON"),
        ("garbage", commit_args(file("garbage.jsonl", b"PK\x03\x04 not a transcript at all\n"), 0), "not valid JSON"),
        ("corrupt zstd", commit_args(file("session.jsonl.zstd", b"\x28\xb5\x2f\xfd" + b"\x07garbage" * 8), 0),
         "zstd"),
        ("seq beyond the end", commit_args(CHAT, 99), "no turn at seq 99 (the transcript ends at seq 6)"),
        ("seq before the start", commit_args(FIX / "openai_seq.json", 3),   # its messages carry seqs 10 to 15
         "no message at or before seq 3 (the transcript starts at seq 10)"),
        ("host tools not JSON", commit_args(CHAT, 6, "--host-tools", str(tools)), "not valid JSON"),
        ("host tools not tools", commit_args(CHAT, 6, "--host-tools", str(shapeless)),
         "expected a list of OpenAI function tools"),
        ("block in a transcript without blocks", commit_args(CHAT, 6, "--block", "b2"), "no compression blocks"),
        ("block not there", commit_args(summary_chat(tmp_path), 2, "--block", "b5"),
         "no compression block 'b5' (it has b4)"),
    ]


@pytest.mark.parametrize("wait", [False, True], ids=["background", "wait"])
def test_commit_refuses_what_its_extraction_could_never_read(vault, cli, tmp_path, wait):
    """Never "Noted …" followed by failures in the background: one Error line with the next step, exit 1, no
    request, no commit, no worker."""
    v = configure(vault, extractor="offline")
    head = subprocess.run(["git", "-C", str(v.root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    for case, args, said in broken_inputs(tmp_path):
        r = cli("memory", "--vault", str(v.root), *args, *(("--wait",) if wait else ()))
        assert r.returncode == 1, (case, r.stdout, r.stderr)
        assert r.stdout == "" and "Noted" not in r.stderr, case
        assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1 and " — " in r.stderr, (case, r.stderr)
        assert said in r.stderr, (case, r.stderr)
        assert not pending(v), case                                    # nothing recorded
    assert not (requests.queue_home(v.state_dir) / "done.jsonl").exists()
    assert subprocess.run(["git", "-C", str(v.root), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout == head
    assert locks.holder(worker.lock_path(v.state_dir)) is None        # and no worker was started for nothing


def test_commit_still_takes_every_transcript_it_can_read(vault, cli, tmp_path):
    """The checks refuse only the doomed: OpenAI JSON up to its last seq, JSONL, a Claude Code session and a block
    that is there are all accepted and written."""
    v = configure(vault, extractor="offline")
    cases = [(CHAT, 6, ()), (CHAT, 3, ()), (FIX / "messages.jsonl", 2, ()), (FIX / "claude_code.jsonl", 5, ()),
             (summary_chat(tmp_path), 2, ("--block", "b4"))]
    for transcript, seq, extra in cases:
        r = cli("memory", "--vault", str(v.root), *commit_args(transcript, seq, *extra), "--wait")
        assert r.returncode == 0, (transcript, r.stderr)
        assert r.stdout.startswith("Noted (r-") and "wrote 1 entry" in r.stdout, r.stdout
    assert len(fork_commits(v)) == len(cases) and not pending(v)


def test_a_transcript_whose_seqs_start_late_is_taken_from_its_first_message_on():
    """``openai_seq.json`` numbers its messages 10, 11, 14, 15: every seq from its first message on is a commit the
    fork can read (the seq before it is refused, ``broken_inputs``)."""
    for seq in (10, 12, 15):
        submit.check_transcript(FIX / "openai_seq.json", seq)
    with pytest.raises(AcpmemError, match="starts at seq 10"):
        submit.check_transcript(FIX / "openai_seq.json", 9)


def test_python_submit_refuses_before_anything_is_recorded(vault, tmp_path):
    v = configure(vault, extractor="offline")
    for case, args, said in broken_inputs(tmp_path):
        opts = dict(zip(args[1::2], args[2::2]))
        with pytest.raises(AcpmemError) as exc:
            submit.submit(v, type="lesson", note="n", importance=5, session="s1", seq=int(opts["--seq"]),
                          transcript=opts.get("--transcript"), host_tools=opts.get("--host-tools"),
                          block=opts.get("--block"))
        assert said in exc.value.message and exc.value.hint, case
        assert exc.value.exit_code == 1, case
        assert not pending(v), case
    with pytest.raises(TranscriptError, match="no turn at seq 7"):
        submit.submit(v, type="lesson", note="n", importance=5, session="s1", seq=7, transcript=CHAT, wait=True)
    assert not pending(v) and not fork_commits(v)


def test_commit_extractor_llm_without_an_endpoint_is_refused(vault, cli):
    v = configure(vault, extractor="auto")
    r = cli("memory", "--vault", str(v.root), *commit_args(CHAT, 6, "--extractor", "llm"))
    assert r.returncode == 1 and r.stderr.startswith("Error: --extractor llm, but no model endpoint is configured")
    assert "--extractor offline" in r.stderr and not pending(v)


# --------------------------------------------------------------------------------------------- the request's settings

def _idle(v) -> bool:
    """No pending request and no worker holding the lock."""
    if pending(v):
        return False
    fd = worker.try_worker_lock(v.state_dir)
    if fd is None:
        return False
    os.close(fd)
    return True


def test_commit_extractor_offline_in_the_background_never_calls_the_model(vault, cli, openai_server):
    """`--extractor offline` without --wait: the background worker extracts it offline, although a model is
    configured — the transcript never reaches the endpoint."""
    v = configure(vault, openai_server, extractor="auto")
    r = cli("memory", "--vault", str(v.root), *commit_args(CHAT, 6, "--extractor", "offline"))
    assert r.returncode == 0 and r.stdout.startswith("Noted (r-"), r.stderr
    rec = json.loads(pending(v)[0].read_text()) if pending(v) else None
    wait_until(lambda: openai_server.requests or _idle(v))
    assert [r.path for r in openai_server.requests] == []
    assert rec is None or (rec["extractor"] == "offline" and "model" not in rec)
    (sha,) = fork_commits(v)
    body = subprocess.run(["git", "-C", str(v.root), "log", "-1", "--format=%B", sha], capture_output=True,
                          text=True).stdout
    assert "Acpmem-Extractor: offline" in body


def _left_pending(v, cli, env: dict, notes) -> dict:
    """A commit of each note in ``env`` while a worker "runs" (its lock held), so that each stays pending: the
    request files by note."""
    fd = worker.try_worker_lock(v.state_dir)
    assert fd is not None
    try:
        for note in notes:
            r = cli("memory", "--vault", str(v.root), "commit", "--type", "lesson", "--note", note,
                    "--importance", "6", "--session", "s1", "--seq", "6", "--transcript", str(CHAT), env=env)
            assert r.returncode == 0, r.stderr
    finally:
        os.close(fd)
    return {json.loads(p.read_text())["note"]: p for p in pending(v)}


def test_a_request_runs_against_the_endpoint_it_was_made_with(vault, cli):
    """Made with endpoint A and model-a; run later by a process whose settings say endpoint B: it goes to A (with
    model-a). A request written by an older acpmem (no recorded settings) runs with the runner's settings."""
    v = configure(vault, extractor="auto")
    with fake_openai() as a, fake_openai() as b:
        recs = _left_pending(v, cli, {"OPENAI_BASE_URL": a.base_url, "OPENAI_MODEL": "model-a"},
                             ("made with A", "made with A, stored as an older acpmem stores it"))
        made = json.loads(recs["made with A"].read_text())
        assert made["extractor"] == "llm" and made["base_url"] == a.base_url and made["model"] == "model-a"
        assert "api_key" not in json.dumps(made)
        old = recs["made with A, stored as an older acpmem stores it"]
        data = json.loads(old.read_text())
        for key in ("extractor", "base_url", "model"):
            data.pop(key)
        old.write_text(json.dumps(data))
        a.enqueue(reply.writes(reply.write("- Guard session.append with the lock.")))
        b.enqueue(reply.writes(reply.write("- The older request, by the runner's endpoint.")))
        env_b = {"OPENAI_BASE_URL": b.base_url, "OPENAI_MODEL": "model-b"}
        r = cli("memory", "--vault", str(v.root), "extract", "--pending", env=env_b)
        assert r.returncode == 0, r.stderr
        posts_a = [q for q in a.requests if q.method == "POST"]
        posts_b = [q for q in b.requests if q.method == "POST"]
        assert len(posts_a) == 1 and posts_a[0].body["model"] == "model-a"
        assert "made with A" in json.dumps(posts_a[0].body) and "older acpmem" not in json.dumps(posts_a[0].body)
        assert len(posts_b) == 1 and posts_b[0].body["model"] == "model-b"
        assert "older acpmem" in json.dumps(posts_b[0].body)
    assert not pending(v) and len(fork_commits(v)) == 2


def test_a_runners_key_goes_to_the_recorded_endpoint_only_if_it_is_the_key_the_request_was_made_with(vault, cli):
    """A request made at endpoint A with key KA, left pending, is run by a process configured for endpoint B with
    key KB (another host's environment): KB is never sent to A — the request runs at B, B's key and model. Run by a
    process with B's endpoint but A's key, it goes to A, as made. The key is recorded only as a salted digest."""
    v = configure(vault, extractor="auto")
    with fake_openai() as a, fake_openai() as b:
        files = _left_pending(v, cli, {"OPENAI_BASE_URL": a.base_url + "/", "OPENAI_MODEL": "model-a",
                                       "OPENAI_API_KEY": "sk-key-a"},
                              ("first, run where key B is set", "second, run where key A is set"))
        made = json.loads(files["first, run where key B is set"].read_text())
        assert len(made["key_id"]) == 32 and "sk-key-a" not in json.dumps(made)
        assert made["key_id"] != json.loads(files["second, run where key A is set"].read_text())["key_id"]  # salted
        second = files["second, run where key A is set"]
        held = second.with_suffix(".held")
        second.rename(held)   # one request at a time
        b.enqueue(reply.writes(reply.write("- Deploys run from the release branches.")))
        env_b = {"OPENAI_BASE_URL": b.base_url, "OPENAI_MODEL": "model-b", "OPENAI_API_KEY": "sk-key-b"}
        assert cli("memory", "--vault", str(v.root), "extract", "--pending", env=env_b).returncode == 0
        assert a.requests == []
        (post,) = [q for q in b.requests if q.method == "POST"]
        assert post.headers["authorization"] == "Bearer sk-key-b" and post.body["model"] == "model-b"
        held.rename(second)
        a.enqueue(reply.writes(reply.write("- Guard session.append with the lock.")))
        env_ba = dict(env_b, OPENAI_API_KEY="sk-key-a")
        r = cli("memory", "--vault", str(v.root), "extract", "--pending", env=env_ba)
        assert r.returncode == 0, r.stderr
        (post,) = [q for q in a.requests if q.method == "POST"]
        assert post.headers["authorization"] == "Bearer sk-key-a" and post.body["model"] == "model-a"
        assert "second, run where key A is set" in json.dumps(post.body)
    assert not pending(v) and len(fork_commits(v)) == 2


# --------------------------------------------------------------------------------------------- retry after --wait

def test_a_failed_commit_wait_is_retried_by_the_background_worker_as_it_says(vault, cli, openai_server):
    """The model fails the inline attempt: exit 1, and the message says the background worker retries it at its
    next attempt — which it does (no further commit, no `extract`)."""
    v = configure(vault, openai_server, extractor="llm", retry_base_seconds=0.2)
    openai_server.enqueue(reply.server_error(503, "overloaded"),
                          reply.writes(reply.write("- Guard session.append with the session lock.")))
    r = cli("memory", "--vault", str(v.root), *commit_args(CHAT, 6, "--wait"))
    assert r.returncode == 1, r.stderr
    assert "was not extracted" in r.stderr and "it stays pending and the background worker retries it at 20" \
        in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1
    wait_until(lambda: fork_commits(v) and not pending(v))
    assert len([q for q in openai_server.requests if q.method == "POST"]) == 2
    (rec,) = [json.loads(line) for line in (requests.queue_home(v.state_dir) / "done.jsonl").read_text().splitlines()]
    assert rec["status"] == "written"


def test_commit_wait_json_says_when_and_who_retries(vault, cli, openai_server):
    v = configure(vault, openai_server, extractor="llm", retry_base_seconds=3600)
    openai_server.enqueue(reply.server_error(503, "overloaded"))
    fd = worker.try_worker_lock(v.state_dir)
    os.close(fd)
    r = cli("memory", "--vault", str(v.root), *commit_args(CHAT, 6, "--wait", "--json"))
    assert r.returncode == 1
    ack = json.loads(r.stdout)
    (p,) = pending(v)
    assert ack["retry"]["at"] == json.loads(p.read_text())["next_attempt"]
    assert ack["retry"]["worker"] in ("started", "running")


# --------------------------------------------------------------------------------------------- Ctrl-C

def _ctrl_c(cmd: list[str], env: dict, ready) -> subprocess.CompletedProcess:
    """Start ``cmd`` in its own process group, wait (bounded) until ``ready()`` says it is where the test wants it,
    then send SIGINT to the group — what a terminal's Ctrl-C does."""
    p = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        wait_until(ready)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


@pytest.mark.parametrize("how", ["commit --wait", "extract"])
def test_ctrl_c_during_the_model_call_uses_no_attempt(vault, cli, tmp_path, how):
    """The endpoint holds its answer until the test lets go; Ctrl-C meanwhile: "Interrupted.", exit 130, the
    request pending with no attempt counted and no error, nothing written; the next run writes it once."""
    v = configure(vault, extractor="llm", timeout_seconds=600.0)   # the answer is held until after the Ctrl-C
    status = subprocess.run(["git", "-C", str(v.root), "status", "--porcelain"], capture_output=True, text=True).stdout
    gate = threading.Event()
    with fake_openai([reply.held(gate, reply.writes(reply.write("- never sent")))]) as srv:
        env = {"OPENAI_BASE_URL": srv.base_url, "OPENAI_MODEL": "m"}
        base = [ACP, "memory", "--vault", str(v.root)]
        if how == "extract":
            fd = worker.try_worker_lock(v.state_dir)
            try:
                assert cli("memory", "--vault", str(v.root), *commit_args(CHAT, 6), env=env).returncode == 0
            finally:
                os.close(fd)
            cmd = base + ["extract", pending(v)[0].stem]
        else:
            cmd = base + list(commit_args(CHAT, 6, "--wait"))
        r = _ctrl_c(cmd, env, lambda: [q for q in srv.requests if q.method == "POST"])
        gate.set()
        assert r.returncode == 130, (r.stdout, r.stderr)
        assert r.stderr == "Interrupted.\n"
        (p,) = pending(v)
        rec = json.loads(p.read_text())
        assert rec["attempts"] == 0 and rec["errors"] == [] and rec["status"] == "pending"
        assert not fork_commits(v) and not (v.root / ".git" / "acpmem" / "journal.json").exists()
        assert subprocess.run(["git", "-C", str(v.root), "status", "--porcelain"], capture_output=True,
                              text=True).stdout == status      # nothing half-written
        srv.enqueue(reply.writes(reply.write("- Guard session.append with the session lock.")))
        again = cli("memory", "--vault", str(v.root), "extract", "--pending", env=env)
        assert again.returncode == 0, again.stderr
    assert len(fork_commits(v)) == 1 and not pending(v)


def test_ctrl_c_during_sync_is_interrupted_and_leaves_nothing_half_done(vault, cli, tmp_path):
    """Ctrl-C while `sync` waits on the remote (an ssh transport that blocks until killed): "Interrupted.", exit
    130; no lock left, no merge in progress; the next sync, to a reachable remote, pushes."""
    started = tmp_path / "ssh-started"
    ssh = tmp_path / "ssh.sh"
    ssh.write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 600\n")
    ssh.chmod(0o755)
    subprocess.run(["git", "-C", str(vault.root), "remote", "add", "origin", "ssh://example.invalid/vault.git"],
                   check=True)
    r = _ctrl_c([ACP, "memory", "--vault", str(vault.root), "sync"], {"GIT_SSH_COMMAND": str(ssh)}, started.exists)
    assert r.returncode == 130, (r.stdout, r.stderr)
    assert r.stderr == "Interrupted.\n"
    assert not (vault.root / ".git" / "MERGE_HEAD").exists()
    assert locks.holder(vault.lock_path) is None
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(bare)], check=True)
    subprocess.run(["git", "-C", str(vault.root), "remote", "set-url", "origin", str(bare)], check=True)
    ok = cli("memory", "--vault", str(vault.root), "sync")
    assert ok.returncode == 0 and "pushed" in ok.stdout, ok.stderr


# --------------------------------------------------------------------------------------------- sync's pre-push check

AWS_KEY = "AKIA" + "Z3MHQ7RVXN4PLK2D"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def _entry(v, ident: str, title: str, body: str) -> str:
    from helpers_proc import make_entry

    e = make_entry(ident, title, body)
    return v.write_entries([e.with_changes(path=v.path_for(ident, title))], subject=f"add #{ident}", why="test")


@pytest.fixture
def shared(vault, tmp_path):
    """The vault, pushed once to a bare remote with one entry."""
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    _entry(vault, "base01", "One worker per vault drains the queue", "- One worker per vault.")
    _git(vault.root, "remote", "add", "origin", str(bare))
    r = subprocess.run([ACP, "memory", "--vault", str(vault.root), "sync"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return vault, bare


def _remote_holds(bare: Path, text: str) -> bool:
    return text in subprocess.run(["git", "-C", str(bare), "log", "--all", "-p"], capture_output=True,
                                  text=True).stdout


def test_sync_never_pushes_a_secret_committed_by_hand_and_pushes_what_came_before(shared, cli):
    """An AWS key put into an entry and committed with `git commit -a`: sync names the file, pushes the commits
    before it (a safe prefix) and not the secret; after the next step it names, the rest goes too."""
    v, bare = shared
    good = _entry(v, "good01", "The fork closes the open memory_commit call", "- The ack closes the call.")
    path = next((v.root / "entries").glob("base01*.md"))
    rel = path.relative_to(v.root).as_posix()
    path.write_text(path.read_text().replace("- One worker per vault.", f"- One worker per vault. aws {AWS_KEY}"))
    _git(v.root, "commit", "-q", "-a", "-m", "notes")
    later = _entry(v, "later1", "Commit refuses doomed requests", "- Refused at call time.")
    r = cli("memory", "--vault", str(v.root), "sync")
    assert r.returncode == 1 and r.stdout == "", r.stderr
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1
    assert rel in r.stderr and "secret (aws-access-key-id)" in r.stderr and AWS_KEY not in r.stderr
    assert f"pushed only the 1 commit(s) before it (up to {good[:12]})" in r.stderr
    assert f"git -C {v.root} reset --soft {good[:12]}" in r.stderr
    assert _git(bare, "rev-parse", "main").strip() == good
    assert not _remote_holds(bare, AWS_KEY)
    # the next step it names: remove the secret, drop the local commits keeping their changes, sync again
    path.write_text(path.read_text().replace(f" aws {AWS_KEY}", ""))
    _git(v.root, "reset", "-q", "--soft", good[:12])
    again = cli("memory", "--vault", str(v.root), "sync")
    assert again.returncode == 0, again.stderr
    assert not _remote_holds(bare, AWS_KEY)
    tree = _git(bare, "ls-tree", "-r", "--name-only", "main")
    assert "later1" in tree and later not in _git(bare, "rev-list", "main")   # its change, in a new commit


def test_sync_never_pushes_an_invalid_entry_committed_by_hand(shared, cli):
    """The only outgoing commit makes an entry invalid: nothing is pushed; fixed, the next sync pushes."""
    v, bare = shared
    before = _git(bare, "rev-parse", "main").strip()
    path = next((v.root / "entries").glob("base01*.md"))
    rel = path.relative_to(v.root).as_posix()
    original = path.read_text()
    path.write_text(original.replace("importance: 5", "importance: 99"))
    _git(v.root, "commit", "-q", "-a", "-m", "more important")
    r = cli("memory", "--vault", str(v.root), "sync")
    assert r.returncode == 1 and rel in r.stderr and "is not a valid entry" in r.stderr, r.stderr
    assert "nothing was pushed" in r.stderr and "acp memory edit" in r.stderr
    assert _git(bare, "rev-parse", "main").strip() == before
    path.write_text(original.replace("importance: 5", "importance: 9"))
    again = cli("memory", "--vault", str(v.root), "sync")
    assert again.returncode == 0, again.stderr
    assert "importance: 9" in _git(bare, "show", f"main:{rel}")
