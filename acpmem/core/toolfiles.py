"""The files a conversation's tool calls read or changed, from the calls' arguments. Pure: messages in, paths out.

Read from each host's own shape of a call: OpenAI ``tool_calls`` (pi and DSH give theirs this way too) with JSON
``arguments``, Anthropic and Claude Code ``tool_use`` blocks with ``input``, pi's ``toolCall`` blocks with
``arguments``. A path is the value of a key that names one (``path``, ``file_path``, ``filePath``, ``notebook_path``
…, or a list under ``paths`` / ``files``), or a file a patch adds, updates or deletes (``*** Update File: x``).
Whether the call changed the file is told from the tool's name (write, edit, patch, create …); anything else read it.
"""
from __future__ import annotations

import json
import re

PATH_KEYS = ("path", "file_path", "filePath", "filepath", "file", "filename", "notebook_path", "target_file",
             "source", "destination")
LIST_KEYS = ("paths", "files", "file_paths")
_CHANGES = re.compile(r"write|edit|patch|create|replace|delete|remove|move|rename|insert|append|save", re.I)
_PATCH = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.M)
MAX_PATH_CHARS = 400


def _calls(raw: dict):
    """(tool name, arguments mapping) of every tool call in one raw message record."""
    if not isinstance(raw, dict):
        return
    for call in raw.get("tool_calls") or () if isinstance(raw.get("tool_calls"), list) else ():
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    args = None
            yield str(fn.get("name") or ""), args
    msg = raw.get("message") if isinstance(raw.get("message"), dict) else raw
    content = msg.get("content")
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind in ("tool_use", "server_tool_use"):
                yield str(block.get("name") or ""), block.get("input")
            elif kind == "toolCall":
                yield str(block.get("name") or ""), block.get("arguments")


def _paths_in(args) -> list[str]:
    if not isinstance(args, dict):
        return []
    out: list[str] = []
    for k in PATH_KEYS:
        v = args.get(k)
        if isinstance(v, str):
            out.append(v)
    for k in LIST_KEYS:
        v = args.get(k)
        if isinstance(v, list):
            out += [x for x in v if isinstance(x, str)]
    for v in args.values():
        if isinstance(v, str) and "*** " in v:
            out += _PATCH.findall(v)
    edits = args.get("edits")
    if isinstance(edits, list):   # multi-file edits: [{path, ...}]
        for e in edits:
            if isinstance(e, dict):
                out += [e[k] for k in PATH_KEYS if isinstance(e.get(k), str)]
    return [p.strip() for p in out if p.strip() and len(p) <= MAX_PATH_CHARS and "\n" not in p]


def tool_files(raws) -> list[tuple[str, bool]]:
    """(path as the call gave it, whether the call changed it) for every file named by a tool call in the raw
    message records ``raws``, in order, each path once (a change wins over a read)."""
    seen: dict[str, bool] = {}
    for raw in raws:
        for name, args in _calls(raw):
            changed = bool(_CHANGES.search(name))
            for p in _paths_in(args):
                seen[p] = seen.get(p, False) or changed
    return list(seen.items())


__all__ = ["tool_files"]
