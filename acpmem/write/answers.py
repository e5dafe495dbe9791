"""Reading a fork answer: the tool calls a model made, natively or written as text.

Small local models (Qwen2.5-Coder 0.5B/1.5B on llama.cpp, measured in ``bench/real_model.py``) rarely emit a native
tool call: they write the call as JSON in their text — in Qwen/Hermes ``<tool_call>`` tags, in a fenced code block, or
bare, often a bare ``{"content": …, "title": …}`` — and their arguments miss the schema in small ways (extra keys,
``content`` as a list of lines, the arguments wrapped in an echo of the schema). ``read_answer`` turns all of that into
``ToolCall`` values, and says explicitly when the answer is the documented "nothing to keep"; ``normalize_write_args``
repairs the near misses it can, noting each repair. What cannot be read is left for the caller to report as a failure
with the model's text kept — never taken for "nothing".

JSON is found with the standard decoder (``json.JSONDecoder.raw_decode`` tried at each ``{`` and ``[``), not with
patterns that balance braces by hand.
"""
from __future__ import annotations

import json
import re

from acpmem.core.values import Value
from acpmem.write.llm import ToolCall

WRITE = "memory_write"
NOTHING = "memory_nothing"
NOTHING_REPLIES = ("nothing to keep", "无需记录")   # the documented exact replies (fork_instruction says them)
MAX_SCAN_CHARS = 200_000
_DECODER = json.JSONDecoder(strict=False)   # models put raw newlines inside strings
_ARG_KEYS = ("arguments", "parameters", "args", "input")
_CONTENT_ALIASES = ("body", "text", "memory", "entry", "fact")


class Reading(Value):
    """What an answer says: the calls in it (in order, duplicates removed), the reason when it is an explicit
    "nothing to keep", where the calls came from (``tool_calls``, ``text`` or ``none``) and notes on what was
    repaired or left out."""

    calls: tuple[ToolCall, ...] = ()
    nothing: str | None = None
    source: str = "none"
    notes: tuple[str, ...] = ()

    @property
    def writes(self) -> tuple[ToolCall, ...]:
        return tuple(c for c in self.calls if c.name == WRITE)


def _plain(text: str) -> str:
    """Text lower-cased without markdown emphasis, quotes and closing punctuation (to compare with a reply)."""
    t = re.sub(r"[`*_\"'“”‘’«»「」]", "", text or "").strip().lower()
    return re.sub(r"[\s.!。！]+$", "", re.sub(r"\s+", " ", t))


def is_nothing_reply(text: str | None) -> bool:
    """True when the whole text is the documented reply ("nothing to keep" / "无需记录"), give or take quotes,
    emphasis, case and a full stop."""
    return _plain(text or "") in NOTHING_REPLIES


def _is_nothing_name(name: str) -> bool:
    return name == NOTHING or _plain(name.replace("_", " ")) in NOTHING_REPLIES + ("memory nothing",)


def json_values(text: str) -> list[object]:
    """Every top-level JSON object or array in ``text``, in order: the decoder is tried at each ``{`` and ``[``; a
    value found is skipped over whole (its inner objects are not found again)."""
    out: list[object] = []
    text = text[:MAX_SCAN_CHARS]
    i = 0
    while True:
        m = re.compile(r"[\[{]").search(text, i)
        if m is None:
            return out
        try:
            value, end = _DECODER.raw_decode(text, m.start())
        except (ValueError, RecursionError):
            i = m.start() + 1
            continue
        if isinstance(value, (dict, list)):
            out.append(value)
        i = max(end, m.start() + 1)


def _parse_args(raw: object) -> tuple[dict | None, str | None]:
    if isinstance(raw, dict):
        return raw, None
    if isinstance(raw, str):
        try:
            value = _DECODER.decode(raw) if raw.strip() else {}
        except (ValueError, RecursionError) as exc:
            return None, f"arguments are not valid JSON ({str(exc)[:80]})"
        if isinstance(value, dict):
            return value, None
    return None, f"arguments must be a JSON object, got {type(raw).__name__}"


def _call_of(obj: dict) -> tuple[str, object] | None:
    """(tool name, raw arguments) of one JSON object written as a call, or None when it is not one."""
    fn = obj.get("function")
    if isinstance(fn, dict) and isinstance(fn.get("name"), str):
        return fn["name"], next((fn[k] for k in _ARG_KEYS if k in fn), {})
    for key in ("name", "tool", "tool_name", "function"):
        name = obj.get(key)
        if isinstance(name, str) and name.strip():
            args = next((obj[k] for k in _ARG_KEYS if k in obj), None)
            if args is None:
                if _is_nothing_name(name):
                    return name, {k: v for k, v in obj.items() if k != key}
                if "content" in obj:      # {"name": "memory_write", "content": ...}: the arguments beside the name
                    return name, {k: v for k, v in obj.items() if k != key}
                return None
            return name, args
    if any(k in obj for k in ("content", "title")) or _echo_values(obj):
        return WRITE, obj                  # a bare write: the arguments alone
    return None


