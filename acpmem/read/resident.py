"""The resident index: the text a host puts at the top of the system prompt every turn.

One line per entry ordered by score, framed as data, cut to a token budget with a count of what was left out
(``acpmem.core.render.prompt_index``). With a session id it is frozen: the first call stores the text under the
session's folder and every later call in that session returns the same bytes, so the provider's prompt cache keeps
hitting; ``refresh`` takes a new snapshot.
"""
from __future__ import annotations

from datetime import datetime

from acpmem.core.errors import UsageError
from acpmem.core.limits import MAX_BUDGET_TOKENS, clip, int_between
from acpmem.infra.files import atomic_write
from acpmem.read.sessions import folder as session_folder
from acpmem.read.snapshot import SNAPSHOT
from acpmem.vault.reader import VaultReader, jitter_salt, list_entries


def resident_index(vault: VaultReader, *, session: str | None = None, refresh: bool = False,
                   at: datetime | None = None, seed: int | None = None, budget_tokens: int | None = None,
                   all_branches: bool = False) -> str:
    """The resident index text; frozen per session (the same bytes every call) until ``refresh``. Entries learned
    on branches whose work the checkout lacks are left out, with a line saying how many (``all_branches``: kept;
    then nothing is frozen)."""
    if budget_tokens is not None and not int_between(budget_tokens, 1, MAX_BUDGET_TOKENS):
        raise UsageError(f"the token budget must be an integer 1..{MAX_BUDGET_TOKENS}, got {clip(budget_tokens)}",
                         "e.g. --budget 2000")
    snap_path = session_folder(vault, session) / SNAPSHOT if session and not all_branches else None
    if snap_path is not None and not refresh:
        try:
            return snap_path.read_text("utf-8")
        except FileNotFoundError:
            pass
    # lazy: the SessionStart hook does not need them (measured +1.2 ms to its start-up)
    from acpmem.core.render import prompt_index
    from acpmem.core.score import rank_iter

    at = at or vault.clock()
    salt = jitter_salt(vault, seed, session)
    layers = vault.layers()
    # lazy: the SessionStart hook does not need it (measured +7.9 ms to its start-up)
    from acpmem.vault.branches import NONE, hidden as hidden_of

    hidden = NONE
    if len(layers) == 1:
        entries, _ = list_entries(vault, light=True)
        hidden = NONE if all_branches else hidden_of(vault)   # after the listing: its catalog is up to date
        entries = _seen(entries, hidden)
        # Scored lazily: the text stops at its token budget, long before the last entry of a large vault.
        ranked = rank_iter(entries, at, salt, vault.settings.score, top_n=len(entries))
        text = prompt_index(ranked, at, vault.settings, budget_tokens=budget_tokens, total_entries=len(entries),
                            stale=_stale_ids(vault))
    else:
        # lazy: the SessionStart hook does not need it (measured +1.1 ms to its start-up)
        from acpmem.core.render import layered_prompt_index

        share = vault.settings.layers.user_share
        parts = []
        for lv in layers:
            entries, _ = list_entries(lv, light=True)
            if lv is vault and not all_branches:
                hidden = hidden_of(vault)
                entries = _seen(entries, hidden)
            parts.append((lv.layer, rank_iter(entries, at, salt, lv.settings.score, top_n=len(entries)), len(entries),
                          share if lv is not vault else 1 - share))
        text = layered_prompt_index(parts, at, vault.settings, budget_tokens=budget_tokens, stale=_stale_ids(vault))
    if hidden.ids:
        text = text.rstrip("\n") + "\n" + hidden.line(vault.settings.language) + "\n"
    if snap_path is not None:
        if refresh:
            atomic_write(snap_path, text)
        else:
            try:
                # first writer wins, so concurrent first calls agree
                atomic_write(snap_path, text, durable=False, replace=False)
            except FileExistsError:
                text = snap_path.read_text("utf-8")
    return text


def _seen(entries, hidden):
    """The entries of the project vault this checkout sees (``acpmem.vault.branches``)."""
    return [e for e in entries if e.id not in hidden.ids] if hidden.ids else entries


def _stale_ids(vault: VaultReader) -> frozenset[str]:
    """The project entries whose files changed since written (``acpmem.vault.projectgit``; after the listing's
    catalog refresh, so its cache key is current)."""
    # lazy: the SessionStart hook does not need it (measured +5.6 ms to its start-up)
    from acpmem.vault.projectgit import stale_map

    return frozenset(stale_map(vault))


__all__ = ["resident_index"]
