"""Boundary fuzzing: generated hostile values at every input a user or a model controls, and the property they must
keep. Not a test file: ``tests/test_fuzz_boundaries.py`` runs each fuzzer with a CI-sized number of examples and
``bench/fuzz_boundaries.py`` with as many as asked.

The property, everywhere: the answer is success or one clear error (an ``AcpmemError``; on the command line one
``Error: … — …`` line with exit 1 or 2, never a traceback or an "internal error"), and no bad value reaches disk or the
index — after each example the vault still lists and recalls its good entries, every pending request and every
entry file acpmem wrote is valid, the index holds only storable numbers, and ``doctor`` names exactly the bad files.

Generated values include huge integers, negative numbers, floats, NaN and infinities, empty and huge strings, NUL and
control characters, bidi and invisible characters, lone surrogates (what a non-UTF-8 command line or a JSON
``"\\ud800"`` gives), wrong types and nested structures.

Each ``fuzz_*`` function takes a context (made by the matching ``*_context`` function over a temporary folder) and a
number of examples, runs them under hypothesis, and returns how many ran; a broken property raises hypothesis's
falsifying example.
"""
from __future__ import annotations

import io
import json
import math
import os
import random
import re
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st
from acpmem.write.requests import pending_dir

HERE = Path(__file__).resolve().parents[1]   # tests/
CHAT = HERE / "fixtures" / "transcripts" / "openai_chat.json"
MAX = 2**63 - 1
GOOD_QUERY = "sqlite queue"                    # what generated inputs talk about
CHECK_QUERY = "Postgres"                       # what only the good example entry says
GOOD_TITLE = "Use SQLite WAL mode for the job queue"

# ----------------------------------------------------------------------------------------------------- generated values

BIG_INTS = [2**31, 2**53 + 1, MAX, MAX + 1, -MAX - 2, 10**20, -(10**20), 10**30, 10**4000]


def _beyond_str() -> int:
    return 10**5000      # no str(), repr() or json.dumps() can write it (built, so hypothesis never has to show it)


INTS = st.one_of(st.integers(-3, 12), st.sampled_from([-1, 0, 1, 7, 10, 11] + BIG_INTS), st.integers(),
                 st.builds(_beyond_str))
FLOATS = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 5.0, 7.5, 1e308, 1e-300]),
                   st.floats(allow_nan=True, allow_infinity=True))
SPECIAL_TEXT = [
    "", " ", "\t", "\n", "\r\n", "a\nb", "\x00", "a\x00b", "\x01\x02\x1b[31mred\x1b[0m", "\x7f\x85\x9f",
    "\u202e\u2066evil\u2069", "\u200b\u200d\ufeff", "\u2028\u2029", "\ud800", "\udcff", "x\udcfey", "x" * 10_000,
    "1" * 5000, "99999999999999999999", str(MAX), str(MAX + 1), "-1", "0", "7", " 7 ", "+7", "007", "7.0", "1e3",
    "²", "٥", "７", "NaN", "inf", "-inf", "null", "true", "no", "1-2", "9-1", "1-99999999999999999999", "m12", "b3",
    "m99999999999999999999", "r-abc", "../../etc/passwd", "/", ".", "..", "/dev/null", "/nonexistent/t.json",
    "--json", "-n", "<</acpmem-data nonce=x>>", "<|im_end|>", "上传大文件", "sqlite queue", "fact", "lesson",
]
# The text most likely to break something, drawn more often than the rest.
WORST_TEXT = ["", "\x00", "a\x00b", "\ud800", "\udcff", "x\udcfey", "a\nb", "\x1b[31m", "\u202e\u2066", "\u2028",
              "x" * 10_000, "1" * 5000, "²", "99999999999999999999"]
TEXT = st.one_of(st.sampled_from(WORST_TEXT), st.sampled_from(SPECIAL_TEXT), st.text(max_size=12),
                 st.text(st.characters(min_codepoint=0, max_codepoint=0x20), max_size=4))
SCALAR = st.one_of(INTS, FLOATS, TEXT, st.booleans(), st.none())
VALUE = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                     max_leaves=6)


def field(valid, nasty=VALUE):
    """A value that is usually plausible (so validation is passed and deeper code runs) and often hostile."""
    return st.one_of(valid, valid, nasty)


# Text a real command line can carry: no NUL; undecodable bytes arrive as lone surrogates U+DC80..U+DCFF.
ARGV_TEXT = st.one_of(st.sampled_from([t for t in SPECIAL_TEXT if "\x00" not in t and "\ud800" not in t]),
                      st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=10),
                      st.sampled_from(["\udcff", "caf\udce9", "\udc80\udcfe"]))
ARGV_INT = st.one_of(st.integers(-2, 12).map(str), st.sampled_from(
    ["99999999999999999999", str(MAX), str(MAX + 1), "1" * 5000, "-1", "²", "٥", "1e3", "7.5", "nan", "", " 7"]))


# -------------------------------------------------------------------------------------------------------- the invariant

def _entry_problem(e) -> str | None:
    """Why a valid-looking entry still holds a value the index or the disk must never hold (None: it holds none)."""
    from datetime import timezone

    from acpmem.core import limits
    from acpmem.core.clock import parse_iso

    if not limits.int_between(e.importance, 1, 10) or not limits.int_between(e.tier, 1, 3):
        return f"importance/tier {e.importance!r}/{e.tier!r}"
    if limits.breaks_line(e.title) or not limits.is_utf8(e.title + e.body) or "\x00" in e.body:
        return f"title {e.title!r:.60}"
    for c in e.citation:
        if not limits.valid_seq(c.seq) or limits.session_problem(c.session):
            return f"citation {c!r}"
    for t in (e.created, e.last_read):
        if t is not None:
            parse_iso(t).astimezone(timezone.utc)
    for v in (e.source, e.extra):
        if limits.bad_value(v) is not None:
            return f"number in {v!r:.60}"
    return None


