"""Reading host transcripts, and turning them into the OpenAI chat messages the fork sends.

Owns four input shapes — OpenAI chat JSON (a list or ``{"messages": [...]}``), Anthropic Messages JSON (content blocks and a
top-level ``system``), JSONL with one message per line (either dialect), and Claude Code session JSONL (one event per line,
the message nested under ``"message"``, events chained by ``uuid``/``parentUuid``) — plus the hosts' own logs (DSH,
pi, Codex rollouts: ``acpmem.hosts``) — and one output shape: OpenAI chat messages. Pure functions over text; the
only I/O is reading the one file named by the caller.

Seq: a message's ``seq`` is the host's event index when the host wrote one (a ``seq`` key on the message), else its
position: the index in the message list for JSON and plain JSONL, the 0-based line number for Claude Code (every line is an
event there, so line numbers stay stable while the file grows).
"""
from __future__ import annotations

import json
import stat
from pathlib import Path

from acpmem.core.blocks import Block, summary_message
from acpmem.core.errors import TranscriptError
from acpmem.core.limits import MAX_SEQ, clip, int_between
from acpmem.core.values import Value
from acpmem.hosts.codex import join, looks_like_codex, read_codex
from acpmem.hosts.dsh import is_zstd, last_message_seq, looks_like_dsh, read_dsh, surface
from acpmem.hosts.pi import looks_like_fold, looks_like_pi, read_fold, read_pi, view

FORMATS = ("auto", "openai", "anthropic", "jsonl", "claude-code", "dsh", "pi", "codex")
MAX_BYTES = 256 * 1024 * 1024
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# Keys the host adds for its own bookkeeping; the model never saw them, so they are not sent.
_BOOKKEEPING = ("seq",)
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking", "document",
                               "server_tool_use", "web_search_tool_result"})


class Message(Value):
    """One conversation message: its seq, role, content as the host wrote it, and the whole original record."""

    seq: int
    role: str
    content: str | list | None
    raw: dict
    id: str | None = None    # the host's raw message id, where it has one (pi: the entry id, ``<entry>#<call>``)


class Transcript(Value):
    """A conversation in the order the model saw it.

    ``format`` is the message dialect: ``openai``, ``anthropic`` or ``claude-code``; ``container`` is ``json``,
    ``jsonl``, ``dsh`` (a DSH event log), ``pi`` (a pi session log) or ``codex`` (a Codex rollout: all three read as
    OpenAI messages);
    ``system`` is the Anthropic top-level system prompt (OpenAI keeps it as a message). ``blocks``: the compression
    blocks found (``acpmem.core.blocks.Block``); ``events``: for Claude Code, DSH and pi every message event, shadowed
    ones too (``turns`` reads from them); ``ops``: DSH's surface changes, replayed by ``upto``.
    """

    messages: tuple[Message, ...]
    format: str
    container: str = "json"
    system: str | list | None = None
    source: str = "<text>"
    # Claude Code only: every message event in file order, so upto() can follow the branch that was live at that seq.
    events: tuple[Message, ...] = ()
    links: dict | None = None  # uuid -> parentUuid over all events
    blocks: tuple = ()
    ops: tuple | None = None
    warnings: tuple[str, ...] = ()
    host: object = None      # pi: the session read (``acpmem.hosts.pi.PiLog``), replayed by upto()
    _hidden = ("events", "links", "ops", "warnings", "host")   # left out of comparison and repr

    def upto(self, seq: int) -> "Transcript":
        """The prefix the fork sees: every message up to and including ``seq`` — for a DSH log, the surface the model
        saw at ``seq`` (compaction checkpoints in place of the turns they replaced)."""
        if self.format == "claude-code" and self.events:
            msgs = _active_branch(tuple(m for m in self.events if m.seq <= seq), self.links)
        elif self.ops is not None:
            msgs = _surface_messages(self.events, self.ops, seq)
        elif self.host is not None:
            msgs = _pi_view(self.host, seq)
        else:
            msgs = tuple(m for m in self.messages if m.seq <= seq)
        return self.with_changes(messages=msgs)

    @property
    def last_seq(self) -> int | None:
        pool = self.events or self.messages
        return max(m.seq for m in pool) if pool else None

    def block(self, block_id: str):
        """The compression block ``block_id``; ``TranscriptError`` when there is none (naming those there are)."""
        for b in self.blocks:
            if b.id == block_id:
                return b
        if self.blocks and all(b.id is None for b in self.blocks):
            raise TranscriptError(f"{self.source}: its {len(self.blocks)} compression summar"
                                  f"{'y carries' if len(self.blocks) == 1 else 'ies carry'} no block id (the id is "
                                  f"lost on the wire), so {clip(block_id)} cannot be found",
                                  "pass the host's state instead: the pi session log with its .acp.json beside it, "
                                  "the omp fold file or the DSH log — or commit without --block")
        if not self.blocks:
            note = f" (and {self.warnings[0].split(': ', 1)[-1]})" if self.warnings else ""
            raise TranscriptError(f"{self.source}: has no compression blocks, so there is no block "
                                  f"{clip(block_id)}{note}",
                                  "commit without --block, or pass the host's session log that has its compactions")
        named = [b.id for b in self.blocks if b.id is not None]
        lost = len(self.blocks) - len(named)
        known = ", ".join(named[:12]) + (" …" if len(named) > 12 else "")
        if lost:
            known += f", and {lost} whose id was lost on the wire"
        raise TranscriptError(f"{self.source}: no compression block {clip(block_id)} (it has {known})",
                              "name one of its blocks" + (", or pass the host's state (the pi session log with its "
                                                          ".acp.json, the omp fold file, the DSH log)" if lost else ""))

    def turns(self, seqs) -> tuple[Message, ...]:
        """The messages with these seqs, shadowed ones included, in seq order."""
        want = set(seqs)
        return tuple(m for m in (self.events or self.messages) if m.seq in want)

    def text(self, message: Message) -> str:
        """The readable text of one message (text blocks, tool calls and results flattened), for search and display."""
        return _plain_text(message.content, message.raw)


