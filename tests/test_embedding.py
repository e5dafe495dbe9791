"""The optional embedding channel: a real loopback ``/v1/embeddings`` server with deterministic vectors (hashed bags
of words; ``synonyms`` decide which paraphrases mean the same), real vaults, real git, real SQLite, real processes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from acpmem.core.entry import Citation, Entry
from acpmem.core.errors import SettingsError
from acpmem.core.settings import settings_from_mapping
from acpmem.infra import embedclient
from acpmem.search import vectors
from acpmem.search.analysis import analyze
from acpmem.search.ranking import plan_query, vector_share
from acpmem.search.reference import Vocabulary
from acpmem.read import embedding
from acpmem.vault.reader import VaultReader
from acpmem.read.retrieval import recall
from embeddings_server import embeddings_server
from helpers_person import set_person, split
from helpers_proc import warnings_said

# "keep agent runs alive across redeploys" means the entry about session persistence; no word is shared
SYNONYMS = {"alive": "persist", "persistence": "persist", "persistent": "persist", "redeploys": "deploy",
            "deploys": "deploy", "redeploy": "deploy", "runs": "session", "sessions": "session", "agent": "session"}
TOPICS = [("Session persistence across deploys", "Sessions survive a deploy: state goes to SQLite first."),
          ("Retry uploads with exponential backoff", "Use `retryUpload` with jitter; cap at 30 s."),
          ("Kafka consumer lag alerts", "Alert when the consumer group lags more than 10,000 messages."),
          ("Prefer pnpm over npm", "The monorepo uses pnpm workspaces; npm breaks the lockfile."),
          ("Nginx keepalive timeout", "Set keepalive_timeout 65 for the gateway."),
          ("数据库迁移要先备份", "迁移之前先做一次完整备份。")]


def write(vault, topics=TOPICS):
    entries = []
    for i, (title, body) in enumerate(topics):
        ident = vault.new_id()
        e = Entry(id=ident, title=title, type="fact", importance=5, created="2026-11-01T10:00:00Z", body=body + "\n",
                  citation=(Citation(f"s{i}", 1),))
        entries.append(e.with_changes(path=vault.path_for(ident, title)))
    vault.write_entries(entries, subject="test entries", why="test")
    return entries


def configure(vault, srv, **extra) -> VaultReader:
    """Point [embeddings] at the server (the person's config: endpoint and model; the vault's: the rest); returns a fresh reader (the settings are read anew). The query's
    timeout is generous (a loaded machine must not turn a working endpoint into a fallback) unless a test sets it."""
    cfg = {"base_url": srv.base_url, "model": "hash-64", "timeout_seconds": 5.0, **extra}
    mine, cfg = split(cfg)   # the endpoint and model are the person's (their config), the rest the vault's
    set_person("embeddings", mine)
    lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in cfg.items())
    path = vault.root / "acpmem.toml"
    text = path.read_text("utf-8")
    head, sep, tail = text.partition("[embeddings]\n")
    if sep:   # replace the template's section
        rest = tail.split("\n[", 1)
        text = head + "[embeddings]\n" + lines + ("\n[" + rest[1] if len(rest) > 1 else "")
    else:
        text += "\n[embeddings]\n" + lines
    path.write_text(text, "utf-8")
    return VaultReader(vault.root)


def hits(reader, query, **kw):
    report: dict = {}
    found = recall(reader, query, limit=5, mark_read=False, report=report, **kw)
    return [h.entry.title for h in found], report


def test_channel_off_is_lexical_and_imports_nothing_of_it(vault, cli):
    write(vault)
    offline = cli("memory", "--vault", str(vault.root), "recall", "--json", "sqlite deploy")
    assert offline.returncode == 0, offline.stderr
    data = json.loads(offline.stdout)
    assert set(data) == {"query", "hits"}                  # no vectors field, no warning: today's output
    # the same bytes as the engine alone (no fusion code on the path) and no numpy / vector module imported
    probe = ("import sys, json; from acpmem.vault.reader import VaultReader; from acpmem.read.retrieval import "
             f"recall; v = VaultReader({str(vault.root)!r}); r = {{}}; h = recall(v, 'sqlite deploy', report=r, "
             "mark_read=False); print(json.dumps([x.entry.id for x in h])); "
             "print(r, 'numpy' in sys.modules, 'acpmem.search.vectors' in sys.modules, "
             "'acpmem.read.embedding' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    ids, flags = p.stdout.splitlines()
    assert json.loads(ids) == [h["id"] for h in data["hits"]]
    assert flags == "{} False False False"


def test_paraphrase_found_through_vectors_that_the_background_pass_made(vault):
    write(vault)
    with embeddings_server(synonyms=SYNONYMS) as srv:
        reader = configure(vault, srv)
        lexical, report = hits(reader, "keep agent runs alive across redeploys")
        assert report["vectors"]["missing"] == len(TOPICS) and report["vectors"]["present"] == 0
        # the recall started the detached pass (a real process): wait for it
        deadline = time.monotonic() + 60
        while embedding.channel_status(reader, probe=False)["missing"] and time.monotonic() < deadline:
            time.sleep(0.1)
        found, report = hits(reader, "keep agent runs alive across redeploys")
        assert report["vectors"] == {"model": "hash-64", "present": len(TOPICS), "missing": 0, "used": True}
        assert found[0] == "Session persistence across deploys"
        assert "warning" not in report
        assert (vault.state_dir / "embed.log").read_text().count("embedded 6 text(s)") == 1
        costs = [json.loads(x) for x in (vault.state_dir / "costs.jsonl").read_text().splitlines()]
        assert [c["kind"] for c in costs] == ["embeddings"] and costs[0]["texts"] == len(TOPICS)


def test_a_vectors_file_without_its_tables_yet_means_no_vectors(vault):
    """The background pass creates the file, then its tables: a recall between the two (seen once as "no such
    table: vx.at") counts every entry missing and ranks lexically."""
    write(vault)
    with embeddings_server(synonyms=SYNONYMS) as srv:
        reader = configure(vault, srv)
        vault.state_dir.mkdir(parents=True, exist_ok=True)
        import sqlite3

        sqlite3.connect(vectors.db_path(vault.state_dir)).close()     # an empty database: no tables
        found, report = hits(reader, "retry uploads backoff")
        assert found[0] == "Retry uploads with exponential backoff"
        assert report["vectors"]["present"] == 0 and report["vectors"]["missing"] == len(TOPICS)


def test_vectors_follow_writes_hand_edits_deletions_and_a_model_change(vault):
    entries = write(vault)
    with embeddings_server(synonyms=SYNONYMS) as srv:
        reader = configure(vault, srv)
        assert embedding.run_pass(reader) == {"embedded": 6, "missing": 0, "pruned": 0, "error": None}
        assert embedding.run_pass(reader)["embedded"] == 0                  # nothing twice
        # a new entry through the writer
        write(vault, [("Grafana dashboards live in git", "Provisioned from the repo.")])
        st = embedding.channel_status(reader, probe=False)
        assert (st["present"], st["missing"]) == (6, 1)
        assert embedding.run_pass(reader)["embedded"] == 1
        # a hand edit: the old vector is of another text, so the entry counts as missing until re-embedded
        path = vault.root / entries[1].path
        path.write_text(path.read_text("utf-8").replace("jitter", "full jitter and a deadline"), "utf-8")
        st = embedding.channel_status(reader, probe=False)
        assert (st["present"], st["missing"]) == (6, 1)
        before = srv.texts
        assert embedding.run_pass(reader) == {"embedded": 1, "missing": 0, "pruned": 1, "error": None}  # old text
        assert srv.texts == before + 1
        assert "full jitter" in srv.requests[-1]["input"][0]
        # a deletion: no longer counted, and its vector is pruned by the next pass
        (vault.root / entries[2].path).unlink()
        st = embedding.channel_status(reader, probe=False)
        assert (st["present"], st["missing"]) == (6, 0)
        assert embedding.run_pass(reader)["pruned"] == 1
        vcon = vectors.connect(vault.state_dir)
        assert vcon.execute("SELECT count(*) FROM vec").fetchone()[0] == 6
        # a model change: everything is re-embedded under the new name, the old model's vectors go
        reader = configure(vault, srv, model="hash-64-v2")
        st = embedding.channel_status(reader, probe=False)
        assert (st["model"], st["present"], st["missing"]) == ("hash-64-v2", 0, 6)
        assert embedding.run_pass(reader) == {"embedded": 6, "missing": 0, "pruned": 6, "error": None}
        assert {m for (m,) in vcon.execute("SELECT DISTINCT model FROM vec")} == {"hash-64-v2"}
        vcon.close()


def test_prefixes_go_before_the_texts_and_a_new_document_prefix_re_embeds(vault):
    """Asymmetric models (e5: "query: " / "passage: "; nomic-embed: "search_query: " / ...) get their prefixes:
    entries are embedded with the document prefix, the query with the query prefix; vectors made with another
    document prefix are other vectors (re-embedded, then pruned), a new query prefix re-embeds nothing."""
    write(vault)
    with embeddings_server(synonyms=SYNONYMS) as srv:
        reader = configure(vault, srv, query_prefix="query: ", document_prefix="passage: ")
        assert embedding.run_pass(reader)["embedded"] == len(TOPICS)
        sent = [t for body in srv.requests for t in body["input"]]
        assert len(sent) == len(TOPICS) and all(t.startswith("passage: ") for t in sent)
        found, report = hits(reader, "keep agent runs alive across redeploys")
        assert srv.requests[-1]["input"] == ["query: keep agent runs alive across redeploys"]
        assert found[0] == "Session persistence across deploys"
        assert report["vectors"] == {"model": "hash-64", "present": len(TOPICS), "missing": 0, "used": True}
        assert embedding.channel_status(reader, probe=False)["model"] == "hash-64"
        reader = configure(vault, srv, query_prefix="search_query: ", document_prefix="passage: ")
        assert embedding.run_pass(reader)["embedded"] == 0
        reader = configure(vault, srv, query_prefix="search_query: ", document_prefix="search_document: ")
        st = embedding.channel_status(reader, probe=False)
        assert (st["present"], st["missing"]) == (0, len(TOPICS))
        assert embedding.run_pass(reader) == {"embedded": len(TOPICS), "missing": 0, "pruned": len(TOPICS),
                                              "error": None}
        assert all(t.startswith("search_document: ") for t in srv.requests[-1]["input"])
        reader = configure(vault, srv)          # no prefixes: the plain texts again
        assert embedding.run_pass(reader)["embedded"] == len(TOPICS)
        assert not any(t.startswith(("search_document: ", "passage: ")) for t in srv.requests[-1]["input"])


@pytest.mark.parametrize("failure", ["slow", "error", "wrong_dimensions"])
def test_a_failing_endpoint_falls_back_to_lexical_with_one_warning(vault, failure, cli):
    write(vault)
    with embeddings_server(synonyms=SYNONYMS) as srv:
        reader = configure(vault, srv, dimensions=64, timeout_seconds=1.0, batch_timeout_seconds=1.0)
        embedding.run_pass(reader)
        lexical = cli("memory", "--vault", str(vault.root), "recall", "--json", "retry uploads backoff")
        assert not warnings_said(lexical.stderr)
        if failure == "slow":
            srv.delay = 3.0
        elif failure == "error":
            srv.status = 500
        else:
            srv.dim_override = 32
        got = cli("memory", "--vault", str(vault.root), "recall", "--json", "retry uploads backoff")
        assert got.returncode == 0, got.stderr
        data, before = json.loads(got.stdout), json.loads(lexical.stdout)
        want = {"slow": "timed out", "error": "HTTP 500", "wrong_dimensions": "32 dimensions, not the 64"}[failure]
        assert want in data["warning"] and "lexical search alone" in data["warning"]
        assert data["vectors"]["used"] is False and data["vectors"]["missing"] == 0
        assert [h["id"] for h in data["hits"]][0] == [h["id"] for h in before["hits"]][0]
        assert not warnings_said(got.stderr)                      # --json carries it in the document only
        text = cli("memory", "--vault", str(vault.root), "recall", "retry uploads backoff")
        assert text.returncode == 0 and "Retry uploads with exponential backoff" in text.stdout
        warned = [line for line in text.stderr.splitlines() if line.startswith("Warning: ")]
        assert len(warned) == 1 and want in warned[0] and "lexical search alone" in warned[0], text.stderr
        assert "Warning" not in text.stdout and "lexical search alone" not in text.stdout
        # the background pass meets the same failure: it stops, records it, and keeps nothing wrong
        write(vault, [("One more note", "about nothing much")])
        result = embedding.run_pass(reader)
        assert result["embedded"] == 0 and result["missing"] == 1 and result["error"]
        ledger = [json.loads(x) for x in (vault.state_dir / "costs.jsonl").read_text().splitlines()]
        assert ledger[-1]["ok"] is False and ledger[-1]["kind"] == "embeddings"


def test_a_chinese_query_stays_lexical_for_an_english_model(vault):
    write(vault)
    with embeddings_server(synonyms=SYNONYMS) as srv:
        reader = configure(vault, srv)
        embedding.run_pass(reader)
        n = len(srv.requests)
        found, report = hits(reader, "数据库迁移")
        assert found[0] == "数据库迁移要先备份"
        assert len(srv.requests) == n                       # the query was not even sent
        assert report["vectors"]["used"] is False and "Chinese" in report["vectors"]["skipped"]
        reader = configure(vault, srv, languages="en,zh")
        found, report = hits(reader, "数据库迁移")
        assert report["vectors"]["used"] is True and found[0] == "数据库迁移要先备份"


def test_identifier_and_typo_queries_keep_lexical_order():
    vocab = Vocabulary(analyze("retry upload session persist deploy"))
    for q in ("retry_upload", "src/app.py", "retryUpload", "v2 deploy", "retry uplaod"):
        assert vector_share(q, plan_query(q, vocab), 0.5) == 0.0, q
        assert vector_share(q, plan_query(q, vocab), 0.5, vocab) == 0.0, q
    for q in ("keep sessions alive", "retry upload", "how do we deploy"):
        assert vector_share(q, plan_query(q, vocab), 0.5) == 0.5, q


# Words a small vault never used that sit one edit from one it did: English words and names are not misspellings
# (each gated a LoCoMo question from the vector channel before the dictionary check); real misspellings are.
VAULT_TEXT = ("son find kid mind brand thank white whole bad hand fact race lean mean jon deploy plate play ride "
              "hike talk care safe token upload consumer pursue recommend receive fundraiser session persistence")


@pytest.mark.parametrize("query", ["What kind of art does Caroline make?", "Would Melanie go on a roadtrip soon?",
                                   "When is the grand opening?", "What does Melanie think about it?",
                                   "What musical bands has Melanie seen?", "Which city have Jean and John visited?",
                                   "How does Melanie prioritize self-care?", "keep agent runs alive across redeploys",
                                   "Where did Oliver hide his bone once?", "What did Caroline find on her walk?"])
def test_a_word_the_vault_never_used_is_not_a_misspelling(query):
    vocab = Vocabulary(analyze(VAULT_TEXT))
    assert vector_share(query, plan_query(query, vocab), 0.5) == 0.0          # the old rule gated them all
    assert vector_share(query, plan_query(query, vocab), 0.5, vocab) == 0.5


@pytest.mark.parametrize("query", ["authentication tokan", "retry uplaod", "kafka consumr lag",
                                   "What career path has Caroline decided to persue?",
                                   "What things has Nate reccomended to Joanna?", "How many letters has Joanna recieved?",
                                   "the shelter funraiser", "sesion persistance", "foo-bar", "the retry-uplaod flag"])
def test_a_misspelt_word_still_keeps_lexical_order(query):
    vocab = Vocabulary(analyze(VAULT_TEXT))
    assert vector_share(query, plan_query(query, vocab), 0.5, vocab) == 0.0


@hsettings(max_examples=150, deadline=None)
@given(st.sampled_from("upload deploy session token consumer fundraiser persistence recommend".split()),
       st.integers(0, 40), st.sampled_from("abcdefghijklmnopqrstuvwxyz"), st.sampled_from(["del", "swap", "sub"]))
def test_generated_misspellings_of_vault_words_keep_lexical_order(word, at, letter, edit):
    """One edit of a vault word that is no English word: if recall finds the word only through its typo
    neighbours, the query keeps lexical order (the embedding of a misspelling is noise)."""
    from hypothesis import assume

    from acpmem.search import english

    i = at % len(word)
    typo = {"del": word[:i] + word[i + 1:], "sub": word[:i] + letter + word[i + 1:],
            "swap": word[:i] + word[i + 1:i + 2] + word[i:i + 1] + word[i + 2:]}[edit]
    vocab = Vocabulary(analyze(VAULT_TEXT))
    assume(typo != word and not english.known_word(typo, vocab.en_to_zh))
    groups = plan_query(f"the {typo} again", vocab)
    typo_only = [g for g in groups if g.word == typo and g.terms
                 and all(t.via == "typo" for t in g.terms)]
    assume(typo_only)
    assert vector_share(f"the {typo} again", groups, 0.5, vocab) == 0.0


@hsettings(max_examples=60, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                    max_leaves=12), st.integers(1, 3))
def test_an_answer_that_is_not_embeddings_is_refused_in_one_line(data, n):
    raw = json.dumps(data).encode()
    try:
        got = embedclient.parse(raw, n, 0)
    except embedclient.EmbeddingFailed as exc:
        assert "\n" not in str(exc) and str(exc).startswith("the embeddings endpoint")
    else:
        assert len(got.vectors) == n and all(len(v) == len(got.vectors[0]) for v in got.vectors)


