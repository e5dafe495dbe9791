"""The fork's questions to the model: the conversation asked at once, or — ``[extraction] window_turns`` — in
windows of that many turns, one call each, their entries gathered into one draft.

A small model asked about a long conversation at once writes one short summary of it and loses the names, dates and
numbers a later question needs; asked about a few turns at a time, it keeps them, and each entry cites turns of its
own window. Windows cover the turns since the transcript's previous ``memory_commit`` (what earlier commits were
about was asked then), the most recent ``[extraction] max_windows`` of them; a commit that names a compression
block is asked at once (the block is its focus). A window whose answer is unusable (no write, cut off, malformed, a
loop) is left out with a note, the other windows' entries are kept; when every window's answer is unusable the
request fails as a single call would (retried, or its block kept). ``docs/efficacy.md`` measures it.
"""
from __future__ import annotations

import re

from acpmem.core.errors import ExtractionError
from acpmem.write import costs, llm
from acpmem.search.overlap import terms
from acpmem.write.answers import WRITE, read_answer, read_json_answer
from acpmem.write.context import MEMORY_CALL, fork_body, shrunk_window
from acpmem.write.draft import (UNUSABLE, Draft, cited_turns, conversation_turns, draft_from_calls, read_reply,
                                turn_quotes, unusable)

CONTEXT_SHRINKS = 3   # a prompt the endpoint says is over its context: sent again at half the size, this many times

ASKED_AGAIN = "every write repeated an entry shown as related: asked again without the related entries"

_COMMIT_CALL = re.compile(r"\bmemory_commit\b")

SECOND_LOOK_MIN_TERMS = 10   # a turn asked again (``second_look``) says at least this many words (``terms``)


def _turn_start(m) -> bool:
    """A message that opens a turn: the person's, not a tool result sent back in the user role (Anthropic)."""
    if m.role != "user":
        return False
    content = m.content
    return not (isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result"
                                                  for b in content))


def _tool_result(m) -> bool:
    """A tool's answer: a ``tool`` message, or a user message carrying tool results (Anthropic). What the assistant
    or the person says is never one — a conversation the assistant opens keeps its first words."""
    return m.role in ("tool", "function") or (m.role == "user" and not _turn_start(m))


def _since_previous_commit(req, t) -> tuple[int, int]:
    """How many system messages lead ``t``, and where the turns this commit is about start: after the transcript's
    previous ``memory_commit`` call and its result (what that commit was about was asked then)."""
    msgs = t.messages
    lead = 0
    while lead < len(msgs) and msgs[lead].role == "system":
        lead += 1
    start = lead
    for i in range(len(msgs) - 1, lead - 1, -1):   # after the previous memory_commit call, not this one
        m = msgs[i]
        if m.seq is not None and m.seq < req.seq and m.role == "assistant" and _COMMIT_CALL.search(t.text(m)):
            start = i + 1
            break
    while start < len(msgs) and _tool_result(msgs[start]):   # that call's result belongs to it, not a window
        start += 1
    return lead, start


def windows(req, t, size: int, most: int) -> tuple[list, int]:
    """The transcripts to ask, each the leading system message(s) and a window of ``size`` turns (the last one
    with the commit's own call), and how many turns were left out past ``most`` windows. One window — ``t``
    itself, unchanged — when windows are off, the commit names a block, or the turns since the previous commit
    fit in one."""
    if size <= 0 or t is None or req.block:
        return [t], 0
    msgs = list(t.messages)
    lead, start = _since_previous_commit(req, t)
    turns: list[list] = []
    for m in msgs[start:]:
        if not turns or _turn_start(m):
            turns.append([m])
        else:
            turns[-1].append(m)
    if len(turns) <= size:
        return [t], 0
    groups = [turns[i:i + size] for i in range(0, len(turns), size)]
    dropped = sum(len(g) for g in groups[:-most]) if len(groups) > most else 0
    groups = groups[-most:]
    head = tuple(msgs[:lead])
    return [t.with_changes(messages=head + tuple(m for turn in g for m in turn)) for g in groups], dropped


