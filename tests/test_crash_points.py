"""Every write operation killed at each distinct one of its mutation steps (``tests/support/crashpoints.py``), then the
follow-ups a person or an agent would run, then the invariants:

* the operation happened exactly once or not at all (a fork request: exactly once, once extracted again);
* no person's edit is lost or reverted — one committed with plain git before the operation, one made by hand and not
  committed yet;
* no wedge: the next write and ``doctor --fix`` succeed, and ``doctor`` is clean afterwards;
* ``list --json`` (both layers) equals what a rebuild of the index lists;
* ``git fsck --strict`` is clean in the project vault, the user vault and the team's remote.

The operations: ``commit --wait`` and the background worker, ``remember``, ``edit``, ``forget``, ``review accept`` and
``reject``, ``consolidate``, ``sync``, ``doctor --fix``, and a fork write to both layers (user vault + project vault).
One uncrashed run of each counts its steps N; then for each kill point k a fresh copy of the same vault runs it
killed with SIGKILL just before step k. The steps are counted, not timed, so every run replays exactly. The kill
points are the first step of each distinct (kind of step, file, call site): a step repeated at the same place in the
code on the same file leaves the same kind of state behind (``crashpoints.distinct_points``; with
``ACPMEM_CRASH_EVERY_STEP=1`` every step is one). An fsync is a step and a kill point like any other: a kill just
before it leaves the data written and not yet forced to disk, which a kill before the next step does not. The
follow-ups: the next write (``remember``) and ``doctor --fix`` (in that order after an odd k, the other way round
after an even k, so both finish what a crash left; ``doctor --fix`` exits 0 only when the vault is clean
afterwards), with ``extract --pending`` after a fork operation and ``sync`` after a ``sync`` between them.

The commands killed (and the uncrashed run that counts the steps) run in children forked from one process that
imported acpmem once (``crashpoints.Zygote``): each is a real process killed by a real SIGKILL, without an interpreter
start-up per run. The follow-ups and the listings, never killed, run one after another inside a second such process
(``Zygote(inline=True)``), which never ran the killed command: each with its own environment, folder and output, as
a fresh process after the crash would.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import sys

import pytest

import crashpoints as cp
from helpers_proc import copy_tree, flock_held, fsck, git_out, head_texts, make_entry
from openai_server import fake_openai, reply
from acpmem.write.requests import pending_dir
from helpers_person import set_person

ACP = Path(sys.executable).parent / "acp"
CHAT = Path(__file__).parent / "fixtures" / "transcripts" / "openai_chat.json"
PERSON_COMMITTED = "- A line a person committed with plain git.\n"
PERSON_UNCOMMITTED = "- A line a person typed and has not committed.\n"
EDIT_LINE = "- A line added by acp memory edit.\n"
PERSON_AFTER = "- A line a person typed after the crash.\n"
FORK_OPS = ("commit-wait", "worker", "two-layer")
# Every operation finds a person's uncommitted edit already there when it starts (it commits it first, as a human
# edit, and those steps are killed too); right after the crash the person types one more line, before the
# follow-ups — the moment a left-over journal would overwrite it.
TOTALS: dict[str, tuple[int, int, float]] = {}


def _fork_args(note: str, typ: str, extractor: str) -> list[str]:
    return ["commit", "--wait", "--extractor", extractor, "--type", typ, "--note", note, "--importance", "4",
            "--session", "s-crash", "--seq", "6", "--transcript", str(CHAT)]


# name: (argv after `memory --vault VAULT`, or None for the worker; run as the worker)
OPS = {
    "commit-wait": _fork_args("Crash note for commit wait", "fact", "offline"),
    "worker": None,
    "remember": ["remember", "Crash marker remembered verbatim.", "--type", "fact", "--importance", "3"],
    "edit": ["edit", "base01", "--from", "{edit}", "-m", "crash edit"],
    "forget": ["forget", "base01", "--reason", "crash forget"],
    "review-accept": ["review", "accept", "prop01"],
    "review-reject": ["review", "reject", "prop02", "--reason", "crash reject"],
    "consolidate": ["consolidate"],
    "sync": ["sync"],
    "doctor-fix": ["doctor", "--fix"],
    "two-layer": _fork_args("Crash note for both layers", "lesson", "llm"),
    "import": ["import", str(Path(__file__).parent / "fixtures" / "import" / "codex" / "AGENTS.md")],
}


# --------------------------------------------------------------------------------------------- the template

@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The model server, the forking server and a template: a project vault with entries, proposals, a cluster to
    consolidate, a person's committed edit and uncommitted edit, a team remote with a commit to merge and a user
    vault."""
    base = _scratch(tmp_path_factory)
    home = base / "home"
    home.mkdir()
    gitconfig = home / ".gitconfig"
    gitconfig.write_text("[user]\n\tname = Test User\n\temail = test@example.invalid\n[init]\n\tdefaultBranch = main\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACPMEM_", "OPENAI_"))}
    env.update(HOME=str(home), GIT_CONFIG_GLOBAL=str(gitconfig), GIT_CONFIG_NOSYSTEM="1", ACPMEM_NO_WATCH="1",
               LC_ALL="C.UTF-8")
    with fake_openai() as srv:
        srv.enqueue(reply.always(reply.writes(
            # no layer first (the project's, by default for these types): consolidate takes the first call only,
            # and its tool has no layer
            reply.call("memory_write", {"content": "- acme deploys with make ship."}),
            reply.call("memory_write", {"content": "- The person reviews diffs before pushing.", "layer": "user"}))))
        scratch = base / "scratch"
        scratch.mkdir()
        zygotes, inline = [], []
        for i in range(2):
            (scratch / str(i)).mkdir()
            zygotes.append(cp.Zygote(env, scratch / str(i)))
            (scratch / f"inline{i}").mkdir()
            inline.append(cp.Zygote(env, scratch / f"inline{i}", inline=True))
        template = base / "template"
        _build(template, env, srv.base_url)
        yield {"env": env, "zygote": zygotes[0], "zygotes": zygotes, "inline": inline, "template": template,
               "base": base}
        for z in zygotes + inline:
            z.close()
    for scratch in _SCRATCH:
        shutil.rmtree(scratch, ignore_errors=True)
    if TOTALS:
        steps = sum(n for n, _, _ in TOTALS.values())
        points = sum(k for _, k, _ in TOTALS.values())
        wall = sum(t for _, _, t in TOTALS.values())
        print(f"\ncrash points: {len(TOTALS)} operations, {steps} steps, {points} kill points, {wall:.0f} s: "
              + ", ".join(f"{op} {n}/{k}" for op, (n, k, _) in TOTALS.items()))


