"""The entry file: markdown with YAML frontmatter, parsed strictly and written back stably.

* **Round trip.** ``dump_entry(parse_entry(text))`` returns ``text`` byte for byte. When fields change, only the
  frontmatter lines of the changed keys are rewritten; comments, unknown keys a person added, key order, quoting
  and line endings (LF or CRLF) of everything else stay as they were, so diffs stay small.
* **Hostile input is refused, not interpreted.** Non-UTF-8, NUL, oversize files and frontmatter, unresolved git
  conflict markers, and whatever the restricted YAML refuses (``acpmem.core.frontmatter``) are rejected with the
  file, the field and the reason.

No I/O here: callers pass text in and get text out.
"""
from __future__ import annotations

import re

from acpmem.core.entry import DEFAULT_TYPES, KNOWN_KEYS, Entry, entry_from_meta
from acpmem.core.errors import EntryInvalid
from acpmem.core.frontmatter import dump_yaml, load_yaml_mapping, render_key
from acpmem.core.lazyre import compile_later
from acpmem.core.values import Value

MAX_FILE_BYTES = 1_000_000
MAX_FRONTMATTER_BYTES = 64_000

# git's conflict markers: a line '<<<<<<< ours' and a line '>>>>>>> theirs' (a '=======' line alone is a markdown
# heading underline, not a conflict)
_CONFLICT_OPEN = compile_later(r"^<{7}(?: |\r?$)", re.MULTILINE)
_CONFLICT_CLOSE = compile_later(r"^>{7}(?: |\r?$)", re.MULTILINE)
CONFLICT_REASON = "the file holds unresolved merge conflict markers ('<<<<<<<' … '>>>>>>>' lines)"
CONFLICT_HINT = "keep what is right and delete the marker lines, then run `acp memory sync`"


def has_conflict_markers(text: str) -> bool:
    """Whether ``text`` holds an unresolved git conflict: both a ``<<<<<<<`` and a ``>>>>>>>`` marker line."""
    return "<<<<<<<" in text and ">>>>>>>" in text and _CONFLICT_OPEN.search(text) is not None \
        and _CONFLICT_CLOSE.search(text) is not None


def defuse_conflict_markers(text: str) -> str:
    """``text`` with each conflict marker line indented by a space, so that what a model quotes about a merge
    conflict is written as an entry that stays valid (markdown shows the line the same)."""
    if not has_conflict_markers(text):
        return text
    return _CONFLICT_CLOSE.sub(lambda m: " " + m.group(0), _CONFLICT_OPEN.sub(lambda m: " " + m.group(0), text))


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


def parse_entry(text: str, path: str = "", types: tuple[str, ...] | None = DEFAULT_TYPES) -> Entry:
    """Parse an entry file's text. Raises EntryInvalid with the path, the field and the reason."""
    if "\x00" in text:
        raise EntryInvalid(path, None, "the file contains NUL characters")
    if has_conflict_markers(text):
        raise EntryInvalid(path, None, CONFLICT_REASON, CONFLICT_HINT)
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
            out_blocks.append((key, render_key(key, meta[key], sp.eol)))
    order = list(meta.keys())
    for key in order:
        if key in present or (key in KNOWN_KEYS and getattr(old_entry, key) == getattr(entry, key)):
            continue   # there, or a known key the file leaves out and the entry still means the same (no citation)
        # insert after the closest preceding key that is present
        idx = order.index(key)
        pos = len(out_blocks)
        for prev in reversed(order[:idx]):
            hits = [i for i, (k, _) in enumerate(out_blocks) if k == prev]
            if hits:
                pos = hits[0] + 1
                break
        block_text = render_key(key, meta[key], sp.eol)
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
