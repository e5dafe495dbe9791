"""LoCoMo observation retrieval: R@1/5/10, hit@1/5/10 and MRR for plain BM25 and the default engine.

Usage: python bench/search_locomo.py [LOCOMO_JSON]   (default ../shared/bench/locomo10.json)

Protocol (../shared/bench/README.md): one index per conversation, one document per observation citing its
dia_id(s); every QA item of categories 1–4 whose evidence still names a turn of the conversation (1,536
items) is searched within its conversation. recall@k = share of the item's evidence turns cited by the top k
documents; hit@k = at least one is; MRR = 1/rank of the first document citing any evidence turn.
To measure real vaults instead, replace ``build_docs`` (and ``search_with``).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

from acpmem.search import english
from acpmem.search.reference import MemoryIndex
from acpmem.search.ranking import SearchDoc

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "bench" / "locomo10.json"
KS = (1, 5, 10)
DIA = re.compile(r"D:?(\d+):(\d+)")


def dia_ids(value) -> list[tuple[str, int]]:
    """Normalise a dia_id field (a string, a comma/space/semicolon-joined string or a list) to (session, turn)."""
    items = value if isinstance(value, list) else [value]
    return [(s, int(t)) for item in items for s, t in DIA.findall(str(item))]


def session_dates(conversation: dict) -> dict[str, str]:
    out = {}
    for key, value in conversation.items():
        m = re.fullmatch(r"session_(\d+)_date_time", key)
        if m:
            try:
                out[m[1]] = datetime.strptime(value, "%I:%M %p on %d %B, %Y").isoformat()
            except ValueError:
                pass
    return out


def build_docs(conversation: dict) -> list[SearchDoc]:
    """One SearchDoc per observation: the sentence as title and body, the speaker as tag, its turns cited."""
    dates = session_dates(conversation["conversation"])
    docs = []
    for skey, by_speaker in conversation["observation"].items():
        session = re.search(r"\d+", skey)[0]
        for speaker, observations in by_speaker.items():
            for text, dia in observations:
                cites = tuple(dict.fromkeys(dia_ids(dia)))
                docs.append(SearchDoc(id=f"o{len(docs)}", title=text, body=text, type="fact", tags=(speaker,),
                                      citations=cites, created=dates.get(session)))
    return docs


def existing_turns(conversation: dict) -> set[tuple[str, int]]:
    turns = set()
    for key, value in conversation["conversation"].items():
        if re.fullmatch(r"session_\d+", key):
            for turn in value:
                turns.update(dia_ids(turn["dia_id"]))
    return turns


class PlainBM25:
    """The reference baseline: lowercased words, stop words removed, k1 1.2, b 0.75, no stemming."""

    def __init__(self, docs: list[SearchDoc]) -> None:
        self.docs = docs
        self.tfs = [Counter(self.words(d.body)) for d in docs]
        self.lens = [sum(tf.values()) for tf in self.tfs]
        self.avg = sum(self.lens) / max(1, len(docs))
        self.df = Counter(t for tf in self.tfs for t in tf)

    @staticmethod
    def words(text: str) -> list[str]:
        return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in english.STOP_WORDS]

    def search(self, query: str, limit: int) -> list[SearchDoc]:
        n = len(self.docs)
        scores = []
        for i, tf in enumerate(self.tfs):
            s = 0.0
            for t in set(self.words(query)):
                f = tf.get(t, 0)
                if f:
                    idf = math.log(1 + (n - self.df[t] + 0.5) / (self.df[t] + 0.5))
                    s += idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * self.lens[i] / self.avg))
            if s > 0:
                scores.append((-s, i))
        return [self.docs[i] for _, i in sorted(scores)[:limit]]


def questions(conversation: dict):
    """The protocol's questions of one conversation: categories 1–4, with the evidence turns that exist (a question
    left with none is skipped). Yields (qa, evidence)."""
    turns = existing_turns(conversation)
    for qa in conversation["qa"]:
        if qa["category"] == 5:
            continue
        evidence = {e for e in dia_ids(qa.get("evidence", [])) if e in turns}
        if evidence:
            yield qa, evidence


def score_item(cited: list[set], evidence: set) -> dict[str, float]:
    """R@k, hit@k and MRR of one question, given the evidence ids each ranked entry covers (best first)."""
    row = {}
    for k in KS:
        got = set().union(*cited[:k]) if cited[:k] else set()
        row[f"R@{k}"] = len(got) / len(evidence)
        row[f"hit@{k}"] = float(bool(got))
    first = next((i + 1 for i, c in enumerate(cited) if c), 0)
    row["MRR"] = 1 / first if first else 0.0
    return row


def evaluate(data: list[dict], engine: str) -> dict:
    per_cat: dict[str, list[dict]] = defaultdict(list)
    build_s = query_s = 0.0
    for conv in data:
        t0 = time.perf_counter()
        docs = build_docs(conv)
        index = PlainBM25(docs) if engine == "bm25" else MemoryIndex(docs)
        build_s += time.perf_counter() - t0
        for qa, evidence in questions(conv):
            t0 = time.perf_counter()
            if engine == "bm25":
                ranked = index.search(qa["question"], 50)
            else:
                by_id = {d.id: d for d in docs}
                ranked = [by_id[h.id] for h in index.search(qa["question"], limit=50)]
            query_s += time.perf_counter() - t0
            row = score_item([set(d.citations) & evidence for d in ranked], evidence)
            per_cat[str(qa["category"])].append(row)
            per_cat["all"].append(row)
    return {"rows": per_cat, "build_s": build_s, "query_s": query_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA,
                        help=f"LoCoMo's locomo10.json (default {DEFAULT_DATA})")
    path = parser.parse_args().data
    if not path.is_file():
        parser.error(f"{path}: no such file (pass the path of locomo10.json)")
    data = json.loads(path.read_text(encoding="utf-8"))
    cols = [f"R@{k}" for k in KS] + [f"hit@{k}" for k in KS] + ["MRR"]
    for engine in ("bm25", "default"):
        result = evaluate(data, engine)
        rows = result["rows"]
        name = "plain BM25" if engine == "bm25" else "default engine (MemoryIndex)"
        print(f"\n{name}: {len(rows['all'])} items; build {result['build_s']:.1f} s, "
              f"queries {1000 * result['query_s'] / len(rows['all']):.1f} ms each")
        print(f"{'category':10} {'n':>5} " + " ".join(f"{c:>7}" for c in cols))
        for cat in ("all", "1", "2", "3", "4"):
            items = rows[cat]
            print(f"{cat:10} {len(items):5d} " + " ".join(f"{sum(r[c] for r in items) / len(items):7.3f}"
                                                        for c in cols))


if __name__ == "__main__":
    main()