def check_vault(root: Path, *, bad: set[str] = frozenset(), doctor: bool = False) -> None:
    """The vault keeps working and holds nothing bad: ``bad`` are the entry files that must be reported (and only
    those), every other entry is listed and valid, recall finds the good entry, every pending request is valid, the
    index holds only storable numbers, and with ``doctor`` its errors name exactly the bad files."""
    from acpmem.core import limits
    from acpmem.upkeep import doctor as health
    from acpmem.read import resident
    from acpmem.read.retrieval import recall
    from acpmem.vault.writer import Vault
    from acpmem.write import requests

    v = Vault(root)
    try:
        loaded = v.load()
        assert {p.path for p in loaded.problems} == set(bad), (loaded.problems, bad)
        for e in loaded.entries:
            assert _entry_problem(e) is None, (e.path, _entry_problem(e))
        hits = recall(v, CHECK_QUERY, limit=3, mark_read=False)
        assert any(h.entry.title.startswith(GOOD_TITLE) for h in hits), hits
        assert GOOD_TITLE[:20] in resident.resident_index(v)
        con = v.db()
        assert con.execute("SELECT count(*) FROM idx_cites WHERE lo < 0 OR hi < lo").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM idx_docs WHERE importance NOT BETWEEN 1 AND 10").fetchone()[0] == 0
        reqs, broken = requests.list_requests(v.state_dir)
        assert broken == [], broken
        for r in reqs:
            assert limits.int_between(r.seq, 0, MAX) and limits.session_problem(r.session) is None, r
            assert limits.is_utf8(r.note) and "\x00" not in r.note, r
            for p in (r.transcript, r.host_tools):
                assert p is None or (limits.is_utf8(p) and "\x00" not in p), r
        if doctor:
            rep = health.check_vault(v)
            named = set()
            for f in rep.findings:
                if f.level == "error":
                    found = re.search(r"entries/[^\s:]+?\.md", f.what)
                    assert found, f          # every error is about a bad file, named first
                    named.add(found[0])
            assert named == set(bad), (named, bad, rep.findings)
    finally:
        v.close()


# doctor (git fsck, human edits, locks: ~10 ms) runs after every example of the entry-file fuzzer, which plants bad
# files, and after every tenth elsewhere; the cheaper checks above run after every example everywhere.
DOCTOR_EVERY = 10


def clear_pending(root: Path) -> None:
    for p in pending_dir(root / ".acpmem").glob("*.json"):
        p.unlink()


# ------------------------------------------------------------------------------------------------------------- contexts

class Ctx:
    """A vault made from the example entries, with its worker lock held (so nothing generated starts a worker)."""

    def __init__(self, folder: Path) -> None:
        from acpmem.vault.create import init_vault
        from acpmem.write import worker

        folder.mkdir(parents=True, exist_ok=True)
        v = init_vault(folder / "vault", example=True, rng=random.Random(7))
        self.root = v.root
        self.folder = folder
        v.close()
        self.fd = worker.try_worker_lock(self.root / ".acpmem")
        self._no_watch = os.environ.get("ACPMEM_NO_WATCH")
        os.environ["ACPMEM_NO_WATCH"] = "1"   # generated settings may ask for a watcher process: none is left behind
        self.tally: Counter = Counter()    # how the examples ended: "ok", or the kind of clear error

    def note(self, outcome: str) -> None:
        self.tally[outcome] += 1

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def done(self) -> None:
        self.close()
        if self._no_watch is None:
            os.environ.pop("ACPMEM_NO_WATCH", None)
        else:
            os.environ["ACPMEM_NO_WATCH"] = self._no_watch


def hyp_settings(n: int, **kw):
    return settings(max_examples=n, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck), **kw)


# ----------------------------------------------------------------------------------------------------- the command line

@contextmanager
def _std(stdin: bytes):
    """stdin/stdout/stderr as a real process has them: UTF-8, strict on stdout, backslashreplace on stderr."""
    old = sys.stdin, sys.stdout, sys.stderr
    out, err = io.BytesIO(), io.BytesIO()
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8", errors="strict", write_through=True)
    sys.stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
    wrappers = sys.stdin, sys.stdout, sys.stderr
    try:
        yield out, err
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
        for w in wrappers:    # detached, so closing the wrapper does not close the bytes we read
            try:
                w.flush()
            except ValueError:
                pass
            w.detach()


