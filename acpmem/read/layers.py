"""Two layers, one view: the project vault and the user vault read together, and an id found in either.

A session reads exactly two vaults: the project vault it was opened on and the user vault
(``VaultReader.user``: ``$ACPMEM_USER_VAULT`` > ``[layers] user_vault`` > ``~/.acp-memory``). Nothing here ever
opens another project's vault, so nothing from one project can reach another project's session: the only thing two
projects share is the user vault, and only entries routed to it (``acpmem.write.fork``) with project paths redacted
are written there.

Recall is merged *above* the search: each layer's vault is searched by ``acpmem.read.retrieval.recall`` on its own
index, and the hits are merged by score — the search internals do not know about layers.

User-layer ids start with ``u-`` (``acpmem.core.layout.USER_ID_PREFIX``) so they can never meet a project id: the
user vault is shared by every project of a person and synced between machines, so a check on write could not see
all the ids it must not collide with (another project's, another machine's before a sync); the prefix needs no
coordination. A project id acpmem makes never has a ``-``.
"""
from __future__ import annotations

import os
from collections.abc import Collection, Iterable

from acpmem.core.entry import Entry
from acpmem.core.errors import AmbiguousId, EntryNotFound, Refused, UsageError, VaultNotFound
from acpmem.core.layout import LAYER_PROJECT, LAYER_USER, USER_ID_PREFIX, VAULT_DIRNAME
from acpmem.core.limits import MAX_TOP_N, clip, int_between
from acpmem.core.values import Value
from acpmem.vault.discovery import user_vault_location, user_vault_problem
from acpmem.vault.reader import NOT_FOUND_HINT, VaultReader, jitter_salt, list_entries, shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from datetime import datetime

    from acpmem.core.score import Scored
    from acpmem.search.catalog import Problem
    from acpmem.read.retrieval import RecallHit


class LayerEntry(Value):
    """An entry and the layer it was read from."""

    layer: str
    entry: Entry


def two_layers(vault: VaultReader) -> bool:
    """Whether a user vault is read beside this one (then text output names every line's layer)."""
    return len(vault.layers()) > 1


def list_layered(vault: VaultReader, *, include_superseded: bool = False,
                 light: bool = False) -> tuple[list[LayerEntry], list[tuple[str, Problem]]]:
    """The entries of every layer (project first), and every file that does not parse, each with its layer."""
    entries: list[LayerEntry] = []
    problems: list[tuple[str, Problem]] = []
    for lv in vault.layers():
        es, ps = list_entries(lv, include_superseded=include_superseded, light=light)
        entries += [LayerEntry(lv.layer, e) for e in es]
        problems += [(lv.layer, p) for p in ps]
    return entries, problems


def resolve_layer(vault: VaultReader, prefix: str, layer: str | None = None) -> tuple[VaultReader, Entry]:
    """The vault (project or user layer) holding the entry with id ``prefix`` (or the only id starting with it), and
    the entry. ``layer`` (``"project"`` / ``"user"``) restricts the search to that layer. An id starting ``u-`` is
    looked up in the user layer first. An ambiguous prefix lists the candidates of both layers.

    The one way to find an entry by id across layers: ``show``, ``forget``, ``log`` and ``edit`` use it."""
    if layer not in (None, LAYER_PROJECT, LAYER_USER):
        raise UsageError(f"unknown layer {layer!r}", "use project or user")
    layers = vault.layers()
    if layer is not None:
        layers = [lv for lv in layers if lv.layer == layer]
        if not layers:
            if layer == LAYER_USER:
                raise EntryNotFound("there is no user vault", "create one with `acp memory init --user`")
            raise EntryNotFound(f"there is no {layer} vault here", "see `acp memory list` for the layers read")
    want = (prefix or "").strip().lstrip("#")
    if want.startswith(USER_ID_PREFIX):
        layers = sorted(layers, key=lambda lv: lv.layer != LAYER_USER)
    if len(layers) == 1:
        return layers[0], layers[0].resolve(prefix)
    found: list[tuple[VaultReader, Entry]] = []
    several: list[str] = []
    missing: EntryNotFound | None = None
    for lv in layers:
        try:
            e = lv.resolve(prefix)
        except EntryNotFound as exc:
            missing = missing or exc
            continue
        except AmbiguousId as exc:
            several += [f"{i} ({lv.layer})" for i in exc.matches]
            continue
        if e.id == want:    # an exact id wins in the first layer that has it
            return lv, e
        found.append((lv, e))
    if several or len(found) > 1:
        raise AmbiguousId(want, [f"{e.id} ({lv.layer})" for lv, e in found] + several)
    if not found:
        raise missing or EntryNotFound(f"no entry with id '{want}'", NOT_FOUND_HINT)
    return found[0]


