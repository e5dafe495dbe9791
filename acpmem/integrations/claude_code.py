"""Claude Code hooks: ``acp memory hook claude-code`` answers one Claude Code hook event.

Claude Code runs the command with the event as JSON on stdin (``session_id``, ``transcript_path``, ``cwd``,
``hook_event_name``, …) and reads the answer from stdout and the exit code:

* ``SessionStart`` (startup, resume, clear, compact) → the resident index of that ``session_id`` (frozen: the same
  bytes every time, so a ``compact`` re-injects exactly what the session started with; after a compaction followed
  by acpmem's guidance and ``Newest compression block: bN.``, the block Claude Code's summary becomes) as
  ``{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": …}}``;
* ``UserPromptSubmit`` → the entries the user's prompt is about (``acpmem.read.prompted.surface_prompt``: recall on
  the prompt's words, each entry once per session, within the byte budgets) as additional context — on by default,
  ``[surface] prompt = false`` turns it off; then ``[surface] enabled = true`` surfaces the best-scored entries
  whatever the prompt (``acpmem.read.retrieval.surface``); nothing new → nothing;
* ``BeforeAgent`` (Gemini CLI's name for the user's prompt: same fields, same answer) → as ``UserPromptSubmit``;
* any other event → nothing, exit 0.

Codex speaks this protocol as it is (``SessionStart``, ``UserPromptSubmit``); Gemini CLI names the prompt's event
``BeforeAgent``.

SessionStart also records the session's ``transcript_path`` in the vault's local state: the MCP server started by
the same Claude Code session (it receives the id as ``CLAUDE_CODE_SESSION_ID``) hands that transcript to the fork,
so a ``memory_commit`` made through MCP is distilled from the real conversation.

Memory is optional: when no vault is found from the event's ``cwd`` (and none is named by ``--vault`` or
``ACPMEM_VAULT``), the hook answers nothing with exit 0. Anything wrong — input that is not a hook event, a vault
named explicitly that does not exist, a broken vault — is exit 1 with one line on stderr: Claude Code shows it and
carries on. Never exit 2: for ``UserPromptSubmit`` that would block the user's prompt.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from acpmem.core.errors import AcpmemError, VaultNotFound, error_line
from acpmem.core.limits import is_utf8
from acpmem.core.values import Value

EXIT_OK = 0
EXIT_SHOWN = 1          # Claude Code: a non-blocking error, stderr shown to the user; the session goes on
MAX_EVENT_BYTES = 1 << 20
MAX_CONTEXT_CHARS = 9500   # Claude Code shows about 10,000 characters of a hook's context inline; the rest is cut
PROMPT_EVENTS = ("UserPromptSubmit", "BeforeAgent")   # Claude Code and Codex; Gemini CLI
CLAUDE_CODE_RECORD = "claude-code.json"


class HookAnswer(Value):
    stdout: str
    stderr: str
    exit_code: int


def _error(message: str, hint: str | None) -> HookAnswer:
    return HookAnswer("", error_line(message, hint) + "\n", EXIT_SHOWN)


def _context(event_name: str, text: str) -> HookAnswer:
    out = {"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": text}}
    return HookAnswer(json.dumps(out, ensure_ascii=False) + "\n", "", EXIT_OK)


def parse_event(raw: str | bytes) -> dict:
    """The hook event as a dict; ``ValueError`` with a one-line reason when it is not one."""
    if isinstance(raw, bytes):
        if len(raw) > MAX_EVENT_BYTES:
            raise ValueError(f"the hook event on stdin is over {MAX_EVENT_BYTES} bytes")
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("the hook event on stdin is not UTF-8") from None
    if not raw.strip():
        raise ValueError("no hook event on stdin (expected Claude Code's JSON event)")
    try:
        event = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the hook event on stdin is not JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError):   # a number of more than 4,300 digits; nesting deeper than the stack
        raise ValueError("the hook event on stdin holds a number too long or nesting too deep to read") from None
    if not isinstance(event, dict):
        raise ValueError(f"the hook event must be a JSON object, got {type(event).__name__}")
    name = event.get("hook_event_name")
    if not isinstance(name, str) or not name:
        raise ValueError("the hook event has no hook_event_name")
    for key in ("session_id", "cwd", "transcript_path", "prompt", "source"):   # (source: SessionStart's, kept)
        if key in event and event[key] is not None and not isinstance(event[key], str):
            raise ValueError(f"the hook event's {key} must be a string")
        if isinstance(event.get(key), str) and ("\x00" in event[key] or not is_utf8(event[key])):
            raise ValueError(f"the hook event's {key} holds a NUL or text that is not valid Unicode")
    return event


def _open_vault(event: dict, explicit: str | os.PathLike | None, env: dict):
    """The vault for this event, or None when none is configured (memory is optional)."""
    # lazy: the Stop hook does not need them (measured +17 ms to its start-up)
    from acpmem.core.layout import ENV_VAULT
    from acpmem.vault.discovery import discover
    from acpmem.vault.reader import VaultReader   # both events only read (and keep session ledgers)

    cwd = Path(event.get("cwd") or os.getcwd())
    try:
        return VaultReader(discover(explicit, cwd=cwd, env=env))
    except VaultNotFound:
        if explicit or env.get(ENV_VAULT):
            raise
        return None


def record_session(vault, session: str, event: dict) -> None:
    """Remember where a Claude Code session's transcript is (``claude-code.json`` in the session's folder), so the
    MCP server of that session — which gets the id as ``CLAUDE_CODE_SESSION_ID`` — can hand it to the fork."""
    transcript = event.get("transcript_path")
    if not transcript:
        return
    # lazy: the Stop hook does not need them (measured +1.7 ms to its start-up)
    from acpmem.infra.files import atomic_write
    from acpmem.read.sessions import folder as session_folder

    path = session_folder(vault, session) / CLAUDE_CODE_RECORD
    data = {"session_id": session, "transcript_path": transcript, "cwd": event.get("cwd"),
            "source": event.get("source")}
    text = json.dumps(data, ensure_ascii=False, sort_keys=True)
    try:
        if path.read_text("utf-8") == text:
            return
    except OSError:
        pass
    atomic_write(path, text)


def recorded_transcript(vault, session: str) -> str | None:
    """The transcript path the SessionStart hook recorded for ``session``, if any."""
    try:
        value = json.loads((vault.session_dir(session) / CLAUDE_CODE_RECORD).read_text("utf-8")).get(
            "transcript_path")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


def compaction_note(vault, transcript: str) -> str:
    """After a compaction: acpmem's guidance and the id of the block the compaction made (``Newest compression block:
    bN.``), so the model can commit the summary with ``block``; empty when the transcript shows no compaction."""
    # lazy: the SessionStart hook does not need them (measured +6.4 ms to its start-up)
    from acpmem.core.tools import nudge_text
    from acpmem.hosts.claude_code import compactions

    n = compactions(transcript)
    if not n:
        return ""
    return f"\n\n{nudge_text(vault.settings.language)}\nNewest compression block: b{n}."


def claude_code(raw: str | bytes, *, vault: str | os.PathLike | None = None, env: dict | None = None) -> HookAnswer:
    """Answer one Claude Code hook event. Never raises: every failure is an answer with exit 1 and a message."""
    env = os.environ if env is None else env
    try:
        event = parse_event(raw)
    except ValueError as exc:
        return _error(str(exc), "the hook reads Claude Code's hook event, a JSON object, on stdin")
    name = event["hook_event_name"]
    if name != "SessionStart" and name not in PROMPT_EVENTS:
        return HookAnswer("", "", EXIT_OK)
    session = event.get("session_id")
    if not session:
        return _error(f"the {name} event has no session_id", "run it as a Claude Code hook, which sends one")
    try:
        v = _open_vault(event, vault, env)
        if v is None:
            return HookAnswer("", "", EXIT_OK)
        with v:
            if name == "SessionStart":
                # lazy: the prompt hook does not need it (measured +0.7 ms to its start-up)
                from acpmem.read.resident import resident_index

                record_session(v, session, event)
                text = resident_index(v, session=session)
                if event.get("source") == "compact" and event.get("transcript_path"):
                    text += compaction_note(v, event["transcript_path"])
                return _context(name, text)
            cfg = v.settings.surface
            # lazy: the SessionStart hook does not need it (measured +30 ms to its start-up)
            from acpmem.read.retrieval import surface, surface_text

            if cfg.prompt and event.get("prompt"):
                # lazy: the SessionStart hook does not need it (measured +34 ms to its start-up)
                from acpmem.read.prompted import surface_prompt

                result = surface_prompt(v, session, event["prompt"], max_chars=MAX_CONTEXT_CHARS)
            elif cfg.enabled:
                result = surface(v, session, max_chars=MAX_CONTEXT_CHARS)
            else:
                return HookAnswer("", "", EXIT_OK)
            if not result.entries:  # nothing new, or the session's budget is spent: add nothing to the prompt
                return HookAnswer("", "", EXIT_OK)
            return _context(name, surface_text(v, result))
    except AcpmemError as exc:
        return _error(exc.message, exc.hint)
    except Exception as exc:  # a bug must not take the agent's session down with it
        if env.get("ACPMEM_DEBUG"):
            raise
        return _error(f"internal error: {type(exc).__name__}: {exc}",
                      "please report it; set ACPMEM_DEBUG=1 to see the traceback")


__all__ = ["claude_code", "parse_event", "HookAnswer", "record_session", "recorded_transcript", "MAX_EVENT_BYTES"]