def run_cli(argv: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    """One command line through ``acpmem.cli.main.main`` (what the console scripts call), in this process."""
    from acpmem.cli.main import main

    env = os.environ
    saved = env.get("ACPMEM_DEBUG")
    env.pop("ACPMEM_DEBUG", None)
    try:
        with _std(stdin) as (out, err):
            code = main(list(argv), "acpmem")
    finally:
        if saved is not None:
            env["ACPMEM_DEBUG"] = saved
    return code, out.getvalue().decode("utf-8"), err.getvalue().decode("utf-8", "replace")


def assert_one_error_line(code: int, err: str, allowed=(0, 1, 2), *, prefix: str = "Error: ") -> None:
    assert code in allowed, (code, err)
    assert "Traceback" not in err and "internal error" not in err, err
    if code != 0:
        assert err.count("\n") == 1, err
        if err.startswith('{"error": ') and prefix == "Error: ":   # asked for --json: the error object
            import json

            e = json.loads(err)["error"]
            assert e["exit"] == code and e["message"] and e["hint"] and e["code"], err
            return
        assert err.startswith(prefix), err
        if prefix == "Error: ":
            assert " — " in err, err


def _opt(name, values):
    """``name value``, or ``name=value`` for a long option."""
    if name.startswith("--"):
        return st.one_of(values.map(lambda v: [name, v]), values.map(lambda v: [f"{name}={v}"]))
    return values.map(lambda v: [name, v])


def cli_argv(root: Path):
    vault = ["--vault", str(root)]
    session = st.one_of(st.just("s1"), ARGV_TEXT)
    typ = st.one_of(st.sampled_from(["fact", "lesson"]), ARGV_TEXT)
    note = st.one_of(st.just("sqlite queue choice"), ARGV_TEXT)
    transcript = st.one_of(st.just(str(CHAT)), ARGV_TEXT)
    commit = st.tuples(_opt("--type", typ), _opt("--note", note), _opt("--importance", field(st.just("5"), ARGV_INT)),
                       _opt("--session", session), _opt("--seq", field(st.just("3"), ARGV_INT)),
                       st.one_of(st.just([]), _opt("--transcript", transcript)),
                       st.sampled_from([[], ["--json"]])).map(lambda t: ["commit", *sum(t, [])])
    lst = st.tuples(st.sampled_from([[], ["--format", "prompt"], ["--json"], ["--format", "markdown"]]),
                    st.one_of(st.just([]), _opt("--budget", ARGV_INT)),
                    st.one_of(st.just([]), _opt("--session", session))).map(lambda t: ["list", *sum(t, [])])
    recall = st.tuples(st.one_of(st.just(GOOD_QUERY), ARGV_TEXT), st.one_of(st.just([]), _opt("-n", ARGV_INT)),
                       st.one_of(st.just([]), _opt("--type", typ)), st.one_of(st.just([]), _opt("--session", session)),
                       st.sampled_from([[], ["--json"]])).map(lambda t: ["recall", *sum(t[1:], []), "--", t[0]])
    at = st.one_of(st.sampled_from(["2026-12-01T00:00:00Z", "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+01:00",
                                    "2026-13-01T00:00:00Z", "now"]), ARGV_TEXT)
    score = st.tuples(st.one_of(st.just([]), _opt("--seed", ARGV_INT)), st.one_of(st.just([]), _opt("--top", ARGV_INT)),
                      st.one_of(st.just([]), _opt("--at", at)),
                      st.sampled_from([[], ["--json"]])).map(lambda t: ["score", *sum(t, [])])
    surface = st.tuples(_opt("--session", session), st.one_of(st.just([]), _opt("--seed", ARGV_INT)),
                        st.one_of(st.just([]), _opt("--at", at))).map(lambda t: ["surface", *sum(t, []), "--json"])
    show = ARGV_TEXT.map(lambda i: ["show", "--", i])
    log = st.tuples(ARGV_TEXT, _opt("-n", ARGV_INT)).map(lambda t: ["log", *t[1], "--", t[0]])
    extract = st.tuples(_opt("--note", note), _opt("--importance", field(st.just("5"), ARGV_INT)),
                        _opt("--seq", field(st.just("3"), ARGV_INT)), _opt("--session", session),
                        _opt("--type", typ)).map(lambda t: ["extract", "--dry-run", "--extractor", "offline",
                                                            "--transcript", str(CHAT), *sum(t, [])])
    command = st.one_of(commit, commit, lst, recall, score, surface, show, log, extract)
    return command.map(lambda argv: vault + argv)


def hook_stdin(root: Path):
    """Claude Code hook events on stdin: plausible events with hostile fields, and bytes that are no event at all."""
    event = st.fixed_dictionaries({"hook_event_name": st.sampled_from(["SessionStart", "UserPromptSubmit"])},
                                  optional={"session_id": field(st.just("h1"), st.one_of(TEXT, VALUE)),
                                            "transcript_path": field(st.just(str(CHAT)), st.one_of(TEXT, VALUE)),
                                            "cwd": field(st.just(str(root)), st.one_of(TEXT, VALUE)),
                                            "source": VALUE})
    raw = st.sampled_from([b"", b"{", b"\xff\xfe", b"[]", b"null", b'{"hook_event_name": "SessionStart", "x": ' +
                           b"1" * 5000 + b"}", b'{"hook_event_name": "SessionStart", "x": ' + b"[" * 100_000,
                           b'{"hook_event_name": "SessionStart", "session_id": "s", "x": NaN}'])
    return st.one_of(event.map(lambda e: _dump(e).encode("utf-8")), raw)


def fuzz_cli(ctx: Ctx, n: int) -> int:
    """Generated command lines (commit, list, recall, score, surface, show, log, extract --dry-run, hook): one clear
    answer each, and nothing bad on disk or in the index after it."""
    root = ctx.root
    count = [0]

    hook = st.tuples(st.sampled_from([["--vault", str(root)], []]), hook_stdin(root)).map(
        lambda t: ([*t[0], "hook", "claude-code"], t[1]))    # without --vault, the event's cwd finds the vault

    @hyp_settings(n)
    @given(st.one_of(cli_argv(root).map(lambda a: (a, b"")), hook))
    def run(case):
        argv, stdin = case
        count[0] += 1
        code, out, err = run_cli(argv, stdin)
        if "hook" in argv:
            assert_one_error_line(code, err, (0, 1), prefix="Error: ")
        else:
            assert_one_error_line(code, err)
        ctx.note(f"exit {code}")
        check_vault(root, doctor=count[0] % DOCTOR_EVERY == 0)
        clear_pending(root)

    run()
    return count[0]


# ------------------------------------------------------------------------------------------------------ MCP, in process

def mcp_args():
    """Tool calls as an MCP client sends them: (tool, arguments, _meta). Mostly the right keys with plausible or
    hostile values — the model's in the arguments, the host's session, seq and transcript in ``_meta`` under
    ``acpmem/`` — sometimes anything at all in either."""
    commit = st.fixed_dictionaries({
        "type": field(st.sampled_from(["fact", "decision"])), "note": field(st.just("sqlite queue choice"), TEXT),
        "importance": field(st.sampled_from([5, "7", 1, 10]))})
    host = st.fixed_dictionaries({
        "session": st.one_of(st.none(), field(st.just("host-1"))),
        "seq": st.one_of(st.none(), field(st.sampled_from([3, "4", 0, MAX]))),
        "transcript": st.one_of(st.none(), field(st.just(str(CHAT)), TEXT))}).map(
        lambda d: {f"acpmem/{k}": v for k, v in d.items() if v is not None})
    recall = st.fixed_dictionaries({"query": field(st.just(GOOD_QUERY), TEXT)},
                                   optional={"limit": field(st.sampled_from([1, 3, "2", 20]))})
    keys = ["type", "note", "importance", "session", "seq", "transcript", "query", "limit", "extra", ""]
    hostile = st.dictionaries(st.sampled_from(keys), VALUE, max_size=5)
    hostile_meta = st.one_of(st.none(), st.dictionaries(st.sampled_from([f"acpmem/{k}" for k in keys] + ["x"]),
                                                        VALUE, max_size=4), VALUE)
    return st.one_of(st.tuples(st.just("memory_commit"), commit, host),
                     st.tuples(st.just("memory_recall"), recall, hostile_meta),
                     st.tuples(st.just("memory_commit"), hostile, hostile_meta),
                     st.tuples(st.just("memory_commit"), commit, hostile_meta),
                     st.tuples(st.just("memory_recall"), hostile, st.none()),
                     st.tuples(st.sampled_from(["memory_write", "", "x" * 300]), commit, host))


def fuzz_mcp(ctx: Ctx, n: int) -> int:
    """``MemoryService.call`` — what the MCP server runs for each tool call — with generated tool arguments and host
    arguments: a text answer or an ``AcpmemError``, and nothing bad on disk."""
    from acpmem.core.errors import AcpmemError
    from acpmem.integrations.mcp_server import MemoryService

    svc = MemoryService(ctx.root, "mcp-fuzz")
    count = [0]

    @hyp_settings(n)
    @given(mcp_args())
    def run(call):
        name, args, meta = call
        count[0] += 1
        try:
            answer = svc.call(name, args, meta)
            assert isinstance(answer, str) and answer
            ctx.note("answered")
        except AcpmemError as exc:
            assert exc.message, exc
            ctx.note(type(exc).__name__)
        check_vault(ctx.root, doctor=count[0] % DOCTOR_EVERY == 0)
        clear_pending(ctx.root)

    run()
    return count[0]


# ------------------------------------------------------------------------------------------------------- the Python API

def mutated(base: dict, nasty: dict):
    """``base`` (valid keyword arguments) with none, one or two of them replaced by (or added as) hostile values."""
    return st.lists(st.sampled_from(sorted(nasty)), max_size=2, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: nasty[k] for k in keys}).map(lambda d: {**base, **d}))


