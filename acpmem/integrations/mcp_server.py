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
  importance: anything else is refused, as ``additionalProperties: false`` says — except ``CLIENT_ARGS``, which
  clients add to every tool by themselves and are dropped), so the model never invents them;
* Codex sends its thread id (``threadId``) and the call's ``callId`` in every ``tools/call``'s ``_meta``: the
  session is the thread (for ``memory_recall``'s read ledger too), the transcript its rollout (recorded by the
  SessionStart hook, else found under ``$CODEX_HOME/sessions``), the seq the line of the call in it
  (``acpmem.hosts.codex``);
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

import io
import json
import os
import random
import re
import sys
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from acpmem import __version__
from acpmem.core.clock import now_utc
from acpmem.core.errors import AcpmemError, error_line

INDEX_URI = "memory://index"
SOURCE_TEMPLATE = "memory://entry/{id}/source"
_SOURCE_URI = re.compile(r"memory://entry/([A-Za-z0-9][A-Za-z0-9_-]{0,63})/source\Z")
META_PREFIX = "acpmem/"            # the host's own values ride in a request's _meta: acpmem/session, /seq, /transcript
HOST_ARGS = ("session", "seq", "transcript")
# Arguments some clients add to every tool call on their own (Gemini CLI: wait_for_previous); dropped before acpmem's
# checks, which still refuse any other argument the schema does not name.
CLIENT_ARGS = frozenset({"wait_for_previous"})
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
        # lazy: serve's MCP handshake does not need it (measured +24 ms to its start-up)
        from acpmem.vault.writer import Vault

        return Vault(self.vault_path, clock=self.clock)

    def tools(self) -> list[dict]:
        # lazy: `initialize` is answered before these load (tools/list needs them; measured +18 ms)
        from acpmem.core.tools import tool_definitions
        from acpmem.vault.reader import VaultReader   # the settings only: answered before mcp is loaded

        with VaultReader(self.vault_path, clock=self.clock) as v:
            try:
                s = v.settings
                return tool_definitions(for_="main", format="mcp", lang=s.language, types=s.types)
            finally:
                self.warn(v.warnings)

    def warn(self, lines) -> None:
        """The vault's warnings (a settings file that did not load, a vault setting not obeyed) on stderr — the
        client's log — once each per server process."""
        said = self.__dict__.setdefault("_warned", set())
        for line in lines:
            if line not in said:
                said.add(line)
                text = line if line.startswith("Warning:") else f"Warning: {line}"
                sys.stderr.write(text.rstrip("\n") + "\n")
        sys.stderr.flush()

    def index(self) -> str:
        # lazy: serve's MCP handshake does not need it (measured +0.8 ms to its start-up)
        from acpmem.read.resident import resident_index

        with self.open() as v:
            return resident_index(v, session=self.session)

    def call(self, name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None) -> str:
        """Run one tool call; returns the text for the model. ``AcpmemError`` for anything the caller got wrong.
        ``meta``: the request's ``_meta`` (the host's session, seq and transcript, under ``acpmem/``)."""
        return self.answer(name, arguments, meta)[0]

    def answer(self, name: str, arguments: dict[str, Any] | None,
               meta: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """``call``, with the result's ``_meta`` for the client: for ``memory_recall`` with the embedding channel
        on, ``acpmem/vectors`` (model, present, missing, used) and, when the query fell back to lexical search,
        ``acpmem/warning``; with the rerank stage on, ``acpmem/rerank``. Empty otherwise."""
        args = {k: v for k, v in (arguments or {}).items() if k not in CLIENT_ARGS}
        if name == "memory_commit":
            # lazy: serve's MCP handshake does not need it (measured +0.8 ms to its start-up)
            from acpmem.hosts.claude_code import tool_use_id

            return self.commit(args, host_values(meta), meta, tool_use=tool_use_id(meta)), {}
        if name == "memory_recall":
            # lazy: serve's MCP handshake does not need it (measured +0.4 ms to its start-up)
            from acpmem.hosts.codex import meta_values

            return self.recall_answer(args, meta_values(meta).get("session"))
        raise AcpmemError(f"unknown tool '{name}'", "this server offers memory_commit and memory_recall")

    def commit(self, args: dict[str, Any], host: dict[str, Any] | None = None,
               meta: dict[str, Any] | None = None, tool_use: str | None = None) -> str:
        """``meta``: the request's ``_meta`` (Codex's thread and call ids). ``tool_use``: the call's id as Claude
        Code names it (``_meta["claudecode/toolUseId"]``): the commit's seq is the transcript line that holds that
        call, waited for (bounded) while Claude Code is still writing the turn, so the fork reads the whole commit
        turn (``acpmem.hosts.claude_code``)."""
        # lazy: serve's MCP handshake does not need them (measured +29 ms to its start-up)
        from acpmem.core.tools import parse_commit_args
        from acpmem.hosts.codex import call_seq, find_rollout, meta_values
        from acpmem.write.requests import check_host_args
        from acpmem.write.submit import submit

        host = check_host_args(host or {})
        codex = meta_values(meta)   # Codex's thread id and call id, from the request's _meta
        with self.open() as v:
            parsed = parse_commit_args(args, v.settings.types)
            session = host.get("session") or codex.get("session") or self.session
            transcript = host.get("transcript") or (self.transcript if session == self.session else None)
            seq = host.get("seq")
            if not transcript:
                # lazy: serve's MCP handshake does not need it (measured +1.1 ms to its start-up)
                from acpmem.integrations.claude_code import recorded_transcript

                transcript = recorded = recorded_transcript(v, str(session))
            else:
                recorded = None
            if not transcript and codex.get("session") == session:
                found = find_rollout(session)
                transcript = str(found) if found else None
            if seq is None and transcript and codex.get("call_id") and codex.get("session") == session:
                seq = call_seq(transcript, codex["call_id"])   # the commit's own line, once Codex has written it
            if transcript and seq is None and tool_use:
                # lazy: serve's MCP handshake does not need it (measured +0.8 ms to its start-up)
                from acpmem.hosts.claude_code import wait_for_tool_use

                seq = wait_for_tool_use(transcript, tool_use)
            if recorded and seq is None and not Path(recorded).is_file():
                transcript = None   # recorded, never written: the note alone, and the answer says so
            if seq is None:
                seq = self._next_seq(transcript)
            ack = submit(v, type=parsed.type, note=parsed.note, importance=parsed.importance, session=str(session),
                         seq=seq, transcript=transcript, block=parsed.block)
            return ack.text

    def record(self) -> None:
        """Record the server's own transcript for its session (when it starts)."""
        if not self.transcript:
            return
        # lazy: serve's MCP handshake does not need it (measured +3.2 ms to its start-up)
        from acpmem.read.sources import record_transcript

        with self.open() as v:
            try:
                v.ensure_state()
                record_transcript(v, self.session, self.transcript, "serve")
            except (AcpmemError, OSError):
                pass   # a convenience for show --source; the server works without it

    def source(self, uri: str) -> str | None:
        """The text of ``memory://entry/{id}/source``, or None when ``uri`` is not one."""
        m = _SOURCE_URI.match(uri)
        if m is None:
            return None
        # lazy: serve's MCP handshake does not need it (measured +3.2 ms to its start-up)
        from acpmem.read.sources import entry_source, source_text

        with self.open() as v:
            return source_text(entry_source(v, m[1]))

    def _next_seq(self, transcript: str | None) -> int:
        if transcript:
            # lazy: serve's MCP handshake does not need it (measured +13 ms to its start-up)
            from acpmem.hosts.transcripts import last_seq

            last = last_seq(Path(transcript))   # a DSH log is scanned, not read whole
            if last is not None:
                return last
        self._seq += 1
        return self._seq

    def recall(self, args: dict[str, Any]) -> str:
        return self.recall_answer(args)[0]

    def recall_answer(self, args: dict[str, Any], session: str | None = None) -> tuple[str, dict[str, Any]]:
        """The recall text for the model, and what the embedding channel said for the client (``answer``). When
        the query fell back to lexical search, the text ends with one line saying so (``lexical_fallback_note``);
        the details (the endpoint's error) go only to the client, never to the model."""
        # lazy: serve's MCP handshake does not need them (measured +33 ms to its start-up)
        from acpmem.core.tools import parse_recall_args
        from acpmem.read.layers import recall_layered
        from acpmem.read.retrieval import lexical_fallback_note, recall_text

        parsed = parse_recall_args(args)
        with self.open() as v:
            report: dict[str, Any] = {}
            hits = recall_layered(v, parsed.query, limit=parsed.limit, session=session or self.session,
                                  report=report)
            # lazy: serve's MCP handshake does not need it (measured +9.9 ms to its start-up)
            from acpmem.read.citecheck import served

            checks = served(v, [(h.entry, h.layer) for h in hits])
            text = recall_text(v, hits, {i: c.attrs() for i, c in checks.items()})
            if report.get("warning"):
                text += "\n\n" + lexical_fallback_note(v)
            return text, {META_PREFIX + k: report[k] for k in ("vectors", "warning", "rerank") if k in report}


def host_values(meta: dict[str, Any] | None) -> dict[str, Any]:
    """The host's session, seq and transcript from a request's ``_meta`` (``acpmem/session`` …)."""
    return {k: meta[META_PREFIX + k] for k in HOST_ARGS if isinstance(meta, dict) and META_PREFIX + k in meta}


# The MCP revisions the ``mcp`` package negotiates through ``initialize`` (its ``HANDSHAKE_PROTOCOL_VERSIONS``; a
# test holds this copy to it): the early answers below must say what the package itself would.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
SERVER_TITLE = "acpmem long-term memory"
CAPABILITIES = {"resources": {"listChanged": False, "subscribe": False}, "tools": {"listChanged": False}}
INDEX_RESOURCE = {
    "uri": INDEX_URI, "name": "memory-index", "title": "Long-term memory index", "mimeType": "text/plain",
    "description": "The resident index of long-term memories (frozen for this server's session): one line per entry, "
                   "most relevant first. Read entries in full with memory_recall."}
SOURCE_RESOURCE = {
    "uriTemplate": SOURCE_TEMPLATE, "name": "memory-entry-source", "title": "The turns a memory cites",
    "mimeType": "text/plain",
    "description": "The conversation turns an entry cites (and, for a compression block, its summary and the turns it "
                   "covers), read from the session's recorded transcript, framed as data."}


def _request(line: bytes) -> dict | None:
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or not isinstance(msg.get("method"), str):
        return None
    return msg


def _result(ident: Any, result: dict) -> bytes:
    return (json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}, separators=(",", ":"),
                       ensure_ascii=False) + "\n").encode("utf-8")


