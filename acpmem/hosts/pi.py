"""Reading pi's session logs, the acp-kernel state billion-context-pi keeps beside them, and omp's fold files — as the
hosts read them.

**A pi session** (``<ISO time>_<uuid>.jsonl``, pi 0.83 and 1.6): line 0 is the header ``{type: "session", version,
id, cwd, parentSession?}``; every other line is an entry ``{type, id, parentId, timestamp, …}``. The session is a
tree: the conversation is the chain of ``parentId``s that ends at the leaf (the last entry appended), and entries of
abandoned branches stay in the file without being part of it. ``seq`` = the entry's line (0-based, the header is
line 0). Messages on the path: ``message`` entries (``user``, ``assistant`` — text, ``thinking`` (not sent back),
``toolCall`` —, ``toolResult``, ``bashExecution`` (``$ command`` and its output; left out when
``excludeFromContext``), ``custom``), ``custom_message`` entries (a user message), ``branch_summary`` entries (the
summary of a branch left behind, a user message on the new branch) and ``compaction`` entries (below). An assistant
message with several tool calls is one message per call, raw id ``<entry id>#<call id>`` (the text on the first), as
billion-context-pi gives the kernel; otherwise the raw id is the entry id. ``openai_messages`` joins the parts
again, as the provider received them. pi 1.x also keeps its system prompt on the path, a ``system`` message (the
prompt, its named sections, the tools it declares) before the first user message; pi-ai's transcript lets a later
one patch the prompt or the tools. They are the harness's instructions, not the conversation: left out, and said
nowhere.

**pi's own compaction** (``{type: "compaction", summary, firstKeptEntryId, tokensBefore, details: {readFiles,
modifiedFiles}}``): on the path, the latest one's summary stands in for everything before ``firstKeptEntryId`` (pi's
``buildContextEntries``: the summary first, then the kept entries, then what followed). It is a compression block
with no kernel id: acpmem names it ``pi-compaction-<entry id>`` (never ``bN``, which only the kernel assigns), tier
unknown, covering the path's messages before the first kept entry, nesting the previous compaction (whose summary
the new one folds in; only the latest is active), ``details`` kept as ``read_files`` / ``modified_files``.

**billion-context-pi's kernel state** (``<session>.jsonl.acp.json``): the bare acp-kernel ``CompressionState``
(``blocks``, ``messageRefs`` …) plus ``liveRefOrigins``; acp-kernel's ``StateStore`` envelope ``{version, savedAt,
id, payload}`` is read too. Covered messages are raw ids (``m00012`` refs resolve through ``messageRefs.byRef``).
A forked session (``parentSession`` in the header) with no blocks of its own reads its parent's file.

**The kernel's view** (acp-kernel ``prune`` then ``hideConsumedCompressCalls``): each active block's summary at the
place of the first message it covers, the messages it covers hidden — except the session's first user message,
always kept; a tool result whose call is hidden goes too, and a call whose result is hidden; ``compress`` calls and
results are hidden unless their block is still active (the newest two calls that made no block stay, so a failed
attempt stays visible). pi's adapter sends a summary as a plain user message, so that is its role here; its id is
``acp_summary_<bN>``. ``view(log, upto)`` replays this for any seq (blocks made later are not there yet; a block
consumed later is still active).

**omp fold files** (``~/.omp/acp-omp-folds/<sha256(id)[:24]>.json``): a ``StateStore`` envelope whose payload is
``{identities, foldedLen, state, coreMessages, appliedCallIds, rejectStreak}``. Its message ids are content hashes
of the provider payload, not entries of any session log: ``read_fold`` reads the blocks and the stored stream
(``coreMessages``), and says that the ids name no session entries.

Broken input is one ``TranscriptError`` line naming the file and line: an entry whose ``parentId`` chain loops, an
id used twice, a kernel state that is not the kernel's JSON.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from acpmem.core.blocks import BLOCK_RE, SUMMARY_HEAD, Block, valid_block_id
from acpmem.core.errors import TranscriptError
from acpmem.core.limits import clip, int_between, one_line
from acpmem.core.values import Value
from acpmem.hosts.dsh import text_of

STATE_SUFFIX = ".acp.json"
COMPACTION_PREFIX = "pi-compaction-"
SUMMARY_ID_PREFIX = "acp_summary_"
COMPACTION_HEAD = "[Earlier conversation, compacted by pi]"
BRANCH_HEAD = "[Summary of a branch of this session that was left]"
MAX_STATE_BYTES = 256 * 1024 * 1024
MAX_BLOCKS = 100_000
MAX_BLOCK_IDS = 2_000_000
MAX_TOPIC_CHARS = 300
MAX_SUMMARY_CHARS = 100_000
MAX_FILES = 10_000
MAX_WARNINGS = 20
KEEP_LAST_ORPHANED = 2        # the kernel keeps the newest two compress calls that made no block
_REF = re.compile(r"m([0-9]{1,9})\Z")
_ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")


class PiMessage(Value):
    """One message the model saw (or would see): ``id`` the raw id the kernel was given, ``entry`` the pi entry it
    comes from, ``kind`` ``text`` / ``tool-call`` / ``tool-result`` (what the kernel's view tells apart), ``call``
    the tool call id of a call or a result, ``tool`` its tool name, ``message`` the OpenAI chat message."""

    seq: int
    id: str
    entry: str
    role: str
    message: dict
    kind: str = "text"
    call: str | None = None
    tool: str | None = None


class Compaction(Value):
    seq: int
    entry: str
    kept: int | None          # the seq of firstKeptEntryId on the path, None when it is not there
    message: PiMessage
    summary: str = ""
    read_files: tuple[str, ...] = ()
    modified_files: tuple[str, ...] = ()


class PiLog(Value):
    """A pi session read: the messages on the live path in order (those a compaction stands in for too), pi's
    compactions on it, the blocks (the kernel's, then pi's compactions), where each kernel block was made (the seq
    of its compress call) and the raw ids it covers, the session id and its parent, warnings."""

    events: tuple[PiMessage, ...]
    compactions: tuple[Compaction, ...]
    blocks: tuple[Block, ...]
    made: tuple[tuple[str, int | None], ...] = ()
    covers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    calls: tuple[tuple[str, str], ...] = ()       # compress call id -> block id
    ranges: tuple[tuple[str, str, str], ...] = ()  # block id, startRef, endRef (what the compress call named)
    session: str | None = None
    parent: str | None = None
    warnings: tuple[str, ...] = ()


class _Notes:
    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[str] = []

    def add(self, text: str) -> None:
        if len(self.items) < MAX_WARNINGS:
            self.items.append(f"{self.source}: {text}")


# ------------------------------------------------------------------------------------------------------ the tree

def looks_like_pi(rows: list[dict]) -> bool:
    if not rows or rows[0].get("type") != "session":
        return False
    return any(o.get("type") in ("message", "compaction", "branch_summary", "custom_message")
               and ("message" in o or "summary" in o or "content" in o) for o in rows[:50])


def live_path(rows: list[tuple[int, dict]], source: str) -> list[tuple[int, dict]]:
    """The leaf's chain of ``parentId``s, root first (pi's ``buildSessionPath`` with the leaf a loaded session
    has: the last entry). Entries without an id (sessions older than version 2) are read as a line."""
    entries = [(n, o) for n, o in rows if o.get("type") != "session"]
    if not entries:
        return []
    by_id: dict[str, tuple[int, dict]] = {}
    parent: dict[str, str | None] = {}
    prev = None
    for n, o in entries:
        ident = o.get("id")
        if not isinstance(ident, str) or not ident:
            ident, par = f"@{n}", prev
        else:
            par = o.get("parentId") if isinstance(o.get("parentId"), str) else None
            if ident in by_id:
                raise TranscriptError(f"{source}:{n + 1}: entry id {clip(ident)} is used twice (first on line "
                                      f"{by_id[ident][0] + 1})", "pass the session file pi wrote, unmodified")
        by_id[ident] = (n, o)
        parent[ident] = par
        prev = ident
    path: list[tuple[int, dict]] = []
    node: str | None = prev
    seen: set[str] = set()
    while node is not None and node in by_id:
        if node in seen:
            raise TranscriptError(f"{source}:{by_id[node][0] + 1}: the entries' parentId chain loops",
                                  "pass the session file pi wrote, unmodified")
        seen.add(node)
        path.append(by_id[node])
        node = parent[node]
    path.reverse()
    return path


# ------------------------------------------------------------------------------------------------------ messages

def _args(value: object) -> str:
    """Tool call arguments as the provider got them: compact JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps({} if value is None else value, ensure_ascii=False, separators=(",", ":"))
    except (ValueError, TypeError, RecursionError):
        return "{}"


