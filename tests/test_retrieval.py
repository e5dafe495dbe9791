"""Recall and surfacing through the library and the real CLI, on real vaults."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from acpmem.core.errors import Refused, UsageError
from acpmem.core.framing import CLOSE, DATA_NOTICE_EN, OPEN
from acpmem.core.entry import Citation, Entry
from acpmem.read.retrieval import cap_text, recall, recall_text, surface, surface_text
from acpmem.vault.writer import Vault, git


def make(vault: Vault, title: str, body: str, typ: str = "fact", importance: int = 5, **kw) -> Entry:
    ident = vault.new_id()
    e = Entry(id=ident, title=title, type=typ, importance=importance, created="2026-11-01T10:00:00Z",
              body=body + "\n", citation=(Citation("s9", 4),), **kw)
    return e.with_changes(path=vault.path_for(ident, title))


def settings(vault: Vault, text: str) -> Vault:
    (vault.root / "acpmem.toml").write_text(text, "utf-8")
    return Vault(vault.root, clock=vault.clock)


def head(vault: Vault) -> str:
    return git(vault.root, "rev-parse", "HEAD").out.strip()


def test_recall_finds_with_typos_and_in_chinese(example_vault):
    v = example_vault
    assert "SQLite WAL" in recall(v, "sqlite job queu")[0].entry.title
    assert "pytest-xdist" in recall(v, "pytset xdist")[0].entry.title
    zh = recall(v, "大文件上传")
    assert "分片上传" in zh[0].entry.title and zh[0].entry.body.startswith("- 网关")
    hit = recall(v, "snake_case 日志", limit=1)
    assert len(hit) == 1 and "JSON" in hit[0].entry.title
    assert hit[0].citations == hit[0].entry.citation and hit[0].score > 0 and hit[0].preview


def test_recall_marks_read_without_a_commit(example_vault):
    v = example_vault
    before = head(v)
    target = next(e for e in v.load().entries if "Rate limits" in e.title)
    assert target.last_read is None or target.last_read < "2026-11-29T12:00:00Z"
    hits = recall(v, "rate limit retry-after")
    assert hits[0].entry.id == target.id
    assert hits[0].entry.last_read == "2026-11-29T12:00:00Z"
    after = {e.id: e for e in Vault(v.root).load().entries}
    assert after[target.id].last_read == "2026-11-29T12:00:00Z"
    assert head(v) == before
    assert git(v.root, "status", "--porcelain").out.strip() == ""
    assert target.id in (v.state_dir / "reads.log").read_text()


def test_superseded_types_limit_and_bad_arguments(vault):
    v = vault
    old = make(v, "Releases are cut on Fridays", "Friday release train.", typ="decision")
    v.write_entries([old], subject="t", why="t")
    new = make(v, "Releases are cut on Tuesdays", "No more Friday releases.", typ="decision",
               supersedes=(old.id,))
    v.write_entries([new], subject="t", why="t", updates=[v.resolve(old.id).with_changes(superseded_by=new.id)])
    other = make(v, "Friday lunch is at noon", "The team eats together.", typ="fact")
    v.write_entries([other], subject="t", why="t")
    assert {h.entry.id for h in recall(v, "friday releases")} == {new.id, other.id}
    assert {h.entry.id for h in recall(v, "friday releases", include_superseded=True)} == {new.id, old.id, other.id}
    assert [h.entry.id for h in recall(v, "friday", types=["fact"])] == [other.id]
    assert len(recall(v, "friday", limit=1)) == 1
    with pytest.raises(UsageError):
        recall(v, "   ")
    with pytest.raises(Refused):   # a type this vault does not define: content, exit 1
        recall(v, "friday", types=["opinion"])
    with pytest.raises(UsageError):
        recall(v, "friday", limit=0)
    assert recall(v, "zyxwvut qqqq") == []


def test_recall_text_is_framed_data(example_vault):
    v = example_vault
    hits = recall(v, "staging deploys")
    text = recall_text(v, hits)
    assert text.startswith(DATA_NOTICE_EN)
    lines = text.splitlines()
    assert sum(line.startswith(OPEN + " ") for line in lines) == len(hits) == sum(
        line.startswith(CLOSE + " ") for line in lines)
    assert f'id="{hits[0].entry.id}"' in text and 'type="fact"' in text and "citation=" in text


def test_cap_text_cuts_on_a_character_boundary():
    text = "标题\n\n" + "中文内容" * 400
    out, cut = cap_text(text, 500, "abc123")
    assert cut and len(out.encode("utf-8")) <= 500
    assert out.endswith("`acp memory show abc123`]")
    out.encode("utf-8").decode("utf-8")  # valid UTF-8
    assert cap_text("short", 500, "x") == ("short", False)


def test_surface_top_n_cap_dedupe_and_sessions(example_vault):
    v = settings(example_vault, "[surface]\ntop_n = 3\nentry_cap_bytes = 200\nsession_budget_bytes = 100000\n")
    first = surface(v, "s-1", seed=1)
    assert len(first.entries) == 3
    assert all(e.size <= 200 for e in first.entries)
    assert any(e.truncated and "acp memory show" in e.text for e in first.entries)
    second = surface(v, "s-1", seed=1)
    assert len(second.entries) == 3
    assert not {e.entry.id for e in first.entries} & {e.entry.id for e in second.entries}
    assert second.used_bytes == sum(e.size for e in first.entries + second.entries)
    # a new session starts over: the same entries can come back
    other = surface(v, "s-2", seed=1)
    assert [e.entry.id for e in other.entries] == [e.entry.id for e in first.entries]
    # by score: the ones picked first score at least as high as the ones picked next
    assert min(e.score for e in first.entries) >= max(e.score for e in second.entries) - 1e-9
    rest = surface(v, "s-1", seed=1)
    assert len(rest.entries) == 3
    last = surface(v, "s-1", seed=1)
    assert len(last.entries) == 1
    done = surface(v, "s-1", seed=1)
    assert done.entries == () and "already surfaced" in done.reason
    text = surface_text(v, first)
    assert text.startswith(DATA_NOTICE_EN) and text.count('kind="surface"') == 3
    assert "already surfaced" in surface_text(v, done)


def test_surface_budget_and_recalled_entries(example_vault):
    v = settings(example_vault, "[surface]\ntop_n = 5\nentry_cap_bytes = 300\nsession_budget_bytes = 700\n")
    got = surface(v, "s-b", seed=3)
    assert 1 <= len(got.entries) < 5
    assert got.used_bytes <= 700 and "budget" in got.reason
    seen = {e.entry.id for e in got.entries}
    while True:
        more = surface(v, "s-b", seed=3)
        if not more.entries:
            break
        seen |= {e.entry.id for e in more.entries}
    assert more.used_bytes <= 700 and "budget" in more.reason
    # recall in a session keeps surfacing from repeating what was just recalled
    hit = recall(v, "pytest xdist gitconfig", session="s-r")[0].entry.id
    v2 = settings(v, "[surface]\ntop_n = 20\n")
    assert hit not in {e.entry.id for e in surface(v2, "s-r", seed=3).entries}
    assert hit in {e.entry.id for e in surface(v2, "s-other", seed=3).entries}


_SURFACER = """
import json, sys
from acpmem.vault.writer import Vault
from acpmem.read.retrieval import surface
r = surface(Vault(sys.argv[1]), "shared-session", seed=5)
print(json.dumps([e.entry.id for e in r.entries]))
"""


def test_concurrent_surface_calls_never_repeat_an_entry(example_vault):
    v = settings(example_vault, "[surface]\ntop_n = 2\n")
    v.close()
    surface(v, "warm-up")  # build the index first so the race is on the ledger
    procs = [subprocess.Popen([sys.executable, "-c", _SURFACER, str(v.root)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(5)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-400:] for o in outs]
    ids = [i for o in outs for i in json.loads(o[0])]
    assert len(ids) == len(set(ids)) == 10


def test_cli_recall_and_surface_json(example_vault, cli):
    v = example_vault
    before = head(v)
    r = cli("memory", "--vault", str(v.root), "recall", "--json", "--limit", "2", "--type", "lesson", "pytest git")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["query"] == "pytest git" and 1 <= len(data["hits"]) <= 2
    assert all(h["type"] == "lesson" for h in data["hits"])
    assert "pytest-xdist" in data["hits"][0]["title"] and data["hits"][0]["body"] and data["hits"][0]["citation"]
    r = cli("memory", "recall", "--vault", str(v.root), "上传")
    assert r.returncode == 0 and r.stdout.startswith(DATA_NOTICE_EN) and 'kind="recall"' in r.stdout
    r = cli("memory", "recall", "--vault", str(v.root), "")
    assert r.returncode == 2 and "Error:" in r.stderr
    r = cli("memory", "surface", "--vault", str(v.root), "--session", "cli-s", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["session"] == "cli-s" and len(data["entries"]) == 5 and data["budget_bytes"] == 61440
    assert data["used_bytes"] == sum(e["bytes"] for e in data["entries"])
    r2 = json.loads(cli("memory", "surface", "--vault", str(v.root), "--session", "cli-s", "--json").stdout)
    assert not {e["id"] for e in data["entries"]} & {e["id"] for e in r2["entries"]}
    r = cli("memory", "surface", "--vault", str(v.root), "--session", "cli-s")
    assert r.returncode == 0 and "nothing surfaced" in r.stdout
    r = cli("memory", "surface", "--vault", str(v.root), "--session", "cli-t")
    assert r.returncode == 0 and r.stdout.startswith(DATA_NOTICE_EN) and r.stdout.count('kind="surface"') == 5
    assert head(v) == before



def test_cli_surface_prompt_gives_what_the_message_is_about_once_per_session(example_vault, cli):
    """``surface --prompt``: the entries the user's message is about (not the best-scored ones), exactly the text a
    host adds to the context; each once per session, shared with the score surfacing's ledger; JSON alike."""
    v = example_vault
    before = head(v)
    r = cli("memory", "surface", "--vault", str(v.root), "--session", "p-1", "--prompt",
            "what is the upload limit for big files?")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.startswith(DATA_NOTICE_EN) and "分片上传" in r.stdout and 'kind="surface"' in r.stdout
    second = r.stdout.find('kind="surface"', r.stdout.index('kind="surface"') + 1)
    assert r.stdout.index("分片上传") < (second if second > 0 else len(r.stdout))   # the first one: what it is about
    again = cli("memory", "surface", "--vault", str(v.root), "--session", "p-1", "--prompt", "-",
                input="big file upload limit, once more\n")
    assert again.returncode == 0 and again.stdout == "" and "分片上传" not in again.stdout
    assert again.stderr.startswith("(nothing surfaced: nothing in memory matches the prompt that this session")
    other = json.loads(cli("memory", "surface", "--vault", str(v.root), "--session", "p-2", "--prompt", "-",
                           "--json", input="大文件上传的限制是多少").stdout)
    assert other["session"] == "p-2" and "分片上传" in other["entries"][0]["title"]
    assert other["used_bytes"] == sum(e["bytes"] for e in other["entries"]) and other["reason"] is None
    scored = json.loads(cli("memory", "surface", "--vault", str(v.root), "--session", "p-2", "--json").stdout)
    assert not {e["id"] for e in other["entries"]} & {e["id"] for e in scored["entries"]}   # one ledger
    assert head(v) == before