def _echo_values(obj: dict) -> dict | None:
    """The values inside an echo of the tool's schema (``{"type": "object", "properties": {"content": "…"}}``), or
    None when ``obj`` is no echo or one that carries no value (only the schema's own types and descriptions)."""
    props = obj.get("properties")
    if not isinstance(props, dict) or "content" not in props:
        return None
    out = {}
    for k, v in props.items():
        if isinstance(v, dict):
            v = next((v[x] for x in ("value", "const", "default", "example") if x in v), None)
        if v is not None:
            out[k] = v
    return out if out.get("content") not in (None, "", []) else None


def _schema_only(args: object) -> bool:
    """True for a JSON schema that holds no value (``{"type": "object", "properties": {"content": {"type":
    "string", "description": …}}}``): a tool's definition, not its arguments."""
    if not isinstance(args, dict) or not isinstance(args.get("properties"), dict):
        return False
    return all(isinstance(v, dict) and "type" in v and not any(x in v for x in ("value", "const", "default",
                                                                                 "example"))
               for v in args["properties"].values())


def _calls_in_text(text: str) -> tuple[list[tuple[str, object]], list[str]]:
    found: list[tuple[str, object]] = []
    notes: list[str] = []
    for value in json_values(text):
        items = value if isinstance(value, list) else [value]
        for obj in items:
            if isinstance(obj, dict):
                call = _call_of(obj)
                if call is not None and _schema_only(call[1]):   # the tool list echoed (Qwen's <tools> block)
                    note = "an echo of the tool definitions in the text was skipped"
                    if note not in notes:
                        notes.append(note)
                    continue
                if call is not None:
                    found.append(call)
    return found, notes


_LABEL = re.compile(r"^\s*(?:[-*+]\s*)?\**\s*(title|content|标题|内容)\s*\**\s*[:：]\s*\**\s*(.*?)\s*$", re.I)


def labelled_write(text: str) -> dict | None:
    """A write spelled as labelled lines (``- title: …`` / ``**Content:** …``, the lines after a content label
    belonging to it), as small models write it when they do not write JSON; None without a content label."""
    title, content, into = None, [], None
    for line in text.splitlines():
        m = _LABEL.match(line)
        if m:
            label = m.group(1).lower()
            if label in ("title", "标题"):
                if content:         # a second entry begins: read the first only (one labelled write per answer)
                    break
                title, into = m.group(2).strip("*` \"'“”") or None, None
            else:
                into = content
                if m.group(2).strip():
                    content.append(m.group(2).strip())
        elif into is not None and line.strip():
            content.append(line.strip())
        elif into is not None and content:
            into = None
    if not content:
        return None
    out = {"content": "\n".join(content)}
    if title:
        out["title"] = title
    return out


def read_answer(tool_calls: tuple[ToolCall, ...] | list[ToolCall], text: str | None) -> Reading:
    """What one answer says (``Reading``). Native tool calls are taken as they are; when there is no
    ``memory_write`` or ``memory_nothing`` among them, the text is read too: the exact "nothing to keep" reply, or
    calls written as JSON (``<tool_call>`` tags, fenced blocks, bare objects or lists of them)."""
    calls = list(tool_calls)
    nothing = None
    source = "tool_calls" if calls else "none"
    notes: list[str] = []
    if not any(c.name in (WRITE, NOTHING) or _is_nothing_name(c.name) for c in calls) and text and text.strip():
        if is_nothing_reply(text):
            return Reading((), "the answer was the documented reply: nothing to keep", "text",
                           tuple(notes))
        written, more = _calls_in_text(text)
        notes += more
        if not written:
            labelled = labelled_write(text)
            if labelled is not None:
                written = [(WRITE, labelled)]
                notes.append("memory_write read from 'title:' / 'content:' lines in the text")
        for i, (name, raw) in enumerate(written):
            args, err = _parse_args(raw)
            calls.append(ToolCall(f"text_{i + 1}", name, args, raw if isinstance(raw, str) else
                                  json.dumps(raw, ensure_ascii=False), err))
        if written:
            source = "text" if source == "none" else "tool_calls+text"
    kept: list[ToolCall] = []
    seen: set[str] = set()
    for c in calls:
        if _is_nothing_name(c.name):
            reason = (c.arguments or {}).get("reason") if isinstance(c.arguments, dict) else None
            nothing = str(reason).strip()[:300] if isinstance(reason, str) and reason.strip() else "no reason given"
            continue
        key = c.name + "\0" + (json.dumps(c.arguments, sort_keys=True, ensure_ascii=False) if c.arguments is not None
                               else c.raw_arguments)
        if key in seen:
            notes.append(f"a repeated {c.name} call was read once")
            continue
        seen.add(key)
        kept.append(c)
    if nothing is not None and any(c.name == WRITE for c in kept):
        notes.append("memory_nothing was called beside memory_write: the writes count")
        nothing = None
    return Reading(tuple(kept), nothing, source, tuple(notes))