def _git(root: Path, env: dict, *args: str) -> str:
    p = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, (args, p.stderr)
    return p.stdout


def _acp(env: dict, *args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([str(ACP), "memory", *map(str, args)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p


def _build(t: Path, env: dict, model_url: str) -> None:
    from test_consolidate import DUPLICATES

    t.mkdir()
    vault, user, remote = t / "vault", t / "user", t / "remote.git"
    env = dict(env, ACPMEM_USER_VAULT=str(user))
    _acp(env, "init", vault)
    _acp(env, "init", "--user")
    _acp(env, "--vault", vault, "remember", "The person prefers short answers first.", "--user", "--type",
         "user-preference", "--importance", "6")
    toml = vault / "acpmem.toml"
    text = toml.read_text()
    # the endpoint and model are the person's (their own config, under this world's HOME), the budgets the vault's
    set_person("extraction", {"base_url": model_url, "model": "test-model"},
               Path(env["HOME"]) / ".config" / "acpmem" / "config.toml")
    for key, val in (("timeout_seconds", 10.0), ("max_retries", 0)):
        line = next(ln for ln in text.splitlines() if ln.startswith(f"{key} = "))
        text = text.replace(line, f"{key} = {json.dumps(val)}")
    toml.write_text(text)
    entries = [("base01", "Releases are tagged from main", "- A release is a signed tag on main."),
               ("base02", "Deploys run from release branches", "- Deploys run from release branches."),
               ("base03", "The CI runs on GitHub Actions", "- Workflows live in .github/workflows.")]
    entries += [(f"dup00{i}", title, body) for i, (title, body) in enumerate(DUPLICATES[2])]
    for ident, title, body in entries:
        e = make_entry(ident, title, body)
        _write_entry(vault / "entries" / f"{ident}.md", e)
    for ident, title in (("prop01", "Proposal to accept"), ("prop02", "Proposal to reject")):
        e = make_entry(ident, title, f"- {title}.").with_changes(source={"request": f"r-{ident}x", "extractor": "x"})
        _write_entry(vault / "proposals" / f"{ident}.md", e)
    _git(vault, env, "add", "-A")
    _git(vault, env, "commit", "-qm", "the template's entries")
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True, env=env)
    _git(vault, env, "remote", "add", "origin", "../remote.git")
    _git(vault, env, "push", "-q", "origin", "main")
    other = t / "teammate"
    _git(t, env, "clone", "-q", str(remote), str(other))
    _write_entry(other / "entries" / "team01.md", make_entry("team01", "A teammate's entry", "- From the team."))
    _git(other, env, "add", "-A")
    _git(other, env, "commit", "-qm", "a teammate's entry")
    _git(other, env, "push", "-q", "origin", "main")
    shutil.rmtree(other)
    p2 = vault / "entries" / "base02.md"
    p2.write_text(p2.read_text() + PERSON_COMMITTED)
    _git(vault, env, "commit", "-qam", "a person's own commit")
    (t / "edit.md").write_text((vault / "entries" / "base01.md").read_text() + EDIT_LINE)
    _acp(env, "--vault", vault, "list")   # the index and the settings cache, as a vault in use has them
    for repo in (vault, user, remote):   # objects in one pack, as git's auto gc leaves a repository in use: a copy
        _git(repo, env, "repack", "-a", "-d", "-q")   # per kill point is 161 files, not 274, to copy and remove


def _write_entry(path: Path, e) -> None:
    from acpmem.core.entryfile import new_entry_text

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new_entry_text(e))


def _prepare(world, op: str, where: Path) -> Path:
    """The operation's own template: the common one, plus what only this operation needs (a pending request for
    the worker; an interrupted change and a hand edit for doctor --fix to finish)."""
    copy_tree(world["template"], where)
    env = _env(world, where)
    if op == "worker":   # a request `commit` acknowledged, waiting for the worker
        _queue_request(where / "vault", "r-crashwkr0")
    if op == "doctor-fix":
        r = world["zygote"].run(["memory", "--vault", where / "vault", "remember", "Half-written before the crash.",
                                 "--type", "fact", "--importance", "3"], env=env, inside=[where],
                                after=f"rename {where}/vault/entries/")
        assert r.killed, r.err
    _hand_edit(where)
    return where


def _hand_edit(where: Path, line: str = PERSON_UNCOMMITTED) -> None:
    p3 = where / "vault" / "entries" / "base03.md"
    p3.write_text(p3.read_text() + line)


def _scratch(tmp_path_factory) -> Path:
    """Where the copies go: a RAM file system (``/dev/shm``) where there is one — a copy is made and removed at every
    kill point, and on a disk mounted with ``discard`` removing one costs more than the commands run in it; the
    steps and what a kill leaves are the same there. Else pytest's temporary folder."""
    import tempfile

    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        base = Path(tempfile.mkdtemp(prefix="acpmem-crash-", dir=shm))
        _SCRATCH.append(base)
        return base
    return tmp_path_factory.mktemp("crash")


_SCRATCH: list[Path] = []


def _queue_request(root: Path, rid: str) -> None:
    from acpmem.write import requests

    req = requests.make_request(types=("fact",), type="fact", note="Crash note for the worker", importance=4,
                                session="s-crash", seq=6, transcript=str(CHAT), host_tools=None, lang="en",
                                created="2026-11-29T12:00:00Z", request_id=rid)
    requests.save_request(root / ".acpmem", req, new=True)


def _env(world, where: Path) -> dict:
    return {"ACPMEM_USER_VAULT": str(where / "user")}


def _argv(op: str, where: Path) -> list[str]:
    return ["memory", "--vault", str(where / "vault"), *[a.replace("{edit}", str(where / "edit.md"))
                                                          for a in OPS[op]]]


def _run_op(world, op: str, where: Path, zygote: cp.Zygote | None = None, **kw) -> cp.Run:
    z = zygote or world["zygote"]
    if op == "worker":
        return z.run([str(where / "vault")], what="worker", env=_env(world, where),
                                   inside=[where], **kw)
    return z.run(_argv(op, where), env=_env(world, where), inside=[where], **kw)


def _settle(root: Path) -> None:
    """Wait for the detached worker a command may have started (a state is compared, not a moment of a race): until
    none runs and nobody holds the worker lock (a worker done with its requests starts the next one, handing it the
    lock, before it exits: ``team_model.settle``)."""
    from acpmem.write.worker import lock_path

    deadline = time.monotonic() + 120
    while cp.helpers_of(root) or flock_held(lock_path(root / ".acpmem")):
        assert time.monotonic() < deadline, "a detached worker did not finish"
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------- the invariants

def _listed(world, where: Path, z: cp.Zygote) -> dict:
    r = z.run(["memory", "--vault", where / "vault", "list", "--json", "--all"], env=_env(world, where),
                            crash=False)
    assert r.code == 0, r.err
    return json.loads(r.out)


def _follow_ups(world, op: str, where: Path, k: int, z: cp.Zygote) -> list[str]:
    env, vault = _env(world, where), where / "vault"
    said = []

    def step(*args: str) -> None:
        r = z.run(["memory", "--vault", vault, *args], env=env, crash=False)
        said.append(f"$ {' '.join(args)} -> {r.code}\n{r.out[-800:]}{r.err[-800:]}")
        assert r.code == 0 and "internal error" not in r.err and "Traceback" not in r.err, (op, k, said)
        _settle(vault)

    nxt = ("remember", f"The next write after crash {k}.", "--type", "fact", "--importance", "2")
    order = [nxt, ("doctor", "--fix")] if k % 2 else [("doctor", "--fix"), nxt]
    if op in FORK_OPS:
        order.insert(1, ("extract", "--pending"))
    if op == "sync":
        # a sync killed in its merge leaves the merge open: writes refuse, naming `sync` as the next step (by
        # design, as for a merge a person left), so `sync` comes first; and last, so the remote holds everything
        order = [("sync",), *order, ("sync",)]
    for args in order:
        if args == ("extract", "--pending") and not list(pending_dir(vault / ".acpmem").glob("r-*.json")):
            continue   # nothing left pending: it would do nothing
        step(*args)
    return said


def _check(world, op: str, where: Path, k: int, killed: cp.Run, zygote: cp.Zygote | None = None) -> None:
    # the follow-ups are neither killed nor counted: each zygote's inline partner runs them, one after another
    z = world["inline"][world["zygotes"].index(zygote or world["zygote"])]
    vault, user, remote = where / "vault", where / "user", where / "remote.git"
    said = _follow_ups(world, op, where, k, z)
    ctx = (op, k, killed.steps_seen if hasattr(killed, "steps_seen") else None, said)
    live = _listed(world, where, z)
    for root in (vault, user):
        for suffix in ("", "-wal", "-shm"):
            (root / ".acpmem" / f"index.sqlite{suffix}").unlink(missing_ok=True)
    rebuilt = _listed(world, where, z)
    assert live == rebuilt, ctx
    entries = live["entries"]
    assert live["problems"] == [], ctx
    # the remote changes only by a sync (the follow-ups of the other operations never push)
    for root in (vault, user, remote) if op == "sync" else (vault, user):
        r = fsck(root)
        assert r.returncode == 0, (ctx, root, r.stdout + r.stderr)
    for root in (vault, user):
        assert git_out(root, "status", "--porcelain=v1", "--untracked-files=all") == "", (ctx, root)
        assert not (root / ".git" / "acpmem" / "journal.json").exists(), ctx
    # a person's edits: the committed one, the one not committed when the operation started and the one typed
    # after the crash, each on disk once and in HEAD
    head = head_texts(vault, "entries/base02.md", "entries/base03.md")
    for ident, line in (("base02", PERSON_COMMITTED), ("base03", PERSON_UNCOMMITTED), ("base03", PERSON_AFTER)):
        text = (vault / "entries" / f"{ident}.md").read_text()
        assert text.count(line) == 1 and head[f"entries/{ident}.md"] == text, (ctx, ident)
    # the next write is there, once
    assert sum(f"after crash {k}." in e["body"] for e in entries) == 1, ctx
    _exactly_once(op, entries, vault, user, remote, ctx)


def _request_trailers(root: Path) -> list[str]:
    return git_out(root, "log", "--format=%(trailers:key=Acpmem-Request,valueonly)").split()


def _exactly_once(op: str, entries: list[dict], vault: Path, user: Path, remote: Path, ctx) -> None:
    by_id = {e["id"]: e for e in entries}
    bodies = [e["body"] for e in entries]
    if op in FORK_OPS:
        reqs = {e["source"]["request"] for e in entries if (e.get("source") or {}).get("request", "").startswith("r-")
                and e["source"].get("extractor") != "x"}
        assert len(reqs) <= 1, (ctx, reqs)
        for rid in reqs:
            mine = [e for e in entries if (e.get("source") or {}).get("request") == rid]
            per_layer = {layer: [e for e in mine if e["layer"] == layer] for layer in ("project", "user")}
            assert _request_trailers(vault).count(rid) == (1 if per_layer["project"] else 0), (ctx, rid)
            assert _request_trailers(user).count(rid) == (1 if per_layer["user"] else 0), (ctx, rid)
            # the offline extractor writes one entry; the model's answer one per layer (a request extracted again
            # by `extract --pending` uses the vault's extractor, the model here)
            assert len(per_layer["project"]) <= 1 and len(per_layer["user"]) <= 1 and mine, (ctx, rid, mine)
            if op == "two-layer":
                assert len(per_layer["project"]) == 1 and len(per_layer["user"]) == 1, (ctx, rid, mine)
        assert not list(pending_dir(vault / ".acpmem").glob("r-*.json")), ctx   # extracted by the follow-up
        if op == "worker":
            assert "r-crashwkr0" in reqs, ctx
    elif op == "remember":
        assert sum("Crash marker remembered verbatim." in b for b in bodies) <= 1, ctx
    elif op == "edit":
        assert (vault / "entries" / "base01.md").read_text().count(EDIT_LINE) <= 1, ctx
        assert git_out(vault, "log", "--format=%s").count("edit #base01") <= 1, ctx
    elif op == "forget":
        gone = "base01" not in by_id
        assert (vault / "entries" / "base01.md").exists() != gone, ctx
        assert git_out(vault, "log", "--format=%(trailers:key=Acpmem-Kind,valueonly)").split().count("forget") == \
            (1 if gone else 0), ctx
    elif op in ("review-accept", "review-reject"):
        ident = "prop01" if op == "review-accept" else "prop02"
        waiting = (vault / "proposals" / f"{ident}.md").exists()
        accepted = ident in by_id and by_id[ident]["path"].startswith("entries/")
        assert not (waiting and accepted), ctx
        if op == "review-reject":
            assert not accepted, ctx
        decisions = git_out(vault, "log", "--format=%(trailers:key=Acpmem-Kind,valueonly)").split()
        assert decisions.count("human-review") == (0 if waiting else 1), (ctx, decisions)
    elif op == "consolidate":
        merged = [e for e in entries if e["supersedes"]]
        assert len(merged) <= 1, (ctx, merged)
        members = [by_id["dup000"], by_id["dup001"]]
        want = merged[0]["id"] if merged else None
        assert [m["superseded_by"] for m in members] == [want, want], (ctx, members)
        if merged:
            assert sorted(merged[0]["supersedes"]) == ["dup000", "dup001"], ctx
    elif op == "sync":
        assert "team01" in by_id, ctx
        assert git_out(vault, "rev-parse", "HEAD") == git_out(remote, "rev-parse", "main"), ctx
        assert git_out(vault, "log", "--format=%s").count("a person's own commit") == 1, ctx
    elif op == "doctor-fix":
        assert sum("Half-written before the crash." in b for b in bodies) <= 1, ctx
    elif op == "import":   # the whole import (3 entries, once, in one commit) or none of it
        imported = [e for e in entries if (e.get("source") or {}).get("by") == "import"]
        kinds = git_out(vault, "log", "--format=%(trailers:key=Acpmem-Kind,valueonly)").split()
        assert len(imported) in (0, 3) and kinds.count("import") == (1 if imported else 0), (ctx, imported)
        assert len({e["source"]["hash"] for e in imported}) == len(imported), ctx


# --------------------------------------------------------------------------------------------- the test

@pytest.mark.heavy
@pytest.mark.parametrize("op", list(OPS))
def test_every_crash_point_of_a_write_keeps_the_invariants(op, world):
    base = world["base"] / op
    base.mkdir()
    started = time.monotonic()
    template = _prepare(world, op, base / "template")
    counted = _run_op(world, op, copy_tree(template, base / "count"), count=True)
    assert counted.code == 0 and counted.steps, (op, counted.out, counted.err)
    steps = counted.steps
    # the uncrashed run keeps the invariants too (k = N + 1: killed after its last step, that is never)
    _hand_edit(base / "count", PERSON_AFTER)
    _check(world, op, base / "count", len(steps) + 1, counted)
    # every step is a kill point once per distinct (kind of step, file, call site) — an fsync too: a kill just
    # before it leaves the data written but not yet forced to disk, which the next step's kill does not (a step
    # repeated at the same place in the code on the same file is killed at its first occurrence);
    # ACPMEM_CRASH_EVERY_STEP=1 kills at every step, repetitions included
    todo = list(range(1, len(steps) + 1)) if os.environ.get("ACPMEM_CRASH_EVERY_STEP") == "1" \
        else cp.distinct_points(steps, counted.sites, base / "count")
    fsyncs = [k for k in todo if steps[k - 1].startswith("fsync ")]

    def crash_at(k: int, zygote: cp.Zygote) -> None:
        where = copy_tree(template, base / f"k{k}")
        r = _run_op(world, op, where, at=k, zygote=zygote)
        assert r.killed, (op, k, steps[k - 1], r.code, r.err)   # the same steps every time
        r.steps_seen = steps[k - 1]
        _settle(where / "vault")
        _hand_edit(where, PERSON_AFTER)
        _check(world, op, where, k, r, zygote=zygote)
        shutil.rmtree(where)

    # two at a time, each with its own forking server: a command waits on fsync and git about half its time
    with ThreadPoolExecutor(len(world["zygotes"])) as pool:
        futures = [pool.submit(lambda ks, z: [crash_at(k, z) for k in ks], todo[i::len(world["zygotes"])], z)
                   for i, z in enumerate(world["zygotes"])]
        for f in futures:
            f.result()
    wall = time.monotonic() - started
    TOTALS[op] = (len(steps), len(todo), wall)
    print(f"\n{op}: {len(steps)} steps, {len(todo)} kill points ({len(fsyncs)} at an fsync), {wall:.1f} s")

