"""``consolidate``: clusters of near-duplicates and contradictions from the search index, measured on a planted vault
(precision and recall of the pairs), and the merge through the real fork on the loopback OpenAI server."""
from __future__ import annotations

import itertools
import json
import random

import pytest

from helpers_proc import git_out
from openai_server import reply
from planted_duplicates import set_section
from test_fork import configure as configure_fork

from acpmem.core.entry import Citation, Entry
from acpmem.upkeep import review as rv
from acpmem.vault.writer import Vault
from acpmem.upkeep.consolidate import consolidate, find_clusters

# Distinct facts: none of these may be clustered with another.
BACKGROUND = [
    ("The CI runs on GitHub Actions", "- Workflows live in .github/workflows; the main job is build.yml."),
    ("Releases are tagged from main", "- A release is a signed tag vX.Y.Z on main, made by scripts/release.sh."),
    ("Logs go to journald", "- The service writes structured logs to journald; query them with journalctl -u api."),
    ("The frontend uses React with Vite", "- Components are in web/src/components; Vite serves the dev build."),
    ("Feature flags come from LaunchDarkly", "- Flags are read once per request through flags.ts."),
    ("Database migrations use Alembic", "- Run alembic upgrade head before the integration tests."),
    ("Python code is formatted with ruff format", "- The pre-commit hook runs ruff format and ruff check."),
    ("Secrets are stored in Vault by HashiCorp", "- Services read them at start through the vault agent sidecar."),
    ("The staging cluster is in eu-west-1", "- Staging runs on EKS in eu-west-1 with three nodes."),
    ("Customer emails are sent through Postmark", "- Templates are edited in the Postmark dashboard, not in code."),
    ("Images are resized by a Lambda", "- Uploads land in S3 and a Lambda writes thumbnails to the cdn bucket."),
    ("The search page uses Elasticsearch", "- The products index is rebuilt nightly by the reindex cron job."),
    ("Payments go through Stripe", "- Webhooks are verified with the signing secret from the environment."),
    ("Mobile apps are built with Flutter", "- The iOS build needs Xcode; Android builds in the CI."),
    ("On-call rotates weekly on Mondays", "- PagerDuty hands over at 10:00 local time."),
    ("Metrics are scraped by Prometheus", "- Dashboards live in Grafana under the team folder."),
    ("The API is versioned in the URL path", "- New endpoints go under /v2; /v1 is frozen."),
    ("Translations are managed in Crowdin", "- The sync job opens a pull request with new strings."),
    ("Integration tests need Docker", "- docker compose up starts Postgres, Redis and the mock mail server."),
    ("Code review needs one approval", "- Changes to auth need a second reviewer from the security team."),
    ("The monorepo uses pnpm workspaces", "- Each package has its own package.json under packages/."),
    ("Error tracking uses Sentry", "- The DSN is set per environment; releases are uploaded with source maps."),
    ("Background jobs run on Celery", "- Workers consume from RabbitMQ; the beat scheduler runs separately."),
    ("Documentation is built with MkDocs", "- docs/ is published to GitHub Pages on every push to main."),
]
# Near-duplicates: the same fact written more than once.
DUPLICATES = [
    [("Session append must hold the per-session lock",
      "- session.append must hold the per-session lock in state.ts because the post-tool hook fires mid-write."),
     ("session.append must hold the per-session lock",
      "- Guard session.append with the per-session lock in state.ts: the post-tool hook fires mid-write.")],
    [("Use uv to install Python dependencies",
      "- Install the Python dependencies with uv sync; pip is not used in this repository."),
     ("Python dependencies are installed with uv",
      "- Use uv sync to install the Python dependencies; this repository does not use pip."),
     ("Install Python dependencies with uv sync",
      "- In this repository the Python dependencies are installed with uv sync, pip is not used.")],
    [("The worker drains the queue once per vault",
      "- One background worker per vault drains the pending queue and exits when it is empty."),
     ("One worker per vault drains the pending queue",
      "- A single background worker per vault drains the pending queue, then exits when empty.")],
    [("Timestamps are stored in UTC",
      "- Store every timestamp in UTC as ISO 8601 text; convert to local time only in the UI."),
     ("Store timestamps in UTC ISO 8601",
      "- Every timestamp is stored in UTC as ISO 8601 text and converted to local time only in the UI.")],
    [("Cache keys include the tenant id",
      "- Every Redis cache key starts with the tenant id so tenants never read each other's entries."),
     ("Redis cache keys start with the tenant id",
      "- Prefix every Redis cache key with the tenant id, so one tenant never reads another tenant's entries.")],
]
# Contradictions: the same subject, a different number or a negation.
CONTRADICTIONS = [
    [("The API gateway listens on port 8080", "- The API gateway listens on port 8080 behind the load balancer."),
     ("The API gateway listens on port 9090", "- The API gateway listens on port 9090 behind the load balancer.")],
    [("Node 18 is the supported runtime", "- The services run on Node 18; the Dockerfile pins node:18-slim."),
     ("Node 20 is the supported runtime", "- The services run on Node 20; the Dockerfile pins node:20-slim.")],
    [("Deploys happen on Fridays", "- Production deploys happen on Fridays after the weekly release review."),
     ("Never deploy on Fridays", "- Production deploys never happen on Fridays; the weekly release review is Thursday.")],
    [("Sessions expire after 30 minutes", "- User sessions expire after 30 minutes of inactivity; the refresh token "
                                          "lasts 7 days."),
     ("Sessions expire after 60 minutes", "- User sessions expire after 60 minutes of inactivity; the refresh token "
                                          "lasts 7 days.")],
]