@pytest.mark.parametrize("bad", [{"model": "m", "timeout_seconds": 0}, {"model": "m", "dimensions": -1},
                                 {"model": "m", "languages": "fr"}, {"model": "m", "batch_size": 0},
                                 {"model": "m", "api_key_env": "not a name"}, {"weight": -1},
                                 {"model": "m", "query_prefix": "query:\t"}, {"model": "m", "document_prefix": 3}])
def test_bad_embedding_settings_are_refused(bad):
    with pytest.raises(SettingsError):
        settings_from_mapping({"embeddings": bad})


def test_doctor_and_stats_report_the_channel(vault, cli):
    write(vault)
    with embeddings_server(synonyms=SYNONYMS) as srv:
        reader = configure(vault, srv)
        doctor = cli("memory", "--vault", str(vault.root), "doctor")
        assert "the embeddings endpoint (model hash-64 at " in doctor.stdout and "answers" in doctor.stdout
        assert "6 of 6 entries have no vector of hash-64 yet" in doctor.stdout
        embedding.run_pass(reader)
        stats = json.loads(cli("memory", "--vault", str(vault.root), "stats", "--json").stdout)
        emb = stats["embeddings"]
        assert (emb["model"], emb["present"], emb["missing"]) == ("hash-64", 6, 0)
        assert emb["costs"]["calls"] == 1 and emb["costs"]["texts"] == 6 and emb["costs"]["prompt_tokens"] > 0
        assert stats["costs"]["calls"] == 0                     # extraction's totals are its own
        text = cli("memory", "--vault", str(vault.root), "stats").stdout
        assert "Embeddings: model hash-64" in text and "6 entries with vectors, 0 missing" in text
        url = srv.base_url
    doctor = cli("memory", "--vault", str(vault.root), "doctor")   # the server is gone
    assert f"the embeddings endpoint (model hash-64 at {url}) does not answer" in doctor.stdout
    assert "all 6 entries have a vector of hash-64" in doctor.stdout
    plain = VaultReader(vault.root)
    assert "embeddings" not in json.loads(cli("memory", "--vault", str(configure_off(plain)), "stats",
                                              "--json").stdout)


