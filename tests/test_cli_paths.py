"""The command line is defined once: for generated argument lists — valid and invalid, of every shape — the fast path
and typer print the same bytes on stdout and stderr and exit with the same code.

Both paths run in this process through ``acpmem.cli.main.main`` (what the console scripts call), with
``ACPMEM_NO_FASTPATH`` deciding which one answers. Request ids and times, which differ from one call to the next by
design, are normalised before comparing; nothing else is.
"""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from acpmem.cli.main import main
from acpmem.write import worker
from helpers_proc import copy_tree

CHAT = str(Path(__file__).parent / "fixtures" / "transcripts" / "openai_chat.json")
EXAMPLES = 150

_ID = re.compile(r"\br-[a-z2-9]{8}\b")   # a request id, not the end of a word ("…r-importance")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")


@contextmanager
def _captured(stdin: bytes):
    old = sys.stdin, sys.stdout, sys.stderr
    out, err = io.StringIO(), io.StringIO()
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout, sys.stderr = out, err
    try:
        yield out, err
    finally:
        sys.stdin, sys.stdout, sys.stderr = old


def run(argv: list[str], prog: str, *, fast: bool, stdin: bytes = b"") -> tuple[int, str, str, list]:
    """(exit code, stdout, stderr, the per-turn functions called with their arguments) of one command line."""
    from acpmem.cli import hot

    calls: list = []
    real = dict(hot.IMPLS)

    def recorder(name):
        def record(**kw):
            calls.append((name, kw))
            return real[name](**kw)
        return record

    env = os.environ
    saved = env.get("ACPMEM_NO_FASTPATH")
    if fast:
        env.pop("ACPMEM_NO_FASTPATH", None)
    else:
        env["ACPMEM_NO_FASTPATH"] = "1"
    hot.IMPLS.update({name: recorder(name) for name in real})
    try:
        with _captured(stdin) as (out, err):
            code = main(list(argv), prog)
    finally:
        hot.IMPLS.update(real)
        if saved is None:
            env.pop("ACPMEM_NO_FASTPATH", None)
        else:
            env["ACPMEM_NO_FASTPATH"] = saved
    norm = lambda s: _TIME.sub("TIME", _ID.sub("r-ID", s))  # noqa: E731
    return code, norm(out.getvalue()), norm(err.getvalue()), calls


@pytest.fixture(scope="module")
def vault_root(tmp_path_factory):
    """An example vault whose worker lock this module holds, so a generated ``commit`` never starts a worker."""
    from acpmem.vault.create import init_vault

    v = init_vault(tmp_path_factory.mktemp("paths") / "vault", example=True)
    fd = worker.try_worker_lock(v.state_dir)
    yield v.root
    os.close(fd)
    v.close()


# ------------------------------------------------------------------------------------------------ generated argv

INTS = st.one_of(st.integers(-3, 12).map(str), st.sampled_from(
    ["0", "007", "+5", " 5", "5.5", "1e3", "abc", "", "99999999999999999999", "٥", "5_0", "-0", "2147483648"]))
TEXT = st.one_of(st.sampled_from(["sqlite queue", "上传大文件", "", " ", "-x", "--json", "a=b", "x" * 300]),
                 st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12))
JUNK = st.sampled_from(["--bogus", "-x", "--form", "--", "-", "-h", "--help", "--json=1", "extra", "-n5", "-fjson",
                        "--format=", "--limit=", "--all=yes", "--no-refresh", "--vault="])


def _option(name: str, values) -> st.SearchStrategy[list[str]]:
    """``name value``, ``name=value`` (long options), or the option with its value missing."""
    forms = [values.map(lambda v: [name, v]), st.just([name])]
    if name.startswith("--"):
        forms.append(values.map(lambda v: [f"{name}={v}"]))
    return st.one_of(*forms)


def _args(pieces: list[st.SearchStrategy[list[str]]], max_size: int = 6) -> st.SearchStrategy[list[str]]:
    return st.lists(st.one_of(*pieces, JUNK.map(lambda j: [j])), max_size=max_size).map(
        lambda chunks: [a for c in chunks for a in c])


