"""One out-of-range number never poisons the vault: every number that reaches the index or disk — citation seqs
(ints, ranges, kernel refs), importance, tier, dates, request seqs, sizes and settings — is range-checked at every
boundary (command line, MCP, the Python API, fork output, transcripts, entry files, acpmem.toml), and one bad entry
is reported and skipped while recall, list, surface, stats and doctor keep working for the others.

Real CLI processes, the real MCP server, real git and SQLite."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from acpmem.core import limits
from acpmem.core.entryfile import parse_entry
from acpmem.core.errors import AcpmemError, EntryInvalid, SettingsError, TranscriptError, UsageError
from acpmem.vault.writer import Vault
from acpmem.write.requests import pending_dir

CHAT = str(Path(__file__).parent / "fixtures" / "transcripts" / "openai_chat.json")
TOO_BIG = "99999999999999999999"       # > 2**63 - 1: "Python int too large to convert to SQLite INTEGER"

FM = ("---\nid: {id}\ntitle: Hand edited {id}\ntype: fact\nimportance: {imp}\ncreated: 2026-11-29T12:00:00Z\n"
      "citation:\n- session: s\n  seq: {seq}\n{extra}---\nA hand edited entry about the sqlite queue.\n")


def _entry(**kw) -> str:
    d = {"id": "bad001", "imp": 5, "seq": 1, "extra": ""}
    d.update(kw)
    return FM.format(**d)


# ---------------------------------------------------------------------------------------------------------- entry files

BAD_SEQS = {
    "int over 2**63-1": TOO_BIG,
    "int just over": str(2**63),
    "range end over": f"'1-{TOO_BIG}'",
    "range start over": f"'{TOO_BIG}-{TOO_BIG}1'",
    "range reversed": "'9-1'",
    "message ref over": f"m{TOO_BIG}",
    "block ref over": f"b{TOO_BIG}",
    "range with unicode digits": "'١-٣'",
    "range with a trailing newline": '"1-2\\n"',
    "5000 digits": "1" * 5000,
    "negative": "-1",
    "float": "1.5",
}


@pytest.mark.parametrize("seq", list(BAD_SEQS.values()), ids=list(BAD_SEQS))
def test_an_entry_file_with_an_out_of_range_seq_is_invalid(seq):
    with pytest.raises(EntryInvalid) as info:
        parse_entry(_entry(seq=seq), "entries/bad001.md")
    assert info.value.path == "entries/bad001.md"


@pytest.mark.parametrize("seq", ["0", str(limits.MAX_SEQ), "'1270-1290'", "'7-7'", f"'0-{limits.MAX_SEQ}'", "m12",
                                 "b3", f"m{limits.MAX_SEQ}"])
def test_seqs_at_the_bounds_are_valid(seq):
    e = parse_entry(_entry(seq=seq), "entries/ok.md")
    assert limits.valid_seq(e.citation[0].seq)


@pytest.mark.parametrize("extra, field", [
    ("x: " + "1" * 5000 + "\n", None),                         # int("1"*5000) raises ValueError, not EntryInvalid
    ("x: " + TOO_BIG + "\n", "x"),
    ("x: 1.0e999\n", "x"),                                     # inf
    ("source: {request: r-1, n: " + TOO_BIG + "}\n", "source"),
    ("x: [1, [2, [" + TOO_BIG + "]]]\n", "x"),
])
def test_numbers_a_person_adds_must_fit_too(extra, field):
    with pytest.raises(EntryInvalid) as info:
        parse_entry(_entry(extra=extra), "entries/bad001.md")
    if field:
        assert info.value.field == field


@pytest.mark.parametrize("created", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+01:00",
                                     '"2026-11-29T12:00:00Z\\n"', "２０２６-11-29T12:00:00Z"])
def test_a_time_must_be_expressible_in_utc(created):
    text = _entry().replace("created: 2026-11-29T12:00:00Z", f"created: {created}")
    with pytest.raises(EntryInvalid) as info:
        parse_entry(text, "entries/bad001.md")
    assert info.value.field == "created"


def test_an_id_with_a_trailing_newline_is_invalid():
    with pytest.raises(EntryInvalid) as info:
        parse_entry(_entry(id='"bad001\\n"'), "entries/bad001.md")
    assert info.value.field == "id"


def _commands(cli, root: Path):
    run = lambda *a: cli("memory", "--vault", str(root), *a)  # noqa: E731
    return {"recall": run("recall", "sqlite queue"), "list": run("list", "--json"),
            "prompt": run("list", "--format", "prompt", "--session", "b1"), "stats": run("stats", "--json"),
            "surface": run("surface", "--session", "b2", "--json"), "doctor": run("doctor")}


@pytest.mark.parametrize("seq, field", [(TOO_BIG, "citation"), (f"'1-{TOO_BIG}'", "citation"), ("'9-1'", "citation"),
                                        (f"m{TOO_BIG}", "citation"), ("1" * 5000, None)])
def test_cli_a_hand_edited_seq_never_takes_recall_down(example_vault, cli, seq, field):
    """The reported reproduction: a seq of 99999999999999999999 in a file made every recall fail with
    OverflowError while doctor exited 0. Now the file is reported and skipped; everything else works."""
    root = example_vault.root
    bad = root / "entries" / "bad001-hand-edited.md"
    bad.write_text(_entry(seq=seq))
    res = _commands(cli, root)
    for name in ("recall", "list", "prompt", "stats", "surface"):
        assert res[name].returncode == 0, (name, res[name].stderr)
        assert "internal error" not in res[name].stderr and "Traceback" not in res[name].stderr
    assert "Use SQLite WAL mode for the job queue" in res["recall"].stdout
    listed = json.loads(res["list"].stdout)
    assert len(listed["entries"]) == 10
    assert [p["path"] for p in listed["problems"]] == ["entries/bad001-hand-edited.md"]
    assert listed["problems"][0]["field"] == field
    assert res["doctor"].returncode == 1
    assert "entries/bad001-hand-edited.md" in res["doctor"].stdout
    assert ("seq" if field else "digits") in res["doctor"].stdout


def test_cli_commit_refuses_out_of_range_and_odd_numbers_before_writing(example_vault, cli):
    root = example_vault.root
    base = ["memory", "--vault", str(root), "commit", "--type", "fact", "--note", "x", "--session", "s"]
    for extra in (["--importance", "5", "--seq", TOO_BIG], ["--importance", TOO_BIG, "--seq", "1"],
                  ["--importance", "5", "--seq", "-1"], ["--importance", "5", "--seq", "1" * 5000],
                  ["--importance", "1" * 5000, "--seq", "1"], ["--importance", "5", "--seq", "²"]):
        r = cli(*base, *extra)
        assert r.returncode == 2, (extra, r.stderr)
        assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    assert not list(pending_dir(root / ".acpmem").glob("*.json"))


def test_cli_score_seed_is_bounded(example_vault, cli):
    r = cli("memory", "--vault", str(example_vault.root), "score", "--seed", "1" * 5000)
    assert r.returncode == 2 and r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr


# ------------------------------------------------------------------------------------------------------- the Python API

def test_submit_and_make_request_refuse_out_of_range_seqs(vault):
    from acpmem.write import requests
    from acpmem.write.submit import submit

    for seq in (2**63, 10**20, -1, "1" * 5000, "²", "٥", 1.0, True, None, [1], "1-2"):
        with pytest.raises(UsageError):
            submit(vault, type="fact", note="x", importance=5, session="s", seq=seq)
        with pytest.raises(UsageError):
            requests.make_request(types=("fact",), type="fact", note="x", importance=5, session="s", seq=seq,
                                  transcript=None, host_tools=None, lang="en", created="2026-11-29T12:00:00Z",
                                  request_id="r-x")
    for imp in ("²", "1" * 5000, 2**63, 5.0):
        with pytest.raises(EntryInvalid):
            submit(vault, type="fact", note="x", importance=imp, session="s", seq=1)
    for kw in ({"session": ["s"]}, {"session": "a\nb"}, {"session": "x" * 513}, {"transcript": 5},
               {"transcript": ["a"]}, {"host_tools": 1.5}, {"note": "bad \udcff text"}):
        args = {"type": "fact", "note": "x", "importance": 5, "session": "s", "seq": 1, **kw}
        with pytest.raises(AcpmemError):
            submit(vault, **args)
    assert not list(pending_dir(vault.state_dir).glob("*.json"))
    ok = submit(vault, type="fact", note="x", importance="7", session="s", seq=str(limits.MAX_SEQ))
    assert json.loads(Path(ok.path).read_text())["seq"] == limits.MAX_SEQ


def test_a_hand_edited_request_file_with_a_huge_seq_is_broken_not_extracted(vault):
    from acpmem.write import requests
    from acpmem.write.submit import submit

    ack = submit(vault, type="fact", note="x", importance=5, session="s", seq=3)
    data = json.loads(Path(ack.path).read_text())
    data["seq"] = int(TOO_BIG)
    Path(ack.path).write_text(json.dumps(data))
    reqs, broken = requests.list_requests(vault.state_dir)
    assert reqs == [] and broken == [Path(ack.path).name]
    with pytest.raises(AcpmemError):
        requests.load_request(vault.state_dir, ack.request_id)


def test_read_api_numbers_are_bounded(example_vault):
    from acpmem.vault import reader
    from acpmem.read import resident, retrieval

    v = example_vault
    for limit in (0, -1, 2**63, 10**30, 1.5, "5", True, None):
        with pytest.raises(UsageError):
            retrieval.recall(v, "queue", limit=limit)
    for budget in (0, -5, 2**63, 10**30, 2.5, "100"):
        with pytest.raises(UsageError):
            resident.resident_index(v, budget_tokens=budget)
    for top_n in (-1, 2**63, 10**30, 1.5, "3"):
        with pytest.raises(UsageError):
            reader.scores(v, top_n=top_n)
    for seed in (2**63, 10**5000, 1.5, "7"):
        with pytest.raises(UsageError):
            reader.scores(v, seed=seed)
    assert retrieval.recall(v, "queue", limit=3)
    assert "#" in resident.resident_index(v, budget_tokens=1_000_000)
    assert len([s for s in reader.scores(v, top_n=0, seed=limits.MAX_INT) if s.selected]) == 0


# --------------------------------------------------------------------------------------------- transcripts and the fork

@pytest.mark.parametrize("seq", [2**63, 10**20, -1, -(2**63) - 1])
def test_a_transcript_seq_out_of_range_is_refused(seq):
    from acpmem.hosts.transcripts import read_transcript

    for text in (json.dumps([{"role": "user", "content": "hi", "seq": seq}]),
                 json.dumps({"role": "user", "content": "hi", "seq": seq}) + "\n"):
        with pytest.raises(TranscriptError) as info:
            read_transcript(text)
        assert "seq" in info.value.message


def test_the_offline_extractor_cites_only_seqs_it_can_store(vault, tmp_path):
    """A transcript at the top of the range is fine; the fork's citations are always valid seqs."""
    from acpmem.write.submit import submit

    t = tmp_path / "t.json"
    t.write_text(json.dumps([{"role": "user", "content": "we use the sqlite queue", "seq": limits.MAX_SEQ - 1},
                             {"role": "assistant", "content": "noted: sqlite queue", "seq": limits.MAX_SEQ}]))
    ack = submit(vault, type="fact", note="sqlite queue", importance=5, session="s", seq=limits.MAX_SEQ,
                 transcript=str(t), wait=True, extractor="offline")
    assert ack.outcome.status == "written", ack.outcome
    e = vault.load().entries[0]
    assert {c.seq for c in e.citation} <= {limits.MAX_SEQ - 1, limits.MAX_SEQ}
    from acpmem.read.retrieval import recall
    assert [h.entry.id for h in recall(vault, "sqlite queue")] == [e.id]