def configure_off(reader) -> str:
    set_person("embeddings", {"model": ""})   # the model is the person's setting: no model, no channel
    return str(reader.root)


def test_the_watcher_answers_vector_search_as_the_recall_process_would(vault):
    """A large vault's watcher keeps the vectors in memory and answers ``near``: the same matches and counts as the
    recall process computes itself, kept current across an edit and a new embedding pass."""
    from acpmem.search import catalog, watch

    entries = write(vault)
    path = vault.root / "acpmem.toml"
    path.write_text(path.read_text("utf-8").replace("watch_min_entries = 5000", "watch_min_entries = 1"), "utf-8")
    with embeddings_server(synonyms=SYNONYMS) as srv:
        reader = configure(vault, srv)
        embedding.run_pass(reader)
        con, _ = watch.open_fresh(reader.state_dir, reader.root, reader.settings)   # starts the watcher
        deadline = time.monotonic() + 120
        db_path = reader.state_dir / catalog.DB_NAME
        while not watch.sync(reader.state_dir, db_path, heed_mark=False) and time.monotonic() < deadline:
            time.sleep(0.1)
        from embeddings_server import vector
        q = vector("keep agent runs alive across redeploys", 64, SYNONYMS)
        try:
            for step in ("first", "again", "after an edit", "after the pass"):
                got = watch.near(reader.state_dir, con, "hash-64", q, list(reader.settings.types), False, 3)
                m = vectors.load_matrix(con, reader.state_dir, "hash-64", 64, types=reader.settings.types)
                assert got is not None, step
                assert got[0] == pytest.approx(m.top(q, 3)) and got[1].present == m.n, step
                if step == "again":
                    p = vault.root / entries[0].path
                    p.write_text(p.read_text("utf-8").replace("SQLite first", "SQLite first, then git"), "utf-8")
                    watch.fresh(con, reader.root, reader.state_dir, reader.settings)
                elif step == "after an edit":
                    assert got[1].missing == 1
                    embedding.run_pass(reader)
            assert got[1].missing == 0
            found, report = hits(reader, "keep agent runs alive across redeploys")
            assert found[0] == "Session persistence across deploys" and report["vectors"]["missing"] == 0
        finally:
            con.close()
            import os
            import signal
            pid = watch.running_pid(reader.state_dir)
            if pid:
                os.kill(pid, signal.SIGTERM)