def _with_vault(root: Path):
    vault = st.sampled_from([str(root), str(root.parent), "/nonexistent/vault", ""])
    return _option("--vault", vault)


# The argv builders below are cached: one strategy a vault, not one an example (hypothesis checks a strategy the
# first time it is drawn from).
@cache
def list_args(root):
    fmt = st.sampled_from(["table", "json", "markdown", "prompt", "PROMPT", "xml", ""])
    return _args([_option("--format", fmt), _option("-f", fmt), st.just(["--all"]), st.just(["--json"]),
                  st.just(["--refresh"]), st.just(["--no-refresh"]), _option("--budget", INTS),
                  _option("--session", st.sampled_from(["s1", "s2", "", "spaced id", "会话"])), _with_vault(root)])


@cache
def recall_args(root):
    options = _args([_option("--limit", INTS), _option("-n", INTS), st.just(["--all"]),
                  _option("--type", st.sampled_from(["lesson", "fact", "nope", ""])),
                  _option("-t", st.sampled_from(["decision", "user-preference"])), st.just(["--json"]),
                  _option("--session", st.sampled_from(["s1", "s3"])), _with_vault(root)])
    # the query before, among or after the options; now and then a second one (a usage error)
    return st.tuples(options, TEXT, st.integers(0, 6), st.lists(TEXT, max_size=1)).map(
        lambda t: t[0][:t[2]] + [t[1]] + t[0][t[2]:] + t[3])


@cache
def commit_args(root):
    return _args([_option("--type", st.sampled_from(["lesson", "fact", "nope", ""])),
                  _option("-t", st.sampled_from(["decision"])), _option("--note", TEXT),
                  _option("--importance", INTS), _option("-i", INTS), _option("--seq", INTS),
                  _option("--session", st.sampled_from(["s1", "", "x" * 600])),
                  _option("--transcript", st.sampled_from([CHAT, "/nonexistent.json", ""])),
                  _option("--extractor", st.sampled_from(["offline", "auto", "llm", "OFFLINE"])),
                  _option("--block", st.sampled_from(["b1", "", "B1", "b"])),
                  st.just(["--json"]), _with_vault(root)], max_size=9)


def _prompt_needs_a_session(argv: list[str]) -> bool:
    """A prompt listing without a session — or with an empty one, which is none — draws a fresh jitter on every call,
    by design: not comparable."""
    joined = " ".join(argv)
    given = []   # each session option's value, in order (None: the option with its value missing); the last wins
    for i, a in enumerate(argv):
        if a == "--session":
            given.append(argv[i + 1] if i + 1 < len(argv) else None)
        elif a.startswith("--session="):
            given.append(a.partition("=")[2])
    return "prompt" in joined and (not given or not given[-1])


def _same(argv: list[str], prog: str = "acpmem", stdin: bytes = b"") -> None:
    fast = run(argv, prog, fast=True, stdin=stdin)
    full = run(argv, prog, fast=False, stdin=stdin)
    assert fast == full, argv


SLOW = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                            HealthCheck.too_slow])


@SLOW
@given(data=st.data())
def test_list_both_paths_agree(vault_root, data):
    argv = data.draw(list_args(vault_root))
    if _prompt_needs_a_session(argv):
        argv += ["--session", "gen"]
    group = data.draw(st.sampled_from([[], ["--vault", str(vault_root)]]))
    _same(group + ["list", *argv])


@SLOW
@given(data=st.data())
def test_recall_both_paths_agree(vault_root, data):
    _same(["recall", *data.draw(recall_args(vault_root))])


@SLOW
@given(data=st.data())
def test_commit_both_paths_agree(vault_root, data):
    argv = data.draw(commit_args(vault_root))
    _same(["--vault", str(vault_root), "commit", *argv])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hook_both_paths_agree(vault_root, data):
    import json

    event = data.draw(st.sampled_from([
        {"hook_event_name": "SessionStart", "session_id": "h1", "cwd": str(vault_root.parent)},
        {"hook_event_name": "UserPromptSubmit", "session_id": "h2", "cwd": str(vault_root.parent)},
        {"hook_event_name": "Stop", "session_id": "h3"}, {"hook_event_name": "SessionStart"}, [], "x"]))
    stdin = data.draw(st.sampled_from([json.dumps(event), "{oops", "", "\xff"])).encode("utf-8", "surrogateescape")
    argv = data.draw(_args([_with_vault(vault_root)], max_size=3))
    _same(["hook", "claude-code", *argv], stdin=stdin)