def _messages(n: int, entry: str, o: dict, notes: _Notes) -> list[PiMessage]:
    """The messages one entry on the path stands for (none for settings, labels and the like)."""
    kind = o.get("type")
    if kind == "custom_message":
        text = text_of(o.get("content"))
        return [PiMessage(n, entry, entry, "user", {"role": "user", "content": text})]
    if kind == "branch_summary":
        summary = o.get("summary")
        if not isinstance(summary, str) or not summary:
            return []
        text = f"{BRANCH_HEAD}\n{summary}"
        return [PiMessage(n, entry, entry, "user", {"role": "user", "content": text})]
    if kind == "compaction":
        summary = o.get("summary") if isinstance(o.get("summary"), str) else ""
        text = f"{COMPACTION_HEAD}\n{summary}"
        return [PiMessage(n, entry, entry, "user", {"role": "user", "content": text})]
    if kind != "message":
        return []
    m = o.get("message")
    if not isinstance(m, dict):
        notes.add(f"line {n + 1}: message entry without a message; skipped")
        return []
    role, content = m.get("role"), m.get("content")
    if role == "assistant":
        blocks = content if isinstance(content, list) else []
        text = text_of([b for b in blocks if not (isinstance(b, dict) and b.get("type") in ("toolCall", "thinking"))]
                       if isinstance(content, list) else content)
        calls = [b for b in blocks if isinstance(b, dict) and b.get("type") == "toolCall"]
        if not calls:
            return [PiMessage(n, entry, entry, "assistant", {"role": "assistant", "content": text})]
        out = []
        for i, c in enumerate(calls):
            cid = c.get("id") if isinstance(c.get("id"), str) else ""
            name = c.get("name") if isinstance(c.get("name"), str) else ""
            call = {"id": cid, "type": "function", "function": {"name": name, "arguments": _args(c.get("arguments"))}}
            body = (text or None) if i == 0 else None
            raw_id = entry if len(calls) == 1 else f"{entry}#{cid}"
            out.append(PiMessage(n, raw_id, entry, "assistant", {"role": "assistant", "content": body,
                                                                 "tool_calls": [call]}, "tool-call", cid, name))
        return out
    if role == "toolResult":
        cid = m.get("toolCallId") if isinstance(m.get("toolCallId"), str) else ""
        name = m.get("toolName") if isinstance(m.get("toolName"), str) else None
        return [PiMessage(n, entry, entry, "tool", {"role": "tool", "tool_call_id": cid, "content": text_of(content)},
                          "tool-result", cid, name)]
    if role == "bashExecution":
        if m.get("excludeFromContext") is True:
            return []
        command = m.get("command") if isinstance(m.get("command"), str) else ""
        text = "\n".join(p for p in (f"$ {command}", text_of(m.get("output"))) if p)
        return [PiMessage(n, entry, entry, "user", {"role": "user", "content": text})]
    if role in ("user", "custom"):
        return [PiMessage(n, entry, entry, "user", {"role": "user", "content": text_of(content)})]
    if role == "system":   # pi 1.x: the harness's instructions and tools, not the conversation
        return []
    notes.add(f"line {n + 1}: message of role {clip(role)} acpmem does not read; skipped")
    return []


