"""Hostile input: every malformed, oversized or escaping input is refused or quarantined
with a clear message; nothing is written outside the vault; good entries keep working; hand-written bytes are never
rewritten by list, recall, doctor or a commit.

Hostile files are written by hand into a real vault (the way a person, a bad merge or a malicious clone would) and
then the vault is used normally through the library and the real CLI.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import helpers_proc as hp
from acpmem.upkeep import doctor as health
from acpmem.vault import reader
from acpmem.read import resident
from acpmem.core.errors import AcpmemError, EntryInvalid, UsageError
from acpmem.core.entry import validate_id
from acpmem.read.retrieval import recall
from acpmem.vault.writer import Vault

GOOD = hp.make_entry("good01", "Good entry about sqlite wal", "The good entry stays findable.")

FM = "---\nid: {id}\ntitle: Hostile {id}\ntype: fact\nimportance: 5\ncreated: 2026-11-29T12:00:00Z\n{extra}---\nbody\n"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n" \
       "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n" \
       "e: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"

# name -> (file bytes, words the reason must contain)
HOSTILE: dict[str, tuple[bytes, str]] = {
    "alias-bomb": (FM.format(id="bomb01", extra=BOMB).encode(), "anchors and aliases"),
    "python-tag": (FM.format(id="tag001", extra="x: !!python/object/apply:os.system ['touch {pwned}']\n").encode(),
                   "tags are not allowed"),
    "duplicate-key": (FM.format(id="dup001", extra="importance: 9\n").encode(), "duplicate key"),
    "octal-importance": (FM.format(id="oct001", extra="").replace("importance: 5", "importance: 012").encode(),
                         "integer from 1 to 10"),
    "yes-no-importance": (FM.format(id="yes001", extra="").replace("importance: 5", "importance: yes").encode(),
                          "integer from 1 to 10"),
    "non-utf8": (FM.format(id="lat001", extra="").encode().replace(b"body", b"caf\xe9 \xff"), "not UTF-8"),
    "unclosed": (FM.format(id="unc001", extra="").encode().replace(b"---\nbody", b"body"), "never closed"),
    "huge-frontmatter": (b"---\nid: big001\nnote: |\n" + b"  " + b"x" * 100 + b"\n" * 1 +
                         b"".join(b"  line %d of padding padding padding\n" % i for i in range(330_000)) +
                         b"---\nbody\n", "larger than"),
    "big-frontmatter": (FM.format(id="mid001", extra="pad: |\n" + "  padding padding padding\n" * 4000).encode(),
                        "larger than 64 KB"),
    "nul-byte": (FM.format(id="nul001", extra="").encode().replace(b"body", b"bo\x00dy"), "NUL"),
    "oversize-body": (FM.format(id="ovr001", extra="").encode() + b"y" * 1_200_000, "larger than"),
    "bad-id": (FM.format(id="../../etc/passwd", extra="").encode(), "id"),
    "not-a-mapping": (b"---\n- just\n- a list\n---\nbody\n", "mapping"),
    "conflict-markers": (FM.format(id="cnf001", extra="").encode().replace(
        b"body", b"<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> origin/main"), "conflict markers"),
    "conflict-markers-in-frontmatter-crlf": (FM.format(id="cnf002", extra="").replace(
        "importance: 5\n", "<<<<<<< HEAD\nimportance: 5\n=======\nimportance: 6\n>>>>>>> theirs\n").replace(
        "\n", "\r\n").encode(), "conflict markers"),
}


def _outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir(exist_ok=True)
    (out / "target.md").write_text("outside content\n")
    return out


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _use_the_vault(root: Path, cli, *, commands: tuple[tuple[str, ...], ...] = (("list", "--json"),
                                                                                ("recall", "sqlite wal"),
                                                                                ("doctor",))) -> None:
    """list, recall, the prompt index, doctor, and a commit — through the library and the CLI."""
    v = Vault(root, clock=lambda: hp.PINNED)
    try:
        entries, problems = reader.list_entries(v)
        assert "good01" in {e.id for e in entries}
        assert [h.entry.id for h in recall(v, "sqlite wal")] == ["good01"]
        assert "#good01" in resident.resident_index(v)
        health.check_vault(v)
        v.write_entries([hp.make_entry(f"new{len(entries):03d}", "Another good one", "Written meanwhile.")],
                        subject="add", why="hostile neighbours")
    finally:
        v.close()
    for args in commands:
        res = cli("memory", "--vault", str(root), *args)
        assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_entry_file_is_quarantined_with_a_clear_reason(name, vault, tmp_path, cli):
    data, words = HOSTILE[name]
    pwned = tmp_path / "pwned"
    data = data.replace(b"{pwned}", str(pwned).encode())
    root = vault.root
    vault.write_entries([GOOD.with_changes(path="entries/good01-good-entry.md")], subject="add", why="t")
    vault.close()
    outside = _outside(tmp_path)
    before_outside = _tree(outside)
    rel = f"entries/{name}.md"
    (root / rel).write_bytes(data)

    _use_the_vault(root, cli, commands=(("doctor",),))

    v = Vault(root, clock=lambda: hp.PINNED)
    try:
        _, problems = reader.list_entries(v)
        (prob,) = [p for p in problems if p.path == rel]
        assert words.lower() in (prob.reason + " " + str(prob.field)).lower(), prob
        rep = health.check_vault(v)
        assert any(rel in f.what and f.level == "error" for f in rep.findings)
    finally:
        v.close()
    # quarantined: never committed, never rewritten, nothing outside touched, nothing executed
    assert rel not in hp.head_files(root)
    assert (root / rel).read_bytes() == data
    assert f"?? {rel}" in hp.status_porcelain(root)
    assert _tree(outside) == before_outside and not pwned.exists()
    res = cli("memory", "--vault", str(root), "list", "--json")
    assert res.returncode == 0 and f"skipped {rel}" in res.stderr
    assert "good01" in res.stdout


def test_crlf_comments_and_unknown_keys_are_kept_byte_for_byte(vault, cli):
    root = vault.root
    rel = "entries/crlf01-hand-written.md"
    data = ("---\r\n# written by hand\r\nid: crlf01\r\ntitle: no\r\ntype: fact\r\nimportance: 6\r\n"
            "created: 2026-11-29T12:00:00Z\r\nlast_read: null\r\nmy_key: {a: 1}   # mine\r\nversion: 012\r\n"
            "---\r\nSome body\r\nwith CRLF lines about line endings.\r\n").encode()
    (root / rel).write_bytes(data)
    vault.write_entries([GOOD.with_changes(path="entries/good01-good-entry.md")], subject="add", why="t")
    vault.close()
    # committed as the human edit, as written — with the line ends the vault's .gitattributes (*.md eol=lf) store
    stored = data.replace(b"\r\n", b"\n")
    assert hp.git_bytes(root, "show", f"HEAD:{rel}") == stored
    v = Vault(root, clock=lambda: hp.PINNED)
    try:
        e = v.resolve("crlf01")
        assert e.title == "no" and e.extra["version"] == "012"  # no YAML 1.1 coercion
        for h in recall(v, "CRLF lines"):
            assert h.entry.id == "crlf01"
    finally:
        v.close()
    _use_the_vault(root, cli)
    assert (root / rel).read_bytes() == data
    assert hp.git_bytes(root, "show", f"HEAD:{rel}") == stored
    assert hp.status_porcelain(root) == ""
    res = cli("memory", "--vault", str(root), "doctor", "--fix")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (root / rel).read_bytes() == data


def test_ids_and_paths_that_leave_the_vault_are_refused(vault, tmp_path):
    root = vault.root
    outside = _outside(tmp_path)
    before = _tree(outside)
    for bad in ("../x", "..", "a/b", "/abs", "x\x00y", "", "-lead", "a" * 65, "ok id"):
        with pytest.raises(EntryInvalid):
            validate_id(bad)
    for path in ("../outside/evil.md", "entries/../../outside/evil.md", str(outside / "evil.md"),
                 "entries/evil\x00.md", "entries/sub/../../../outside/evil.md"):
        with pytest.raises(AcpmemError) as exc:
            vault.write_entries([hp.make_entry("evil01", "Evil", "x").with_changes(path=path)], subject="a", why="t")
        assert exc.value.hint
    with pytest.raises(UsageError):
        vault.apply({"../outside/evil.md": "x"}, [], subject="a", why="t", kind="edit")
    with pytest.raises(UsageError):
        vault.apply({}, ["/etc/passwd"], subject="a", why="t", kind="forget")
    # a session id cannot steer where per-session state goes
    d = vault.session_dir("../../../outside/x")
    assert d.resolve().is_relative_to((root / ".acpmem" / "sessions").resolve())
    assert _tree(outside) == before
    assert hp.commit_count(root) == 1


def test_symlinks_leading_out_of_the_vault_are_never_followed(vault, tmp_path, cli):
    root = vault.root
    outside = _outside(tmp_path)
    (outside / "ent").mkdir()
    before = _tree(outside)
    vault.write_entries([GOOD.with_changes(path="entries/good01-good-entry.md")], subject="add", why="t")
    # an entry file that is a symlink to a file outside, and one to an entry-shaped file outside
    (outside / "ent" / "stolen.md").write_text(FM.format(id="stol01", extra=""))
    before = _tree(outside)
    os.symlink(outside / "target.md", root / "entries" / "link01.md")
    os.symlink(outside / "ent" / "stolen.md", root / "entries" / "stol01-stolen.md")
    vault.close()
    _use_the_vault(root, cli)
    v = Vault(root, clock=lambda: hp.PINNED)
    try:
        entries, problems = reader.list_entries(v)
        assert "stol01" not in {e.id for e in entries}
        assert {p.path for p in problems} >= {"entries/link01.md", "entries/stol01-stolen.md"}
        assert all("symlink" in p.reason for p in problems)
        with pytest.raises(UsageError):
            v.apply({"entries/link01.md": "x"}, [], subject="a", why="t", kind="edit")
    finally:
        v.close()
    head = hp.head_files(root)
    assert "entries/link01.md" not in head and "entries/stol01-stolen.md" not in head
    assert _tree(outside) == before


def test_a_symlinked_folder_inside_the_vault_does_not_carry_writes_outside(vault, tmp_path):
    """A cloned vault whose reads/ folder is a symlink out of the vault: acpmem's own bookkeeping must not write
    through it."""
    root = vault.root
    outside = _outside(tmp_path)
    before = _tree(outside)
    vault.write_entries([GOOD.with_changes(path="entries/good01-good-entry.md")], subject="add", why="t")
    for p in (root / "reads").iterdir():
        p.unlink()
    (root / "reads").rmdir()
    os.symlink(outside, root / "reads")
    hp.git_out(root, "add", "-A", "reads")
    hp.git_out(root, "commit", "-q", "-m", "reads is a symlink now")
    vault.close()
    v = Vault(root, clock=lambda: hp.PINNED)
    try:
        reader.show(v, "good01")  # a read, folded into the next commit's reads/<clone>.tsv
        with pytest.raises(AcpmemError, match="symlink"):
            v.write_entries([hp.make_entry("next01", "Next", "x")], subject="a", why="t")
    finally:
        v.close()
    assert _tree(outside) == before


def test_fifos_sockets_and_devices_in_the_vault_are_reported_never_opened(vault, tmp_path, cli):
    """A FIFO (or a socket) where an entry, a proposal or a reads file goes: every read, doctor, `doctor --fix`, the
    review queue and the hook answer (a FIFO opened for reading would wait for a writer forever) and name the file."""
    import socket
    import subprocess
    import sys

    root = vault.root
    vault.write_entries([GOOD.with_changes(path="entries/good01-good-entry.md")], subject="add", why="t")
    vault.close()
    (root / "proposals").mkdir(exist_ok=True)
    (root / "reviews").mkdir(exist_ok=True)
    for rel in ("entries/fifo01.md", "proposals/fifo02.md", "reads/fifo03.tsv", "reviews/fifo04.tsv"):
        os.mkfifo(root / rel)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "entries" / "sock01.md"))
    try:
        for args in (("list",), ("list", "--json"), ("list", "--format", "prompt"), ("recall", "sqlite wal"),
                     ("show", "good01"), ("review", "--json"), ("stats",), ("doctor",), ("doctor", "--fix"),
                     ("remember", "Named pipes are not entries", "--type", "fact", "--importance", "3")):
            # a hang would end in TimeoutExpired after cli's generous bound: a test of "never blocks", not of speed
            r = cli("memory", "--vault", str(root), *args)
            assert "Traceback" not in r.stderr and "internal error" not in r.stderr, (args, r.stderr)
            assert r.returncode in (0, 1), (args, r.stderr)
        r = cli("memory", "--vault", str(root), "list", "--json")
        assert r.returncode == 0 and "good01" in r.stdout
        assert "skipped entries/fifo01.md: is a FIFO (named pipe), not a regular file" in r.stderr, r.stderr
        assert "skipped entries/sock01.md: is a socket, not a regular file" in r.stderr, r.stderr
        r = cli("memory", "--vault", str(root), "doctor")
        assert r.returncode == 1 and "entries/fifo01.md: is a FIFO" in r.stdout and "rm " in r.stdout, r.stdout
        assert "proposals/fifo02.md" in r.stdout and "not a regular file" in r.stdout, r.stdout
        r = cli("memory", "--vault", str(root), "edit", "entries/fifo01.md", "--from", os.devnull)
        assert r.returncode == 1 and "FIFO" in r.stderr and "remove it" in r.stderr, r.stderr
        event = '{"session_id": "s-fifo", "hook_event_name": "SessionStart", "cwd": "%s"}' % root
        r = cli("memory", "hook", "claude-code", "--vault", str(root), input=event)
        assert r.returncode == 0 and "Good entry about sqlite wal" in r.stdout, r.stdout + r.stderr
        # nothing of it was committed or changed
        head = hp.head_files(root)
        assert not [p for p in head if "fifo0" in p or "sock0" in p]
        assert all(os.path.exists(root / rel) for rel in ("entries/fifo01.md", "proposals/fifo02.md"))
    finally:
        sock.close()


def test_text_from_an_endless_source_is_read_to_the_limit_and_refused(vault, tmp_path):
    """`remember < /dev/zero` and `edit --from /dev/zero` read at most one byte past what an entry file may hold,
    then refuse in one line; nothing is written."""
    import subprocess
    import sys

    root = vault.root
    vault.write_entries([GOOD.with_changes(path="entries/good01-good-entry.md")], subject="add", why="t")
    vault.close()
    acp = str(Path(sys.executable).parent / "acp")
    before = hp.git_out(root, "rev-parse", "HEAD")
    with open("/dev/zero", "rb") as zero:
        r = subprocess.run([acp, "memory", "--vault", str(root), "remember", "--type", "fact", "--importance", "3"],
                           stdin=zero, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and r.stderr.startswith("Error: the text on stdin is over 1,000,000 bytes"), r.stderr
    r = subprocess.run([acp, "memory", "--vault", str(root), "edit", "good01", "--from", "/dev/zero"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "/dev/zero holds more than 1,000,000 bytes" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert hp.git_out(root, "rev-parse", "HEAD") == before and hp.status_porcelain(root) == ""


def test_edit_from_a_file_it_cannot_read_is_one_line_saying_why(vault, tmp_path, cli):
    """`edit --from` a folder, a file that is not there or bytes that are not UTF-8: one line with the reason in
    words (it printed Python's exception, "[Errno 21] Is a directory: '…'"), exit 1, the entry unchanged."""
    vault.write_entries([hp.make_entry("good01", "Good entry", "- A body.")], subject="seed", why="test")
    root = vault.root
    before = hp.git_out(root, "rev-parse", "HEAD")
    text = (root / "entries" / "good01-good-entry.md").read_bytes()
    (tmp_path / "latin1.md").write_bytes(text + "- caf\xe9\n".encode("latin-1"))
    for name, said in (("", "Is a directory"), ("missing.md", "No such file or directory"),
                       ("latin1.md", f"not UTF-8 (byte {len(text) + 5})")):
        r = cli("memory", "--vault", str(root), "edit", "good01", "--from", str(tmp_path / name))
        want = f"Error: cannot read {tmp_path / name}: {said} — pass a UTF-8 file\n"
        assert r.returncode == 1 and r.stderr == want, r.stderr
    assert hp.git_out(root, "rev-parse", "HEAD") == before and hp.status_porcelain(root) == ""
    assert (root / "entries" / "good01-good-entry.md").read_bytes() == text


@pytest.mark.parametrize("in_the_way", ["a file as .acpmem", "a link to nothing as .acpmem",
                                        "a file as .acpmem/sessions"])
def test_a_file_where_acpmem_keeps_a_folder_is_one_line_naming_it(vault, cli, in_the_way):
    """``.acpmem/`` (or a folder in it) replaced by a file or a dangling link — a person's mistake, a bad merge —
    is one line naming the path and saying what to do, code ``in_the_way``, for reads and writes alike; it was an
    internal error (``FileExistsError``). Nothing is removed or written over: the file stays as it was."""
    root = vault.root
    vault.close()
    state = root / ".acpmem"
    shutil.rmtree(state)
    if in_the_way.endswith("/sessions"):
        state.mkdir()
        blocker = state / "sessions"
        blocker.write_text("mine\n")
    elif "link" in in_the_way:
        blocker = state
        blocker.symlink_to(root / "nowhere" / "x")
    else:
        blocker = state
        blocker.write_text("mine\n")
    runs = [("list", "--format", "prompt", "--session", "s1"), ("list", "--json"), ("recall", "deploys"),
            ("remember", "Deploys wait for the smoke tests", "--type", "fact"), ("doctor",)]
    for args in runs:
        r = cli("memory", "--vault", str(root), *args)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, (args, r.stderr)
        assert "internal error" not in r.stderr and str(state) in r.stderr and "move the file" in r.stderr, \
            (args, r.stderr)
        if "--format" not in args:
            said = r.stderr if "--json" in args else cli("memory", "--vault", str(root), *args, "--json").stderr
            assert json.loads(said)["error"]["code"] == "in_the_way", (args, said)
    if blocker.is_symlink():
        assert os.readlink(blocker) == str(root / "nowhere" / "x")
    else:
        assert blocker.read_text() == "mine\n"
    assert not (root / "nowhere").exists()