# ------------------------------------------------------------------------------------------------------------------ MCP

def test_mcp_host_arguments_are_range_checked_by_the_real_server(example_vault, tmp_path):
    from test_mcp import _server_params, _session_run

    root = example_vault.root

    async def body(s):
        base = {"type": "fact", "note": "x", "importance": 5}
        out = []
        # the host's values ride in _meta (acpmem/session, /seq, /transcript); the model's in the arguments
        for host in ({"seq": 2**63}, {"seq": 10**20}, {"seq": -1}, {"seq": 1.5}, {"seq": "1" * 5000},
                     {"seq": [1]}, {"session": ["s"]}, {"session": {"a": 1}}, {"session": "a\x00b"},
                     {"transcript": 5}, {"transcript": ["x"]}):
            meta = {f"acpmem/{k}": v for k, v in host.items()}
            out.append((host, await s.call_tool("memory_commit", base, meta=meta)))
        for model in ({"importance": 2**63}, {"importance": "²"}, {"seq": 1}):
            out.append((model, await s.call_tool("memory_commit", {**base, **model})))
        out.append(({"limit": 2**63}, await s.call_tool("memory_recall", {"query": "queue", "limit": 2**63})))
        out.append(("recall", await s.call_tool("memory_recall", {"query": "sqlite queue"})))
        return out

    results = _session_run(_server_params(root, "--session", "b-mcp"), body)
    *bad, (_, good) = results
    for host, r in bad:
        assert r.is_error is True, (host, r.content[0].text)
        text = r.content[0].text
        assert text.startswith("Error: ") and "\n" not in text and "internal" not in text.lower(), (host, text)
        assert next(iter(host)) in text, (host, text)      # the bad value is named
    assert good.is_error is False and "Use SQLite WAL mode for the job queue" in good.content[0].text
    assert not list(pending_dir(root / ".acpmem").glob("*.json"))