@pytest.mark.parametrize("prog", ["acp", "acpmem"])
def test_both_programs_and_the_group_option_agree(vault_root, prog):
    head = ["memory"] if prog == "acp" else []
    for argv in (["--vault", str(vault_root), "list", "--json"], ["list", "--vault", str(vault_root), "-f", "prompt",
                                                                   "--session", "p"],
                 ["--vault", str(vault_root), "recall", "queue", "-n", "1"], ["--vault", "/nope", "list"],
                 ["--vault"], ["list", "--vault"], ["nope"], []):
        _same(head + argv, prog)


def test_usage_errors_are_one_line_with_exit_2(vault_root):
    for argv in (["list", "--format", "xml"], ["list", "--bogus"], ["recall"], ["recall", "a", "b"],
                 ["commit", "--importance", "abc"], ["commit", "--importance", "11"], ["commit", "--seq", "x"],
                 ["commit", "--seq", "99999999999999999999"], ["list", "--budget", "0"], ["recall", "q", "-n", "0"],
                 ["list", "--budget"]):
        code, out, err, _ = run(["--vault", str(vault_root), *argv], "acpmem", fast=True)
        assert code == 2 and out == "", (argv, out)
        assert err.count("\n") == 1 and err.startswith("Error: ") and " — " in err, (argv, err)


def test_commit_wait_agrees(tmp_path):
    """``commit --wait`` extracts inline (offline here): both paths write an entry and say so the same way."""
    from acpmem.vault.create import init_vault

    outs = []
    for fast in (True, False):
        v = init_vault(tmp_path / f"v{fast}", example=True)
        argv = ["--vault", str(v.root), "commit", "--type", "lesson", "--note", "re-entrant append",
                "--importance", "6", "--session", "w", "--seq", "6", "--transcript", CHAT, "--wait",
                "--extractor", "offline"]
        code, out, err, _ = run(argv, "acpmem", fast=fast)
        outs.append((code, re.sub(r"[0-9a-f]{12}", "SHA", re.sub(r"#[a-z2-9]{6}", "#ID", out)), err))
        v.close()
    assert outs[0] == outs[1] and outs[0][0] == 0 and "wrote 1 entry" in outs[0][1]


# ------------------------------------------------------------------------------------------ tools and nudge

@cache
def tools_args(root):
    return _args([_option("--for", st.sampled_from(["main", "fork", "MAIN", ""])),
                  _option("--format", st.sampled_from(["openai", "anthropic", "mcp", "dsh", "xml"])),
                  _option("-f", st.sampled_from(["dsh", "mcp"])), _option("--lang", st.sampled_from(["en", "zh", "fr"])),
                  _with_vault(root)])


@cache
def nudge_args(root):
    return _args([_option("--lang", st.sampled_from(["en", "zh", "fr", ""])),
                  _option("--voice", st.sampled_from(["gentle", "emergency", "tier", "loud"])), _with_vault(root)])


@SLOW
@given(data=st.data())
def test_tools_and_nudge_both_paths_agree(vault_root, data):
    """What pi's and DSH's plugins run at every session's start: the same tool definitions and guidance, and the
    same refusals, on both paths (the vault's types, language and layers, or the defaults without a vault)."""
    name = data.draw(st.sampled_from(["tools", "nudge"]))
    argv = data.draw(tools_args(vault_root) if name == "tools" else nudge_args(vault_root))
    group = data.draw(st.sampled_from([[], ["--vault", str(vault_root)]]))
    _same(group + [name, *argv])


# ------------------------------------------------------------------------------------------ remember

_ENTRY_ID = re.compile(r'(#|entries/|proposals/|"id": ")(u-)?[a-z2-9]{6}')
_SHA = re.compile(r"\b[0-9a-f]{40}\b|\b[0-9a-f]{12}\b")