def test_cli_surface_prompt_obeys_the_setting_and_refuses_bad_input(example_vault, cli):
    v = example_vault
    for argv, stdin, said in ((["--prompt", ""], None, "Error: the prompt is empty — pass the user's message"),
                              (["--prompt", " \t"], None, "Error: the prompt is empty"),
                              (["--prompt", "-"], "\n  \n", "Error: standard input holds no prompt — pass"),
                              (["--prompt", "queue", "--seed", "3"], None, "Error: --seed and --at go with"),
                              (["--prompt", "queue", "--at", "2026-12-01T00:00:00Z"], None, "Error: --seed and")):
        r = cli("memory", "surface", "--vault", str(v.root), "--session", "bad", *argv, input=stdin)
        assert r.returncode == 2 and r.stdout == "" and r.stderr.startswith(said), (argv, r.stderr)
        assert r.stderr.count("\n") == 1
    toml = (v.root / "acpmem.toml").read_text("utf-8")
    assert "prompt = true" in toml
    (v.root / "acpmem.toml").write_text(toml.replace("prompt = true", "prompt = false"), "utf-8")
    r = cli("memory", "surface", "--vault", str(v.root), "--session", "off", "--prompt", "upload limit big files")
    assert r.returncode == 0 and r.stdout == "" and "[surface] prompt = false" in r.stderr
    data = json.loads(cli("memory", "surface", "--vault", str(v.root), "--session", "off", "--prompt",
                          "upload limit", "--json").stdout)
    assert data["entries"] == [] and "[surface] prompt = false" in data["reason"]