def configure(v: Vault, srv=None, **extraction) -> Vault:
    """The fork's model on the loopback server, clusters by the words: these tests are about the merge (the model
    judging the pairs is tests/test_duplicates.py)."""
    set_section(v.root, "consolidate", {"similarity": "lexical"})
    return configure_fork(v, srv, **extraction)


def planted(v: Vault, rng: random.Random) -> tuple[list[str], list[list[str]]]:
    """Write the planted vault in one commit; the true clusters (ids) of duplicates and of contradictions."""
    groups = [[x] for x in BACKGROUND] + DUPLICATES + CONTRADICTIONS
    entries, truth, taken = [], [], set()
    for n, group in enumerate(groups):
        ids = []
        for m, (title, body) in enumerate(group):
            ident = v.new_id(taken)
            taken.add(ident)
            e = Entry(id=ident, title=title, type=rng.choice(["fact", "decision", "lesson"]), importance=5,
                      created=f"2026-11-{10 + m:02d}T12:00:00Z", body=body + "\n",
                      citation=(Citation(f"s-{n}", 10 * m + 1),))
            entries.append(e.with_changes(path=v.path_for(ident, title)))
            ids.append(ident)
        if len(group) > 1:
            truth.append(ids)
    v.write_entries(entries, subject="planted", why="test")
    return [e.id for e in entries], truth


def _pairs(groups) -> set[frozenset]:
    return {frozenset(p) for g in groups for p in itertools.combinations(g, 2)}


def test_clusters_on_a_planted_vault_have_high_precision_and_recall(vault):
    _, truth = planted(vault, random.Random(1))
    found = find_clusters(vault)
    got, want = _pairs([c.ids for c in found]), _pairs(truth)
    precision = len(got & want) / len(got)
    recall = len(got & want) / len(want)
    assert precision >= 0.9 and recall >= 0.9, (precision, recall, [c.to_json() for c in found])
    # the kind is right for every planted cluster found
    kinds = {frozenset(c.ids): c.kind for c in found}
    for group in truth[:len(DUPLICATES)]:
        assert kinds.get(frozenset(group), "duplicate") == "duplicate"
    for group in truth[len(DUPLICATES):]:
        assert kinds.get(frozenset(group)) == "contradiction"


