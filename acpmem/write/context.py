"""What the fork sends: the conversation, related entries, host tools, fitted to the model's window."""
from __future__ import annotations

import json
import re
from pathlib import Path

from acpmem.core.blocks import turns_span, turns_text
from acpmem.core.entry import Citation, Entry
from acpmem.core.errors import Refused, TranscriptError, UsageError
from acpmem.core.framing import frame
from acpmem.core.layout import LAYER_PROJECT
from acpmem.core.limits import one_line
from acpmem.core.tools import tool_definitions
from acpmem.hosts.transcripts import close_tool_calls, openai_messages, read_transcript
from acpmem.read.layers import recall_layered
from acpmem.search.analysis import has_cjk
from acpmem.search.overlap import STOP
from acpmem.write import llm
from acpmem.write.prompts import (answer_schema, fork_closing, fork_instruction, fork_system, quoted_instruction,
                                  window_line)
from acpmem.write.requests import Request

RELATED_LIMIT = 5

MEMORY_CALL = re.compile(r"\bmemory_(?:commit|write|nothing|recall)\b")   # a turn of the memory tools' own: no source


RELATED_BODY_CHARS = 1500


def conversation(req: Request):
    """The transcript prefix the fork sees, or None when the commit named no transcript."""
    if not req.transcript:
        return None

    t = read_transcript(req.transcript).upto(req.seq)
    if not t.messages:
        raise TranscriptError(f"{req.transcript}: no message at or before seq {req.seq}",
                              "pass the seq of the memory_commit call in this transcript")
    return t


def related_entries(vault, note: str, limit: int = RELATED_LIMIT, exclude: tuple[str, ...] = ()) -> list[Entry]:
    """The live entries most related to the note, best first, from this project's vault and the user vault (never
    another project's): recall over the derived indexes (so it scales with the vault), without marking them read —
    the fork reading them is not a person or a model using them. A user-layer entry carries ``layer: user`` in its
    ``extra`` so ``related_text`` can say so."""
    if not note.strip():
        return []
    hits = recall_layered(vault, note, limit=limit + len(exclude), mark_read=False)
    return [h.entry if h.layer == LAYER_PROJECT else h.entry.with_changes(extra={**(h.entry.extra or {}),
                                                                                 "layer": h.layer})
            for h in hits if h.entry.id not in exclude and shares_words(note, f"{h.entry.title}\n{h.entry.body}")
            ][:limit]


RELATED_MIN_WORDS = 2   # an entry recall ranks for the note is shown only when it shares this many words with it


def shares_words(note: str, text: str, least: int = RELATED_MIN_WORDS) -> bool:
    """True when ``text`` has at least ``least`` of the note's words (ASCII words of 3+ letters split at any
    punctuation, minus stopwords; the character pairs of CJK runs). Recall always ranks something: a small model
    shown an unrelated entry as "related" wrote that entry again instead of the note (bench/real_model.py)."""
    def words(t: str) -> set[str]:
        out = {w for w in re.findall(r"[a-z0-9]{3,}", t.lower()) if w not in STOP}
        for run in re.findall(r"[\u3400-\u9fff]+", t):
            out.update(run[i:i + 2] for i in range(max(1, len(run) - 1)))
        return out
    want = words(note)
    return len(want & words(text)) >= min(least, len(want)) if want else False


def related_text(entries: list[Entry]) -> str:
    parts = []
    for e in entries:
        body = e.body.strip()
        if len(body) > RELATED_BODY_CHARS:
            body = body[:RELATED_BODY_CHARS].rstrip() + " …"
        attrs = {"id": e.id, "type": e.type, "title": e.title}
        layer = (e.extra or {}).get("layer")
        if layer:
            attrs["layer"] = str(layer)
        parts.append(frame("related", body, attrs=attrs))
    return "\n\n".join(parts)


RELATED_PLAIN_CHARS = 400