@pytest.mark.parametrize("escaped", [False, True])
def test_surface_prompt_looks_past_the_index_a_host_hands_back_in_the_prompt(example_vault, cli, escaped):
    """Gemini CLI (non-interactive) prepends the SessionStart hook's context — the resident index — to the prompt it
    gives the BeforeAgent hook, with < and > escaped: acpmem's own text is not what the user asked about."""
    v = example_vault
    ask = "what is the upload limit for big files?"
    index = cli("memory", "list", "--vault", str(v.root), "--format", "prompt", "--session", "ix").stdout
    if escaped:
        index = index.replace("<", "&lt;").replace(">", "&gt;")
    ids = []
    for session, prompt in (("plain", ask), ("handed-back", f"<hook_context>{index}</hook_context>\n\n{ask}")):
        r = cli("memory", "surface", "--vault", str(v.root), "--session", session, "--prompt", "-", "--json",
                input=prompt)
        ids.append(sorted(e["id"] for e in json.loads(r.stdout)["entries"]))   # the first marks them read
    assert ids[0] and ids[1] == ids[0]

def test_a_second_file_with_the_same_id_is_not_returned(vault):
    v = vault
    a = make(v, "Alpha service owns billing", "Billing lives in alpha.")
    v.write_entries([a], subject="t", why="t")
    (v.root / "entries" / "zzz-copy.md").write_text(
        f"---\nid: {a.id}\ntitle: Copy mentions quokka billing\ntype: fact\nimportance: 9\n"
        "created: 2026-11-02T00:00:00Z\n---\nQuokka quokka billing.\n", "utf-8")
    hits = recall(v, "quokka billing", limit=1)
    assert [h.entry.path for h in hits] == [a.path]
    assert recall(v, "quokka") == []


