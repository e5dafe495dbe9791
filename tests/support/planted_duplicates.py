"""The planted set of duplicates and contradictions (``tests/fixtures/duplicates/planted.json``): writing it into a
vault, its true pairs, precision and recall of what a mode found, and a stand-in model for the loopback OpenAI
server that judges pairs as the fixture says (so the model mode's figures measure acpmem's candidates, batching and
reading of the answer — not a model's judgement).

Not a test file: tests/test_duplicates.py and bench/duplicates.py import it.
"""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

from acpmem.core.entry import Citation, Entry

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "duplicates" / "planted.json"

# What the test embeddings server (tests/support/embeddings_server.py) takes as the same concept: the words a person would
# call synonyms in these entries. The bench measures the embedding mode with a real model instead.
SYNONYMS = {"repo": "repository", "uses": "use", "dates": "timestamp",
            "timestamps": "timestamp", "database": "store", "stored": "store", "keeps": "store", "utc": "utc",
            "lock": "lock", "appending": "append", "deps": "dependencies", "virtualenv": "environment",
            "prefixed": "prefix", "prefix": "prefix", "switched": "replaced", "formatter": "format",
            "migrations": "migrated", "alembic": "migrated", "migrated": "migrated", "schema": "migrated",
            "process": "worker", "empties": "drains", "quits": "exits", "requests": "pending",
            "hour": "minutes", "times": "expire", "serves": "listens", "required": "supported",
            "squash": "squash", "indentation": "indented", "indent": "indented"}


def load() -> dict:
    return json.loads(FIXTURE.read_text("utf-8"))


def text_of(item: dict) -> str:
    return f"{item['title']}\n{item['body']}"


def plant(v, *, only=None) -> dict[str, tuple[str, int, str]]:
    """Write the planted entries in one commit; returns id → (group kind, group number, text). ``only``: a function
    of (group, item) choosing which entries to plant."""
    doc = load()
    entries, truth, taken = [], {}, set()
    for g, group in enumerate(doc["groups"]):
        for m, item in enumerate(group["entries"]):
            if only is not None and not only(group, item):
                continue
            ident = v.new_id(taken)
            taken.add(ident)
            e = Entry(id=ident, title=item["title"], type="fact", importance=5,
                      created=f"2026-11-{10 + m % 15:02d}T12:00:00Z", body=item["body"] + "\n",
                      citation=(Citation(f"s-{g}-{m}", 10 * m + 1),))
            entries.append(e.with_changes(path=v.path_for(ident, item["title"])))
            truth[ident] = (group["kind"], g if group["kind"] != "distinct" else -1 - m, text_of(item))
    v.write_entries(entries, subject="planted duplicates", why="test")
    return truth


def true_pairs(truth: dict[str, tuple[str, int, str]]) -> dict[frozenset, str]:
    """Every pair of planted entries of one group → its kind (duplicate or contradiction)."""
    groups: dict[int, list[str]] = {}
    for ident, (kind, g, _) in truth.items():
        if kind != "distinct":
            groups.setdefault(g, []).append(ident)
    kinds = {g: truth[ids[0]][0] for g, ids in groups.items()}
    return {frozenset(p): kinds[g] for g, ids in groups.items() for p in itertools.combinations(ids, 2)}


def cluster_pairs(clusters) -> dict[frozenset, str]:
    """The pairs a list of clusters (``Cluster``) puts together → the cluster's kind."""
    return {frozenset(p): c.kind for c in clusters for p in itertools.combinations(c.ids, 2)}


def scores(got: dict[frozenset, str], want: dict[frozenset, str]) -> dict:
    """Precision and recall of the found pairs, overall (any kind) and per kind (the kind must match)."""
    def pr(g: set, w: set) -> tuple[float, float]:
        hit = len(g & w)
        return (hit / len(g) if g else 1.0), (hit / len(w) if w else 1.0)

    out = {}
    p, r = pr(set(got), set(want))
    out["all"] = {"precision": round(p, 3), "recall": round(r, 3), "found": len(got), "true": len(want)}
    for kind in ("duplicate", "contradiction"):
        g = {k for k, v in got.items() if v == kind}
        w = {k for k, v in want.items() if v == kind}
        p, r = pr(g, w)
        out[kind] = {"precision": round(p, 3), "recall": round(r, 3), "found": len(g), "true": len(w)}
    return out