def read_transcript(path_or_text: str | Path, format: str = "auto", *, turns=None) -> Transcript:
    """Read a transcript from a file path (``Path`` or an existing path string) or from the text itself.

    ``format`` is ``auto`` (detect), ``openai``, ``anthropic``, ``jsonl`` (one message per line, dialect detected),
    ``claude-code``, ``dsh`` (a DSH event log, zstd-compressed or not), ``pi`` (a pi session log; its kernel state
    is read from ``<log>.acp.json`` beside it) or ``codex`` (a Codex rollout, ``acpmem.hosts.codex``). ``turns``: a
    set of seqs — for a DSH log, read only those messages (and every block; the result has no surface to replay):
    what checking a block or showing cited turns needs.
    Raises ``TranscriptError`` naming the file and line.
    """
    if format not in FORMATS:
        raise TranscriptError(f"Unknown transcript format '{format}'", f"use one of: {', '.join(FORMATS)}")
    dsh = _dsh_file(path_or_text, format)
    if dsh is not None:
        only = frozenset(turns) if turns is not None else None
        return _from_hostlog(read_dsh(dsh, str(dsh), only=only), str(dsh), "dsh", partial=only is not None)
    text, source = _load(path_or_text)
    stripped = text.strip()
    if not stripped:
        raise TranscriptError(f"{source}: transcript is empty", "pass the file the host wrote for this session")

    if format in ("auto", "openai", "anthropic") and stripped[0] in "[{":
        try:
            doc = _loads(stripped, source)
        except json.JSONDecodeError as exc:
            if format != "auto" or stripped[0] == "[" or "\n" not in stripped:
                raise TranscriptError(f"{source}:{exc.lineno}: not valid JSON ({exc.msg})",
                                      "check the file is complete, or pass --format jsonl for one message per line") from None
            doc = None  # several lines of JSON objects: JSONL
        if isinstance(doc, list) or (isinstance(doc, dict) and "messages" in doc):
            return _from_chat_doc(doc, format, source)
        if format == "auto" and isinstance(doc, dict) and ("payload" in doc or "messageRefs" in doc):
            if looks_like_fold(doc):
                return _from_fold(Path(source), doc)
            if isinstance(doc.get("blocks"), list):
                raise TranscriptError(f"{source}: this is a kernel state (billion-context-pi's .acp.json), not a "
                                      "session", "pass the pi session log it sits beside (the same name without "
                                      ".acp.json): acpmem reads the state from there")
        if doc is not None and format != "auto":
            raise TranscriptError(f"{source}: expected a list of messages or an object with \"messages\"",
                                  "pass the conversation as OpenAI or Anthropic chat JSON")
    if format in ("openai", "anthropic"):
        raise TranscriptError(f"{source}: expected a JSON list of messages or an object with \"messages\"",
                              "pass --format jsonl or claude-code for line-per-record files")
    if format == "dsh":
        return _from_hostlog(read_dsh(None, source, text), source, "dsh")
    return _from_jsonl(text, format, source)