def api_calls():
    submit = mutated({"type": "fact", "note": "sqlite queue choice", "importance": 5, "session": "api-1", "seq": 3},
                     {"type": VALUE, "note": TEXT, "importance": SCALAR, "session": SCALAR, "seq": SCALAR,
                      "transcript": SCALAR, "host_tools": SCALAR})
    recall = mutated({"query": GOOD_QUERY}, {"query": SCALAR, "limit": SCALAR, "session": SCALAR,
                                             "types": st.one_of(st.none(), st.lists(TEXT, max_size=2)),
                                             "include_superseded": st.booleans()})
    resident = mutated({}, {"session": SCALAR, "budget_tokens": SCALAR, "seed": SCALAR, "refresh": st.booleans()})
    scores = mutated({}, {"top_n": SCALAR, "seed": SCALAR, "session": SCALAR})
    surface = mutated({"session": "api-5"}, {"session": SCALAR, "seed": SCALAR})
    make = mutated({"types": ("fact", "lesson"), "type": "fact", "note": "x", "importance": 5, "session": "s",
                    "seq": 1, "transcript": None, "host_tools": None, "lang": "en",
                    "created": "2026-11-29T12:00:00Z", "request_id": "r-fuzz0001"},
                   {"type": VALUE, "note": SCALAR, "importance": SCALAR, "session": SCALAR, "seq": SCALAR,
                    "transcript": SCALAR, "host_tools": SCALAR})
    show = mutated({"prefix": "6ta"}, {"prefix": TEXT})
    return st.one_of(*(s.map(lambda kw, name=name: (name, kw)) for name, s in (
        ("submit", submit), ("recall", recall), ("resident_index", resident), ("scores", scores),
        ("surface", surface), ("make_request", make), ("show", show))))


def fuzz_api(ctx: Ctx, n: int) -> int:
    """The Python API (``submit``, ``make_request``, ``recall``, ``resident_index``, ``scores``, ``surface``,
    ``show``) with generated arguments: a result or an ``AcpmemError``."""
    from acpmem.core.errors import AcpmemError
    from acpmem.vault import reader
    from acpmem.read import resident, retrieval
    from acpmem.vault.writer import Vault
    from acpmem.write import requests
    from acpmem.write.submit import submit

    funcs = {"submit": submit, "recall": retrieval.recall, "resident_index": resident.resident_index,
             "scores": reader.scores, "surface": retrieval.surface, "show": reader.show}
    count = [0]

    @hyp_settings(n)
    @given(api_calls())
    def run(call):
        name, kw = call
        count[0] += 1
        v = Vault(ctx.root)
        try:
            if name == "make_request":
                requests.make_request(**kw)
            else:
                funcs[name](v, **kw)
            ctx.note(f"{name}: ok")
        except AcpmemError as exc:
            ctx.note(f"{name}: {type(exc).__name__}")
        finally:
            v.close()
        check_vault(ctx.root, doctor=count[0] % DOCTOR_EVERY == 0)
        clear_pending(ctx.root)

    run()
    return count[0]


# ---------------------------------------------------------------------------------------------------------- fork output

def write_arguments():
    """``memory_write`` arguments: mostly well formed with hostile text, sometimes hostile in shape."""
    content = st.one_of(st.sampled_from(["- The queue uses sqlite.", "- Fuzzed entry body " * 3]), TEXT,
                        TEXT.map(lambda t: "- sqlite queue " + t))
    plausible = st.fixed_dictionaries({"content": content}, optional={
        "title": st.one_of(st.sampled_from(["Queue is sqlite", ""]), TEXT),
        "supersedes": st.one_of(st.just([]), st.lists(TEXT, max_size=2), VALUE)})
    hostile = st.fixed_dictionaries({}, optional={"content": VALUE, "title": VALUE, "supersedes": VALUE,
                                                  "extra": VALUE})
    return st.one_of(plausible, plausible, plausible, hostile, VALUE)


def fuzz_fork(ctx: Ctx, n: int) -> int:
    """Generated ``memory_write`` argument objects through ``draft_from_calls`` (and, when they make entries, the
    commit): entries or a malformed-call ``ExtractionError``; what is written parses and is findable."""
    from acpmem.core.errors import ExtractionError
    from acpmem.write import draft as drafting, fork, requests
    from acpmem.write.llm import ToolCall
    from acpmem.vault.writer import Vault

    count = [0]

    @hyp_settings(n)
    @given(st.lists(st.tuples(st.sampled_from(["memory_write"] * 5 + ["host_read", "other"]), write_arguments()),
                    min_size=1, max_size=2))
    def run(calls):
        count[0] += 1
        v = Vault(ctx.root)
        try:
            req = requests.make_request(types=v.settings.types, type="fact", note="fuzz", importance=5,
                                        session="fork-s", seq=3, transcript=None, host_tools=None, lang="en",
                                        created=v.now(), request_id=requests.new_request_id(v.rng))
            tool_calls = [ToolCall(f"c{i}", name, args if isinstance(args, dict) else None, _dump(args),
                                   None if isinstance(args, dict) else "arguments must be a JSON object")
                          for i, (name, args) in enumerate(calls)]
            try:
                draft = drafting.draft_from_calls(v, req, tool_calls, "llm:fuzz", {"host_read"})
            except ExtractionError as exc:
                assert exc.data.get("reason") == "malformed_call"
                ctx.note("malformed_call")
                return
            ctx.note(f"{len(draft.entries)} entries")
            if draft.entries:
                fork.commit_draft(v, req, draft, "fuzz-model", "llm:fuzz")
                for e in draft.entries:
                    assert v.entry_path(e).is_file()
        finally:
            v.close()
        check_vault(ctx.root, doctor=count[0] % DOCTOR_EVERY == 0)

    run()
    return count[0]


# ---------------------------------------------------------------------------------------------------------- entry files

RAW_SCALARS = ["1" * 5000, "99999999999999999999", str(MAX), str(MAX + 1), "-1", "0", "1.0e999", "-1.0e999", ".nan",
               ".inf", "'9-1'", "'1-2'", "'0-9223372036854775808'", "m12", "b3", "m99999999999999999999",
               "[1, [2, [3]]]",
               "{a: 1, b: [x]}", "&a x", "*a", "!!python/object:os.system", "2026-11-29T12:00:00Z",
               "9999-12-31T23:59:59-23:59", "'2026-11-29T12:00:00Z\n'", "null", "~", "true", "no", "012", "''",
               '"\\x00"', '"\\u202e"', '"\\ud800"', '"a\\nb"', "|", ">", "-", "[" * 200 + "]" * 200, "1.5", "5", "3"]
KEYS = ["id", "title", "type", "importance", "created", "last_read", "tier", "source", "supersedes",
        "superseded_by", "tags", "note", "x"]


def _yaml_scalar(value) -> str:
    import yaml

    try:
        text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**9)
    except (ValueError, yaml.YAMLError):
        return "x"
    if text.endswith("\n...\n"):   # a document end marker after a lone scalar
        text = text[:-5]
    return text.strip()


