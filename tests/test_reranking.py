"""The optional rerank stage: a real loopback ``/v1/rerank`` server (``embeddings_server``: a document's relevance is
the query concepts it shares, or scripted scores), real vaults, real git, real SQLite, real processes."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from acpmem.core.errors import SettingsError
from acpmem.core.settings import settings_from_mapping
from acpmem.infra import rerankclient
from acpmem.read import reranking
from acpmem.vault.reader import VaultReader
from acpmem.read.retrieval import recall
from embeddings_server import embeddings_server
from test_embedding import SYNONYMS, TOPICS, configure as configure_embeddings, write
from helpers_person import set_person, split
from helpers_proc import warnings_said

# Six notes that all match "deploy notes", in a known lexical order, for the model to reorder
NOTES = [(f"Deploy notes {name}", f"Deploy notes about {topic}.")
         for name, topic in (("alpha", "the gateway"), ("bravo", "the queue"), ("charlie", "the cache"),
                             ("delta", "the workers"), ("echo", "the database"), ("foxtrot", "sessions"))]


def configure(vault, srv, section: str = "rerank", **extra) -> VaultReader:
    """Point [rerank] (or another section) at the server (the person's config: endpoint and model; the vault's: the
    rest); returns a fresh reader."""
    cfg = {"base_url": srv.base_url, "model": "cross-test", "timeout_seconds": 5.0, **extra}
    mine, cfg = split(cfg)   # the endpoint and model are the person's (their config), the rest the vault's
    set_person(section, mine)
    lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in cfg.items())
    path = vault.root / "acpmem.toml"
    head, sep, tail = path.read_text("utf-8").partition(f"[{section}]\n")
    assert sep, f"the template has a [{section}] section"
    rest = tail.split("\n[", 1)
    path.write_text(head + f"[{section}]\n" + lines + ("\n[" + rest[1] if len(rest) > 1 else ""), "utf-8")
    return VaultReader(vault.root)


def recalled(reader, query, limit=5, **kw):
    report: dict = {}
    found = recall(reader, query, limit=limit, mark_read=False, report=report, **kw)
    return [h.entry.title for h in found], [h.score for h in found], report


def text_of(reader, title: str) -> str:
    e = next(e for e in reader.load().entries if e.title == title)
    return f"{e.title}\n{e.body}".strip()


def test_off_by_default_and_nothing_of_it_imported(vault, cli):
    write(vault, NOTES)
    probe = ("import sys; from acpmem.vault.reader import VaultReader; from acpmem.read.retrieval import recall; "
             f"v = VaultReader({str(vault.root)!r}); r = {{}}; recall(v, 'deploy notes', report=r, mark_read=False); "
             "print(r, 'acpmem.read.reranking' in sys.modules, 'acpmem.infra.rerankclient' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "{} False False"
    data = json.loads(cli("memory", "--vault", str(vault.root), "recall", "--json", "deploy notes").stdout)
    assert set(data) == {"query", "hits"}


def test_the_model_reorders_recalls_best_candidates(vault, cli):
    write(vault, NOTES)
    lexical, lexical_scores, _ = recalled(VaultReader(vault.root), "deploy notes", limit=20)
    assert len(lexical) == 6
    with embeddings_server() as srv:
        reader = configure(vault, srv)
        last = lexical[-1]                     # the model thinks recall's last is the best by far
        srv.rerank_scores = {text_of(reader, t): (10.0 if t == last else 1.0 - i / 10) for i, t in enumerate(lexical)}
        got, scores, report = recalled(reader, "deploy notes")
        sent = srv.rerank_requests[-1]
        assert sent["model"] == "cross-test" and sent["query"] == "deploy notes" and sent["top_n"] == 6
        assert set(sent) == {"model", "query", "documents", "top_n"}     # what every rerank server takes
        assert sent["documents"] == [text_of(reader, t) for t in lexical]       # recall's order, title and body
        scored = [srv.rerank_scores[d] for d in sent["documents"]]
        assert got == [lexical[i] for i in reranking.merge(scored)][:5]
        assert got.index(last) == 2          # from sixth to third: merged with recall's order, not replacing it
        assert scores == lexical_scores[:5]  # recall's scores, handed out in the new order
        assert report == {"rerank": {"model": "cross-test", "candidates": 6, "used": True}}
        # the command line and its --json say the same
        data = json.loads(cli("memory", "--vault", str(vault.root), "recall", "--json", "deploy notes").stdout)
        assert [h["title"] for h in data["hits"]] == got and data["rerank"]["used"] is True
        # the model's order agreeing with recall's changes nothing
        srv.rerank_scores = {text_of(reader, t): 10.0 - i for i, t in enumerate(lexical)}
        assert recalled(reader, "deploy notes")[0] == lexical[:5]


def test_an_entry_past_the_limit_can_come_in_and_candidates_bound_the_call(vault):
    write(vault, NOTES)
    lexical = recalled(VaultReader(vault.root), "deploy notes", limit=20)[0]
    with embeddings_server() as srv:
        reader = configure(vault, srv, candidates=6)
        srv.rerank_scores = {text_of(reader, t): (10.0 if i == 5 else 5.0 - i) for i, t in enumerate(lexical)}
        got = recalled(reader, "deploy notes", limit=3)[0]
        assert lexical[5] in got and len(got) == 3 and got == [lexical[i] for i in reranking.merge(
            [srv.rerank_scores[text_of(reader, t)] for t in lexical])][:3]
        reader = configure(vault, srv, candidates=4)
        recalled(reader, "deploy notes", limit=3)
        assert len(srv.rerank_requests[-1]["documents"]) == 4
        assert lexical[5] not in recalled(reader, "deploy notes", limit=3)[0]


@pytest.mark.parametrize("failure", ["slow", "error", "bad_answer", "no_endpoint"])
def test_a_failing_model_leaves_recalls_order_with_one_warning(vault, failure, cli):
    write(vault, NOTES)
    lexical = recalled(VaultReader(vault.root), "deploy notes")[0]
    with embeddings_server() as srv:
        reader = configure(vault, srv, timeout_seconds=0.5)
        srv.rerank_scores = {text_of(reader, t): float(i) for i, t in enumerate(lexical)}   # would reverse it
        if failure == "slow":
            srv.rerank_delay = 2.0
        elif failure == "error":
            srv.rerank_status = 503
        elif failure == "bad_answer":
            srv.rerank_shape = "bad"
        else:
            reader = configure(vault, srv, base_url="")
        got, _, report = recalled(reader, "deploy notes")
        assert got == lexical
        want = {"slow": "timed out", "error": "HTTP 503", "bad_answer": "5 scores for 6 texts",
                "no_endpoint": "set [rerank] base_url"}[failure]
        said = report["rerank"]
        assert said["used"] is False and want in said["warning"] and "kept its own order" in said["warning"]
        assert "warning" not in report          # the top-level warning is the vector channel's fallback alone
        env = {"OPENAI_BASE_URL": ""}
        data = cli("memory", "--vault", str(vault.root), "recall", "--json", "deploy notes", env=env)
        assert data.returncode == 0 and want in json.loads(data.stdout)["rerank"]["warning"]
        assert not warnings_said(data.stderr)
        text = cli("memory", "--vault", str(vault.root), "recall", "deploy notes", env=env)
        warned = [ln for ln in text.stderr.splitlines() if ln.startswith("Warning: ")]
        assert text.returncode == 0 and len(warned) == 1 and want in warned[0], text.stderr
        assert "Warning" not in text.stdout


def test_text_embeddings_inference_answers_are_read(vault):
    write(vault, NOTES)
    lexical = recalled(VaultReader(vault.root), "deploy notes", limit=20)[0]
    with embeddings_server() as srv:
        reader = configure(vault, srv)
        srv.rerank_shape = "tei"
        srv.rerank_scores = {text_of(reader, t): (9.0 if i == 4 else 0.0) for i, t in enumerate(lexical)}
        got, _, report = recalled(reader, "deploy notes")
        assert report["rerank"]["used"] is True and got.index(lexical[4]) < 4


def test_queries_recall_answers_by_construction_keep_its_order(vault):
    write(vault, TOPICS + [("Upload client", "The client calls `retryUpload` (module retry_upload) on errors."),
                           ("Kafka partitions", "The consumer group reads 12 partitions; lag is per partition."),
                           ("数据库索引", "数据库的索引每周重建一次。")])
    with embeddings_server(synonyms=SYNONYMS) as srv:
        reader = configure(vault, srv)
        for query in ("retryUpload", "retry_upload", "kafka consumr lag", "数据库迁移"):
            n = len(srv.rerank_requests)
            report = recalled(reader, query)[2]
            assert len(srv.rerank_requests) == n, query            # not even sent
            assert report["rerank"]["used"] is False and report["rerank"]["skipped"], query
        n = len(srv.rerank_requests)
        report = recalled(reader, "consumer")[2]          # one word: nothing for the model to relate
        assert len(srv.rerank_requests) == n and "one-word" in report["rerank"]["skipped"]
        reader = configure(vault, srv, languages="en,zh")
        assert recalled(reader, "数据库迁移")[2]["rerank"]["used"] is True
        # a query that finds nothing, or one entry, has nothing to reorder
        n = len(srv.rerank_requests)
        assert recalled(reader, "zebra")[0] == [] and len(srv.rerank_requests) == n


def test_with_the_embedding_channel_the_model_reorders_the_fused_ranking(vault):
    write(vault)
    with embeddings_server(synonyms=SYNONYMS) as srv:
        configure_embeddings(vault, srv)
        reader = configure(vault, srv)
        from acpmem.read import embedding

        embedding.run_pass(reader)
        got, _, report = recalled(reader, "keep agent runs alive across redeploys")
        assert report["vectors"]["used"] is True and report["rerank"]["used"] is True, report
        assert got[0] == "Session persistence across deploys"


def test_both_layers_are_reranked_and_merged_by_score(tmp_path, clock, monkeypatch):
    import random

    from acpmem.vault.create import init_user_vault, init_vault
    from acpmem.read.layers import recall_layered

    monkeypatch.setenv("ACPMEM_USER_VAULT", str(tmp_path / "me" / ".acp-memory"))
    user = init_user_vault(clock=clock, rng=random.Random(3))
    write(user, [(f"{t} (mine)", b) for t, b in NOTES[:3]])
    ws = tmp_path / "ws"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    proj = init_vault(None, cwd=ws, clock=clock, rng=random.Random(5))
    write(proj, NOTES[3:])
    with embeddings_server() as srv:
        for v in (user, proj):
            configure(v, srv)
        report: dict = {}
        hits = recall_layered(VaultReader(proj.root), "deploy notes", limit=6, report=report, mark_read=False)
        assert {h.layer for h in hits} == {"project", "user"} and len(srv.rerank_requests) == 2
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert report["rerank"]["used"] is True
    user.close()
    proj.close()


def test_doctor_stats_and_mcp_report_the_stage(vault, cli):
    from acpmem.integrations.mcp_server import MemoryService

    write(vault, NOTES)
    with embeddings_server() as srv:
        configure(vault, srv)
        doctor = cli("memory", "--vault", str(vault.root), "doctor")
        assert f"the rerank endpoint (model cross-test at {srv.base_url}) answers" in doctor.stdout
        stats = json.loads(cli("memory", "--vault", str(vault.root), "stats", "--json").stdout)
        assert stats["rerank"] == {"model": "cross-test", "base_url": srv.base_url, "candidates": 20}
        assert "Rerank: model cross-test at " in cli("memory", "--vault", str(vault.root), "stats").stdout
        svc = MemoryService(vault.root, "s-mcp")
        text, meta = svc.answer("memory_recall", {"query": "deploy notes"})
        assert meta == {"acpmem/rerank": {"model": "cross-test", "candidates": 6, "used": True}}
        assert "Deploy notes" in text
        srv.rerank_status = 500
        failed_text, meta = svc.answer("memory_recall", {"query": "deploy notes"})
        assert "HTTP 500" in meta["acpmem/rerank"]["warning"] and "acpmem/warning" not in meta
        assert "lexical" not in failed_text       # the model is told nothing: recall's own order stands
        url = srv.base_url
    doctor = cli("memory", "--vault", str(vault.root), "doctor")
    assert f"the rerank endpoint (model cross-test at {url}) does not answer" in doctor.stdout


@pytest.mark.parametrize("bad", [{"model": "m", "timeout_seconds": 0}, {"model": "m", "candidates": 1},
                                 {"model": "m", "candidates": 500}, {"model": "m", "languages": "fr"},
                                 {"model": "m", "api_key_env": "not a name"}, {"model": 3},
                                 {"model": "m", "base_url": "http://x\t"}, {"model": "m", "candidates": "20"}])
def test_bad_rerank_settings_are_refused_in_one_line(bad):
    with pytest.raises(SettingsError) as err:
        settings_from_mapping({"rerank": bad})
    assert "\n" not in str(err.value) and "rerank" in str(err.value)


@hsettings(max_examples=80, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers(-2, 5) | st.floats() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(
                        st.sampled_from(["results", "index", "relevance_score", "score", "x"]), c, max_size=3),
                    max_leaves=14), st.integers(1, 3))
def test_an_answer_that_is_not_one_score_per_text_is_refused_in_one_line(data, n):
    try:
        got = rerankclient.parse(json.dumps(data).encode(), n)
    except rerankclient.RerankFailed as exc:
        assert "\n" not in str(exc) and str(exc).startswith("the rerank endpoint")
    else:
        assert len(got.scores) == n and all(isinstance(s, float) for s in got.scores)


@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=0, max_size=40), st.data())
def test_the_merge_is_a_permutation_that_follows_the_model(scores, data):
    n = len(scores)
    order = reranking.merge(scores)
    assert sorted(order) == list(range(n))
    if scores == sorted(scores, reverse=True):
        assert order == list(range(n))       # the model agrees with recall (ties included): nothing moves
    if n >= 2:   # a better score never moves an entry down
        i = data.draw(st.integers(0, n - 1))
        better = list(scores)
        better[i] = max(scores) + 1.0
        assert reranking.merge(better).index(i) <= order.index(i)


@hsettings(max_examples=25, deadline=None)
@given(scores=st.lists(st.floats(-50, 50, allow_nan=False), min_size=12, max_size=12),
       limit=st.integers(1, 8), candidates=st.integers(2, 12))
def test_any_scores_give_recalls_candidates_in_the_merged_order(rerank_vault, scores, limit, candidates):
    """Whatever the model answers, recall returns its own best ``candidates`` (no entry from elsewhere, none
    twice) in the merged order, cut to ``limit``, with scores that never rise down the list."""
    vault, srv, lexical = rerank_vault
    reader = configure(vault, srv, candidates=candidates)
    top = lexical[:max(limit, candidates)]
    srv.rerank_scores = {text_of(reader, t): scores[i] for i, t in enumerate(lexical)}
    got, got_scores, report = recalled(reader, "deploy notes", limit=limit)
    sent = [srv.rerank_scores[d] for d in srv.rerank_requests[-1]["documents"]]
    assert report["rerank"]["used"] is True and len(sent) == len(top)
    assert got == [top[i] for i in reranking.merge(sent)][:limit]
    assert got_scores == sorted(got_scores, reverse=True) and len(set(got)) == len(got)


@pytest.fixture(scope="module")
def rerank_vault(tmp_path_factory):
    import random

    from acpmem.vault.create import init_vault

    v = init_vault(tmp_path_factory.mktemp("rr") / "vault", rng=random.Random(9))
    write(v, [(f"Deploy notes {i:02d}", f"Deploy notes about part {i} of the system; " + "deploy " * (i % 4))
              for i in range(12)])
    lexical = recalled(VaultReader(v.root), "deploy notes", limit=20)[0]
    assert len(lexical) == 12
    with embeddings_server() as srv:
        yield v, srv, lexical
    v.close()
