"""The MCP server (``acp memory serve``): the main conversation's memory tools over stdio.

Exposes exactly ``memory_commit`` and ``memory_recall`` — with the names, descriptions and schemas of
``acpmem.core.tools.tool_definitions(for_="main", format="mcp")`` in the vault's language — the resident index as the
resource ``memory://index``, and an entry's cited turns as the resource template ``memory://entry/{id}/source`` (what
``acp memory show ID --source`` prints). Never ``memory_write``: only the fork writes. Built on the ``mcp``
package's low-level ``Server`` so the tool schemas and descriptions are sent exactly as acpmem defines them; ``mcp``
is imported only when the server starts.

Session and seq of a ``memory_commit`` (the citation of what it produces):

* a client that knows them (a harness, not the model) passes them in the request's ``_meta``: ``acpmem/session``,
  ``acpmem/seq`` and ``acpmem/transcript``. The tool's arguments are only what its schema advertises (type, note,
  importance: anything else is refused, as ``additionalProperties: false`` says), so the model never invents them;
* otherwise the server's own session: ``--session``, else ``ACPMEM_SESSION``, else ``CLAUDE_CODE_SESSION_ID`` (Claude
  Code sets it for the MCP servers it starts), else an id generated per server process
  (``mcp-YYYYMMDDTHHMMSS-xxxxxx``);
* the transcript for the fork: the call's ``acpmem/transcript``, else ``--transcript``, else the one the Claude Code
  SessionStart hook recorded for the session (``claude_code.record_session``), else none (the fork then has only the note);
* seq: the last message's seq of the transcript when there is one, else a counter of this server's commits (1, 2, …).

Both layers are read: the project vault the server was started on and the user vault beside it
(``acpmem.read.layers``); the index names each part's layer, every recalled entry its own.

The transcript a commit names is recorded for its session (``acpmem.read.sources.record_transcript``), as is the
server's own ``--transcript`` when it starts, so ``show --source`` finds the turns later.

With the embedding channel on, a ``memory_recall`` result's ``_meta`` carries ``acpmem/vectors`` (model, present,
missing, used) and, when the query fell back to lexical search, ``acpmem/warning`` (also written to the server's
stderr); the model's text then ends with one line saying so (``MemoryService.answer``). With the rerank stage on,
``acpmem/rerank`` (model, candidates, used, and ``skipped`` or its ``warning``, written to stderr too); a failed
rerank changes nothing the model needs to know (recall's own order stands), so its text is unchanged.

The same session freezes the ``memory://index`` text (``acpmem.read.resident``) and is passed to recall. Every call
opens the vault afresh (cheap), so edits, syncs and settings changes made while the server runs are seen.
"""
from __future__ import annotations

import os
import random
import re
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from acpmem.core.clock import now_utc
from acpmem.core.errors import AcpmemError, error_line

INDEX_URI = "memory://index"
SOURCE_TEMPLATE = "memory://entry/{id}/source"
_SOURCE_URI = re.compile(r"memory://entry/([A-Za-z0-9][A-Za-z0-9_-]{0,63})/source\Z")
META_PREFIX = "acpmem/"            # the host's own values ride in a request's _meta: acpmem/session, /seq, /transcript
HOST_ARGS = ("session", "seq", "transcript")
RESOURCE_NOT_FOUND = -32002       # the MCP error code for an unknown resource
PARSE_ERROR = -32700              # JSON-RPC: the line is not JSON
INVALID_REQUEST = -32600          # JSON-RPC: JSON, but not one message (a batch, no method, an id that is an object)
ENV_SESSION = "ACPMEM_SESSION"
ENV_CLAUDE_SESSION = "CLAUDE_CODE_SESSION_ID"   # set by Claude Code in the stdio MCP servers it starts


def new_session_id(clock: Callable[[], datetime], rng: random.Random) -> str:
    return f"mcp-{clock().strftime('%Y%m%dT%H%M%S')}-{rng.getrandbits(24):06x}"


