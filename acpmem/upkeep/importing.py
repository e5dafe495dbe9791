"""``acp memory import SOURCE``: what another harness remembers, brought into the vault with a pointer back to
where each memory came from (``docs/import-export.md``).

Two steps. ``plan`` reads the source (``acpmem.upkeep.importformats``) and decides, for each candidate, one action:

* ``new`` — written as an entry;
* ``unchanged`` — an entry imported from the same text is there already (its provenance hash): nothing to do,
  also when a person has edited that entry since (their edit is kept);
* ``update`` — the same place of the same file (its key, or its section and a close text) was imported before and
  its text changed: the new text supersedes the old entry — unless a person edited that entry since it was
  imported, then it is ``skipped`` (their edit is never replaced);
* ``duplicate`` of #id / ``contradiction`` of #id — by meaning, through the vault's own duplicate check
  (``acpmem.write.duplicates.check_write``, against the entries closest by words); a contradiction is written
  only with ``supersede_contradicted``, superseding the entry it contradicts;
* ``skipped`` — not memory-like (the format's rule), holding what looks like a secret, or over the entry size —
  or forgotten: an entry imported from the same text was forgotten by a person (``acp memory forget``), and a
  re-run does not bring it back.

``apply`` writes the plan in **one commit** (``Vault.write_entries``: journaled, so a killed import leaves nothing
half-written). Each entry's ``source`` says where it came from: ``{by: import, harness, format, file, section,
line, key, hash}``.
"""
from __future__ import annotations

import math
from pathlib import Path

from acpmem.core.entry import MAX_TITLE_CHARS, Entry
from acpmem.core.entryfile import parse_entry_bytes
from acpmem.core.errors import AcpmemError, Refused
from acpmem.core.redact import find_secrets
from acpmem.core.values import Value
from acpmem.infra.files import expand_home
from acpmem.search import similar
from acpmem.upkeep.importformats import read_source
from acpmem.upkeep.importrules import Candidate, text_hash
from acpmem.vault.gitrun import git
from acpmem.vault.writer import KIND_IMPORT
from acpmem.write.draft import derive_title
from acpmem.write.duplicates import check_write, index_idf
from acpmem.write.remember import default_type

NEIGHBOURS = 6            # entries closest by words that the meaning check compares a candidate with
PLACE_SIMILARITY = 0.5    # how alike (words) a changed piece and the entry imported from its section must be
ACTIONS = ("new", "update", "unchanged", "duplicate", "contradiction", "skipped")


class Item(Value):
    """One candidate and what the import does with it: ``action`` (``ACTIONS``), ``match`` (the entry it
    duplicates, contradicts, updates or already is), ``why``; ``id`` once written."""

    candidate: Candidate
    action: str
    why: str
    match: str | None = None
    id: str | None = None

    def to_json(self) -> dict:
        c = self.candidate
        return {"action": self.action, "id": self.id, "match": self.match, "why": self.why,
                "title": c.title or _title(c.text), "type": c.type if c.skip is None else None,
                "importance": c.importance if c.skip is None else None, "format": c.format, "harness": c.harness,
                "file": c.file, "section": c.section, "line": c.line, "hash": c.hash}


class Plan(Value):
    """What an import of ``source`` does: the files read, the format(s), and one ``Item`` per candidate;
    ``commit`` once applied."""

    source: str
    format: str
    files: tuple[str, ...]
    items: tuple[Item, ...]
    commit: str | None = None

    def counts(self) -> dict[str, int]:
        return {a: sum(1 for i in self.items if i.action == a) for a in ACTIONS}

    def to_json(self, dry_run: bool) -> dict:
        return {"source": self.source, "format": self.format, "files": list(self.files), "dry_run": dry_run,
                "commit": self.commit, "counts": self.counts(), "items": [i.to_json() for i in self.items]}


def _title(text: str) -> str:
    return derive_title(text)


def display_path(path: str, vault) -> str:
    """A source path as provenance keeps it: relative to the project when inside it, ``~/…`` under the home
    folder, else absolute — the same file gives the same string from anywhere in the project."""
    p = expand_home(path, "the source").resolve()
    root = Path(vault.root).resolve()
    for base in (root.parent if root.name == ".acp-memory" else root,):
        try:
            return p.relative_to(base).as_posix()
        except ValueError:
            pass
    try:
        return "~/" + p.relative_to(Path.home().resolve()).as_posix()
    except ValueError:
        return p.as_posix()