def test_acpmems_own_lookups_do_not_mark_read(example_vault):
    from acpmem.write.context import related_entries

    v = example_vault
    before = {e.id: e.last_read for e in v.load().entries}
    hits = recall(v, "upload gateway", mark_read=False)
    related = related_entries(v, "sqlite job queue")
    assert hits and related
    assert "SQLite" in related[0].title
    assert {e.id: e.last_read for e in v.load().entries} == before
    assert not (v.state_dir / "reads.log").exists()



def test_recall_without_previews_ranks_and_explains_the_same(example_vault):
    """``previews=False`` (what a prompt's surfacing asks: it shows the entries, not previews) changes nothing but
    the previews: the same entries, scores, explanations and order, for one layer and through the layered call."""
    from acpmem.read.layers import recall_layered

    v = example_vault
    previewed = 0
    for q in ("upload gateway", "sqlite job queue", "上传大文件", "short answers first", "retry"):
        for call in (recall, recall_layered):
            full = call(v, q, 20, mark_read=False)
            bare = call(v, q, 20, mark_read=False, previews=False)
            assert [(h.entry, h.score, h.explain, h.layer) for h in bare] == \
                [(h.entry, h.score, h.explain, h.layer) for h in full], q
            assert all(h.preview == "" for h in bare), q
            previewed += sum(bool(h.preview) for h in full)
    assert previewed > 10

WORDS = ("deploy", "gateway", "retry", "upload", "queue", "sqlite", "部署", "网关")