def oracle(style: str = "tool"):
    """A responder for the loopback OpenAI server (``srv.responder``): it reads the numbered pairs of a judging
    call and answers each with the fixture's truth — a tool call (``style`` tool), a JSON list in the text (json) or
    lines ``N: verdict`` (lines)."""
    from openai_server import reply

    kind_of: dict[str, tuple[str, int]] = {}
    for g, group in enumerate(load()["groups"]):
        for m, item in enumerate(group["entries"]):
            kind_of[" ".join(text_of(item).split())[:60]] = (group["kind"], g if group["kind"] != "distinct" else -1 - m)

    def group_of(text: str):
        return kind_of.get(" ".join(text.split())[:60])

    def answer(body: dict):
        content = body["messages"][-1]["content"]
        sides: dict[int, dict[str, str]] = {}
        for m in re.finditer(r'<<acpmem-data kind="entry" pair="(\d+)" side="([ab])"[^>]*>>\n(.*?)\n<</acpmem-data',
                             content, re.S):
            sides.setdefault(int(m.group(1)), {})[m.group(2)] = m.group(3)
        verdicts = []
        for n, pair in sorted(sides.items()):
            a, b = group_of(pair.get("a", "")), group_of(pair.get("b", ""))
            v = a[0] if a is not None and a == b and a[0] != "distinct" else "different"
            verdicts.append({"pair": n, "verdict": v})
        if style == "json":
            return reply.text("```json\n" + json.dumps(verdicts) + "\n```")
        if style == "lines":
            return reply.text("\n".join(f"Pair {x['pair']}: **{x['verdict']}**" for x in verdicts))
        return reply.writes(reply.call("memory_judge", {"verdicts": verdicts}))

    return answer


def set_section(root: Path, section: str, values: dict) -> None:
    """Set ``values`` in the ``[section]`` table of the vault's acpmem.toml (the keys replaced or added); those only
    the person decides (endpoints, models) in the person's own config instead, where acpmem reads them."""
    from helpers_person import set_person, split

    mine, values = split(values)
    if mine:
        set_person(section, mine)
    path = Path(root) / "acpmem.toml"
    lines = path.read_text("utf-8").splitlines()
    try:
        start = lines.index(f"[{section}]")
    except ValueError:
        lines += ["", f"[{section}]"]
        start = len(lines) - 1
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    body = [ln for ln in lines[start + 1:end] if ln.split("=")[0].strip().lstrip("# ") not in values]
    body += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines[:start + 1] + body + lines[end:]) + "\n", "utf-8")


def configure(v, *, embeddings=None, model=None, **consolidate):
    """The vault reopened with ``[embeddings]`` pointed at an embeddings server, ``[extraction]`` at a loopback
    OpenAI server, and ``[consolidate]`` values."""
    import random

    from acpmem.vault.writer import Vault

    if embeddings is not None:
        set_section(v.root, "embeddings", {"base_url": embeddings.base_url, "model": "hash-64",
                                           "timeout_seconds": 5.0, "batch_timeout_seconds": 30.0})
    if model is not None:
        set_section(v.root, "extraction", {"base_url": model.base_url, "model": "test-model",
                                           "timeout_seconds": 10.0, "max_retries": 0})
    if consolidate:
        set_section(v.root, "consolidate", consolidate)
    v.close()
    return Vault(v.root, clock=v.clock, rng=random.Random(11))


TRANSCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts" / "openai_chat.json"


def firsts(group, item) -> bool:
    """The first entry of every planted group, and every distinct entry (``plant(only=firsts)``)."""
    return group["kind"] == "distinct" or item is group["entries"][0]


def restate(v, srv, kinds=("duplicate", "contradiction")) -> dict:
    """Through the fork on the loopback server: for every later entry of a planted group of ``kinds``, a request
    whose model writes that entry's text again (no supersede: a model re-stating the fact). The vault holds the
    groups' first entries (``plant(only=firsts)``). Returns per kind how many restatements there were, how many
    became a second live entry, a proposal, a supersede, or were dropped."""
    from openai_server import reply

    from acpmem.write import requests, worker

    out = {k: {"restated": 0, "second_entry": 0, "proposed": 0, "superseded": 0, "dropped": 0} for k in kinds}
    for group in load()["groups"]:
        if group["kind"] not in kinds:
            continue
        for item in group["entries"][1:]:
            srv.enqueue(reply.writes(reply.write(item["body"], title=item["title"])))
            req = requests.make_request(types=v.settings.types, type="fact", note=item["title"], importance=5,
                                        session="s-restate", seq=6, transcript=TRANSCRIPT, host_tools=None,
                                        lang=v.settings.language, created=v.now(),
                                        request_id=requests.new_request_id(v.rng))
            v.ensure_state()
            requests.save_request(v.state_dir, req, new=True)
            (o,) = worker.process_now(v, [req.id])
            row = out[group["kind"]]
            row["restated"] += 1
            paths = [e["path"] for e in o.entries]
            if not paths:
                row["dropped"] += 1
            elif all(p.startswith("proposals/") for p in paths):
                row["proposed"] += 1
            elif o.superseded:
                row["superseded"] += 1
            else:
                row["second_entry"] += 1
    return out
