"""The entry data model: ``Entry`` and ``Citation``, and the strict validation of a frontmatter mapping.

An entry is a tier-3 distilled block: a one-line title, a condensed body, its type and importance, when it was made
and last read, and where it came from. The file format around it is ``acpmem.core.entryfile``. No I/O.
"""
from __future__ import annotations

from datetime import timezone

from acpmem.core.clock import parse_iso
from acpmem.core.errors import EntryInvalid
from acpmem.core.ids import ID_RE
from acpmem.core.lazyre import compile_later
from acpmem.core.limits import MAX_SEQ, bad_value, breaks_line, clip, session_problem, valid_seq
from acpmem.core.values import Value

DEFAULT_TYPES = ("decision", "lesson", "fact", "user-preference", "reference")
KNOWN_KEYS = ("id", "title", "type", "importance", "created", "last_read", "citation", "tier", "source",
              "supersedes", "superseded_by")
MAX_TITLE_CHARS = 300
HASH_RE = compile_later(r"[0-9a-f]{16,64}\Z")
COMMIT_RE = compile_later(r"[0-9a-f]{7,64}\Z")
MAX_ABOUT_FILES = 64
MAX_ABOUT_PATH = 400
MAX_BRANCH_CHARS = 250
MAX_EVIDENCE = 8            # ``evidence``: quotes of the turns an entry cites, at most this many ...
MAX_EVIDENCE_CHARS = 600    # ... each at most this long
ANCHORS = ("next",)   # ``anchor: next``: learned before the branch had a commit of its own (``acpmem.vault.branches``)
_BRANCH_BAD = compile_later(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|/\.|\.lock\Z|\.\Z|/\Z")
ISO_RE = compile_later(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})\Z")


class Citation(Value):
    """Where an entry came from: a host session and a seq (an int, a range "1270-1290", or a kernel ref m12 / b3).

    A citation of a compression block adds ``block`` (``b12``), its ``tier``, the host's stable id ``compaction``
    (DSH's ``compactionId``) and the ``turns`` it covers (``"2-5,10"``, ``acpmem.core.blocks.turns_text``); all
    optional, so a plain ``{session, seq}`` stays a valid citation. ``hash``: a digest of the cited turns' text when
    the entry was written (``acpmem.read.citecheck``), so serving the entry can say whether they changed."""

    session: str
    seq: int | str
    block: str | None = None
    tier: int | None = None
    compaction: str | None = None
    turns: str | None = None
    hash: str | None = None

    def __init__(self, session: str, seq: int | str, block: str | None = None, tier: int | None = None,
                 compaction: str | None = None, turns: str | None = None, hash: str | None = None) -> None:
        d = self.__dict__
        d["session"] = session
        d["seq"] = seq
        d["block"] = block
        d["tier"] = tier
        d["compaction"] = compaction
        d["turns"] = turns
        d["hash"] = hash

    def to_dict(self) -> dict:
        out = {"session": self.session, "seq": self.seq}
        for key in ("block", "tier", "compaction", "turns", "hash"):
            value = self.__dict__[key]
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, c: dict) -> "Citation":
        """From ``to_dict`` output (trusted: the derived index)."""
        return cls(c["session"], c["seq"], c.get("block"), c.get("tier"), c.get("compaction"), c.get("turns"),
                   c.get("hash"))

    def __str__(self) -> str:
        return f"{self.session}#{self.seq}" + (f" ({self.block})" if self.block else "")

    def __repr__(self) -> str:   # the block fields only when set: a plain citation reads as it always did
        return "Citation(" + ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()
                                       if v is not None or k in ("session", "seq")) + ")"