def related_plain(entries: list[Entry]) -> str:
    """The related entries as the fork's closing message states them: one plain line each, ``- #id (type) title:
    body``, the body on one line and clipped. Small models echoed the framed form (``related_text``) back as their
    answer instead of writing."""
    lines = []
    for e in entries:
        body = " ".join(e.body.split())
        if len(body) > RELATED_PLAIN_CHARS:
            body = body[:RELATED_PLAIN_CHARS].rstrip() + " …"
        layer = (e.extra or {}).get("layer")
        kind = f"{e.type}, {layer} layer" if layer else e.type
        lines.append(f"- #{e.id} ({kind}) {one_line(e.title)}: {body}")
    return "\n".join(lines)


def load_host_tools(path: str | None) -> list[dict]:
    """The host's tool definitions (OpenAI function tools, a JSON list or ``{"tools": [...]}``), unchanged. A file
    that is missing or not such a list is ``Refused`` (its content, not the command line: exit 1)."""
    if not path:
        return []
    try:
        doc = json.loads(Path(path).read_text("utf-8"))
    except FileNotFoundError:
        raise TranscriptError(f"{path}: no such tool definition file", "pass the host's tools as a JSON file") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise Refused(f"{path}: not valid JSON ({exc})", "pass a JSON list of OpenAI function tools") from None
    tools = doc.get("tools") if isinstance(doc, dict) else doc
    if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("function"), dict)
                                              and t["function"].get("name") for t in tools):
        raise Refused(f"{path}: expected a list of OpenAI function tools",
                         'each item: {"type": "function", "function": {"name": ..., "parameters": ...}}')
    if any(t["function"]["name"] == "memory_write" for t in tools):
        raise Refused(f"{path}: the host's tools include memory_write", "memory_write is the fork's own tool")
    return tools


def request_block(req: Request, transcript):
    """The compression block a request names (``Block``), or None; ``TranscriptError`` when it cannot be found."""
    if not req.block:
        return None
    if transcript is None:
        raise TranscriptError(f"request {req.id} names block {req.block} but no transcript",
                              "commit a block with the session log (--transcript) that has it")
    return transcript.block(req.block)


def block_text(block) -> str:
    """The block as the fork's instruction shows it: framed as data, its id, tier and topic on the opening line."""
    return frame("block", block.summary, attrs={"id": block.id, "tier": str(block.tier or "unknown"),
                                                 "topic": block.topic or ""})


def request_citations(req: Request, transcript) -> tuple[Citation, ...]:
    """What an entry of this request cites: the commit's seq, or for a block the block (id, tier, the host's id,
    the turns it covers; its seq the span of those turns, else the commit's seq)."""
    b = request_block(req, transcript)
    if b is None:
        return (Citation(req.session, req.seq),)
    span = turns_span(b.seqs)
    return (Citation(req.session, span if span is not None else req.seq, b.id, b.tier, b.compaction_id,
                     turns_text(b.seqs) or None),)


PROMPT_STYLES = ("system", "user")


PROMPT_STYLE = "system"   # what build_body sends unless told; bench/real_model.py measures both on a real model


CONTEXT_MARGIN_TOKENS = 256


DEFAULT_CONTEXT_TOKENS = 128_000   # the window assumed when neither the settings nor the endpoint say one: hosted
                                   # APIs serve no /props, and a transcript of 100 MB was otherwise sent whole


def note_language(note: str, default: str) -> str:
    """The language the fork is instructed in: Chinese for a note written in Chinese (a small model told in English
    to distil a Chinese note answered nothing, or in English), English for a note with Latin letters and no Chinese
    in a Chinese vault, else the vault's ``language``."""
    if has_cjk(note):
        return "zh"
    if default == "zh" and re.search(r"[A-Za-z]{3}", note):
        return "en"
    return default


