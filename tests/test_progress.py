"""Progress on long work: drawn on a terminal (``acp`` a real process on a pseudo-terminal, through
``tests/support/launcher.py``: its streams set up for the terminal as the interpreter sets them up), never in piped
output or under ``--json``. Asserts on what is written, never on how long anything took: the thresholds that decide when a
count or a wait is shown are set low through the environment."""
from __future__ import annotations

import fcntl
import json
import os
import random
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import launcher
from embeddings_server import embeddings_server
from helpers_proc import git_out
from openai_server import reply
from test_consolidate import _merge_reply, planted
from test_embedding import configure as configure_embeddings, write as write_entries
from test_fork import CHAT, configure, submit

from acpmem.upkeep.consolidate import find_clusters

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\r")


def on_terminal(*args: str, env: dict | None = None, timeout: float = 120) -> tuple[int, str]:
    """Run ``acp ARGS`` with its stdout and stderr on one pseudo-terminal (120 columns); (exit code, what it wrote,
    terminal control sequences removed)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    p = subprocess.Popen([launcher.acp(), *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                         env={**os.environ, "TERM": "xterm-256color", **(env or {})})
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if p.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:   # EIO: the child closed its side
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    code = p.wait(timeout=30)
    return code, _ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))


def piped(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([launcher.acp(), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TERM": "xterm-256color", **(env or {})})


def _two_pending(vault):
    v = configure(vault, extractor="offline")
    ids = [submit(v, note=f"re-entrant session.append {i}", seq=6).id for i in range(2)]
    return v, ids


def test_extract_counts_the_requests_and_shows_each_result_on_a_terminal(vault):
    v, ids = _two_pending(vault)
    code, text = on_terminal("memory", "--vault", str(v.root), "extract", "--pending")
    assert code == 0, text
    assert "extracting" in text and "/2 requests" in text
    # each result as it finished (above the count, on stderr), then the summary on stdout: twice each
    for rid in ids:
        assert text.count(f"{rid}: wrote 1 entry") == 2, text
    v.close()


def test_extract_in_piped_output_and_under_json_shows_no_progress(vault):
    v, ids = _two_pending(vault)
    r = piped("memory", "--vault", str(v.root), "extract", "--pending")
    assert r.returncode == 0, r.stderr
    assert "requests" not in r.stderr and "extracting" not in r.stderr and "━" not in r.stderr
    for rid in ids:   # each result once: the summary, no line of progress
        assert (r.stdout + r.stderr).count(f"{rid}: wrote 1 entry") == 1, (r.stdout, r.stderr)
    v2, more = _two_pending(v)
    code, text = on_terminal("memory", "--vault", str(v2.root), "extract", "--pending", "--json")
    assert code == 0, text
    assert "/2 requests" not in text and "extracting" not in text
    assert {o["request"] for o in json.loads(text[text.index("{"):])["outcomes"]} == set(more)
    v2.close()


def _fresh_index(v) -> None:
    for p in v.state_dir.glob("index.sqlite*"):
        p.unlink()


def test_the_first_index_build_of_a_large_vault_is_counted_on_a_terminal(example_vault):
    v = example_vault
    n = len(v.load().entries)
    env = {"ACPMEM_PROGRESS_MIN_ENTRIES": "5", "ACPMEM_USER_VAULT": "none"}
    _fresh_index(v)
    code, text = on_terminal("memory", "--vault", str(v.root), "recall", "upload", env=env)
    assert code == 0, text
    assert "reading entries" in text and f"{n}/{n} entries" in text
    assert "indexing entries" in text
    # built now: the next call has nothing to count
    code, text = on_terminal("memory", "--vault", str(v.root), "recall", "upload", env=env)
    assert code == 0 and "entries" not in text.split("<<acpmem-data")[0].replace("memories", ""), text
    # below the threshold (the default, thousands), piped, or under --json: nothing
    _fresh_index(v)
    code, text = on_terminal("memory", "--vault", str(v.root), "recall", "upload", env={"ACPMEM_USER_VAULT": "none"})
    assert code == 0 and "reading entries" not in text
    _fresh_index(v)
    r = piped("memory", "--vault", str(v.root), "recall", "upload", env=env)
    assert r.returncode == 0 and r.stderr == ""
    _fresh_index(v)
    code, text = on_terminal("memory", "--vault", str(v.root), "recall", "upload", "--json", env=env)
    assert code == 0 and "reading entries" not in text and json.loads(text)["hits"]


def test_commit_wait_says_it_waits_for_a_slow_model_on_a_terminal_only(vault, openai_server):
    v = configure(vault, openai_server)
    commit = ("memory", "--vault", str(v.root), "commit", "--type", "lesson", "--note", "re-entrant append",
              "--importance", "6", "--session", "s1", "--seq", "6", "--transcript", str(CHAT), "--wait")
    env = {"ACPMEM_WAIT_NOTICE_S": "0"}   # at once: the test does not depend on how long the model takes
    openai_server.enqueue(reply.slow(0.5, reply.writes(reply.write("- Guard the append with the session lock."))))
    code, text = on_terminal(*commit, env=env)
    assert code == 0, text
    assert re.search(r"waiting for the model \(\d+ s\)", text), text
    assert "wrote 1 entry" in text
    openai_server.enqueue(reply.slow(0.5, reply.writes(reply.write("- Hold the lock while appending."))))
    r = piped(*commit, env=env)
    assert r.returncode == 0 and "wrote 1 entry" in r.stdout, r.stderr
    assert "waiting" not in r.stderr and "waiting" not in r.stdout
    openai_server.enqueue(reply.slow(0.5, reply.writes(reply.write("- Append under the session lock only."))))
    code, text = on_terminal(*commit, "--json", env=env)
    assert code == 0 and "waiting for the model" not in text and json.loads(text)["outcome"]["status"] == "written"
    # the default threshold is seconds: a model that answers at once is not said to be waited for
    openai_server.enqueue(reply.writes(reply.write("- The append takes the session lock.")))
    code, text = on_terminal(*commit)
    assert code == 0 and "waiting for the model" not in text, text
    v.close()


def test_consolidate_counts_the_clusters_on_a_terminal(vault, openai_server):
    planted(vault, random.Random(3))
    v = configure(vault, openai_server)
    n = len(find_clusters(v, similarity="lexical"))    # the words only: no judge call takes a scripted answer
    assert n >= 2
    _merge_reply(openai_server, n)
    code, text = on_terminal("memory", "--vault", str(v.root), "consolidate", "--similarity", "lexical")
    assert code == 0, text
    assert "merging" in text and f"/{n} clusters" in text
    # each cluster's result as it was merged (a contradiction's merge is a proposal)
    assert text.count(": written #") + text.count(": proposed #") == n
    v.close()


def test_sync_counts_its_steps_on_a_terminal_and_not_when_piped(vault, tmp_path):
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    git_out(vault.root, "remote", "add", "origin", str(bare))
    code, text = on_terminal("memory", "--vault", str(vault.root), "sync")
    assert code == 0, text
    assert "sync with origin" in text and "/3 steps" in text and "Synced with origin/main" in text
    r = piped("memory", "--vault", str(vault.root), "sync")
    assert r.returncode == 0 and "steps" not in r.stderr and "Synced with origin/main" in r.stdout


def test_embed_by_hand_counts_the_texts_on_a_terminal(vault):
    entries = write_entries(vault)
    with embeddings_server() as srv:
        configure_embeddings(vault, srv, batch_size=2)
        code, text = on_terminal("memory", "--vault", str(vault.root), "embed")
        assert code == 0, text
        assert "embedding" in text and f"/{len(entries)} texts" in text
        assert f"Embedded {len(entries)} text(s); 0 missing" in text
        assert srv.texts == len(entries)
        r = piped("memory", "--vault", str(vault.root), "embed", "--json")
        assert r.returncode == 0 and r.stderr == "" and json.loads(r.stdout)["embedded"] == 0   # nothing new
        import jsonschema

        from acpmem.cli.schemas import schema

        jsonschema.validate(json.loads(r.stdout), schema("embed"))   # the shipped schema holds (docs/json.md)