def ask(vault, req, attempt, rel: list, cites, notes: list[str], now: str, say) -> tuple[Draft, object]:
    """The draft of every window's answer (``windows``), and the reading of the last one (its ``nothing``). Under
    ``[extraction] answer = "json"`` the commit's note is kept as an entry of its own when the answer left out what
    it names (``keep_note``)."""
    draft, reading = _ask(vault, req, attempt, rel, cites, notes, now, say)
    if vault.settings.extraction.answer == "json":
        keep_note(vault, req, attempt, draft, cites, rel)
    return draft, reading


# what a note names that a paraphrase loses: a word with a digit, a code-like word (``pm_card_visa``, ``errors.Is``,
# ``Asia/Shanghai``, ``fonts-noto-cjk``), camelCase, or anything in backticks — not an acronym alone ("PDF", "CI":
# on the real model, a note kept for "PDF" alone repeated the facts beside it)
_NOTE_WORD = re.compile(r"`([^`\n]{2,80})`|[A-Za-z0-9$][A-Za-z0-9_./$@#:=+-]*[A-Za-z0-9]|[0-9]")
_ABBREVIATION = re.compile(r"^(?:[a-z]\.)+[a-z]?$")   # e.g, i.e
_CODE_LIKE = re.compile(r"[0-9_./$@#:=+]|[a-z][A-Z]|\w-\w")


def note_words(note: str) -> list[str]:
    """The words of a commit's note that a paraphrase loses (``_CODE_LIKE``), in order, once each."""
    out = []
    for m in _NOTE_WORD.finditer(note):
        w = m.group(1) or m.group(0)
        if (m.group(1) or _CODE_LIKE.search(w)) and not _ABBREVIATION.match(w) and w not in out:
            out.append(w)
    return out


def keep_note(vault, req, attempt, draft: Draft, cites, rel: list) -> None:
    """A small model asked for facts paraphrases the identifiers, numbers and paths the session's model put in its
    note — the very words a later session searches for. When the draft's entries leave out any ``note_words`` of
    the commit's note, the note itself is written as one more entry (the host's words, cited and checked like a
    model's write), with a note saying what was missing. Nothing is added when the entries — this answer's, or
    the related ones already in memory (``rel``) — hold them all, or the note names none (a general note:
    "decisions from this session"); a note repeating a related entry is dropped as any write would be."""
    have = "\n".join(f"{e.title}\n{e.body}" for e in [*draft.entries, *rel]).lower()
    missing = [w for w in note_words(req.note) if w.lower() not in have]
    if not missing:
        return
    t = attempt.transcript
    call = llm.ToolCall(id="note", name=WRITE, arguments={"content": f"- {' '.join(req.note.split())}"},
                        raw_arguments=req.note)
    before = len(draft.entries)
    try:
        draft_from_calls(vault, req, [call], attempt.label, set(), citations=cites, shown=rel,
                         turns=conversation_turns(req, t),
                         quotes=turn_quotes(req, t) if vault.settings.extraction.evidence else None, into=draft)
    except ExtractionError as exc:   # the note is no entry here (over [extraction] max_entry_bytes): the facts stand
        draft.notes.append(f"the commit's note could not be kept as an entry ({exc.message})")
        return
    if len(draft.entries) > before:
        draft.notes.append(f"the commit's note was kept as an entry: the answer left out {', '.join(missing[:8])}")


