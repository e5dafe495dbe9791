"""The fork's conductor: one pending commit request into entries, in one commit, exactly once.

It chooses the extractor (a model, or the offline extractor), asks it (what is sent: ``context``; the answer into
entries: ``draft``; the instructions: ``prompts``), writes the one commit per request with its trailers, the cost
ledger line, and the retry bookkeeping when anything fails. Exactly once: before any work the history is searched for
the request's ``Acpmem-Request`` trailer; the request file is removed only after the commit exists. A process killed
anywhere leaves either the request pending (nothing written, rerun does it) or the commit written (rerun finds the
trailer and only removes the request).
"""
from __future__ import annotations

import sqlite3
from collections.abc import Callable

from acpmem.core.clock import utc_iso
from acpmem.core.entry import Entry
from acpmem.core.errors import AcpmemError, ExtractionError, UsageError
from acpmem.core.layout import LAYER_PROJECT, LAYER_USER, PROPOSALS_DIR
from acpmem.core.limits import one_line
from acpmem.core.tools import parse_commit_args
from acpmem.core.values import Value
from acpmem.vault.branches import scope_for, with_scope
from acpmem.vault.gitrun import git, writes_blocked
from acpmem.vault.history import commit_for_request
from acpmem.write import budget, requests
from acpmem.write.context import conversation, related_entries, request_block, request_citations
from acpmem.write.draft import ANSWER_TEXT_CHARS, UNUSABLE, Draft, offline_draft, under_policy, user_safe
from acpmem.write.llm import resolve_model_config, with_served_model
from acpmem.write.offline import extract_offline
from acpmem.write.provenance import annotate
from acpmem.write.windows import ask
from acpmem.write.requests import Request

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
            calls = f"{u['calls']} calls, " if u.get("calls", 1) > 1 else ""
            line += f" [{u.get('model')}: {calls}{u.get('prompt_tokens', 0)} prompt ({u.get('cached_tokens', 0)} " \
                    f"cached), {u.get('completion_tokens', 0)} completion tokens, {u.get('latency_s') or 0:.2f} s]"
        if self.redacted:
            line += f" [redacted: {', '.join(self.redacted)}]"
        if self.unknown_supersedes:
            line += f" [unknown supersedes: {', '.join(self.unknown_supersedes)}]"
        if self.notes:
            line += f" [notes: {'; '.join(self.notes)}]"
        return line


# --------------------------------------------------------------------------------------------- the request body


# --------------------------------------------------------------------------------------------- extractor choice

def choose_extractor(vault, override: str | None = None, env=None, req: Request | None = None):
    """(``"llm"`` with its ``ModelConfig``) or (``"offline"``, None): ``override`` > what the request ``req``
    recorded when it was made (its extractor, and for ``llm`` its endpoint and model; the key comes from this
    process's settings, and goes to the recorded endpoint only where that is this process's endpoint too or the key
    is the one the request was made with: else this process's endpoint and model are used) > ``[extraction]
    extractor``; ``auto`` uses a model when one is configured."""
    recorded = req.extractor if req is not None and not override else None
    name = override or recorded or vault.settings.extraction.extractor
    if name not in EXTRACTORS:
        raise UsageError(f"Unknown extractor '{name}'", "use --extractor auto | llm | offline")
    if name == "offline":
        return "offline", None
    config = resolve_model_config(vault.settings.extraction, env)
    if recorded == "llm" and (_same_endpoint(req.base_url, config.base_url)
                              or requests.key_id_for(req.id, config.api_key) == req.key_id):
        config = config.with_changes(base_url=req.base_url, model=req.model)
    # else: this process's key goes to its own endpoint only — never to the one recorded, unless it is the key the
    # request was made with — so the request runs with this process's endpoint and model
    config = with_served_model(config, vault.state_dir)
    if name == "auto" and not config.configured:
        return "offline", None
    return "llm", config