def test_embedding_calls_count_neither_in_extraction_costs_nor_in_its_budgets():
    from datetime import datetime, timezone

    from acpmem.core.settings import ExtractionSettings
    from acpmem.write import budget, costs

    ledger = [{"at": "2026-11-29T11:00:00Z", "kind": "embeddings", "model": "e", "ok": True, "texts": 64,
               "prompt_tokens": 5000, "latency_s": 0.2},
              {"at": "2026-11-29T11:30:00Z", "model": "m", "ok": True, "prompt_tokens": 100, "completion_tokens": 20}]
    now = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
    st = budget.state(ledger, now, ExtractionSettings(max_tokens_per_day=1000, max_requests_per_hour=1))
    assert st.tokens_24h == 120 and st.calls_1h == 1
    assert costs.summarize(ledger)["prompt_tokens"] == 100
    emb = costs.summarize_embeddings(ledger)
    assert (emb["calls"], emb["texts"], emb["prompt_tokens"]) == (1, 64, 5000)


def test_a_new_dimensions_setting_re_embeds(vault):
    """``dimensions`` (OpenAI's text-embedding-3 models honour it, as the test server does) changes the vectors'
    length: vectors of the old setting are other vectors, re-embedded by the next pass, not kept as present."""
    write(vault)
    with embeddings_server(synonyms=SYNONYMS) as srv:
        reader = configure(vault, srv)
        assert embedding.run_pass(reader)["embedded"] == len(TOPICS)
        reader = configure(vault, srv, dimensions=16)
        st = embedding.channel_status(reader, probe=False)
        assert (st["present"], st["missing"]) == (0, len(TOPICS))
        assert embedding.run_pass(reader) == {"embedded": len(TOPICS), "missing": 0, "pruned": len(TOPICS),
                                              "error": None}
        assert srv.requests[-1]["dimensions"] == 16
        found, report = hits(reader, "keep agent runs alive across redeploys")
        assert report["vectors"]["missing"] == 0 and report["vectors"]["used"] is True
        assert found[0] == "Session persistence across deploys"