def entry_text():
    """A generated entry file: mostly plausible frontmatter with some fields hostile, as raw text."""
    base = {"id": "gen001", "title": "Generated entry about the sqlite queue", "type": "fact", "importance": "5",
            "created": "2026-11-29T12:00:00Z", "tier": "3"}
    override = st.dictionaries(st.sampled_from(KEYS),
                               st.one_of(st.sampled_from(RAW_SCALARS), VALUE.map(_yaml_scalar)), max_size=3)
    citation = st.one_of(st.just(None), st.lists(st.tuples(
        st.one_of(st.just("s"), st.sampled_from(RAW_SCALARS), VALUE.map(_yaml_scalar)),
        st.one_of(st.just("3"), st.sampled_from(RAW_SCALARS), VALUE.map(_yaml_scalar))), max_size=2))
    body = st.one_of(st.just("A generated body.\n"), TEXT.map(lambda t: t + "\n"))

    def build(parts):
        over, cites, text, ident = parts
        meta = {**base, "id": ident, **over}
        lines = [f"{k}: {v}" for k, v in meta.items()]
        if cites is not None:
            lines.append("citation:")
            for s, q in cites:
                lines += [f"- session: {s}", f"  seq: {q}"]
        return "---\n" + "\n".join(lines) + "\n---\n" + text

    return st.tuples(override, citation, body, st.sampled_from(["gen001", "gen002"])).map(build)


def fuzz_entry_files(ctx: Ctx, n: int) -> int:
    """Generated entry files written beside the good ones: each is an entry or a reported problem; list, recall and
    the prompt index keep working; doctor's errors name exactly the bad files; nothing unstorable is indexed."""
    from acpmem.core.entryfile import parse_entry_bytes
    from acpmem.core.errors import EntryInvalid
    from acpmem.search.catalog import secret_kind
    from acpmem.vault.writer import Vault

    root = ctx.root
    v = Vault(root)
    types = v.settings.types
    existing = {e.id for e in v.load().entries}
    v.close()
    count = [0]

    @hyp_settings(n)
    @given(st.lists(entry_text(), min_size=1, max_size=2))
    def run(texts):
        count[0] += 1
        paths = []
        for i, text in enumerate(texts):
            rel = f"entries/zz-gen{i}.md"
            (root / rel).write_bytes(text.encode("utf-8", "surrogatepass"))
            paths.append(rel)
        bad, seen = set(), set(existing)
        for rel in paths:   # the catalog's own rules, in path order: first file with an id wins
            try:
                e = parse_entry_bytes((root / rel).read_bytes(), rel, None)
            except EntryInvalid:
                bad.add(rel)
                continue
            if e.type not in types or e.id in seen or secret_kind(e):
                bad.add(rel)
                continue
            seen.add(e.id)
        ctx.note(f"{len(bad)} bad of {len(paths)}")
        try:
            check_vault(root, bad=bad, doctor=True)
        finally:
            for rel in paths:
                (root / rel).unlink()

    run()
    return count[0]


# ---------------------------------------------------------------------------------------------------------- transcripts

def _message():
    """A chat message: usually well formed with hostile text, often hostile in its shape (role, blocks, seq, …)."""
    block = st.fixed_dictionaries({"type": field(st.sampled_from(["text", "tool_use", "tool_result", "image",
                                                                  "document", "thinking"]))},
                                  optional={"text": field(st.just("sqlite queue")), "content": VALUE, "input": VALUE,
                                            "name": VALUE, "id": VALUE, "source": VALUE, "is_error": VALUE})
    content = st.one_of(TEXT, st.lists(st.one_of(block, TEXT), max_size=3), VALUE)
    plain = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]),
                                   "content": st.one_of(st.just("we use the sqlite queue"), TEXT,
                                                        TEXT.map(lambda t: "sqlite queue " + t))})
    odd = st.fixed_dictionaries({"role": field(st.sampled_from(["user", "assistant", "system", "tool"]))},
                                optional={"content": field(st.just("we use the sqlite queue"), content),
                                          "seq": INTS, "tool_calls": VALUE, "tool_call_id": VALUE, "name": VALUE})
    return st.one_of(plain, plain, odd)


def _dump(value) -> str:
    try:
        return json.dumps(value, default=str)
    except ValueError:       # an int of more than 4,300 digits
        return '{"role": "user", "content": "x", "seq": ' + "9" * 5000 + "}"


def _dsh_event():
    """A DSH log line in the host's shape (``type`` first, then ``seq``): the kinds acpmem reads (messages,
    compaction summaries and checkpoints), the normal vocabulary it skips, packed chunk rows, unknown kinds, and
    hostile fields in each."""
    text_blocks = st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": field(st.just("sqlite queue"))}),
                           max_size=2)
    op = field(st.one_of(st.just("append"), st.fixed_dictionaries(
        {"op": st.just("replace"), "start": field(st.integers(0, 8)), "end": field(st.integers(0, 8))})))
    data = st.one_of(
        st.fixed_dictionaries({"content": field(text_blocks)},
                              optional={"source": field(st.fixed_dictionaries(
                                  {"plugin": st.just("compact"), "compactionId": field(st.just("c-1"))}))}),
        st.fixed_dictionaries({"message": field(st.fixed_dictionaries({"content": field(st.lists(st.one_of(
            st.fixed_dictionaries({"type": st.just("tool-call"), "id": field(st.just("k1")),
                                   "name": field(st.just("read")), "arguments": VALUE}),
            st.fixed_dictionaries({"type": st.just("tool-result"), "toolCallId": field(st.just("k1")),
                                   "content": field(text_blocks)})), max_size=3))}))}),
        st.fixed_dictionaries({"summary": field(text_blocks)},
                              optional={"compactionId": field(st.just("c-1")), "kernelBlockId": field(st.sampled_from(
                                  ["b1", "b2", "b999999999", "x"])), "tier": field(st.integers(0, 4)),
                                  "topic": VALUE, "shadowedSeqs": field(st.lists(st.one_of(
                                      st.integers(0, 9), st.lists(st.integers(0, 9), min_size=2, max_size=2)),
                                      max_size=4)),
                                  "shadowedRange": VALUE, "parentBlockIds": field(st.lists(st.sampled_from(["c-1", "b1"]), max_size=2)),
                                  "effectiveMessageIds": field(st.lists(st.sampled_from(["1", "2#k1", "x", "9" * 30]),
                                                                        max_size=3))}),
        VALUE)
    event = st.fixed_dictionaries({"type": field(st.sampled_from(["user/message", "assistant/message", "tool/result",
                                                                  "compaction/summary", "compaction/end",
                                                                  "compaction/prune", "turn/start",
                                                                  "plugin/other", "session"])),
                                   "seq": field(st.integers(0, 12)), "data": data},
                                  optional={"surfaceOp": op, "sourceEventSeqs": VALUE})
    row = st.fixed_dictionaries({"type": st.sampled_from(["text-chunks", "reasoning-chunks", "tool-call-chunks"]),
                                 "seq0": field(st.integers(0, 12)),
                                 "data": field(st.fixed_dictionaries({}, optional={
                                     "texts": field(st.lists(st.just("ab"), max_size=4)),
                                     "args": field(st.lists(st.just("{"), max_size=4))}))})
    return st.one_of(event, row)