@pytest.fixture(scope="module")
def twin_template(tmp_path_factory):
    """A project vault (the example entries), a user vault and the project vault's remote, copied afresh before
    every run: a write changes the vault, and both paths must start from the same one."""
    from acpmem.vault.create import init_user_vault, init_vault

    base = tmp_path_factory.mktemp("remember")
    saved = os.environ.get("ACPMEM_USER_VAULT")
    os.environ["ACPMEM_USER_VAULT"] = str(base / "template" / "user")
    try:
        init_vault(base / "template" / "vault", example=True).close()
        init_user_vault().close()
        # a team remote beside them, named relative to the vault so that a copy syncs with its own copy; pushed
        # once, then one entry more here, so that a sync has a commit to push
        remote = base / "template" / "remote.git"
        subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
        subprocess.run(["git", "-C", str(base / "template" / "vault"), "remote", "add", "origin", "../remote.git"],
                       check=True)
        assert main(["--vault", str(base / "template" / "vault"), "sync"], "acpmem") == 0
        assert main(["--vault", str(base / "template" / "vault"), "remember", "Deploys go out on Tuesdays.",
                     "--type", "decision"], "acpmem") == 0
        # objects in one pack, as git's auto gc leaves a repository in use: ~70 files a copy, not ~160 (two copies an
        # example of the twin tests)
        for repo in ("vault", "user", "remote.git"):
            subprocess.run(["git", "-C", str(base / "template" / repo), "repack", "-a", "-d", "-q"], check=True)
    finally:
        os.environ.pop("ACPMEM_USER_VAULT") if saved is None else os.environ.__setitem__("ACPMEM_USER_VAULT", saved)
    return base


@cache
def remember_args(root):
    options = _args([_option("--type", st.sampled_from(["lesson", "fact", "user-preference", "nope", ""])),
                     _option("-t", st.sampled_from(["decision"])), _option("--importance", INTS), _option("-i", INTS),
                     _option("--title", TEXT), st.just(["--edit"]), st.just(["--user"]), st.just(["--branch"]),
                     st.just(["--global"]), st.just(["--json"]), _with_vault(root)], max_size=7)
    texts = st.one_of(st.sampled_from(["Deploys go out on Tuesdays.", "上传大文件走分片队列。", "-", "",
                                       "token ghp_" + "a1B2" * 9]), TEXT)
    # the text before, among or after the options, or none (then stdin); now and then a second one (a usage error)
    anything = st.tuples(options, st.lists(texts, max_size=1), st.integers(0, 7), st.lists(TEXT, max_size=1)).map(
        lambda t: t[0][:t[2]] + t[1] + t[0][t[2]:] + (t[3] if t[1] else []))
    # and lines that are well formed but for one value, where a parser that took more than typer takes shows
    well_formed = st.tuples(
        texts, st.sampled_from([[], ["--type", "lesson"], ["-t", "decision"], ["--type=nope"]]),
        st.sampled_from([[], ["--user"], ["--branch"], ["--global"], ["--json"], ["--user", "--json"]]),
        INTS.map(lambda v: ["--importance", v]) | INTS.map(lambda v: ["-i", v]) | st.just([]),
        st.just([]) | TEXT.map(lambda v: ["--title", v])).map(lambda t: [t[0], *t[1], *t[2], *t[3], *t[4]])
    return st.one_of(anything, well_formed, well_formed)


def _twin_same(template: Path, argv: list[str], stdin: bytes = b"", user_vault: str = "user") -> tuple:
    """``argv`` on both paths, each on its own fresh copy of the same vaults, at the same place; new entries' ids
    and commits (random, by design) normalised, the rest — titles, paths, layers, the errors, the exit code and what
    the shared function was called with — the same bytes. The fast path's result."""
    import shutil

    work = template / "work"
    saved = {k: os.environ.get(k) for k in ("ACPMEM_USER_VAULT", "EDITOR")}
    os.environ.update(ACPMEM_USER_VAULT=str(work / user_vault), EDITOR="true")
    got = []
    try:
        for fast in (True, False):
            shutil.rmtree(work, ignore_errors=True)
            copy_tree(template / "template", work)
            code, out, err, calls = run(argv, "acpmem", fast=fast, stdin=stdin)
            norm = lambda s: _SHA.sub("SHA", _ENTRY_ID.sub(r"\1\2ID", s))  # noqa: E731
            got.append((code, norm(out), norm(err), calls))
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert got[0] == got[1], argv
    return got[0]