def _many(v) -> None:
    """Forty-eight entries into ``v`` that share the query words in every mix, some citing the same turns (near
    duplicates, which the ranking steps back) — enough hits for a limit to cut."""
    from acpmem.core.entry import Citation
    from helpers_proc import make_entry

    entries = []
    for i in range(48):
        words = [w for b, w in enumerate(WORDS) if (i * 37 + 11) >> b & 1] or ["deploy"]
        e = make_entry(f"mx{i:04d}", f"{' '.join(words[:2])} note {i}", "- " + " ".join(words * (1 + i % 3)) + ".")
        e = e.with_changes(citation=(Citation(f"s-mix{i % 7}", i // 7),), path=v.path_for(f"mx{i:04d}", e.title))
        entries.append(e)
    # three entries of a rare word, and six that share none of the words but cite the turns beside theirs: recall
    # reaches those through the links alone (spread)
    for i, seq in enumerate((10, 20, 30)):
        entries.append(make_entry(f"zb{i:04d}", f"zebra crossing {i}", "- The zebra crossing rule.").with_changes(
            citation=(Citation("s-zoo", seq),), path=v.path_for(f"zb{i:04d}", f"zebra crossing {i}")))
    for i, seq in enumerate((9, 11, 19, 21, 29, 31)):
        entries.append(make_entry(f"ln{i:04d}", f"lunch menu {i}", "- Soup on Fridays.").with_changes(
            citation=(Citation("s-zoo", seq),), path=v.path_for(f"ln{i:04d}", f"lunch menu {i}")))
    v.write_entries(entries, subject="many entries", why="test")


def test_recall_leaves_out_what_it_is_told_to_skip_from_the_same_ranking(example_vault):
    """``skip``, ``matched`` and ``upto`` (a prompt's surfacing drops what its session has seen and what its words
    do not match, and shows five) leave hits out of those of the same call without them, after they held their
    places within the limit: the rest in the same order, with the same scores and explanations, whatever is skipped
    (the best hit, every other one, all, none, ids the hits lack) and wherever the cut falls; ``left_out`` says how
    many (the layered call over two layers: ``tests/test_layers.py``)."""
    v = example_vault
    _many(v)
    checked = checked_spread = 0
    for q in ("upload gateway", "sqlite job queue", "部署网关", "deploy gateway retry", "retry", "zebra"):
        for limit in (3, 20):
            full = recall(v, q, limit, mark_read=False, previews=False)
            ids = [h.entry.id for h in full]
            for skip in ([], ids[:1], ids[::2], ids, ["zzzzzz"], ids[1:2] + ["not-an-entry"]):
                for matched in (False, True):
                    for upto in (None, 0, 4):
                        said: dict = {}
                        got = recall(v, q, limit, mark_read=False, previews=False, skip=set(skip),
                                     matched=matched, upto=upto, report=said)
                        want = [h for h in full if h.entry.id not in skip
                                and (not matched or h.explain.get("terms", True))][:upto]
                        assert [(h.entry, h.score, h.explain, h.layer) for h in got] == \
                            [(h.entry, h.score, h.explain, h.layer) for h in want], (q, limit, skip, upto)
                        assert said.get("left_out", 0) == len(full) - len(want), (q, limit, skip, upto)
                        checked += len(want) < len(full)
            spread = [h for h in full if not h.explain.get("terms", True)]
            checked_spread += bool(spread)
    assert checked > 200 and checked_spread
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(UsageError):
            recall(v, "retry", 5, upto=bad)


def test_recall_reads_no_entry_it_skips_and_marks_and_notes_only_what_it_returns(example_vault):
    """A skipped entry's data is never parsed, nor one past ``upto`` (the index row of one is made unreadable, and
    recall still answers); with ``mark_read`` and a session only the returned hits are marked read and noted in the
    session's ledger."""
    from acpmem.read.ledger import read_ledger
    from acpmem.search import watch

    v = example_vault
    _many(v)
    full = recall(v, "sqlite job queue", 5, mark_read=False)
    first, rest = full[0].entry.id, [h.entry.id for h in full[1:]]
    assert len(rest) == 4
    con = watch.open_fresh(v.state_dir, v.root)[0]
    with con:
        assert con.execute("UPDATE files SET data = '[]' WHERE entry_id = ?", (first,)).rowcount == 1
    con.close()
    with pytest.raises(AttributeError):   # read, it is no entry
        recall(v, "sqlite job queue", 5, mark_read=False, previews=False)
    got = recall(v, "sqlite job queue", 5, session="s-skip", skip={first}, previews=False)
    assert [h.entry.id for h in got] == rest
    assert read_ledger(v.session_dir("s-skip"))["recalled"] == sorted(rest)
    reads = (v.state_dir / "reads.log").read_text()
    assert first not in reads and all(i in reads for i in rest)
    # past ``upto``: the first entry past the cut made unreadable too, and the one before it still read
    con = watch.open_fresh(v.state_dir, v.root)[0]
    with con:
        assert con.execute("UPDATE files SET data = '[]' WHERE entry_id = ?", (rest[2],)).rowcount == 1
    con.close()
    got = recall(v, "sqlite job queue", 5, skip={first}, upto=2, previews=False, mark_read=False)
    assert [h.entry.id for h in got] == rest[:2]
    with pytest.raises(AttributeError):
        recall(v, "sqlite job queue", 5, skip={first}, upto=3, previews=False, mark_read=False)


def test_a_prompts_surfacing_shows_the_best_hits_its_session_has_not_seen(example_vault):
    """A later prompt of a session shows the best ``top_n`` of the hits a recall of ``top_n`` + seen gives, less
    the seen ones (the ranking that skipping keeps): the rule surfacing had when it read every hit's entry."""
    from acpmem.read.layers import recall_layered
    from acpmem.read.ledger import write_ledger
    from acpmem.read.prompted import surface_prompt

    v = example_vault
    _many(v)
    top_n = v.settings.surface.top_n
    shown = 0
    for n, q in enumerate(("upload gateway", "sqlite job queue", "部署网关", "retry the upload queue", "zebra")):
        ids = [h.entry.id for h in recall_layered(v, q, 20, mark_read=False)]
        for k, seen in enumerate(([], ids[:1], ids[::2], ids[:-1], ids)):
            session = f"s-seen-{n}-{k}"
            write_ledger(v.session_dir(session), {"surfaced": seen, "recalled": [], "used_bytes": 0})
            hits = recall_layered(v, q, min(top_n + len(seen), 100), mark_read=False)
            want = [h.entry.id for h in hits if h.entry.id not in seen and h.explain.get("terms", True)][:top_n]
            got = surface_prompt(v, session, q)
            assert [e.entry.id for e in got.entries] == want, (q, seen)
            if not want:
                assert got.reason == ("nothing in memory matches the prompt that this session has not seen"
                                      if hits else "nothing in memory matches the prompt"), (q, seen)
            shown += len(want)
    assert shown > 40


RECALL_PROBE = """
import json, sys
from acpmem.cli.fast import try_fast
code = try_fast(["recall", "--json", "--session", "s1", "--vault", sys.argv[1], sys.argv[2]], "acpmem")
sys.stderr.write(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


@pytest.mark.parametrize("query", ["sqlite queue", "上传大文件"])
def test_recall_loads_no_write_machinery_typer_jieba_or_dataclasses(example_vault, query):
    from acpmem.search import watch

    watch.open_fresh(example_vault.state_dir, example_vault.root)[0].close()   # documents indexed beforehand
    p = subprocess.run([sys.executable, "-c", RECALL_PROBE, str(example_vault.root), query], capture_output=True,
                       text=True, timeout=60)
    report = json.loads(p.stderr.strip().splitlines()[-1])
    assert report["code"] == 0 and json.loads(p.stdout)["hits"]
    loaded = set(report["modules"])
    assert "acpmem.search.query" in loaded
    assert not loaded & {"acpmem.vault.writer", "acpmem.vault.gitrun", "typer", "rjieba", "dataclasses", "inspect",
                         "typing", "yaml", "socket"}
