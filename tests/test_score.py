"""The selection formula against hand-computed values at a pinned time and seed."""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone

import pytest

from acpmem.core.entry import Entry
from acpmem.core.score import rank, salt_for, score_entry
from acpmem.core.settings import ScoreSettings

AT = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)
CFG = ScoreSettings()


def entry(ident: str, imp: int, created: str, last_read: str | None = None) -> Entry:
    return Entry(id=ident, title=f"entry {ident}", type="fact", importance=imp, created=created, body="",
                 last_read=last_read)


def expected_jitter(ident: str, salt: str) -> float:
    """The documented derivation, restated: the first 64 bits of sha256(salt, id) scaled to [0, 0.5)."""
    return int.from_bytes(hashlib.sha256(f"{salt}\x1f{ident}".encode()).digest()[:8], "big") / 2 ** 64 * 0.5


def test_formula_by_hand():
    e = entry("a1", 7, "2026-10-01T00:00:00Z", last_read="2026-11-14T12:00:00Z")   # read 15 days ago
    s = score_entry(e, AT, "seed:42", CFG)
    assert s.days_since_read == pytest.approx(15.0)
    assert s.anti_recency == pytest.approx(0.5)
    assert s.jitter == pytest.approx(expected_jitter("a1", "seed:42"))
    assert 0 <= s.jitter <= 0.5
    assert s.total == pytest.approx(7 + 0.5 + s.jitter)


def test_never_read_counts_from_created_and_is_capped_at_5():
    young = score_entry(entry("y", 3, "2026-11-23T12:00:00Z"), AT, "seed:1", CFG)    # 6 days
    old = score_entry(entry("o", 3, "2025-10-25T12:00:00Z"), AT, "seed:1", CFG)      # 400 days
    assert young.anti_recency == pytest.approx(0.2)
    assert old.days_since_read == pytest.approx(400.0)
    assert old.anti_recency == 5.0


def test_weights_and_caps_are_configurable():
    cfg = ScoreSettings(importance_weight=0.5, recency_divisor_days=10, recency_cap=2, jitter_max=0)
    s = score_entry(entry("w", 8, "2026-11-04T12:00:00Z"), AT, "seed:1", cfg)        # 25 days
    assert (s.importance, s.anti_recency, s.jitter, s.total) == (4.0, 2.0, 0.0, 6.0)


def test_top_n_and_ties():
    cfg = CFG.with_changes(jitter_max=0.0, top_n=2)
    es = [entry("bbb", 7, "2026-11-29T12:00:00Z"),                     # 7 + 0
          entry("aaa", 7, "2026-11-29T12:00:00Z"),                     # 7 + 0, same importance: id decides
          entry("ccc", 6, "2026-10-30T12:00:00Z"),                     # 6 + 1 = 7, lower importance
          entry("ddd", 2, "2026-11-29T12:00:00Z")]
    ranked = rank(es, AT, "seed:0", cfg)
    assert [r.entry.id for r in ranked] == ["aaa", "bbb", "ccc", "ddd"]
    assert [r.total for r in ranked[:3]] == [7.0, 7.0, 7.0]
    assert [r.selected for r in ranked] == [True, True, False, False]


def test_jitter_stable_within_a_session_and_different_between_sessions():
    es = [entry(f"e{i}", 5, "2026-11-01T00:00:00Z") for i in range(8)]
    a1 = [r.jitter for r in rank(es, AT, salt_for(None, "session-A"), CFG)]
    a2 = [r.jitter for r in rank(es, AT, salt_for(None, "session-A"), CFG)]
    b = [r.jitter for r in rank(es, AT, salt_for(None, "session-B"), CFG)]
    assert a1 == a2
    assert a1 != b
    assert salt_for(3, "session-A") == "seed:3"                      # an explicit seed wins
    assert salt_for(None, None) is None                               # no seed, no session: the caller draws one


def test_adding_an_entry_does_not_move_the_jitter_of_others():
    es = [entry(f"e{i}", 5, "2026-11-01T00:00:00Z") for i in range(4)]
    before = {r.entry.id: r.jitter for r in rank(es, AT, "seed:9", CFG)}
    after = {r.entry.id: r.jitter for r in rank(es + [entry("new", 9, "2026-11-29T00:00:00Z")], AT, "seed:9", CFG)}
    assert all(after[k] == v for k, v in before.items())


def test_score_cli_is_reproducible_with_seed_and_at(example_vault, cli):
    args = ("memory", "score", "--json", "--seed", "5", "--at", "2027-01-01T00:00:00Z", "--vault", str(example_vault.root))
    r1, r2 = cli(*args), cli(*args)
    assert r1.returncode == 0, r1.stderr
    assert r1.stdout == r2.stdout
    rows = json.loads(r1.stdout)["rows"]
    assert sum(r["selected"] for r in rows) == 5
    for r in rows:
        since = r["last_read"] or r["created"]
        days = (datetime(2027, 1, 1, tzinfo=timezone.utc)
                - datetime.fromisoformat(since.replace("Z", "+00:00"))).total_seconds() / 86400
        assert r["anti_recency"] == pytest.approx(min(days / 30, 5), abs=1e-5)
        assert r["jitter"] == pytest.approx(expected_jitter(r["id"], "seed:5"), abs=1e-6)
        assert r["total"] == pytest.approx(r["importance"] + r["anti_recency"] + r["jitter"], abs=1e-5)
    explain = cli("memory", "score", "--explain", "--seed", "5", "--at", "2027-01-01T00:00:00Z",
                  "--vault", str(example_vault.root))
    assert "anti-rec" in explain.stdout and "jitter" in explain.stdout