def vault_for_layer(vault: VaultReader, layer: str) -> VaultReader:
    """The vault of a layer: this one for ``project``, its user vault for ``user`` (an error when there is none)."""
    for lv in vault.layers():
        if lv.layer == layer:
            return lv
    if layer == LAYER_USER:
        for w in vault.warnings:   # a user vault that is there but broken: say why, not "create one"
            if w.startswith("the user vault ") and " — " in w:
                what, _, hint = w.partition(" — ")
                raise VaultNotFound(what.split(": only this project")[0] + "; nothing was written", hint)
        raise VaultNotFound("there is no user vault to write to",
                         "create it with `acp memory init --user` (or set ACPMEM_USER_VAULT to a vault)")
    return vault


def recall_layered(vault: VaultReader, query: str, limit: int = 5, types: Iterable[str] | None = None,
                   include_superseded: bool = False, session: str | None = None, *,
                   mark_read: bool = True, report: dict | None = None, previews: bool = True,
                   skip: Collection[str] = (), matched: bool = False, upto: int | None = None) -> list[RecallHit]:
    """``recall`` over every layer: each vault searched on its own index (``acpmem.read.retrieval.recall``), the
    hits merged by score (project first on a tie), cut to ``limit``; only the returned ones are marked read (in
    their own vault) and noted in the session's ledger (the project vault's). ``report`` receives what the layers'
    embedding channels say (``recall``): the first layer's ``vectors``, and the first ``warning`` of any layer.
    ``previews=False`` makes no previews; ``skip``, ``matched`` and ``upto`` leave hits out after they held their
    places in the merged ranking, and ``report`` then receives ``left_out`` (``recall``)."""
    # lazy: `list` does not need it (measured +15 ms to its start-up)
    from acpmem.read.retrieval import note_recalled, recall, recall_ranked

    layers = vault.layers()
    if len(layers) == 1:
        return recall(vault, query, limit, types, include_superseded, session, mark_read=mark_read, report=report,
                      previews=previews, skip=skip, matched=matched, upto=upto)
    wanted = tuple(dict.fromkeys(types)) if types else None
    if wanted:   # a type known to any layer is fine; each layer is asked only for the types it has
        known = {t for lv in layers for t in lv.settings.types}
        unknown = [t for t in wanted if t not in known]
        if unknown:
            raise Refused(f"unknown entry type '{unknown[0]}'", f"the types of this vault: "
                             f"{', '.join(dict.fromkeys(t for lv in layers for t in lv.settings.types))}")
    # lazy: `show` does not need it (measured +0.4 ms to its start-up, with the ledger's and the snapshot's modules)
    from acpmem.read.sessions import folder as session_folder

    sdir = session_folder(vault, session) if session else None   # checks the session id before any work
    hits: list[tuple[int, RecallHit]] = []
    for rank_of_layer, lv in enumerate(layers):
        mine = [t for t in wanted if t in lv.settings.types] if wanted else None
        if wanted and not mine:
            continue
        said: dict = {}
        hits += [(rank_of_layer, h) for h in recall_ranked(lv, query, limit, mine, include_superseded, None,
                                                           mark_read=False, report=said, previews=previews,
                                                           skip=skip, matched=matched)]
        if report is not None:
            for key, value in said.items():
                report.setdefault(key, value)
    hits.sort(key=lambda p: (-p[1].score, p[0]))
    chosen = [h for _, h in hits[:limit] if h.entry is not None][:upto]
    if (skip or matched or upto is not None) and report is not None:
        report["left_out"] = min(len(hits), limit) - len(chosen)
    if not mark_read or not chosen:
        return chosen
    now = vault.now()
    for lv in layers:
        ids = [h.entry.id for h in chosen if h.layer == lv.layer]
        if ids:
            lv.mark_read(ids)
    if sdir is not None:
        note_recalled(sdir, [h.entry.id for h in chosen])
    return [h.with_changes(entry=h.entry.with_changes(last_read=now)) for h in chosen]