def read_json_answer(text: str | None) -> Reading:
    """What an answer under ``[extraction] answer = "json"`` says: the first JSON object with an ``entries`` list in
    ``text`` (``acpmem.write.prompts.answer_schema``), each item one ``memory_write`` call (its ``fact`` the content,
    as a bullet; an item with ``content`` instead, from an endpoint that does not hold the answer to the schema,
    taken as it is);
    an empty list is "nothing to keep". No such object: a reading with no calls, which the caller reports as an
    unusable answer with the text kept."""
    for value in json_values(text or ""):
        if not isinstance(value, dict) or not isinstance(value.get("entries"), list):
            continue
        calls = []
        for i, item in enumerate(value["entries"]):
            raw = json.dumps(item, ensure_ascii=False)
            fact = item.get("fact") if isinstance(item, dict) else None
            if isinstance(fact, str) and "content" not in item:   # the schema's item: its fact is the content
                fact = fact.strip()
                item = {**{k: v for k, v in item.items() if k != "fact"},
                        "content": fact if fact.startswith(("- ", "* ")) else f"- {fact}"}
            if isinstance(item, dict):
                calls.append(ToolCall(f"json_{i + 1}", WRITE, item, raw))
            else:
                calls.append(ToolCall(f"json_{i + 1}", WRITE, None, raw, "an item of entries is not an object"))
        if not calls:
            return Reading((), "the answer's entries list was empty", "json")
        kept = tuple(dict((c.raw_arguments, c) for c in calls).values())   # an item repeated word for word: once
        notes = ("a repeated entries item was read once",) if len(kept) < len(calls) else ()
        return Reading(kept, None, "json", notes)
    return Reading((), None, "none")


def _text(x: object) -> str | None:
    """A scalar as text, or None (a bool, a container, an integer too long for ``str``)."""
    if isinstance(x, bool) or not isinstance(x, (str, int, float)):
        return None
    try:
        return str(x).strip() or None
    except ValueError:
        return None


def _lines(value: list) -> str:
    items = [t for t in map(_text, value) if t]
    return "\n".join(x if re.match(r"^(?:[-*+]|\d+[.)])\s", x) else f"- {x}" for x in items)


def normalize_write_args(args: dict, allowed: tuple[str, ...]) -> tuple[dict, list[str]]:
    """``memory_write`` arguments with the near misses of small models repaired, and a note for each repair: the
    schema-echo wrapping unwrapped, ``content`` given as a list of lines joined (each a bullet), a content under
    another name (``body``, ``text``…) taken, supersedes ids cleaned (``#k3f9q2``, a comma list), and unknown keys
    dropped. What is still wrong after this is for the strict parser to reject."""
    notes: list[str] = []
    inner = _echo_values(args) if "properties" in args else None
    if inner is not None:
        args = inner
        notes.append("memory_write arguments were wrapped in an echo of the tool schema: unwrapped")
    elif isinstance(args.get("arguments"), dict) and "content" not in args:
        args = args["arguments"]
        notes.append("memory_write arguments were nested under 'arguments': unwrapped")
    args = dict(args)
    if "content" not in args:
        alias = next((k for k in _CONTENT_ALIASES if isinstance(args.get(k), (str, list)) and args[k]), None)
        if alias:
            args["content"] = args.pop(alias)
            notes.append(f"memory_write content was sent as '{alias}': taken as content")
    if isinstance(args.get("content"), list):
        args["content"] = _lines(args["content"])
        notes.append("memory_write content was a list of lines: joined")
    if isinstance(args.get("title"), list):
        args["title"] = " ".join(t for t in map(_text, args["title"]) if t)
    sup = args.get("supersedes")
    if isinstance(sup, str):
        sup = [s for s in re.split(r"[,\s]+", sup) if s]
    if isinstance(sup, list):
        args["supersedes"] = [t.lstrip("#") for t in map(_text, sup) if t and t.lstrip("#")]
    elif sup is None and "supersedes" in args:
        args["supersedes"] = []
    extra = sorted(k for k in args if k not in allowed)
    if extra:
        for k in extra:
            del args[k]
        notes.append(f"memory_write: unknown argument(s) dropped: {', '.join(extra)}")
    return args, notes


def excerpt(text: str | None, limit: int = 160) -> str:
    """The answer's text on one line, clipped, for an error message (the whole text is kept beside it)."""
    t = " ".join((text or "").split())
    return t if len(t) <= limit else t[:limit - 1] + "…"