def test_memory_service_checks_host_arguments_in_process(example_vault):
    from acpmem.integrations.mcp_server import MemoryService

    svc = MemoryService(example_vault.root, "b-svc")
    for host in ({"seq": 2**63}, {"seq": True}, {"session": 7}, {"session": ""}, {"transcript": {"a": 1}},
                 {"transcript": ""}, {"seq": None}):
        args = {"type": "fact", "note": "x", "importance": 5}
        meta = {f"acpmem/{k}": v for k, v in host.items()}
        if host in ({"session": ""}, {"transcript": ""}, {"seq": None}):
            continue    # empty values mean "not given": the server's own session, transcript and seq
        with pytest.raises(AcpmemError):
            svc.call("memory_commit", args, meta)
    assert not list(pending_dir(example_vault.state_dir).glob("*.json"))


# ---------------------------------------------------------------------------------------------------------- acpmem.toml

BAD_SETTINGS = [
    "[index]\nbudget_tokens = -1\n", "[index]\nbudget_tokens = 0\n", "[index]\nbudget_tokens = 9223372036854775807\n",
    "[score]\nrecency_divisor_days = 0.0\n", "[score]\nrecency_divisor_days = nan\n", "[score]\nrecency_cap = inf\n",
    "[score]\nimportance_weight = -inf\n", "[score]\njitter_max = -1.0\n", "[score]\ntop_n = -3\n",
    "[surface]\nentry_cap_bytes = 0\n", "[surface]\nsession_budget_bytes = -1\n", "[surface]\ntop_n = 100000000\n",
    "[recall]\nlimit = 0\n", "[recall]\nlimit = 1000000\n", "[extraction]\ntimeout_seconds = 0\n",
    "[extraction]\ntimeout_seconds = nan\n", "[extraction]\nmax_retries = -1\n", "[extraction]\nmax_entry_bytes = 0\n",
    "[extraction]\nmax_entry_bytes = 99999999999\n", "[extraction]\napi_key_env = \"A\\u0000B\"\n",
    "[git]\nlock_timeout_seconds = -1.0\n", "[git]\nforeign_lock_wait_seconds = inf\n",
    "[index]\nwatch_idle_minutes = 0.0\n", "[index]\nwatch_min_entries = -1\n",
    "[git]\nremote = \"-oops\"\n", "[vault]\ntypes = [\"a\\nb\"]\n", "[vault]\ntypes = [\"fact\", \"fact\"]\n",
]


