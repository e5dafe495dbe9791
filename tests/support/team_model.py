"""A model of a team's vault for stateful testing: two clones and a bare remote on disk, driven through the real
command line (one process per command, forked from a server that imported acpmem once), with the invariants that
must hold after every step.

Used by ``tests/test_team_model.py`` (a bounded run in CI) and ``bench/team_model.py`` (a longer run). The rules are
what people and agents do to a shared vault: fork writes, human edits (valid, invalid, with conflict markers),
``edit``, ``forget``, supersede, ``sync`` from either side, conflicts and their resolution, ``doctor --fix``, a
write killed with SIGKILL at one of its steps, switching the write policy (``auto`` / ``review``), ``remember`` and
``review`` decisions.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from acpmem.write.requests import pending_dir

CHAT = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts" / "openai_chat.json"
MARKER = re.compile(r"^(<{7}|>{7})( |$)", re.M)
CLONES = ("a", "b")
ID_LINE = re.compile(r"(?m)^id: .*\n?")
TITLE_LINE = re.compile(r"(?m)^title: (.*)$")


class Ran:
    def __init__(self, args, p: subprocess.CompletedProcess) -> None:
        self.args, self.code, self.out, self.err = args, p.returncode, p.stdout, p.stderr


def _env(root: Path, env: dict | None = None) -> dict:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ACPMEM_", "OPENAI_"))}
    full.update(env or {}, ACPMEM_NO_WATCH="1")
    if root.name == "b":   # clone B belongs to a teammate whose git knows no identity (a fresh machine)
        full.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
        for k in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
            full.pop(k, None)
    return full


# Each command killed runs in a process of its own, forked from a server that imported acpmem once
# (``crashpoints.server``): a real process — its own environment, folder, exit code, killed by a real SIGKILL —
# without the ~0.3 s of interpreter start-up and imports a fresh ``acp`` pays. The commands never killed run one
# after another in that server's inline partner (``crashpoints.inline``), with the environment, folder and output a
# forked child would have, without the fork: ~340 commands a run of the model.
def _server():
    import crashpoints

    return crashpoints.server()


def run(root: Path, *args: str, env: dict | None = None, timeout: float = 120) -> Ran:
    """One command, then ``settle``: a step of the model is the command and what it started in the background."""
    import crashpoints

    r = crashpoints.inline(["memory", "--vault", str(root), *args], env=_env(root, env), cwd=Path.cwd())
    settle(root)
    return Ran(args, subprocess.CompletedProcess(args, r.code, r.out, r.err))


# The command line run with an audit hook that kills the process (SIGKILL, by itself) just before its ``n``-th step
# that changes something: a file opened for writing inside the team's folder, a rename, link, removal, mkdir or
# truncation, a database opened, a process started (git, a detached helper). The same state gives the same steps, so
# a kill point drawn by hypothesis replays exactly, where a delay in seconds lands wherever the machine's load puts it.
KILL_HOOK = r"""
import os, sys
_left = [int(sys.argv.pop(1))]
_inside = sys.argv.pop(1)
_W = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_STEPS = {"os.rename", "os.link", "os.symlink", "os.remove", "os.rmdir", "os.mkdir", "os.truncate",
          "sqlite3.connect", "subprocess.Popen", "os.posix_spawn"}
def _hook(event, args):
    if event == "open":
        path, mode, flags = args
        if not isinstance(path, (str, bytes)) or not os.fsdecode(path).startswith(_inside):
            return
        if not (any(c in mode for c in "wax+") if mode else flags & _W):
            return
    elif event not in _STEPS:
        return
    _left[0] -= 1
    if _left[0] < 0:
        os.kill(os.getpid(), 9)