def last_seq(path: str | Path, reaching: int | None = None) -> int | None:
    """The seq of the last message of the transcript at ``path``: ``read_transcript(path).last_seq``, with the same
    errors. A DSH log is scanned, not read (``acpmem.hosts.dsh.last_message_seq``: no message is built, memory
    stays flat however long the log); other formats are read — and, with ``reaching``, a ``TranscriptError`` where
    the conversation up to that seq (what the fork sees) holds no message: a seq before the first one."""
    dsh = _dsh_file(path, "auto")
    if dsh is not None:
        last = last_message_seq(dsh, str(dsh))
        if last is None:
            raise TranscriptError(f"{dsh}: no messages in this session log", "pass the session's log file")
        return last
    t = read_transcript(path)
    if reaching is not None and t.messages and not t.upto(reaching).messages:
        first = min(m.seq for m in t.events or t.messages)
        raise TranscriptError(f"{path}: no message at or before seq {reaching} (the transcript starts at seq {first})",
                              f"pass the seq of the memory_commit call (at least {first}), or the transcript that "
                              "holds it")
    return t.last_seq


def openai_messages(transcript: Transcript) -> list[dict]:
    """The conversation as OpenAI chat messages.

    OpenAI input is returned unchanged (same dicts' content, same order, minus the host's ``seq`` bookkeeping key), so the
    fork's request repeats the main conversation byte for byte and the provider's prefix cache hits. Anthropic and Claude
    Code input is converted faithfully: system → system message, text blocks → text, ``tool_use`` → ``tool_calls``,
    ``tool_result`` → ``tool`` messages placed right after the call, images kept, thinking blocks dropped (the provider
    does not accept them back).
    """
    if transcript.format == "openai" and transcript.container == "pi":
        return _pi_joined(transcript.messages)
    if transcript.container == "codex":
        return join([m.raw for m in transcript.messages])
    if transcript.format == "openai":
        return [_strip_bookkeeping(m.raw) for m in transcript.messages]
    out: list[dict] = []
    if transcript.system:
        out.append({"role": "system", "content": _text_of_blocks(transcript.system)})
    merged_id = None
    for m in transcript.messages:
        converted = _anthropic_to_openai(m.role, m.content)
        # Claude Code writes one line per content block of a streamed reply, all with the same message id: one reply.
        msg_id = (m.raw.get("message") or {}).get("id") if transcript.format == "claude-code" else None
        if (msg_id and msg_id == merged_id and m.role == "assistant" and out and out[-1]["role"] == "assistant"
                and len(converted) == 1):
            _merge_assistant(out[-1], converted[0])
            continue
        merged_id = msg_id if m.role == "assistant" else None
        out.extend(converted)
    return out


def close_tool_calls(messages: list[dict], result_text: str) -> list[dict]:
    """Answer tool calls left open at the end of a prefix (the ``memory_commit`` call itself, typically).

    A chat request must not end with unanswered ``tool_calls``; the appended ``tool`` messages come after the unchanged
    prefix, so the cache still hits. Returns a new list; ``messages`` is not changed.
    """
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool" and _hashable(m.get("tool_call_id"))}
    out = list(messages)
    for m in reversed(messages):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            for call in m["tool_calls"] if isinstance(m["tool_calls"], list) else ():
                if isinstance(call, dict) and call.get("id") not in answered:
                    out.append({"role": "tool", "tool_call_id": call.get("id"), "content": result_text})
            break
        if m.get("role") not in ("tool",):
            break
    return out


# ---------------------------------------------------------------------------------------------------------- loading

