"""Nothing invented: every checkable fact of an entry is present in the turns it cites.

    python bench/invented.py VAULT [--all] [--json]

For each entry of the vault (superseded ones too with ``--all``), the cited turns are read back as ``acp memory
source`` reads them (each session's recorded transcript; a block's summary and covered turns), beside the note of the
``memory_commit`` that wrote it (the host's own words, given to the extractor; the commit's ``Acpmem-Note``
trailer). The entry's checkable facts — numbers and dates, capitalised names, ``code``, file names, dotted or
snake_case identifiers — must each appear in that text (case-insensitive). Prints the share of entries with none
missing, and each entry with the facts it is missing. An entry whose transcript is not recorded on this machine
is counted apart ("unchecked"), never as a pass.

This is a lexical check: a paraphrase that capitalises a word the turns do not hold is reported, and a fact
reworded with the same words is not caught. It says where to look, not that an entry is wrong.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

FACT = re.compile(r"\b\d[\d.,:/-]*\d\b|\b\d\b|\b[A-Z][a-z]+(?:[A-Z][a-z]+)*\b|`[^`]+`"
                  r"|\b\w+\.(?:py|js|ts|go|rs|json|md|toml|yml|yaml|css|sql)\b|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
STOP_CAPS = {"The", "A", "An", "This", "That", "It", "He", "She", "They", "We", "I", "In", "On", "At", "For", "And",
             "But", "Or", "If", "When", "Use", "Uses", "Do", "Don", "Never", "Always", "Offline", "Focus", "No",
             "Compression", "Facts", "Events", "Plans", "After", "Before", "With", "From", "To", "As", "Of", "By",
             "Their", "His", "Her", "Our", "Its", "Is", "Are", "Was", "Were", "Be", "Has", "Have", "Had", "Not", "So",
             "Also", "Both", "Each", "All", "One", "Two", "Then", "There", "These", "Those", "What", "Which", "Who",
             "Why", "How", "Decision", "Lesson", "Fact", "Reference", "Preference", "User", "Note", "Keep", "Run",
             "Tests", "Test"}
SEQ_REF = re.compile(r"\bseq \d+\b")


def facts_of(text: str) -> set[str]:
    """The checkable facts of an entry's text: numbers, dates, capitalised names, `code`, file names, identifiers.
    The offline extract's "seq 12" names a turn (bookkeeping, not a fact)."""
    out = set()
    for m in FACT.finditer(SEQ_REF.sub("", text)):
        w = m[0].strip("`")
        if w in STOP_CAPS or len(w) < 2 and not w.isdigit():
            continue
        out.add(w)
    return out


def invented(entry_text: str, cited_text: str, note: str = "") -> set[str]:
    """The facts of ``entry_text`` found neither in ``cited_text`` (the turns it cites, a block's summary) nor in
    ``note`` (the commit's note)."""
    have = (cited_text + "\n" + note).lower()
    return {f for f in facts_of(entry_text) if f.lower() not in have}


def commit_notes(root: Path) -> dict[str, str]:
    """Request id -> the note of the commit that request wrote (its ``Acpmem-Note`` trailer)."""
    import subprocess

    out = subprocess.run(["git", "-C", str(root), "log", "--format=%x1e%B"], capture_output=True, text=True)
    notes = {}
    for body in out.stdout.split("\x1e"):
        req = re.search(r"^Acpmem-Request: (\S+)", body, re.M)
        note = re.search(r"^Acpmem-Note: (.*)$", body, re.M)
        if req and note:
            notes[req[1]] = note[1]
    return notes


def check_vault(vault, include_superseded: bool = False) -> list[dict]:
    """One row per entry: id, facts, missing (sorted), checked (False when no cited turn could be read)."""
    from acpmem.read.sources import entry_source

    notes = commit_notes(vault.root)
    rows = []
    for e in vault.load().entries:
        if e.superseded_by and not include_superseded:
            continue
        src = entry_source(vault, e.id)
        parts = []
        for s in src.sources:
            if s.block is not None:
                parts.append(getattr(s.block, "summary", "") or "")
            parts += [t.text for t in s.turns]
        text = f"{e.title}\n{e.body}"
        note = notes.get(str((e.source or {}).get("request", "")), "")
        rows.append({"id": e.id, "title": e.title, "facts": sorted(facts_of(text)),
                     "missing": sorted(invented(text, "\n".join(parts), note)), "checked": bool(parts)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("vault", type=Path, help="the vault's folder")
    p.add_argument("--all", action="store_true", help="superseded entries too")
    p.add_argument("--json", action="store_true", help="the rows as JSON")
    a = p.parse_args(argv)
    if not (a.vault / "acpmem.toml").is_file():
        print(f"Error: no vault at {a.vault} — pass a vault's folder (the one with acpmem.toml)", file=sys.stderr)
        return 1
    from acpmem.vault.reader import VaultReader

    try:
        rows = check_vault(VaultReader(a.vault), a.all)
    except Exception as exc:   # noqa: BLE001 - one line, never a traceback
        print(f"Error: the vault could not be read ({type(exc).__name__}: {exc}) — run `acp memory doctor` there",
              file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return 0
    checked = [r for r in rows if r["checked"]]
    clean = sum(not r["missing"] for r in checked)
    for r in checked:
        if r["missing"]:
            print(f"{r['id']}  missing {', '.join(r['missing'])}  — {r['title'][:80]}")
    print(f"nothing invented: {clean}/{len(checked)} entries" + (f" ({clean / len(checked):.3f})" if checked else "")
          + f"; {len(rows) - len(checked)} unchecked (no cited turn readable here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