@SLOW
@given(data=st.data())
def test_remember_both_paths_agree(twin_template, data):
    """``remember`` writes: for generated lines, both paths on twin vaults print the same and exit the same."""
    vault = twin_template / "work" / "vault"
    argv = data.draw(remember_args(vault))
    stdin = data.draw(st.sampled_from([b"A fact piped in.\n", b"", b"\xff\xfe", "管道里的一条事实".encode()]))
    group = data.draw(st.sampled_from([[], ["--vault", str(vault)]]))
    if not group and "--vault" not in " ".join(argv):
        argv += ["--vault", str(vault)]
    _twin_same(twin_template, [*group, "remember", *argv], stdin)


def test_remember_both_paths_agree_on_the_edges(twin_template):
    """The lines where a parser that took more (or less) than typer would show, each on both paths: a written
    entry (plain, --json, --user, --title, piped), and every refusal — importance out of range or not a number,
    two scopes, text and --edit, a secret, an unknown type, no text, a second text."""
    vault = str(twin_template / "work" / "vault")
    cases = [
        (["Deploys go out on Tuesdays.", "--type", "decision", "-i", "7"], b"", 0),
        (["Deploys go out on Tuesdays.", "--json", "--title", "Deploy day"], b"", 0),
        (["Answer with the short version first.", "--type", "user-preference", "--user"], b"", 0),
        (["--type", "fact", "--importance", "3"], "上传大文件走分片队列。".encode(), 0),
        (["-", "--type", "fact"], b"Piped in, verbatim.\n", 0),
        (["x", "--importance", "11"], b"", 2), (["x", "-i", "0"], b"", 2), (["x", "-i", "5.5"], b"", 2),
        (["x", "-i", "+5"], b"", 0), (["x", "--importance="], b"", 2), (["x", "--branch", "--global"], b"", 2),
        (["x", "--edit"], b"", 2), (["token ghp_" + "a1B2" * 9, "--type", "fact"], b"", None),
        (["x", "--type", "nope"], b"", None), ([], b"", 2), (["x", "y"], b"", 2), (["x", "--bogus"], b"", 2),
    ]
    for argv, stdin, want in cases:
        code, out, err, _ = _twin_same(twin_template, ["remember", *argv, "--vault", vault], stdin)
        if want is not None:
            assert code == want, (argv, out, err)
        else:
            assert code != 0 and err.startswith("Error: ") and err.count("\n") == 1, (argv, err)


def test_init_doctor_and_sync_both_paths_agree(twin_template):
    """``init``, ``doctor`` and ``sync`` — what a person or a script runs by hand, on the fast path too — print the
    same bytes and exit the same on both paths, each on twin copies of the same vaults and remote: what they do
    (a vault created, one repaired, a commit pushed) and every refusal."""
    work = twin_template / "work"
    vault, new = str(work / "vault"), str(work / "new")
    cases = [
        (["init", new], "user", 0), (["init", new, "--example", "--json"], "user", 0),
        (["--vault", vault, "init", new], "user", 0),            # the group's --vault: init takes none
        (["init", vault], "user", 1), (["init", "--user"], "user", 1), (["init", "--user", "--example"], "fresh", 0),
        (["init", "--user", new], "user", 2), (["init", new, "extra"], "user", 2), (["init", "--bogus"], "user", 2),
        (["doctor", "--vault", vault], "user", 0), (["--vault", vault, "doctor", "--json"], "user", 0),
        (["doctor", "--vault", vault, "--fix"], "user", 0), (["doctor", "--vault", new], "user", 1),
        (["doctor", "--vault", vault, "extra"], "user", 2), (["doctor", "--fix=1", "--vault", vault], "user", 2),
        (["sync", "--vault", vault], "user", 0), (["--vault", vault, "sync", "--json"], "user", 0),
        (["sync", "--vault", vault, "--remote", "origin"], "user", 0),
        (["sync", "--vault", vault, "-r", "nope"], "user", 1), (["sync", "--user"], "user", 1),
        (["sync", "--vault", vault, "--remote"], "user", 2), (["sync", "--vault", new], "user", 1),
    ]
    for argv, user_vault, want in cases:
        code, out, err, calls = _twin_same(twin_template, argv, user_vault=user_vault)
        assert code == want, (argv, out, err)
        assert calls or code == 2, argv   # what parsed reached the shared function