def test_another_model_behind_the_same_name_is_re_embedded(vault):
    """The endpoint starts serving vectors of another length under the same model name (an Ollama tag pointed at
    another model). A pass that embeds anything sees the new length and embeds every entry again; when nothing is
    left to embed, the next recall sees the query's length differ, ranks lexically, and starts a pass told the new
    length, which re-embeds."""
    write(vault)
    with embeddings_server(synonyms=SYNONYMS) as srv:
        reader = configure(vault, srv)
        embedding.run_pass(reader)
        srv.dim = 32
        write(vault, [("Grafana dashboards live in git", "Provisioned from the repo.")])
        got = embedding.run_pass(reader)
        assert got["error"] is None and got["embedded"] == len(TOPICS) + 1
        vcon = vectors.connect(vault.state_dir)
        assert {d for (d,) in vcon.execute("SELECT DISTINCT dim FROM vec")} == {32}
        # nothing new to embed: the recall notices the length, then the pass it starts re-embeds
        srv.dim = 48
        found, report = hits(reader, "keep agent runs alive across redeploys")
        assert report["vectors"]["present"] == 0 and report["vectors"]["used"] is False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and \
                {d for (d,) in vcon.execute("SELECT DISTINCT dim FROM vec")} != {48}:
            time.sleep(0.1)
        vcon.close()
        found, report = hits(reader, "keep agent runs alive across redeploys")
        assert report["vectors"] == {"model": "hash-64", "present": len(TOPICS) + 1, "missing": 0, "used": True}
        assert found[0] == "Session persistence across deploys"