# --------------------------------------------------------------------------------------------- plan

def plan(vault, source: str, fmt: str | None = None, *, supersede_contradicted: bool = False,
         env=None) -> Plan:
    """Read ``source`` and decide what each of its memories becomes (see the module docstring). Reads the vault,
    writes nothing."""
    files, fmt_name, cands = read_source(source, fmt)
    planner = _Planner(vault, cands, supersede_contradicted, env)
    items: list[Item] = []
    for c in cands:
        items.append(planner.decide(c.with_changes(file=display_path(c.file, vault)), len(items) + 1))
    return Plan(str(source), fmt_name, tuple(display_path(str(p), vault) for p in files), tuple(items))


class _Planner:
    """The state one plan decides against: the vault's imported entries by content hash and by place, its live
    entries by their words, this import's own items so far, and the index's term weights (read once)."""

    def __init__(self, vault, cands: list[Candidate], supersede_contradicted: bool, env) -> None:
        self.vault, self.env, self.supersede_contradicted = vault, env, supersede_contradicted
        entries = vault.load(with_reads=False).entries
        self.by_hash: dict[str, Entry] = {}
        self.by_place: dict[tuple, list[Entry]] = {}
        present = {c.hash for c in cands}   # a piece still in the source was not changed: never an update's old side
        for e in entries:
            src = e.source or {}
            if src.get("by") != "import" or not isinstance(src.get("hash"), str):
                continue
            self.by_hash.setdefault(src["hash"], e)
            if not e.superseded and src["hash"] not in present:
                self.by_place.setdefault((src.get("file"), src.get("key") or src.get("section")), []).append(e)
        self.index = _WordIndex([e for e in entries if not e.superseded])
        self.forgotten = forgotten_imports(vault)
        self.idf = index_idf(vault, set(self.index.postings).union(
            *(similar.features(f"{c.title or ''}\n{c.text}").terms for c in cands if c.skip is None)))
        self.mine = _WordIndex([])          # this import's new candidates, for duplicates within the import
        self.seen: dict[str, Item] = {}     # hash -> the first item of this import with that text
        self.superseded: set[str] = set()   # entries this import supersedes already

    def decide(self, c: Candidate, n: int) -> Item:
        """The item of candidate ``c``, the ``n``-th of the import."""
        if c.skip is not None:
            return Item(c, "skipped", c.skip)
        c, refusal = self._admit(c)
        if refusal is not None:
            return Item(c, "skipped", refusal)
        item = self._known(c) or self._by_meaning(c)
        if item.action in ("new", "update", "unchanged"):
            self.seen.setdefault(c.hash, item)
            if item.action != "unchanged":
                self.mine.add(_pseudo(c, n))
        return item

    def _admit(self, c: Candidate) -> tuple[Candidate, str | None]:
        """The candidate with a type this vault has, or why it cannot be an entry (too large, a secret)."""
        types = self.vault.settings.types
        if c.type not in types:
            c = c.with_changes(type=default_type(types, c.type == "user-preference"),
                               rule=c.rule + f"; this vault has no type '{c.type}'")
        limit = self.vault.settings.extraction.max_entry_bytes
        size = len((c.text.strip("\n") + "\n").encode("utf-8", "surrogatepass"))
        if size > limit:
            return c, f"too large: {size:,} bytes, entries hold at most {limit:,} (extraction.max_entry_bytes)"
        found = find_secrets((c.title or "") + "\n" + c.text, deep=False)
        if found:
            kinds = ", ".join(dict.fromkeys(f.kind for f in found))
            return c, f"holds what looks like a secret ({kinds}); secrets never enter the vault"
        return c, None

    def _known(self, c: Candidate) -> Item | None:
        """By its provenance: a second copy in this import, imported before (unchanged), or the changed text of a
        place imported before (an update — unless a person edited that entry since)."""
        first = self.seen.get(c.hash)
        if first is not None:
            return Item(c, "duplicate", f"the same text as line {first.candidate.line} of {first.candidate.file}")
        had = self.by_hash.get(c.hash)
        if had is None and c.hash in self.forgotten:
            gone = self.forgotten[c.hash]
            return Item(c, "skipped", f"imported before as #{gone} and forgotten since (`acp memory forget`): a "
                                      "re-run does not bring it back", match=gone)
        if had is not None:
            return Item(c, "unchanged", "imported before" + (" (superseded since)" if had.superseded else ""),
                        match=had.id)
        old = _same_place(c, self.by_place)
        if old is None or old.id in self.superseded:
            return None
        if _edited(old):
            return Item(c, "skipped", f"its source changed, and #{old.id} was edited by a person since it was "
                                      "imported: their edit is kept (edit the entry to take the new text)",
                        match=old.id)
        self.superseded.add(old.id)
        return Item(c, "update", f"its source changed since it was imported; the new text supersedes #{old.id}",
                    match=old.id)

    def _by_meaning(self, c: Candidate) -> Item:
        """Through the vault's duplicate check: against this import's own items (a duplicate only: a contradiction
        inside one source is its author's), then against the live entries closest by words."""
        text = f"{c.title or ''}\n{c.text}"
        ours = self.mine.nearest(text, NEIGHBOURS)
        same = check_write(self.vault, text, ours, env=self.env, idf=self.idf) if ours else None
        if same is not None and same.kind == "duplicate":
            return Item(c, "duplicate", f"{same.why}: item {same.entry.id[1:]} of this import")
        shown = self.index.nearest(text, NEIGHBOURS)
        match = check_write(self.vault, text, shown, env=self.env, idf=self.idf) if shown else None
        if match is None:
            return Item(c, "new", c.rule)
        old = match.entry
        if match.kind == "duplicate":
            return Item(c, "duplicate", match.why, match=old.id)
        if self.supersede_contradicted and old.id not in self.superseded and not old.superseded:
            self.superseded.add(old.id)
            return Item(c, "update", f"contradicts #{old.id} ({match.why}); supersedes it (--supersede-contradicted)",
                        match=old.id)
        return Item(c, "contradiction", f"{match.why}; not imported (resolve it by hand, or run again with "
                                        "--supersede-contradicted)", match=old.id)


