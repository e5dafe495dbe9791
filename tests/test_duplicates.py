"""Duplicates and contradictions by meaning (``acpmem.write.duplicates``): the planted set of
``tests/fixtures/duplicates/planted.json`` clusters in each mode — lexical, embedding (the test embeddings server on
127.0.0.1) and model (the loopback OpenAI server, answering as the fixture says) — the issue's pnpm example among
twelve unrelated entries in every mode, the model's answers read in any of their shapes, one call per batch of
pairs within the extraction budget, and the mode chosen by ``[consolidate] similarity``."""
from __future__ import annotations

import json
import math

import pytest

import planted_duplicates as pd
from embeddings_server import embeddings_server
from helpers_proc import git_out
from openai_server import reply

from acpmem.core.errors import SettingsError, UsageError
from acpmem.upkeep.consolidate import consolidate
from acpmem.write.duplicates import find, read_verdicts
from acpmem.write.llm import ToolCall

HASH_THRESHOLD = 0.45    # the test server's vectors are bags of words: their cosines run lower than a model's
PNPM = ("Use pnpm, never npm, in this repository", "This repo uses pnpm instead of npm",
        "Package manager: pnpm (npm lockfiles rejected)")


def _issue_example(group, item) -> bool:
    return group.get("name") == "pnpm" or bool(item.get("unrelated"))


@pytest.fixture
def hash_embeddings():
    with embeddings_server(dim=512, synonyms=pd.SYNONYMS) as srv:
        yield srv


def _open(vault, mode, emb, srv):
    """The vault configured for ``mode`` (its channel servers), ``similarity`` left at auto."""
    if mode == "model":
        srv.responder = pd.oracle()
    return pd.configure(vault, embeddings=emb if mode in ("embedding", "model") else None,
                        model=srv if mode == "model" else None, embedding_threshold=HASH_THRESHOLD)


@pytest.mark.parametrize("mode", ["lexical", "embedding", "model"])
def test_the_issue_example_clusters_among_twelve_unrelated_entries_in_every_mode(vault, mode, hash_embeddings,
                                                                                   openai_server):
    truth = pd.plant(vault, only=_issue_example)
    assert len(truth) == 15
    v = _open(vault, mode, hash_embeddings, openai_server)
    got = find(v)
    assert got.mode == mode            # auto chose the best configured
    (cluster,) = got.clusters
    titles = {truth[i][2].splitlines()[0] for i in cluster.ids}
    assert titles == set(PNPM) and cluster.kind == "duplicate"
    if mode == "model":
        assert got.calls >= 1 and got.judged >= 3
        assert all(c for c in got.pairs if c[4] == "model")
    if mode == "embedding":
        assert hash_embeddings.texts >= 15   # every entry was embedded before the comparison
    v.close()


@pytest.mark.parametrize("mode,precision,recall", [("lexical", 0.9, 0.7), ("embedding", 0.7, 0.9),
                                                   ("model", 1.0, 1.0)])
def test_the_planted_set_clusters_in_each_mode(vault, mode, precision, recall, hash_embeddings, openai_server):
    truth = pd.plant(vault)
    v = _open(vault, mode, hash_embeddings, openai_server)
    got = find(v)
    s = pd.scores(pd.cluster_pairs(got.clusters), pd.true_pairs(truth))
    assert s["all"]["precision"] >= precision and s["all"]["recall"] >= recall, s
    # the pnpm paraphrases are one cluster in every mode, and the contradictions are told from the duplicates
    pnpm = next(c for c in got.clusters if PNPM[0] in {truth[i][2].splitlines()[0] for i in c.ids})
    assert set(PNPM) <= {truth[i][2].splitlines()[0] for i in pnpm.ids}
    assert s["contradiction"]["recall"] >= (0.6 if mode == "lexical" else 0.8), s
    if mode == "model":
        bodies = [b for b in openai_server.bodies if b]
        assert len(bodies) == got.calls == math.ceil(got.judged / v.settings.consolidate.model_pairs)
        assert all(b["tools"][0]["function"]["name"] == "memory_judge" for b in bodies)
        assert all(b["messages"][0]["content"].count('kind="entry"') <= 2 * v.settings.consolidate.model_pairs
                   for b in bodies)
        costs = [json.loads(x) for x in (v.state_dir / "costs.jsonl").read_text().splitlines()]
        assert [c["request"] for c in costs if c.get("kind") != "embeddings"] == ["consolidate-judge"] * got.calls
    v.close()


def test_the_vector_channel_finds_what_the_words_miss(vault, hash_embeddings, openai_server):
    truth = pd.plant(vault)
    lexical = pd.scores(pd.cluster_pairs(find(vault, mode="lexical").clusters), pd.true_pairs(truth))
    v = _open(vault, "embedding", hash_embeddings, openai_server)
    got = find(v)
    embedded = pd.scores(pd.cluster_pairs(got.clusters), pd.true_pairs(truth))
    assert embedded["all"]["recall"] > lexical["all"]["recall"]
    assert any(p[4] == "embedding" for p in got.pairs)
    v.close()


