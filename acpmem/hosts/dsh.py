"""Reading the compression hosts' session logs: DSH's event log (pi's session log and kernel state: ``pilogs``).

Returns plain parts (``HostLog``: the message events as OpenAI chat messages with their seqs, the surface changes,
the compression blocks, warnings); ``acpmem.hosts.transcripts`` turns them into a ``Transcript`` and finds them by
content, like its other formats.

**DSH** (``session.jsonl.zstd``): one JSON event per line, zstd-compressed, append-only. ``seq`` is the event's
0-based position in the log. ``user/message``, ``assistant/message`` (one message; its tool calls as ``tool_calls``)
and ``tool/result`` are messages; each carries a ``surfaceOp``: ``append``, or ``replace`` by this event of a run
of surface nodes named by the seqs of its first and last (how the host's compaction checkpoint takes the place of the
turns it summarises), so the surface the model saw at any seq is replayed from the log. ``compaction/summary``
events become blocks. Read as a stream, a bounded chunk at a time; never loaded whole.

Hostile input: a line longer than ``MAX_LINE_BYTES``, text that is not UTF-8, a corrupt zstd frame, more than
``MAX_EVENTS`` events or ``MAX_LOG_BYTES`` of text, JSON nested too deep, a seq that does not increase — one
``TranscriptError`` line naming the file and line. Recoverable oddities are skipped with a warning: an unknown event
type (counted), a known event whose fields are not what the host writes, a last line cut off mid-write or a log
that ends mid-frame (the host may still be writing; the complete part is read).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from acpmem.core.blocks import COMPACTION_RE, Block, valid_block_id
from acpmem.core.errors import TranscriptError
from acpmem.core.limits import MAX_SEQ, clip, int_between, one_line
from acpmem.core.values import Value

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_LOG_BYTES = 4 * 1024 * 1024 * 1024
MAX_EVENTS = 10_000_000
MAX_BLOCKS = 100_000
MAX_BLOCK_SEQS = 2_000_000
MAX_TEXT_DEPTH = 16           # content blocks nested deeper than this are not read
MAX_TOPIC_CHARS = 300
MAX_SUMMARY_CHARS = 100_000
MAX_WARNINGS = 20
MAX_UNKNOWN_KINDS = 12      # unknown event types named in the warning (then: "and N more types")
READ_CHUNK = 4096             # compressed bytes per step: bounds what one step can inflate to
DSH_MESSAGES = ("user/message", "assistant/message", "tool/result")
DSH_READ = (*DSH_MESSAGES, "compaction/summary")
PACKED_ROWS = ("text-chunks", "reasoning-chunks", "tool-call-chunks")   # one line standing for several chunk events
# The event types DSH 0.1.0-rc.8 writes (its session package's list): normal, read or skipped without a warning.
DSH_EVENTS = frozenset((
    "agent-preset/selected", "agent/inbox/spliced", "approval/asked", "approval/decided", "approval/policy",
    "assistant/chunk", "assistant/message", "command/done", "command/run", "compaction/end", "compaction/prune",
    "compaction/start", "compaction/summary", "feedback/record", "goal/change", "hook/invoked", "hook/result",
    "llm/retry", "llm/retry-started", "permission/preset", "plan/mode", "request/context", "request/header",
    "sandbox/mode", "schedule/change", "session/end-seed", "session/title", "session/title-llm-request",
    "step/end", "step/start", "subagent/descriptor", "team/member", "team/message/delivered",
    "team/message/queued", "team/task", "todo/write", "tool-workflow/agent-end", "tool-workflow/agent-start",
    "tool-workflow/run-end", "tool-workflow/run-start", "tool/call", "tool/code-dispatch",
    "tool/code-dispatch-start", "tool/result", "turn/end", "turn/start", "user/message",
    "web/deepseek-search-llm-request"))
DSH_KNOWN = (*DSH_EVENTS, *PACKED_ROWS, "session")
_MSG_ID = re.compile(r"([0-9]{1,19})(?:#.*)?\Z", re.S)
_REF = re.compile(r"m([0-9]{1,9})\Z")
_TYPE_SEQ = re.compile(r'\{"type":\s?"([a-z0-9/_-]{1,60})",\s?"seq":\s?([0-9]{1,18}),')   # DSH's key order


class HostMessage(Value):
    seq: int
    role: str
    message: dict            # the OpenAI chat message the model saw
    checkpoint: str | None = None   # DSH: the compactionId of a compaction checkpoint message


class HostLog(Value):
    """A host's session read: every message event (shadowed ones too) in log order, the surface changes
    ``(seq, lo, hi)`` (``lo``/``hi`` None for an append), the blocks, the session id and warnings."""

    kind: str
    events: tuple[HostMessage, ...]
    ops: tuple[tuple, ...] | None
    blocks: tuple[Block, ...]
    session: str | None = None
    warnings: tuple[str, ...] = ()


class _Warnings:
    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[str] = []
        self.unknown: dict[str, int] = {}

    def add(self, text: str) -> None:
        if len(self.items) < MAX_WARNINGS:
            self.items.append(f"{self.source}: {text}")

    def skipped(self, kind: object) -> None:
        key = clip(kind, 40) if isinstance(kind, str) else type(kind).__name__
        if key in self.unknown or len(self.unknown) < 1000:   # bounded: a hostile log cannot grow it
            self.unknown[key] = self.unknown.get(key, 0) + 1

    def done(self) -> tuple[str, ...]:
        if self.unknown:
            items = sorted(self.unknown.items())
            kinds = ", ".join(f"{k} ×{n}" for k, n in items[:MAX_UNKNOWN_KINDS])
            more = f" and {len(items) - MAX_UNKNOWN_KINDS} more types" if len(items) > MAX_UNKNOWN_KINDS else ""
            self.add(f"skipped events of types this DSH version does not write ({kinds}{more}); "
                     "a newer host may have written them")
        return tuple(self.items)


# ------------------------------------------------------------------------------------------------------ detection

def is_zstd(head: bytes) -> bool:
    return head[:4] == ZSTD_MAGIC


def looks_like_dsh(obj: dict) -> bool:
    kind = obj.get("type")
    return isinstance(kind, str) and (kind in DSH_KNOWN or "/" in kind) and "data" in obj and "role" not in obj


# ------------------------------------------------------------------------------------------------------ streaming

def _check_line(raw: bytes, n: int, source: str) -> str:
    if len(raw) > MAX_LINE_BYTES:
        raise TranscriptError(f"{source}:{n}: line is over {MAX_LINE_BYTES} bytes",
                              "this is not a session log acpmem can read; pass the host's unmodified log")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TranscriptError(f"{source}:{n}: not UTF-8 text", "pass the host's unmodified session log") from None


def line_batches(path: Path, source: str, warn: _Warnings):
    """``(number of the first line, lines, cut)`` for the lines of a plain or zstd-compressed file, streamed a chunk
    at a time (each chunk's complete lines split and UTF-8-checked at once); ``cut``: the batch's last line had no
    newline at the end of the file (it may be half-written)."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise TranscriptError(f"{source}: no such session log", "check the path the host passed") from None
    except OSError as exc:
        raise TranscriptError(f"{source}: cannot read the session log ({exc.strerror})", "check the path") from None
    with fh:
        head = fh.read(4)
        fh.seek(0)
        chunks = _zstd_chunks(fh, source, warn) if is_zstd(head) else iter(lambda: fh.read(1 << 16), b"")
        rest = b""
        n = 0
        total = 0
        for chunk in chunks:
            total += len(chunk)
            if total > MAX_LOG_BYTES:
                raise TranscriptError(f"{source}: session log holds over {MAX_LOG_BYTES} bytes of text",
                                      "pass a smaller log")
            nl = chunk.rfind(b"\n")
            if nl < 0:
                rest += chunk
                if len(rest) > MAX_LINE_BYTES:
                    _check_line(rest, n + 1, source)
                continue
            whole = rest + chunk[:nl] if rest else chunk[:nl]
            rest = chunk[nl + 1:]
            lines = _check_lines(whole, n, source)
            yield n + 1, lines, False
            n += len(lines)
            if len(rest) > MAX_LINE_BYTES:
                _check_line(rest, n + 1, source)
        if rest.strip():
            yield n + 1, [_check_line(rest, n + 1, source)], True


def _check_lines(data: bytes, n: int, source: str) -> list[str]:
    """The lines of ``data`` (complete lines, the last newline cut), after line ``n``: checked for length and
    UTF-8 in one pass each."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = n + 1 + data.count(b"\n", 0, exc.start)
        raise TranscriptError(f"{source}:{at}: not UTF-8 text", "pass the host's unmodified session log") from None
    lines = text.split("\n")
    if len(data) > MAX_LINE_BYTES and max(map(len, lines)) > MAX_LINE_BYTES // 4:   # chars: bytes only if long
        for i, line in enumerate(lines):
            if len(line.encode("utf-8")) > MAX_LINE_BYTES:
                _check_line(line.encode("utf-8"), n + 1 + i, source)
    return lines


def _zstd_chunks(fh, source: str, warn: _Warnings):
    """Decompressed chunks of a zstd file of one or more frames; a corrupt frame is an error, a file that ends
    mid-frame a warning (the host may still be writing)."""
    try:
        # lazy: zstandard is heavy, never imported at start-up
        import zstandard
    except ImportError:   # pragma: no cover - a declared dependency
        raise TranscriptError(f"{source}: reading zstd logs needs the zstandard package",
                              "pip install zstandard") from None
    dctx = zstandard.ZstdDecompressor()
    obj = dctx.decompressobj()
    fed = False
    while True:
        data = fh.read(READ_CHUNK)
        if not data:
            break
        while data:
            try:
                out = obj.decompress(data)
            except zstandard.ZstdError as exc:
                raise TranscriptError(f"{source}: corrupt zstd data ({str(exc)[:80]})",
                                      "the log is damaged; pass an intact copy") from None
            fed = True
            if out:
                yield out
            if obj.eof:   # a frame ended: the rest starts the next one
                data = obj.unused_data
                obj = dctx.decompressobj()
                fed = False
            else:
                data = b""
    if fed:
        warn.add("ends in the middle of a zstd frame (cut off, or still being written); read what is complete")


def _load_json(text: str, where: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:
        raise TranscriptError(f"{where}: holds a number too long to read", "pass the host's unmodified log") from None
    except RecursionError:
        raise TranscriptError(f"{where}: is nested too deeply to read", "pass the host's unmodified log") from None


# ------------------------------------------------------------------------------------------------------ content

def text_of(content: object, depth: int = 0) -> str:
    """The text of a content value: a string, or blocks (``text``; nested ``content`` arrays, as tool results hold;
    images and files as a one-word placeholder). Bounded in depth."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or depth > MAX_TEXT_DEPTH:
        return ""
    parts = []
    for b in content:
        if isinstance(b, str):
            parts.append(b)
        elif not isinstance(b, dict):
            continue
        elif b.get("type") == "text" and isinstance(b.get("text"), str):
            parts.append(b["text"])
        elif b.get("type") in ("image", "file"):
            parts.append(f"[{b['type']}]")
        elif isinstance(b.get("content"), (list, str)):
            parts.append(text_of(b["content"], depth + 1))
    return "\n".join(p for p in parts if p)


def _arguments(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps({} if value is None else value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return "{}"


def _calls(content: object, kind: str) -> list[dict]:
    out = []
    for b in content if isinstance(content, list) else ():
        if isinstance(b, dict) and b.get("type") == kind:
            cid = b.get("id") if isinstance(b.get("id"), str) else ""
            name = b.get("name") if isinstance(b.get("name"), str) else ""
            out.append({"id": cid, "type": "function", "function": {"name": name, "arguments": _arguments(
                b.get("arguments", b.get("input")))}})
    return out


def _assistant(content: object, call_kind: str) -> dict:
    text = text_of([b for b in content if not (isinstance(b, dict) and b.get("type") in (call_kind, "thinking",
                                                                                          "reasoning"))]
                   if isinstance(content, list) else content)
    calls = _calls(content, call_kind)
    msg: dict = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        msg["tool_calls"] = calls
    return msg


# ------------------------------------------------------------------------------------------------------ DSH

class _Seqs:
    """The seq bookkeeping of one DSH log read: line 1 may be the header (no seq, not an event); every event
    line's seq is its 0-based position among events (``events[i].seq === i``); a packed row stands for
    ``len(texts|args)`` events from ``seq0``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.next = 0           # the seq the next event must have
        self.count = 0          # lines read as events or rows (bounded by MAX_EVENTS with the events they stand for)

    def take(self, seq: object, width: int, n: int) -> int:
        if not int_between(seq, 0, MAX_SEQ) or seq != self.next:
            raise TranscriptError(f"{self.source}:{n}: seq {clip(seq)} where seq {self.next} was expected",
                                  "a DSH log's events are numbered 0, 1, 2 … after its header line; "
                                  "pass the host's unmodified log")
        self.next = seq + width
        if self.next > MAX_EVENTS:
            raise TranscriptError(f"{self.source}: session log has over {MAX_EVENTS} events", "pass a smaller log")
        return seq


def _header(obj: dict) -> bool:
    """Line 1 of a DSH log: ``{type: "session", version, id, createdAt, …}`` — no seq, not an event."""
    return obj.get("type") == "session" and "seq" not in obj and "data" not in obj


def _row_width(obj: dict, n: int, source: str) -> int:
    """How many events a packed row (``text-chunks`` …) stands for: its ``texts`` (or ``args``) list."""
    data = obj.get("data")
    key = "args" if obj.get("type") == "tool-call-chunks" else "texts"
    members = data.get(key) if isinstance(data, dict) else None
    if not isinstance(members, list) or not members or len(members) > MAX_EVENTS:
        raise TranscriptError(f"{source}:{n}: {obj.get('type')} row without its {key} list",
                              "the log is damaged; pass the host's unmodified log")
    return len(members)


def read_dsh(path: Path | None, source: str, text: str | None = None, *, only=None) -> HostLog:
    """Read a DSH event log (zstd-compressed or plain JSONL) from ``path``, streamed, or from ``text``.

    ``only``: a set of seqs: keep only those message events (every block is still read, and no surface is
    replayed). An event line that starts with its type and seq (``{"type":"…","seq":N,`` — how DSH writes them)
    and names no compaction is then skipped unparsed: checking a block at commit time, or reading a few cited
    turns, costs a scan, not a parse."""
    warn = _Warnings(source)
    batches = line_batches(path, source, warn) if text is None else [(1, text.split("\n"), True)]
    match = _TYPE_SEQ.match
    events: list[HostMessage] = []
    ops: list[tuple] = []
    summaries: list[dict] = []              # compaction/summary data, with "_seq" and "_n"
    checkpoints: dict[int, str] = {}        # checkpoint seq -> compactionId
    seqs = _Seqs(source)
    session = None
    first = True
    for n0, lines, cut in batches:
        end = len(lines) - 1
        for i, line in enumerate(lines):
            if only is not None:   # the scan: an event line as DSH writes it, not cited, naming no compaction
                m = match(line)
                if m is not None and line[-1:] == "}" and "compact" not in line and m[1] not in PACKED_ROWS \
                        and int(m[2]) not in only and not (cut and i == end):
                    if int(m[2]) == seqs.next and seqs.next < MAX_EVENTS:
                        seqs.next += 1
                    else:
                        seqs.take(int(m[2]), 1, n0 + i)
                    first = False
                    continue
            if not line.strip():
                continue
            n = n0 + i
            last = cut and i == end
            where = f"{source}:{n}"
            try:
                obj = _load_json(line, where)
            except json.JSONDecodeError as exc:
                if last:
                    warn.add(f"line {n}: the last line is cut off (half-written); skipped")
                    break
                raise TranscriptError(f"{where}: not valid JSON ({exc.msg})",
                                      "pass the host's unmodified session log") from None
            if not isinstance(obj, dict):
                raise TranscriptError(f"{where}: expected a JSON object, got {type(obj).__name__}",
                                      "each line of a DSH log is one event")
            if first:
                first = False
                if _header(obj):
                    session = obj["id"] if isinstance(obj.get("id"), str) else None
                    continue
            kind = obj.get("type")
            if kind in PACKED_ROWS:
                seqs.take(obj.get("seq0"), _row_width(obj, n, source), n)
                continue
            seq = seqs.take(obj.get("seq", seqs.next), 1, n)
            data = obj.get("data")
            if kind not in DSH_READ:
                if not (isinstance(kind, str) and kind in DSH_EVENTS) and obj.get("ignorable") is not True:
                    warn.skipped(kind)
                continue
            if not isinstance(data, dict):
                warn.add(f"line {n}: {kind} event without a data object; skipped")
                continue
            if kind in DSH_MESSAGES:
                src = data.get("source") if kind == "user/message" else None
                is_cp = isinstance(src, dict) and src.get("plugin") == "compact"
                if is_cp:
                    checkpoints[seq] = src.get("compactionId") if isinstance(src.get("compactionId"), str) else ""
                if only is not None and seq not in only:
                    continue
                msg = _dsh_message(kind, data)
                if only is None:
                    ops.append(_surface_op(seq, obj.get("surfaceOp"), warn, n))
                if msg is None:
                    if not (kind == "assistant/message" and _empty_assistant(data)):
                        warn.add(f"line {n}: {kind} event without content; skipped")
                    continue   # an empty assistant/message (usage only, or an orphan cleanup's stand-in) is no message
                events.append(HostMessage(seq, msg["role"], msg, checkpoints.get(seq)))
            elif kind == "compaction/summary":
                if len(summaries) >= MAX_BLOCKS:
                    raise TranscriptError(f"{source}: session log has over {MAX_BLOCKS} compactions",
                                          "pass a smaller log")
                summaries.append({**data, "_seq": seq, "_n": n})
    blocks = _dsh_blocks(summaries, checkpoints, warn)
    return HostLog("dsh", tuple(events), tuple(ops) if only is None else None, blocks, session, warn.done())


def message_ids(seq: int, message: dict) -> tuple[str, ...]:
    """The ids the host gives the kernel for one DSH message: ``"<seq>"``, or for an assistant message with two
    or more tool calls one per call, ``"<seq>#<callId>"`` (how compaction events name covered messages)."""
    calls = message.get("tool_calls") or ()
    if message.get("role") == "assistant" and len(calls) >= 2:
        return tuple(f"{seq}#{c['id']}" for c in calls)
    return (str(seq),)


def last_message_seq(path: Path, source: str) -> int | None:
    """The seq of the last message event (user, assistant, tool result) of a DSH log, or None when it has none:
    what the MCP server cites when the host passes no ``acpmem/seq``.

    A bounded scan, streamed like ``read_dsh`` and with its limits (line and log size, event count, seqs that
    follow each other), but no message is built: an event line that starts with its type and seq
    (``{"type":"…","seq":N,`` — how DSH writes them) and ends its object is not parsed; other lines (the header,
    packed rows, a line cut short) are, for their seq and type only. A cut last line does not count. A message
    event the reader skips as malformed counts here: the conversation up to its seq is the same as up to the
    message before it."""
    warn = _Warnings(source)
    seqs = _Seqs(source)
    found = None
    first = True
    match = _TYPE_SEQ.match
    for n0, lines, cut in line_batches(path, source, warn):
        nxt = seqs.next
        for i, line in enumerate(lines):
            m = match(line)
            if m is not None and line[-1:] == "}" and m[1] not in PACKED_ROWS and not (cut and i == len(lines) - 1):
                if int(m[2]) != nxt:   # the fast path: no parse, the numbering checked inline
                    seqs.next = nxt
                    seqs.take(int(m[2]), 1, n0 + i)
                nxt += 1
                first = False
                if m[1] in DSH_MESSAGES:
                    found = nxt - 1
                continue
            if not line.strip():
                continue
            seqs.next = nxt
            n = n0 + i
            where = f"{source}:{n}"
            try:
                obj = _load_json(line, where)
            except json.JSONDecodeError as exc:
                if cut and i == len(lines) - 1:
                    break
                raise TranscriptError(f"{where}: not valid JSON ({exc.msg})",
                                      "pass the host's unmodified session log") from None
            if not isinstance(obj, dict):
                raise TranscriptError(f"{where}: expected a JSON object, got {type(obj).__name__}",
                                      "each line of a DSH log is one event")
            if first:
                first = False
                if _header(obj):
                    continue
            kind = obj.get("type")
            if kind in PACKED_ROWS:
                seqs.take(obj.get("seq0"), _row_width(obj, n, source), n)
            else:
                seq = seqs.take(obj.get("seq", seqs.next), 1, n)
                if kind in DSH_MESSAGES:
                    found = seq
            nxt = seqs.next
        seqs.next = nxt
        if nxt > MAX_EVENTS:
            raise TranscriptError(f"{source}: session log has over {MAX_EVENTS} events", "pass a smaller log")
    return found


def check_dsh(path: Path, source: str) -> int:
    """A cheap streaming check that a DSH log can be read, for commit time: the zstd frames decode, every line is
    whole and numbered as the host numbers events (header, events in order, packed rows), and it holds a message.
    Returns the last message's seq; ``TranscriptError`` (one line, naming the file and line) otherwise. No message
    is built; an event line is parsed only when it does not start and end as DSH writes them."""
    last = last_message_seq(path, source)
    if last is None:
        raise TranscriptError(f"{source}: no messages in this session log", "pass the session's log file")
    return last


def _empty_assistant(data: dict) -> bool:
    message = data.get("message")
    return isinstance(message, dict) and message.get("content") == []


def _dsh_message(kind: str, data: dict) -> dict | None:
    if kind == "user/message":
        content = data.get("content")
        if not isinstance(content, (str, list)):
            return None
        return {"role": "user", "content": text_of(content)}
    message = data.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), (str, list)):
        return None
    content = message["content"]
    if kind == "assistant/message":
        return _assistant(content, "tool-call") if content else None
    call_id = None
    for b in content if isinstance(content, list) else ():
        if isinstance(b, dict) and b.get("type") == "tool-result" and isinstance(b.get("toolCallId"), str):
            call_id = b["toolCallId"]
            break
    if call_id is None:
        src = message.get("source")
        call_id = (message.get("toolCallId") if isinstance(message.get("toolCallId"), str)
                   else src.get("callId") if isinstance(src, dict) and isinstance(src.get("callId"), str) else "")
    return {"role": "tool", "tool_call_id": call_id, "content": text_of(content)}


def _surface_op(seq: int, op: object, warn: _Warnings, n: int) -> tuple:
    if op is None or op == "append":
        return (seq, None, None)
    if isinstance(op, dict) and op.get("op") == "replace":
        lo, hi = op.get("start"), op.get("end")
        if int_between(lo, 0, MAX_SEQ) and int_between(hi, 0, MAX_SEQ):
            return (seq, lo, hi)
    warn.add(f"line {n}: surfaceOp {clip(op)} is not append or {{op: replace, start, end}}; read as append")
    return (seq, None, None)


def _seq_list(value: object, limit: int) -> list[int] | None:
    """A plain list of seqs (how DSH writes ``shadowedSeqs``); None when it is not one."""
    if not isinstance(value, list) or len(value) > limit:
        return None
    return value if all(int_between(s, 0, MAX_SEQ) for s in value) else None


def _message_seqs(ids: object, limit: int) -> list[int] | None:
    if not isinstance(ids, list) or len(ids) > limit:
        return None
    out = []
    for i in ids:
        m = _MSG_ID.match(i) if isinstance(i, str) else None
        if m is None or int(m[1]) > MAX_SEQ:
            return None
        out.append(int(m[1]))
    return out


def _dsh_blocks(summaries: list[dict], checkpoints: dict[int, str], warn: _Warnings) -> tuple[Block, ...]:
    """The blocks of a DSH log's ``compaction/summary`` events, as the host's block registry names them.

    Id: the recorded ``kernelBlockId`` (ACP compactions), else ``b<N>`` by log order, counting on from the highest
    recorded one (DSH's own compactions record none). Tier: the recorded 2 or 3, else 1 — DSH's own compactions
    are rolling tier-1 summaries, each re-summarising the previous checkpoint, not a nesting. Nesting: the
    ``parentBlockIds`` (compaction ids) of earlier blocks; a block is active until a later one names it there.
    Covered turns: the recorded ``effectiveMessageIds``, else the shadowed seqs with an earlier checkpoint among
    them expanded into what that block covered. ``at``: the seq of the block's checkpoint message."""
    out: dict[str, Block] = {}
    by_cid: dict[str, str] = {}
    where: dict[str, int] = {}
    for s, cid in checkpoints.items():
        where.setdefault(cid, s)
    consumed: set[str] = set()
    nxt = 1
    for d in summaries:
        n = d["_n"]
        summary = text_of(d.get("summary"))
        if not summary.strip():
            warn.add(f"line {n}: compaction/summary without a summary; skipped")
            continue
        cid = d.get("compactionId")
        cid = cid if isinstance(cid, str) and COMPACTION_RE.match(cid) else None
        ident = d.get("kernelBlockId")
        if valid_block_id(ident):
            nxt = max(nxt, int(ident[1:]) + 1)
        else:
            ident = f"b{nxt}"
            nxt += 1
        if ident in out:
            warn.add(f"line {n}: block id {ident} appears twice; the later one is kept")
        parents: list[str] = []
        named = d.get("parentBlockIds") if isinstance(d.get("parentBlockIds"), list) else ()
        for parent in named[:MAX_BLOCKS]:
            if isinstance(parent, str) and parent in by_cid:
                parents.append(by_cid[parent])
                consumed.add(parent)
            else:
                warn.add(f"line {n}: block {ident} names a parent compaction {clip(parent, 40)} that no earlier "
                         "compaction/summary of this log has; that nesting is not recorded")
        seqs = _message_seqs(d.get("effectiveMessageIds"), MAX_BLOCK_SEQS)
        if seqs is None:
            shadowed = _seq_list(d.get("shadowedSeqs"), MAX_BLOCK_SEQS)
            rng = d.get("shadowedRange")
            if shadowed is None and isinstance(rng, dict) and int_between(rng.get("start"), 0, MAX_SEQ) \
                    and int_between(rng.get("end"), 0, MAX_SEQ) and 0 <= rng["end"] - rng["start"] < MAX_BLOCK_SEQS:
                shadowed = list(range(rng["start"], rng["end"] + 1))
            seqs = []
            for s in shadowed or ():
                inner = by_cid.get(checkpoints.get(s, ""))
                seqs.extend(out[inner].seqs if inner in out else (s,))
        if len(seqs) > MAX_BLOCK_SEQS:
            warn.add(f"line {n}: block {ident} covers over {MAX_BLOCK_SEQS} turns; its turns are not recorded")
            seqs = []
        tier = d.get("tier") if int_between(d.get("tier"), 2, 3) else 1
        topic = d.get("topic")
        topic = one_line(topic)[:MAX_TOPIC_CHARS] or None if isinstance(topic, str) else None
        out[ident] = Block(ident, summary[:MAX_SUMMARY_CHARS], tier, topic, tuple(sorted(set(seqs))),
                           tuple(dict.fromkeys(parents)), cid, where.get(cid, d["_seq"]) if cid else d["_seq"])
        if cid:
            by_cid[cid] = ident
    return tuple(b.with_changes(active=False) if b.compaction_id in consumed else b for b in out.values())


def surface(ops, upto: int | None = None) -> list[int]:
    """The seqs on the surface after replaying ``ops`` (those at or before ``upto``), in the order the model saw.

    A replace names the first and the last surface node it takes (their seqs): the run between them, in surface
    order, gives way to the new node — after an earlier compaction a checkpoint (a later seq) sits before older turns,
    so the run is not a seq range. When the two ends are not both on the surface, the nodes whose seqs lie between
    them are taken instead (read from the log as it is; a log that never says is read as appends)."""
    nodes: list[int] = []
    for seq, lo, hi in ops:
        if upto is not None and seq > upto:
            break
        if lo is None:
            nodes.append(seq)
            continue
        try:
            i, j = nodes.index(lo), nodes.index(hi)
        except ValueError:
            i = j = -1
        if 0 <= i <= j:
            nodes[i:j + 1] = [seq]
            continue
        a, b = min(lo, hi), max(lo, hi)
        at = next((k for k, s in enumerate(nodes) if a <= s <= b), None)
        if at is None:
            nodes.append(seq)
            continue
        nodes = [s for s in nodes[:at] if not a <= s <= b] + [seq] + [s for s in nodes[at:] if not a <= s <= b]
    return nodes