def test_a_batch_of_vectors_is_stored_whole_or_not_at_all(tmp_path):
    """A reader (a recall, the pass's own poller) sees a stored batch whole or not at all: once, with each row its
    own commit, a recall counted 6 of 7 entries as having vectors.

    The reader looks from inside the writes themselves — SQLite's progress handler on the writing connection calls
    it every few hundred instructions while a batch is being inserted — so every look falls mid-batch, in the same
    order on any machine, however loaded (a reader thread raced the writer before, and a slow scheduler could let
    all three batches finish before its first look)."""
    import sqlite3

    vcon = vectors.connect(tmp_path)
    reader = sqlite3.connect(vectors.db_path(tmp_path), timeout=30)   # WAL: a reader never waits for the writer
    seen: list[int] = []

    def look() -> int:
        seen.append(reader.execute("SELECT count(*) FROM vec").fetchone()[0])
        return 0   # go on

    try:
        for batch in range(3):
            before = len(seen)
            vcon.set_progress_handler(look, 200)
            vectors.store(vcon, "m", [(f"h{batch}-{i}", [1.0, float(i)]) for i in range(400)])
            vcon.set_progress_handler(None, 0)
            during = seen[before:]
            assert len(during) >= 3, len(during)      # looked while this batch was being written
            assert set(during) <= {400 * batch, 400 * (batch + 1)}, sorted(set(during))   # never part of it
            look()
            assert seen[-1] == 400 * (batch + 1)      # and then all of it
    finally:
        reader.close()
        vcon.close()