def test_the_hand_run_commands_take_the_fast_path_and_typer_the_rest(twin_template):
    """A plain ``remember``, ``init``, ``doctor --fix``, ``sync``, ``tools`` or ``nudge`` line never imports typer; ``remember -``
    (stdin) and ``--help`` go to typer, which answers them through the same function (stdin) or with its help."""
    import shutil
    import subprocess

    work = twin_template / "plain"
    shutil.copytree(twin_template / "template", work, symlinks=True)
    probe = ("import sys\nfrom acpmem.cli.main import main\n"
             "code = main(sys.argv[1:], 'acpmem')\n"
             "print('TYPER' if 'typer' in sys.modules else 'NO-TYPER', code, file=sys.stderr)\n")
    env = dict(os.environ, ACPMEM_USER_VAULT=str(work / "user"))
    seen = {}
    for name, argv, stdin in (("plain", ["remember", "Deploys go out on Tuesdays.", "--type", "fact"], ""),
                              ("stdin", ["remember", "-", "--type", "fact", "-i", "4"], "Piped in, verbatim.\n"),
                              ("help", ["remember", "--help"], ""),
                              ("init", ["init", str(work / "fresh"), "--example"], ""), ("doctor", ["doctor", "--fix"], ""),
                              ("sync", ["sync"], ""), ("tools", ["tools", "--format", "dsh"], ""),
                              ("nudge", ["nudge", "--voice", "tier"], "")):
        p = subprocess.run([sys.executable, "-c", probe, "--vault", str(work / "vault"), *argv], input=stdin,
                           capture_output=True, text=True, env=env, timeout=120)
        seen[name] = p.stderr.strip().splitlines()[-1]
        assert p.stderr.strip().splitlines()[-1].endswith(" 0"), (name, p.stderr)
    assert seen == {"plain": "NO-TYPER 0", "stdin": "TYPER 0", "help": "TYPER 0", "init": "NO-TYPER 0",
                    "doctor": "NO-TYPER 0", "sync": "NO-TYPER 0", "tools": "NO-TYPER 0", "nudge": "NO-TYPER 0"}


# ------------------------------------------------------------------------------------------ the per-turn reads

AT = "2026-12-01T00:00:00Z"
ATS = st.sampled_from([AT, "2026-11-02T10:00:00Z", "yesterday", ""])


def _first_id(root: Path) -> str:
    from acpmem.vault.reader import VaultReader

    v = VaultReader(root)
    try:
        return sorted(e.id for e in v.load(light=True).entries)[0]
    finally:
        v.close()


def _pinned(argv: list[str]) -> list[str]:
    """Scores drawn for the same time and jitter on both paths: ``--at`` and ``--seed`` added when the generated
    arguments have none (a seed wins over a session; without either the jitter is fresh on every call, by design)."""
    def given(name: str) -> bool:   # an option of the line, not another option's value (`--top --seed` sets --top)
        i = 0
        while i < len(argv):
            if argv[i] == name or argv[i].startswith(name + "="):
                return True
            i += 2 if argv[i] in _VALUED else 1
        return False

    extra = []
    if not given("--at"):
        extra += ["--at", AT]
    if not given("--seed"):
        extra += ["--seed", "7"]
    return argv + extra


_VALUED = {"--seed", "--at", "--session", "--top", "-n", "--vault", "--prompt", "--max-chars"}


@cache
def show_args(root):
    ident = _first_id(root)
    ids = st.sampled_from([ident, ident[:3], "#" + ident, "", "nosuch", "-x", "a b"])
    options = _args([st.just(["--json"]), st.just(["--source"]),
                     _option("--transcript", st.sampled_from([CHAT, "/nonexistent.json", ""])), _with_vault(root)])
    return st.tuples(options, ids, st.integers(0, 4), st.lists(ids, max_size=1)).map(
        lambda t: t[0][:t[2]] + [t[1]] + t[0][t[2]:] + t[3])


