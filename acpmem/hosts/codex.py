"""Reading Codex's rollouts (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl``), and finding the
rollout and the place of a tool call from what Codex tells an MCP server.

**A rollout** (Codex 0.171): one JSON object per line, ``{timestamp, type, payload}``. ``session_meta`` (line 0: the
thread ``id``, ``cwd``, the base instructions), ``turn_context`` (a turn's settings), ``event_msg`` (what the UI
showed: task_started, item_completed, token_count … — copies of what the model saw, never sent to it) and
``response_item``: the items of the model's context, in the order it saw them — ``message`` (``developer``,
``user``, ``assistant``; content ``input_text``/``output_text``/``input_image`` parts), ``function_call``
(``name``, ``namespace`` for an MCP tool — ``mcp__<server>`` —, ``arguments`` as JSON text, ``call_id``),
``function_call_output`` (``output``: text or ``input_text`` parts), ``custom_tool_call``/``custom_tool_call_output``
(freeform tools such as ``apply_patch``), ``local_shell_call``, ``reasoning`` (encrypted: not sent back),
``web_search_call``; and lines of other types (``world_state``, ``token_usage_record`` …: Codex adds kinds; they are
skipped like ``event_msg``). ``seq`` = the line (0-based): every line is an event, so seqs stay stable while Codex
appends.

Read as OpenAI chat messages: ``user`` and ``assistant`` messages, each call an assistant message with one
``tool_calls`` entry (named ``<namespace>__<name>`` for a namespaced tool, as the model knows it), each output a
``tool`` message. ``developer`` messages are left out: they are Codex's instructions (the permissions, the skills,
AGENTS.md, a hook's context — acpmem's own index among them), not the conversation. ``join`` merges an assistant's
text and the calls that follow it back into the one message the provider returned.

**What Codex tells an MCP server** on every ``tools/call`` (the request's ``_meta``): ``threadId`` / ``sessionId``
(the thread id, the last part of the rollout's file name), ``callId`` (the ``call_id`` of the function call that
made this tool call) and ``x-codex-turn-metadata`` (``session_id``, ``turn_id`` …). ``meta_values`` reads them;
``find_rollout`` finds the thread's file under ``$CODEX_HOME/sessions`` (``~/.codex`` by default); ``call_seq``
finds the line of the call, waiting a while in case Codex has not written it yet when the request arrives, so a
commit cites the turn that made it (in the runs measured, the line was always there already).
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from acpmem.core.errors import TranscriptError
from acpmem.core.limits import clip
from acpmem.core.values import Value

THREAD_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{7,63}\Z")   # Codex's ids are UUIDs (v7)
META_TURN = "x-codex-turn-metadata"
CALL_WAIT_S = 5.0
_CALL_POLL_S = 0.05


class CodexItem(Value):
    """One model-context item of a rollout, as an OpenAI chat message: its line (seq), role and the message."""

    seq: int
    role: str
    message: dict


class CodexLog(Value):
    events: tuple[CodexItem, ...]
    session_id: str | None = None
    warnings: tuple[str, ...] = ()


def looks_like_codex(rows: list[dict]) -> bool:
    """True when these first lines are a Codex rollout: every one ``{timestamp, type, payload}`` with no ``role``,
    and ``session_meta`` or ``response_item`` among them."""
    if not rows:
        return False
    return (all(isinstance(o.get("type"), str) and isinstance(o.get("payload"), dict) and "timestamp" in o
                and "role" not in o for o in rows)
            and any(o["type"] in ("session_meta", "response_item") for o in rows))


def read_codex(rows: list[tuple[int, dict]], source: str) -> CodexLog:
    """The model-context items of a rollout (``rows``: line number, parsed object). ``TranscriptError`` naming the
    line for a line that is not a rollout line."""
    events: list[CodexItem] = []
    session = None
    skipped: dict[str, int] = {}
    for n, o in rows:
        kind, payload = o.get("type"), o.get("payload")
        if not isinstance(kind, str) or not isinstance(payload, dict):
            raise TranscriptError(f"{source}:{n + 1}: not a Codex rollout line (type {clip(kind)})",
                                  "pass the rollout-*.jsonl file Codex wrote, unmodified")
        if kind == "session_meta" and session is None and isinstance(payload.get("id"), str):
            session = payload["id"]
        if kind != "response_item":
            continue
        item = _item(n, payload, source)
        if item is None:
            t = payload.get("type")
            skipped[t if isinstance(t, str) else "?"] = skipped.get(t if isinstance(t, str) else "?", 0) + 1
            continue
        events.append(item)
    warnings = tuple(f"{source}: left out {k} item{'s' if c > 1 else ''} ({c})" for k, c in sorted(skipped.items())
                     if k not in ("reasoning", "message"))
    return CodexLog(tuple(events), session, warnings)


def _item(n: int, p: dict, source: str) -> CodexItem | None:
    t = p.get("type")
    if t == "message":
        role = p.get("role")
        if role not in ("user", "assistant", "developer", "system"):
            raise TranscriptError(f"{source}:{n + 1}: message with unknown role {clip(role)}",
                                  "pass the rollout-*.jsonl file Codex wrote, unmodified")
        if role in ("developer", "system"):
            return None     # Codex's instructions, not the conversation
        content = _content(p.get("content"), role, f"{source}:{n + 1}")
        return CodexItem(n, role, {"role": role, "content": content})
    if t in ("function_call", "custom_tool_call", "local_shell_call"):
        call_id = p.get("call_id") if isinstance(p.get("call_id"), str) else p.get("id")
        if t == "function_call":
            name, args = p.get("name"), p.get("arguments")
            if isinstance(p.get("namespace"), str) and p["namespace"]:
                name = f"{p['namespace']}__{name}"
        elif t == "custom_tool_call":
            name, args = p.get("name"), p.get("input")
        else:
            name, args = "local_shell", json.dumps(p.get("action"), ensure_ascii=False)
        if not isinstance(name, str) or not name or not isinstance(call_id, str):
            raise TranscriptError(f"{source}:{n + 1}: a {t} with no name or call_id",
                                  "pass the rollout-*.jsonl file Codex wrote, unmodified")
        call = {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
        return CodexItem(n, "assistant", {"role": "assistant", "content": None, "tool_calls": [call]})
    if t in ("function_call_output", "custom_tool_call_output"):
        call_id = p.get("call_id")
        if not isinstance(call_id, str):
            raise TranscriptError(f"{source}:{n + 1}: a {t} with no call_id",
                                  "pass the rollout-*.jsonl file Codex wrote, unmodified")
        return CodexItem(n, "tool", {"role": "tool", "tool_call_id": call_id, "content": _output(p.get("output"))})
    return None     # reasoning (encrypted), web_search_call, tool_search_call …: nothing to send back


def _content(content: object, role: str, where: str) -> str | list:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise TranscriptError(f"{where}: message content must be text or a list of parts",
                              "pass the rollout-*.jsonl file Codex wrote, unmodified")
    parts: list[dict] = []
    for c in content:
        if not isinstance(c, dict):
            continue
        if c.get("type") in ("input_text", "output_text", "text") and isinstance(c.get("text"), str):
            parts.append({"type": "text", "text": c["text"]})
        elif c.get("type") == "input_image" and isinstance(c.get("image_url"), str) and role == "user":
            parts.append({"type": "image_url", "image_url": {"url": c["image_url"]}})
        elif c.get("type") == "refusal" and isinstance(c.get("refusal"), str):
            parts.append({"type": "text", "text": c["refusal"]})
    if all(p["type"] == "text" for p in parts):
        return "\n\n".join(p["text"] for p in parts)
    return parts


def _output(output: object) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict):   # older rollouts: {content, success}
        output = output.get("content")
        if isinstance(output, str):
            return output
    if isinstance(output, list):
        return "\n".join(c["text"] for c in output if isinstance(c, dict) and isinstance(c.get("text"), str))
    return ""


def join(messages: list[dict]) -> list[dict]:
    """An assistant's text and the tool calls right after it as one message, as the provider returned them."""
    out: list[dict] = []
    for m in messages:
        prev = out[-1] if out else None
        if (prev is not None and prev.get("role") == "assistant" and m.get("role") == "assistant"
                and m.get("tool_calls") and m.get("content") is None):
            out[-1] = {**prev, "tool_calls": [*(prev.get("tool_calls") or ()), *m["tool_calls"]]}
            continue
        out.append(m)
    return out