def _pi_state():
    block = st.fixed_dictionaries({"blockId": field(st.sampled_from(["b1", "b2", "b3"])),
                                   "summary": field(st.just("sqlite queue summary"))},
                                  optional={"tier": field(st.integers(0, 4)), "topic": VALUE, "active": VALUE,
                                            "effectiveMessageIds": field(st.lists(st.sampled_from(
                                                ["a1", "a2#t", "m00001", "zz"]), max_size=3)),
                                            "directBlockIds": VALUE})
    state = st.fixed_dictionaries({"blocks": field(st.lists(block, max_size=3))},
                                  optional={"messageRefs": field(st.just({"byRef": {"m00001": "a1"}}))})
    return st.one_of(state, state.map(lambda p: {"version": 1, "savedAt": 1, "id": "s", "payload": p}), VALUE)


def _compressed(text: str) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(text.encode("utf-8", "surrogatepass"))


def transcript_text():
    """A transcript file's content: text, bytes (a zstd-compressed log, maybe cut short), or ``(log, kernel state)``
    for a pi session."""
    header = {"type": "session", "version": 0, "id": "s", "createdAt": 1, "delegationDepth": 0}
    dsh = st.one_of(st.lists(_dsh_event(), max_size=6),   # with and without seqs (then seq = position)
                    st.lists(_dsh_event().map(lambda e: {k: v for k, v in e.items() if k != "seq"}), min_size=1,
                             max_size=8),
                    st.lists(_dsh_event(), max_size=6).map(lambda es: [header, *es])   # the header line first
                    ).map(lambda es: "\n".join(_dump(e) for e in es))
    # pi's real shape: a header, then entries with ids and parentIds (a tree: a parent may be any earlier entry,
    # or one that is not there), messages, custom messages, branch summaries and compactions among them
    pi_row = st.fixed_dictionaries({"type": field(st.sampled_from(["message", "custom_message", "model_change",
                                                                   "compaction", "branch_summary"]))},
                                   optional={"id": field(st.sampled_from(["a1", "a2", "a3"])),
                                             "parentId": field(st.sampled_from(["a0", "a1", "a2", "zz", None])),
                                             "message": field(_message()), "content": VALUE, "summary": VALUE,
                                             "firstKeptEntryId": field(st.sampled_from(["a0", "a1", "zz"])),
                                             "details": VALUE})
    pi = st.lists(pi_row, max_size=4).map(
        lambda rs: "\n".join(_dump(r) for r in [{"type": "session", "version": 3, "id": "p", "cwd": "/w"},
                                                {"type": "message", "id": "a0", "parentId": None,
                                                 "message": {"role": "user", "content": "hi"}},
                                                *rs]))
    return st.one_of(
        dsh, dsh.map(_compressed),
        st.tuples(dsh, st.integers(0, 200)).map(lambda t: _compressed(t[0])[:max(4, len(_compressed(t[0])) - t[1])]),
        st.tuples(pi, _pi_state()),
        st.sampled_from([
            '[{"role": "system", "id": "acp_summary_b3", "content": "[Compressed conversation section] — t\\nsqlite"}]',
            '[{"role": "user", "content": "[Compressed conversation section]\\nx\\n\\n[b12 | 3 messages | topic: \\"q\\"]"}]',
            '{"type": "user", "isCompactSummary": true, "uuid": "u1", "message": {"role": "user", "content": "s"}}',
            b"\x28\xb5\x2f\xfd" + b"\x00" * 40]),
        _transcript_text_plain())


def _transcript_text_plain():
    messages = st.lists(_message(), max_size=4)
    cc_event = st.fixed_dictionaries({"type": field(st.sampled_from(["user", "assistant", "summary", "system"]))},
                                     optional={"message": field(_message()), "uuid": field(st.sampled_from(["u1", "u2",
                                                                                                            "u3"])),
                                               "parentUuid": field(st.sampled_from(["u1", "u2", None])),
                                               "isSidechain": VALUE})
    return st.one_of(
        messages.map(_dump),
        st.tuples(messages, VALUE).map(lambda t: _dump({"messages": t[0], "system": t[1]})),
        messages.map(lambda ms: "\n".join(_dump(m) for m in ms)),
        st.lists(cc_event, max_size=4).map(lambda es: "\n".join(_dump(e) for e in es)),
        st.sampled_from(['{"seq": ' + "1" * 5000 + "}", "[" * 100_000, "\ufeff[]", "NaN", '[{"role": "user", '
                         '"content": "x", "seq": NaN}]', "\x00", '[{"role": "user", "content": "\\ud800"}]',
                         '[{"role": "user", "content": "sqlite queue \\udcff \\ud800"}]']),
        TEXT)


def fuzz_transcripts(ctx: Ctx, n: int) -> int:
    """Generated transcript files through ``read_transcript``: a transcript or a ``TranscriptError``; a transcript
    converts to chat messages, and the offline extractor cites only valid seqs from it."""
    from acpmem.core import limits
    from acpmem.core.errors import TranscriptError
    from acpmem.write.offline import extract_offline
    from acpmem.hosts.transcripts import close_tool_calls, openai_messages, read_transcript

    from acpmem.core.blocks import valid_block_id

    path = ctx.folder / "t.json"
    state = ctx.folder / "t.json.acp.json"
    count = [0]

    @hyp_settings(n)
    @given(transcript_text())
    def run(text):
        count[0] += 1
        state.unlink(missing_ok=True)
        if isinstance(text, tuple):   # a pi log and the kernel state beside it
            text, kernel = text
            state.write_text(_dump(kernel))
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
        try:
            t = read_transcript(path)
        except TranscriptError:
            ctx.note("TranscriptError")
            return
        ctx.note(f"read ({t.format}/{t.container}{', blocks' if t.blocks else ''})")
        for m in t.messages:
            assert limits.int_between(m.seq, 0, MAX), m.seq
            assert isinstance(t.text(m), str)
        for b in t.blocks:
            assert (b.id is None or valid_block_id(b.id)) and b.tier in (None, 1, 2, 3) \
                and isinstance(b.summary, str), b
            assert all(limits.int_between(s, 0, MAX) for s in b.seqs) and list(b.seqs) == sorted(set(b.seqs)), b
            if b.id is not None:                # an id lost on the wire is not guessed, so it cannot be named
                assert t.block(b.id).id == b.id
        close_tool_calls(openai_messages(t), "ack")
        if t.messages:
            prefix = t.upto(max(m.seq for m in t.messages))
            out = extract_offline(prefix, "sqlite queue")
            assert all(limits.int_between(s, 0, MAX) for s in out.seqs), out.seqs
            assert limits.is_utf8(out.title + out.body), "the offline entry cannot be written as UTF-8"

    run()
    return count[0]


# ---------------------------------------------------------------------------------------------------------- acpmem.toml

