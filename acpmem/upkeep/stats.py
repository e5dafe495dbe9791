"""``acp memory stats``: entries by type, sizes on disk, the index, session budgets used, requests, and what
extraction has cost so far.
"""
from __future__ import annotations

import os
from pathlib import Path

from acpmem.core.layout import SESSIONS_DIR
from acpmem.read.ledger import read_ledger
from acpmem.vault.proposals import proposals
from acpmem.write import budget, costs, requests
from acpmem.write.worker import retry_waiter


def _tree_bytes(path: Path) -> int:
    """The bytes of the regular files under ``path`` (symbolic links neither counted nor followed): one ``lstat``
    per file — a vault's .git holds thousands."""
    total = 0
    todo = [path]
    while todo:
        try:
            it = os.scandir(todo.pop())
        except OSError:
            continue
        with it:
            for de in it:
                try:
                    if de.is_dir(follow_symlinks=False):
                        todo.append(de.path)
                    elif de.is_file(follow_symlinks=False):
                        total += de.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
    return total


def _entry_counts(vault) -> dict:
    loaded = vault.load(with_reads=False, light=True)
    by_type: dict[str, int] = {t: 0 for t in vault.settings.types}
    for e in loaded.live():
        by_type[e.type] = by_type.get(e.type, 0) + 1
    return {"live": len(loaded.live()), "superseded": len(loaded.entries) - len(loaded.live()),
            "invalid": len(loaded.problems), "by_type": by_type}


def user_layer_stats(vault) -> dict | None:
    """The user vault read beside ``vault``: where it is, its entries, its size on disk, its own write policy and
    the proposals waiting in it; None without one. No budget: extraction (and its budget) is the project's — the
    fork runs from the project's state, whichever vault its entries go to."""
    user = vault.user
    if user is None:
        return None
    return {"vault": str(user.root), "entries": _entry_counts(user),
            "disk": {"entries_bytes": _tree_bytes(user.entries_dir), "git_bytes": _tree_bytes(user.root / ".git")},
            "review": _review(user)}


def stats(vault) -> dict:
    """``acp memory stats``: entries by type, sizes on disk, index size, session budgets used, requests, costs; and
    the user layer's entries (``user``, None when no user vault is read)."""
    counts = _entry_counts(vault)
    state = vault.state_dir
    index_bytes = sum(p.stat().st_size for p in state.glob("*.sqlite*") if p.is_file()) if state.exists() else 0
    sessions_dir = state / SESSIONS_DIR
    budgets, n_sessions, s_bytes = [], 0, 0
    for d in sorted(sessions_dir.iterdir()) if sessions_dir.is_dir() else ():
        if not d.is_dir():
            continue
        n_sessions += 1
        size = _tree_bytes(d)
        s_bytes += size
        used = read_ledger(d)["used_bytes"]   # bytes surfaced so far in this session
        if used:
            budgets.append({"session": d.name, "used_bytes": used,
                            "budget_bytes": vault.settings.surface.session_budget_bytes})

    reqs, broken = requests.list_requests(state)
    done = requests.read_done(state)
    scheduled = sorted(r.next_attempt for r in reqs if r.status == "pending" and r.next_attempt)
    ledger = costs.read(state)
    return {
        "layer": vault.layer,
        "entries": counts,
        "disk": {"entries_bytes": _tree_bytes(vault.entries_dir), "git_bytes": _tree_bytes(vault.root / ".git"),
                 "state_bytes": _tree_bytes(state), "index_bytes": index_bytes},
        "sessions": {"count": n_sessions, "bytes": s_bytes, "budgets": budgets},
        "requests": {"pending": sum(r.status == "pending" for r in reqs),
                     "failed": sum(r.status == "failed" for r in reqs), "broken": broken,
                     "done": len(done), "nothing_written": sum(d.get("status") == "nothing" for d in done),
                     "next_retry": scheduled[0] if scheduled else None,
                     "retry_waiter": retry_waiter(state),
                     "items": [{"id": r.id, "status": r.status, "attempts": r.attempts, "created": r.created,
                                "next_attempt": r.next_attempt, "note": r.note, "deferred": r.deferred,
                                "last_error": (r.last_error or {}).get("message")} for r in reqs]},
        "costs": costs.summarize(ledger),
        "user": user_layer_stats(vault) if vault.layer != "user" else None,
        "budget": _budget(vault, reqs),
        "review": _review(vault),
        **_embeddings(vault, ledger),
        **_rerank(vault),
    }


def _budget(vault, reqs) -> dict | None:
    """The extraction budgets now (``acpmem.write.budget``), and how many requests wait for them; None when none
    is set."""
    st = budget.current(vault.state_dir, vault.clock(), vault.settings.extraction)
    if st is None:
        return None
    return {**st.to_json(), "deferred_requests": sum(1 for r in reqs if r.status == "pending" and r.deferred)}


def _review(vault) -> dict:
    """The write policy and how many proposals wait for a person."""
    good, bad = proposals(vault)
    return {"policy": vault.settings.write.policy, "proposals": len(good), "invalid_proposals": len(bad)}


def _embeddings(vault, ledger: list[dict]) -> dict:
    """The embedding channel, when on: model, endpoint, vectors present and missing, what embedding has cost."""
    if not vault.settings.embeddings.model:
        return {}
    # lazy: `stats` does not need it (measured +36 ms to its start-up)
    from acpmem.read.embedding import channel_status

    return {"embeddings": {**channel_status(vault, probe=False), "costs": costs.summarize_embeddings(ledger)}}


def _rerank(vault) -> dict:
    """The rerank stage, when on: model, endpoint, how many candidates it reorders."""
    if not vault.settings.rerank.model:
        return {}
    # lazy: `stats` does not need it (measured +20 ms to its start-up)
    from acpmem.read.reranking import status

    return {"rerank": status(vault.settings, probe=False)}
