"""The model's answer (or the offline extractor's) into entries: redaction, citations, the supersede policy."""
from __future__ import annotations

import json
import math
import re
from collections import Counter

from acpmem.core.blocks import turns_text
from acpmem.core.entry import Citation, Entry
from acpmem.core.entryfile import defuse_conflict_markers
from acpmem.core.errors import EntryInvalid, ExtractionError
from acpmem.core.layout import LAYER_PROJECT, LAYER_USER, PROPOSALS_DIR
from acpmem.core.limits import one_line
from acpmem.core.projectpaths import redact_project_paths
from acpmem.core.redact import redact
from acpmem.core.tools import default_layer, parse_write_args
from acpmem.read.layers import project_path_forms
from acpmem.search.overlap import jaccard, overlap, terms
from acpmem.search.similar import features
from acpmem.vault.writer import KIND_FORK, KIND_PROPOSE
from acpmem.write.answers import excerpt, normalize_write_args, read_answer, read_json_answer
from acpmem.write.context import MEMORY_CALL, request_block, request_citations
from acpmem.write.duplicates import check_write
from acpmem.write.offline import block_lines
from acpmem.write.requests import Request

TITLE_CHARS = 120


class Draft:
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


def redact_noting(text: str, found: list[str]) -> str:
    """``text`` with its secrets redacted; the kinds found are added to ``found``."""
    clean, findings = redact(text, deep=True)
    found.extend(f.kind for f in findings)
    return clean


def user_safe(vault, text: str, draft: Draft) -> str:
    """User-layer text without this project's paths (``acpmem.core.projectpaths``); secrets are redacted for
    every layer before this."""
    clean, n = redact_project_paths(text, project_path_forms(vault))
    if n:
        draft.redacted.append("project-path")
    return clean


def new_entry(vault, req: Request, draft: Draft, taken: set[str], *, title: str, body: str,
               citations: tuple[Citation, ...], extractor: str, supersedes: tuple[str, ...] = (),
               layer: str = LAYER_PROJECT, evidence: tuple[str, ...] = ()) -> Entry:
    target = vault.user if layer == LAYER_USER and vault.layer != LAYER_USER else vault
    if layer != LAYER_PROJECT:
        title, body = user_safe(vault, title, draft), user_safe(vault, body, draft)
    ident = target.new_id(taken)
    taken.add(ident)
    body = defuse_conflict_markers(body.strip("\n") + "\n")  # a quoted conflict, never an unresolved one
    if layer != LAYER_PROJECT:
        evidence = tuple(user_safe(vault, q, draft) for q in evidence)
    e = Entry(id=ident, title=title, type=req.type, importance=req.importance, created=vault.now(), body=body,
              citation=citations, source={"request": req.id, "extractor": extractor}, supersedes=supersedes,
              extra={"evidence": list(evidence)} if evidence else None)
    draft.layer_of[ident] = layer
    return e.with_changes(path=target.path_for(ident, title))


SUPERSEDE_MIN_OVERLAP = 0.15   # a supersede of an entry sharing less than this of its terms is refused


DUPLICATE_OVERLAP = 0.85       # a write sharing this much with an entry it was shown is that entry again


CITED_TURNS_MAX = 3          # the turns an entry cites beside the commit: at most this many


CITED_TURN_MIN_TERMS = 2     # a turn is cited only when it gives the entry at least this many terms of its own


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
        if not text or MEMORY_CALL.search(text):
            continue
        t = terms(text)
        if t:
            out.append((m.seq, t))
    return out


EVIDENCE_CHARS = 300   # each quote of a cited turn an entry keeps as its evidence, at most (a word boundary)


def turn_quotes(req: Request, transcript) -> dict[int, str]:
    """Each turn an entry of this request may cite (``conversation_turns``), by seq, as a one-line quote of at most
    ``EVIDENCE_CHARS``: what an entry's ``evidence`` holds."""
    if transcript is None:
        return {}
    out = {}
    for m in transcript.messages:
        if m.seq is None or m.seq >= req.seq or m.role not in ("user", "assistant", "tool"):
            continue
        text = "".join(ch for ch in " ".join(transcript.text(m).split()) if ch.isprintable())   # no escapes
        if text and not MEMORY_CALL.search(text):
            out[m.seq] = text if len(text) <= EVIDENCE_CHARS else text[:EVIDENCE_CHARS].rsplit(" ", 1)[0] + " …"
    return out