def _ask(vault, req, attempt, rel: list, cites, notes: list[str], now: str, say) -> tuple[Draft, object]:
    cfg = vault.settings.extraction
    parts, dropped = windows(req, attempt.transcript, cfg.window_turns, cfg.max_windows)
    if len(parts) == 1:
        draft, reading = ask_window(vault, req, attempt, parts[0], rel, cites, notes, now, say,
                                    cut_ok=cfg.window_turns > 0)
        if cfg.window_turns > 0 and not req.block:   # a block's commit is about the block's summary
            second_look(vault, req, attempt, parts[0], reading, rel, cites, notes, now, say, draft, None)
        return draft, reading
    draft, reading, failed = Draft(), None, []
    if dropped:
        draft.notes.append(f"{dropped} turn(s) before the last {len(parts)} windows of {cfg.window_turns} turns "
                           "were not asked ([extraction] max_windows)")
    for i, part in enumerate(parts, 1):
        label = f"part {i} of {len(parts)}"
        try:
            _, reading = ask_window(vault, req, attempt, part, rel, cites, list(notes), now, say, into=draft,
                                    part=(i, len(parts)))
        except ExtractionError as exc:
            if exc.data.get("reason") not in UNUSABLE:
                raise   # the endpoint failed: the request is retried whole, on its schedule
            failed.append(exc)
            draft.notes.append(f"window {label} gave an unusable answer ({exc.data.get('reason')}): not written")
            continue
        second_look(vault, req, attempt, part, reading, rel, cites, notes, now, say, draft, (i, len(parts)))
    if len(failed) == len(parts):
        raise failed[-1]
    draft.notes = list(dict.fromkeys(notes + [f"asked in {len(parts)} windows of at most {cfg.window_turns} turns"]
                                     + draft.notes))
    return draft, reading


def unread_turns(req, t, reading, start: int) -> list:
    """The messages of window ``t`` from ``start`` on that say something (``SECOND_LOOK_MIN_TERMS`` words at least)
    and that no fact of the window's answer (``reading``: written, or dropped as a repeat) rests on
    (``cited_turns``)."""
    turns = conversation_turns(req, t)
    said = set()
    for call in reading.calls:
        args = call.arguments if isinstance(call.arguments, dict) else {}
        text = "\n".join(str(args.get(k) or "") for k in ("title", "content"))
        said.update(cited_turns(text, turns))
    return [m for m in t.messages[start:]
            if m.role in ("user", "assistant") and m.seq is not None and m.seq < req.seq and m.seq not in said
            and not MEMORY_CALL.search(t.text(m) or "") and len(terms(t.text(m) or "")) >= SECOND_LOOK_MIN_TERMS]


def second_look(vault, req, attempt, t, reading, rel: list, cites, notes: list[str], now: str, say, draft: Draft,
                part: tuple[int, int] | None) -> None:
    """``[extraction] second_look`` (under ``answer = "json"``): the turns of window ``t`` its answer left out
    (``unread_turns``) are asked once more on their own, their facts added to ``draft``. A small model reading a
    window writes about some of its turns and passes over others — most often its first — and a question about a
    turn no entry cites cannot be answered from memory; asked about those turns alone, it writes them
    (``docs/efficacy.md``). An unusable answer to the second look leaves the window's entries as they are, with a
    note; an endpoint that fails retries the request, as for any window."""
    cfg = vault.settings.extraction
    if not cfg.second_look or cfg.answer != "json":
        return
    lead, start = _since_previous_commit(req, t)
    left = unread_turns(req, t, reading, start)
    if not left:
        return
    where = f"window part {part[0]} of {part[1]}" if part else "the window"
    before = len(draft.entries)
    try:
        ask_window(vault, req, attempt, t.with_changes(messages=tuple(t.messages[:lead]) + tuple(left)), rel, cites,
                   list(notes), now, say, into=draft, part=part)
    except ExtractionError as exc:
        if exc.data.get("reason") not in UNUSABLE:
            raise
        draft.notes.append(f"{where}: the second look at {len(left)} turn(s) gave an unusable answer "
                           f"({exc.data.get('reason')}): the window's entries stand")
        return
    draft.notes.append(f"{where}: {len(left)} turn(s) no fact rested on were asked again: "
                       f"{len(draft.entries) - before} more entr{'y' if len(draft.entries) - before == 1 else 'ies'}")