@pytest.mark.parametrize("style", ["json", "lines"])
def test_a_model_answering_in_text_is_read(vault, style, openai_server):
    truth = pd.plant(vault, only=_issue_example)
    v = pd.configure(vault, model=openai_server)
    openai_server.responder = pd.oracle(style)
    got = find(v)
    assert [{truth[i][2].splitlines()[0] for i in c.ids} for c in got.clusters] == [set(PNPM)]
    assert got.judged >= 3 and all(p[4] == "model" for p in got.pairs)
    v.close()


def test_read_verdicts_shapes():
    call = ToolCall("c1", "memory_judge", {"verdicts": [{"pair": 1, "verdict": "duplicate"},
                                                        {"pair": 9, "verdict": "duplicate"},
                                                        {"pair": 2, "verdict": "maybe"}]}, "")
    assert read_verdicts([call], None, 3) == {1: "duplicate"}          # out of range and unknown words left out
    assert read_verdicts([], '<tool_call>{"name": "memory_judge", "arguments": {"verdicts": '
                             '[{"pair": 2, "verdict": "contradiction"}]}}</tool_call>', 2) == {2: "contradiction"}
    assert read_verdicts([], '{"1": "same", "2": "unrelated"}', 2) == {1: "duplicate", 2: "different"}
    assert read_verdicts([], "1. Duplicate\n2) **contradiction**\nPair 3 - distinct", 3) == {
        1: "duplicate", 2: "contradiction", 3: "different"}
    assert read_verdicts([], "I cannot tell.", 2) == {}


def test_the_model_stays_within_the_budget_and_unjudged_pairs_keep_the_words_verdict(vault, openai_server):
    truth = pd.plant(vault)
    v = pd.configure(vault, model=openai_server, model_pairs=5)
    pd.set_section(v.root, "extraction", {"max_requests_per_hour": 1})
    v = pd.configure(v)
    openai_server.responder = pd.oracle()
    got = find(v)
    assert got.calls == 1 and len(openai_server.bodies) == 1 and got.judged == 5
    assert any("not judged by the model" in n and "max_requests_per_hour" in n for n in got.notes)
    lexical = pd.cluster_pairs(find(v, mode="lexical").clusters)
    # what the model did not judge is what the words found: nothing lost for want of budget
    assert set(lexical) <= set(pd.cluster_pairs(got.clusters)) | set(pd.true_pairs(truth))
    assert len(openai_server.bodies) == 1   # the lexical run called nothing
    v.close()


def test_a_failing_model_leaves_the_words_verdict(vault, openai_server):
    pd.plant(vault, only=_issue_example)
    v = pd.configure(vault, model=openai_server)
    openai_server.enqueue(reply.server_error(500))
    got = find(v)
    assert got.calls == 0 and any("not judged by the model" in n for n in got.notes)
    assert len(got.clusters) == 1 and len(got.clusters[0].ids) == 3      # the lexical channel's cluster
    v.close()


def test_modes_by_configuration_and_their_errors(vault, cli, openai_server):
    pd.plant(vault, only=_issue_example)
    v = pd.configure(vault, similarity="embedding")
    with pytest.raises(SettingsError, match="no embeddings model"):
        find(v)
    r = cli("memory", "--vault", str(v.root), "consolidate", "--dry-run")
    assert r.returncode == 1 and r.stderr.startswith("Error: ") and "no embeddings model" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = cli("memory", "--vault", str(v.root), "consolidate", "--dry-run", "--similarity", "lexical", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["similarity"] == "lexical" and len(doc["clusters"]) == 1
    r = cli("memory", "--vault", str(v.root), "consolidate", "--dry-run", "--similarity", "fuzzy")
    assert r.returncode == 2 and "unknown similarity mode 'fuzzy'" in r.stderr
    pd.set_section(v.root, "consolidate", {"similarity": "semantic"})
    broken = pd.configure(v).settings.broken   # read as the last good settings, saying why (never wedged)
    assert "consolidate.similarity must be auto, lexical, embedding or model" in broken
    pd.set_section(v.root, "consolidate", {"similarity": "model"})
    with pytest.raises(SettingsError, match="no model endpoint"):
        find(pd.configure(v))
    v.close()


def test_a_contradiction_is_proposed_never_merged_on_its_own(vault, openai_server):
    truth = pd.plant(vault, only=lambda g, i: g.get("name") in ("pnpm", "friday") or bool(i.get("unrelated")))
    v = pd.configure(vault, model=openai_server, similarity="lexical")
    openai_server.enqueue(*[reply.writes(reply.write(f"- Merged {n}.", title=f"Merged {n}")) for n in range(2)])
    res = consolidate(v)
    kinds = {o.cluster.kind: o for o in res.outcomes}
    assert res.mode == "commit" and set(kinds) == {"duplicate", "contradiction"}
    assert kinds["duplicate"].status == "written" and kinds["contradiction"].status == "proposed"
    assert kinds["contradiction"].entry["path"].startswith("proposals/")
    live = {e.id for e in v.load().live()}
    assert set(kinds["contradiction"].cluster.ids) <= live             # untouched until a person decides
    assert not set(kinds["duplicate"].cluster.ids) & live
    from acpmem.upkeep import review as rv

    assert [i.kind for i in rv.queue(v) if i.id == kinds["contradiction"].entry["id"]] == ["proposal"]
    assert "Never deploy on Fridays" in {truth[i][2].splitlines()[0] for i in kinds["contradiction"].cluster.ids}
    assert git_out(v.root, "status", "--porcelain") == ""
    v.close()