def estimate_tokens(value: object) -> int:
    """A cautious token count of a message, tool list or text: its UTF-8 JSON bytes / 3 (English runs at about 4
    bytes a token, Chinese at about 3)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return len(text.encode("utf-8")) // 3 + 4


def fit_context(messages: list[dict], seqs: list[int | None], keep: set[int], budget: int) -> tuple[list[dict], int]:
    """The conversation within ``budget`` tokens (``estimate_tokens``): whole turns (a user message and what
    follows it up to the next one) left out oldest first, a leading system message kept, never a turn holding a
    message whose seq is in ``keep`` (the cited ones) nor the last turn. Returns the messages and how many were left
    out; when even that is over the budget, the longest texts left are clipped (``clip_messages``)."""
    total = sum(estimate_tokens(m) for m in messages)
    if total <= budget:
        return messages, 0
    start = 1 if messages and messages[0].get("role") == "system" else 0
    turns: list[list[int]] = []
    for i in range(start, len(messages)):
        if not turns or messages[i].get("role") == "user":
            turns.append([i])
        else:
            turns[-1].append(i)
    drop: set[int] = set()
    for turn in turns[:-1]:
        if total <= budget:
            break
        if any(seqs[i] in keep for i in turn if i < len(seqs) and seqs[i] is not None):
            continue
        drop.update(turn)
        total -= sum(estimate_tokens(messages[i]) for i in turn)
    kept = [m for i, m in enumerate(messages) if i not in drop]
    if total > budget:
        kept = clip_messages(kept, budget)
    return kept, len(drop)


CLIP_MIN_CHARS = 400   # what is left of a clipped message at the least: its start and its end


def clip_messages(messages: list[dict], budget: int) -> list[dict]:
    """``messages`` within ``budget`` tokens by shortening the text of the longest ones (their start and end kept,
    a line saying how much was left out between): what whole turns could not make fit — one turn bigger than the
    window, or the cited ones — is never sent whole. Messages without text content are left as they are."""
    out = list(messages)
    total = sum(estimate_tokens(m) for m in out)
    for i in sorted(range(len(out)), key=lambda i: -estimate_tokens(out[i])):
        if total <= budget:
            break
        content = out[i].get("content")
        if not isinstance(content, str) or len(content) <= CLIP_MIN_CHARS:
            continue
        over_chars = (total - max(budget, 0)) * 3   # estimate_tokens counts 3 UTF-8 bytes a token: a char is >= 1
        keep = max(CLIP_MIN_CHARS, len(content) - over_chars - 100)
        head, tail = content[:keep // 2], content[len(content) - keep // 2:]
        gap = len(content) - 2 * (keep // 2)
        clipped = f"{head}\n[… {gap} characters left out to fit the model's context …]\n{tail}"
        before = estimate_tokens(out[i])
        out[i] = {**out[i], "content": clipped}
        total += estimate_tokens(out[i]) - before
    return out


def shrunk_window(body: dict) -> int:
    """The window to ask for after the endpoint said ``body`` was over its context: half of what it held (the
    conversation, the tools and ``max_tokens``), so each retry sends at most half the one before."""
    sent = sum(estimate_tokens(m) for m in body.get("messages") or ()) + estimate_tokens(body.get("tools") or [])
    return max(1024, (sent + int(body.get("max_tokens") or 0)) // 2)


def build_body(vault, req: Request, model: str | None, *, transcript=None,
               related: list[Entry] | None = None, style: str | None = None, context_tokens: int | None = None,
               notes: list[str] | None = None, part: tuple[int, int] | None = None) -> dict:
    """The exact chat-completions body the fork sends (``extract --dry-run`` prints it): the conversation as the
    model saw it (so a prefix cache hits), its open ``memory_commit`` call closed with the acknowledgement, then —
    ``style`` ``system``, the default — a system message with the extraction rules and a short closing user
    message with the note and the related entries; or — ``user`` — one long user message with all of it. Tools:
    the host's read-only tools, ``memory_write`` and ``memory_nothing``; ``max_tokens`` from ``[extraction]``.
    ``context_tokens``: the model's window; the oldest turns are left out to fit (never the cited ones), each
    leaving a line in ``notes``. ``part``: the window (i, n) of the conversation this call asks about
    (``acpmem.write.windows``), said in the closing message."""
    if vault.settings.extraction.answer == "json":
        return quoted_body(vault, req, model, transcript=transcript, context_tokens=context_tokens, notes=notes,
                           part=part)
    style = style or PROMPT_STYLE
    if style not in PROMPT_STYLES:
        raise UsageError(f"Unknown prompt style '{style}'", "use system or user")
    t = conversation(req) if transcript is None else transcript
    blk = request_block(req, t)
    messages = close_tool_calls(openai_messages(t), req.ack) if t is not None else []
    rel = related_entries(vault, req.note) if related is None else related
    lang = note_language(req.note, vault.settings.language)
    layers = len(vault.layers()) > 1   # the fork is told the user vault exists, and chooses per entry
    btext = block_text(blk) if blk is not None else None
    if style == "user":
        tail = [{"role": "user", "content": fork_instruction(req.note, req.type, req.importance, related_text(rel),
                                                             lang, btext, layers=layers)}]
    else:
        tail = [{"role": "system", "content": fork_system(req.type, req.importance, lang, layers=layers,
                                                          conversation=bool(messages))},
                {"role": "user", "content": fork_closing(req.note, related_plain(rel), lang, btext)}]
    if part is not None:   # one window of a long conversation: said before the closing instruction
        tail[-1] = {**tail[-1], "content": window_line(*part, lang) + "\n" + tail[-1]["content"]}
    tools = load_host_tools(req.host_tools) + tool_definitions("fork", "openai", lang, vault.settings.types,
                                                               layers=layers, nothing=True)
    max_tokens = vault.settings.extraction.max_tokens
    if context_tokens and t is not None:
        seqs: list[int | None] = [m.seq for m in t.messages] if t.format == "openai" else []
        seqs += [None] * (len(messages) - len(seqs))
        keep = {req.seq} | (set(blk.seqs) if blk is not None and blk.seqs else set())
        budget = context_tokens - (max_tokens or 0) - CONTEXT_MARGIN_TOKENS - estimate_tokens(tools) \
            - sum(estimate_tokens(m) for m in tail)
        messages, dropped = fit_context(messages, seqs, keep, budget)
        if dropped and notes is not None:
            notes.append(f"{dropped} of the oldest conversation message(s) left out to fit the model's context "
                         f"of {context_tokens} tokens")
    body: dict = {"model": model} if model else {}
    body.update(messages=messages + tail, tools=tools, tool_choice="auto")
    return _sampling(vault, req, body)


def _sampling(vault, req: Request, body: dict) -> dict:
    """``max_tokens`` and ``temperature`` from ``[extraction]`` added to ``body``."""
    if vault.settings.extraction.max_tokens:
        body["max_tokens"] = vault.settings.extraction.max_tokens
    temperature = vault.settings.extraction.temperature
    if temperature >= 0:   # a retry at the same temperature 0 gets the same answer again: each one a little warmer
        body["temperature"] = round(min(1.0, max(temperature, temperature + RETRY_WARMER * req.attempts)), 2)
    return body


QUOTED_TURN_CHARS = 1500    # each quoted turn at most (its head and tail) under answer = "json"
NO_CONVERSATION = {"en": "(none: this commit came without its conversation; write only what the focus itself states)",
                   "zh": "（无：这次提交没有附带对话；只写重点本身说明的内容）"}
OPENING_CHARS = 400         # a leading system message this short (a date line, a scenario) is quoted; a host's
                            # long system prompt is not


def quoted_turns(req: Request, t, budget: int) -> tuple[str, int]:
    """The turns of ``t`` before the commit as ``[turn N, role] text`` lines, each at most ``QUOTED_TURN_CHARS``,
    the memory tools' own calls left out; the oldest left out until the rest fits ``budget`` tokens (never a turn
    of the block the commit names). Returns the text and how many turns were left out."""
    blk = request_block(req, t)
    keep = set(blk.seqs) if blk is not None and blk.seqs else set()
    lines: list[tuple[int, str]] = []
    for m in t.messages:
        if m.seq is None or m.seq >= req.seq or m.role == "system":
            continue
        text = " ".join(t.text(m).split())
        if not text or MEMORY_CALL.search(text):
            continue
        if len(text) > QUOTED_TURN_CHARS:
            half = QUOTED_TURN_CHARS // 2
            text = f"{text[:half]} […] {text[-half:]}"
        lines.append((m.seq, f"[turn {m.seq}, {m.role}] {text}"))
    total = sum(estimate_tokens(line) for _, line in lines)
    dropped = 0
    while total > budget and lines:
        i = next((k for k, (seq, _) in enumerate(lines) if seq not in keep), None)
        if i is None:
            break
        total -= estimate_tokens(lines.pop(i)[1])
        dropped += 1
    return "\n".join(line for _, line in lines), dropped


def quoted_body(vault, req: Request, model: str | None, *, transcript=None, context_tokens: int | None = None,
                notes: list[str] | None = None, part: tuple[int, int] | None = None) -> dict:
    """The body under ``[extraction] answer = "json"``: one user message (``quoted_instruction``) with the turns
    quoted as data and a ``response_format`` JSON schema (``answer_schema``) instead of tools; the oldest turns left
    out to fit ``context_tokens``, each time with a line in ``notes``. The related entries are not shown: the 1.5B
    model copied them into its answer instead of reading its window (LoCoMo conv-26 session 2: 4 of 6 items of each
    window were entries of session 1); its writes are still checked against them (``draft_from_calls``)."""
    t = conversation(req) if transcript is None else transcript
    lang = note_language(req.note, vault.settings.language)
    layers = len(vault.layers()) > 1
    blk = request_block(req, t)
    opening = None
    if t is not None:
        lead = [t.text(m) for m in t.messages if m.role == "system"][:1]
        if lead and 0 < len(lead[0].strip()) <= OPENING_CHARS:
            opening = " ".join(lead[0].split())
    schema = answer_schema(layers=layers, max_items=vault.settings.extraction.max_entries_per_answer)

    def message(turns: str) -> str:
        return quoted_instruction(req.note, req.type, req.importance, turns, lang,
                                  block_text(blk) if blk is not None else None, layers=layers, opening=opening,
                                  part=part)
    turns, dropped = "", 0
    if t is not None:
        budget = (context_tokens or 0) - (vault.settings.extraction.max_tokens or 0) - CONTEXT_MARGIN_TOKENS \
            - estimate_tokens(message("")) - estimate_tokens(schema)
        turns, dropped = quoted_turns(req, t, budget if context_tokens else 10 ** 9)
        if dropped and notes is not None:
            notes.append(f"{dropped} of the oldest turn(s) left out to fit the model's context of {context_tokens} "
                         "tokens")
    body: dict = {"model": model} if model else {}
    if t is None:   # a commit without its conversation (an MCP client that sends none): the note alone
        turns = NO_CONVERSATION[lang]
    body.update(messages=[{"role": "user", "content": message(turns or "(none)")}],
                response_format={"type": "json_schema", "json_schema": {"name": "memory_entries", "strict": True,
                                                                        "schema": schema}})
    return _sampling(vault, req, body)


RETRY_WARMER = 0.3   # added to [extraction] temperature for each attempt a request has already used


def fork_body(vault, req: Request, config, *, transcript=None, related: list[Entry] | None = None,
              notes: list[str] | None = None, context_tokens: int | None = None,
              part: tuple[int, int] | None = None) -> dict:
    """The body the fork sends to ``config``'s endpoint, trimmed to the model's context window
    (``context_tokens`` when given — a retry after the endpoint said the prompt was too long —, else
    ``[extraction] context_tokens``, else what the endpoint serves, else ``DEFAULT_CONTEXT_TOKENS``), streamed when
    ``config.stream``: the real call and ``extract --dry-run`` both build it here, so the dry run shows what would
    be sent."""
    ctx = context_tokens or vault.settings.extraction.context_tokens or llm.served_context(config) \
        or DEFAULT_CONTEXT_TOKENS
    body = build_body(vault, req, config.model, transcript=transcript, related=related, context_tokens=ctx,
                      notes=notes, part=part)
    return llm.stream_body(body) if config.stream else body
