"""The fork: turning one pending commit request into entries, exactly once.

Owns: building the fork's chat request (the conversation up to the commit's seq unchanged and in order, the open
``memory_commit`` call closed with the acknowledgement the model got, then one instruction carrying the note and the
related existing entries as framed data; tools: the host's read-only tools first, unchanged, then ``memory_write``),
choosing the extractor (a model, or the offline extractor), turning ``memory_write`` calls into entries (secrets
redacted before anything touches disk, supersedes applied), the one commit per request with its trailers, the cost
ledger line, and the retry bookkeeping when anything fails.

Exactly once: before any work the history is searched for the request's ``Acpmem-Request`` trailer; the request file is
removed only after the commit exists. A process killed anywhere leaves either the request pending (nothing written,
rerun does it) or the commit written (rerun finds the trailer and only removes the request).
"""
from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

from acpmem.core.clock import utc_iso
from acpmem.core.entry import Citation, Entry
from acpmem.core.entryfile import defuse_conflict_markers
from acpmem.core.errors import AcpmemError, EntryInvalid, ExtractionError, Refused, TranscriptError, UsageError
from acpmem.core.layout import LAYER_PROJECT, LAYER_USER, PROPOSALS_DIR
from acpmem.core.limits import one_line
from acpmem.core.values import Value
from acpmem.write import costs, requests
from acpmem.write.requests import Request

RELATED_LIMIT = 5
RELATED_BODY_CHARS = 1500
TITLE_CHARS = 120
EXTRACTORS = ("auto", "llm", "offline")


class Outcome(Value):
    """What happened to one request. ``status``: ``written`` (a commit), ``nothing`` (the model kept nothing),
    ``already`` (done before: found in history), ``retry`` (this attempt failed; pending with backoff), ``failed``
    (attempts exhausted; kept), ``skipped`` (not due, or failed and not named), ``missing`` (no such request),
    ``deferred`` (an extraction budget is spent: pending, not attempted, until it frees), ``proposed`` (written as
    proposals under ``[write] policy = "review"``)."""

    request: str
    status: str
    extractor: str | None = None
    commit: str | None = None
    entries: tuple[dict, ...] = ()
    superseded: tuple[str, ...] = ()
    unknown_supersedes: tuple[str, ...] = ()
    redacted: tuple[str, ...] = ()
    ignored_calls: tuple[str, ...] = ()
    error: dict | None = None
    usage: dict | None = None
    attempts: int = 0
    notes: tuple[str, ...] = ()     # what was repaired, dropped or left out of the answer, one line each

    @property
    def ok(self) -> bool:
        return self.status in ("written", "proposed", "nothing", "already", "deferred")

    def to_json(self) -> dict:
        return {"request": self.request, "status": self.status, "extractor": self.extractor, "commit": self.commit,
                "entries": list(self.entries), "superseded": list(self.superseded),
                "unknown_supersedes": list(self.unknown_supersedes), "redacted": list(self.redacted),
                "ignored_calls": list(self.ignored_calls), "error": self.error, "usage": self.usage,
                "attempts": self.attempts, "notes": list(self.notes)}

    def summary(self) -> str:
        head = f"{self.request}: "
        if self.status in ("written", "proposed"):
            ids = ", ".join(f"#{e['id']}" for e in self.entries)
            n = f"{len(self.entries)} {'entry' if len(self.entries) == 1 else 'entries'}"
            line = f"{head}wrote {n} ({ids}) in commit {self.commit[:12]}" if self.status == "written" else \
                f"{head}proposed {n} ({ids}) in commit {self.commit[:12]}; `acp memory review` accepts or rejects"
            if self.superseded:
                line += f"; superseded {', '.join('#' + i for i in self.superseded)}"
        elif self.status == "nothing":
            line = f"{head}nothing worth keeping (no commit)"
            if self.error and self.error.get("message"):
                line += f": {self.error['message']}"
        elif self.status == "already":
            line = f"{head}already done" + (f" (commit {self.commit[:12]})" if self.commit else "")
        elif self.status in ("retry", "failed"):
            msg = (self.error or {}).get("message", "")
            line = f"{head}{'failed for good' if self.status == 'failed' else 'failed, will retry'} " \
                   f"(attempt {self.attempts}): {msg}"
        elif self.status == "deferred":
            line = f"{head}deferred: {(self.error or {}).get('message', 'over the extraction budget')}"
        elif self.status == "skipped":
            line = f"{head}skipped ({(self.error or {}).get('message', 'not due')})"
        else:
            line = f"{head}no such request"
        if self.usage:
            u = self.usage
            line += f" [{u.get('model')}: {u.get('prompt_tokens', 0)} prompt ({u.get('cached_tokens', 0)} cached), " \
                    f"{u.get('completion_tokens', 0)} completion tokens, {u.get('latency_s', 0):.2f} s]"
        if self.redacted:
            line += f" [redacted: {', '.join(self.redacted)}]"
        if self.unknown_supersedes:
            line += f" [unknown supersedes: {', '.join(self.unknown_supersedes)}]"
        if self.notes:
            line += f" [notes: {'; '.join(self.notes)}]"
        return line


# --------------------------------------------------------------------------------------------- the request body

def conversation(req: Request):
    """The transcript prefix the fork sees, or None when the commit named no transcript."""
    if not req.transcript:
        return None
    from acpmem.write.transcripts import read_transcript

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
    from acpmem.vault.layers import recall_layered

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
        out = {w for w in re.findall(r"[a-z0-9]{3,}", t.lower()) if w not in _STOP}
        for run in re.findall(r"[\u3400-\u9fff]+", t):
            out.update(run[i:i + 2] for i in range(max(1, len(run) - 1)))
        return out
    want = words(note)
    return len(want & words(text)) >= min(least, len(want)) if want else False