def evidence_for(draft: "Draft", text: str, turns: list[tuple[int, set[str]]] | None,
                 quotes: dict[int, str] | None) -> tuple[str, ...]:
    """The quotes of the turns ``text`` rests on (``cited_turns``), secrets redacted: an entry's ``evidence``."""
    if not turns or not quotes:
        return ()
    return tuple(redact_noting(quotes[s], draft.redacted) for s in cited_turns(text, turns) if s in quotes)


def cited_turns(text: str, turns: list[tuple[int, set[str]]], limit: int = CITED_TURNS_MAX) -> tuple[int, ...]:
    """The seqs of the turns an entry's ``text`` rests on, in order: greedily, the turn whose shared terms weigh
    most, while one gives at least ``CITED_TURN_MIN_TERMS`` of the entry's terms not yet given (a tie goes to the
    later turn: a correction comes after what it corrects). A term weighs by how few of ``turns`` hold it
    (log((n + 1) / df)), so the words one turn alone has outweigh a name or a word every turn repeats: counted
    plainly, "Melanie and Caroline painted together" cited the turn naming both people, not the one about the
    painting. Empty when no turn shares enough."""
    want = terms(text)
    held = Counter(w for _, t in turns for w in t & want)
    weight = {w: math.log((len(turns) + 1) / k) for w, k in held.items()}
    chosen: list[int] = []
    while want and len(chosen) < limit:
        best, gain, mass = None, set(), 0.0
        for seq, t in turns:
            if seq in chosen:
                continue
            g = want & t
            if len(g) < CITED_TURN_MIN_TERMS:
                continue
            m = sum(weight[w] for w in g)
            if best is None or m > mass + 1e-9 or (abs(m - mass) <= 1e-9 and seq > best):
                best, gain, mass = seq, g, m
        if best is None:
            break
        chosen.append(best)
        want -= gain
    return tuple(sorted(chosen))