def test_a_batch_that_times_out_is_halved_until_the_endpoint_keeps_up(vault):
    """A slow endpoint still makes progress: a batch that times out is tried again halved, down to one text. The
    server never answers a batch of more than one text, so only batches of one can succeed."""
    write(vault)
    with embeddings_server(synonyms=SYNONYMS) as srv:
        srv.hang_over = 1
        reader = configure(vault, srv, batch_size=4, batch_timeout_seconds=3.0)
        logged: list[str] = []
        result = embedding.run_pass(reader, log=logged.append)
        assert result["embedded"] == len(TOPICS) and result["missing"] == 0 and result["error"] is None
        sizes = [len(b["input"]) for b in srv.requests]
        assert sizes[:3] == [4, 2, 1] and set(sizes[3:]) == {1} and srv.texts == len(TOPICS)
        assert "a batch of 4 timed out; trying batches of 2" in logged
        ledger = [json.loads(x) for x in (vault.state_dir / "costs.jsonl").read_text().splitlines()]
        assert [r["ok"] for r in ledger[:2]] == [False, False] and all(r["ok"] for r in ledger[2:])
        assert hits(configure(vault, srv, batch_size=4, batch_timeout_seconds=3.0),
                    "keep agent runs alive across redeploys")[0][0] == "Session persistence across deploys"