def ask_window(vault, req, attempt, t, rel: list, cites, notes: list[str], now: str, say, *,
               into: Draft | None = None, part: tuple[int, int] | None = None,
               cut_ok: bool = False) -> tuple[Draft, object]:
    """Ask the model about ``t``, once or twice: the second pass when every write of the first repeated an entry
    shown as related (small models copy what they were shown instead of reading the conversation); asked once more
    without them, the repeats still checked against them. ``into``: the draft the answer adds to. ``cut_ok``
    (windows on, and this commit's turns fit in one): an answer cut off or stopped as a loop is read up to the
    cut, as a window's is (``salvage``)."""
    cut_ok = cut_ok or part is not None
    json_answer = vault.settings.extraction.answer == "json"
    state = vault.state_dir
    quotes = turn_quotes(req, t) if vault.settings.extraction.evidence else None
    for again in (False, True):
        before = _mark(into)
        cut = None
        try:
            body, attempt.result = call_fitted(vault, req, attempt.config, t, [] if again else rel, notes, now,
                                               say, attempt.spent, part=part)   # json: never shown (quoted_body)
            result = attempt.result
        except ExtractionError as exc:   # a loop is stopped while it streams: its calls are in the error's text
            cut, body, result = exc, None, None
            if salvage(exc, cut_ok, json_answer) is None:
                raise
        host_names = {tool["function"]["name"] for tool in (body or {}).get("tools", ())} - {"memory_write",
                                                                                            "memory_nothing"}
        try:
            try:
                reading = salvage(cut, cut_ok, json_answer) if cut is not None else read_reply(result, json_answer)
            except ExtractionError as exc:
                cut, reading = exc, salvage(exc, cut_ok, json_answer)
                if reading is None:
                    raise
            draft = draft_from_calls(vault, req, reading.calls, attempt.label, host_names, citations=cites,
                                     shown=rel, from_text=reading.source != "tool_calls",
                                     turns=conversation_turns(req, t), quotes=quotes, into=into)
            new = draft.writes - before[0]
            if not new and reading.nothing is None:
                ignored = draft.ignored[before[1]:]
                raise unusable(result, "the answer has no memory_write call and does not say nothing to keep"
                               + (f" (it called {', '.join(sorted(set(ignored)))})" if ignored else ""))
        except ExtractionError as exc:
            if result is not None:
                costs.append(state, costs.record(result, at=now, request=req.id, session=req.session, entries=0,
                                                 error=exc))
            raise
        if cut is not None:
            where = f"window part {part[0]} of {part[1]}" if part else "the window"
            draft.notes.append(f"{where}: the answer was {CUT[cut.data['reason']]}; its {new} memory_write call(s) "
                               "before that were read")
        written = len(draft.entries) - before[2]
        if result is not None:   # a stopped loop is in the ledger already, as the failed call it was
            costs.append(state, costs.record(result, at=now, request=req.id, session=req.session, entries=written))
        if into is None:
            draft.notes[:0] = notes + list(reading.notes)
        else:
            draft.notes.extend(n for n in reading.notes if n not in draft.notes)
        if again or json_answer or not rel or written or not new or draft.repeats - before[3] < new:
            break   # (json answers were never shown the related entries: asking again would ask the same)
        if into is None:
            notes = list(draft.notes) + [ASKED_AGAIN]
        else:
            into.notes.append(ASKED_AGAIN)
    if into is None:
        draft.notes = list(dict.fromkeys(draft.notes))
    if reading.nothing is not None and part is None:
        draft.notes.append(f"memory_nothing: {reading.nothing}")
    return draft, reading


CUT = {"truncated": "cut off at the token limit", "repetition": "stopped as a repetition loop"}