class Entry(Value):
    """One memory: a tier-3 distilled block. ``extra`` keeps keys a person added; ``raw`` the file as read."""

    id: str
    title: str
    type: str
    importance: int
    created: str
    body: str
    last_read: str | None = None
    citation: tuple[Citation, ...] = ()
    tier: int = 3
    source: dict | None = None
    supersedes: tuple[str, ...] = ()
    superseded_by: str | None = None
    extra: dict
    path: str | None = None
    raw: str | None = None
    _hidden = ("raw",)

    def __init__(self, id: str, title: str, type: str, importance: int, created: str, body: str,
                 last_read: str | None = None, citation: tuple[Citation, ...] = (), tier: int = 3,
                 source: dict | None = None, supersedes: tuple[str, ...] = (), superseded_by: str | None = None,
                 extra: dict | None = None, path: str | None = None, raw: str | None = None) -> None:
        # Spelled out: a thousand entries are built per listing, and this is three times the generic __init__'s speed.
        d = self.__dict__
        d["id"] = id
        d["title"] = title
        d["type"] = type
        d["importance"] = importance
        d["created"] = created
        d["body"] = body
        d["last_read"] = last_read
        d["citation"] = citation
        d["tier"] = tier
        d["source"] = source
        d["supersedes"] = supersedes
        d["superseded_by"] = superseded_by
        d["extra"] = {} if extra is None else extra
        d["path"] = path
        d["raw"] = raw

    @property
    def superseded(self) -> bool:
        return bool(self.superseded_by)

    def meta(self) -> dict:
        """The frontmatter mapping in canonical key order (known keys, then the extra keys as found)."""
        out: dict[str, object] = {
            "id": self.id,
            "title": self.title,
            "type": self.type,
            "importance": self.importance,
            "created": self.created,
            "last_read": self.last_read,
            "citation": [c.to_dict() for c in self.citation],
            "tier": self.tier,
        }
        if self.source is not None:
            out["source"] = dict(self.source)
        if self.supersedes:
            out["supersedes"] = list(self.supersedes)
        if self.superseded_by:
            out["superseded_by"] = self.superseded_by
        out.update(self.extra)
        return out

    def to_json(self) -> dict:
        d = self.meta()
        d["body"] = self.body
        d["path"] = self.path
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Entry":
        """Rebuild from ``to_json`` output (the derived index stores entries this way). Trusts its input."""
        known = {k: d[k] for k in KNOWN_KEYS if k in d}
        extra = {k: v for k, v in d.items() if k not in KNOWN_KEYS and k not in ("body", "path", "raw")}
        return cls(
            id=known["id"], title=known["title"], type=known["type"], importance=known["importance"],
            created=known["created"], body=d.get("body", ""), last_read=known.get("last_read"),
            citation=tuple(Citation.from_dict(c) for c in known.get("citation") or ()),
            tier=known.get("tier", 3), source=known.get("source"), supersedes=tuple(known.get("supersedes") or ()),
            superseded_by=known.get("superseded_by"), extra=extra, path=d.get("path"),
        )


# --------------------------------------------------------------------------------------------- validation

def _str_field(meta: dict, key: str, path: str, *, required: bool = True) -> str | None:
    v = meta.get(key)
    if v is None:
        if required:
            raise EntryInvalid(path, key, "is missing")
        return None
    if not isinstance(v, str):
        raise EntryInvalid(path, key, f"must be text, got {type(v).__name__} {clip(v)}")
    return v


def _iso_field(meta: dict, key: str, path: str, *, required: bool) -> str | None:
    v = _str_field(meta, key, path, required=required)
    if v is None:
        return None
    if not ISO_RE.match(v):
        raise EntryInvalid(path, key, f"must be an ISO 8601 UTC time like 2026-11-29T14:03:11Z, got {v!r:.40}")
    try:
        parse_iso(v).astimezone(timezone.utc)   # a time near year 1 or 9999 may not exist in UTC
    except (ValueError, OverflowError):
        raise EntryInvalid(path, key, f"is not a real date: {v!r:.40}") from None
    return v


def _citations(value: object, path: str) -> tuple[Citation, ...]:
    if value is None:
        return ()
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise EntryInvalid(path, "citation", "must be a list of {session, seq}")
    out = []
    for i, c in enumerate(value):
        if not isinstance(c, dict) or "session" not in c or "seq" not in c:
            raise EntryInvalid(path, "citation", f"item {i + 1} must have 'session' and 'seq'")
        session, seq = c["session"], c["seq"]
        if isinstance(session, int) and not isinstance(session, bool) and 0 <= session <= MAX_SEQ:
            session = str(session)
        why = session_problem(session)
        if why:
            raise EntryInvalid(path, "citation", f"item {i + 1}: session {why}")
        if not valid_seq(seq):
            raise EntryInvalid(path, "citation", f"item {i + 1}: seq must be an integer 0..{MAX_SEQ}, a range like "
                                                 f"1270-1290 or a kernel ref like m12 / b3, got {clip(seq)}")
        digest = c.get("hash")
        if digest is not None and not (isinstance(digest, str) and HASH_RE.match(digest)):
            raise EntryInvalid(path, "citation", f"item {i + 1}: hash must be the 16-64 hex digits acpmem wrote, "
                                                 f"got {clip(digest)}", "delete the hash line to stop checking it")
        out.append(Citation(session, seq, *_block_fields(c, path, i), digest))
    return tuple(out)