@pytest.mark.parametrize("toml", BAD_SETTINGS)
def test_absurd_settings_are_refused_with_the_setting_named(toml):
    import tomllib

    from acpmem.core.settings import settings_from_mapping

    with pytest.raises(SettingsError) as info:
        settings_from_mapping(tomllib.loads(toml), "acpmem.toml")
    assert "acpmem.toml" in info.value.message


def test_every_number_setting_has_a_range():
    from acpmem.core import settings as S

    for section, cls in S._SECTIONS.items():
        for name, default in cls._defaults.items():
            if isinstance(default, (int, float)) and not isinstance(default, bool):
                lo, hi, open_low = S._RANGES[(section, name)]
                assert lo <= default <= hi and not (open_low and default == lo), (section, name)


def test_the_template_settings_are_within_their_bounds():
    import tomllib

    from acpmem.core.settings import Settings, settings_from_mapping

    template = Path(__file__).resolve().parents[1] / "vault-template" / "acpmem.toml"
    assert settings_from_mapping(tomllib.loads(template.read_text())) == Settings()


def test_cli_absurd_settings_are_one_warning_line_and_the_last_good_settings(example_vault, cli):
    """A value out of range (it may arrive from a teammate) never wedges the clone: each command goes on with the
    last good settings and says why in one line naming the setting; doctor reports it as an error."""
    toml = example_vault.root / "acpmem.toml"
    toml.write_text(toml.read_text().replace("recency_divisor_days = 30.0", "recency_divisor_days = 0.0"))
    for args in (("list",), ("list", "--format", "prompt"), ("recall", "queue"), ("score",)):
        r = cli("memory", "--vault", str(example_vault.root), *args)
        assert r.returncode == 0, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("Warning: ") and "recency_divisor_days" in r.stderr and r.stderr.count("\n") == 1
        assert "using the last good settings" in r.stderr
    r = cli("memory", "--vault", str(example_vault.root), "doctor")
    assert r.returncode == 1 and "recency_divisor_days" in r.stdout


