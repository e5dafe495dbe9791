"""Surfacing by what the user's prompt is about: the Claude Code ``UserPromptSubmit`` hook's answer.

``surface`` (``acpmem.read.retrieval``) offers the entries with the best standing score, whatever the turn is about;
a prompt says what it is about. ``surface_prompt`` runs recall on the prompt's words (without the text acpmem itself
put there, ``acpmem.core.render.without_own_text``) (both layers, as
``memory_recall`` does) and puts the best hits that match its words (not those reached through an entry's links
alone) and were not yet surfaced or recalled in this session into the turn, each
capped at ``[surface] entry_cap_bytes``, within the session's ``session_budget_bytes`` and the host's ``max_chars``;
they go into the session's ledger, so no entry is shown twice in one session.

``prompt_surfacing`` is the same for any host's per-prompt hook (``acp memory surface --prompt``: pi, DSH), with
``[surface] prompt = false`` obeyed there.
"""
from __future__ import annotations

from acpmem.core.errors import UsageError
from acpmem.read.layers import recall_layered
from acpmem.read.ledger import read_ledger, write_ledger
from acpmem.read.sessions import folder as session_folder
from acpmem.read.retrieval import SurfaceResult, SurfacedEntry, cap_text, session_lock, surface_text

MAX_QUERY_CHARS = 2000   # a prompt may hold a pasted file: its start says what it is about


def surface_prompt(vault, session: str, prompt: str, *, max_chars: int | None = None) -> SurfaceResult:
    """The entries ``prompt`` is about, new to ``session``, within the budgets (see the module). Marks them read."""
    cfg = vault.settings.surface
    sdir = session_folder(vault, session)
    with session_lock(sdir):
        ledger = read_ledger(sdir)
    used, budget = ledger["used_bytes"], cfg.session_budget_bytes
    if used >= budget:
        return SurfaceResult(session, (), used, budget,
                             f"the session's surfacing budget is spent ({used} of {budget} bytes)")
    seen = set(ledger["surfaced"]) | set(ledger["recalled"])
    from acpmem.core.render import without_own_text

    query = " ".join(without_own_text(str(prompt or "")).split())[:MAX_QUERY_CHARS]
    if not query or cfg.top_n == 0:
        return SurfaceResult(session, (), used, budget, "the prompt has no words to look for")
    said: dict = {}
    try:
        # the best top_n of as many hits as the session has seen entries, less those it has seen and those the
        # prompt's words do not match (an entry reached through its links alone, spread, is recall's guess, not the
        # prompt's): every hit holds its place in the ranking (a near-duplicate of a seen entry ranks below it), but
        # only the entries shown are read — a long session's later prompt ranks a hundred hits to show five
        fresh = recall_layered(vault, query, limit=min(cfg.top_n + len(seen), 100), mark_read=False,
                               previews=False, skip=seen, matched=True, upto=cfg.top_n, report=said)
    except UsageError:
        return SurfaceResult(session, (), used, budget, "the prompt has no words to look for")
    if not fresh:
        return SurfaceResult(session, (), used, budget, "nothing in memory matches the prompt that this session "
                             "has not seen" if said.get("left_out") else "nothing in memory matches the prompt")
    picked: list[SurfacedEntry] = []
    reason, deferred = None, 0
    for n, h in enumerate(fresh):
        text, cut = cap_text(f"{h.entry.title}\n\n{h.entry.body}".rstrip("\n"), cfg.entry_cap_bytes, h.entry.id)
        item = SurfacedEntry(h.entry, h.score, text, cut, h.layer)
        if used + item.size > budget:
            reason = f"the session's surfacing budget would be exceeded ({used} of {budget} bytes used)"
            break
        if max_chars is not None and len(surface_text(vault, SurfaceResult(
                session, (*picked, item), used, budget, None, len(fresh) - n - 1))) > max_chars:
            deferred = len(fresh) - n
            break
        used += item.size
        picked.append(item)
    if picked:
        with session_lock(sdir):
            ledger = read_ledger(sdir)
            ledger["surfaced"] = ledger["surfaced"] + [p.entry.id for p in picked if p.entry.id not in
                                                       ledger["surfaced"]]
            ledger["used_bytes"] = ledger["used_bytes"] + sum(p.size for p in picked)
            write_ledger(sdir, ledger)
        for lv in vault.layers():
            ids = [p.entry.id for p in picked if p.layer == lv.layer]
            if ids:
                lv.mark_read(ids)
    return SurfaceResult(session, tuple(picked), used, budget, reason, deferred)


def prompt_surfacing(vault, session: str, prompt: str, *, max_chars: int | None = None) -> SurfaceResult:
    """What a host adds to the turn of the user's ``prompt``: ``surface_prompt``, or nothing (with the reason) when
    ``[surface] prompt = false``."""
    cfg = vault.settings.surface
    if not cfg.prompt:
        used = read_ledger(vault.session_dir(session))["used_bytes"]   # read only: no lock, no folder made
        return SurfaceResult(session, (), used, cfg.session_budget_bytes,
                             "surfacing by the prompt is off ([surface] prompt = false in acpmem.toml)")
    return surface_prompt(vault, session, prompt, max_chars=max_chars)


__all__ = ["surface_prompt", "prompt_surfacing", "MAX_QUERY_CHARS"]
