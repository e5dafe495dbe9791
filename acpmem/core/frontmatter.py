"""The restricted YAML of entry frontmatter: load a mapping strictly, dump it stably.

The loader resolves only ``true/false``, ``null``, decimal integers without leading zeros and plain floats;
everything else (dates, ``no``, ``012``) stays a string. Anchors, aliases, explicit tags and duplicate keys are
refused. The frontmatter acpmem itself writes is read by a small exact parser without PyYAML (PyYAML stays the
definition: a generated-input test compares the two). No I/O.
"""
from __future__ import annotations

import re

from acpmem.core.errors import EntryInvalid


_yaml_classes: tuple | None = None


def _yaml():
    """Build (once) a loader and a dumper with restricted implicit typing. PyYAML is imported only here."""
    global _yaml_classes
    if _yaml_classes is not None:
        return _yaml_classes
    # lazy: yaml is heavy, never imported at start-up
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


# The frontmatter acpmem writes, read without PyYAML: ``key: scalar`` lines, block lists of flat mappings
# (citations), flat flow mappings (``source``) and flat flow sequences of scalars (``files``). Anything else — flow collections, block scalars, comments, blank or tab-indented lines, escapes in
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
            # one item of a flat flow mapping ({request: r-x, extractor: 'llm:m'}, how acpmem writes ``source``):
            # a plain key, then a plain value without any flow indicator or ':' (else declined), or a quoted one
            "flow_item": re.compile(r"(" + _FAST_KEY + r"): ([^\s\-?:,\[\]{}#&*!|>'\"%@`][^:,\[\]{}#\s]*"
                                    r"(?: [^:,\[\]{}#\s]+)*|'(?:[^']|'')*'|\"[^\"\\]*\")(, |\}\Z)"),
            # one item of a flat flow sequence ([src/a.py, README.md], how acpmem writes ``files``): the same values
            "seq_item": re.compile(r"([^\s\-?:,\[\]{}#&*!|>'\"%@`][^:,\[\]{}#\s]*(?: [^:,\[\]{}#\s]+)*"
                                   r"|'(?:[^']|'')*'|\"[^\"\\]*\")(, |\]\Z)"),
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
            try:
                return make(raw)
            except ValueError:   # an integer of more than 4,300 digits: the YAML loader reports it
                return _FAST_NO
    return raw


def _fast_flow(raw: str, rx: dict):
    """A flat flow mapping of scalars, as the restricted loader reads it, or ``_FAST_NO``."""
    out: dict = {}
    pos, item, special = 1, rx["flow_item"], rx["special_key"]
    while pos < len(raw):
        m = item.match(raw, pos)
        if m is None or m.group(1) in out or special.match(m.group(1)):
            return _FAST_NO
        value = _fast_scalar(m.group(2), rx)
        if value is _FAST_NO:
            return _FAST_NO
        out[m.group(1)] = value
        pos = m.end()
        if m.group(3) == "}":
            return out if pos == len(raw) else _FAST_NO
    return _FAST_NO


def _fast_seq(raw: str, rx: dict):
    """A flat flow sequence of scalars, as the restricted loader reads it, or ``_FAST_NO``."""
    if raw == "[]":
        return []
    out: list = []
    pos, item = 1, rx["seq_item"]
    while pos < len(raw):
        m = item.match(raw, pos)
        if m is None:
            return _FAST_NO
        value = _fast_scalar(m.group(1), rx)
        if value is _FAST_NO:
            return _FAST_NO
        out.append(value)
        pos = m.end()
        if m.group(2) == "]":
            return out if pos == len(raw) else _FAST_NO
    return _FAST_NO


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
        if raw is not None and raw[:1] == "{":
            value = _fast_flow(raw, rx)
        elif raw is not None and raw[:1] == "[":
            value = _fast_seq(raw, rx)
        else:
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
    except ValueError:   # int() refuses a decimal of more than 4,300 digits (sys.get_int_max_str_digits)
        raise EntryInvalid(path, None, "frontmatter holds a number too long to read (more than 4300 digits)",
                           "numbers in an entry must be 64-bit integers") from None
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

    The same text as rendering each key alone (``render_key``, which minimal-diff rewrites use), but runs of
    keys rendered alike go through one ``yaml.dump`` call: a new entry costs one call instead of eight."""
    yaml, _, Dumper = _yaml()
    parts: list[str] = []
    run: dict = {}
    for k, v in mapping.items():
        if isinstance(v, (dict, list)) and v and k != "citation" or _multiline(v):
            # flow collections, and block scalars (alone, a kept final newline ends the document with "...")
            if run:
                parts.append(_dump_block(yaml, Dumper, run))
                run = {}
            parts.append(render_key(k, v, "\n"))
        else:
            run[k] = v
    if run:
        parts.append(_dump_block(yaml, Dumper, run))
    return "".join(parts)


def _multiline(value: object) -> bool:
    """A text with a line break anywhere in the value (a citation's session included): rendered as a block scalar."""
    if isinstance(value, str):
        return "\n" in value
    if isinstance(value, dict):
        return any(_multiline(k) or _multiline(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_multiline(v) for v in value)
    return False


def _dump_block(yaml, Dumper, mapping: dict) -> str:
    return yaml.dump(mapping, Dumper=Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False,
                     width=10_000)


def render_key(key: str, value: object, eol: str) -> str:
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
