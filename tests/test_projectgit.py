"""Memory that stays true: entries that record the project files their cited turns touched and the project's
commit (``acpmem.vault.projectgit``), and citations checked when served (``acpmem.read.citecheck``).

Real parts: a real project git repository with the vault at ``<project>/.acp-memory``, the real console script,
the hosts' own session logs from ``tests/fixtures/hosts`` (a DSH log, a pi log), and a ``git`` on PATH that logs
each call before running the real git (to count the git processes a per-turn command starts).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from acpmem.core.entryfile import parse_entry
from acpmem.core.errors import EntryInvalid

FIX = Path(__file__).parent / "fixtures"
DSH = FIX / "hosts" / "dsh" / "dsh-session1.jsonl.zstd"
PI = FIX / "hosts" / "pi" / "pi-compaction" / "2026-12-01T21-30-21-195Z_01a23384-0a8b-75d8-a035-8d03a8cd842b.jsonl"
CLAUDE = FIX / "transcripts" / "claude_code.jsonl"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def _project(tmp_path: Path, cli) -> Path:
    """A project with a few files in one commit, and its vault at .acp-memory."""
    proj = tmp_path / "proj"
    for rel, text in {"src/auth/login.ts": "export function login() {}\n", "NOTES.md": "notes\n",
                      "tests/login.test.ts": "test('login')\n", "tests/refresh.test.ts": "test('refresh')\n",
                      "README.md": "readme\n"}.items():
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text(text)
    _git(proj.parent, "init", "-q", str(proj))
    _git(proj, "add", "-A")
    _git(proj, "commit", "-qm", "start")
    r = cli("memory", "init", cwd=proj)
    assert r.returncode == 0, r.stderr
    return proj


def _commit_block(cli, proj: Path, log: Path, session: str, block: str, seq: int, note: str) -> str:
    r = cli("memory", "commit", "--type", "fact", "--note", note, "--importance", "5", "--session", session,
            "--seq", str(seq), "--transcript", str(log), "--block", block, "--wait", "--extractor", "offline",
            "--json", cwd=proj)
    assert r.returncode == 0, r.stderr
    (entry,) = json.loads(r.stdout)["outcome"]["entries"]
    return entry["id"]


def _change(proj: Path, rel: str, subject: str) -> str:
    with open(proj / rel, "a") as f:
        f.write("// changed\n")
    _git(proj, "commit", "-qam", subject)
    return _git(proj, "rev-parse", "HEAD").strip()


def _meta(proj: Path, ident: str) -> dict:
    (path,) = (proj / ".acp-memory" / "entries").glob(f"{ident}*.md")
    e = parse_entry(path.read_text(), str(path))
    return {"files": e.extra.get("files"), "commit": e.extra.get("commit"), "hashes": [c.hash for c in e.citation]}


def _json(cli, proj: Path, *args: str) -> dict:
    r = cli("memory", *args, "--json", cwd=proj)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture
def two(tmp_path, cli):
    """A project and two fork-written entries from the DSH log: b1 read src/auth/login.ts, b2 the two test files;
    a third entry from pi's compaction, whose details list NOTES.md and src/auth/login.ts."""
    proj = _project(tmp_path, cli)
    dsh = proj.parent / "dsh.jsonl.zstd"
    shutil.copy(DSH, dsh)
    pi = proj.parent / PI.name
    shutil.copy(PI, pi)
    a = _commit_block(cli, proj, dsh, "dsh-1", "b1", 3135, "how login works")
    b = _commit_block(cli, proj, dsh, "dsh-1", "b2", 3135, "what the tests cover")
    c = _commit_block(cli, proj, pi, "pi-1", "pi-compaction-5e931d3d", 23, "the auth design")
    return proj, a, b, c, pi


def test_the_fork_records_the_files_the_cited_turns_touched_and_the_commit(two):
    proj, a, b, c, _ = two
    head = _git(proj, "rev-parse", "HEAD").strip()
    assert _meta(proj, a)["files"] == ["src/auth/login.ts"]
    assert sorted(_meta(proj, b)["files"]) == ["tests/login.test.ts", "tests/refresh.test.ts"]
    assert sorted(_meta(proj, c)["files"]) == ["NOTES.md", "src/auth/login.ts"]   # pi's details.readFiles
    for ident in (a, b, c):
        m = _meta(proj, ident)
        assert m["commit"] == head
        assert all(h and len(h) == 32 for h in m["hashes"])