# ------------------------------------------------------------------------------------------ what the MCP server gets

def meta_values(meta: object) -> dict:
    """From a ``tools/call`` request's ``_meta``: ``session`` (the Codex thread id) and ``call_id``, where Codex sent
    them (valid ids only); empty for any other client."""
    if not isinstance(meta, dict):
        return {}
    turn = meta.get(META_TURN)
    if isinstance(turn, str):
        try:
            turn = json.loads(turn)
        except ValueError:
            turn = None
    out: dict = {}
    for value in (meta.get("threadId"), meta.get("sessionId"), (turn or {}).get("session_id")
                  if isinstance(turn, dict) else None):
        if isinstance(value, str) and THREAD_ID.match(value):
            out["session"] = value
            break
    call = meta.get("callId")
    if "session" in out and isinstance(call, str) and 0 < len(call) <= 256 and "\n" not in call:
        out["call_id"] = call
    return out


def codex_home(env: dict | None = None) -> Path:
    env = os.environ if env is None else env
    home = env.get("CODEX_HOME")
    return Path(home) if home else Path(env.get("HOME") or Path.home()) / ".codex"


def find_rollout(session: str, env: dict | None = None) -> Path | None:
    """The rollout of Codex thread ``session`` under ``$CODEX_HOME/sessions`` (newest day first), or None."""
    if not THREAD_ID.match(session):
        return None
    root = codex_home(env) / "sessions"
    try:
        found = sorted(root.glob(f"*/*/*/rollout-*-{session}.jsonl"), reverse=True)
    except OSError:
        return None
    return found[0] if found else None


def call_seq(path: str | Path, call_id: str, wait_s: float = CALL_WAIT_S) -> int | None:
    """The line (seq) of the function call ``call_id`` in the rollout at ``path``, waiting up to ``wait_s`` seconds
    for Codex to write it; None when it never appears."""
    deadline = time.monotonic() + wait_s
    needle = json.dumps(call_id)
    while True:
        try:
            with open(path, "rb") as fh:
                for n, line in enumerate(fh):
                    if needle.encode() not in line:
                        continue
                    try:
                        o = json.loads(line)
                    except ValueError:
                        continue
                    p = o.get("payload") if isinstance(o, dict) else None
                    if (o.get("type") == "response_item" and isinstance(p, dict) and p.get("call_id") == call_id
                            and p.get("type") in ("function_call", "custom_tool_call", "local_shell_call")):
                        return n
        except OSError:
            return None
        if time.monotonic() >= deadline:
            return None
        time.sleep(_CALL_POLL_S)


__all__ = ["read_codex", "looks_like_codex", "join", "meta_values", "find_rollout", "call_seq", "codex_home",
           "CodexLog", "CodexItem"]