def test_settings_a_newer_acpmem_added_are_ignored_and_named():
    import tomllib

    from acpmem.core.settings import Settings, settings_from_mapping

    got = settings_from_mapping(tomllib.loads('future_flag = true\n[vault]\ncolour = "red"\n[recall]\nlimit = 3\n'
                                              'new_knob = 2\n[future]\nx = 1\n'), "acpmem.toml")
    assert got.recall.limit == 3 and got.with_changes(unknown=(), recall=Settings().recall) == Settings()
    assert got.unknown == ("vault.colour", "[future]", "future_flag", "recall.new_knob")
    assert "'recall.new_knob'" in got.unknown_warning() and "[future]" in got.unknown_warning()
    assert Settings().unknown_warning() is None


def test_cli_an_unknown_setting_is_one_warning_and_every_command_goes_on(example_vault, cli):
    """An `acpmem.toml` from a newer acpmem (synced through git): reads and writes work, each with one `Warning:`
    line naming what is ignored; a known setting with a bad value makes the file not load (the last good settings,
    said)."""
    root = example_vault.root
    toml = root / "acpmem.toml"
    toml.write_text(toml.read_text().replace("[recall]\n", "[recall]\nnew_knob = 3\n", 1) + "\n[future]\nx = 1\n")
    for args in (("list",), ("list", "--format", "prompt"), ("recall", "queue"), ("score",), ("doctor",),
                 ("remember", "Newer settings are ignored", "--type", "fact", "--importance", "3"),
                 ("forget", json.loads(cli("memory", "--vault", str(root), "list", "--json").stdout)["entries"][0]["id"],
                  "--reason", "x")):
        r = cli("memory", "--vault", str(root), *args)
        assert r.returncode == 0, (args, r.stdout, r.stderr)
        said = [ln for ln in (r.stderr + r.stdout).splitlines() if "new_knob" in ln]
        assert len(said) == 1 and "'[future]'" in said[0] and "Error" not in r.stderr, (args, r.stderr)
        assert said[0].startswith(("Warning: ", "warning ")), said
    toml.write_text(toml.read_text().replace("recency_divisor_days = 30.0", "recency_divisor_days = 0.0"))
    r = cli("memory", "--vault", str(root), "list")
    assert r.returncode == 0 and r.stderr.startswith("Warning: ") and "recency_divisor_days" in r.stderr
    assert "using the last good settings" in r.stderr