def read_pi(rows: list[tuple[int, dict]], path: Path | None, source: str) -> PiLog:
    """A pi session log (rows already parsed: ``(line index, object)``) and the kernel state beside it."""
    notes = _Notes(source)
    header = rows[0][1] if rows and rows[0][1].get("type") == "session" else {}
    session = header.get("id") if isinstance(header.get("id"), str) else None
    parent = header.get("parentSession") if isinstance(header.get("parentSession"), str) else None
    events: list[PiMessage] = []
    compactions: list[Compaction] = []
    path_seq: dict[str, int] = {}
    for n, o in live_path(rows, source):
        entry = o.get("id") if isinstance(o.get("id"), str) and o.get("id") else f"@{n}"
        path_seq[entry] = n
        msgs = _messages(n, entry, o, notes)
        events.extend(msgs)
        if o.get("type") == "compaction" and msgs:
            first = o.get("firstKeptEntryId")
            kept = path_seq.get(first) if isinstance(first, str) else None
            if kept is None:
                notes.add(f"line {n + 1}: pi compaction keeps from {clip(first)}, which is not on the path: its "
                          "summary stands for everything before it")
            details = o.get("details") if isinstance(o.get("details"), dict) else {}
            summary = o.get("summary") if isinstance(o.get("summary"), str) else ""
            compactions.append(Compaction(n, entry, kept, msgs[0], summary,
                                          _files(details.get("readFiles")), _files(details.get("modifiedFiles"))))
    kernel: tuple[Block, ...] = ()
    made: list[tuple[str, int | None]] = []
    covers: list[tuple[str, tuple[str, ...]]] = []
    calls: list[tuple[str, str]] = []
    ranges: list[tuple[str, str, str]] = []
    if path is not None:
        state = _kernel_state(path, parent)
        if state is not None:
            seq_of = {m.id: m.seq for m in events} | {m.entry: m.seq for m in events}
            kernel = blocks_from_state(state, seq_of, notes)
            call_seq = {m.call: m.seq for m in events if m.kind == "tool-call" and m.call}
            raw = _covered_ids(state)
            for b in kernel:
                cid = raw.get(b.id, ((), None))[1]
                made.append((b.id, call_seq.get(cid) if cid else None))
                covers.append((b.id, raw.get(b.id, ((), None))[0]))
                if cid:
                    calls.append((cid, b.id))
            for b in state.get("blocks") or ():
                if isinstance(b, dict) and isinstance(b.get("startRef"), str) and isinstance(b.get("endRef"), str):
                    ranges.append((b.get("blockId"), b["startRef"], b["endRef"]))
            kernel = tuple(b.with_changes(at=dict(made)[b.id]) for b in kernel)
    blocks = kernel + _compaction_blocks(events, compactions)
    return PiLog(tuple(events), tuple(compactions), blocks, tuple(made), tuple(covers), tuple(calls), tuple(ranges), session,
                 parent, tuple(notes.items))


