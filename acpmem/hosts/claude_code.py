"""Where a Claude Code tool call sits in the session transcript Claude Code is still writing.

Claude Code names the tool call in every MCP ``tools/call`` it sends (``_meta["claudecode/toolUseId"]``) but writes
the transcript lines of the turn a little later (it buffers them): when the call arrives, the file may not hold the
model's newest lines yet — or not exist at all in ``claude -p``'s first turn. ``wait_for_tool_use`` waits, bounded,
for the line of the assistant message that holds that ``tool_use`` block; its 0-based line number is the commit's
seq (``acpmem.hosts.transcripts``: seq = line for Claude Code), so the fork reads the whole commit turn, the text the
model wrote before the call included.
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

META_TOOL_USE = "claudecode/toolUseId"      # the key Claude Code sets in a tools/call request's _meta
TOOL_USE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}\Z")
WAIT_S = 10.0                               # Claude Code flushed the turn within ~0.1 s in every measured run
POLL_S = 0.05
MAX_SCAN_BYTES = 64 << 20


def tool_use_id(meta: dict | None) -> str | None:
    """The tool call's id from a request's ``_meta``, when Claude Code sent a well-formed one."""
    value = meta.get(META_TOOL_USE) if isinstance(meta, dict) else None
    return value if isinstance(value, str) and TOOL_USE_ID.match(value) else None


def tool_use_line(path: str | Path, ident: str) -> int | None:
    """The 0-based line of ``path`` whose assistant message holds the ``tool_use`` block ``ident``; None while there
    is none (a line not yet ended by a newline does not count: Claude Code may be writing it)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SCAN_BYTES)
    except OSError:
        return None
    needle = ident.encode()
    for n, line in enumerate(data.split(b"\n")[:-1]):   # the last piece has no newline yet
        if needle not in line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        msg = event.get("message") if isinstance(event, dict) else None
        content = msg.get("content") if isinstance(msg, dict) and msg.get("role") == "assistant" else None
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_use"
                                             and b.get("id") == ident for b in content):
            return n
    return None


def wait_for_tool_use(path: str | Path, ident: str, *, timeout: float = WAIT_S,
                      sleep: Callable[[float], None] = time.sleep,
                      clock: Callable[[], float] = time.monotonic) -> int | None:
    """``tool_use_line``, polled until it is there or ``timeout`` seconds have passed (then None)."""
    deadline = clock() + timeout
    while True:
        found = tool_use_line(path, ident)
        if found is not None or clock() >= deadline:
            return found
        sleep(POLL_S)


def compactions(path: str | Path) -> int:
    """How many times Claude Code has compacted the session in ``path``: its ``compact_boundary`` lines. At the
    ``SessionStart`` hook of a compaction the boundary is written and the summary not yet (measured with 2.1.197), so
    this is the number of the block the compaction makes: ``b{n}``, as ``acpmem.hosts.transcripts`` numbers Claude
    Code's summaries (in file order). 0 when the file is missing or unreadable."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SCAN_BYTES)
    except OSError:
        return 0
    n = 0
    for line in data.split(b"\n"):
        if b"compact_boundary" not in line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "system" and event.get("subtype") == "compact_boundary":
            n += 1
    return n


__all__ = ["compactions", "tool_use_id", "tool_use_line", "wait_for_tool_use", "META_TOOL_USE", "WAIT_S"]
