"""The fork (SPEC §5.2): turning one pending commit request into entries, exactly once.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from acpmem import queue
from acpmem.errors import AcpmemError, EntryInvalid, ExtractionError, UsageError
from acpmem.model import Citation, Entry

RELATED_LIMIT = 5
RELATED_BODY_CHARS = 1500
TITLE_CHARS = 120
COSTS_FILE = "costs.jsonl"
EXTRACTORS = ("auto", "llm", "offline")


@dataclass(frozen=True)
class Outcome:
    """What happened to one request. ``status``: ``written`` (a commit), ``nothing`` (the model kept nothing),
    ``already`` (done before: found in history), ``retry`` (this attempt failed; pending with backoff), ``failed``
    (attempts exhausted; kept), ``skipped`` (not due, or failed and not named), ``missing`` (no such request)."""

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

    @property
    def ok(self) -> bool:
        return self.status in ("written", "nothing", "already")

    def to_json(self) -> dict:
        return {"request": self.request, "status": self.status, "extractor": self.extractor, "commit": self.commit,
                "entries": list(self.entries), "superseded": list(self.superseded),
                "unknown_supersedes": list(self.unknown_supersedes), "redacted": list(self.redacted),
                "ignored_calls": list(self.ignored_calls), "error": self.error, "usage": self.usage,
                "attempts": self.attempts}

    def summary(self) -> str:
        head = f"{self.request}: "
        if self.status == "written":
            ids = ", ".join(f"#{e['id']}" for e in self.entries)
            line = f"{head}wrote {len(self.entries)} {'entry' if len(self.entries) == 1 else 'entries'} ({ids}) " \
                   f"in commit {self.commit[:12]}"
            if self.superseded:
                line += f"; superseded {', '.join('#' + i for i in self.superseded)}"
        elif self.status == "nothing":
            line = f"{head}nothing worth keeping (no commit)"
        elif self.status == "already":
            line = f"{head}already done" + (f" (commit {self.commit[:12]})" if self.commit else "")
        elif self.status in ("retry", "failed"):
            msg = (self.error or {}).get("message", "")
            line = f"{head}{'failed for good' if self.status == 'failed' else 'failed, will retry'} " \
                   f"(attempt {self.attempts}): {msg}"
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
        return line


# --------------------------------------------------------------------------------------------- the request body

def conversation(req: queue.Request):
    """The transcript prefix the fork sees, or None when the commit named no transcript."""
    if not req.transcript:
        return None
    from acpmem.errors import TranscriptError
    from acpmem.transcript import read_transcript

    t = read_transcript(req.transcript).upto(req.seq)
    if not t.messages:
        raise TranscriptError(f"{req.transcript}: no message at or before seq {req.seq}",
                              "pass the seq of the memory_commit call in this transcript")
    return t


def related_entries(vault, note: str, limit: int = RELATED_LIMIT, exclude: tuple[str, ...] = ()) -> list[Entry]:
    """The live entries most related to the note, best first: recall over the derived index (so it scales with the
    vault), without marking them read — the fork reading them is not a person or a model using them."""
    from acpmem.retrieval import recall

    if not note.strip():
        return []
    hits = recall(vault, note, limit=limit + len(exclude), mark_read=False)
    return [h.entry for h in hits if h.entry.id not in exclude][:limit]


def related_text(entries: list[Entry]) -> str:
    from acpmem.framing import frame

    parts = []
    for e in entries:
        body = e.body.strip()
        if len(body) > RELATED_BODY_CHARS:
            body = body[:RELATED_BODY_CHARS].rstrip() + " …"
        parts.append(frame("related", body, attrs={"id": e.id, "type": e.type, "title": e.title}))
    return "\n\n".join(parts)


def load_host_tools(path: str | None) -> list[dict]:
    """The host's tool definitions (OpenAI function tools, a JSON list or ``{"tools": [...]}``), unchanged."""
    if not path:
        return []
    try:
        doc = json.loads(Path(path).read_text("utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such tool definition file", "pass the host's tools as a JSON file") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})", "pass a JSON list of OpenAI function tools") from None
    tools = doc.get("tools") if isinstance(doc, dict) else doc
    if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("function"), dict)
                                              and t["function"].get("name") for t in tools):
        raise UsageError(f"{path}: expected a list of OpenAI function tools",
                         'each item: {"type": "function", "function": {"name": ..., "parameters": ...}}')
    if any(t["function"]["name"] == "memory_write" for t in tools):
        raise UsageError(f"{path}: the host's tools include memory_write", "memory_write is the fork's own tool")
    return tools