def _kernel_state(path: Path, parent: str | None) -> dict | None:
    """The kernel state of this session; a fork (``parentSession``) with no blocks of its own has its parent's."""
    own = Path(str(path) + STATE_SUFFIX)
    state = read_kernel_state(own) if own.is_file() else None
    if state is not None and state.get("blocks") or not parent:
        return state
    for candidate in (Path(parent), path.parent / Path(parent).name):
        theirs = Path(str(candidate) + STATE_SUFFIX)
        try:
            found = theirs.is_file() and theirs != own
        except (OSError, ValueError):
            continue
        if found:
            return read_kernel_state(theirs)
    return state


def _files(value: object) -> tuple[str, ...]:
    return tuple(f for f in value[:MAX_FILES] if isinstance(f, str)) if isinstance(value, list) else ()


def compaction_block_id(c: Compaction) -> str:
    """``pi-compaction-<entry id>``: stable (pi never changes an entry's id), and never a kernel ``bN``."""
    return f"{COMPACTION_PREFIX}{c.entry}" if _ENTRY_ID.match(c.entry) else f"{COMPACTION_PREFIX}line-{c.seq}"


def _compaction_blocks(events: list[PiMessage], compactions: list[Compaction]) -> tuple[Block, ...]:
    """pi's compactions on the path as blocks: each covers the path's messages before its first kept entry (the
    compaction summaries among them are nested instead); only the latest is active."""
    out = []
    summaries = {c.seq for c in compactions}
    for k, c in enumerate(compactions):
        limit = c.kept if c.kept is not None else c.seq
        covered = tuple(sorted({m.seq for m in events if m.seq < limit and m.seq not in summaries}))
        nested = (compaction_block_id(compactions[k - 1]),) if k else ()
        out.append(Block(compaction_block_id(c), c.summary[:MAX_SUMMARY_CHARS], None, None, covered, nested,
                         c.entry, c.seq, k == len(compactions) - 1, c.read_files, c.modified_files))
    return tuple(out)


# ------------------------------------------------------------------------------------------------------ kernel state