def scores_layered(vault: VaultReader, *, at: datetime | None = None, seed: int | None = None,
                   session: str | None = None, top_n: int | None = None) -> list[tuple[str, Scored]]:
    """The selection table over every layer: one ranking (each entry scored with its own vault's weights), each row
    with its layer."""
    # lazy: `recall` does not need it (measured +0.2 ms to its start-up)
    from acpmem.core.score import rank

    if top_n is not None and not int_between(top_n, 0, MAX_TOP_N):
        raise UsageError(f"top_n must be an integer 0..{MAX_TOP_N}, got {clip(top_n)}", "e.g. --top 5")
    at = at or vault.clock()
    salt = jitter_salt(vault, seed, session)
    rows: list[tuple[str, Scored]] = []
    for lv in vault.layers():
        entries, _ = list_entries(lv, light=True)
        rows += [(lv.layer, s) for s in rank(entries, at, salt, lv.settings.score, 0)]
    rows.sort(key=lambda r: (-r[1].total, -r[1].entry.importance, r[1].entry.id))
    n = vault.settings.score.top_n if top_n is None else top_n
    # a new value only where the flag changes: a thousand copies are a tenth of `score`'s own work
    return [(layer, s if s.selected == (i < n) else s.with_changes(selected=i < n))
            for i, (layer, s) in enumerate(rows)]




def open_user_vault(explicit=None, *, cwd=None, cls=None):
    """The user vault to work on by itself (``init --user`` aside: ``sync --user``, ``log --user``, ``consolidate
    --user``): the one the project vault here reads (its ``[layers] user_vault`` counts), else — no project vault
    here — ``$ACPMEM_USER_VAULT`` or ``~/.acp-memory``. An error saying why when there is none."""
    if cls is None:
        # lazy: chosen at run time
        from acpmem.vault.writer import Vault as cls
    try:
        project = cls.open(explicit, cwd=cwd)
    except VaultNotFound:
        if explicit:
            raise
        project = None
    if project is not None:
        if project.layer == LAYER_USER or project.user is not None:
            return project if project.layer == LAYER_USER else project.user
        path, _ = user_vault_location(project.settings.layers.user_vault)
        project.close()
    else:
        path, _ = user_vault_location(None)
    if path is None:
        raise VaultNotFound("the user vault is turned off (ACPMEM_USER_VAULT or [layers] user_vault is none)",
                         "set it to a path, or unset it for ~/.acp-memory")
    why = user_vault_problem(path)
    if why is not None:
        raise VaultNotFound(f"the user vault {path} {why}",
                            "create it with `acp memory init --user`" if why == "does not exist" else
                            "fix it, or point ACPMEM_USER_VAULT at another vault")
    return cls(path, layer=LAYER_USER)


def edit_target(vault: VaultReader, prefix: str, *, user: bool = False) -> VaultReader:
    """The vault ``edit`` works on: the layer that holds ``prefix`` (``--user``: the user vault). An id that
    resolves nowhere stays with the project vault (``edit`` also takes an entry file that does not parse)."""
    if user:
        return vault_for_layer(vault, LAYER_USER)
    try:
        return resolve_layer(vault, prefix)[0]
    except EntryNotFound:
        return vault