TLS = Path(__file__).parent / "fixtures" / "tls"   # a self-signed certificate for 127.0.0.1


def test_an_https_endpoint_is_trusted_through_the_ca_store_and_one_tls_context_serves_every_call(monkeypatch):
    cert = TLS / "endpoint-cert.pem"
    for var in ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE"):
        monkeypatch.delenv(var, raising=False)
    with embeddings_server(tls=(cert, TLS / "endpoint-key.pem")) as srv:
        ep = embedclient.Endpoint(srv.base_url, "m", None)
        assert srv.base_url.startswith("https://")
        with pytest.raises(embedclient.EmbeddingFailed, match="certificate verify failed"):
            embedclient.embed(ep, ["deploys"], 5.0)    # the system's CAs never signed it
        assert srv.requests == []
        made = dict(embedclient._TLS_CONTEXTS)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))   # a CA store naming it
        first = embedclient.embed(ep, ["deploys"], 5.0)
        second = embedclient.embed(ep, ["queue"], 5.0)
        assert len(first.vectors) == len(second.vectors) == 1 and len(srv.requests) == 2
        assert len(embedclient._TLS_CONTEXTS) == len(made) + 1   # one context for both calls
        assert embedclient.tls_context() is embedclient.tls_context()
        monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "missing.pem"))   # a CA store that cannot be read: one line
        with pytest.raises(embedclient.EmbeddingFailed, match=r"^the embeddings endpoint could not be reached \("):
            embedclient.embed(ep, ["deploys"], 5.0)
        assert len(srv.requests) == 2


def test_the_read_server_makes_the_tls_context_before_it_forks_its_readers(monkeypatch):
    from acpmem.cli import readserver

    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "endpoint-cert.pem"))   # a key of its own in the cache
    key = tuple(os.environ.get(k) for k in embedclient._TLS_ENV)
    embedclient._TLS_CONTEXTS.pop(key, None)
    readserver.warm()
    assert key in embedclient._TLS_CONTEXTS