def read_kernel_state(path: Path) -> dict:
    """A kernel state file: the bare ``CompressionState`` (billion-context-pi's ``.acp.json``, with
    ``liveRefOrigins``) or acp-kernel's ``StateStore`` envelope (``payload`` holding it, or holding ``state`` as
    omp's fold files do). Returns the state mapping (``blocks``, ``messageRefs`` …)."""
    doc = _read_json(path, "kernel state")
    if isinstance(doc, dict) and _is_envelope(doc):
        doc = doc["payload"]
        if isinstance(doc.get("state"), dict) and "blocks" not in doc:
            doc = doc["state"]
    if not isinstance(doc, dict) or not isinstance(doc.get("blocks", []), list):
        raise TranscriptError(f"{path}: not a kernel state (no \"blocks\" list)",
                              "pass the <session>.jsonl.acp.json or the fold file the host wrote")
    return doc


def _is_envelope(doc: dict) -> bool:
    return isinstance(doc.get("payload"), dict) and "savedAt" in doc and "version" in doc


def _read_json(path: Path, what: str):
    source = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_STATE_BYTES:
            raise TranscriptError(f"{source}: {what} is over {MAX_STATE_BYTES} bytes", "pass the host's file")
        with open(path, "rb") as fh:
            data = fh.read(MAX_STATE_BYTES + 1)
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TranscriptError(f"{source}: {what} is not UTF-8 text", "pass the host's unmodified file") from None
    except OSError as exc:
        raise TranscriptError(f"{source}: cannot read the {what} ({exc.strerror})", "check the path") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TranscriptError(f"{source}:{exc.lineno}: {what} is not valid JSON ({exc.msg})",
                              "the file is damaged or still being written; the host rewrites it atomically") from None
    except ValueError:
        raise TranscriptError(f"{source}: {what} holds a number too long to read", "pass the host's file") from None
    except RecursionError:
        raise TranscriptError(f"{source}: {what} is nested too deeply to read", "pass the host's file") from None


def _raw_ids(b: dict, by_ref: dict) -> list[str]:
    ids = b.get("effectiveMessageIds") if isinstance(b.get("effectiveMessageIds"), list) else []
    out = []
    for raw in ids[:MAX_BLOCK_IDS]:
        if not isinstance(raw, str):
            continue
        if _REF.match(raw) and isinstance(by_ref.get(raw), str):
            raw = by_ref[raw]
        out.append(raw)
    return out


def _covered_ids(state: dict) -> dict[str, tuple[tuple[str, ...], str | None]]:
    """block id -> (the raw message ids it covers, its compress call id)."""
    refs = state.get("messageRefs") if isinstance(state.get("messageRefs"), dict) else {}
    by_ref = refs.get("byRef") if isinstance(refs.get("byRef"), dict) else {}
    out = {}
    for b in state.get("blocks") or ():
        if isinstance(b, dict) and valid_block_id(b.get("blockId")) and b["blockId"] not in out:
            cid = b.get("compressCallId") if isinstance(b.get("compressCallId"), str) else None
            out[b["blockId"]] = (tuple(_raw_ids(b, by_ref)), cid)
    return out


def blocks_from_state(state: dict, seq_of: dict[str, int] | None, notes: _Notes | None = None) -> tuple[Block, ...]:
    """The blocks of a kernel state; covered raw message ids become seqs through ``seq_of`` (raw id or entry id ->
    seq; ``m00012`` refs through ``messageRefs``). Ids of messages not in the log are dropped (the block keeps the
    rest); with ``seq_of`` None the block covers no known turns (omp: content-hash ids)."""
    refs = state.get("messageRefs") if isinstance(state.get("messageRefs"), dict) else {}
    by_ref = refs.get("byRef") if isinstance(refs.get("byRef"), dict) else {}
    out: list[Block] = []
    seen: set[str] = set()
    for i, b in enumerate(state.get("blocks") or ()):
        if len(out) >= MAX_BLOCKS:
            break
        if not isinstance(b, dict) or not isinstance(b.get("blockId"), str) or not valid_block_id(b["blockId"]) \
                or not BLOCK_RE.match(b["blockId"]) or b["blockId"] in seen or not isinstance(b.get("summary"), str):
            if notes is not None:
                notes.add(f"kernel state block {i + 1} is not a block acpmem can read; skipped")
            continue
        seen.add(b["blockId"])
        seqs = set()
        for raw in _raw_ids(b, by_ref) if seq_of is not None else ():
            seq = seq_of.get(raw, seq_of.get(raw.split("#", 1)[0]))
            if seq is not None:
                seqs.add(seq)
        tier = b.get("tier") if int_between(b.get("tier"), 1, 3) else None
        topic = b.get("topic")
        topic = (one_line(topic)[:MAX_TOPIC_CHARS] or None) if isinstance(topic, str) else None
        nested = tuple(x for x in b.get("directBlockIds") or () if valid_block_id(x)) \
            if isinstance(b.get("directBlockIds"), list) else ()
        out.append(Block(b["blockId"], b["summary"][:MAX_SUMMARY_CHARS], tier, topic, tuple(sorted(seqs)),
                         nested, None, None, b.get("active") is not False))
    return tuple(out)