def build_body(vault, req: queue.Request, model: str | None, *, transcript=None,
               related: list[Entry] | None = None) -> dict:
    """The exact chat-completions body the fork sends (``extract --dry-run`` prints it)."""
    from acpmem.tools import fork_instruction, tool_definitions
    from acpmem.transcript import close_tool_calls, openai_messages

    t = conversation(req) if transcript is None else transcript
    messages = close_tool_calls(openai_messages(t), req.ack) if t is not None else []
    rel = related_entries(vault, req.note) if related is None else related
    lang = vault.settings.language
    messages.append({"role": "user", "content": fork_instruction(req.note, req.type, req.importance,
                                                                 related_text(rel), lang)})
    tools = load_host_tools(req.host_tools) + tool_definitions("fork", "openai", lang, vault.settings.types)
    body: dict = {"model": model} if model else {}
    body.update(messages=messages, tools=tools, tool_choice="auto")
    return body


# --------------------------------------------------------------------------------------------- extractor choice

def choose_extractor(vault, override: str | None = None, env=None):
    """(``"llm"`` with its ``ModelConfig``) or (``"offline"``, None): ``override`` > ``[extraction] extractor``; ``auto``
    uses a model when one is configured."""
    from acpmem.llm import resolve_model_config

    name = override or vault.settings.extraction.extractor
    if name not in EXTRACTORS:
        raise UsageError(f"Unknown extractor '{name}'", "use --extractor auto | llm | offline")
    if name == "offline":
        return "offline", None
    config = resolve_model_config(vault.settings.extraction, env)
    if name == "auto" and not config.configured:
        return "offline", None
    return "llm", config


# --------------------------------------------------------------------------------------------- applying results

