"""The entry data model: ``Entry`` and ``Citation``, the entry file format, strict parsing and stable dumping.

An entry file is markdown with YAML frontmatter (SPEC §3). Two promises shape this module:

* **Round trip.** ``dump_entry(parse_entry(text))`` returns ``text`` byte for byte. When fields change, only the
  frontmatter lines of the changed keys are rewritten; comments, unknown keys a person added, key order, quoting
  and line endings (LF or CRLF) of everything else stay as they were, so diffs stay small.
* **Hostile input is refused, not interpreted.** The YAML loader resolves only ``true/false``, ``null``, decimal
  integers without leading zeros and plain floats; everything else (dates, ``no``, ``012``) stays a string. Anchors,
  aliases, explicit tags, duplicate keys, non-UTF-8, NUL and oversize frontmatter are rejected with the file, the
  field and the reason.

No I/O here: callers pass text in and get text out.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone

from acpmem.errors import EntryInvalid

DEFAULT_TYPES = ("decision", "lesson", "fact", "user-preference", "reference")
KNOWN_KEYS = ("id", "title", "type", "importance", "created", "last_read", "citation", "tier", "source",
              "supersedes", "superseded_by")
MAX_FILE_BYTES = 1_000_000
MAX_FRONTMATTER_BYTES = 64_000
MAX_TITLE_CHARS = 300
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
SEQ_RANGE_RE = re.compile(r"^\d+-\d+$")
KERNEL_REF_RE = re.compile(r"^[mb]\d+$")
ISO_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


class FrozenInstanceError(AttributeError):
    """Assigning to a field of a frozen value."""


class Value:
    """A frozen value, as a frozen dataclass would give: built from positional or keyword fields, immutable, equal
    and hashed by its fields, shown as ``Name(field=value, ...)``, copied with changes by ``with_changes``.

    The values the per-turn read path builds (entries, citations, settings, scores) use this instead of
    ``dataclasses``: that import (with ``inspect``) and the code it generates per class cost ~35 ms of the
    150 ms that ``list --format prompt`` may take. Fields are the class's annotations in order; a class attribute
    of the same name is the default (defaults are shared, so they must be immutable). ``_hidden`` fields are left
    out of comparison and repr."""

    _fields: tuple[str, ...] = ()
    _defaults: dict = {}
    _compared: tuple[str, ...] = ()
    _hidden: tuple[str, ...] = ()

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        own = tuple(cls.__dict__.get("__annotations__", {}))
        cls._fields = cls._fields + tuple(n for n in own if n not in cls._fields)
        cls._defaults = {n: cls.__dict__[n] for n in cls._fields if n in cls.__dict__} | {
            n: v for n, v in cls._defaults.items() if n not in cls.__dict__}
        cls._compared = tuple(n for n in cls._fields if n not in cls._hidden)

    def __init__(self, *args: object, **kwargs: object) -> None:
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__}() takes {len(fields)} fields, {len(args)} were given")
        d = self.__dict__
        d.update(zip(fields, args))
        for k, v in kwargs.items():
            if k not in fields:
                raise TypeError(f"{type(self).__name__}() got an unexpected field '{k}'")
            if k in d:
                raise TypeError(f"{type(self).__name__}() got field '{k}' twice")
            d[k] = v
        if len(d) < len(fields):
            for n in fields:
                if n not in d:
                    if n not in self._defaults:
                        raise TypeError(f"{type(self).__name__}() is missing field '{n}'")
                    d[n] = self._defaults[n]

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field '{name}'")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field '{name}'")

    def _key(self) -> tuple:
        d = self.__dict__
        return tuple(d[n] for n in self._compared)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        d = self.__dict__
        return f"{type(self).__qualname__}({', '.join(f'{n}={d[n]!r}' for n in self._compared)})"

    def with_changes(self, **changes: object):
        """A copy with some fields changed (``dataclasses.replace``)."""
        d = self.__dict__
        return type(self)(**{n: changes.pop(n) if n in changes else d[n] for n in self._fields}, **changes)


class Citation(Value):
    """Where an entry came from: a host session and a seq (an int, a range "1270-1290", or a kernel ref m12 / b3)."""

    session: str
    seq: int | str

    def __init__(self, session: str, seq: int | str) -> None:
        d = self.__dict__
        d["session"] = session
        d["seq"] = seq

    def to_dict(self) -> dict:
        return {"session": self.session, "seq": self.seq}

    def __str__(self) -> str:
        return f"{self.session}#{self.seq}"


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
            citation=tuple(Citation(c["session"], c["seq"]) for c in known.get("citation") or ()),
            tier=known.get("tier", 3), source=known.get("source"), supersedes=tuple(known.get("supersedes") or ()),
            superseded_by=known.get("superseded_by"), extra=extra, path=d.get("path"),
        )


def utc_iso(dt: datetime) -> str:
    """An aware datetime as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return dt.astimezone(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(value: str) -> datetime:
    dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


# --------------------------------------------------------------------------------------------- YAML, restricted

_yaml_classes: tuple | None = None


def _yaml():
    """Build (once) a loader and a dumper with restricted implicit typing. PyYAML is imported only here."""
    global _yaml_classes
    if _yaml_classes is not None:
        return _yaml_classes
    import yaml

    base_loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base_loader):  # type: ignore[misc, valid-type]
        yaml_implicit_resolvers: dict = {}

        def construct_mapping(self, node, deep=False):  # refuse duplicate keys instead of keeping the last
            if isinstance(node, yaml.MappingNode):
                seen = set()
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=deep)
                    try:
                        dup = key in seen
                    except TypeError:
                        raise yaml.constructor.ConstructorError(None, None, "a mapping key is not a plain value",
                                                                key_node.start_mark)
                    if dup:
                        raise yaml.constructor.ConstructorError(None, None, f"duplicate key '{key}'",
                                                                key_node.start_mark)
                    seen.add(key)
            return super().construct_mapping(node, deep=deep)

    def add(cls, tag, regexp, first):
        cls.add_implicit_resolver(tag, re.compile(regexp, re.X), list(first))

    add(Loader, "tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF")
    add(Loader, "tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""])
    add(Loader, "tag:yaml.org,2002:int", r"^(?:[-+]?[1-9][0-9]*|0)$", "-+0123456789")
    add(Loader, "tag:yaml.org,2002:float", r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$", "-+0123456789.")

    class Dumper(yaml.SafeDumper):
        """Quotes whatever YAML 1.1 readers would coerce (``no``, ``012``), but leaves ISO dates plain."""

        yaml_implicit_resolvers = {
            k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
            for k, v in yaml.SafeDumper.yaml_implicit_resolvers.items()
        }

    def _str(dumper, data):
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    Dumper.add_representer(str, _str)
    _yaml_classes = (yaml, Loader, Dumper)
    return _yaml_classes


def _needs_no_event_check(text: str) -> bool:
    """Whether YAML text cannot hold an anchor, alias, tag or directive (no '&', '*', '!' or '%' anywhere: each
    starts with one) nor a second document (no line starting '---' or '...'). Then walking its events first, to
    refuse those, finds nothing, and the one parse of ``yaml.load`` reports the same first error the walk would.
    That is the frontmatter acpmem writes, so it is parsed once instead of twice."""
    return not ("&" in text or "*" in text or "!" in text or "%" in text or text.startswith(("---", "..."))
                or "\n---" in text or "\n..." in text)


# The frontmatter acpmem writes, read without PyYAML: ``key: scalar`` lines and block lists of flat mappings
# (citations). Anything else — flow collections, block scalars, comments, blank or tab-indented lines, escapes in
# double quotes, odd characters, a duplicate key — returns None and goes to the YAML loader, which stays the
# definition (a test compares the two on generated input).
_FAST_KEY = r"[A-Za-z_][A-Za-z0-9_]*"
_FAST_NO = object()
_fast_res: dict | None = None


def _fast_re() -> dict:
    """The fast path's patterns, compiled on first use (the per-turn listing reads no entry file)."""
    global _fast_res
    if _fast_res is None:
        _fast_res = {
            "line": re.compile(r"(" + _FAST_KEY + r"):(?: (.*))?"),
            "item": re.compile(r"(- |  )(" + _FAST_KEY + r"): (.*)"),
            "plain": re.compile(r"[^\s\-?:,\[\]{}#&*!|>'\"%@`](?:[^:#\s]|:(?=\S)|(?<=\S)#|[ ](?=[^\s#]))*"),
            "dq": re.compile(r'"([^"\\]*)"'),
            "sq": re.compile(r"'((?:[^']|'')*)'"),
            # what YAML refuses or reads as a line break: control characters (tab too: the fast path declines it)
            "bad_ascii": re.compile("[\x00-\x09\x0B-\x1F\x7F]"),
            "resolve": (
                (re.compile(r"(?:true|True|TRUE)\Z"), lambda v: True),
                (re.compile(r"(?:false|False|FALSE)\Z"), lambda v: False),
                (re.compile(r"(?:~|null|Null|NULL|)\Z"), lambda v: None),
                (re.compile(r"(?:[-+]?[1-9][0-9]*|0)\Z"), int),
                (re.compile(r"[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z"), float),
            ),
            "special_key": re.compile(r"(?:true|True|TRUE|false|False|FALSE|null|Null|NULL)\Z"),
        }
    return _fast_res


def _bad_wide(text: str) -> bool:
    """Non-ASCII text: anything outside YAML's printable set, or a character YAML reads as a line break."""
    global _bad_wide_re
    if _bad_wide_re is None:   # a wide class: ~5 ms to compile, so only for text that needs it
        _bad_wide_re = re.compile("[^\x0A\x20-\x7E\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010ffff]"
                                  "|[\u2028\u2029\uFEFF]")
    return _bad_wide_re.search(text) is not None


_bad_wide_re = None


def _fast_scalar(raw: str, rx: dict):
    """A value as the restricted loader reads it, or ``_FAST_NO``."""
    if raw[:1] == '"':
        m = rx["dq"].fullmatch(raw)
        return m.group(1) if m else _FAST_NO
    if raw[:1] == "'":
        m = rx["sq"].fullmatch(raw)
        return m.group(1).replace("''", "'") if m else _FAST_NO
    if raw and not rx["plain"].fullmatch(raw):
        return _FAST_NO
    for pattern, make in rx["resolve"]:
        if pattern.match(raw):
            return make(raw)
    return raw


def _fast_mapping(text: str) -> dict | None:
    if not text or "\r" in text:
        return None
    rx = _fast_re()
    if rx["bad_ascii"].search(text) or (not text.isascii() and _bad_wide(text)):
        return None
    line_re, item_re, special = rx["line"], rx["item"], rx["special_key"]
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    out: dict = {}
    i, n = 0, len(lines)
    while i < n:
        m = line_re.fullmatch(lines[i])
        if m is None or m.group(1) in out or special.match(m.group(1)) or len(m.group(1)) > 128:
            return None
        key, raw = m.group(1), m.group(2)
        i += 1
        if raw is None and i < n and lines[i][:2] == "- ":    # a block list of flat mappings
            items: list = []
            while i < n and lines[i][:2] == "- ":
                item: dict = {}
                while i < n:
                    im = item_re.fullmatch(lines[i])
                    if im is None or (im.group(1) == "- ") != (not item) or im.group(2) in item \
                            or special.match(im.group(2)):
                        break
                    value = _fast_scalar(im.group(3), rx)
                    if value is _FAST_NO:
                        return None
                    item[im.group(2)] = value
                    i += 1
                    if i < n and lines[i][:2] != "  ":
                        break
                if not item or (i < n and lines[i][:2] == "  "):
                    return None
                items.append(item)
            out[key] = items
            continue
        value = _fast_scalar("" if raw is None else raw, rx)
        if value is _FAST_NO or (raw is not None and raw == ""):
            return None
        out[key] = value
    return out


def load_yaml_mapping(text: str, path: str) -> dict:
    """Load one YAML mapping with the restricted loader, rejecting anchors, aliases and explicit tags."""
    fast = _fast_mapping(text)
    if fast is not None:
        return fast
    yaml, Loader, _ = _yaml()
    try:
        for ev in () if _needs_no_event_check(text) else yaml.parse(text, Loader=Loader):
            if isinstance(ev, yaml.AliasEvent) or getattr(ev, "anchor", None):
                raise EntryInvalid(path, None, "YAML anchors and aliases are not allowed in entries")
            tag = getattr(ev, "tag", None)
            if tag and not (isinstance(ev, yaml.ScalarEvent) and ev.implicit[0]) and tag != "!":
                raise EntryInvalid(path, None, f"YAML tags are not allowed in entries (found {tag[:60]})")
        data = yaml.load(text, Loader=Loader)
    except EntryInvalid:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise EntryInvalid(path, None, f"frontmatter is not valid YAML{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise EntryInvalid(path, None, "frontmatter must be a YAML mapping of keys to values")
    return data


def dump_yaml(mapping: dict) -> str:
    """Frontmatter text: block style at the top, citations as a block list, other collections in flow style.

    The same text as rendering each key alone (``_render_key``, which minimal-diff rewrites use), but runs of
    keys rendered alike go through one ``yaml.dump`` call: a new entry costs one call instead of eight."""
    yaml, _, Dumper = _yaml()
    parts: list[str] = []
    run: dict = {}
    for k, v in mapping.items():
        if isinstance(v, (dict, list)) and v and k != "citation" or isinstance(v, str) and "\n" in v:
            # flow collections, and block scalars (alone, a kept final newline ends the document with "...")
            if run:
                parts.append(_dump_block(yaml, Dumper, run))
                run = {}
            parts.append(_render_key(k, v, "\n"))
        else:
            run[k] = v
    if run:
        parts.append(_dump_block(yaml, Dumper, run))
    return "".join(parts)


def _dump_block(yaml, Dumper, mapping: dict) -> str:
    return yaml.dump(mapping, Dumper=Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False,
                     width=10_000)


def _render_key(key: str, value: object, eol: str) -> str:
    yaml, _, Dumper = _yaml()
    if isinstance(value, (dict, list)) and value and key != "citation":
        flow = yaml.dump(value, Dumper=Dumper, allow_unicode=True, default_flow_style=True, width=10_000,
                         sort_keys=False).strip()
        text = yaml.dump({key: None}, Dumper=Dumper, allow_unicode=True, sort_keys=False).split(":")[0] + ": " + \
            flow + "\n"
    else:
        text = yaml.dump({key: value}, Dumper=Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False,
                         width=10_000)
    return text.replace("\n", eol) if eol != "\n" else text


# --------------------------------------------------------------------------------------------- file split

class _Split(Value):
    head: str   # the opening delimiter line, e.g. "---\n" (with a BOM if the file has one)
    fm: str     # frontmatter text between the delimiters, line ends included
    close: str  # the closing delimiter line, e.g. "---\r\n"
    body: str
    eol: str


def _split(text: str, path: str) -> _Split:
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    rest = text[len(bom):]
    first_end = rest.find("\n")
    first = rest if first_end < 0 else rest[: first_end + 1]
    if first.rstrip("\r\n") != "---":
        raise EntryInvalid(path, None, "the file does not start with a '---' frontmatter line",
                           "an entry starts with '---', the YAML fields, '---', then the body")
    eol = "\r\n" if first.endswith("\r\n") else "\n"
    pos = len(first)
    while pos < len(rest):
        nl = rest.find("\n", pos)
        line = rest[pos:] if nl < 0 else rest[pos: nl + 1]
        if line.rstrip("\r\n") == "---":
            return _Split(bom + first, rest[len(first): pos], line, rest[pos + len(line):], eol)
        if pos - len(first) > MAX_FRONTMATTER_BYTES:
            break
        pos += len(line)
    if len(rest) - len(first) > MAX_FRONTMATTER_BYTES and pos - len(first) > MAX_FRONTMATTER_BYTES:
        raise EntryInvalid(path, None, f"frontmatter is larger than {MAX_FRONTMATTER_BYTES // 1000} KB")
    raise EntryInvalid(path, None, "the frontmatter is never closed (no second '---' line)",
                       "add a line '---' after the YAML fields")


def decode_entry_bytes(data: bytes, path: str) -> str:
    if len(data) > MAX_FILE_BYTES:
        raise EntryInvalid(path, None, f"the file is larger than {MAX_FILE_BYTES // 1_000_000} MB")
    if b"\x00" in data:
        raise EntryInvalid(path, None, "the file contains NUL bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EntryInvalid(path, None, f"the file is not UTF-8 (byte {exc.start})",
                           "save it as UTF-8") from None


# --------------------------------------------------------------------------------------------- validation

def _str_field(meta: dict, key: str, path: str, *, required: bool = True) -> str | None:
    v = meta.get(key)
    if v is None:
        if required:
            raise EntryInvalid(path, key, "is missing")
        return None
    if not isinstance(v, str):
        raise EntryInvalid(path, key, f"must be text, got {type(v).__name__} {v!r:.40}")
    return v


def _iso_field(meta: dict, key: str, path: str, *, required: bool) -> str | None:
    v = _str_field(meta, key, path, required=required)
    if v is None:
        return None
    if not ISO_RE.match(v):
        raise EntryInvalid(path, key, f"must be an ISO 8601 UTC time like 2026-11-29T14:03:11Z, got {v!r:.40}")
    try:
        parse_iso(v)
    except ValueError:
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
        if isinstance(session, int) and not isinstance(session, bool):
            session = str(session)
        if not isinstance(session, str) or not session.strip():
            raise EntryInvalid(path, "citation", f"item {i + 1}: session must be text")
        if isinstance(seq, bool) or not (
                (isinstance(seq, int) and seq >= 0)
                or (isinstance(seq, str) and (SEQ_RANGE_RE.match(seq) or KERNEL_REF_RE.match(seq)))):
            raise EntryInvalid(path, "citation", f"item {i + 1}: seq must be an integer, a range like 1270-1290 "
                                                 f"or a kernel ref like m12 / b3, got {seq!r:.40}")
        out.append(Citation(session, seq))
    return tuple(out)


def validate_id(value: str, path: str = "") -> str:
    if not isinstance(value, str) or not ID_RE.match(value):
        raise EntryInvalid(path, "id", f"must be 1–64 letters, digits, '-' or '_' starting with a letter or digit, "
                                       f"got {value!r:.40}")
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
    if "\n" in title or len(title) > MAX_TITLE_CHARS:
        raise EntryInvalid(path, "title", f"must be one line of at most {MAX_TITLE_CHARS} characters")
    typ = _str_field(meta, "type", path)
    if types is not None and typ not in types:
        raise EntryInvalid(path, "type", f"'{typ}' is not one of {', '.join(types)}",
                           "use one of the vault's types (acpmem.toml [vault] types)")
    imp = meta.get("importance")
    if isinstance(imp, bool) or not isinstance(imp, int) or not 1 <= imp <= 10:
        raise EntryInvalid(path, "importance", f"must be an integer from 1 to 10, got {imp!r:.40}")
    created = _iso_field(meta, "created", path, required=True)
    last_read = _iso_field(meta, "last_read", path, required=False)
    tier = meta.get("tier", 3)
    if isinstance(tier, bool) or not isinstance(tier, int) or not 1 <= tier <= 3:
        raise EntryInvalid(path, "tier", f"must be 1, 2 or 3, got {tier!r:.40}")
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
    return Entry(id=ident, title=title, type=typ, importance=imp, created=created, body=body, last_read=last_read,
                 citation=_citations(meta.get("citation"), path), tier=tier, source=source,
                 supersedes=tuple(sup), superseded_by=sup_by, extra=extra, path=path or None)


def parse_entry(text: str, path: str = "", types: tuple[str, ...] | None = DEFAULT_TYPES) -> Entry:
    """Parse an entry file's text. Raises EntryInvalid with the path, the field and the reason."""
    if "\x00" in text:
        raise EntryInvalid(path, None, "the file contains NUL characters")
    sp = _split(text, path)
    if len(sp.fm.encode("utf-8")) > MAX_FRONTMATTER_BYTES:
        raise EntryInvalid(path, None, f"frontmatter is larger than {MAX_FRONTMATTER_BYTES // 1000} KB")
    meta = load_yaml_mapping(sp.fm, path)
    entry = entry_from_meta(meta, sp.body, path, types)
    return entry.with_changes(raw=text)


def parse_entry_bytes(data: bytes, path: str = "", types: tuple[str, ...] | None = DEFAULT_TYPES) -> Entry:
    return parse_entry(decode_entry_bytes(data, path), path, types)


# --------------------------------------------------------------------------------------------- dumping

def _key_blocks(fm: str) -> list[tuple[str | None, str]]:
    """Split frontmatter text into top-level blocks: (key, text). Leading comments form a (None, text) block."""
    blocks: list[tuple[str | None, str]] = []
    for line in fm.splitlines(keepends=True):
        stripped = line.rstrip("\r\n")
        starts_key = (stripped[:1] not in ("", " ", "\t", "#", "-") and ":" in stripped)
        if starts_key:
            key = stripped.split(":", 1)[0].strip().strip("'\"")
            blocks.append((key, line))
        elif blocks:
            k, t = blocks[-1]
            blocks[-1] = (k, t + line)
        else:
            blocks.append((None, line))
    return blocks


def dump_entry(entry: Entry) -> str:
    """The file text of ``entry``. Unchanged entries give back their original bytes; changed ones change only the
    lines of the keys that changed (and the body, if it changed)."""
    meta = entry.meta()
    if entry.raw is None:
        fm = dump_yaml(meta)
        body = entry.body
        if body and not body.endswith("\n"):
            body += "\n"
        return "---\n" + fm + "---\n" + body
    sp = _split(entry.raw, entry.path or "")
    old_meta = load_yaml_mapping(sp.fm, entry.path or "")
    old_entry = entry_from_meta(old_meta, sp.body, entry.path or "", None)
    blocks = _key_blocks(sp.fm)
    out_blocks: list[tuple[str | None, str]] = []
    present = set()
    for key, text in blocks:
        if key is None:
            out_blocks.append((key, text))
            continue
        present.add(key)
        if key in KNOWN_KEYS:
            # compare the values the entry means, not their spelling: `supersedes: []` and no key are the same
            unchanged = getattr(old_entry, key) == getattr(entry, key)
        else:
            unchanged = key in entry.extra and old_meta.get(key) == entry.extra[key] \
                and type(old_meta.get(key)) is type(entry.extra[key])
        if unchanged:
            out_blocks.append((key, text))
        elif key in meta:
            out_blocks.append((key, _render_key(key, meta[key], sp.eol)))
    order = list(meta.keys())
    for key in order:
        if key in present:
            continue
        # insert after the closest preceding key that is present
        idx = order.index(key)
        pos = len(out_blocks)
        for prev in reversed(order[:idx]):
            hits = [i for i, (k, _) in enumerate(out_blocks) if k == prev]
            if hits:
                pos = hits[0] + 1
                break
        block_text = _render_key(key, meta[key], sp.eol)
        if pos > 0 and not out_blocks[pos - 1][1].endswith("\n"):
            out_blocks[pos - 1] = (out_blocks[pos - 1][0], out_blocks[pos - 1][1] + sp.eol)
        out_blocks.insert(pos, (key, block_text))
        present.add(key)
    fm = "".join(t for _, t in out_blocks)
    body = sp.body if entry.body == sp.body else entry.body
    return sp.head + fm + sp.close + body


def new_entry_text(entry: Entry) -> str:
    """Text for an entry written by acpmem (no original bytes)."""
    return dump_entry(entry.with_changes(raw=None))


def slugify(title: str, limit: int = 48) -> str:
    """An ASCII file-name slug of a title; empty when the title is mostly not Latin (the id alone names it)."""
    words = re.findall(r"[a-z0-9]+", title.lower())
    if sum(len(w) for w in words) < len(re.sub(r"\s", "", title)) / 2:
        return ""
    slug = ""
    for w in words:
        nxt = f"{slug}-{w}" if slug else w
        if len(nxt) > limit:
            break
        slug = nxt
    return slug
