"""Reading the compression hosts' session logs: DSH's event log (pi's session log and kernel state: ``pilogs``).

Returns plain parts (``HostLog``: the message events as OpenAI chat messages with their seqs, the surface changes,
the compression blocks, warnings); ``acpmem.write.transcripts`` turns them into a ``Transcript`` and finds them by
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
READ_CHUNK = 4096             # compressed bytes per step: bounds what one step can inflate to
DSH_MESSAGES = ("user/message", "assistant/message", "tool/result")
DSH_KNOWN = (*DSH_MESSAGES, "session", "compaction/start", "compaction/summary", "compaction/end")
_MSG_ID = re.compile(r"([0-9]{1,19})(?:#.*)?\Z", re.S)
_REF = re.compile(r"m([0-9]{1,9})\Z")
_SEQ_PREFIX = re.compile(r'\{"seq":\s?([0-9]{1,18}),')
_SEQ_TYPE = re.compile(r'\{"seq":\s?([0-9]{1,18}),\s?(?:"time":\s?[0-9]{1,18},\s?)?"type":\s?"([a-z/]{1,40})"')


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

    def done(self) -> tuple[str, ...]:
        if self.unknown:
            kinds = ", ".join(f"{k} ×{n}" for k, n in sorted(self.unknown.items())[:8])
            self.add(f"skipped events of types acpmem does not read ({kinds})")
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


def iter_lines(path: Path, source: str, warn: _Warnings):
    """``(line number, text)`` for each line of a plain or zstd-compressed file, streamed; a last line without its
    newline is yielded with number ``-n`` (it may be half-written)."""
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
        buf = bytearray()
        n = 0
        total = 0
        for chunk in chunks:
            total += len(chunk)
            if total > MAX_LOG_BYTES:
                raise TranscriptError(f"{source}: session log holds over {MAX_LOG_BYTES} bytes of text",
                                      "pass a smaller log")
            buf += chunk
            start = 0
            while True:
                nl = buf.find(b"\n", start)
                if nl < 0:
                    break
                n += 1
                yield n, _check_line(bytes(buf[start:nl]), n, source)
                start = nl + 1
            del buf[:start]
            if len(buf) > MAX_LINE_BYTES:
                _check_line(bytes(buf), n + 1, source)
        if buf.strip():
            n += 1
            yield -n, _check_line(bytes(buf), n, source)


def _text_lines(text: str):
    lines = text.split("\n")
    for i, line in enumerate(lines):
        yield (-(i + 1) if i == len(lines) - 1 else i + 1), line


def _zstd_chunks(fh, source: str, warn: _Warnings):
    """Decompressed chunks of a zstd file of one or more frames; a corrupt frame is an error, a file that ends
    mid-frame a warning (the host may still be writing)."""
    try:
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

def read_dsh(path: Path | None, source: str, text: str | None = None, *, only=None) -> HostLog:
    """Read a DSH event log (zstd-compressed or plain JSONL) from ``path``, streamed, or from ``text``.

    ``only``: a set of seqs: keep only those message events (every block is still read, and no surface is
    replayed). A line that starts with its seq (``{"seq":N,`` — how DSH writes them) and names no compaction is then
    skipped unparsed: checking a block at commit time, or reading a few cited turns, costs a scan, not a parse."""
    warn = _Warnings(source)
    lines = iter_lines(path, source, warn) if text is None else _text_lines(text)
    events: list[HostMessage] = []
    ops: list[tuple] = []
    blocks: dict[str, Block] = {}
    by_compaction: dict[str, str] = {}     # compactionId -> block id
    checkpoints: dict[int, str] = {}        # checkpoint seq -> compactionId
    session = None
    prev = -1
    count = 0
    summaries = 0
    for n, line in lines:
        last = n < 0
        n = abs(n)
        if not line.strip():
            continue
        if only is not None and "compact" not in line:
            m = _SEQ_PREFIX.match(line)
            if m and int(m[1]) not in only and prev < int(m[1]) <= MAX_SEQ and count < MAX_EVENTS:
                prev = int(m[1])
                count += 1
                continue
        where = f"{source}:{n}"
        try:
            obj = _load_json(line, where)
        except json.JSONDecodeError as exc:
            if last:
                warn.add(f"line {n}: the last line is cut off (half-written); skipped")
                break
            raise TranscriptError(f"{where}: not valid JSON ({exc.msg})", "pass the host's unmodified session log") \
                from None
        if not isinstance(obj, dict):
            raise TranscriptError(f"{where}: expected a JSON object, got {type(obj).__name__}",
                                  "each line of a DSH log is one event")
        count += 1
        if count > MAX_EVENTS:
            raise TranscriptError(f"{source}: session log has over {MAX_EVENTS} events", "pass a smaller log")
        seq = obj.get("seq", prev + 1)
        if not int_between(seq, 0, MAX_SEQ) or seq <= prev:
            raise TranscriptError(f"{where}: seq {clip(seq)} does not follow seq {prev}",
                                  "seqs of a DSH log increase from 0; pass the host's unmodified log")
        prev = seq
        kind = obj.get("type")
        data = obj.get("data")
        if kind == "session":
            if isinstance(obj.get("id"), str):
                session = obj["id"]
            continue
        if kind not in DSH_KNOWN:
            key = kind if isinstance(kind, str) else type(kind).__name__
            warn.unknown[clip(key, 40)] = warn.unknown.get(clip(key, 40), 0) + 1
            continue
        if not isinstance(data, dict):
            warn.add(f"line {n}: {kind} event without a data object; skipped")
            continue
        if kind in DSH_MESSAGES:
            src = data.get("source") if kind == "user/message" else None
            is_cp = isinstance(src, dict) and (src.get("plugin") == "compact"
                                               or src.get("kind") == "compact-checkpoint")
            if only is not None and seq not in only and not is_cp:
                continue
            msg = _dsh_message(kind, data)
            if msg is None:
                warn.add(f"line {n}: {kind} event without content; skipped")
                continue
            cp = None
            if is_cp:
                cp = src.get("compactionId") if isinstance(src.get("compactionId"), str) else ""
                checkpoints[seq] = cp
                if only is not None and seq not in only:
                    continue
            events.append(HostMessage(seq, msg["role"], msg, cp))
            if only is None:
                ops.append(_surface_op(seq, obj.get("surfaceOp"), warn, n))
        elif kind == "compaction/summary":
            summaries += 1
            if len(blocks) >= MAX_BLOCKS:
                raise TranscriptError(f"{source}: session log has over {MAX_BLOCKS} compactions", "pass a smaller log")
            b = _dsh_block(data, seq, summaries, blocks, by_compaction, checkpoints, warn, n)
            if b is not None:
                for old in b.nested:
                    if old in blocks:
                        blocks[old] = blocks[old].with_changes(active=False)
                blocks[b.id] = b
                if b.compaction_id:
                    by_compaction[b.compaction_id] = b.id
    return HostLog("dsh", tuple(events), tuple(ops) if only is None else None, tuple(blocks.values()), session,
                   warn.done())


def last_message_seq(path: Path, source: str) -> int | None:
    """The seq of the last message event (user, assistant, tool result) of a DSH log, or None when it has none:
    what the MCP server cites when the host passes no ``acpmem/seq``.

    A bounded scan, streamed like ``read_dsh`` and with its limits (line and log size, event count, seqs that must
    increase), but no message is built: a line that starts with its seq, time and type (``{"seq":N,"time":T,
    "type":"…"`` — how DSH writes them) is not parsed; other lines are, for their seq and type only. A cut last line
    does not count. A message event the reader skips as malformed counts here: the conversation up to its seq is
    the same as up to the message before it."""
    warn = _Warnings(source)
    prev = -1
    count = 0
    found = None
    for n, line in iter_lines(path, source, warn):
        cut = n < 0
        n = abs(n)
        if not line.strip():
            continue
        m = _SEQ_TYPE.match(line)
        if m is not None and not cut:
            seq, kind = int(m[1]), m[2]
        else:
            where = f"{source}:{n}"
            try:
                obj = _load_json(line, where)
            except json.JSONDecodeError as exc:
                if cut:
                    break
                raise TranscriptError(f"{where}: not valid JSON ({exc.msg})",
                                      "pass the host's unmodified session log") from None
            if not isinstance(obj, dict):
                raise TranscriptError(f"{where}: expected a JSON object, got {type(obj).__name__}",
                                      "each line of a DSH log is one event")
            seq, kind = obj.get("seq", prev + 1), obj.get("type")
        count += 1
        if count > MAX_EVENTS:
            raise TranscriptError(f"{source}: session log has over {MAX_EVENTS} events", "pass a smaller log")
        if not int_between(seq, 0, MAX_SEQ) or seq <= prev:
            raise TranscriptError(f"{source}:{n}: seq {clip(seq)} does not follow seq {prev}",
                                  "seqs of a DSH log increase from 0; pass the host's unmodified log")
        prev = seq
        if kind in DSH_MESSAGES:
            found = seq
    return found


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
        return _assistant(content, "tool-call")
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
        lo = op.get("startSeq", op.get("start"))
        hi = op.get("endSeq", op.get("end"))
        if int_between(lo, 0, MAX_SEQ) and int_between(hi, 0, MAX_SEQ):
            return (seq, lo, hi)
    warn.add(f"line {n}: surfaceOp {clip(op)} is not append or replace; read as append")
    return (seq, None, None)


def _seq_list(value: object, limit: int) -> list[int] | None:
    """``[2, 3, [5, 9]]`` (ranges compressed as pairs) as seqs; None when it is not one."""
    if not isinstance(value, list):
        return None
    out: list[int] = []
    for item in value:
        if int_between(item, 0, MAX_SEQ):
            out.append(item)
        elif (isinstance(item, list) and len(item) == 2 and int_between(item[0], 0, MAX_SEQ)
              and int_between(item[1], 0, MAX_SEQ) and item[0] <= item[1]):
            if len(out) + item[1] - item[0] >= limit:
                return None
            out.extend(range(item[0], item[1] + 1))
        else:
            return None
        if len(out) > limit:
            return None
    return out


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


def _dsh_block(data: dict, seq: int, number: int, blocks: dict, by_compaction: dict, checkpoints: dict,
               warn: _Warnings, n: int) -> Block | None:
    summary = text_of(data.get("summary"))
    if not summary.strip():
        warn.add(f"line {n}: compaction/summary without a summary; skipped")
        return None
    cid = data.get("compactionId")
    cid = cid if isinstance(cid, str) and COMPACTION_RE.match(cid) else None
    ident = data.get("kernelBlockId")
    if not valid_block_id(ident):
        ident = f"b{number}"
    if ident in blocks:
        warn.add(f"line {n}: block id {ident} appears twice; the later one is kept")
    nested = [b for b in data.get("parentBlockIds") or () if valid_block_id(b) and b in blocks] \
        if isinstance(data.get("parentBlockIds"), list) else []
    seqs = _message_seqs(data.get("effectiveMessageIds"), MAX_BLOCK_SEQS)
    shadowed = _seq_list(data.get("shadowedSeqs"), MAX_BLOCK_SEQS)
    if shadowed is None:
        rng = data.get("shadowedRange")
        if isinstance(rng, dict) and int_between(rng.get("start"), 0, MAX_SEQ) \
                and int_between(rng.get("end"), 0, MAX_SEQ) and 0 <= rng["end"] - rng["start"] < MAX_BLOCK_SEQS:
            shadowed = list(range(rng["start"], rng["end"] + 1))
    expanded: list[int] = []
    for s in shadowed or ():
        inner = by_compaction.get(checkpoints.get(s, "")) if s in checkpoints else None
        if inner and inner in blocks:   # a checkpoint of an earlier compaction: what it covered, and nesting
            expanded.extend(blocks[inner].seqs)
            if inner not in nested:
                nested.append(inner)
        else:
            expanded.append(s)
    if seqs is None:
        seqs = expanded
    if len(seqs) > MAX_BLOCK_SEQS:
        warn.add(f"line {n}: block {ident} covers over {MAX_BLOCK_SEQS} turns; its turns are not recorded")
        seqs = []
    tier = data.get("tier")
    if not int_between(tier, 1, 3):
        tier = min(3, min(blocks[b].tier or 1 for b in nested) + 1) if nested else 1
    topic = data.get("topic")
    topic = one_line(topic)[:MAX_TOPIC_CHARS] or None if isinstance(topic, str) else None
    return Block(ident, summary[:MAX_SUMMARY_CHARS], tier, topic, tuple(sorted(set(seqs))), tuple(nested), cid, seq)


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