sys.addaudithook(_hook)
"""
KILL_AT = KILL_HOOK + "from acpmem.cli.main import acp_main\nacp_main()\n"   # the same, as a fresh process


def run_killed(root: Path, inside: Path, point: int, *args: str) -> int:
    """``acp memory --vault ROOT ARGS`` killed just before its ``point``-th change (``KILL_AT``); its exit status
    (-9 when killed, else what the command returned)."""
    r = _server().run([str(point), str(inside), "memory", "--vault", str(root), *args], env=_env(root),
                      whole_env=True, crash=False, prelude=KILL_HOOK, cwd=Path.cwd())
    settle(root)
    return r.code


# What a vault runs detached (``acpmem.infra.detach``): the extraction worker, the embedding pass, the index watcher.
HELPERS = ("worker_main(", "embed_main(", "acpmem.search.watch import main")


def helpers(root: Path) -> list[int]:
    """The pids of the detached helper processes of the vault at ``root`` (Linux /proc)."""
    needle = repr(str(root)).encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmd and state != "Z" and any(h.encode() in cmd for h in HELPERS):
            out.append(int(d))
    return out


def settle(root: Path, timeout: float = 120.0) -> None:
    """Wait until the helpers a command left running in the background (a ``commit --wait`` hands the requests a
    killed write left pending to a detached worker) are done: the invariants compare states, not moments of a race.
    A worker asleep until a scheduled retry (minutes) holds the retry lock and not the worker lock; it is stopped,
    as a reboot would: its request stays pending for the next worker."""
    from acpmem.infra import locks

    from acpmem.write import worker

    from helpers_proc import flock_held

    state = root / ".acpmem"
    deadline = time.monotonic() + timeout
    # Until no helper runs *and* nobody holds the worker lock: a worker that finds another request due when it is
    # done starts the next one, handing it the lock, and exits — one look at /proc can list no new worker yet and
    # find the old one a zombie already (seen under load: the live index then lacked what the next worker wrote).
    # The lock is held from before the next worker starts until it ends, so it is looked at after the processes.
    while (pids := helpers(root)) or flock_held(worker.lock_path(state)):
        waiter = locks.holder(worker.retry_lock_path(state))
        if waiter in pids and locks.holder(worker.lock_path(state)) is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(waiter, signal.SIGKILL)
        assert time.monotonic() < deadline, (root, "helpers still running", pids)
        time.sleep(0.02)


def git(root: Path, *args: str, check: bool = False) -> str:
    p = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=check)
    return p.stdout


def head_blobs(root: Path, rels: list[str]) -> list[bytes]:
    """The bytes of each path in HEAD, as ``git show HEAD:PATH`` gives them, from one ``git cat-file --batch``."""
    p = subprocess.run(["git", "-C", str(root), "cat-file", "--batch"], capture_output=True, check=True,
                       input="".join(f"HEAD:{rel}\n" for rel in rels).encode())
    out, at = [], 0
    for rel in rels:
        header_end = p.stdout.index(b"\n", at)
        header = p.stdout[at:header_end].split()
        assert len(header) == 3 and header[1] == b"blob", (root, rel, header)
        size = int(header[2])
        out.append(p.stdout[header_end + 1:header_end + 1 + size])
        at = header_end + 1 + size + 1
    return out


def assert_well_formed(r: Ran) -> None:
    """Success, or exactly one ``Error:`` line with exit 1 or 2 — never a traceback, never an internal error."""
    assert "Traceback" not in r.err and "internal error" not in r.err, (r.args, r.err)
    if r.code != 0:
        errors = [line for line in r.err.splitlines() if line.startswith("Error: ")]
        assert r.code in (1, 2) and len(errors) == 1, (r.args, r.code, r.err)


class TeamVault(RuleBasedStateMachine):
    """Two clones of one vault and their bare remote; ``acked`` holds every write a command acknowledged."""

    base: Path   # set by the test before running the machine (a tmp folder)

    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.acked: dict[str, set[str]] = {c: set() for c in CLONES}   # markers each clone acknowledged
        self.remembered: dict[str, set[str]] = {c: set() for c in CLONES}   # markers `remember` acknowledged
        self.merging: set[str] = set()

    # ------------------------------------------------------------------------------------------- set-up
    @initialize()
    def make_team(self) -> None:
        self.dir = Path(self.base) / f"team-{os.getpid()}-{time.monotonic_ns()}"
        self.dir.mkdir(parents=True)
        self.remote = self.dir / "remote.git"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.remote)], check=True)
        a = self.dir / "a"
        r = _server().run(["memory", "init", "--example", str(a)], env=dict(os.environ), whole_env=True, crash=False,
                          cwd=Path.cwd())
        assert r.code == 0, r.err
        toml = a / "acpmem.toml"
        toml.write_text(toml.read_text().replace('extractor = "auto"', 'extractor = "offline"'))
        git(a, "remote", "add", "origin", str(self.remote), check=True)
        assert run(a, "sync").code == 0
        # B is what docs/team.md tells a teammate to do: a plain `git clone`
        subprocess.run(["git", "clone", "-q", str(self.remote), str(self.dir / "b")], check=True)
        self.roots = {"a": a, "b": self.dir / "b"}

    def marker(self) -> str:
        self.n += 1
        return f"marker{self.n:04d}z"

    def entries(self, clone: str) -> list[Path]:
        """The entry files in an order that replays: ids (and so file names) are random in every run, so a ``pick``
        indexes them by their text without the id line (the title first), the name only breaking ties."""
        def key(p: Path) -> tuple[str, str, str]:
            text = ID_LINE.sub("", p.read_text("utf-8", errors="replace"))
            title = TITLE_LINE.search(text)
            return (title.group(1) if title else "", text, p.name)
        return sorted((self.roots[clone] / "entries").glob("*.md"), key=key)

    def cmd(self, clone: str, *args: str) -> Ran:
        r = run(self.roots[clone], *args)
        assert_well_formed(r)
        if r.code == 1 and "sync is unfinished" in r.err or "merge is left in progress" in r.err:
            self.merging.add(clone)
        return r

    # ------------------------------------------------------------------------------------------- rules
    clone = st.sampled_from(CLONES)

    @rule(c=clone)
    def fork_write(self, c: str) -> None:
        m = self.marker()
        r = self.cmd(c, "commit", "--type", "fact", "--note", f"note {m} about the queue", "--importance", "5",
                     "--session", "s", "--seq", "6", "--transcript", str(CHAT), "--wait")
        if "Noted (" in r.out:   # acknowledged: written now (exit 0), or kept pending for a retry (exit 1)
            self.acked[c].add(m)

    @rule(c=clone, pick=st.integers(0, 50), valid=st.sampled_from(["valid", "invalid", "markers"]))
    def human_edit(self, c: str, pick: int, valid: str) -> None:
        files = self.entries(c)
        if not files:
            return
        p = files[pick % len(files)]
        text = p.read_text("utf-8", errors="replace")
        if valid == "valid":
            p.write_text(text.rstrip("\n") + f"\n- edited by hand {self.marker()}\n")
        elif valid == "invalid":
            p.write_text(text.replace("importance:", "importance: lots #", 1) if "importance:" in text else "x\n")
        else:
            p.write_text(text + "<<<<<<< HEAD\n- mine\n=======\n- theirs\n>>>>>>> origin/main\n")

    @rule(c=clone, pick=st.integers(0, 50))
    def cli_edit(self, c: str, pick: int) -> None:
        ok = self.listed(c)
        if not ok:
            return
        ident, rel = ok[pick % len(ok)]
        text = (self.roots[c] / rel).read_text("utf-8")
        new = self.dir / f"edit-{self.n}.md"
        new.write_text(text.rstrip("\n") + f"\n- corrected {self.marker()}\n")
        self.cmd(c, "edit", ident, "--from", str(new))

    @rule(c=clone, pick=st.integers(0, 50))
    def forget(self, c: str, pick: int) -> None:
        ok = self.listed(c)
        if ok:
            self.cmd(c, "forget", ok[pick % len(ok)][0], "--reason", "model test")

    @rule(c=clone)
    def sync(self, c: str) -> None:
        r = self.cmd(c, "sync")
        if r.code == 0:
            self.merging.discard(c)
        elif "conflict" in r.err or "merge" in r.err:
            self.merging.add(c)

    @precondition(lambda self: bool(self.merging))
    @rule(data=st.data(), how=st.sampled_from(["ours", "theirs", "abort", "add-unresolved"]))
    def resolve(self, data, how: str) -> None:
        c = data.draw(st.sampled_from(sorted(self.merging)))
        root = self.roots[c]
        if how == "abort":
            git(root, "merge", "--abort")
            self.merging.discard(c)
            return
        unmerged = [line[3:] for line in git(root, "status", "--porcelain").splitlines() if line[:2] in ("UU", "AA")]
        for rel in unmerged:
            p = root / rel
            text = p.read_text("utf-8", errors="replace")
            if how == "add-unresolved":
                git(root, "add", "--", rel)        # a person stages a file that still has its markers
                continue
            keep = 1 if how == "ours" else 2
            text = re.sub(r"^<{7}[^\n]*\n(.*?)^={7}\n(.*?)^>{7}[^\n]*\n", lambda m: m.group(keep), text,
                          flags=re.S | re.M)
            p.write_text(text)
        r = self.cmd(c, "sync")
        if r.code == 0:
            self.merging.discard(c)

    @rule(c=clone)
    def doctor_fix(self, c: str) -> None:
        self.cmd(c, "doctor", "--fix")

    @rule(c=clone, point=st.integers(0, 64))
    def killed_write(self, c: str, point: int) -> None:
        """A write killed with SIGKILL at one of its steps (``KILL_AT``): never acknowledged, and it must not wedge
        the vault. Past its last step the write simply finishes (acknowledged to nobody)."""
        run_killed(self.roots[c], self.dir, point, "commit", "--type", "fact", "--note", f"killed {self.marker()}",
                   "--importance", "3", "--session", "s", "--seq", "6", "--transcript", str(CHAT), "--wait")

    @rule(c=clone, policy=st.sampled_from(["auto", "review"]))
    def set_policy(self, c: str, policy: str) -> None:
        """A person switches the write policy by hand (committed as a human edit with the next write)."""
        toml = self.roots[c] / "acpmem.toml"
        text = toml.read_text("utf-8", errors="replace")
        toml.write_text(re.sub(r'(?m)^policy = "[a-z]+"', f'policy = "{policy}"', text))

    @rule(c=clone)
    def remember(self, c: str) -> None:
        m = self.marker()
        r = self.cmd(c, "remember", f"Remembered {m} by hand.", "--type", "fact", "--importance", "4")
        if r.code == 0:
            self.remembered[c].add(m)

    @rule(c=clone, pick=st.integers(0, 50), decision=st.sampled_from(["accept", "reject"]))
    def review(self, c: str, pick: int, decision: str) -> None:
        r = self.cmd(c, "review", "--json")
        if r.code != 0:
            return
        items = sorted(json.loads(r.out)["items"], key=lambda i: (str(i.get("title")), str(i.get("body")), i["id"]))
        if not items:
            return
        item = items[pick % len(items)]
        args = ["review", decision, item["id"]] + (["--reason", "model test"] if decision == "reject" else [])
        r = self.cmd(c, *args)
        if r.code == 0:
            after = json.loads(self.cmd(c, "review", "--json").out)["items"]
            assert item["id"] not in {i["id"] for i in after}, (c, item["id"], decision)
            listed = {e[0] for e in self.listed(c)}
            assert (item["id"] in listed) == (decision == "accept"), (c, item, decision)

    @rule(c=clone)
    def read(self, c: str) -> None:
        for args in (("list", "--json"), ("recall", "queue worker"), ("list", "--format", "prompt")):
            self.cmd(c, *args)

    # ------------------------------------------------------------------------------------------- helpers
    def listed(self, c: str) -> list[tuple[str, str]]:
        r = run(self.roots[c], "list", "--json")
        if r.code != 0:
            return []
        # by title, not by id or path (random in every run): a ``pick`` replays
        return [(e["id"], e["path"]) for e in sorted(json.loads(r.out)["entries"],
                                                     key=lambda e: (e["title"], e["body"], e["path"]))]

    # ------------------------------------------------------------------------------------------- invariants
    @invariant()
    def acknowledged_writes_are_in_head_or_pending_exactly_once(self) -> None:
        """Every acknowledged write was committed (into the history HEAD holds: later a person may forget or edit
        it) or is still pending — never both, never neither — and no entry file holds it twice."""
        if not hasattr(self, "roots"):
            return
        for c, markers in self.acked.items():
            root = self.roots[c]
            if not markers:
                continue
            history = git(root, "log", "-p", "--format=", "HEAD", "--", "entries/", "proposals/")
            pending = " ".join(p.read_text("utf-8", errors="replace")
                               for p in pending_dir(root / ".acpmem").glob("r-*.json"))
            for m in markers:
                committed = f"+title: note {m}" in history or f"+title: 'note {m}" in history
                assert committed != (m in pending), (c, m, committed, m in pending)
                in_head = git(root, "grep", "-l", "-F", "-e", f"title: note {m}", "HEAD", "--", "entries/",
                              "proposals/")
                assert len(in_head.splitlines()) <= 1, (c, m, in_head)

    @invariant()
    def remembered_text_is_committed_verbatim(self) -> None:
        if not hasattr(self, "roots"):
            return
        for c, markers in self.remembered.items():
            if not markers:
                continue
            history = git(self.roots[c], "log", "-p", "--format=", "HEAD", "--", "entries/")
            for m in markers:
                assert f"+Remembered {m} by hand." in history, (c, m)

    @invariant()
    def proposals_are_never_read_and_decisions_parse(self) -> None:
        """No reader sees a proposal: the catalog holds entries/ only and a listing never names a proposal's id;
        every clone's review file is lines of three fields."""
        if not hasattr(self, "roots"):
            return
        for c, root in self.roots.items():
            proposed = {p.name.split("-")[0].split(".")[0] for p in (root / "proposals").glob("*.md")}
            if proposed and c not in self.merging:
                listed = {e[0] for e in self.listed(c)}
                assert not proposed & listed, (c, proposed & listed)
            db = root / ".acpmem" / "index.sqlite"
            if db.exists():
                con = sqlite3.connect(str(db))
                try:
                    paths = [r[0] for r in con.execute("SELECT path FROM files")]
                except sqlite3.Error:
                    paths = []
                finally:
                    con.close()
                assert not [p for p in paths if not p.startswith("entries/")], (c, paths)
            for f in (root / "reviews").glob("*.tsv"):
                for line in f.read_text("utf-8", errors="replace").splitlines():
                    if line and not MARKER.match(line) and not line.startswith(("=======",)):
                        assert len(line.split("\t")) == 3, (c, f.name, line)

    @invariant()
    def nothing_invalid_is_committed_pushed_or_indexed(self) -> None:
        if not hasattr(self, "roots"):
            return
        from acpmem.core.entryfile import parse_entry_bytes
        from acpmem.core.errors import EntryInvalid

        for where in (*self.roots.values(), self.remote):
            if not git(where, "rev-parse", "--verify", "-q", "HEAD").strip():
                continue
            rels = [rel for rel in git(where, "ls-tree", "-r", "--name-only", "HEAD", "--", "entries/").split()
                    if rel.endswith(".md")]     # not entries/.gitkeep
            for rel, data in zip(rels, head_blobs(where, rels)):
                text = data.decode("utf-8", errors="replace")
                assert not MARKER.search(text), (where, rel, "conflict markers committed")
                try:
                    parse_entry_bytes(data, rel, None)
                except EntryInvalid as exc:
                    raise AssertionError(f"{where}: invalid entry committed: {exc}") from None
        for c, root in self.roots.items():
            db = root / ".acpmem" / "index.sqlite"
            if not db.exists():
                continue
            con = sqlite3.connect(str(db))
            try:
                rows = con.execute("SELECT path, data FROM files WHERE ok = 1").fetchall()
            except sqlite3.Error:
                rows = []
            finally:
                con.close()
            for path, data in rows:
                assert not MARKER.search(json.loads(data).get("body", "")), (c, path, "conflict markers indexed")

    @invariant()
    def git_is_sound(self) -> None:
        if not hasattr(self, "roots"):
            return
        for where in (*self.roots.values(), self.remote):
            p = subprocess.run(["git", "-C", str(where), "fsck", "--no-dangling", "--no-progress"],
                               capture_output=True, text=True)
            assert p.returncode == 0, (where, p.stderr)

    @invariant()
    def the_index_equals_a_rebuild(self) -> None:
        if not hasattr(self, "roots"):
            return
        for c in CLONES:
            root = self.roots[c]
            if c in self.merging:
                continue
            before = run(root, "list", "--json")
            assert_well_formed(before)
            if before.code != 0:
                continue
            state = root / ".acpmem"
            for suffix in ("", "-wal", "-shm"):
                (state / f"index.sqlite{suffix}").unlink(missing_ok=True)
            after = run(root, "list", "--json")
            assert after.code == before.code, (c, before.err, after.err)
            assert json.loads(after.out) == json.loads(before.out), (c, json_diff(json.loads(before.out),
                                                                                   json.loads(after.out)))


def json_diff(before, after) -> str:
    """What differs between two `list --json` outputs: the records only one side has, then the fields that differ."""
    def records(doc):
        rows = doc.get("entries", doc) if isinstance(doc, dict) else doc
        return {r.get("id"): r for r in rows} if isinstance(rows, list) else {"*": rows}
    b, a = records(before), records(after)
    out = [f"only in the live index: {sorted(set(b) - set(a))}", f"only after a rebuild: {sorted(set(a) - set(b))}"]
    for k in sorted(set(a) & set(b)):
        if a[k] != b[k]:
            out.append(f"{k}: " + ", ".join(f"{f}: {b[k].get(f)!r} -> {a[k].get(f)!r}"
                                            for f in sorted(set(a[k]) | set(b[k])) if a[k].get(f) != b[k].get(f)))
    if isinstance(before, dict):
        out += [f"{f}: {before.get(f)!r} -> {after.get(f)!r}" for f in sorted(set(before) | set(after))
                if f != "entries" and before.get(f) != after.get(f)]
    return "\n".join(out)[:3000]