@cache
def score_args(root):
    return _args([st.just(["--explain"]), _option("--seed", INTS), _option("--at", ATS),
                  _option("--session", st.sampled_from(["s1", "s2", "会话"])), _option("--top", INTS),
                  _option("-n", INTS), st.just(["--json"]), _with_vault(root)])


PROMPTS = st.one_of(st.sampled_from(["-", "the job queue", "上传大文件", "", " ", "--json"]), TEXT)


@cache
def surface_args(root):
    return _args([_option("--session", st.sampled_from(["s1", "s2", "", "x" * 600])), _option("--seed", INTS),
                  _option("--at", ATS), st.just(["--json"]), _with_vault(root)])


@cache
def surface_prompt_args(root):
    return _args([_option("--session", st.sampled_from(["s1", "s2", ""])), _option("--prompt", PROMPTS),
                  st.just(["--json"]), _with_vault(root), _option("--seed", INTS)])


@SLOW
@given(data=st.data())
def test_show_both_paths_agree(vault_root, data):
    _same(["show", *data.draw(show_args(vault_root))])


@SLOW
@given(data=st.data())
def test_score_both_paths_agree(vault_root, data):
    _same(["score", *_pinned(data.draw(score_args(vault_root)))])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_stats_both_paths_agree(vault_root, data):
    argv = ["stats", *data.draw(_args([st.just(["--json"]), _with_vault(vault_root)], max_size=3))]
    _past_racy_window(vault_root)
    run(argv, "acpmem", fast=True)   # whatever the first look brings up to date is done before the comparison
    fast, full = run(argv, "acpmem", fast=True), run(argv, "acpmem", fast=False)
    if fast != full and fast[1].startswith("{") and full[1].startswith("{"):   # say which figures differ
        a, b = json.loads(fast[1]), json.loads(full[1])
        assert a == b, (argv, {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)})
    assert fast == full, argv


def _past_racy_window(root: Path) -> None:
    """Wait until every entry file is older than the catalog's racy window: a file changed less than
    ``catalog.RACY_NS`` before a look is read again by the next look, which rewrites its index row — and the index's
    size on disk, which ``stats`` reports — so two looks in a row would each bring something up to date (seen
    once: the two paths' ``state_bytes`` differed)."""
    import time

    from acpmem.search import catalog

    newest = max((f.stat().st_ctime_ns for f in (root / "entries").rglob("*.md")), default=0)
    while time.time_ns() - newest <= catalog.RACY_NS:
        time.sleep(0.1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_surface_both_paths_agree(vault_root, tmp_path_factory, data):
    """Surfacing spends the session's budget and marks entries read: each path gets its own copy of the vault."""
    import shutil

    by_prompt = data.draw(st.booleans())   # by the user's message (no jitter to pin; stdin for `-`), or by score
    argv = data.draw(surface_prompt_args(vault_root)) if by_prompt else _pinned(data.draw(surface_args(vault_root)))
    stdin = data.draw(st.sampled_from([b"", b"  \n", "the job queue in sqlite".encode(), b"\xff\xfe"]))
    got = []
    # both paths at the same place, each on a fresh copy: a path in an argument (`--session --vault=V` takes it as
    # the session, which salts the ranking) is then the same for both
    copy = tmp_path_factory.mktemp("surface") / "vault"
    for fast in (True, False):
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(vault_root, copy, symlinks=True)
        mine = [str(copy) if a == str(vault_root) else a.replace(f"={vault_root}", f"={copy}") for a in argv]
        code, out, err, calls = run(["surface", *mine], "acpmem", fast=fast, stdin=stdin)
        got.append((code, out.replace(str(copy), "VAULT"), err.replace(str(copy), "VAULT"),
                    [(n, {k: str(v).replace(str(copy), "VAULT") for k, v in kw.items()}) for n, kw in calls]))
    assert got[0] == got[1], argv