@dataclass
class _Draft:
    entries: list[Entry] = field(default_factory=list)
    updates: dict[str, Entry] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    redacted: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def derive_title(content: str) -> str:
    """A title from the content's first line: markdown markers dropped, clipped at a word boundary."""
    for line in content.splitlines():
        line = re.sub(r"^\s*(?:[-*+>#]+|\d+[.)])\s*", "", line).strip()
        line = re.sub(r"[`*_]{1,3}", "", line).strip()
        if line:
            if len(line) > TITLE_CHARS:
                cut = line[:TITLE_CHARS].rsplit(" ", 1)[0]
                line = (cut if len(cut) > TITLE_CHARS // 2 else line[:TITLE_CHARS]).rstrip(" ,;:") + "…"
            return line
    return "(untitled)"


def _redact(text: str, found: list[str]) -> str:
    from acpmem.secrets import redact

    clean, findings = redact(text, deep=True)
    found.extend(f.kind for f in findings)
    return clean


def _new_entry(vault, req: queue.Request, draft: _Draft, taken: set[str], *, title: str, body: str,
               citations: tuple[Citation, ...], extractor: str, supersedes: tuple[str, ...] = ()) -> Entry:
    ident = vault.new_id(taken)
    taken.add(ident)
    body = body.strip("\n") + "\n"
    e = Entry(id=ident, title=title, type=req.type, importance=req.importance, created=vault.now(), body=body,
              citation=citations, source={"request": req.id, "extractor": extractor}, supersedes=supersedes)
    return e.with_changes(path=vault.path_for(ident, title))


def draft_from_calls(vault, req: queue.Request, calls, extractor: str, host_tool_names: set[str]) -> _Draft:
    """Turn the model's tool calls into entries. A malformed ``memory_write`` (bad JSON, wrong fields, oversize) or a
    call to a tool we never offered rejects the whole answer (``ExtractionError`` reason ``malformed_call``: the request
    is retried); calls to the host's own tools are ignored (a one-shot fork cannot answer them)."""
    from acpmem.tools import parse_write_args

    draft = _Draft()
    loaded = vault.load(with_reads=False)
    known = {e.id: e for e in loaded.entries}
    taken = set(known)
    max_bytes = vault.settings.extraction.max_entry_bytes
    for i, call in enumerate(calls):
        if call.name in host_tool_names:
            draft.ignored.append(call.name)
            continue
        if call.name != "memory_write":
            raise _malformed(f"call {i + 1} is to '{call.name}', a tool the fork does not have")
        if call.arguments is None:
            raise _malformed(f"memory_write call {i + 1}: {call.error}")
        try:
            args = parse_write_args(call.arguments, max_bytes)
        except EntryInvalid as exc:
            raise _malformed(f"memory_write call {i + 1}: {exc.message}") from None
        content = _redact(args.content, draft.redacted)
        title = _redact(args.title, draft.redacted) if args.title else derive_title(content)
        sup = []
        for old in args.supersedes:
            target = known.get(old) or _unique_prefix(known, old)
            if target is None or target.superseded or target.id in draft.updates:
                draft.unknown.append(old)
                continue
            sup.append(target.id)
        entry = _new_entry(vault, req, draft, taken, title=title, body=content,
                           citations=(Citation(req.session, req.seq),), extractor=extractor, supersedes=tuple(sup))
        for old in sup:
            draft.updates[old] = known[old].with_changes(superseded_by=entry.id)
        draft.entries.append(entry)
    return draft


def _unique_prefix(known: dict[str, Entry], prefix: str) -> Entry | None:
    hits = [e for i, e in known.items() if i.startswith(prefix)]
    return hits[0] if len(hits) == 1 else None


def _malformed(message: str) -> ExtractionError:
    return ExtractionError(f"Malformed tool call: {message}", "the request stays pending and is retried",
                           reason="malformed_call", attempts=1, retryable=True, status=None)


def commit_draft(vault, req: queue.Request, draft: _Draft, model_label: str, extractor: str) -> str:
    """Write the draft's entries (and the superseded ones) in one commit carrying the request's trailers."""
    n = len(draft.entries)
    first = draft.entries[0].title
    subject = f"{n} {'entry' if n == 1 else 'entries'} from {req.id}: {first}"
    why = (f"Distilled by the fork ({extractor}) from session {req.session} up to seq {req.seq}.\n"
           f"Focus: {req.note}")
    if draft.updates:
        why += "\nSupersedes: " + ", ".join(f"#{i}" for i in draft.updates)
    trailers = {"Acpmem-Request": req.id, "Acpmem-Session": req.session, "Acpmem-Seq": str(req.seq),
                "Acpmem-Note": req.note, "Acpmem-Model": model_label, "Acpmem-Extractor": extractor}
    from acpmem.vault import KIND_FORK

    return vault.write_entries(draft.entries, subject=subject, why=why, kind=KIND_FORK, trailers=trailers,
                               updates=list(draft.updates.values()))


def commit_for_request(vault, request_id: str) -> str | None:
    """The commit that carries ``Acpmem-Request: <id>``, if any (the exactly-once check)."""
    from acpmem.vault import git

    queue.check_request_id(request_id)
    # Anchored: a note (one line, behind "Focus:" or "Acpmem-Note:") can never fake this line.
    res = git(vault.root, "log", "--format=%H", f"--grep=^Acpmem-Request: {request_id}$", check=False)
    shas = res.out.split()
    return shas[0] if res.code == 0 and shas else None


# --------------------------------------------------------------------------------------------- processing

def process_requests(vault, ids: list[str], *, extractor: str | None = None, explicit: bool = False,
                     hold_lock: bool = True, env=None, progress: Callable[[str, str], None] | None = None,
                     lock_timeout: float = 300.0) -> list[Outcome]:
    """Process the named requests in order. ``hold_lock`` takes the worker lock for the duration (the caller is not the
    worker); ``explicit`` runs requests even when they wait for their backoff or have failed for good."""
    if not hold_lock:
        return [process_request(vault, rid, extractor=extractor, explicit=explicit, env=env, progress=progress)
                for rid in ids]
    with queue.worker_lock(vault.state_dir, timeout=lock_timeout):
        outcomes = [process_request(vault, rid, extractor=extractor, explicit=explicit, env=env, progress=progress)
                    for rid in ids]
    _hand_over(vault)
    return outcomes


def _hand_over(vault) -> None:
    """After holding the worker lock without being the worker: a request submitted meanwhile found the lock taken
    and was told a worker runs, so start one if anything is due (the worker itself looks again the same way when it
    releases the lock)."""
    now = queue._utc(vault.clock())
    try:
        if any(r.due(now) for r in queue.list_requests(vault.state_dir)[0]):
            queue.start_worker(vault.root, vault.state_dir)
    except OSError as exc:
        vault.warnings.append(f"could not start the background worker ({exc}); pending requests stay pending")


def process_request(vault, request_id: str, *, extractor: str | None = None, explicit: bool = False, env=None,
                    progress: Callable[[str, str], None] | None = None) -> Outcome:
    """Extract one request and write its entries in one commit. Call with the worker lock held."""
    from acpmem import llm

    say = progress or (lambda rid, what: None)
    state = vault.state_dir
    req = queue.load_request(state, request_id)
    if req is None:
        done = queue.find_done(state, request_id)
        if done:
            return Outcome(request_id, "already", done.get("extractor"), done.get("commit"))
        return Outcome(request_id, "missing")
    now = queue._utc(vault.clock())
    if not explicit and not req.due(now):
        why = "failed for good; name it to retry" if req.status == "failed" else f"next attempt {req.next_attempt}"
        return Outcome(req.id, "skipped", error={"message": why}, attempts=req.attempts)
    sha = commit_for_request(vault, req.id)
    if sha:
        return _finish(vault, req, Outcome(req.id, "already", commit=sha, attempts=req.attempts))

    result = None
    kind, config = "offline", None
    label = "offline"
    try:
        kind, config = choose_extractor(vault, extractor, env)
        label = config.extractor if config else "offline"
        say(req.id, "reading the transcript")
        t = conversation(req)
        if kind == "offline":
            from acpmem.offline import extract_offline

            say(req.id, "offline extraction")
            draft = _offline_draft(vault, req, t, extract_offline)
        else:
            say(req.id, f"calling {config.model}")
            body = build_body(vault, req, config.model, transcript=t)
            try:
                result = llm.call_chat(config, body)
            except ExtractionError as exc:
                llm.append_cost(state / COSTS_FILE, llm.cost_record(None, at=now, request=req.id, session=req.session,
                                                                    error=exc, model=config.model))
                raise
            host_names = {tool["function"]["name"] for tool in body["tools"][:-1]}
            try:
                draft = draft_from_calls(vault, req, result.tool_calls, label, host_names)
            except ExtractionError as exc:
                llm.append_cost(state / COSTS_FILE, llm.cost_record(result, at=now, request=req.id,
                                                                    session=req.session, entries=0, error=exc))
                raise
            llm.append_cost(state / COSTS_FILE, llm.cost_record(result, at=now, request=req.id, session=req.session,
                                                                entries=len(draft.entries)))
        usage = _usage(result)
        if not draft.entries:
            out = Outcome(req.id, "nothing", label, None, (), (), tuple(draft.unknown), tuple(draft.redacted),
                          tuple(draft.ignored), None, usage, req.attempts + 1)
            return _finish(vault, req, out)
        say(req.id, "committing")
        sha = commit_draft(vault, req, draft, config.model if config else "offline", label)
        out = Outcome(req.id, "written", label, sha,
                      tuple({"id": e.id, "title": e.title, "path": e.path, "type": e.type} for e in draft.entries),
                      tuple(draft.updates), tuple(draft.unknown), tuple(dict.fromkeys(draft.redacted)),
                      tuple(draft.ignored), None, usage, req.attempts + 1)
        return _finish(vault, req, out)
    except Exception as exc:  # noqa: BLE001 - whatever it was, it is recorded and retried, never a stuck queue
        if isinstance(exc, AcpmemError):
            error = {"message": exc.message, "hint": exc.hint, "kind": type(exc).__name__}
            if "reason" in exc.data:
                error["reason"] = exc.data["reason"]
        else:
            error = {"message": f"unexpected {type(exc).__name__}: {exc}"[:500], "kind": "internal",
                     "hint": "report this bug; the request is kept"}
        new = queue.record_failure(state, req, error, vault.clock(), vault.rng)
        return Outcome(req.id, "failed" if new.status == "failed" else "retry", label, error={**error},
                       usage=_usage(result), attempts=new.attempts)


def _offline_draft(vault, req: queue.Request, transcript, extract_offline) -> _Draft:
    draft = _Draft()
    text = extract_offline(transcript, req.note, max_bytes=vault.settings.extraction.max_entry_bytes,
                           lang=vault.settings.language)
    body = _redact(text.body, draft.redacted)
    title = _redact(text.title, draft.redacted)
    cites = tuple(Citation(req.session, s) for s in text.seqs) or (Citation(req.session, req.seq),)
    taken = {e.id for e in vault.load(with_reads=False, light=True).entries}
    draft.entries.append(_new_entry(vault, req, draft, taken, title=title, body=body, citations=cites,
                                    extractor="offline"))
    return draft


def _usage(result) -> dict | None:
    if result is None:
        return None
    return {"model": result.model, "prompt_tokens": result.prompt_tokens, "cached_tokens": result.cached_tokens,
            "completion_tokens": result.completion_tokens, "latency_s": round(result.latency_s, 3),
            "attempts": result.attempts}


def _finish(vault, req: queue.Request, out: Outcome) -> Outcome:
    """Record the outcome, then remove the request: the last step, after the commit exists."""
    rec = {"at": queue._utc(vault.clock()), "request": req.id, "session": req.session, "seq": req.seq,
           "status": out.status, "commit": out.commit, "extractor": out.extractor,
           "entries": [e["id"] for e in out.entries]}
    if out.status != "already" or not queue.find_done(vault.state_dir, req.id):
        queue.append_done(vault.state_dir, rec)
    queue.remove_request(vault.state_dir, req.id)
    return out


# --------------------------------------------------------------------------------------------- stats

def _tree_bytes(path: Path) -> int:
    total = 0
    for p in path.rglob("*") if path.exists() else ():
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            continue
    return total


def stats(vault) -> dict:
    """``acp memory stats``: entries by type, sizes on disk, index size, session budgets used, requests, costs."""
    from acpmem.llm import read_costs, summarize_costs

    loaded = vault.load(with_reads=False, light=True)
    by_type: dict[str, int] = {t: 0 for t in vault.settings.types}
    for e in loaded.live():
        by_type[e.type] = by_type.get(e.type, 0) + 1
    state = vault.state_dir
    index_bytes = sum(p.stat().st_size for p in state.glob("*.sqlite*") if p.is_file()) if state.exists() else 0
    sessions_dir = state / "sessions"
    budgets, n_sessions, s_bytes = [], 0, 0
    for d in sorted(sessions_dir.iterdir()) if sessions_dir.is_dir() else ():
        if not d.is_dir():
            continue
        n_sessions += 1
        size = _tree_bytes(d)
        s_bytes += size
        try:   # the surfacing ledger (SPEC §6.2, acpmem.retrieval): bytes surfaced so far in this session
            used = int(json.loads((d / "surfaced.json").read_text("utf-8")).get("used_bytes", 0))
        except (OSError, ValueError, TypeError, AttributeError):
            used = 0
        if used:
            budgets.append({"session": d.name, "used_bytes": used,
                            "budget_bytes": vault.settings.surface.session_budget_bytes})
    reqs, broken = queue.list_requests(state)
    done = queue.read_done(state)
    return {
        "entries": {"live": len(loaded.live()), "superseded": len(loaded.entries) - len(loaded.live()),
                    "invalid": len(loaded.problems), "by_type": by_type},
        "disk": {"entries_bytes": _tree_bytes(vault.entries_dir), "git_bytes": _tree_bytes(vault.root / ".git"),
                 "state_bytes": _tree_bytes(state), "index_bytes": index_bytes},
        "sessions": {"count": n_sessions, "bytes": s_bytes, "budgets": budgets},
        "requests": {"pending": sum(r.status == "pending" for r in reqs),
                     "failed": sum(r.status == "failed" for r in reqs), "broken": broken,
                     "done": len(done), "nothing_written": sum(d.get("status") == "nothing" for d in done),
                     "items": [{"id": r.id, "status": r.status, "attempts": r.attempts, "created": r.created,
                                "next_attempt": r.next_attempt, "note": r.note,
                                "last_error": (r.last_error or {}).get("message")} for r in reqs]},
        "costs": summarize_costs(read_costs(state / COSTS_FILE)),
    }