def _entry_citations(base: tuple[Citation, ...], text: str, turns: list[tuple[int, set[str]]] | None,
                     carried: tuple[Citation, ...] = ()) -> tuple[Citation, ...]:
    """An entry's citations: the request's, the commit's one naming in ``turns`` the turns the entry rests on
    (``cited_turns``; a block's citation already names its turns), then ``carried`` — those of the entries it
    supersedes, so the fact keeps where it was first said."""
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
                     from_text: bool = False, turns: list[tuple[int, set[str]]] | None = None,
                     quotes: dict[int, str] | None = None, into: Draft | None = None) -> Draft:
    """Turn the model's tool calls into entries. A malformed ``memory_write`` (bad JSON, content missing or
    oversize) or a native call to a tool we never offered rejects the whole answer (``ExtractionError`` reason
    ``malformed_call``: the request is retried); calls to the host's own tools are ignored (a one-shot fork cannot
    answer them), and so are calls to other tools read out of the text (``from_text``: a model quoting the history).
    Near misses are repaired with a note (``acpmem.write.answers.normalize_write_args``). At most
    ``[extraction] max_entries_per_answer`` writes are taken; the rest are dropped with a note naming them. A write
    that gives back the fork's own instructions (``_echoes_instructions``) is dropped with a note, and an answer of
    such writes alone is malformed.

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
    entry that supersedes others keeps their citations too. ``quotes`` (``turn_quotes``): those turns' words are
    kept in the entry's ``evidence``. ``into``: a draft this answer adds to (the fork's windows), its entries' ids
    kept unique and the per-answer cap counted for this answer alone."""
    draft = into if into is not None else Draft()
    first = len(draft.entries)
    layers = {lv.layer: lv for lv in vault.layers()}
    known_in = {name: {e.id: e for e in lv.load(with_reads=False).entries} for name, lv in layers.items()}
    taken = {i for known in known_in.values() for i in known} | {e.id for e in draft.entries}   # unique, all layers
    max_bytes = vault.settings.extraction.max_entry_bytes
    cap = vault.settings.extraction.max_entries_per_answer
    allowed = ("content", "title", "supersedes", "layer") if len(layers) > 1 else ("content", "title", "supersedes")
    shown_ids = None if shown is None else {e.id for e in shown}
    over: list[str] = []
    writes_before, echoed = draft.writes, 0
    for i, call in enumerate(calls):
        if call.name in host_tool_names:
            draft.ignored.append(call.name)
            continue
        if call.name != "memory_write" and _write_by_another_name(call, from_text):
            draft.notes.append(f"a call to '{one_line(str(call.name))[:40]}' written in the text with memory_write's "
                               "arguments was read as memory_write")
            call = call.with_changes(name="memory_write")
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
        if len(draft.entries) - first >= cap:
            over.append(args.title or derive_title(args.content))
            continue
        if _echoes_instructions(args.content, req, len(layers) > 1):
            draft.notes.append("a write repeating the fork's own instructions, not the conversation, was dropped")
            echoed += 1
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
        content = redact_noting(args.content, draft.redacted)
        if layer != LAYER_PROJECT:   # before a title is derived (and clipped) from it
            content = user_safe(vault, content, draft)
        title = redact_noting(args.title, draft.redacted) if args.title else derive_title(content)
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
        entry = new_entry(vault, req, draft, taken, title=title, body=content, citations=cites,
                          extractor=extractor, supersedes=tuple(sup), layer=layer,
                          evidence=evidence_for(draft, f"{title}\n{content}", turns, quotes))
        if propose:   # what a proposal supersedes is only named in it until a person accepts it
            draft.propose.add(entry.id)
        else:
            for old in sup:
                draft.updates[old] = known[old].with_changes(superseded_by=entry.id)
                draft.layer_of[old] = layer
        draft.entries.append(entry)
    if echoed and echoed == draft.writes - writes_before:   # no answer at all: retried, as a text without a write
        raise _malformed(f"every memory_write call ({echoed}) gave back the fork's own instructions, not the "
                         "conversation")
    if over:
        shown_titles = "; ".join(f"'{one_line(t)[:60]}'" for t in over[:5]) + (" …" if len(over) > 5 else "")
        draft.notes.append(f"{len(over)} memory_write call(s) over the cap of {cap} per answer dropped "
                           f"([extraction] max_entries_per_answer): {shown_titles}")
    return draft


_WRITE_KEYS = frozenset({"content", "title", "supersedes", "layer"})


def _echoes_instructions(content: str, req: Request, layers: bool) -> bool:
    """Whether ``content`` is one of the fork's own instructions given back (a small model copies the rule for
    ``content`` into it: Qwen2.5-Coder-0.5B did, three answers of three): it shares ``DUPLICATE_OVERLAP`` of its terms
    with a line of the system message or a description of the ``memory_write`` tool, in either language. Such a
    write is dropped with a note; an answer of nothing else is a malformed answer (retried)."""
    # lazy: only a write being checked needs them
    from acpmem.core.tools import LANGS, tool_definitions
    from acpmem.write.prompts import fork_system

    said: list[str] = []
    for lang in LANGS:   # in either language, whichever the note chose
        for conversation in (True, False):
            said += fork_system(req.type, req.importance, lang, layers=layers, conversation=conversation).splitlines()
        for tool in tool_definitions("fork", lang=lang, layers=layers):
            fn = tool["function"]
            said += [fn["description"], *(p.get("description", "") for p in fn["parameters"]["properties"].values())]
    return any(jaccard(content, line) >= DUPLICATE_OVERLAP for line in said if line)


def _write_by_another_name(call, from_text: bool) -> bool:
    """A call read from the text, to a tool no one offered (a small model names it after the conversation's
    speaker or subject: ``{"name": "Caroline", "arguments": {"content": …}}``), whose arguments are
    ``memory_write``'s own — content, and nothing but its keys — is that write."""
    args = call.arguments
    if not from_text or not isinstance(args, dict) or call.name in ("memory_nothing", "memory_commit",
                                                                    "memory_recall"):
        return False
    if isinstance(args.get("arguments"), dict) and set(args) == {"arguments"}:
        args = args["arguments"]
    return "content" in args and set(args) <= _WRITE_KEYS


