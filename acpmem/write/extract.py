"""``acp memory extract``: run the fork now, on named pending requests, on every pending one, or on a new request
made from a note and a transcript; and the exact request body the fork would send (``--dry-run``).
"""
from __future__ import annotations

from collections.abc import Callable

from acpmem.core.clock import utc_iso
from acpmem.infra import progress as shown
from acpmem.write import context, requests
from acpmem.write.llm import resolve_model_config
from acpmem.write.offline import extract_offline
from acpmem.write.requests import Request
from acpmem.write.submit import check_transcript
from acpmem.write.worker import process_now


def new_request(vault, *, type: str, note: str, importance: int, session: str, seq: int, transcript, host_tools,
                save: bool = True, block: str | None = None) -> Request:
    """A request made on the spot (not from ``memory_commit``), saved as pending unless ``save`` is false.
    ``block`` names a compression block of the transcript (``b12``) as the focus, checked as ``commit --block`` checks
    it (``acpmem.write.submit.check_transcript``): an unknown block, a transcript without blocks, one that does not
    parse or holds no message, is an error before anything is saved."""
    if save:
        vault.require_writable()

    # what commit refuses, but a seq past the end: a note made by hand may name any point of the conversation
    check_transcript(transcript, None, block)
    vault.ensure_state()
    req = requests.make_request(types=vault.settings.types, type=type, note=note, importance=importance,
                                session=session, seq=seq, transcript=transcript, host_tools=host_tools,
                                lang=vault.settings.language, created=utc_iso(vault.clock()),
                                request_id=requests.new_request_id(vault.rng), block=block or None)
    if save:
        requests.save_request(vault.state_dir, req, new=True)
    return req


def select(vault, ids: list[str], *, pending: bool, failed: bool = False) -> tuple[list[str], list[Request], list[str]]:
    """The request ids to run (those named, then with ``pending`` every pending one, with ``failed`` every one that
    failed for good), the requests among them that exist, and the request files that do not parse."""
    listed, broken = requests.list_requests(vault.state_dir)
    wanted = {s for s, on in (("pending", pending), ("failed", failed)) if on}
    chosen = list(ids) + [r.id for r in listed if r.status in wanted and r.id not in ids]
    return chosen, [r for r in listed if r.id in chosen], broken


def run(vault, ids: list[str], *, extractor: str | None = None,
        progress: Callable[[str, str], None] | None = None, after_each: Callable[..., None] | None = None) -> list:
    """Extract the requests one by one in this process (``acpmem.write.worker.process_now``); their outcomes. On a
    terminal each request's result is shown as it finishes, above the count (``acpmem.infra.progress``)."""
    with shown.task("extracting", len(ids), unit="requests") as bar:
        def say(rid: str, what: str) -> None:
            bar.describe(f"{rid} {what}")
            if progress:
                progress(rid, what)

        def each(outcome) -> None:
            bar.advance(note=outcome.summary())
            if after_each:
                after_each(outcome)

        return process_now(vault, ids, extractor=extractor, progress=say, after_each=each)


def dry_run(vault, reqs: list[Request], extractor: str | None) -> object:
    """What extraction would do, as JSON data: the offline extract, or the exact chat-completions body — for each
    request as it would run (``extractor``, else what the request recorded, else the vault's settings)."""
    config = None
    shown = []
    for r in reqs:
        how = extractor or r.extractor
        if how == "offline":
            d = extract_offline(context.conversation(r), r.note, max_bytes=vault.settings.extraction.max_entry_bytes,
                                lang=vault.settings.language)
            shown.append({"request": r.id, "extractor": "offline", "title": d.title, "body": d.body,
                          "seqs": list(d.seqs)})
            continue
        if config is None:
            config = resolve_model_config(vault.settings.extraction)
        cfg = config
        if how == "llm" and not extractor:   # as the fork runs it: the endpoint and model the request recorded
            cfg = config.with_changes(base_url=r.base_url, model=r.model or config.model)
        notes: list[str] = []
        body = context.fork_body(vault, r, cfg, notes=notes)   # trimmed to the model's context as the real call is
        shown.append({"request": r.id, "body": body, **({"notes": notes} if notes else {})})
    if len(shown) == 1:   # one model request: its body as sent; one offline extract: the whole record
        return shown[0] if shown[0].get("extractor") == "offline" else shown[0]["body"]
    return shown


def totals(outcomes) -> dict:
    """Requests, entries written, model calls and tokens over a run's outcomes."""
    t = {"requests": len(outcomes), "written": sum(len(o.entries) for o in outcomes), "calls": 0,
         "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0}
    for o in outcomes:
        if o.usage:
            t["calls"] += o.usage.get("calls", 1)   # every call it made: re-asks and failed ones included
            for k in ("prompt_tokens", "cached_tokens", "completion_tokens"):
                t[k] += o.usage.get(k, 0)
    t["cache_hit_rate"] = round(t["cached_tokens"] / t["prompt_tokens"], 4) if t["prompt_tokens"] else 0.0
    return t