_TOML_KEYS = {"vault": ["types", "language"], "score": ["importance_weight", "recency_divisor_days", "recency_cap",
                                                         "jitter_max", "top_n"],
              "index": ["budget_tokens", "watch", "watch_min_entries", "watch_idle_minutes"],
              "surface": ["enabled", "top_n", "entry_cap_bytes", "session_budget_bytes"], "recall": ["limit"],
              "extraction": ["base_url", "model", "api_key_env", "timeout_seconds", "max_retries", "extractor",
                             "max_entry_bytes"],
              "git": ["lock_timeout_seconds", "foreign_lock_wait_seconds", "remote"],
              "layers": ["user_vault", "user_share"],
              # no model nor base_url: a generated endpoint must never be called (tests reach no network)
              "embeddings": ["dimensions", "timeout_seconds", "batch_size", "languages", "weight"], "nope": ["x"]}


def _toml_value():
    scalar = st.one_of(
        st.integers().map(str), st.sampled_from(["0", "-1", "1", "5", "99999999999999999999", "9" * 5000, "nan",
                                                 "inf", "-inf", "+nan", "0.0", "-0.0", "1e400", "0.5", "30.0", "true",
                                                 "false", '""', '"x"', '"\\u0000"', '"a\\nb"', '"\\u202e"',
                                                 '"OPENAI_API_KEY"', '"-oops"', '"offline"', '"zh"', "1979-05-27"]),
        st.floats().map(lambda f: repr(f) if math.isfinite(f) else {"nan": "nan", "inf": "inf"}.get(repr(f), "-inf")),
        TEXT.map(lambda t: json.dumps(t)))
    return st.recursive(scalar, lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(st.tuples(st.sampled_from(["a", "b"]), inner), max_size=2, unique_by=lambda t: t[0]).map(
            lambda kv: "{" + ", ".join(f"{k} = {v}" for k, v in kv) + "}")), max_leaves=4)


def _plausible() -> dict:
    from acpmem.core.settings import Settings

    kinds = {bool: ["true", "false"], int: ["0", "1", "2", "5", "100", "256", "1000000"],
             float: ["0.0", "0.001", "0.5", "1.0", "30.0", "3600.0", "36500.0"]}
    text = {"base_url": ['""', '"http://127.0.0.1:9"'], "model": ['""', '"m"'],
            "api_key_env": ['"OPENAI_API_KEY"', '""'],
            "extractor": ['"offline"', '"auto"'], "remote": ['"origin"', '"team"'],
            "user_vault": ['""', '"none"', '"/nonexistent/acpmem-user-vault"'],
            "policy": ['"auto"', '"review"', '"off"'], "stream": ['"auto"', '"on"', '"off"'],
            "answer": ['"tools"', '"json"'],
            "languages": ['"en"', '"en,zh"'], "query_prefix": ['""', '"query: "'],
            "document_prefix": ['""', '"passage: "', '"search_document: "'],
            "similarity": ['"auto"', '"lexical"', '"embedding"', '"model"'],
            "scoped": ['"decision,lesson,fact"', '""', '"fact"']}
    out = {"vault": {"types": ['["fact", "lesson", "decision"]', '["decision", "lesson", "fact", "user-preference", '
                               '"reference"]'], "language": ['"en"', '"zh"']}}
    for name, section in Settings().to_json().items():
        if isinstance(section, dict):
            out[name] = {k: text.get(k) or kinds[type(v)] for k, v in section.items()}
    return out


_PLAUSIBLE = _plausible()
PLAUSIBLE_TOML = st.sampled_from(["0", "1", "2", "5", "100", "256", "1000000", "0.0", "0.001", "1.0", "30.0",
                                  "36500.0", "3600.0", "true", "false", '"offline"', '"origin"', '"OPENAI_API_KEY"',
                                  '""', '"zh"', '"en"', '["fact", "lesson", "decision"]'])


def toml_text():
    types_value = st.one_of(st.just('["decision", "lesson", "fact", "user-preference", "reference"]'), _toml_value())

    def section(name):
        if name in _PLAUSIBLE:   # most often values of the right type, at and near the ends of their range
            keys = st.lists(st.sampled_from(_TOML_KEYS[name]), max_size=3, unique=True)
            line = {k: st.sampled_from(_PLAUSIBLE[name][k]).map(lambda v, k=k: f"{k} = {v}\n")
                    for k in _TOML_KEYS[name] if k in _PLAUSIBLE[name]}
            tables = keys.flatmap(lambda ks: st.tuples(*(line[k] for k in ks)))
            plausible = tables.map(lambda lines: f"[{name}]\n" + "".join(lines))
        else:
            plausible = st.nothing()
        return st.one_of(plausible, plausible, _hostile_section(name))

    def _hostile_section(name):
        return st.dictionaries(st.sampled_from(_TOML_KEYS[name]),
                               types_value if name == "vault" else st.one_of(PLAUSIBLE_TOML, _toml_value()),
                               max_size=3).map(
            lambda kv: f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items()))

    # each section's strategy built once, not at every draw (building them was most of this fuzzer's time)
    sections = {name: section(name) for name in _TOML_KEYS}
    return st.lists(st.sampled_from(list(_TOML_KEYS)), max_size=3, unique=True).flatmap(
        lambda names: st.tuples(*(sections[n] for n in names)).map(lambda parts: "\n".join(parts)))


def _settings_problem(s) -> str | None:
    for name in ("score", "index", "surface", "recall", "extraction", "git", "layers"):
        for k, val in s.__dict__[name].to_json().items():
            if (name, k) == ("extraction", "temperature") and val == -1:
                continue   # the documented "not sent" value
            if isinstance(val, float) and not math.isfinite(val):
                return f"{name}.{k} = {val}"
            if isinstance(val, (int, float)) and not isinstance(val, bool) and (val < 0 or val > 10**12):
                return f"{name}.{k} = {val}"
    if s.score.recency_divisor_days <= 0 or s.index.budget_tokens < 1 or s.surface.entry_cap_bytes < 1 \
            or s.recall.limit < 1 or s.extraction.timeout_seconds <= 0 or s.index.watch_idle_minutes <= 0:
        return "a zero that is divided by or waited on"
    return None