def history_vault(vault: VaultReader, prefix: str, *, user: bool = False) -> VaultReader:
    """The vault whose history ``log ID`` reads: the layer holding the entry, else the layer holding a proposal
    with this id; an id found in no layer (a forgotten entry or a rejected proposal, found in history) — the user vault for a ``u-`` id or ``--user``, else the project vault."""
    if user:
        return vault_for_layer(vault, LAYER_USER) if vault.layer != LAYER_USER else vault
    try:
        return resolve_layer(vault, prefix)[0]
    except EntryNotFound:
        # lazy: `list` does not need it (measured +8.6 ms to its start-up)
        from acpmem.vault.history import proposal_paths

        want = (prefix or "").strip().lstrip("#")
        layers = sorted(vault.layers(), key=lambda lv: (lv.layer != LAYER_USER) == want.startswith(USER_ID_PREFIX))
        for lv in layers:   # a proposal waiting for review: its history is in the vault that holds it
            if proposal_paths(lv, want):
                return lv
        if want.startswith(USER_ID_PREFIX) and vault.user is not None:
            return vault.user
        return vault


def show_layered(vault: VaultReader, prefix: str) -> tuple[str, Entry]:
    """``show`` across the layers: the entry with this id (or unique prefix) and its layer; marked read in its own
    vault."""
    lv, found = resolve_layer(vault, prefix)
    return lv.layer, shown(lv, found)


def show_or_proposal(vault: VaultReader, prefix: str) -> tuple[str, Entry, bool]:
    """``show`` of an entry (``show_layered``) — or, when no entry has this id, of a proposal awaiting review in
    either layer (``acpmem.vault.proposals.find_proposal``): (layer, entry, whether it is a
    proposal). A proposal is not marked read: it is not in the memory yet."""
    try:
        layer, e = show_layered(vault, prefix)
        return layer, e, False
    except EntryNotFound:
        # lazy: `list` does not need it (measured +0.1 ms to its start-up)
        from acpmem.vault.proposals import find_proposal

        hit = find_proposal(vault, prefix)
        if hit is None:
            raise
        return hit[0], hit[1], True


def forget_layered(vault, prefix: str, reason: str):
    """``forget`` across the layers: (the vault that held it, the entry, the commit)."""
    lv, found = resolve_layer(vault, prefix)
    entry, sha = lv.forget(found.id, reason)
    return lv, entry, sha


def log_layered(vault: VaultReader, prefix: str | None, *, limit: int = 50, user: bool = False) -> list:
    """``log`` across the layers: one entry's history in the vault that holds (or held) it, or a whole vault's —
    the user vault's with ``user``."""
    # lazy: `list` does not need it (measured +8.6 ms to its start-up)
    from acpmem.vault.history import log

    if prefix is not None and not prefix.strip().lstrip("#"):   # as `show ''` is: never the whole log by accident
        raise UsageError("no entry id given", "pass an id or a unique prefix, e.g. `acp memory log k3f`; without "
                                              "an id, the whole vault's history")
    if prefix:
        target = history_vault(vault, prefix, user=user)
    else:
        target = vault_for_layer(vault, LAYER_USER) if user and vault.layer != LAYER_USER else vault
    return log(target, prefix, limit=limit)


def edit_layered(vault, prefix: str, *, user: bool = False, **kw) -> str:
    """``edit`` across the layers (``acpmem.vault.edit.edit_entry``): in the vault that holds the entry (``user``:
    the user vault only); in the user vault, text holding this project's paths is refused."""
    # lazy: `list` does not need it (measured +26 ms to its start-up)
    from acpmem.vault.edit import edit_entry

    target = edit_target(vault, prefix, user=user)
    forbid = project_path_forms(vault) if target is not vault else ()
    return edit_entry(target, prefix, forbid_paths=forbid, **kw)


__all__ = ["LayerEntry", "two_layers", "list_layered", "resolve_layer", "vault_for_layer", "recall_layered",
           "scores_layered", "open_user_vault", "edit_target", "history_vault", "project_path_forms", "show_layered",
           "show_or_proposal", "forget_layered", "log_layered", "edit_layered"]


def project_path_forms(vault: VaultReader) -> tuple[str, ...]:
    """The spellings of this project's folders that user-layer text must not hold
    (``acpmem.core.projectpaths``): the vault and its workspace, as opened and as real paths."""
    # lazy: `list` does not need it (measured +0.1 ms to its start-up)
    from acpmem.core.projectpaths import path_forms, project_roots

    roots = project_roots(str(vault.root), VAULT_DIRNAME) + project_roots(os.path.realpath(vault.root), VAULT_DIRNAME)
    return path_forms(roots, os.path.expanduser("~"))