def _same_endpoint(a: str | None, b: str | None) -> bool:
    """Whether two base URLs name one endpoint (None: OpenAI's; a trailing slash changes nothing)."""
    return (a or "").rstrip("/") == (b or "").rstrip("/")


# --------------------------------------------------------------------------------------------- applying results


def commit_draft(vault, req: Request, draft: Draft, model_label: str, extractor: str) -> str | None:
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
        note = user_safe(vault, req.note, draft)   # the user vault's history is read in every project too
        sha = vault.user.write_entries(
            user_entries, subject=_subject(req, user_entries or user_updates),
            why=_why(req, extractor, note, user_updates), kind=user_kind,
            trailers={**trailers, "Acpmem-Note": note, USER_PART_TRAILER: "yes" if entries or updates else "no"},
            updates=user_updates)
    if entries or updates:
        sha = vault.write_entries(entries, subject=_subject(req, entries or updates),
                                  why=_why(req, extractor, req.note, updates, draft.notes), kind=kind,
                                  trailers=trailers, updates=updates)
    return sha


def _scoped(vault, req: Request, draft: Draft) -> list[Entry]:
    """The draft's project entries tied to the project branch the request was made on, as ``[branches] scoped``
    or the request's ``scope`` (``commit --branch/--global``) says (``acpmem.vault.branches``)."""
    if vault.layer != LAYER_PROJECT:
        return draft.entries
    fields: dict[str, dict] = {}
    out = []
    for e in draft.entries:
        if draft.layer_of.get(e.id, LAYER_PROJECT) != LAYER_PROJECT:
            out.append(e)
            continue
        if e.type not in fields:
            fields[e.type] = scope_for(vault, e.type, req.scope)
        out.append(with_scope(e, fields[e.type]))
    return out


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