# ------------------------------------------------------------------------------------------------------ the view

def view(log: PiLog, upto: int | None = None) -> tuple[PiMessage, ...]:
    """The messages the model saw at ``upto`` (the end when None): pi's context (the latest compaction's summary
    in place of what it compacted), then the kernel's view of it (see the module's docstring)."""
    events = [m for m in log.events if upto is None or m.seq <= upto]
    compaction = next((c for c in reversed(log.compactions) if upto is None or c.seq <= upto), None)
    if compaction is not None:
        kept = compaction.kept if compaction.kept is not None else compaction.seq
        msgs = [compaction.message] + [m for m in events if kept <= m.seq < compaction.seq] + \
            [m for m in events if m.seq > compaction.seq]
    else:
        msgs = events
    return _kernel_view(log, msgs, upto)


def _kernel_view(log: PiLog, msgs: list[PiMessage], upto: int | None) -> tuple[PiMessage, ...]:
    kernel = [b for b in log.blocks if not b.id.startswith(COMPACTION_PREFIX)]
    if not kernel:
        return tuple(msgs)
    made = dict(log.made)
    known = [b for b in kernel if upto is None or made.get(b.id) is None or made[b.id] <= upto]
    if upto is None or len(known) == len(kernel):
        active = [b for b in known if b.active]
    else:
        consumed = {x for b in known for x in b.nested}
        active = [b for b in known if b.id not in consumed]
    covers = dict(log.covers)
    covered = {i for b in active for i in covers.get(b.id, ())}
    first_user = next((i for i, m in enumerate(msgs) if m.role == "user"), -1)
    index = {m.id: i for i, m in enumerate(msgs)}
    anchors = []
    for b in active:
        at = [index[i] for i in covers.get(b.id, ()) if i in index]
        anchors.append((min(at) if at else 0, b))
    anchors.sort(key=lambda a: a[0])
    out: list[PiMessage] = []
    pending = list(anchors)
    for i, m in enumerate(msgs):
        while pending and pending[0][0] == i:
            out.append(_summary(pending.pop(0)[1], m.seq))
        if i == first_user or m.id not in covered:
            out.append(m)
    out.extend(_summary(b, msgs[-1].seq if msgs else 0) for _, b in pending)
    out = _strip_orphans(out, [m for m in log.events if upto is None or m.seq <= upto])
    return tuple(_hide_consumed(log, out, known, active))


def _summary(b: Block, seq: int) -> PiMessage:
    head = f"{SUMMARY_HEAD} — {b.topic}" if b.topic else SUMMARY_HEAD
    body = b.summary.strip()
    text = f"{head}\n{body}" if body else head
    return PiMessage(seq, f"{SUMMARY_ID_PREFIX}{b.id}", f"{SUMMARY_ID_PREFIX}{b.id}", "user",
                     {"role": "user", "content": text})


def _strip_orphans(msgs: list[PiMessage], events: list[PiMessage]) -> list[PiMessage]:
    """A result whose call is not shown goes; so does a call (not ``compress``) whose result the log has but the
    view does not show. A call still waiting for its result (the last one) stays."""
    calls = {m.call for m in msgs if m.kind == "tool-call" and m.call}
    msgs = [m for m in msgs if m.kind != "tool-result" or not m.call or m.call in calls]
    answered = {m.call for m in events if m.kind == "tool-result" and m.call}
    shown = {m.call for m in msgs if m.kind == "tool-result" and m.call}
    return [m for m in msgs if m.kind != "tool-call" or not m.call or m.tool == "compress" or m.call in shown
            or m.call not in answered]