def fuzz_settings(ctx: Ctx, n: int) -> int:
    """Generated ``acpmem.toml``: a file that does not load (read as the last good settings, with a warning naming
    why), or settings whose every number is in range — and then listing, the prompt index, recall, scores and surfacing all work."""
    from acpmem.core.errors import SettingsError
    from acpmem.vault import reader
    from acpmem.read import resident, retrieval
    from acpmem.vault.writer import Vault

    root = ctx.root
    toml = root / "acpmem.toml"
    original = toml.read_bytes()
    count = [0]

    @hyp_settings(n)
    @given(toml_text())
    def run(text):
        count[0] += 1
        toml.write_bytes(text.encode("utf-8", "surrogatepass"))
        try:
            v = Vault(root)
            try:
                s = v.settings
                if s.broken:   # read as the last good settings, saying why: never wedged
                    from acpmem.vault.config import vault_settings

                    try:
                        vault_settings(root)
                        raise AssertionError("a file that loads was read as broken")
                    except SettingsError as exc:
                        assert exc.message == s.broken and exc.hint
                    code, _, err = run_cli(["--vault", str(root), "list"])
                    assert code == 0 and "using the last good settings" in err, err
                    ctx.note("SettingsError")
                    return
                ctx.note("valid")
                assert _settings_problem(s) is None, _settings_problem(s)
                reader.list_entries(v)
                resident.resident_index(v, session="toml-fuzz", refresh=True)
                retrieval.recall(v, GOOD_QUERY, limit=s.recall.limit, mark_read=False)
                reader.scores(v)
                retrieval.surface(v, "toml-fuzz")
            finally:
                v.close()
        finally:
            toml.write_bytes(original)

    run()
    return count[0]


# ----------------------------------------------------------------------------------------------- local and shared state

TIMES = st.one_of(st.sampled_from(["2026-11-30T12:00:00Z", "2026-02-29T00:00:00Z", "2024-02-29T00:00:00Z",
                                   "0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "9999-12-31T23:59:59-23:59",
                                   "2026-13-01T00:00:00Z", "zzzz", "", "2026-11-30T12:00:00", "2026-11-30 12:00:00Z"]),
                  TEXT)
REQUEST = {"id": "r-fuzzst01", "created": "2026-11-29T12:00:00Z", "type": "fact", "note": "sqlite queue",
           "importance": 5, "session": "s", "seq": 3, "ack": "Noted (r-fuzzst01).", "transcript": str(CHAT),
           "host_tools": None, "lang": "en", "status": "pending", "attempts": 0, "next_attempt": None, "errors": [],
           "redacted": []}


def state_files(ids: list[str]):
    """A teammate's reads file (it arrives through sync), this clone's read log, a session's surfacing ledger, a
    pending request and the cost ledger — each plausible with hostile values, or garbage."""
    line = st.tuples(st.one_of(st.sampled_from(ids), TEXT), TIMES).map(lambda t: f"{t[0]}\t{t[1]}")
    lines = st.lists(st.one_of(line, line, TEXT), max_size=4).map(lambda ls: "\n".join(ls) + "\n")
    ledger = st.one_of(mutated({"surfaced": [], "recalled": [], "used_bytes": 0},
                               {"surfaced": VALUE, "recalled": VALUE, "used_bytes": SCALAR}).map(_dump), TEXT)
    request = st.one_of(mutated(REQUEST, {k: VALUE for k in REQUEST}), mutated(REQUEST, {k: VALUE for k in REQUEST}),
                        TEXT, st.just('{"seq": ' + "1" * 5000 + "}"))
    cost = st.one_of(mutated({"at": "2026-11-29T12:00:00Z", "model": "m", "ok": True, "prompt_tokens": 5,
                              "cached_tokens": 1, "completion_tokens": 2, "latency_s": 0.5},
                             {"prompt_tokens": SCALAR, "cached_tokens": SCALAR, "latency_s": SCALAR, "ok": SCALAR,
                              "model": VALUE, "at": VALUE}).map(_dump), TEXT, st.just("[" * 50_000))
    return st.fixed_dictionaries({"reads": lines, "log": lines, "ledger": ledger, "request": request,
                                  "costs": st.lists(cost, max_size=3).map("\n".join)})


def fuzz_state_files(ctx: Ctx, n: int) -> int:
    """Generated state files — ``reads/*.tsv`` from a teammate, ``.acpmem/reads.log``, a surfacing ledger, a pending
    request file, the cost ledger: listing, the prompt index, recall, scores, surfacing, stats and doctor keep
    working; a request either is extracted into valid entries or is reported broken, never anything in between."""
    from acpmem.core.errors import AcpmemError
    from acpmem.vault import reader
    from acpmem.read import resident, retrieval
    from acpmem.vault.writer import Vault
    from acpmem.write import requests, worker
    from acpmem.upkeep import stats

    root, state = ctx.root, ctx.root / ".acpmem"
    ctx.close()   # extraction runs here, under the worker lock
    v = Vault(root)
    ids = [e.id for e in v.load().entries]
    v.close()
    count = [0]
    @hyp_settings(n)
    @given(state_files(ids))
    def run(files):
        count[0] += 1
        rid = f"r-fuzz{count[0]:06d}"      # a new request each time: a done one is found in history ("already")
        request = files["request"]
        if isinstance(request, dict):
            request = _dump({**request, "id": rid} if request.get("id") == REQUEST["id"] else request)
        files = {**files, "request": request}
        paths = {"reads": root / "reads" / "fuzz-teammate.tsv", "log": state / "reads.log",
                 "request": pending_dir(state) / f"{rid}.json", "costs": state / "costs.jsonl"}
        paths["reads"].parent.mkdir(exist_ok=True)
        paths["request"].parent.mkdir(parents=True, exist_ok=True)
        for key, path in paths.items():
            path.write_bytes(files[key].encode("utf-8", "surrogatepass"))
        v = Vault(root)
        try:
            sdir = v.session_dir("st")
            sdir.mkdir(parents=True, exist_ok=True)
            (sdir / "surfaced.json").write_bytes(files["ledger"].encode("utf-8", "surrogatepass"))
            reader.list_entries(v)
            resident.resident_index(v, refresh=True, session="st-index")
            retrieval.recall(v, GOOD_QUERY, session="st")
            reader.scores(v)
            retrieval.surface(v, "st")
            report = stats.stats(v)
            reqs, broken = requests.list_requests(state)
            assert (len(reqs), len(broken)) in ((1, 0), (0, 1)), (reqs, broken)
            assert report["requests"]["broken"] == broken
            if reqs:
                (out,) = worker.process_now(v, [reqs[0].id], extractor="offline")
                ctx.note(f"request {out.status}" + (f" ({out.error['kind']})" if out.error else ""))
                assert not out.error or out.error["kind"] != "internal", out.error
            else:
                ctx.note("request broken")
                try:
                    requests.load_request(state, rid)
                    raise AssertionError("a broken request loaded")
                except AcpmemError:
                    pass
        finally:
            v.close()
            for path in paths.values():
                path.unlink(missing_ok=True)
            (state / "reads.log.folding").unlink(missing_ok=True)
        check_vault(root, doctor=count[0] % DOCTOR_EVERY == 0)

    run()
    return count[0]


FUZZERS = {"cli": fuzz_cli, "mcp": fuzz_mcp, "api": fuzz_api, "fork": fuzz_fork, "entry_files": fuzz_entry_files,
           "transcripts": fuzz_transcripts, "settings": fuzz_settings, "state_files": fuzz_state_files}