class _Attempt:
    """What one attempt at a request has gathered so far: the extractor (its kind, its config, the label the outcome
    names), the conversation, the model's last answer and what every call of it spent."""

    def __init__(self) -> None:
        self.kind, self.config, self.label = "offline", None, "offline"
        self.transcript = None
        self.result = None
        self.spent = {"calls": 0, "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0}

    @property
    def usage(self) -> dict | None:
        return _usage(self.result, self.spent)


def process_request(vault, request_id: str, *, extractor: str | None = None, explicit: bool = False, env=None,
                    progress: Callable[[str, str], None] | None = None) -> Outcome:
    """Extract one request and write its entries in one commit. Call with the worker lock held.

    The steps: the request gone (done before, or never was); not due yet; writes blocked (refused before any model
    call); written before (found in history, or half written in two layers); extract (offline, or ask the model,
    within the budgets); commit; or the failure recorded on the request, retried on its schedule."""
    say = progress or (lambda rid, what: None)
    req = requests.load_request(vault.state_dir, request_id)
    if req is None:
        return _gone(vault, request_id)
    now = utc_iso(vault.clock())
    if not explicit and not req.due(now):
        why = "failed for good; name it to retry" if req.status == "failed" else f"next attempt {req.next_attempt}"
        return Outcome(request=req.id, status="skipped", error={"message": why}, attempts=req.attempts)
    _refuse_blocked_writes(vault)
    before, user_done = _written_before(vault, req)
    if before is not None:
        return before
    attempt = _Attempt()
    try:
        draft = _extract(vault, req, extractor, env, now, say, attempt)
        if isinstance(draft, Outcome):   # deferred: an extraction budget is spent
            return draft
        return _commit(vault, req, draft, attempt, user_done, say)
    except Exception as exc:  # noqa: BLE001 - whatever it was, it is recorded and retried, never a stuck queue
        return _failed(vault, req, exc, attempt)


def _gone(vault, request_id: str) -> Outcome:
    """A request no longer pending: done before (its outcome in the done log), or never made."""
    done = requests.find_done(vault.state_dir, request_id)
    if done:
        return Outcome(request=request_id, status="already", extractor=done.get("extractor"),
                       commit=done.get("commit"))
    return Outcome(request=request_id, status="missing")


def _refuse_blocked_writes(vault) -> None:
    """A rebase, a detached HEAD in either layer: refused before any model call, no attempt used."""
    for layer in vault.layers():
        blocked = writes_blocked(layer.root)
        if blocked is not None:
            raise blocked


def _written_before(vault, req: Request) -> tuple[Outcome | None, bool]:
    """(the outcome when the request is in history already, whether only its user part is): a write of this
    request killed between its files and its commit is finished (or dropped) first, and only then does the history
    say whether it happened. The user part is committed first: a run killed between the two commits writes the
    project part only."""
    for layer_vault in dict.fromkeys(lv for lv in (vault.user, vault) if lv is not None):
        layer_vault.finish_interrupted()
    sha = commit_for_request(vault, requests.check_request_id(req.id))
    if sha:
        return _finish(vault, req, Outcome(request=req.id, status="already", commit=sha, attempts=req.attempts)), False
    if vault.user is None:
        return None, False
    user_sha = commit_for_request(vault.user, req.id)
    if not user_sha:
        return None, False

    body = git(vault.user.root, "log", "-1", "--format=%B", user_sha, check=False).out
    if f"{USER_PART_TRAILER}: yes" not in body:
        return _finish(vault, req, Outcome(request=req.id, status="already", commit=user_sha,
                                           attempts=req.attempts)), False
    return None, True


def _extract(vault, req: Request, override: str | None, env, now: str, say, attempt: _Attempt) -> Draft | Outcome:
    """The request's draft, offline or from the model — or the ``deferred`` outcome when a budget is spent. A
    block commit whose model answer is still unusable at its last attempt keeps the block's summary."""
    # a request file is local state a person can edit, and the vault's types can change after the commit
    parse_commit_args({"type": req.type, "note": req.note, "importance": req.importance}, vault.settings.types)
    attempt.kind, attempt.config = choose_extractor(vault, override, env, req)
    attempt.label = attempt.config.extractor if attempt.config else "offline"
    say(req.id, "reading the transcript")
    attempt.transcript = t = conversation(req)
    if attempt.kind == "offline":
        say(req.id, "offline extraction")
        return offline_draft(vault, req, t, extract_offline)
    deferred = _over_budget(vault, req, now)
    if deferred is not None:
        return deferred
    try:
        return _model_draft(vault, req, now, say, attempt)
    except ExtractionError as exc:
        if not block_fallback(vault, req, t, exc):
            raise
        # the model's answer was unusable at the request's last attempt, and the commit named a block: the
        # block's summary (the host's own words) is kept, quoted, rather than nothing
        draft = offline_draft(vault, req, t, extract_offline)
        draft.notes.append(f"the model's answer was unusable at the last attempt ({exc.data.get('reason')}):"
                           " the block's summary is kept as the host wrote it")
        attempt.label, attempt.config = "offline", None
        return draft


def _model_draft(vault, req: Request, now: str, say, attempt: _Attempt) -> Draft:
    """Ask the model (``acpmem.write.windows``: at once, or window by window), shown the related entries — never
    what this request itself wrote (its user part, when a run was killed between the two parts: shown it, the rerun
    dropped the project part as a repeat of the user part)."""
    rel = [e for e in related_entries(vault, req.note) if (e.source or {}).get("request") != req.id]
    return ask(vault, req, attempt, rel, request_citations(req, attempt.transcript), [], now, say)[0]


def _commit(vault, req: Request, draft: Draft, attempt: _Attempt, user_done: bool, say) -> Outcome:
    """The draft's entries in one commit (``nothing`` when there are none), then the outcome recorded."""
    usage = attempt.usage
    if user_done:   # the user part is committed already: only the project part is left
        drop = {e.id for e in draft.entries + list(draft.updates.values()) if draft.layer_of.get(e.id) == LAYER_USER}
        draft.entries = [e for e in draft.entries if e.id not in drop]
        draft.updates = {k: e for k, e in draft.updates.items() if k not in drop}
    common = dict(request=req.id, extractor=attempt.label, unknown_supersedes=tuple(draft.unknown),
                  ignored_calls=tuple(draft.ignored), usage=usage, attempts=req.attempts + 1,
                  notes=tuple(draft.notes))
    if not draft.entries:
        return _finish(vault, req, Outcome(status="nothing", redacted=tuple(draft.redacted), **common))

    draft.entries = annotate(vault, attempt.transcript, draft.entries, draft.layer_of)
    draft.entries = _scoped(vault, req, draft)
    say(req.id, "committing")
    sha = commit_draft(vault, req, draft, attempt.config.model if attempt.config else "offline", attempt.label)
    proposed = all(e.path.startswith(PROPOSALS_DIR + "/") for e in draft.entries) and bool(draft.entries)
    entries = tuple({"id": e.id, "title": e.title, "path": e.path, "type": e.type,
                     "layer": draft.layer_of.get(e.id, LAYER_PROJECT)} for e in draft.entries)
    return _finish(vault, req, Outcome(status="proposed" if proposed else "written", commit=sha, entries=entries,
                                       superseded=tuple(draft.updates), redacted=tuple(dict.fromkeys(draft.redacted)),
                                       **common))


def _failed(vault, req: Request, exc: Exception, attempt: _Attempt) -> Outcome:
    """An attempt that failed, recorded on the request: retried with backoff, or failed for good."""
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
    new = requests.record_failure(vault.state_dir, req, error, vault.clock(), vault.rng,
                                  base_seconds=cfg.retry_base_seconds, max_attempts=cfg.max_attempts)
    return Outcome(request=req.id, status="failed" if new.status == "failed" else "retry", extractor=attempt.label,
                   error={**error}, usage=attempt.usage, attempts=new.attempts)


def block_fallback(vault, req: Request, transcript, exc: ExtractionError) -> bool:
    """Whether an unusable answer to a commit that named a compression block is replaced by the block's summary:
    only at the request's last attempt (earlier ones are retried: the model may still distil it), only for an
    answer the model gave (a server that does not answer is retried on its schedule, never replaced), and only
    when the block is in the transcript."""
    if not req.block or exc.data.get("reason") not in UNUSABLE:
        return False
    if req.attempts + 1 < vault.settings.extraction.max_attempts:
        return False
    return request_block(req, transcript) is not None


def _over_budget(vault, req: Request, now: str) -> Outcome | None:
    """When an extraction budget is spent: the request kept pending, not attempted, until it frees — the
    ``deferred`` outcome; else None (``acpmem.write.budget``)."""
    st = budget.current(vault.state_dir, vault.clock(), vault.settings.extraction)
    if st is None or not st.over:
        return None
    new = requests.defer(vault.state_dir, req, st.reason, st.frees_at)
    return Outcome(req.id, "deferred", error={"message": f"{st.reason}; it waits until {st.frees_at}",
                                              "reason": "budget"}, attempts=new.attempts)


def _usage(result, spent: dict | None = None) -> dict | None:
    """What the request's model calls used: the tokens and ``calls`` summed over every call it made (``spent``:
    a re-ask without the related entries, a shorter prompt after ``context_length_exceeded``, failed ones), the
    model, latency and attempts of the last answer."""
    if result is None and not (spent and spent["calls"]):
        return None
    out = {"model": result.model if result is not None else None, "prompt_tokens": 0, "cached_tokens": 0,
           "completion_tokens": 0, "latency_s": round(result.latency_s, 3) if result is not None else None,
           "attempts": result.attempts if result is not None else None, "calls": 1}
    if result is not None:
        out.update(prompt_tokens=result.prompt_tokens, cached_tokens=result.cached_tokens,
                   completion_tokens=result.completion_tokens)
    if spent and spent["calls"]:
        out.update({k: spent[k] for k in ("calls", "prompt_tokens", "cached_tokens", "completion_tokens")})
    return out


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