def early_answer(line: bytes) -> tuple[Any, bytes] | None:
    """(the request id, the answer line) for the client's first line when it is a plain ``initialize`` request — what
    the ``mcp`` package would send (a test compares them) — else None (the package answers it)."""
    msg = _request(line)
    if msg is None or msg["method"] != "initialize":
        return None
    ident, params = msg.get("id"), msg.get("params")
    if isinstance(ident, bool) or not isinstance(ident, (int, str)) or not isinstance(params, dict):
        return None
    info, version = params.get("clientInfo"), params.get("protocolVersion")
    if (not isinstance(version, str) or not isinstance(params.get("capabilities"), dict) or not isinstance(info, dict)
            or not isinstance(info.get("name"), str) or not isinstance(info.get("version"), str)):
        return None

    return ident, _result(ident, {
        "capabilities": CAPABILITIES,
        "protocolVersion": version if version in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1],
        "serverInfo": {"name": "acpmem", "title": SERVER_TITLE, "version": __version__}})


def early_list(line: bytes, tools: Callable[[], list[dict]]) -> tuple[Any, bytes] | None:
    """The answer to a plain ``tools/list``, ``resources/list`` or ``resources/templates/list`` (no cursor), else
    None. ``tools``: the tool definitions (read from the vault's settings)."""
    msg = _request(line)
    if msg is None:
        return None
    ident, params = msg.get("id"), msg.get("params")
    if isinstance(ident, bool) or not isinstance(ident, (int, str)):
        return None
    if params not in (None, {}) and not (isinstance(params, dict) and set(params) <= {"_meta"}):
        return None   # a cursor, or anything else: the package's business
    if msg["method"] == "tools/list":
        return ident, _result(ident, {"tools": tools()})
    if msg["method"] == "resources/list":
        return ident, _result(ident, {"resources": [INDEX_RESOURCE]})
    if msg["method"] == "resources/templates/list":
        return ident, _result(ident, {"resourceTemplates": [SOURCE_RESOURCE]})
    return None