def test_a_changed_file_marks_exactly_the_entries_that_cite_it(two, cli):
    proj, a, b, c, _ = two
    assert _json(cli, proj, "stale")["stale"] == []
    sha = _change(proj, "tests/refresh.test.ts", "refresh tests cover expiry")
    _change(proj, "README.md", "readme only")   # a file no entry is about marks nothing
    got = _json(cli, proj, "stale")
    assert [s["id"] for s in got["stale"]] == [b]
    assert got["stale"][0]["files"] == ["tests/refresh.test.ts"]
    assert [x["commit"] for x in got["stale"][0]["commits"]] == [sha]
    assert got["stale"][0]["commits"][0]["subject"] == "refresh tests cover expiry"

    listing = cli("memory", "list", cwd=proj).stdout.splitlines()
    marked = [line for line in listing if "[stale:" in line]
    assert len(marked) == 1 and f"#{b} " in marked[0] and "tests/refresh.test.ts" in marked[0]
    prompt = cli("memory", "list", "--format", "prompt", cwd=proj).stdout
    lines = {i: next(line for line in prompt.splitlines() if f"#{i}," in line) for i in (a, b, c)}
    assert "files changed since written" in lines[b]
    assert "files changed since written" not in lines[a] + lines[c]
    entries = {e["id"]: e for e in _json(cli, proj, "list")["entries"]}
    assert entries[b]["stale"]["files"] == ["tests/refresh.test.ts"] and entries[a]["stale"] is None

    _change(proj, "src/auth/login.ts", "login takes a second factor")
    assert sorted(s["id"] for s in _json(cli, proj, "stale")["stale"]) == sorted([a, b, c])
    doctor = cli("memory", "doctor", cwd=proj).stdout
    assert "3 entries may be stale" in doctor


def test_confirm_records_the_new_commit_and_clears_the_mark(two, cli):
    proj, a, b, c, _ = two
    _change(proj, "src/auth/login.ts", "login changed")
    head = _git(proj, "rev-parse", "HEAD").strip()
    assert sorted(s["id"] for s in _json(cli, proj, "stale")["stale"]) == sorted([a, c])
    vault = proj / ".acp-memory"
    r = cli("memory", "review", "confirm", a, cwd=proj)
    assert r.returncode == 0, r.stderr
    assert f"Confirmed #{a} still true at project commit {head[:12]}" in r.stdout
    assert _meta(proj, a)["commit"] == head
    diff = _git(vault, "show", "--format=", "-U0", "HEAD").splitlines()
    assert [d for d in diff if d[:1] in "+-" and d[:3] not in ("+++", "---")] == \
        [f"-commit: {_meta(proj, b)['commit']}", f"+commit: {head}"]   # only the one line changed
    assert [s["id"] for s in _json(cli, proj, "stale")["stale"]] == [c]
    r = cli("memory", "review", "forget", c, "--reason", "the design moved on", cwd=proj)
    assert r.returncode == 0, r.stderr
    assert _json(cli, proj, "stale")["stale"] == []
    assert c not in {e["id"] for e in _json(cli, proj, "list")["entries"]}


def test_review_stale_asks_per_entry(two, cli):
    proj, a, b, c, _ = two
    _change(proj, "tests/login.test.ts", "login tests")
    r = cli("memory", "review", "--stale", cwd=proj, input="c\n")
    assert r.returncode == 0, r.stderr
    assert f"#{b}" in r.stdout and "tests/login.test.ts" in r.stdout and "login tests" in r.stdout
    assert "confirmed at project commit" in r.stdout
    assert _json(cli, proj, "stale")["stale"] == []


def test_a_deleted_transcript_makes_recall_say_so(two, cli):
    proj, a, b, c, pi = two
    hits = {h["id"]: h for h in _json(cli, proj, "recall", "auth design", "--limit", "10")["hits"]}
    assert hits[c]["cited"]["status"] == "ok"
    pi.unlink()
    r = cli("memory", "recall", "auth design", "--limit", "10", cwd=proj)
    assert r.returncode == 0, r.stderr   # never a failure of the recall
    head = next(line for line in r.stdout.splitlines() if f'id="{c}"' in line)
    assert 'cited="cited transcript is gone"' in head
    hits = {h["id"]: h for h in _json(cli, proj, "recall", "auth design", "--limit", "10")["hits"]}
    assert hits[c]["cited"]["status"] == "gone" and hits[c]["cited"]["marked"] is True
    assert hits[c]["cited"]["citations"][0]["transcript"] == str(pi)
    show = cli("memory", "show", c, cwd=proj)
    assert show.returncode == 0 and "source check: cited transcript is gone" in show.stdout
    assert "entry cites a transcript that is gone" in cli("memory", "doctor", cwd=proj).stdout