def _meaning_check(vault, req: Request, text: str, shown: list[Entry], sup: list[str], known: dict[str, Entry],
                   shown_ids: set[str] | None, draft: Draft) -> str | None:
    """The fork's check of one write by meaning (``draft_from_calls``): ``drop``, ``propose`` or None (write it);
    a supersede it adds goes into ``sup``."""
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


def read_reply(result, json_answer: bool = False) -> "object":
    """The model's answer read (``acpmem.write.answers.Reading``; ``json_answer``: under ``[extraction] answer =
    "json"``); a truncated one (``finish_reason: length``) is a failure with its text kept."""
    if result.finish_reason == "length":
        raise unusable(result, f"the answer was cut off at the token limit ({result.completion_tokens} tokens)",
                        hint="the request stays pending and is retried; raise [extraction] max_tokens if answers "
                             "are long", reason="truncated")
    return read_json_answer(result.text) if json_answer else read_answer(result.tool_calls, result.text)


UNUSABLE = ("no_usable_write", "truncated", "malformed_call", "repetition", "runaway")   # reasons of an answer
# the model gave that cannot be used (an endpoint that did not answer has others): retried, or a block kept


def unusable(result, why: str, *, hint: str = "the request stays pending and is retried; `acp memory stats "
              "--json` shows the whole answer", reason: str = "no_usable_write") -> ExtractionError:
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
    proposals (``acpmem.upkeep.review``) — written under ``proposals/``, what they supersede only named in them, no
    other entry touched until a person accepts them — else entries, but those in ``propose`` (a contradiction of
    an entry) proposals still. Returns (entries, updates, commit kind)."""
    if target.settings.write.policy != "review" or not entries:
        return [e.with_changes(path=target.path_for(e.id, e.title, PROPOSALS_DIR)) if e.id in propose else e
                for e in entries], updates, KIND_FORK
    return [e.with_changes(path=target.path_for(e.id, e.title, PROPOSALS_DIR)) for e in entries], [], KIND_PROPOSE


def offline_draft(vault, req: Request, transcript, extract_offline) -> Draft:
    """The offline extractor's entry for ``req`` (quoting the block's turns after its summary when it names one), in
    the layer its type belongs to — none when the same extract is live already (the extractor is deterministic)."""
    draft = Draft()
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
        note = user_safe(vault, note, draft)
        if transcript is not None:
            transcript = transcript.with_changes(messages=tuple(
                m.with_changes(content=user_safe(vault, transcript.text(m), draft), raw={})
                for m in transcript.messages))
        if blk is not None:
            blk = blk.with_changes(summary=user_safe(vault, blk.summary, draft),
                                   topic=user_safe(vault, blk.topic, draft) if blk.topic else blk.topic)
    text = extract_offline(transcript, note, max_bytes=max_bytes, lang=vault.settings.language)
    body = text.body
    if blk is not None:
        body = block_lines(blk, body, vault.settings.language, vault.settings.extraction.max_entry_bytes)
    body = redact_noting(body, draft.redacted)
    title = redact_noting(text.title, draft.redacted)
    if blk is not None:
        cites = request_citations(req, transcript)
    else:
        cites = tuple(Citation(req.session, s) for s in text.seqs) or (Citation(req.session, req.seq),)
    target = vault.user if layer == LAYER_USER and vault.layer != LAYER_USER and vault.user is not None else vault
    same = _same_offline_extract(target, title, body)
    if same is not None:   # the extractor is deterministic: the same commit gives the same extract, kept once
        draft.notes.append(f"the same offline extract as #{same.id} ({one_line(same.title)[:60]}): not written again")
        return draft
    taken = {e.id for lv in layers for e in lv.load(with_reads=False, light=True).entries}
    draft.entries.append(new_entry(vault, req, draft, taken, title=title, body=body, citations=cites,
                                    extractor="offline", layer=layer))
    return draft


def _same_offline_extract(vault, title: str, body: str):
    """The live offline entry of ``vault`` with this title and this body (spacing aside), or None."""
    words = " ".join(body.split())
    for e in vault.load(with_reads=False).live():
        if e.title == title and (e.source or {}).get("extractor") == "offline" and " ".join(e.body.split()) == words:
            return e
    return None