class MemoryService:
    """What the MCP handlers call: plain, synchronous, testable without MCP. One per server process."""

    def __init__(self, vault_path: Path, session: str, transcript: str | None = None,
                 clock: Callable[[], datetime] = now_utc) -> None:
        self.vault_path = Path(vault_path)
        self.session = session
        self.transcript = transcript
        self.clock = clock
        self._seq = 0

    def open(self):
        from acpmem.vault.writer import Vault

        return Vault(self.vault_path, clock=self.clock)

    def tools(self) -> list[dict]:
        from acpmem.core.tools import tool_definitions

        v = self.open()
        try:
            s = v.settings
            return tool_definitions(for_="main", format="mcp", lang=s.language, types=s.types)
        finally:
            v.close()

    def index(self) -> str:
        from acpmem.read.resident import resident_index

        v = self.open()
        try:
            return resident_index(v, session=self.session)
        finally:
            v.close()

    def call(self, name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None) -> str:
        """Run one tool call; returns the text for the model. ``AcpmemError`` for anything the caller got wrong.
        ``meta``: the request's ``_meta`` (the host's session, seq and transcript, under ``acpmem/``)."""
        return self.answer(name, arguments, meta)[0]

    def answer(self, name: str, arguments: dict[str, Any] | None,
               meta: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """``call``, with the result's ``_meta`` for the client: for ``memory_recall`` with the embedding channel
        on, ``acpmem/vectors`` (model, present, missing, used) and, when the query fell back to lexical search,
        ``acpmem/warning``; with the rerank stage on, ``acpmem/rerank``. Empty otherwise."""
        args = dict(arguments or {})
        if name == "memory_commit":
            return self.commit(args, host_values(meta)), {}
        if name == "memory_recall":
            return self.recall_answer(args)
        raise AcpmemError(f"unknown tool '{name}'", "this server offers memory_commit and memory_recall")

    def commit(self, args: dict[str, Any], host: dict[str, Any] | None = None) -> str:
        from acpmem.core.tools import parse_commit_args
        from acpmem.write.requests import check_host_args
        from acpmem.write.submit import submit

        host = check_host_args(host or {})
        v = self.open()
        try:
            parsed = parse_commit_args(args, v.settings.types)
            session = host.get("session") or self.session
            transcript = host.get("transcript") or (self.transcript if session == self.session else None)
            if not transcript:
                from acpmem.integrations.claude_code import recorded_transcript

                transcript = recorded_transcript(v, str(session))
            seq = host.get("seq")
            if seq is None:
                seq = self._next_seq(transcript)
            ack = submit(v, type=parsed.type, note=parsed.note, importance=parsed.importance, session=str(session),
                         seq=seq, transcript=transcript, block=parsed.block)
            return ack.text
        finally:
            v.close()

    def record(self) -> None:
        """Record the server's own transcript for its session (when it starts)."""
        if not self.transcript:
            return
        from acpmem.read.sources import record_transcript

        v = self.open()
        try:
            v.ensure_state()
            record_transcript(v, self.session, self.transcript, "serve")
        except (AcpmemError, OSError):
            pass   # a convenience for show --source; the server works without it
        finally:
            v.close()

    def source(self, uri: str) -> str | None:
        """The text of ``memory://entry/{id}/source``, or None when ``uri`` is not one."""
        m = _SOURCE_URI.match(uri)
        if m is None:
            return None
        from acpmem.read.sources import entry_source, source_text

        v = self.open()
        try:
            return source_text(entry_source(v, m[1]))
        finally:
            v.close()

    def _next_seq(self, transcript: str | None) -> int:
        if transcript:
            from acpmem.hosts.transcripts import last_seq

            last = last_seq(Path(transcript))   # a DSH log is scanned, not read whole
            if last is not None:
                return last
        self._seq += 1
        return self._seq

    def recall(self, args: dict[str, Any]) -> str:
        return self.recall_answer(args)[0]

    def recall_answer(self, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The recall text for the model, and what the embedding channel said for the client (``answer``). When
        the query fell back to lexical search, the text ends with one line saying so (``lexical_fallback_note``);
        the details (the endpoint's error) go only to the client, never to the model."""
        from acpmem.core.tools import parse_recall_args
        from acpmem.read.layers import recall_layered
        from acpmem.read.retrieval import lexical_fallback_note, recall_text

        parsed = parse_recall_args(args)
        v = self.open()
        try:
            report: dict[str, Any] = {}
            hits = recall_layered(v, parsed.query, limit=parsed.limit, session=self.session, report=report)
            from acpmem.read.citecheck import served

            checks = served(v, [(h.entry, h.layer) for h in hits])
            text = recall_text(v, hits, {i: c.attrs() for i, c in checks.items()})
            if report.get("warning"):
                text += "\n\n" + lexical_fallback_note(v)
            return text, {META_PREFIX + k: report[k] for k in ("vectors", "warning", "rerank") if k in report}
        finally:
            v.close()


def host_values(meta: dict[str, Any] | None) -> dict[str, Any]:
    """The host's session, seq and transcript from a request's ``_meta`` (``acpmem/session`` …)."""
    return {k: meta[META_PREFIX + k] for k in HOST_ARGS if isinstance(meta, dict) and META_PREFIX + k in meta}


def rpc_error(line: str, validate: Callable[[object], object]) -> dict | None:
    """The JSON-RPC error answer a line from the client gets instead of being handed to the session, or None when
    it is one message ``validate`` accepts (the ``mcp`` package's message adapter). A line that is no JSON gets
    ``PARSE_ERROR``, any other message that is not valid (``{}``, ``[]``, a batch, no ``method``, a ``method``
    that is not text, an ``id`` that is an object) ``INVALID_REQUEST`` — with the line's ``id`` when it is one a
    reply may carry, else null. The ``mcp`` package itself drops such lines without a word: the client waited
    forever."""
    import json

    if not line.strip():
        return None   # a blank line between messages: nothing was asked
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return {"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": "Parse error: not JSON"}}
    ident = doc.get("id") if isinstance(doc, dict) else None
    bad_id = isinstance(doc, dict) and "id" in doc and (isinstance(ident, bool) or not isinstance(ident, (str, int)))
    if not bad_id:   # an object id passes the package's check as a notification, and is never answered
        try:
            validate(doc)
            return None
        except Exception:  # noqa: BLE001 - pydantic's ValidationError and whatever a hostile line makes it raise
            pass
    if isinstance(ident, bool) or not isinstance(ident, (str, int)):
        ident = None
    what = ("a batch (this server takes one message a line)" if isinstance(doc, list)
            else "no method" if isinstance(doc, dict) and "method" not in doc and "result" not in doc
            and "error" not in doc else "not a JSON-RPC 2.0 message")
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": INVALID_REQUEST, "message": f"Invalid Request: {what}"}}


class _CheckedLines:
    """The client's lines as the ``mcp`` stdio transport reads them, each one checked first (``rpc_error``): an
    invalid one is answered with its JSON-RPC error through the transport's own writer (so frames never tear) and
    not passed on."""

    def __init__(self, lines, types) -> None:
        import anyio

        self._lines = lines.__aiter__()
        self._types = types
        self.out = None
        self.ready = anyio.Event()

    def __aiter__(self):
        return self

    async def __anext__(self) -> str:
        from mcp.shared.message import SessionMessage

        while True:
            line = await self._lines.__anext__()
            err = rpc_error(line, self._types.jsonrpc_message_adapter.validate_python)
            if err is None:
                if line.strip():
                    return line
                continue
            await self.ready.wait()
            await self.out.send(SessionMessage(self._types.JSONRPCError.model_validate(err)))


def _stdin_lines():
    """The client's stdin as lines, with fd 0 pointed at the null device meanwhile (as the ``mcp`` transport does
    for its own: a child process never reads the wire); returns the lines and how to restore fd 0."""
    import anyio
    import io

    try:
        wire = os.dup(0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    except OSError:   # cannot divert: read it in place
        return anyio.wrap_file(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")), lambda: None

    def restore() -> None:
        try:
            os.dup2(wire, 0)
        except OSError:
            pass

    return anyio.wrap_file(io.TextIOWrapper(os.fdopen(wire, "rb", closefd=False), encoding="utf-8",
                                            errors="replace")), restore


def serve(vault_path: Path, *, session: str | None = None, transcript: str | None = None,
          clock: Callable[[], datetime] | None = None, rng: random.Random | None = None) -> None:
    """Run the MCP server on stdin/stdout until the client closes the connection."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError
    from mcp.server.stdio import stdio_server

    from acpmem import __version__

    clock = clock or now_utc
    session = (session or os.environ.get(ENV_SESSION) or os.environ.get(ENV_CLAUDE_SESSION)
               or new_session_id(clock, rng or random.Random()))
    svc = MemoryService(Path(vault_path), session, transcript, clock)

    def text(s: str, error: bool = False, meta: dict[str, Any] | None = None) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=s)], is_error=error, meta=meta or None)

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in svc.tools()])

    async def call_tool(ctx, params) -> types.CallToolResult:
        # Errors the model can fix go back as tool results (is_error), so it sees them and retries.
        try:
            said, meta = svc.answer(params.name, params.arguments, dict(params.meta or {}))
            for line in (meta.get(META_PREFIX + "warning"), (meta.get(META_PREFIX + "rerank") or {}).get("warning")):
                if line:   # the client's log (the server's stderr) sees it too
                    sys.stderr.write(f"Warning: {line}\n")
                    sys.stderr.flush()
            return text(said, meta=meta)
        except AcpmemError as exc:
            return text(exc.line(), error=True)
        except Exception as exc:  # a bug: one line for the model and the host, no traceback in the client's log
            if os.environ.get("ACPMEM_DEBUG"):
                raise
            return text(error_line(f"internal error: {type(exc).__name__}: {exc}",
                                   "please report it; set ACPMEM_DEBUG=1 to see the traceback"), error=True)

    async def list_resources(ctx, params) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[types.Resource(
            uri=INDEX_URI, name="memory-index", title="Long-term memory index", mime_type="text/plain",
            description="The resident index of long-term memories (frozen for this server's session): one line "
                        "per entry, most relevant first. Read entries in full with memory_recall.")])

    async def list_templates(ctx, params) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
            uri_template=SOURCE_TEMPLATE, name="memory-entry-source", title="The turns a memory cites",
            mime_type="text/plain",
            description="The conversation turns an entry cites (and, for a compression block, its summary and the "
                        "turns it covers), read from the session's recorded transcript, framed as data.")])

    async def read_resource(ctx, params) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri == INDEX_URI:
            text = svc.index()
        else:
            try:
                text = svc.source(uri)
            except AcpmemError as exc:
                raise MCPError(RESOURCE_NOT_FOUND, exc.line()) from None
            if text is None:   # an answer, not a traceback in the server's log
                raise MCPError(RESOURCE_NOT_FOUND, f"unknown resource {params.uri}; this server has {INDEX_URI} "
                                                   f"and {SOURCE_TEMPLATE}")
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type="text/plain",
                                                                             text=text)])

    svc.record()
    server = Server("acpmem", version=__version__, title="acpmem long-term memory",
                    on_list_tools=list_tools, on_call_tool=call_tool,
                    on_list_resources=list_resources, on_list_resource_templates=list_templates,
                    on_read_resource=read_resource)

    async def main() -> None:
        raw, restore = _stdin_lines()
        checked = _CheckedLines(raw, types)
        try:
            async with stdio_server(stdin=checked) as (read_stream, write_stream):
                checked.out = write_stream
                checked.ready.set()
                await server.run(read_stream, write_stream, server.create_initialization_options())
        finally:
            restore()

    anyio.run(main)


__all__ = ["serve", "MemoryService", "new_session_id", "INDEX_URI"]