# ------------------------------------------------------------------------------------------------------ the index build

def test_seq_range_never_returns_what_sqlite_cannot_store():
    from acpmem.search.ranking import seq_range

    assert seq_range(12) == (12, 12) and seq_range("10-14") == (10, 14) and seq_range("m00012") == (12, 12)
    assert seq_range("b3") is None
    for bad in (2**63, -1, f"1-{TOO_BIG}", "9-1", f"m{TOO_BIG}", "1" * 5000, True, None, 1.5):
        assert seq_range(bad) is None, bad


def test_the_index_build_skips_what_it_cannot_store_and_keeps_the_rest(example_vault):
    """Validation is the gate; behind it, a catalog row the index cannot store loses that citation or that document,
    never the batch."""
    from acpmem.search import store

    v = example_vault
    con = v.db()
    v.load()
    assert store.update(con).indexed == 10
    rows = con.execute("SELECT path, data FROM files WHERE ok = 1 ORDER BY path LIMIT 2").fetchall()
    (p1, d1), (p2, d2) = rows
    a, b = json.loads(d1), json.loads(d2)
    a["citation"] = [{"session": "s", "seq": int(TOO_BIG)}, {"session": "s", "seq": 5}]
    b["importance"] = int(TOO_BIG)
    con.execute("UPDATE files SET data = ? WHERE path = ?", (json.dumps(a), p1))
    con.execute("UPDATE files SET data = ?, sig = sig || 'x' WHERE path = ?", (json.dumps(b), p2))
    con.execute("UPDATE files SET sig = sig || 'x' WHERE path = ?", (p1,))
    res = store.update(con)
    assert res.indexed == 1 and res.skipped == 1 and res.dropped == 2
    cites = con.execute("SELECT lo, hi FROM idx_cites WHERE key = (SELECT key FROM idx_docs WHERE path = ?)",
                        (p1,)).fetchall()
    assert cites == [(5, 5)]
    assert con.execute("SELECT count(*) FROM idx_docs WHERE path = ?", (p2,)).fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM idx_docs").fetchone()[0] == 9


def test_a_database_built_with_the_old_validation_is_rebuilt(example_vault):
    """A catalog made before seqs were range-checked holds the bad file as valid: the schema version moved, so the
    catalog is rebuilt and the file becomes a reported problem."""
    from acpmem.search import catalog

    v = example_vault
    bad = v.root / "entries" / "bad001-hand-edited.md"
    bad.write_text(_entry(seq=TOO_BIG))
    v.load()
    con = v.db()
    # what the old code stored: the file as a valid entry, the seq as text inside its JSON
    data = json.dumps({"id": "bad001", "title": "Hand edited", "type": "fact", "importance": 5,
                       "created": "2026-11-29T12:00:00Z", "citation": [{"session": "s", "seq": int(TOO_BIG)}],
                       "body": "x", "path": "entries/bad001-hand-edited.md"})
    con.execute("UPDATE files SET ok = 1, data = ?, entry_id = 'bad001' WHERE path = 'entries/bad001-hand-edited.md'",
                (data,))
    con.execute(f"PRAGMA user_version = {catalog.SCHEMA_VERSION - 1}")
    v.close()
    v2 = Vault(v.root)
    try:
        loaded = v2.load()
        assert [p.path for p in loaded.problems] == ["entries/bad001-hand-edited.md"]
        from acpmem.read.retrieval import recall
        assert recall(v2, "sqlite queue")
    finally:
        v2.close()
    with sqlite3.connect(v.db_path) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == catalog.SCHEMA_VERSION