def _load(path_or_text: str | Path) -> tuple[str, str]:
    if isinstance(path_or_text, Path) or (isinstance(path_or_text, str) and _looks_like_path(path_or_text)):
        path = Path(path_or_text)
        try:
            st = path.stat()
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError
            if not stat.S_ISREG(st.st_mode):   # a FIFO or /dev/zero would never end
                raise TranscriptError(f"{path}: is not a regular file", "pass the transcript file")
            if st.st_size > MAX_BYTES:
                raise TranscriptError(f"{path}: transcript is {st.st_size} bytes, over the {MAX_BYTES} byte limit",
                                      "pass a smaller transcript or the prefix up to the commit")
            with open(path, "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
            if len(data) > MAX_BYTES:
                raise TranscriptError(f"{path}: transcript is over the {MAX_BYTES} byte limit",
                                      "pass a smaller transcript or the prefix up to the commit")
        except FileNotFoundError:
            raise TranscriptError(f"{path}: no such transcript file", "check the path the host passed") from None
        except IsADirectoryError:
            raise TranscriptError(f"{path}: is a directory, not a transcript", "pass the transcript file") from None
        except PermissionError:
            raise TranscriptError(f"{path}: cannot read the transcript (permission denied)",
                                  "check the file's permissions") from None
        except OSError as exc:
            raise TranscriptError(f"{path!s:.200}: cannot read the transcript ({exc.strerror})",
                                  "check the path the host passed") from None
        except (ValueError, UnicodeEncodeError):   # a NUL or a lone surrogate in the path
            raise TranscriptError(f"{str(path)!r:.200}: not a usable file name", "check the path the host passed") \
                from None
        try:
            return data.decode("utf-8-sig"), str(path)
        except UnicodeDecodeError as exc:
            line = data[:exc.start].count(b"\n") + 1
            raise TranscriptError(f"{path}:{line}: not UTF-8 text", "save the transcript as UTF-8") from None
    if not isinstance(path_or_text, str):
        raise TranscriptError(f"Cannot read a transcript from {type(path_or_text).__name__}", "pass a path or the text")
    return path_or_text, "<text>"


def _loads(text: str, where: str):
    """``json.loads``, with the two ways it fails besides a syntax error made into a ``TranscriptError``: a number of
    more than 4,300 digits (``ValueError``) and nesting deep enough to exhaust the stack (``RecursionError``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:
        raise TranscriptError(f"{where}: holds a number too long to read (more than 4300 digits)",
                              "pass the file the host wrote") from None
    except RecursionError:
        raise TranscriptError(f"{where}: is nested too deeply to read", "pass the file the host wrote") from None


def _looks_like_path(s: str) -> bool:
    if "\n" in s or s.lstrip()[:1] in ("[", "{") or len(s) > 4096:
        return False
    return True


# ------------------------------------------------------------------------------------------------------- JSON chats

def _from_chat_doc(doc: list | dict, format: str, source: str) -> Transcript:
    system = None
    if isinstance(doc, dict):
        items = doc.get("messages")
        system = doc.get("system")
        if not isinstance(items, list):
            raise TranscriptError(f"{source}: \"messages\" is not a list", "pass a list of message objects")
    else:
        items = doc
    records = []
    for i, item in enumerate(items):
        _check_message(item, f"{source}: message {i}")
        records.append((i, item))
    dialect = format if format in ("openai", "anthropic") else _dialect([r for _, r in records], system)
    if system is not None and dialect == "openai":
        raise TranscriptError(f"{source}: a top-level \"system\" belongs to Anthropic Messages, not OpenAI chat",
                              "pass --format anthropic, or move the system prompt into a system message")
    if system is not None and not isinstance(system, (str, list)):
        raise TranscriptError(f"{source}: \"system\" must be text or a list of text blocks", "fix the transcript")
    messages = tuple(Message(_seq(r, i, f"{source}: message {i}"), r["role"], r.get("content"), r) for i, r in records)
    _check_seqs(messages, source)
    return Transcript(messages, dialect, "json", system, source, blocks=_summary_blocks(messages, dialect))


def _check_message(item: object, where: str) -> None:
    if not isinstance(item, dict):
        raise TranscriptError(f"{where}: expected a message object, got {type(item).__name__}",
                              "each message needs a role and content")
    role = item.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        raise TranscriptError(f"{where}: missing or unknown role {clip(role)}",
                              "roles are system, developer, user, assistant or tool")
    content = item.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise TranscriptError(f"{where}: content must be text or a list of blocks", "fix the message's content")
    if isinstance(content, list) and not all(isinstance(b, (dict, str)) for b in content):
        raise TranscriptError(f"{where}: content blocks must be objects", "fix the message's content")


def _seq(record: dict, position: int, where: str) -> int:
    if "seq" not in record:
        return position
    seq = record["seq"]
    if not int_between(seq, 0, MAX_SEQ):   # it becomes an entry's citation, stored as an SQLite INTEGER
        raise TranscriptError(f"{where}: seq must be an integer 0..{MAX_SEQ}, got {clip(seq)}",
                              "fix the host's event index")
    return seq


def _check_seqs(messages: tuple[Message, ...], source: str) -> None:
    for a, b in zip(messages, messages[1:]):
        if b.seq <= a.seq:
            raise TranscriptError(f"{source}: seq {b.seq} does not follow seq {a.seq}",
                                  "seqs must increase through the transcript")


def _dialect(records: list[dict], system: object) -> str:
    if system is not None:
        return "anthropic"
    for r in records:
        if r.get("role") in ("system", "developer", "tool", "function") or "tool_calls" in r or "tool_call_id" in r:
            return "openai"
        content = r.get("content")
        if isinstance(content, list):
            for b in content:
                if isinstance(b, dict):
                    kind = b.get("type")
                    if not isinstance(kind, str):
                        continue
                    if kind in _ANTHROPIC_BLOCKS or (kind == "image" and "source" in b):
                        return "anthropic"
                    if kind in ("image_url", "input_audio", "refusal", "file"):
                        return "openai"
    return "openai"  # plain text messages are the same in both dialects: sending them unchanged is right


# ------------------------------------------------------------------------------------------------------------ JSONL

def _from_jsonl(text: str, format: str, source: str) -> Transcript:
    rows: list[tuple[int, dict]] = []
    lines = text.splitlines()
    torn = None   # a last line cut short, when the file does not end with a newline (the host is still writing)
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = _loads(line, f"{source}:{n + 1}")
        except json.JSONDecodeError as exc:
            if n == len(lines) - 1 and not text.endswith("\n") and rows:
                torn = (n, exc)
                break
            raise TranscriptError(f"{source}:{n + 1}: not valid JSON ({exc.msg})",
                                  "each line must be one JSON object; a half-written last line means the host is still writing") from None
        if not isinstance(obj, dict):
            raise TranscriptError(f"{source}:{n + 1}: expected a JSON object, got {type(obj).__name__}",
                                  "each line must be one message or event object")
        rows.append((n, obj))
    if not rows:
        raise TranscriptError(f"{source}: transcript has no records", "pass the file the host wrote for this session")

    if format == "codex" or (format == "auto" and looks_like_codex([o for _, o in rows[:20]])):
        return _from_codex(rows, source)   # a torn last line is the item Codex is writing now: not there yet
    if torn is not None:
        raise TranscriptError(f"{source}:{torn[0] + 1}: not valid JSON ({torn[1].msg})", "each line must be one "
                              "JSON object; a half-written last line means the host is still writing")

    if format == "pi" or (format == "auto" and looks_like_pi([o for _, o in rows[:50]])):
        return _from_pi(rows, source)
    if format == "auto" and all(looks_like_dsh(o) or o.get("type") == "session" for _, o in rows[:20]):
        return _from_hostlog(read_dsh(None, source, text), source, "dsh")
    is_cc = any("role" not in o and isinstance(o.get("type"), str) and ("message" in o or "uuid" in o or
                                                                         o.get("type") == "summary") for _, o in rows)
    if format == "claude-code" or (format == "auto" and is_cc):
        return _from_claude_code(rows, source)
    if is_cc:
        raise TranscriptError(f"{source}: this looks like a Claude Code session, not one message per line",
                              "pass --format claude-code")
    for n, o in rows:
        _check_message(o, f"{source}:{n + 1}")
    messages = tuple(Message(_seq(o, i, f"{source}:{n + 1}"), o["role"], o.get("content"), o)
                     for i, (n, o) in enumerate(rows))
    _check_seqs(messages, source)
    dialect = _dialect([o for _, o in rows], None)
    return Transcript(messages, dialect, "jsonl", None, source, blocks=_summary_blocks(messages, dialect))


def _from_codex(rows: list[tuple[int, dict]], source: str) -> Transcript:
    """A Codex rollout: its model-context items as OpenAI messages (``acpmem.hosts.codex``), seq = line."""
    log = read_codex(rows, source)
    msgs = tuple(Message(e.seq, e.role, e.message.get("content"), e.message) for e in log.events)
    if not msgs:
        raise TranscriptError(f"{source}: no user or assistant items in this Codex rollout",
                              "pass the session's rollout-*.jsonl file")
    return Transcript(msgs, "openai", "codex", None, source, warnings=log.warnings)


def _from_claude_code(rows: list[tuple[int, dict]], source: str) -> Transcript:
    events, links = [], {}
    for n, o in rows:
        kind = o.get("type")
        if isinstance(o.get("uuid"), str):
            parent = o.get("parentUuid")
            links[o["uuid"]] = parent if isinstance(parent, str) else None
        if kind not in ("user", "assistant"):
            continue  # summary, system, file-history-snapshot, attachment…: bookkeeping the model never saw
        if o.get("isSidechain") or o.get("isApiErrorMessage"):
            continue  # a sub-agent's conversation, or an error Claude Code showed but never sent to the model
        msg = o.get("message")
        if not isinstance(msg, dict):
            raise TranscriptError(f"{source}:{n + 1}: {kind} event has no \"message\" object",
                                  "pass an unmodified Claude Code session file")
        role = msg.get("role", kind)
        if role not in ("user", "assistant"):
            raise TranscriptError(f"{source}:{n + 1}: unknown role {clip(role)}",
                                  "pass an unmodified Claude Code session file")
        content = msg.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise TranscriptError(f"{source}:{n + 1}: content must be text or a list of blocks",
                                  "pass an unmodified Claude Code session file")
        events.append(Message(n, role, content, o))
    if not events:
        raise TranscriptError(f"{source}: no user or assistant events in this Claude Code session",
                              "pass the session's .jsonl file")
    events_t = tuple(events)
    return Transcript(_active_branch(events_t, links), "claude-code", "jsonl", None, source, events_t, links,
                      blocks=_summary_blocks(events_t, "claude-code"))


def _active_branch(events: tuple[Message, ...], links: dict | None) -> tuple[Message, ...]:
    """The messages on the chain that ends at the last event, following parentUuid through every event (system lines
    included); a null or unknown parent ends the chain (session start, or a compaction boundary: what the model saw).
    File order when the events carry no uuids."""
    if not events:
        return ()
    if not links or any(not isinstance(m.raw.get("uuid"), str) or not m.raw["uuid"] for m in events):
        return events
    by_uuid = {m.raw["uuid"]: m for m in events}
    chain = []
    node, seen = events[-1].raw["uuid"], set()
    while node is not None and node in links and node not in seen:
        seen.add(node)
        if node in by_uuid:
            chain.append(by_uuid[node])
        node = links[node]
    chain.reverse()
    return tuple(chain)


# ------------------------------------------------------------------------------------------- compression hosts

def _dsh_file(path_or_text: str | Path, format: str) -> Path | None:
    """The path of a DSH log to stream — a zstd file, a file whose first lines are DSH events, or anything with
    ``format="dsh"`` — else None."""
    if format not in ("auto", "dsh"):
        return None
    if not (isinstance(path_or_text, Path) or (isinstance(path_or_text, str) and _looks_like_path(path_or_text))):
        return None
    path = Path(path_or_text)
    try:
        if not path.is_file():
            return None
        if format == "dsh":
            return path
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except (OSError, ValueError):
        return None   # _load says what is wrong

    if is_zstd(head):
        return path
    rows = []
    for line in head.split(b"\n")[:-1][:4]:
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            return None
        if not isinstance(obj, dict):
            return None
        rows.append(obj)
    if rows and all(looks_like_dsh(o) or o.get("type") == "session" for o in rows) and any(map(looks_like_dsh, rows)):
        return path
    return None


def _from_hostlog(log, source: str, container: str, partial: bool = False) -> Transcript:
    events = tuple(Message(e.seq, e.role, e.message.get("content"), e.message) for e in log.events)
    if not events and not partial:
        raise TranscriptError(f"{source}: no messages in this session log", "pass the session's log file")
    if partial:
        msgs = events
    elif log.ops is not None:
        msgs = _surface_messages(events, log.ops, None)
    else:
        msgs = events
    return Transcript(msgs, "openai", container, None, source, events, None, log.blocks, log.ops, log.warnings)


def _surface_messages(events: tuple[Message, ...], ops: tuple, upto: int | None) -> tuple[Message, ...]:
    by_seq = {m.seq: m for m in events}
    return tuple(by_seq[s] for s in surface(ops, upto) if s in by_seq)


def _from_pi(rows: list[tuple[int, dict]], source: str) -> Transcript:
    """A pi session log: the live path of its tree as ``events``, the view the model saw as ``messages``."""
    log = read_pi(rows, Path(source) if source != "<text>" else None, source)
    events = tuple(_pi_message(m) for m in log.events)
    if not events:
        raise TranscriptError(f"{source}: no messages on this pi session's live path", "pass the session's log file")
    return Transcript(_pi_view(log, None), "openai", "pi", None, source, events, None, log.blocks, None, log.warnings,
                      log)


def _pi_message(m) -> Message:
    return Message(m.seq, m.role, m.message.get("content"), m.message, m.id)


def _pi_view(log, upto: int | None) -> tuple[Message, ...]:
    return tuple(_pi_message(m) for m in view(log, upto))


def _pi_joined(messages: tuple[Message, ...]) -> list[dict]:
    """pi: the parts of a multi-call assistant message (``<entry>#<call>``, one per call) joined again into the one
    message the provider received."""
    out: list[dict] = []
    entry = None
    for m in messages:
        base = m.id.split("#", 1)[0] if isinstance(m.id, str) and "#" in m.id else None
        if base is not None and base == entry and out:
            out[-1] = {**out[-1], "tool_calls": [*out[-1]["tool_calls"], *m.raw.get("tool_calls", ())]}
            continue
        entry = base
        out.append(m.raw)
    return out


def _from_fold(path: Path, doc: dict) -> Transcript:
    """An omp fold file: its blocks, and the stream it stored as the conversation (seq = position in it)."""
    fold = read_fold(path, doc)
    msgs = []
    for i, (ident, role, text) in enumerate(fold.messages):
        raw = {"role": role if role in ("user", "assistant", "system") else "user", "content": text}
        msgs.append(Message(i, raw["role"], text, raw, ident))
    return Transcript(tuple(msgs), "openai", "omp", None, str(path), tuple(msgs), None, fold.blocks, None,
                      fold.warnings)


def _summary_blocks(messages: tuple[Message, ...], dialect: str) -> tuple:
    """Compression summaries inside a transcript: kernel-rendered summary messages (text ``[Compressed conversation
    section] …``, id ``acp_summary_bN`` where the message kept it) and Claude Code's compaction summaries
    (``isCompactSummary``). The turns a Claude Code summary covers are the events since the previous one; a kernel
    summary's are unknown (the transcript holds the summary, not the turns). On the wire a kernel summary has lost
    its id (pi's adapter sends it as a plain user message; the billion-context proxy drops it): such a block's id is
    None — unknown, never guessed — unless the kernel's recap ``[bN | …]`` names it."""
    out: list = []
    named: set[str] = set()
    prev = -1
    for m in messages:
        raw = m.raw
        if dialect == "claude-code":
            if raw.get("isCompactSummary") is True:
                ident = f"b{len(out) + 1}"
                seqs = tuple(e.seq for e in messages if prev < e.seq < m.seq)
                out.append(Block(ident, _plain_text(m.content, raw), None, None, seqs, (), None, m.seq))
                prev = m.seq
            continue
        if not (isinstance(raw.get("id"), str) and raw["id"].startswith("acp_summary_")) and not (
                isinstance(m.content, str) and m.content.startswith("[Compressed")):
            continue
        found = summary_message(_plain_text(m.content, raw), raw.get("id"))
        if found is None:
            continue
        ident, topic, summary = found
        if ident is not None and ident in named:
            continue
        if ident is not None:
            named.add(ident)
        out.append(Block(ident, summary, None, topic, (), (), None, m.seq))
    return tuple(out)


# ------------------------------------------------------------------------------------------------------- conversion

def _strip_bookkeeping(raw: dict) -> dict:
    if not any(k in raw for k in _BOOKKEEPING):
        return raw
    return {k: v for k, v in raw.items() if k not in _BOOKKEEPING}


def _anthropic_to_openai(role: str, content: str | list | None) -> list[dict]:
    if content is None or isinstance(content, str):
        return [{"role": role, "content": content if content is not None else ""}]
    if role == "assistant":
        texts, calls = [], []
        for b in content:
            if isinstance(b, str):
                texts.append(b)
            elif not isinstance(b, dict):
                continue   # not a content block: nothing the model could have read
            elif b.get("type") == "text":
                texts.append(_text(b.get("text", "")))
            elif b.get("type") in ("tool_use", "server_tool_use"):
                calls.append({"id": b.get("id"), "type": "function",
                              "function": {"name": b.get("name"),
                                           "arguments": json.dumps(b.get("input", {}), ensure_ascii=False)}})
        msg: dict = {"role": "assistant", "content": "\n\n".join(texts) if texts else None}
        if calls:
            msg["tool_calls"] = calls
        elif msg["content"] is None:
            msg["content"] = ""
        return [msg]
    tools, parts = [], []
    for b in content:
        if isinstance(b, str):
            parts.append({"type": "text", "text": b})
        elif not isinstance(b, dict):
            continue
        elif b.get("type") == "tool_result":
            body = b.get("content")
            text = body if isinstance(body, str) else _text_of_blocks(body if isinstance(body, list) else [])
            if b.get("is_error"):
                text = f"[error] {text}"
            tools.append({"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": text})
        elif b.get("type") == "text":
            parts.append({"type": "text", "text": _text(b.get("text", ""))})
        elif b.get("type") == "image":
            url = _image_url(b)
            parts.append({"type": "image_url", "image_url": {"url": url}} if url else {"type": "text", "text": "[image]"})
        elif b.get("type") == "document":
            parts.append({"type": "text", "text": _text_of_blocks([b])})
    out = tools
    if parts:
        if all(p["type"] == "text" for p in parts) and len(parts) == 1:
            out.append({"role": role, "content": parts[0]["text"]})
        else:
            out.append({"role": role, "content": parts})
    return out


def _merge_assistant(into: dict, more: dict) -> None:
    if more.get("content"):
        into["content"] = f"{into['content']}\n\n{more['content']}" if into.get("content") else more["content"]
    if more.get("tool_calls"):
        into.setdefault("tool_calls", []).extend(more["tool_calls"])
        if into.get("content") == "":
            into["content"] = None


def _image_url(block: dict) -> str | None:
    src = block.get("source")
    if not isinstance(src, dict):
        return None
    if src.get("type") == "base64" and src.get("data"):
        return f"data:{src.get('media_type', 'image/png')};base64,{src['data']}"
    if src.get("type") == "url":
        return src.get("url")
    return None


def _text_of_blocks(blocks: str | list) -> str:
    if isinstance(blocks, str):
        return blocks
    out = []
    for b in blocks if isinstance(blocks, list) else ():
        if isinstance(b, str):
            out.append(b)
        elif not isinstance(b, dict):
            continue
        elif b.get("type") == "text":
            out.append(_text(b.get("text", "")))
        elif b.get("type") == "image":
            out.append("[image]")
        elif b.get("type") == "document":
            src = b.get("source") if isinstance(b.get("source"), dict) else {}
            out.append(_text(src.get("data", "")) if src.get("type") == "text" else "[document]")
    return "\n".join(out)


def _plain_text(content: str | list | None, raw: dict) -> str:
    if content is None:
        parts = []
    elif isinstance(content, str):
        parts = [content]
    else:
        parts = []
        for b in content:
            if isinstance(b, str):
                parts.append(b)
            elif not isinstance(b, dict):
                continue
            elif b.get("type") in ("text", "input_text", "output_text"):
                parts.append(_text(b.get("text", "")))
            elif b.get("type") == "tool_use":
                parts.append(f"{_text(b.get('name'))}({_json_text(b.get('input', {}))})")
            elif b.get("type") == "tool_result":
                body = b.get("content")
                parts.append(body if isinstance(body, str) else _text_of_blocks(body))
    calls = raw.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            args = fn.get("arguments", "")
            parts.append(f"{_text(fn.get('name'))}({args if isinstance(args, str) else _json_text(args)})")
    return "\n".join(p for p in parts if p)


def _text(value: object) -> str:
    """A field that should be text; anything else (a number, a list, null) reads as nothing."""
    return value if isinstance(value, str) else ""


def _json_text(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return ""


def _hashable(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))