def _block_fields(c: dict, path: str, i: int) -> tuple:
    """A block citation's extra fields, checked: ``block`` b<N>, ``tier`` 1..3, ``compaction`` an id, ``turns``
    a list of seqs and ranges ("2-5,10")."""
    # lazy: `list --format prompt` does not need it (measured +0.4 ms to its start-up)
    from acpmem.core.blocks import COMPACTION_RE, parse_turns, valid_block_id

    block, tier, compaction, turns = c.get("block"), c.get("tier"), c.get("compaction"), c.get("turns")
    if block is not None and not valid_block_id(block):
        raise EntryInvalid(path, "citation", f"item {i + 1}: block must be a block id like b12, got {clip(block)}")
    if tier is not None and (isinstance(tier, bool) or not isinstance(tier, int) or not 1 <= tier <= 3):
        raise EntryInvalid(path, "citation", f"item {i + 1}: tier must be 1, 2 or 3, got {clip(tier)}")
    if compaction is not None and not (isinstance(compaction, str) and COMPACTION_RE.match(compaction)):
        raise EntryInvalid(path, "citation", f"item {i + 1}: compaction must be the host's id (letters, digits, "
                                             f"'-', '.', ':', '_'), got {clip(compaction)}")
    if isinstance(turns, int) and not isinstance(turns, bool):
        turns = str(turns)
    if turns is not None and parse_turns(turns) is None:
        raise EntryInvalid(path, "citation", f"item {i + 1}: turns must be seqs and ranges like 2-5,10, got "
                                             f"{clip(turns)}")
    return block, tier, compaction, turns


def about_path_problem(p: object) -> str | None:
    """Why ``p`` is not a project file path as ``files`` holds them (relative to the project root, inside it), or
    None."""
    if not isinstance(p, str) or not p:
        return "must be text"
    if len(p) > MAX_ABOUT_PATH or breaks_line(p) or "\x00" in p:
        return f"must be one line of at most {MAX_ABOUT_PATH} characters"
    if p.startswith(("/", "~")) or "\\" in p or (len(p) > 1 and p[1] == ":"):
        return "must be relative to the project root (like src/app.py)"
    if any(part in ("", ".", "..") for part in p.split("/")):
        return "must name a file inside the project (no '..', '.' or empty parts)"
    return None


def about_files(extra: dict | None) -> tuple[str, ...]:
    """An entry's ``files`` as a tuple (a single path written by hand is a list of one)."""
    files = (extra or {}).get("files")
    if isinstance(files, str):
        return (files,)
    return tuple(f for f in files if isinstance(f, str)) if isinstance(files, list) else ()


def _about_fields(extra: dict, path: str) -> None:
    """``files`` (the project files the entry is about) and ``commit`` (the project commit they were seen at),
    when present: checked here, kept in ``extra`` (``acpmem.vault.projectgit`` reads them)."""
    files = extra.get("files")
    if files is not None:
        if isinstance(files, str):   # one file, written by hand: read as a list of one, kept as written
            files = [files]
        if not isinstance(files, list) or len(files) > MAX_ABOUT_FILES:
            raise EntryInvalid(path, "files", f"must be a list of at most {MAX_ABOUT_FILES} project file paths",
                               "e.g. files: [src/app.py, README.md]")
        for f in files:
            why = about_path_problem(f)
            if why:
                raise EntryInvalid(path, "files", f"{clip(f)} {why}", "e.g. files: [src/app.py, README.md]")
    commit = extra.get("commit")
    if commit is not None and not (isinstance(commit, str) and COMMIT_RE.match(commit)):
        raise EntryInvalid(path, "commit", f"must be the project's git commit (hex digits), got {clip(commit)}",
                           "e.g. commit: 3f2a9c1 (quote one of digits only: '1234567'), or delete the line to stop "
                           "the staleness check")


def branch_problem(name: object) -> str | None:
    """Why ``name`` is not a branch name as ``branch:`` holds it (a git branch name, or ``HEAD`` for a detached
    checkout), or None. Stricter than git: no spaces, control characters or what git forbids in a ref name."""
    if not isinstance(name, str) or not name:
        return "must be text"
    if len(name) > MAX_BRANCH_CHARS:
        return f"must be at most {MAX_BRANCH_CHARS} characters"
    if name.startswith(("-", "/", ".")) or _BRANCH_BAD.search(name):
        return "must be a git branch name (no spaces, '..', '~', '^', ':', '?', '*', '[', '\\' or '@{')"
    return None


def _branch_fields(extra: dict, path: str) -> None:
    """``branch`` (the project branch an entry was learned on; it is then seen only where that branch's work is)
    and ``anchor`` (``next``: the branch had no commit of its own yet), checked when present."""
    branch = extra.get("branch")
    if branch is not None:
        why = branch_problem(branch)
        if why:
            raise EntryInvalid(path, "branch", f"{clip(branch)} {why}",
                               "e.g. branch: feature/importer, or delete the line to make the entry global")
    anchor = extra.get("anchor")
    if anchor is not None:
        if anchor not in ANCHORS:
            raise EntryInvalid(path, "anchor", f"must be next, got {clip(anchor)}", "delete the line, or write "
                               "anchor: next")
        if branch is None or extra.get("commit") is None:
            raise EntryInvalid(path, "anchor", "needs a branch and a commit beside it",
                               "delete the anchor line")