class _Wire:
    """The process's stdin and stdout as the MCP connection, claimed for the server alone: fd 0 then reads the null
    device and fd 1 writes to stderr, so nothing a handler or a child prints can break the JSON-RPC stream (what the
    ``mcp`` package's own ``stdio_server`` does; restored by ``close``)."""

    def __init__(self) -> None:
        self._saved = (os.dup(0), os.dup(1))
        self.inp = os.fdopen(os.dup(0), "rb")
        self.out = os.fdopen(os.dup(1), "wb")
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)

    def close(self) -> None:
        os.dup2(self._saved[0], 0)
        os.dup2(self._saved[1], 1)
        for fd in self._saved:
            os.close(fd)
        for f in (self.inp, self.out):
            try:
                f.close()
            except OSError:
                pass


def _load_mcp() -> None:
    # lazy: anyio, mcp, mcp_types are heavy, never imported at start-up
    import anyio  # noqa: F401
    import mcp_types  # noqa: F401
    from mcp.server.lowlevel import Server  # noqa: F401
    from mcp.server.stdio import stdio_server  # noqa: F401


def rpc_error(line: str, validate: Callable[[object], object]) -> dict | None:
    """The JSON-RPC error answer a line from the client gets instead of being handed to the session, or None when
    it is one message ``validate`` accepts (the ``mcp`` package's message adapter). A line that is no JSON gets
    ``PARSE_ERROR``, any other message that is not valid (``{}``, ``[]``, a batch, no ``method``, a ``method``
    that is not text, an ``id`` that is an object) ``INVALID_REQUEST`` — with the line's ``id`` when it is one a
    reply may carry, else null. The ``mcp`` package itself drops such lines without a word: the client waited
    forever."""
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
        # lazy: anyio is heavy, never imported at start-up
        import anyio

        self._lines = lines.__aiter__()
        self._types = types
        self.out = None
        self.ready = anyio.Event()

    def __aiter__(self):
        return self

    async def __anext__(self) -> str:
        # lazy: mcp is heavy, never imported at start-up
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