def _hide_consumed(log: PiLog, msgs: list[PiMessage], known: list[Block], active: list[Block]) -> list[PiMessage]:
    block_of = dict(log.calls)
    known_ids = {b.id for b in known}
    made_calls = {c for c, b in block_of.items() if b in known_ids}
    live = {c for c, b in block_of.items() if b in {x.id for x in active}}
    orphans: list[str] = []
    for m in reversed(msgs):
        if len(orphans) >= KEEP_LAST_ORPHANED:
            break
        if m.tool == "compress" and m.kind == "tool-call" and m.call and m.call not in made_calls:
            orphans.append(m.call)
    keep = live | set(orphans)
    hidden = {m.call for m in msgs if m.tool == "compress" and m.kind == "tool-call" and m.call not in keep}
    out = []
    for m in msgs:
        if m.tool == "compress" and m.kind == "tool-call" and m.call not in keep:
            continue
        if m.kind == "tool-result" and m.call and m.call in hidden:
            continue
        if m.tool == "compress" and m.kind == "tool-call" and m.call in live:
            m = _live_ranges(m, [b.id for b in active if b.id in {x for c, x in log.calls if c == m.call}], log)
        out.append(m)
    return out


def _live_ranges(m: PiMessage, live: list[str], log: PiLog) -> PiMessage:
    """A compress call that made several blocks, some consumed since: its arguments keep the live ranges only
    (as the kernel rewrites them; a call whose blocks do not record their ranges is left as it is)."""
    ranges = {b: (s, e) for b, s, e in log.ranges}
    if not live or any(b not in ranges for b in live):
        return m
    keys = {ranges[b] for b in live}
    call = m.message["tool_calls"][0]
    try:
        args = json.loads(call["function"]["arguments"])
    except (ValueError, RecursionError):
        return m
    content = args.get("content") if isinstance(args, dict) else None
    if not isinstance(content, list) or not content:
        return m

    def key(entry):
        one = entry.get("messageId") if isinstance(entry.get("messageId"), str) else ""
        start = entry.get("startId") if isinstance(entry.get("startId"), str) else one
        end = entry.get("endId") if isinstance(entry.get("endId"), str) else one
        return start, end

    kept = [e for e in content if isinstance(e, dict) and key(e) in keys]
    if not kept or len(kept) == len(content):
        return m
    text = json.dumps({**args, "content": kept}, ensure_ascii=False, separators=(",", ":"))
    message = {**m.message, "tool_calls": [{**call, "function": {**call["function"], "arguments": text}}]}
    return m.with_changes(message=message)


# ------------------------------------------------------------------------------------------------------ omp

class Fold(Value):
    """An omp fold file read: the blocks (covering positions in ``messages``, the stream the fold stored) and that
    stream as ``(id, role, text)``."""

    blocks: tuple[Block, ...]
    messages: tuple[tuple[str, str, str], ...]
    id: str | None
    warnings: tuple[str, ...] = ()


def looks_like_fold(doc: object) -> bool:
    return isinstance(doc, dict) and _is_envelope(doc) and isinstance(doc["payload"].get("state"), dict) \
        and isinstance(doc["payload"].get("coreMessages"), list)


def read_fold(path: Path, doc: dict | None = None) -> Fold:
    """An omp fold file (a ``StateStore`` envelope holding ``{identities, foldedLen, state, coreMessages, …}``)."""
    source = str(path)
    if doc is None:
        doc = _read_json(path, "fold file")
    if not looks_like_fold(doc):
        raise TranscriptError(f"{source}: not an omp fold file (a StateStore envelope with state and coreMessages)",
                              "pass a file from ~/.omp/acp-omp-folds/")
    payload = doc["payload"]
    notes = _Notes(source)
    stream = []
    for i, m in enumerate(payload["coreMessages"][:MAX_BLOCK_IDS]):
        if isinstance(m, dict) and isinstance(m.get("id"), str):
            stream.append((m["id"], m.get("role") if isinstance(m.get("role"), str) else "?",
                           m.get("text") if isinstance(m.get("text"), str) else ""))
    position = {ident: i for i, (ident, _, _) in reversed(list(enumerate(stream)))}
    blocks = blocks_from_state(payload["state"], position, notes)
    notes.add("omp names messages by content hashes of the provider payload, not by session entries: a block's "
              "turns are positions in the stream the fold file stored (coreMessages), and no session log holds them")
    ident = doc.get("id") if isinstance(doc.get("id"), str) else None
    return Fold(blocks, tuple(stream), ident, tuple(notes.items))