def related_text(entries: list[Entry]) -> str:
    from acpmem.core.framing import frame

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
    from acpmem.core.framing import frame

    return frame("block", block.summary, attrs={"id": block.id, "tier": str(block.tier or "unknown"),
                                                 "topic": block.topic or ""})


def request_citations(req: Request, transcript) -> tuple[Citation, ...]:
    """What an entry of this request cites: the commit's seq, or for a block the block (id, tier, the host's id,
    the turns it covers; its seq the span of those turns, else the commit's seq)."""
    from acpmem.core.blocks import turns_span, turns_text

    b = request_block(req, transcript)
    if b is None:
        return (Citation(req.session, req.seq),)
    span = turns_span(b.seqs)
    return (Citation(req.session, span if span is not None else req.seq, b.id, b.tier, b.compaction_id,
                     turns_text(b.seqs) or None),)


PROMPT_STYLES = ("system", "user")
PROMPT_STYLE = "system"   # what build_body sends unless told; bench/real_model.py measures both on a real model
CONTEXT_MARGIN_TOKENS = 256


def estimate_tokens(value: object) -> int:
    """A cautious token count of a message, tool list or text: its UTF-8 JSON bytes / 3 (English runs at about 4
    bytes a token, Chinese at about 3)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return len(text.encode("utf-8")) // 3 + 4


def fit_context(messages: list[dict], seqs: list[int | None], keep: set[int], budget: int) -> tuple[list[dict], int]:
    """The conversation within ``budget`` tokens (``estimate_tokens``): whole turns (a user message and what
    follows it up to the next one) left out oldest first, a leading system message kept, never a turn holding a
    message whose seq is in ``keep`` (the cited ones) nor the last turn. Returns the messages and how many were left
    out; when even that is over the budget, what is left is sent (the endpoint then says the prompt is too long)."""
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
    return [m for i, m in enumerate(messages) if i not in drop], len(drop)


def build_body(vault, req: Request, model: str | None, *, transcript=None,
               related: list[Entry] | None = None, style: str | None = None, context_tokens: int | None = None,
               notes: list[str] | None = None) -> dict:
    """The exact chat-completions body the fork sends (``extract --dry-run`` prints it): the conversation as the
    model saw it (so a prefix cache hits), its open ``memory_commit`` call closed with the acknowledgement, then —
    ``style`` ``system``, the default — a system message with the extraction rules and a short closing user
    message with the note and the related entries; or — ``user`` — one long user message with all of it. Tools:
    the host's read-only tools, ``memory_write`` and ``memory_nothing``; ``max_tokens`` from ``[extraction]``.
    ``context_tokens``: the model's window; the oldest turns are left out to fit (never the cited ones), each
    leaving a line in ``notes``."""
    from acpmem.core.tools import fork_closing, fork_instruction, fork_system, tool_definitions
    from acpmem.write.transcripts import close_tool_calls, openai_messages

    style = style or PROMPT_STYLE
    if style not in PROMPT_STYLES:
        raise UsageError(f"Unknown prompt style '{style}'", "use system or user")
    t = conversation(req) if transcript is None else transcript
    blk = request_block(req, t)
    messages = close_tool_calls(openai_messages(t), req.ack) if t is not None else []
    rel = related_entries(vault, req.note) if related is None else related
    lang = vault.settings.language
    layers = len(vault.layers()) > 1   # the fork is told the user vault exists, and chooses per entry
    btext = block_text(blk) if blk is not None else None
    if style == "user":
        tail = [{"role": "user", "content": fork_instruction(req.note, req.type, req.importance, related_text(rel),
                                                             lang, btext, layers=layers)}]
    else:
        tail = [{"role": "system", "content": fork_system(req.type, req.importance, lang, layers=layers)},
                {"role": "user", "content": fork_closing(req.note, related_plain(rel), lang, btext)}]
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
    if max_tokens:
        body["max_tokens"] = max_tokens
    temperature = vault.settings.extraction.temperature
    if temperature >= 0:   # a retry at the same temperature 0 gets the same answer again: each one a little warmer
        body["temperature"] = round(min(1.0, max(temperature, temperature + RETRY_WARMER * req.attempts)), 2)
    return body


RETRY_WARMER = 0.3   # added to [extraction] temperature for each attempt a request has already used


def fork_body(vault, req: Request, config, *, transcript=None, related: list[Entry] | None = None,
              notes: list[str] | None = None) -> dict:
    """The body the fork sends to ``config``'s endpoint, trimmed to the model's context window
    (``[extraction] context_tokens``, else what the endpoint serves), streamed when ``config.stream``: the real
    call and ``extract --dry-run`` both build it here, so the dry run shows what would be sent."""
    from acpmem.write import llm

    ctx = vault.settings.extraction.context_tokens or llm.served_context(config)
    body = build_body(vault, req, config.model, transcript=transcript, related=related, context_tokens=ctx,
                      notes=notes)
    return llm.stream_body(body) if config.stream else body


# --------------------------------------------------------------------------------------------- extractor choice

def choose_extractor(vault, override: str | None = None, env=None, req: Request | None = None):
    """(``"llm"`` with its ``ModelConfig``) or (``"offline"``, None): ``override`` > what the request ``req``
    recorded when it was made (its extractor, and for ``llm`` its endpoint and model; the key comes from this
    process's settings) > ``[extraction] extractor``; ``auto`` uses a model when one is configured."""
    from acpmem.write.llm import resolve_model_config, with_served_model

    recorded = req.extractor if req is not None and not override else None
    name = override or recorded or vault.settings.extraction.extractor
    if name not in EXTRACTORS:
        raise UsageError(f"Unknown extractor '{name}'", "use --extractor auto | llm | offline")
    if name == "offline":
        return "offline", None
    config = resolve_model_config(vault.settings.extraction, env)
    if recorded == "llm":
        config = config.with_changes(base_url=req.base_url, model=req.model)
    config = with_served_model(config, vault.state_dir)
    if name == "auto" and not config.configured:
        return "offline", None
    return "llm", config


# --------------------------------------------------------------------------------------------- applying results

class _Draft:
    """What one request's answer becomes, gathered call by call: new entries, superseded ones, and notes; each new
    or updated entry's layer in ``layer_of`` (project when absent)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.updates: dict[str, Entry] = {}
        self.unknown: list[str] = []
        self.redacted: list[str] = []
        self.ignored: list[str] = []
        self.layer_of: dict[str, str] = {}
        self.notes: list[str] = []      # repairs, drops and refusals, one line each (the outcome and commit say them)
        self.writes = 0                 # memory_write calls read from the answer, before any was dropped
        self.propose: set[str] = set()  # new entries written as proposals whatever the policy (a contradiction)
        self.repeats = 0                # of those, the ones dropped as repeating an entry shown as related

    def part(self, layer: str) -> tuple[list[Entry], list[Entry]]:
        """The new entries and the updated ones of one layer."""
        def mine(e: Entry) -> bool:
            return self.layer_of.get(e.id, LAYER_PROJECT) == layer
        return [e for e in self.entries if mine(e)], [e for e in self.updates.values() if mine(e)]


def derive_title(content: str) -> str:
    """A title from the content's first line: markdown markers dropped, clipped at a word boundary."""
    for line in content.splitlines():
        line = re.sub(r"^\s*(?:[-*+>#]+|\d+[.)])\s*", "", one_line(line))
        line = re.sub(r"[`*_]{1,3}", "", line).strip()
        if line:
            if len(line) > TITLE_CHARS:
                cut = line[:TITLE_CHARS].rsplit(" ", 1)[0]
                line = (cut if len(cut) > TITLE_CHARS // 2 else line[:TITLE_CHARS]).rstrip(" ,;:") + "…"
            return line
    return "(untitled)"


def _redact(text: str, found: list[str]) -> str:
    from acpmem.core.redact import redact

    clean, findings = redact(text, deep=True)
    found.extend(f.kind for f in findings)
    return clean


def _user_safe(vault, text: str, draft: _Draft) -> str:
    """User-layer text without this project's paths (``acpmem.core.projectpaths``); secrets are redacted for
    every layer before this."""
    from acpmem.core.projectpaths import redact_project_paths
    from acpmem.vault.layers import project_path_forms

    clean, n = redact_project_paths(text, project_path_forms(vault))
    if n:
        draft.redacted.append("project-path")
    return clean


def _new_entry(vault, req: Request, draft: _Draft, taken: set[str], *, title: str, body: str,
               citations: tuple[Citation, ...], extractor: str, supersedes: tuple[str, ...] = (),
               layer: str = LAYER_PROJECT) -> Entry:
    target = vault.user if layer == LAYER_USER and vault.layer != LAYER_USER else vault
    if layer != LAYER_PROJECT:
        title, body = _user_safe(vault, title, draft), _user_safe(vault, body, draft)
    ident = target.new_id(taken)
    taken.add(ident)
    body = defuse_conflict_markers(body.strip("\n") + "\n")  # a quoted conflict, never an unresolved one
    e = Entry(id=ident, title=title, type=req.type, importance=req.importance, created=vault.now(), body=body,
              citation=citations, source={"request": req.id, "extractor": extractor}, supersedes=supersedes)
    draft.layer_of[ident] = layer
    return e.with_changes(path=target.path_for(ident, title))


SUPERSEDE_MIN_OVERLAP = 0.15   # a supersede of an entry sharing less than this of its terms is refused
DUPLICATE_OVERLAP = 0.85       # a write sharing this much with an entry it was shown is that entry again
_STOP = frozenset("the a an and or of to in on for is are be it this that with as by at from not no use uses "
                  "used must should when if".split())


def terms(text: str) -> set[str]:
    """The words of a text for overlap: lower-cased ASCII words of 2+ letters (minus a few stopwords) and the
    character pairs of CJK runs."""
    out = {w for w in re.findall(r"[a-z0-9][a-z0-9_.-]*[a-z0-9]|[a-z0-9]{2,}", text.lower()) if w not in _STOP}
    for run in re.findall(r"[\u3400-\u9fff]+", text):
        out.update(run[i:i + 2] for i in range(max(1, len(run) - 1)))
    return out


def overlap(a: str, b: str) -> float:
    """The share of the smaller text's terms the other one has too (0 when either has none)."""
    ta, tb = terms(a), terms(b)
    return len(ta & tb) / min(len(ta), len(tb)) if ta and tb else 0.0


def jaccard(a: str, b: str) -> float:
    ta, tb = terms(a), terms(b)
    return len(ta & tb) / len(ta | tb) if ta and tb else 0.0


CITED_TURNS_MAX = 3          # the turns an entry cites beside the commit: at most this many
CITED_TURN_MIN_TERMS = 2     # a turn is cited only when it gives the entry at least this many terms of its own
_MEMORY_CALL = re.compile(r"\bmemory_(?:commit|write|nothing|recall)\b")


def conversation_turns(req: Request, transcript) -> list[tuple[int, set[str]]]:
    """The turns an entry of this request may rest on: (seq, terms) of each message before the commit with some
    text, the memory tools' own calls left out (a note quoted in an earlier ``memory_commit`` is not a source)."""
    if transcript is None:
        return []
    out = []
    for m in transcript.messages:
        if m.seq is None or m.seq >= req.seq or m.role not in ("user", "assistant", "tool"):
            continue
        text = transcript.text(m)
        if not text or _MEMORY_CALL.search(text):
            continue
        t = terms(text)
        if t:
            out.append((m.seq, t))
    return out


def cited_turns(text: str, turns: list[tuple[int, set[str]]], limit: int = CITED_TURNS_MAX) -> tuple[int, ...]:
    """The seqs of the turns an entry's ``text`` rests on, in order: greedily, the turn that gives the most of the
    entry's terms not yet given, while one gives at least ``CITED_TURN_MIN_TERMS`` (a tie goes to the later turn:
    a correction comes after what it corrects). Empty when no turn shares enough."""
    want = terms(text)
    chosen: list[int] = []
    while want and len(chosen) < limit:
        best, gain = None, set()
        for seq, t in turns:
            if seq in chosen:
                continue
            g = want & t
            if len(g) > len(gain) or (len(g) == len(gain) and g and best is not None and seq > best):
                best, gain = seq, g
        if best is None or len(gain) < CITED_TURN_MIN_TERMS:
            break
        chosen.append(best)
        want -= gain
    return tuple(sorted(chosen))


def _entry_citations(base: tuple[Citation, ...], text: str, turns: list[tuple[int, set[str]]] | None,
                     carried: tuple[Citation, ...] = ()) -> tuple[Citation, ...]:
    """An entry's citations: the request's, the commit's one naming in ``turns`` the turns the entry rests on
    (``cited_turns``; a block's citation already names its turns), then ``carried`` — those of the entries it
    supersedes, so the fact keeps where it was first said."""
    from acpmem.core.blocks import turns_text

    out = list(base)
    if turns and len(out) == 1 and out[0].block is None and out[0].turns is None:
        seqs = cited_turns(text, turns)
        if seqs:
            out[0] = out[0].with_changes(turns=turns_text(seqs))
    for c in carried:
        if c not in out:
            out.append(c)
    return tuple(out[:CITATIONS_MAX])


CITATIONS_MAX = 16   # an entry superseding a chain of entries keeps at most this many citations


def draft_from_calls(vault, req: Request, calls, extractor: str, host_tool_names: set[str], *,
                     citations: tuple[Citation, ...] | None = None, shown: list[Entry] | None = None,
                     from_text: bool = False, turns: list[tuple[int, set[str]]] | None = None) -> _Draft:
    """Turn the model's tool calls into entries. A malformed ``memory_write`` (bad JSON, content missing or
    oversize) or a native call to a tool we never offered rejects the whole answer (``ExtractionError`` reason
    ``malformed_call``: the request is retried); calls to the host's own tools are ignored (a one-shot fork cannot
    answer them), and so are calls to other tools read out of the text (``from_text``: a model quoting the history).
    Near misses are repaired with a note (``acpmem.write.answers.normalize_write_args``). At most
    ``[extraction] max_entries_per_answer`` writes are taken; the rest are dropped with a note naming them.

    ``shown``: the related entries the fork was shown. Then only those may be superseded, only by an entry of the
    same type sharing at least ``SUPERSEDE_MIN_OVERLAP`` of its terms; any other supersede is dropped with a note
    (the new entry is written, the old one untouched). A write that says what a shown entry already says
    (``DUPLICATE_OVERLAP``) is dropped with a note. None (callers without a prompt) allows any live entry.

    With ``[consolidate] fork_check`` (the default), each write is also compared by meaning with the shown entries
    (``acpmem.write.duplicates.check_write``) unless it supersedes the one it matches: a restatement of an entry of
    its own type supersedes that entry when it says more and the supersede rules above allow it, and is dropped
    with a note otherwise (one of another type is kept, with a note); a
    write that contradicts an entry is written as a proposal (superseding it once a person accepts it, when the
    rules allow), so ``acp memory review`` shows both claims.

    ``turns`` (``conversation_turns``): each entry's citation names the turns it rests on (``cited_turns``); an
    entry that supersedes others keeps their citations too."""
    from acpmem.core.tools import default_layer, parse_write_args
    from acpmem.write.answers import normalize_write_args

    draft = _Draft()
    layers = {lv.layer: lv for lv in vault.layers()}
    known_in = {name: {e.id: e for e in lv.load(with_reads=False).entries} for name, lv in layers.items()}
    taken = {i for known in known_in.values() for i in known}   # ids stay unique across the layers
    max_bytes = vault.settings.extraction.max_entry_bytes
    cap = vault.settings.extraction.max_entries_per_answer
    allowed = ("content", "title", "supersedes", "layer") if len(layers) > 1 else ("content", "title", "supersedes")
    shown_ids = None if shown is None else {e.id for e in shown}
    over: list[str] = []
    for i, call in enumerate(calls):
        if call.name in host_tool_names:
            draft.ignored.append(call.name)
            continue
        if call.name != "memory_write":
            if from_text and call.id and str(call.id).startswith("text_"):
                draft.ignored.append(call.name)
                draft.notes.append(f"a call to '{call.name}' written in the text was ignored (not a fork tool)")
                continue
            raise _malformed(f"call {i + 1} is to '{call.name}', a tool the fork does not have")
        if call.arguments is None:
            raise _malformed(f"memory_write call {i + 1}: {call.error}")
        fixed, repaired = normalize_write_args(call.arguments, allowed)
        try:
            args = parse_write_args(fixed, max_bytes, layers=len(layers) > 1)
        except EntryInvalid as exc:
            raise _malformed(f"memory_write call {i + 1}: {exc.message}") from None
        draft.notes.extend(n for n in repaired if n not in draft.notes)
        draft.writes += 1
        if len(draft.entries) >= cap:
            over.append(args.title or derive_title(args.content))
            continue
        text = f"{args.title or ''}\n{args.content}"
        same = next((e for e in shown or () if jaccard(text, f"{e.title}\n{e.body}") >= DUPLICATE_OVERLAP
                     or " ".join(args.content.split()) == " ".join(e.body.split())), None)
        if same is not None:
            draft.notes.append(f"a write repeating #{same.id} ({one_line(same.title)[:60]}) was dropped")
            draft.repeats += 1
            continue
        layer = args.layer or default_layer(req.type)
        if layer not in layers or req.type not in layers[layer].settings.types:
            layer = vault.layer   # one layer only (the schema then has no layer field), or a type it lacks
        known = known_in[layer]
        content = _redact(args.content, draft.redacted)
        if layer != LAYER_PROJECT:   # before a title is derived (and clipped) from it
            content = _user_safe(vault, content, draft)
        title = _redact(args.title, draft.redacted) if args.title else derive_title(content)
        sup = []
        for old in args.supersedes:   # within the entry's own layer: a layer never marks the other's entries
            target = known.get(old) or _unique_prefix(known, old)
            if target is None or target.superseded or target.id in draft.updates:
                draft.unknown.append(old)
                continue
            why = _supersede_refusal(target, req.type, f"{title}\n{content}", shown_ids)
            if why:
                draft.notes.append(f"supersede of #{target.id} dropped: {why}")
                continue
            sup.append(target.id)
        propose = False
        if shown and vault.settings.consolidate.fork_check:
            verdict = _meaning_check(vault, req, f"{title}\n{content}", shown, sup, known, shown_ids, draft)
            if verdict == "drop":
                continue
            propose = verdict == "propose"
        cites = _entry_citations(citations or (Citation(req.session, req.seq),), f"{title}\n{content}", turns,
                                 tuple(c for old in sup for c in known[old].citation))
        entry = _new_entry(vault, req, draft, taken, title=title, body=content, citations=cites,
                           extractor=extractor, supersedes=tuple(sup), layer=layer)
        if propose:   # what a proposal supersedes is only named in it until a person accepts it
            draft.propose.add(entry.id)
        else:
            for old in sup:
                draft.updates[old] = known[old].with_changes(superseded_by=entry.id)
                draft.layer_of[old] = layer
        draft.entries.append(entry)
    if over:
        shown_titles = "; ".join(f"'{one_line(t)[:60]}'" for t in over[:5]) + (" …" if len(over) > 5 else "")
        draft.notes.append(f"{len(over)} memory_write call(s) over the cap of {cap} per answer dropped "
                           f"([extraction] max_entries_per_answer): {shown_titles}")
    return draft


def _meaning_check(vault, req: Request, text: str, shown: list[Entry], sup: list[str], known: dict[str, Entry],
                   shown_ids: set[str] | None, draft: _Draft) -> str | None:
    """The fork's check of one write by meaning (``draft_from_calls``): ``drop``, ``propose`` or None (write it);
    a supersede it adds goes into ``sup``."""
    from acpmem.search.similar import features
    from acpmem.write.duplicates import check_write

    match = check_write(vault, text, [e for e in shown if e.id not in sup], notes=draft.notes)
    if match is None:
        return None
    old = match.entry
    name = f"#{old.id} ({one_line(old.title)[:60]})"
    mine = known.get(old.id) is not None and not known[old.id].superseded and old.id not in draft.updates
    refusal = _supersede_refusal(old, req.type, text, shown_ids) if mine else "it is in the other layer"
    if match.kind == "contradiction":
        if refusal is None:
            sup.append(old.id)
        draft.notes.append(f"a write contradicting {name} ({match.why}) is a proposal for a person to decide"
                           + (f"; it does not supersede it: {refusal}" if refusal else ""))
        return "propose"
    if old.type != req.type:   # a decision beside the fact it restates says something of its own: kept
        draft.notes.append(f"a write restating {name} ({match.why}) is kept: it is a {req.type}, that one a "
                           f"{old.type} (`acp memory consolidate` can merge them)")
        return None
    says_more = len(features(text).terms - features(f"{old.title}\n{old.body}").terms) > 0 and \
        len(text) > len(f"{old.title}\n{old.body}")
    if refusal is None and says_more:
        sup.append(old.id)
        draft.notes.append(f"a write restating {name} ({match.why}) supersedes it: it says more")
        return None
    draft.notes.append(f"a write restating {name} by meaning ({match.why}) was dropped")
    return "drop"


def _supersede_refusal(old: Entry, new_type: str, new_text: str, shown_ids: set[str] | None) -> str | None:
    """Why the fork may not supersede ``old`` with an entry of ``new_type`` saying ``new_text``, or None."""
    if shown_ids is not None and old.id not in shown_ids:
        return "the fork was not shown it as related"
    if old.type != new_type:
        return f"it is a {old.type}, the new entry a {new_type}"
    share = overlap(new_text, f"{old.title}\n{old.body}")
    if share < SUPERSEDE_MIN_OVERLAP:
        return f"the new entry shares only {share:.0%} of its terms"
    return None


def _unique_prefix(known: dict[str, Entry], prefix: str) -> Entry | None:
    hits = [e for i, e in known.items() if i.startswith(prefix)]
    return hits[0] if len(hits) == 1 else None


ANSWER_TEXT_CHARS = 4000


def read_reply(result) -> "object":
    """The model's answer read (``acpmem.write.answers.Reading``); a truncated one (``finish_reason: length``) is
    a failure with its text kept."""
    from acpmem.write.answers import read_answer

    if result.finish_reason == "length":
        raise _unusable(result, f"the answer was cut off at the token limit ({result.completion_tokens} tokens)",
                        hint="the request stays pending and is retried; raise [extraction] max_tokens if answers "
                             "are long", reason="truncated")
    return read_answer(result.tool_calls, result.text)


def _unusable(result, why: str, *, hint: str = "the request stays pending and is retried; `acp memory stats "
              "--json` shows the whole answer", reason: str = "no_usable_write") -> ExtractionError:
    from acpmem.write.answers import excerpt

    text = result.text or ""
    if not text and result.tool_calls:
        text = json.dumps([c.to_json() for c in result.tool_calls], ensure_ascii=False)
    shown = f": «{excerpt(text)}»" if text.strip() else " (empty answer)"
    return ExtractionError(f"Unusable answer: {why}{shown}", hint, reason=reason, attempts=1, retryable=True,
                           status=None, text=text[:ANSWER_TEXT_CHARS])


def _malformed(message: str) -> ExtractionError:
    return ExtractionError(f"Malformed tool call: {message}", "the request stays pending and is retried",
                           reason="malformed_call", attempts=1, retryable=True, status=None)


def under_policy(target, entries: list[Entry], updates: list[Entry],
                 propose: set[str] = frozenset()) -> tuple[list[Entry], list[Entry], str]:
    """What the fork's entries for the vault ``target`` become under its ``[write] policy``: under ``review``,
    proposals (``acpmem.vault.review``) — written under ``proposals/``, what they supersede only named in them, no
    other entry touched until a person accepts them — else entries, but those in ``propose`` (a contradiction of
    an entry) proposals still. Returns (entries, updates, commit kind)."""
    from acpmem.vault.writer import KIND_FORK, KIND_PROPOSE

    if target.settings.write.policy != "review" or not entries:
        return [e.with_changes(path=target.path_for(e.id, e.title, PROPOSALS_DIR)) if e.id in propose else e
                for e in entries], updates, KIND_FORK
    return [e.with_changes(path=target.path_for(e.id, e.title, PROPOSALS_DIR)) for e in entries], [], KIND_PROPOSE


def commit_draft(vault, req: Request, draft: _Draft, model_label: str, extractor: str) -> str | None:
    """Write the draft's entries (and the superseded ones) in one commit per layer carrying the request's trailers,
    each as its own vault's write policy has them (``under_policy``): the user vault's first, then the project
    vault's, which marks the request done (``process_request``). Returns the project commit (the user one when every
    entry went to the user vault)."""
    user_entries, user_updates = draft.part(LAYER_USER)
    entries, updates = draft.part(LAYER_PROJECT)
    if vault.layer == LAYER_USER:   # the vault opened is the user vault itself: one layer, one commit
        entries, updates, user_entries, user_updates = user_entries + entries, user_updates + updates, [], []
    user_kind = None
    if user_entries or user_updates:
        user_entries, user_updates, user_kind = under_policy(vault.user, user_entries, user_updates, draft.propose)
    entries, updates, kind = under_policy(vault, entries, updates, draft.propose)
    draft.entries = user_entries + entries
    draft.updates = {e.id: e for e in user_updates + updates}
    trailers = {"Acpmem-Request": req.id, "Acpmem-Session": req.session, "Acpmem-Seq": str(req.seq),
                "Acpmem-Note": req.note, "Acpmem-Model": model_label, "Acpmem-Extractor": extractor}
    sha = None
    if user_entries or user_updates:
        note = _user_safe(vault, req.note, draft)   # the user vault's history is read in every project too
        sha = vault.user.write_entries(
            user_entries, subject=_subject(req, user_entries or user_updates),
            why=_why(req, extractor, note, user_updates), kind=user_kind,
            trailers={**trailers, "Acpmem-Note": note, USER_PART_TRAILER: "yes" if entries or updates else "no"},
            updates=user_updates)
    if entries or updates:
        sha = vault.write_entries(entries, subject=_subject(req, entries or updates),
                                  why=_why(req, extractor, req.note, updates, draft.notes), kind=kind, trailers=trailers,
                                  updates=updates)
    return sha


USER_PART_TRAILER = "Acpmem-Project-Part"   # in a user-vault commit: whether a project commit follows it


def _subject(req: Request, entries: list[Entry]) -> str:
    n = len(entries)
    return f"{n} {'entry' if n == 1 else 'entries'} from {req.id}: {entries[0].title}"


def _why(req: Request, extractor: str, note: str, updates: list[Entry], notes: list[str] = ()) -> str:
    why = (f"Distilled by the fork ({extractor}) from session {req.session} up to seq {req.seq}.\n"
           f"Focus: {note}")
    if updates:
        why += "\nSupersedes: " + ", ".join(f"#{e.id}" for e in updates)
    if notes:
        why += "\nNotes:\n" + "\n".join(f"- {one_line(n)}" for n in notes)
    return why


# --------------------------------------------------------------------------------------------- processing

def process_request(vault, request_id: str, *, extractor: str | None = None, explicit: bool = False, env=None,
                    progress: Callable[[str, str], None] | None = None) -> Outcome:
    """Extract one request and write its entries in one commit. Call with the worker lock held."""
    from acpmem.vault.history import commit_for_request
    from acpmem.write import llm

    say = progress or (lambda rid, what: None)
    state = vault.state_dir
    req = requests.load_request(state, request_id)
    if req is None:
        done = requests.find_done(state, request_id)
        if done:
            return Outcome(request_id, "already", done.get("extractor"), done.get("commit"))
        return Outcome(request_id, "missing")
    now = utc_iso(vault.clock())
    if not explicit and not req.due(now):
        why = "failed for good; name it to retry" if req.status == "failed" else f"next attempt {req.next_attempt}"
        return Outcome(req.id, "skipped", error={"message": why}, attempts=req.attempts)
    from acpmem.vault.gitrun import writes_blocked

    for layer in vault.layers():   # a rebase, a detached HEAD: refused before any model call, no attempt used
        blocked = writes_blocked(layer.root)
        if blocked is not None:
            raise blocked

    # a write of this request killed between its files and its commit is finished (or dropped) first: only then
    # does the history say whether it happened
    for layer_vault in dict.fromkeys(lv for lv in (vault.user, vault) if lv is not None):
        layer_vault.finish_interrupted()
    sha = commit_for_request(vault, requests.check_request_id(req.id))
    if sha:
        return _finish(vault, req, Outcome(req.id, "already", commit=sha, attempts=req.attempts))
    user_done = False
    if not sha and vault.user is not None:   # the user part is committed first: done, or half done?
        user_sha = commit_for_request(vault.user, req.id)
        if user_sha:
            from acpmem.vault.gitrun import git

            body = git(vault.user.root, "log", "-1", "--format=%B", user_sha, check=False).out
            if f"{USER_PART_TRAILER}: yes" not in body:
                return _finish(vault, req, Outcome(req.id, "already", commit=user_sha, attempts=req.attempts))
            user_done = True   # killed between the two commits: this run writes the project part only

    result = None
    kind, config = "offline", None
    label = "offline"
    try:
        from acpmem.core.tools import parse_commit_args

        # a request file is local state a person can edit, and the vault's types can change after the commit
        parse_commit_args({"type": req.type, "note": req.note, "importance": req.importance}, vault.settings.types)
        kind, config = choose_extractor(vault, extractor, env, req)
        label = config.extractor if config else "offline"
        say(req.id, "reading the transcript")
        t = conversation(req)
        cites = request_citations(req, t)
        if kind == "offline":
            from acpmem.write.offline import extract_offline

            say(req.id, "offline extraction")
            draft = _offline_draft(vault, req, t, extract_offline)
        else:
            deferred = _over_budget(vault, req, now)
            if deferred is not None:
                return deferred
            notes: list[str] = []
            rel = related_entries(vault, req.note)
            shown = rel
            for again in (False, True):
                # the second pass: every write of the first repeated an entry shown as related (small models
                # copy what they were shown instead of reading the conversation); asked once more without them,
                # the repeats still checked against them
                body = fork_body(vault, req, config, transcript=t, related=[] if again else rel, notes=notes)
                say(req.id, f"calling {config.model}")
                try:
                    result = llm.call_chat(config, body)
                except ExtractionError as exc:
                    costs.append(state, costs.record(None, at=now, request=req.id, session=req.session, error=exc,
                                                     model=config.model))
                    raise
                host_names = {tool["function"]["name"] for tool in body["tools"]} - {"memory_write",
                                                                                      "memory_nothing"}
                try:
                    reading = read_reply(result)
                    draft = draft_from_calls(vault, req, reading.calls, label, host_names, citations=cites,
                                             shown=shown, from_text=reading.source != "tool_calls",
                                             turns=conversation_turns(req, t))
                    draft.notes[:0] = notes + list(reading.notes)
                    if not draft.writes and reading.nothing is None:
                        raise _unusable(result, "the answer has no memory_write call and does not say nothing to "
                                        "keep" + (f" (it called {', '.join(sorted(set(draft.ignored)))})"
                                                  if draft.ignored else ""))
                except ExtractionError as exc:
                    costs.append(state, costs.record(result, at=now, request=req.id, session=req.session,
                                                     entries=0, error=exc))
                    raise
                costs.append(state, costs.record(result, at=now, request=req.id, session=req.session,
                                                 entries=len(draft.entries)))
                if again or not rel or draft.entries or not draft.writes or draft.repeats < draft.writes:
                    break
                notes = [n for n in draft.notes] + ["every write repeated an entry shown as related: asked "
                                                    "again without the related entries"]
            draft.notes = list(dict.fromkeys(draft.notes))
            if reading.nothing is not None:
                draft.notes.append(f"memory_nothing: {reading.nothing}")
        usage = _usage(result)
        if user_done:
            drop = {e.id for e in draft.entries + list(draft.updates.values())
                    if draft.layer_of.get(e.id) == LAYER_USER}
            draft.entries = [e for e in draft.entries if e.id not in drop]
            draft.updates = {k: e for k, e in draft.updates.items() if k not in drop}
        if not draft.entries:
            out = Outcome(req.id, "nothing", label, None, (), (), tuple(draft.unknown), tuple(draft.redacted),
                          tuple(draft.ignored), None, usage, req.attempts + 1, tuple(draft.notes))
            return _finish(vault, req, out)
        from acpmem.write.about import annotate

        draft.entries = annotate(vault, t, draft.entries, draft.layer_of)
        say(req.id, "committing")
        sha = commit_draft(vault, req, draft, config.model if config else "offline", label)
        proposed = all(e.path.startswith(PROPOSALS_DIR + "/") for e in draft.entries) and bool(draft.entries)
        out = Outcome(req.id, "proposed" if proposed else "written", label, sha,
                      tuple({"id": e.id, "title": e.title, "path": e.path, "type": e.type,
                             "layer": draft.layer_of.get(e.id, LAYER_PROJECT)} for e in draft.entries),
                      tuple(draft.updates), tuple(draft.unknown), tuple(dict.fromkeys(draft.redacted)),
                      tuple(draft.ignored), None, usage, req.attempts + 1, tuple(draft.notes))
        return _finish(vault, req, out)
    except Exception as exc:  # noqa: BLE001 - whatever it was, it is recorded and retried, never a stuck queue
        if isinstance(exc, AcpmemError):
            error = {"message": exc.message, "hint": exc.hint, "kind": type(exc).__name__}
            if "reason" in exc.data:
                error["reason"] = exc.data["reason"]
            if exc.data.get("text"):   # the model's own words, for doctor, stats and extract --failed
                error["text"] = str(exc.data["text"])[:ANSWER_TEXT_CHARS]
        elif isinstance(exc, (OSError, sqlite3.Error)):   # the machine's, not a bug: a deleted .acpmem/, a disk
            error = {"message": f"the vault's files or its index could not be used ({type(exc).__name__}: "
                                f"{exc})"[:500], "kind": "storage",
                     "hint": "it is tried again on its schedule; `acp memory doctor` checks the vault"}
        else:
            error = {"message": f"unexpected {type(exc).__name__}: {exc}"[:500], "kind": "internal",
                     "hint": "report this bug; the request is kept"}
        cfg = vault.settings.extraction
        new = requests.record_failure(state, req, error, vault.clock(), vault.rng,
                                      base_seconds=cfg.retry_base_seconds, max_attempts=cfg.max_attempts)
        return Outcome(req.id, "failed" if new.status == "failed" else "retry", label, error={**error},
                       usage=_usage(result), attempts=new.attempts)


def _over_budget(vault, req: Request, now: str) -> Outcome | None:
    """When an extraction budget is spent: the request kept pending, not attempted, until it frees — the
    ``deferred`` outcome; else None (``acpmem.write.budget``)."""
    from acpmem.write import budget

    st = budget.current(vault.state_dir, vault.clock(), vault.settings.extraction)
    if st is None or not st.over:
        return None
    new = requests.defer(vault.state_dir, req, st.reason, st.frees_at)
    return Outcome(req.id, "deferred", error={"message": f"{st.reason}; it waits until {st.frees_at}",
                                              "reason": "budget"}, attempts=new.attempts)


def _offline_draft(vault, req: Request, transcript, extract_offline) -> _Draft:
    from acpmem.core.tools import default_layer

    draft = _Draft()
    layers = vault.layers()
    layer = default_layer(req.type) if len(layers) > 1 else vault.layer
    if layer != vault.layer and req.type not in layers[-1].settings.types:
        layer = vault.layer   # the user vault does not know this type: the project vault keeps it
    max_bytes = vault.settings.extraction.max_entry_bytes
    blk = request_block(req, transcript)
    if blk is not None:   # quote from the turns the block covers, after the block's own summary
        transcript = transcript.with_changes(messages=transcript.turns(blk.seqs))
        max_bytes = max(1024, max_bytes - len(blk.summary.encode("utf-8")) - 200)
    note = req.note
    if layer != LAYER_PROJECT:
        # before the extractor clips titles and quotes: a path cut in half would no longer be recognised
        note = _user_safe(vault, note, draft)
        if transcript is not None:
            transcript = transcript.with_changes(messages=tuple(
                m.with_changes(content=_user_safe(vault, transcript.text(m), draft), raw={})
                for m in transcript.messages))
        if blk is not None:
            blk = blk.with_changes(summary=_user_safe(vault, blk.summary, draft),
                                   topic=_user_safe(vault, blk.topic, draft) if blk.topic else blk.topic)
    text = extract_offline(transcript, note, max_bytes=max_bytes, lang=vault.settings.language)
    body = text.body
    if blk is not None:
        from acpmem.write.offline import block_lines

        body = block_lines(blk, body, vault.settings.language, vault.settings.extraction.max_entry_bytes)
    body = _redact(body, draft.redacted)
    title = _redact(text.title, draft.redacted)
    if blk is not None:
        cites = request_citations(req, transcript)
    else:
        cites = tuple(Citation(req.session, s) for s in text.seqs) or (Citation(req.session, req.seq),)
    taken = {e.id for lv in layers for e in lv.load(with_reads=False, light=True).entries}
    draft.entries.append(_new_entry(vault, req, draft, taken, title=title, body=body, citations=cites,
                                    extractor="offline", layer=layer))
    return draft


def _usage(result) -> dict | None:
    if result is None:
        return None
    return {"model": result.model, "prompt_tokens": result.prompt_tokens, "cached_tokens": result.cached_tokens,
            "completion_tokens": result.completion_tokens, "latency_s": round(result.latency_s, 3),
            "attempts": result.attempts}


def _finish(vault, req: Request, out: Outcome) -> Outcome:
    """Record the outcome, then remove the request: the last step, after the commit exists."""
    rec = {"at": utc_iso(vault.clock()), "request": req.id, "session": req.session, "seq": req.seq,
           "status": out.status, "commit": out.commit, "extractor": out.extractor,
           "entries": [e["id"] for e in out.entries]}
    if out.notes:
        rec["notes"] = list(out.notes)
    if out.status != "already" or not requests.find_done(vault.state_dir, req.id):
        requests.append_done(vault.state_dir, rec)
    requests.remove_request(vault.state_dir, req.id)
    return out