def serve(vault_path: Path, *, session: str | None = None, transcript: str | None = None,
          clock: Callable[[], datetime] | None = None, rng: random.Random | None = None) -> None:
    """Run the MCP server on stdin/stdout until the client closes the connection.

    The handshake does not wait for the ``mcp`` package: clients start their MCP servers asynchronously, and one
    whose tools are not listed in time is left out of the session (Claude Code and Codex began sessions without
    acpmem's tools while ``mcp`` was still loading). So the package is imported in a thread while this one answers
    ``initialize`` (``early_answer``) and the plain ``tools/list``, ``resources/list`` and
    ``resources/templates/list`` (``early_list``) itself; once it is loaded, every line read so far is replayed to
    it and its own answers to the requests already answered are not sent again."""
    clock = clock or now_utc
    session = (session or os.environ.get(ENV_SESSION) or os.environ.get(ENV_CLAUDE_SESSION)
               or new_session_id(clock, rng or random.Random()))
    svc = MemoryService(Path(vault_path), session, transcript, clock)
    wire = _Wire()
    loader = threading.Thread(target=_load_mcp, name="acpmem-load-mcp", daemon=True)
    loader.start()
    try:
        read: list[bytes] = []
        answered: dict[Any, bytes] = {}
        while True:
            line = wire.inp.readline()
            if not line:
                break
            read.append(line)
            try:
                said = early_answer(line) if len(read) == 1 else early_list(line, svc.tools) if answered else None
            except Exception:   # a broken acpmem.toml, say: the package answers it, with the error, as before
                said = None
            if said is not None and said[0] not in answered:
                wire.out.write(said[1])
                wire.out.flush()
                answered[said[0]] = said[1]
            elif not (answered and (_request(line) or {}).get("method", "").startswith("notifications/")):
                break   # a request only the package answers: hand over now
            if not loader.is_alive():
                break
        loader.join()
        _run(wire, svc, read, answered)
    finally:
        wire.close()


def _run(wire: _Wire, svc: MemoryService, read: list[bytes], answered: dict[Any, bytes]) -> None:
    # lazy: anyio, mcp, mcp_types are heavy, never imported at start-up
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.shared.exceptions import MCPError

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
        return types.ListResourcesResult(resources=[types.Resource.model_validate(INDEX_RESOURCE)])

    async def list_templates(ctx, params) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate.model_validate(
            SOURCE_RESOURCE)])

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
    server = Server("acpmem", version=__version__, title=SERVER_TITLE,
                    on_list_tools=list_tools, on_call_tool=call_tool,
                    on_list_resources=list_resources, on_list_resource_templates=list_templates,
                    on_read_resource=read_resource)
    lines = anyio.wrap_file(io.TextIOWrapper(wire.inp, encoding="utf-8", errors="replace"))
    out = anyio.wrap_file(io.TextIOWrapper(wire.out, encoding="utf-8"))

    class Replayed:
        """The client's lines: those already read for the early answers first, again."""

        async def __aiter__(self):
            for line in read:
                yield line.decode("utf-8", "replace")
            async for line in lines:
                yield line

    class Sent:
        """The server's lines to the client, less the package's answers to the requests answered early."""

        async def write(self, line: str) -> None:
            if answered:
                try:
                    msg = json.loads(line)
                except ValueError:
                    msg = None
                ident = msg.get("id") if isinstance(msg, dict) and ("result" in msg or "error" in msg) else None
                if ident is not None and not isinstance(ident, bool) and ident in answered:
                    ours = json.loads(answered.pop(ident))
                    if msg != ours:   # a newer mcp package: say so (the client got ours)
                        sys.stderr.write(f"Warning: an early answer differs from the mcp package's ({line.strip()[:400]})"
                                         " — please report it\n")
                        sys.stderr.flush()
                    return
            await out.write(line)

        async def flush(self) -> None:
            await out.flush()

    async def main() -> None:
        checked = _CheckedLines(Replayed(), types)   # an invalid line is answered with its JSON-RPC error
        async with stdio_server(checked, Sent()) as (read_stream, write_stream):
            checked.out = write_stream
            checked.ready.set()
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


__all__ = ["serve", "MemoryService", "new_session_id", "INDEX_URI", "early_answer", "early_list", "HANDSHAKE_VERSIONS"]