def _pseudo(c: Candidate, n: int) -> Entry:
    """A candidate of this import as an entry the duplicate check can compare (its id ``=n`` names the item)."""
    return Entry(id=f"={n}", title=c.title or _title(c.text), type=c.type, importance=c.importance,
                 created="2000-01-01T00:00:00Z", body=c.text)


def _edited(e: Entry) -> bool:
    """Whether a person changed an imported entry's text since the import (its body no longer hashes to the
    provenance hash)."""
    return text_hash(e.body) != (e.source or {}).get("hash")


def _same_place(c: Candidate, by_place: dict) -> Entry | None:
    """The live entry imported from the same place as ``c``: the same key (a unit: a topic file, a rule, a
    summary, a block), or the same section with a text close by words (``PLACE_SIMILARITY``)."""
    if c.key is not None:
        got = by_place.get((c.file, c.key))
        return got[0] if got else None
    near = by_place.get((c.file, c.section)) or []
    if not near:
        return None
    fa = similar.features(c.text)
    best = max(near, key=lambda e: similar.score(fa, similar.features(e.body), lambda t: 1.0))
    return best if similar.score(fa, similar.features(best.body), lambda t: 1.0) >= PLACE_SIMILARITY else None


class _WordIndex:
    """The live entries by their words, to find the few a candidate should be compared with."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries: list[Entry] = []
        self.postings: dict[str, list[int]] = {}
        for e in entries:
            self.add(e)

    def add(self, e: Entry) -> None:
        i = len(self.entries)
        self.entries.append(e)
        for t in similar.features(f"{e.title}\n{e.body}", segments=False).terms:
            self.postings.setdefault(t, []).append(i)

    def nearest(self, text: str, k: int) -> list[Entry]:
        fa = similar.features(text, segments=False)
        n = max(1, len(self.entries))
        weight: dict[int, float] = {}
        for t in fa.terms:
            post = self.postings.get(t, ())
            if not post or len(post) > max(50, n // 4):   # a common word: not what makes two entries alike
                continue
            w = math.log(1 + n / len(post))
            for i in post:
                weight[i] = weight.get(i, 0.0) + w
        best = sorted(weight, key=lambda i: -weight[i])[:k]
        return [self.entries[i] for i in best]


# --------------------------------------------------------------------------------------------- apply

def apply(vault, p: Plan) -> Plan:
    """Write the plan's new entries and updates in one commit (nothing when there is nothing to write). Returns
    the plan with the ids and the commit."""
    vault.require_writable()
    todo = [i for i in p.items if i.action in ("new", "update")]
    if not todo:
        return p
    known = {e.id: e for e in vault.load(with_reads=False).entries}
    taken = set(known)
    now = vault.now()
    new: list[Entry] = []
    updates: list[Entry] = []
    ids: dict[int, str] = {}
    for n, item in enumerate(p.items):
        if item.action not in ("new", "update"):
            continue
        c = item.candidate
        ident = vault.new_id(taken)
        taken.add(ident)
        ids[n] = ident
        title = c.title or _title(c.text)

        title = " ".join(title.split())[:MAX_TITLE_CHARS] or "(untitled)"
        source = {"by": "import", "harness": c.harness, "format": c.format, "file": c.file}
        if c.section:
            source["section"] = c.section
        if c.line:
            source["line"] = c.line
        if c.key is not None:
            source["key"] = c.key
        source["hash"] = c.hash
        sup: tuple[str, ...] = ()
        if item.action == "update" and item.match in known:
            old = known[item.match]
            if old.superseded:
                raise Refused(f"#{old.id} was superseded while the import was planned", "run the import again")
            updates.append(old.with_changes(superseded_by=ident))
            sup = (old.id,)
        new.append(Entry(id=ident, title=title, type=c.type, importance=c.importance, created=now,
                         body=c.text.strip("\n") + "\n", source=source, supersedes=sup,
                         path=vault.path_for(ident, title)))
    harnesses = ", ".join(sorted({i.candidate.harness for i in todo}))
    n_up = sum(1 for i in todo if i.action == "update")
    why = (f"Imported from {', '.join(p.files)} ({harnesses}) with `acp memory import`: {len(todo) - n_up} new, "
           f"{n_up} updated. Each entry's source: names the file, the section or line and the content hash.")
    sha = vault.write_entries(new, subject=f"import {len(todo)} entries from {harnesses}", why=why, kind=KIND_IMPORT,
                              trailers={"Acpmem-Author": "human", "Acpmem-Import": p.format}, updates=updates)
    items = tuple(i.with_changes(id=ids[n]) if n in ids else i for n, i in enumerate(p.items))
    return p.with_changes(items=items, commit=sha)


def import_source(vault, source: str, fmt: str | None = None, *, dry_run: bool = False,
                  supersede_contradicted: bool = False, env=None) -> Plan:
    """Plan the import of ``source`` and, unless ``dry_run``, apply it in one commit."""
    p = plan(vault, source, fmt, supersede_contradicted=supersede_contradicted, env=env)
    return p if dry_run else apply(vault, p)


def forgotten_imports(vault) -> dict[str, str]:
    """The provenance hash of each imported entry a person forgot (its file deleted by an ``acp memory forget``
    commit), and the entry's id: read from the vault's history, the text before the deletion."""
    log = git(vault.root, "log", "--diff-filter=D", "--grep=^Acpmem-Kind: forget", "--format=%x00%H", "--name-only",
              "--", "entries/", check=False)
    found: dict[str, str] = {}
    for chunk in (log.out or "").split("\x00")[1:]:
        sha, *paths = [ln for ln in chunk.splitlines() if ln.strip()]
        for path in paths:
            shown = git(vault.root, "show", f"{sha}^:{path}", check=False)
            try:
                e = parse_entry_bytes((shown.out or "").encode("utf-8"), path, vault.settings.types)
            except (AcpmemError, ValueError):
                continue   # a file that did not parse then: nothing to recognise it by
            src = e.source or {}
            if src.get("by") == "import" and isinstance(src.get("hash"), str):
                found.setdefault(src["hash"], e.id)
    return found
