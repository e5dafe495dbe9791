"""A vault of entries written from real conversation text, for timing recall on a real vocabulary.

``bench/list_speed.py``'s generator draws every entry from 27 words, so each query word is in most of the entries and
a search scores nearly the whole vault: the worst case. Here the entries come from LoCoMo (``locomo10.json``,
passed by path): each observation a conversation's annotators wrote down ("Calvin is excited to learn about Japanese
culture…") is a fact entry, each dialogue turn a reference entry with its speaker and date; past the 8,423 of them
the texts are used again, numbered. The queries are LoCoMo's own questions.

    python bench/text_vault.py LOCOMO_JSON DIR [--entries 10000]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from acpmem.core.entry import Citation, Entry
from acpmem.core.errors import AcpmemError
from acpmem.vault.create import init_vault
from acpmem.vault.writer import KIND_FORK


def read_locomo(locomo: Path) -> tuple[list[tuple[str, str, str]], list[str]]:
    """``texts`` and ``questions`` of the file; ValueError (one line) where it is not LoCoMo's locomo10.json."""
    try:
        found = texts(locomo), questions(locomo, 10)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{locomo} is not LoCoMo's locomo10.json ({type(exc).__name__}: {exc})"[:300]) from None
    if not found[0] or not found[1]:
        raise ValueError(f"{locomo} holds no conversation turns or questions: pass LoCoMo's locomo10.json")
    return found


def texts(locomo: Path) -> list[tuple[str, str, str]]:
    """(type, title, body) of every observation and dialogue turn, in the file's order."""
    out = []
    for conv in json.loads(locomo.read_text()):
        talk = conv["conversation"]
        for key, facts_by in conv.get("observation", {}).items():
            for speaker, facts in facts_by.items():
                for fact, _evidence in facts:
                    out.append(("fact", _title(fact), fact))
        for speaker, when, text in _turns(talk):
            out.append(("reference", _title(f"{speaker}: {text}"), f"{speaker} ({when}): {text}"))
    return out


def _turns(talk: dict):
    """(speaker, the session's date, text) of every dialogue turn with text in a conversation, in order."""
    for key, turns in talk.items():
        if not (key.startswith("session_") and isinstance(turns, list)):
            continue
        when = talk.get(f"{key}_date_time", "")
        for t in turns:
            text = (t.get("text") or "").strip()
            if text:
                yield t["speaker"], when, text


def questions(locomo: Path, n: int) -> list[str]:
    """The first ``n`` of the questions with an answer, one per conversation in turn."""
    per = [[q["question"] for q in conv.get("qa", []) if q.get("answer")] for conv in json.loads(locomo.read_text())]
    out: list[str] = []
    i = 0
    while len(out) < n and any(i < len(p) for p in per):
        out += [p[i] for p in per if i < len(p)]
        i += 1
    return out[:n]


def long_prompts(locomo: Path, chars: int, n: int) -> list[str]:
    """``n`` prompts of up to ``chars`` characters, each a stretch of dialogue turns ("speaker: text", one a line, as
    a person pasting a chat log would send it), from the first turns on; fewer where the file has less text."""
    turns = [f"{speaker}: {text}" for conv in json.loads(locomo.read_text())
             for speaker, _when, text in _turns(conv["conversation"])]
    out: list[str] = []
    i = 0
    while len(out) < n and i < len(turns):
        prompt = ""
        while i < len(turns) and len(prompt) < chars:
            prompt += turns[i] + "\n"
            i += 1
        out.append(prompt[:chars])
    return out


def _title(text: str) -> str:
    words = text.split()
    return " ".join(words[:9]) + ("…" if len(words) > 9 else "")


def build(root: Path, locomo: Path, n: int, seed: int = 4) -> None:
    rng = random.Random(seed)
    pool = texts(locomo)
    v = init_vault(root, rng=rng)
    entries = []
    for i in range(n):
        typ, title, body = pool[i % len(pool)]
        if i >= len(pool):
            title, body = f"{title} ({i // len(pool) + 1})", body
        ident = f"t{i:07d}"
        e = Entry(id=ident, title=title, type=typ, importance=rng.randint(1, 10),
                  created=f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}T10:00:00Z", body=body + "\n",
                  citation=(Citation(f"s{rng.randint(1, 50)}", rng.randint(1, 900)),))
        entries.append(e.with_changes(path=v.path_for(ident, title)))
    v.write_entries(entries, subject=f"{n} entries from LoCoMo", why="benchmark", kind=KIND_FORK)
    v.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("locomo", type=Path, help="locomo10.json")
    ap.add_argument("dir", type=Path, help="the vault to make (must not exist)")
    ap.add_argument("--entries", type=int, default=10000)
    args = ap.parse_args()
    if args.entries < 1:
        ap.error("--entries must be at least 1")
    if not args.locomo.is_file():
        ap.error(f"{args.locomo} is not a file: pass the path of locomo10.json")
    if args.dir.exists():
        ap.error(f"{args.dir} exists: pass a new folder")
    try:
        read_locomo(args.locomo)
    except ValueError as exc:
        ap.error(str(exc))
    try:
        build(args.dir, args.locomo, args.entries)
    except (OSError, AcpmemError) as exc:
        sys.exit(f"text_vault.py: error: could not make the vault in {args.dir}: {exc}")
    print(f"{args.entries} entries in {args.dir}")


if __name__ == "__main__":
    main()