def salvage(exc: ExtractionError | None, ok: bool, json_answer: bool = False):
    """A window's answer that was cut off at the token limit or stopped as a loop, read from its text up to the
    cut, when it holds at least one ``memory_write`` call; else None. The text is read as it is
    (``acpmem.write.answers.read_answer``: a call repeated word for word is read once); when no call in it is
    complete (a loop inside one call's content list), the JSON is closed after its last complete item
    (``closed_json``). A content's repeated lines are kept once. Only for windows (``ok``; a whole conversation's
    answer cut off is asked again): a window is a few turns, and what the model wrote of them before the cut is
    kept — each entry still cites, and is checked against, the turns of its window. ``json_answer``: the text is
    an ``entries`` object (``[extraction] answer = "json"``), closed the same way."""
    if exc is None or not ok or exc.data.get("reason") not in CUT or not exc.data.get("text"):
        return None
    text = str(exc.data["text"])
    for attempt in (text, closed_json(text)):
        if attempt is None:
            break
        reading = read_json_answer(attempt) if json_answer else read_answer([], attempt)
        calls = tuple(_once(c) for c in reading.calls if c.arguments is not None)   # the one cut is left out
        if any(c.name == "memory_write" for c in calls):
            return reading.with_changes(calls=calls)
    return None


def _once(call):
    """A call with its content's repeated lines (or list items) kept once, in order."""
    args = call.arguments
    if not isinstance(args, dict):
        return call
    inner = args["arguments"] if isinstance(args.get("arguments"), dict) and "content" not in args else args
    content = inner.get("content")
    if isinstance(content, list):
        fixed = list(dict.fromkeys(x for x in content if isinstance(x, str)))
    elif isinstance(content, str):
        fixed = "\n".join(dict.fromkeys(content.splitlines()))
    else:
        return call
    new_inner = {**inner, "content": fixed}
    return call.with_changes(arguments=new_inner if inner is args else {**args, "arguments": new_inner})


def closed_json(text: str) -> str | None:
    """``text``, a JSON value cut off part way (in a string, a list or an object), cut back to just before the last
    comma outside a string and closed with the brackets still open; None when there is no such comma."""
    stack: list[str] = []
    in_str = esc = False
    last = None
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            stack.append(ch)
        elif ch in "]}":
            if stack:
                stack.pop()
        elif ch == "," and stack:
            last = (i, tuple(stack))
    if last is None:
        return None
    i, open_ = last
    return text[:i] + "".join("]" if c == "[" else "}" for c in reversed(open_))


def _mark(draft: Draft | None) -> tuple[int, int, int, int]:
    """Where a draft stands before an answer is added: writes, ignored calls, entries, repeats."""
    if draft is None:
        return 0, 0, 0, 0
    return draft.writes, len(draft.ignored), len(draft.entries), draft.repeats


def call_fitted(vault, req, config, t, related: list, notes: list[str], now: str, say, spent: dict | None = None,
                *, part: tuple[int, int] | None = None):
    """One fork call: the body built to the model's window and sent; when the endpoint answers that the prompt is
    over its context (reason ``context_length``), built again at half the size and sent, up to ``CONTEXT_SHRINKS``
    times — never the same body again. Every call goes to the cost ledger, and is counted in ``spent`` (calls and
    tokens, what ``extract`` sums). ``part``: the window (i, n) this call asks about. Returns the body and answer."""
    window = None
    for shrink in range(CONTEXT_SHRINKS + 1):
        body = fork_body(vault, req, config, transcript=t, related=related, notes=notes, context_tokens=window,
                         part=part)
        say(req.id, f"calling {config.model}" + (f" (part {part[0]} of {part[1]})" if part else ""))
        if spent is not None:
            spent["calls"] += 1
        try:
            result = llm.call_chat(config, body)
        except ExtractionError as exc:
            costs.append(vault.state_dir, costs.record(None, at=now, request=req.id, session=req.session, error=exc,
                                                       model=config.model))
            if exc.data.get("reason") != "context_length" or shrink == CONTEXT_SHRINKS:
                raise
            window = shrunk_window(body)
            notes.append(f"the endpoint said the prompt was over its context: sent again within {window} tokens")
            continue
        if spent is not None:
            for k in ("prompt_tokens", "cached_tokens", "completion_tokens"):
                spent[k] += getattr(result, k)
        return body, result
    raise AssertionError("unreachable")