def test_a_changed_cited_turn_is_flagged_and_an_untouched_rewrite_is_not(two, cli):
    proj, a, b, c, pi = two
    text = pi.read_text()
    pi.write_text(text)   # the same bytes, a new mtime: hashed again, found unchanged
    os.utime(pi, ns=(1, 1))
    hits = {h["id"]: h for h in _json(cli, proj, "recall", "auth design", "--limit", "10")["hits"]}
    assert hits[c]["cited"]["status"] == "ok"
    assert "Reading login.ts." in text
    pi.write_text(text.replace("Reading login.ts.", "Reading nothing at all."))   # a cited turn (seq 4)
    hits = {h["id"]: h for h in _json(cli, proj, "recall", "auth design", "--limit", "10")["hits"]}
    assert hits[c]["cited"]["status"] == "changed"
    shown = _json(cli, proj, "show", c)
    assert shown["cited"]["status"] == "changed" and shown["stale"] is None


def test_the_per_turn_listing_runs_git_once_per_head_and_not_again(two, cli, tmp_path):
    proj, a, b, c, _ = two
    shim = tmp_path / "bin"
    shim.mkdir()
    log = tmp_path / "git-calls.log"
    real = shutil.which("git")
    (shim / "git").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {real} "$@"\n')
    (shim / "git").chmod(stat.S_IRWXU)
    env = {"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    _change(proj, "NOTES.md", "notes")
    for _ in range(2):
        r = cli("memory", "list", "--format", "prompt", cwd=proj, env=env)
        assert r.returncode == 0 and "files changed since written" in r.stdout
    calls = log.read_text().splitlines() if log.exists() else []
    # the three entries share one recorded commit: one diff for the new HEAD, none on the second turn
    assert [c for c in calls if " diff " in f" {c} "] and len([c for c in calls if " diff " in f" {c} "]) == 1
    assert not [c for c in calls if " log " in f" {c} "]


def test_no_project_git_means_no_marker_and_no_cost(tmp_path, cli):
    proj = tmp_path / "plain"
    proj.mkdir()
    (proj / "a.py").write_text("x = 1\n")
    assert cli("memory", "init", cwd=proj).returncode == 0
    vault = proj / ".acp-memory"
    entry = ("---\nid: hand01\ntitle: a.py sets x\ntype: fact\nimportance: 5\ncreated: 2026-11-29T12:00:00Z\n"
             "files: [a.py]\ncommit: 0123456789abcdef0123456789abcdef01234567\n---\nx is one.\n")
    (vault / "entries" / "hand01.md").write_text(entry)
    listing = cli("memory", "list", cwd=proj).stdout
    assert "#hand01" in listing and "[stale:" not in listing
    assert "changed since written" not in cli("memory", "list", "--format", "prompt", cwd=proj).stdout
    got = _json(cli, proj, "stale")
    assert got["project"] is None and got["stale"] == []
    assert not (vault / ".acpmem" / "stale.json").exists()


def test_files_and_commit_are_checked_strictly_and_kept_as_written():
    base = "---\nid: e1\ntitle: t\ntype: fact\nimportance: 5\ncreated: 2026-11-29T12:00:00Z\n"
    e = parse_entry(base + "files: [src/a.py, 'b c.md']\ncommit: 3f2a9c1\n---\nbody\n", "entries/e1.md")
    assert e.extra["files"] == ["src/a.py", "b c.md"] and e.extra["commit"] == "3f2a9c1"
    assert parse_entry(base + "files: src/a.py\n---\nbody\n", "x").extra["files"] == "src/a.py"   # one, by hand
    for bad, field in (("files: [/etc/passwd]", "files"), ("files: [../up.py]", "files"), ("files: 3", "files"),
                       ("commit: not-a-commit", "commit"), ("files: [a.py]\ncommit: 12", "commit")):
        with pytest.raises(EntryInvalid) as exc:
            parse_entry(base + bad + "\n---\nbody\n", "entries/e1.md")
        assert exc.value.field == field
    with pytest.raises(EntryInvalid) as exc:
        parse_entry(base + "citation:\n- session: s\n  seq: 1\n  hash: xyz\n---\nb\n", "entries/e1.md")
    assert exc.value.field == "citation" and "hash" in exc.value.reason


def test_tool_calls_name_their_files_in_each_hosts_shape(tmp_path):
    from acpmem.core.toolfiles import tool_files
    from acpmem.vault.projectgit import relative_file
    from acpmem.hosts.transcripts import read_transcript

    cc = read_transcript(CLAUDE)
    assert ("/repo/state.ts", False) in tool_files(m.raw for m in cc.messages)
    assert relative_file("/repo/state.ts", Path("/repo")) == "state.ts"
    assert relative_file("/elsewhere/state.ts", Path("/repo")) is None
    assert relative_file("../up.ts", Path("/repo")) is None
    dsh = read_transcript(DSH)
    files = dict(tool_files(m.raw for m in dsh.turns(dsh.block("b2").seqs)))
    assert set(files) == {"tests/login.test.ts", "tests/refresh.test.ts"}
    raw = {"role": "assistant", "tool_calls": [{"function": {"name": "edit_file",
                                                              "arguments": '{"path": "src/x.py"}'}}]}
    assert tool_files([raw]) == [("src/x.py", True)]


def test_the_citation_digest_reads_the_same_from_a_partial_dsh_read():
    from acpmem.read.citecheck import cited_turn_seqs, turns_digest
    from acpmem.write.context import request_citations
    from acpmem.write.requests import Request
    from acpmem.hosts.transcripts import read_transcript

    full = read_transcript(DSH).upto(3135)
    req = Request(id="r-x", created="2026-11-29T12:00:00Z", type="fact", note="n", importance=5, session="s",
                  seq=3135, ack="ok", transcript=str(DSH), block="b2")
    (cite,) = request_citations(req, full)
    seqs = cited_turn_seqs(full, cite)
    partial = read_transcript(DSH, turns=frozenset(seqs))
    assert seqs and turns_digest(full, seqs) == turns_digest(partial, cited_turn_seqs(partial, cite))
    assert turns_digest(full, seqs) != turns_digest(full, seqs[:-1])


def test_a_plain_commit_records_the_files_of_the_turns_since_the_previous_commit(tmp_path, cli):
    """A citation of the commit's own turn names no file; the turns that led to it do (here the read of state.ts)."""
    proj = _project(tmp_path, cli)
    (proj / "state.ts").write_text("let appending = false;\n")
    _git(proj, "add", "-A")
    _git(proj, "commit", "-qm", "state")
    chat = proj.parent / "chat.json"
    shutil.copy(FIX / "transcripts" / "openai_chat.json", chat)
    r = cli("memory", "commit", "--type", "lesson", "--note", "re-entrant session.append", "--importance", "7",
            "--session", "cc-1", "--seq", "6", "--transcript", str(chat), "--wait", "--extractor", "offline",
            "--json", cwd=proj)
    assert r.returncode == 0, r.stderr
    (entry,) = json.loads(r.stdout)["outcome"]["entries"]
    m = _meta(proj, entry["id"])
    assert m["files"] == ["state.ts"] and m["commit"] == _git(proj, "rev-parse", "HEAD").strip()
    _change(proj, "state.ts", "a lock instead of the flag")
    assert [s["id"] for s in _json(cli, proj, "stale")["stale"]] == [entry["id"]]
    off = cli("memory", "list", cwd=proj, env={"ACPMEM_CHECKS": "off"})
    assert off.returncode == 0 and "[stale:" not in off.stdout   # the switch the benchmark compares with
    assert "[stale:" in cli("memory", "list", cwd=proj).stdout


def test_confirm_in_a_vault_outside_any_project_git_is_refused_by_the_vault_not_the_command_line(tmp_path, cli):
    """The command line is right; this vault cannot record a commit: exit 1 (content), one line, nothing written."""
    root = tmp_path / "v"
    assert cli("memory", "init", "--example", str(root)).returncode == 0
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    ident = json.loads(cli("memory", "--vault", str(root), "list", "--json").stdout)["entries"][0]["id"]
    r = cli("memory", "--vault", str(root), "review", "confirm", ident)
    assert r.returncode == 1 and r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "not inside a git project" in r.stderr
    assert subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout == head