def test_dry_run_and_no_endpoint_only_report(vault, cli):
    planted(vault, random.Random(2))
    head = git_out(vault.root, "rev-parse", "HEAD")
    res = consolidate(vault)                            # no endpoint configured
    assert res.mode == "report" and "no model endpoint" in res.reason and len(res.outcomes) >= 8
    r = cli("memory", "--vault", str(vault.root), "consolidate", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["mode"] == "report" and doc["reason"] == "--dry-run" and doc["entries"] == len(BACKGROUND) + sum(map(len, DUPLICATES + CONTRADICTIONS))
    assert {c["status"] for c in doc["clusters"]} == {"reported"}
    assert git_out(vault.root, "rev-parse", "HEAD") == head


def _merge_reply(srv, n: int) -> None:
    for i in range(n):
        srv.enqueue(reply.writes(reply.write(f"- Merged fact {i}.", title=f"Merged fact {i}")))


def test_auto_merges_each_cluster_in_one_commit_keeping_every_citation(vault, openai_server, cli):
    _, truth = planted(vault, random.Random(3))
    v = configure(vault, openai_server)
    n = len(find_clusters(v))
    _merge_reply(openai_server, n)
    res = consolidate(v)
    # a duplicate is merged; a contradiction is proposed, for a person to decide which claim holds
    assert res.mode == "commit" and [o.status for o in res.outcomes] == [
        "proposed" if o.cluster.kind == "contradiction" else "written" for o in res.outcomes]
    assert {o.status for o in res.outcomes} == {"written", "proposed"}
    from acpmem.upkeep import review as rv

    for item in [i for i in rv.queue(v) if i.kind == "proposal"]:
        rv.decide(v, item, "accept")
    loaded = {e.id: e for e in v.load().entries}
    for o in res.outcomes:
        merged = loaded[o.entry["id"]]
        members = [loaded[i] for i in o.cluster.ids]
        assert merged.supersedes == o.cluster.ids
        assert all(m.superseded_by == merged.id for m in members)
        assert set(merged.citation) == {c for m in members for c in m.citation}
        assert merged.importance == max(m.importance for m in members)
        msg = git_out(v.root, "log", "-1", "--format=%B", o.commit)
        kind = "proposal" if o.status == "proposed" else "consolidate"
        assert f"Acpmem-Kind: {kind}" in msg and f"Acpmem-Consolidate: {' '.join(o.cluster.ids)}" in msg
    # superseded entries stay readable: list --all and show
    old = res.outcomes[0].cluster.ids[0]
    r = cli("memory", "--vault", str(v.root), "list", "--all", "--json")
    assert old in {e["id"] for e in json.loads(r.stdout)["entries"]}
    r = cli("memory", "--vault", str(v.root), "show", old)
    assert r.returncode == 0 and loaded[old].body.strip() in r.stdout
    assert old not in {e.id for e in v.load().live()}
    # the model's answers are framed entries of one cluster each
    first = openai_server.requests[0].body["messages"][0]["content"]
    assert first.startswith("Merge the memory entries below into one.")
    assert all(f'id="{i}"' in first for i in res.outcomes[0].cluster.ids)
    assert consolidate(v).outcomes == ()                 # nothing left to merge
    v.close()


def test_review_policy_turns_merges_into_proposals(vault, openai_server):
    planted(vault, random.Random(4))
    v = configure(vault, openai_server, policy="review")
    n = len(find_clusters(v))
    _merge_reply(openai_server, n)
    res = consolidate(v)
    assert res.mode == "propose" and {o.status for o in res.outcomes} == {"proposed"}
    queue = rv.queue(v)
    assert len(queue) == n and all(i.kind == "proposal" for i in queue)
    assert all(e.superseded_by is None for e in v.load().entries)       # nothing superseded until accepted
    item = queue[0]
    d = rv.decide(v, item, "accept")
    assert all(v.resolve(i).superseded_by == item.id for i in item.entry.supersedes)
    assert d.path.startswith("entries/")
    v.close()


def test_consolidate_run_twice_proposes_each_merge_once(vault, openai_server):
    planted(vault, random.Random(4))
    v = configure(vault, openai_server, policy="review")
    n = len(find_clusters(v))
    _merge_reply(openai_server, n)
    first = consolidate(v)
    assert {o.status for o in first.outcomes} == {"proposed"}
    _merge_reply(openai_server, n)                                       # the model would answer again
    again = consolidate(v)
    assert {o.status for o in again.outcomes} == {"skipped"}, [o.status for o in again.outcomes]
    assert all(o.error.startswith("a merge of it awaits review: #") for o in again.outcomes)
    assert len(rv.queue(v)) == n and len(openai_server.requests) == n   # no second proposal, no model call
    v.close()


def test_accepting_a_second_merge_of_entries_already_merged_is_refused(vault, openai_server):
    from acpmem.core.errors import Refused
    from acpmem.core.layout import PROPOSALS_DIR
    from acpmem.vault.writer import KIND_PROPOSE

    planted(vault, random.Random(4))
    v = configure(vault, openai_server, policy="review")
    _merge_reply(openai_server, len(find_clusters(v)))
    consolidate(v)
    item = rv.queue(v)[0]
    # a second proposal of the same merge, as the consolidate of an older acpmem (or another clone) wrote it
    twin_id = v.new_id()
    twin = item.entry.with_changes(id=twin_id, path=v.path_for(twin_id, "twin " + item.entry.title, PROPOSALS_DIR),
                                   title="twin " + item.entry.title)
    v.write_entries([twin], subject="merge again", why="a second merge", kind=KIND_PROPOSE)
    rv.decide(v, item, "accept")
    twin_item = rv.find(v, twin_id)
    with pytest.raises(Refused, match=f"merges entries already merged into #{item.id}"):
        rv.decide(v, twin_item, "accept")
    live_merges = [e for e in v.load().live() if (e.source or {}).get("consolidate")]
    assert [e.id for e in live_merges if set(e.supersedes) & set(item.entry.supersedes)] == [item.id]
    rv.decide(v, twin_item, "reject", reason="merged already")            # what the error says to do works
    assert twin_id not in {i.id for i in rv.queue(v)}
    v.close()


@pytest.mark.parametrize("kind,a,b", [("contradiction", "listens on port 8080", "listens on port 9090"),
                                      ("contradiction", "deploys happen on fridays", "deploys never happen on fridays"),
                                      (None, "uses uv sync", "uses uv sync here")])
def test_differs(kind, a, b):
    from acpmem.search.similar import differs

    assert (differs(a, b) is not None) == (kind == "contradiction")


def test_a_model_that_merges_nothing_fails_the_cluster_and_budgets_defer_the_rest(vault, openai_server, cli):
    planted(vault, random.Random(5))
    v = configure(vault, openai_server, max_requests_per_hour=1)
    head = git_out(v.root, "rev-parse", "HEAD")
    openai_server.enqueue(reply.text("I would rather not."))
    res = consolidate(v)
    assert res.outcomes[0].status == "failed" and "no merged entry" in res.outcomes[0].error
    assert {o.status for o in res.outcomes[1:]} == {"deferred"} and "max_requests_per_hour" in res.outcomes[1].error
    assert len(openai_server.requests) == 1 and git_out(v.root, "rev-parse", "HEAD") == head
    (cost,) = [json.loads(x) for x in (v.state_dir / "costs.jsonl").read_text().splitlines()]
    assert cost["request"] == "consolidate" and cost["entries"] == 0
    v.close()
    # through the command line (its own clock: the budget has freed): a failed merge is exit 1 with one error line
    openai_server.enqueue(*[reply.text("no") for _ in res.outcomes])
    r = cli("memory", "--vault", str(v.root), "consolidate")
    assert r.returncode == 1 and r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1
    assert "failed: the model wrote no merged entry" in r.stdout


@pytest.mark.parametrize("between", ["the newer member's file", "the older member's file"])
def test_a_merge_keeps_the_files_and_a_commit_that_is_stale_exactly_when_a_member_was(between, tmp_path, clock,
                                                                                      openai_server):
    """A merged entry is about every file its members were about, at one commit: the newest member's when nothing
    an older member is about changed since it was written (the merge is not stale), else their common ancestor
    (still stale for that file, as the older member was)."""
    import subprocess

    from acpmem.vault.create import init_vault
    from acpmem.vault.projectgit import stale_map

    def git(*args):
        return subprocess.run(["git", "-C", str(proj), *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "tests").mkdir()
    (proj / "src" / "state.ts").write_text("export const lock = 1\n")
    (proj / "tests" / "state.test.ts").write_text("test('lock')\n")
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    git("add", "-A")
    git("commit", "-qm", "start")
    c1 = git("rev-parse", "HEAD")
    changed = "tests/state.test.ts" if between == "the newer member's file" else "src/state.ts"
    with open(proj / changed, "a") as f:
        f.write("// changed\n")
    git("commit", "-qam", "a change between the two writes")
    c2 = git("rev-parse", "HEAD")
    v = init_vault(proj / ".acp-memory", clock=clock, rng=random.Random(7))
    (a_title, a_body), (b_title, b_body) = DUPLICATES[0]
    entries = []
    for n, (title, body, rel, commit) in enumerate(((a_title, a_body, "src/state.ts", c1),
                                                    (b_title, b_body, "tests/state.test.ts", c2))):
        ident = v.new_id({e.id for e in entries})
        e = Entry(id=ident, title=title, type="fact", importance=5, created=f"2026-11-1{n}T12:00:00Z",
                  body=body + "\n", citation=(Citation(f"s-{n}", 1),), extra={"files": [rel], "commit": commit})
        entries.append(e.with_changes(path=v.path_for(ident, title)))
    v.write_entries(entries, subject="two writes of one fact", why="test")
    older, newer = (e.id for e in entries)
    assert set(stale_map(v, force=True)) == ({older} if changed == "src/state.ts" else set())
    v = configure(v, openai_server)
    _merge_reply(openai_server, 1)
    (o,) = consolidate(v).outcomes
    assert o.status == "written", o
    merged = next(e for e in v.load().entries if e.id == o.entry["id"])
    assert merged.extra["files"] == ["src/state.ts", "tests/state.test.ts"]
    if changed == "tests/state.test.ts":
        assert merged.extra["commit"] == c2 and o.entry["id"] not in stale_map(v, force=True)
    else:
        assert merged.extra["commit"] == c1
        assert stale_map(v, force=True)[o.entry["id"]].files == ("src/state.ts",)
    with open(proj / "tests" / "state.test.ts", "a") as f:   # a later change to any of its files marks it
        f.write("// later\n")
    git("commit", "-qam", "later")
    assert "tests/state.test.ts" in stale_map(v, force=True)[o.entry["id"]].files
    v.close()


def test_two_identical_offline_extracts_are_duplicates_never_a_contradiction():
    """The offline extractor's boilerplate ("no model was used", "not distilled") read as a negation made repeats
    of one extract a "contradiction"; and it made extracts of unrelated notes look alike."""
    from acpmem.search.similar import differs, features
    from acpmem.write.offline import extract_offline

    one = extract_offline(None, "the deploy script is make ship, not make deploy").body
    other = extract_offline(None, "the queue is drained by one worker").body
    assert differs(one, one) is None
    assert not (features(one).terms & features(other).terms)             # only the boilerplate was shared