def evidence_of(extra: dict | None) -> tuple[str, ...]:
    """An entry's ``evidence`` as a tuple of quotes (one written by hand as text is a list of one)."""
    ev = (extra or {}).get("evidence")
    if isinstance(ev, str):
        return (ev,)
    return tuple(q for q in ev if isinstance(q, str)) if isinstance(ev, list) else ()


def _evidence_field(extra: dict, path: str) -> None:
    """``evidence`` (the words of the turns the entry cites, quoted when it was written: recall finds a terse entry
    by them), checked when present: text, or a list of at most ``MAX_EVIDENCE`` quotes of ``MAX_EVIDENCE_CHARS``."""
    ev = extra.get("evidence")
    if ev is None:
        return
    quotes = [ev] if isinstance(ev, str) else ev
    if not isinstance(quotes, list) or len(quotes) > MAX_EVIDENCE or not all(
            isinstance(q, str) and len(q) <= MAX_EVIDENCE_CHARS for q in quotes):
        raise EntryInvalid(path, "evidence", f"must be a list of at most {MAX_EVIDENCE} quotes of at most "
                           f"{MAX_EVIDENCE_CHARS} characters each", "shorten the quotes, or delete the evidence lines")


def validate_id(value: str, path: str = "") -> str:
    if not isinstance(value, str) or not ID_RE.match(value):
        raise EntryInvalid(path, "id", f"must be 1–64 letters, digits, '-' or '_' starting with a letter or digit, "
                                       f"got {clip(value)}")
    return value


def entry_from_meta(meta: dict, body: str, path: str, types: tuple[str, ...] | None = DEFAULT_TYPES) -> Entry:
    """Validate a frontmatter mapping strictly and build an Entry. Raises EntryInvalid naming the field."""
    for k in meta:
        if not isinstance(k, str):
            raise EntryInvalid(path, str(k), "frontmatter keys must be text")
    ident = validate_id(_str_field(meta, "id", path), path)
    title = _str_field(meta, "title", path).strip()
    if not title:
        raise EntryInvalid(path, "title", "is empty")
    if breaks_line(title) or len(title) > MAX_TITLE_CHARS:
        raise EntryInvalid(path, "title", f"must be one line of at most {MAX_TITLE_CHARS} characters, without control "
                                          "characters")
    typ = _str_field(meta, "type", path)
    if types is not None and typ not in types:
        raise EntryInvalid(path, "type", f"'{typ}' is not one of {', '.join(types)}",
                           "use one of the vault's types (acpmem.toml [vault] types)")
    imp = meta.get("importance")
    if isinstance(imp, bool) or not isinstance(imp, int) or not 1 <= imp <= 10:
        raise EntryInvalid(path, "importance", f"must be an integer from 1 to 10, got {clip(imp)}")
    created = _iso_field(meta, "created", path, required=True)
    last_read = _iso_field(meta, "last_read", path, required=False)
    tier = meta.get("tier", 3)
    if isinstance(tier, bool) or not isinstance(tier, int) or not 1 <= tier <= 3:
        raise EntryInvalid(path, "tier", f"must be 1, 2 or 3, got {clip(tier)}")
    source = meta.get("source")
    if source is not None and not isinstance(source, dict):
        raise EntryInvalid(path, "source", "must be a mapping like {request: r-…, extractor: …}")
    sup = meta.get("supersedes") or []
    if isinstance(sup, str):
        sup = [sup]
    if not isinstance(sup, list) or not all(isinstance(s, str) and ID_RE.match(s) for s in sup):
        raise EntryInvalid(path, "supersedes", "must be a list of entry ids")
    sup_by = meta.get("superseded_by")
    if sup_by is not None and not (isinstance(sup_by, str) and ID_RE.match(sup_by)):
        raise EntryInvalid(path, "superseded_by", "must be an entry id")
    extra = {k: v for k, v in meta.items() if k not in KNOWN_KEYS}
    _about_fields(extra, path)
    _branch_fields(extra, path)
    _evidence_field(extra, path)
    for k, v in (("source", source), *extra.items()):
        bad = bad_value({k: v})
        if bad is not None:   # stored as JSON in the derived index: a 64-bit integer, a finite float, text without NUL
            raise EntryInvalid(path, k, f"holds a value acpmem cannot store: {clip(bad)}",
                               "numbers in an entry must be 64-bit integers or finite decimals, text must not hold NUL")
    return Entry(id=ident, title=title, type=typ, importance=imp, created=created, body=body, last_read=last_read,
                 citation=_citations(meta.get("citation"), path), tier=tier, source=source,
                 supersedes=tuple(sup), superseded_by=sup_by, extra=extra, path=path or None)
