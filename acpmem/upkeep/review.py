"""The review queue (``acp memory review``): what needs a person, and each decision as one commit.

What is in the queue:

* **proposals** — the fork's entries under ``[write] policy = "review"``: ordinary entry files, but under
  ``proposals/`` instead of ``entries/``. They are committed (so ``sync`` carries them to the team) and no reader
  looks there: the catalog, the search index, the resident list, surfacing and recall read ``entries/`` only. What a
  proposal supersedes is only named in it; the old entries are untouched until it is accepted.
* under ``policy = "auto"``, **fork writes** this clone has not reviewed yet: entries added by ``fork-write`` and
  ``consolidate`` commits after this clone's review marker, not decided by any clone.

Each clone keeps its decisions and its marker in its own committed file ``reviews/<clone-id>.tsv`` (the clone id of
``acpmem.vault.readlog``): one line ``<entry-id>\\t<decision>\\t<time>`` per decision, and ``@through\\t<commit>\\t<time>``,
the commit up to which every fork write was decided. Each clone writes only its own file, so two clones that review
and sync never conflict. ``docs/design.md`` ("Write policy and review") has the reasons.

Decisions — each one commit of kind ``human-review`` (``Acpmem-Decision`` says which), never a history rewrite:

* accept a proposal: its file moves to ``entries/`` and the entries it supersedes are marked, in one commit;
* edit: the same with the person's text (validated, secrets refused);
* reject a proposal: its file is deleted, with the reason;
* accept a fork write: only the marker line; edit: the new text; reject: the entry is deleted and the entries it
  superseded are restored — a commit that undoes the fork's, with the reason.

Functions take the vault object, never discover one, so the same calls work on any vault layer.
"""
from __future__ import annotations

import difflib
import os
from pathlib import Path

from acpmem.core import layout
from acpmem.core.entry import Entry
from acpmem.core.entryfile import dump_entry, parse_entry_bytes
from acpmem.core.errors import AcpmemError, AmbiguousId, EntryInvalid, EntryNotFound, Refused, UsageError
from acpmem.core.limits import one_line
from acpmem.core.values import Value
from acpmem.infra import files
from acpmem.infra.files import atomic_write, read_exact, read_regular
from acpmem.read.layers import forget_layered, resolve_layer
from acpmem.vault import readlog
from acpmem.vault.edit import refuse_unsafe
from acpmem.vault.gitrun import git
from acpmem.vault.proposals import find_proposal, proposals
from acpmem.vault.readlog import MAX_LOG_BYTES
from acpmem.vault.writer import KIND_CONSOLIDATE, KIND_FORK, KIND_REVIEW, Vault

DECISIONS = ("accept", "edit", "reject")
THROUGH = "@through"
REVIEWED_KINDS = (KIND_FORK, KIND_CONSOLIDATE)


class ReviewItem(Value):
    """One thing to review: a ``proposal`` or a ``fork-write``; the entry, the commit that wrote it and the note of
    the commit that asked for it; what it supersedes (id, title and a diff of the old text to the new)."""

    id: str
    kind: str
    entry: Entry
    path: str
    commit: str | None = None
    note: str | None = None
    request: str | None = None
    supersedes: tuple[dict, ...] = ()
    layer: str = layout.LAYER_PROJECT

    def to_json(self) -> dict:
        e = self.entry
        return {"id": self.id, "kind": self.kind, "layer": self.layer, "path": self.path, "title": e.title, "type": e.type,
                "importance": e.importance, "created": e.created, "body": e.body,
                "citation": [c.to_dict() for c in e.citation], "source": e.source, "commit": self.commit,
                "note": self.note, "request": self.request, "supersedes": list(self.supersedes)}


class Decision(Value):
    id: str
    decision: str
    commit: str | None
    kind: str
    path: str
    layer: str = layout.LAYER_PROJECT

    def to_json(self) -> dict:
        return {"id": self.id, "decision": self.decision, "commit": self.commit, "kind": self.kind,
                "layer": self.layer, "path": self.path}


# --------------------------------------------------------------------------------------------- the marker files

def marker_rel(vault) -> str:
    """This clone's review file, relative to the vault."""
    return f"{layout.REVIEWS_DIR}/{readlog.clone_id(vault.state_dir)}.tsv"


def _parse_marker(text: str) -> tuple[str | None, dict[str, str]]:
    through, decided = None, {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        key, value = parts[0].strip(), parts[1].strip()
        if key == THROUGH:
            if len(value) == 40 and all(c in "0123456789abcdef" for c in value):
                through = value
        elif key and value in DECISIONS:
            decided[key] = value
    return through, decided


def read_marker(vault) -> tuple[str | None, dict[str, str]]:
    """This clone's marker commit (or None) and its decisions (id -> decision)."""
    try:
        return _parse_marker(read_regular(vault.root / marker_rel(vault), MAX_LOG_BYTES).decode("utf-8", "replace"))
    except (FileNotFoundError, NotADirectoryError):
        return None, {}


def decided_anywhere(vault) -> set[str]:
    """Ids any clone has decided (every ``reviews/*.tsv``)."""
    out: set[str] = set()
    try:
        names = os.listdir(vault.root / layout.REVIEWS_DIR)
    except (FileNotFoundError, NotADirectoryError):
        return out
    for name in names:
        if name.endswith(".tsv"):
            try:
                text = read_regular(vault.root / layout.REVIEWS_DIR / name, MAX_LOG_BYTES).decode("utf-8", "replace")
                out |= set(_parse_marker(text)[1])
            except OSError:
                continue
    return out


def _marker_text(current: str | None, ident: str, decision: str, at: str, through: str | None) -> str:
    old_through, decided = _parse_marker(current or "")
    lines = {}
    for line in (current or "").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] != THROUGH and parts[1] in DECISIONS:
            lines[parts[0]] = line
    lines[ident] = f"{ident}\t{decision}\t{at}"
    head = through or old_through
    out = [f"{THROUGH}\t{head}\t{at}"] if head else []
    return "\n".join(out + [lines[k] for k in sorted(lines)]) + "\n"


# --------------------------------------------------------------------------------------------- the queue

def _added(vault, rng: str | None, folder: str) -> dict[str, tuple[str, str, str, str]]:
    """path -> (commit, kind, note, request) of the commit that added each file under ``folder`` (newest wins), in
    ``rng`` (a revision range) or all history."""
    fmt = ("--format=%x1e%H%x1f%(trailers:key=Acpmem-Kind,valueonly,separator=%x2c)%x1f"
           "%(trailers:key=Acpmem-Note,valueonly,separator=%x20)%x1f"
           "%(trailers:key=Acpmem-Request,valueonly,separator=%x2c)")
    args = ["log", "--diff-filter=A", "--name-only", "--no-renames", fmt]
    if rng:
        args.append(rng)
    res = git(vault.root, *args, "--", f"{folder}/", check=False)
    if res.code != 0:
        return {}
    out: dict[str, tuple[str, str, str, str]] = {}
    for rec in res.out.split("\x1e")[1:]:
        head, _, files = rec.partition("\n")
        parts = head.split("\x1f")
        if len(parts) < 4:
            continue
        for f in files.split("\n"):
            f = f.strip()
            if f and f not in out:
                out[f] = (parts[0], parts[1].strip(), one_line(parts[2]), parts[3].strip())
    return out


def _supersedes(entry: Entry, known: dict[str, Entry]) -> tuple[dict, ...]:
    out = []
    for sid in entry.supersedes:
        old = known.get(sid)
        if old is None:
            out.append({"id": sid, "title": None, "diff": "", "missing": True})
            continue
        diff = "".join(difflib.unified_diff(
            (f"# {old.title}\n" + old.body).splitlines(keepends=True),
            (f"# {entry.title}\n" + entry.body).splitlines(keepends=True),
            fromfile=f"#{old.id}", tofile=f"#{entry.id}"))
        out.append({"id": sid, "title": old.title, "diff": diff, "missing": False})
    return tuple(out)


def queue(vault, *, include_fork_writes: bool | None = None) -> list[ReviewItem]:
    """Everything that needs a person: every proposal, then (under ``policy = "auto"``, or when
    ``include_fork_writes``) the fork writes since this clone's marker that no clone has decided."""
    loaded = vault.load(with_reads=False)
    known = {e.id: e for e in loaded.entries}
    items: list[ReviewItem] = []
    props, _ = proposals(vault)
    if props:
        added = _added(vault, None, layout.PROPOSALS_DIR)
        for e in props:
            commit, _, note, request = added.get(e.path, (None, "", "", ""))
            items.append(ReviewItem(e.id, "proposal", e, e.path, commit, note or None,
                                    request or (e.source or {}).get("request"), _supersedes(e, known),
                                    vault.layer))
    if include_fork_writes is None:
        include_fork_writes = vault.settings.write.policy == "auto"
    if include_fork_writes:
        through, _ = read_marker(vault)
        if through is not None and git(vault.root, "cat-file", "-e", f"{through}^{{commit}}", check=False).code:
            through = None   # a marker from a history this clone does not have: look at everything
        decided = decided_anywhere(vault)
        by_path = {e.path: e for e in loaded.entries}
        added = _added(vault, f"{through}..HEAD" if through else None, layout.ENTRIES_DIR)
        for path, (commit, kind, note, request) in sorted(added.items(), key=lambda kv: kv[0]):
            e = by_path.get(path)
            if e is None or e.superseded or e.id in decided or kind not in REVIEWED_KINDS:
                continue
            items.append(ReviewItem(e.id, "fork-write", e, path, commit, note or None, request or None,
                                    _supersedes(e, known), vault.layer))
    return items


def find(vault, prefix: str, items: list[ReviewItem] | None = None) -> ReviewItem:
    """The queued item with this id or unique id prefix — or, for ``reject`` of an entry the fork wrote earlier,
    that entry (a ``fork-write`` item), even if it is no longer in the queue."""
    wanted = (prefix or "").strip().lstrip("#")
    if not wanted:
        raise UsageError("no id given", "pass an id from `acp memory review --json`")
    items = queue(vault) if items is None else items
    hits = [i for i in items if i.id == wanted] or [i for i in items if i.id.startswith(wanted)]
    if len(hits) > 1:
        raise AmbiguousId(wanted, sorted(i.id for i in hits))
    if hits:
        return hits[0]
    try:
        e = vault.resolve(wanted)
    except EntryNotFound:
        raise EntryNotFound(f"nothing to review with id '{wanted}'",
                            "`acp memory review --json` lists the queue") from None
    if not ({"request", "consolidate"} & set(e.source or {})):
        raise Refused(f"#{e.id} was not written by the fork, so there is no fork write to review",
                         f"to remove it: acp memory forget {e.id} --reason '…'")
    return ReviewItem(e.id, "fork-write", e, e.path, None, None, (e.source or {}).get("request"), (), vault.layer)


# --------------------------------------------------------------------------------------------- decisions

def _check_text(vault, item: ReviewItem, text: str, forbid: tuple[str, ...] = ()) -> Entry:
    """A person's edited text: a valid entry of this vault, the same id, no secret (and, for the user vault, none
    of the project paths ``forbid``)."""
    new = parse_entry_bytes(text.encode("utf-8", "surrogatepass"), item.path, vault.settings.types)
    if new.id != item.id:
        raise EntryInvalid(item.path, "id", f"must stay '{item.id}' (ids are stable; citations refer to them)")

    refuse_unsafe(new, text, item.path, forbid)
    return new


def _mark(v: Vault, rel: str, ident: str, sup_by: str | None, expect: str | None) -> str | None:
    """The text of entry file ``rel`` with ``superseded_by`` set to ``sup_by`` — only if it is now ``expect``; None
    when the file is gone or marked otherwise (then it is left alone)."""
    cur = read_exact(v.root / rel)
    if cur is None:
        return None
    try:
        e = parse_entry_bytes(cur.encode("utf-8"), rel, v.settings.types)
    except EntryInvalid:
        return None
    if e.superseded_by != expect:
        return None
    return dump_entry(e.with_changes(superseded_by=sup_by, raw=cur, path=rel))


def decide(vault: Vault, item: ReviewItem, decision: str, *, reason: str | None = None, text: str | None = None,
           through: str | None = None, forbid_paths: tuple[str, ...] = ()) -> Decision:
    """Record one decision on ``item`` in one commit (kind ``human-review``). ``text``: the person's version (the
    ``edit`` decision). ``through``: the commit this clone's marker moves to (every fork write up to it decided).
    ``forbid_paths``: for an item of the user vault, the project's paths the edited text must not hold
    (``acpmem.read.layers.project_path_forms``)."""
    if decision not in DECISIONS:
        raise UsageError(f"unknown decision {decision!r}", "accept, edit or reject")
    reason = one_line(reason or "")
    if decision == "reject" and not reason:
        raise UsageError("a rejection needs a reason", "e.g. --reason 'wrong: we moved to Postgres'")
    vault.require_writable()
    new = _check_text(vault, item, text, forbid_paths) if text is not None else None
    if decision == "edit" and new is None:
        raise UsageError("an edit needs the new text", "edit it in $EDITOR from `acp memory review`")
    entry = new or item.entry
    mrel = marker_rel(vault)
    writes: dict[str, str] = {}
    deletes: list[str] = []
    proposal = item.kind == "proposal"
    target = item.path
    if proposal and decision != "reject":
        target = vault.path_for(entry.id, entry.title)
    trailers = {"Acpmem-Entry": item.id, "Acpmem-Decision": decision}
    if reason:
        trailers["Acpmem-Reason"] = reason
    if item.commit:
        trailers["Acpmem-Reviewed-Commit"] = item.commit
    base = read_exact(vault.root / item.path)
    if base is None:
        raise EntryNotFound(f"{item.path} is gone (decided elsewhere, or synced away)",
                            "`acp memory review --json` lists what is left")

    def under_lock(v: Vault) -> None:
        if read_exact(v.root / item.path) != base:
            raise AcpmemError(f"{item.path} changed while it was being reviewed", "run review again")
        writes[mrel] = _marker_text(read_exact(v.root / mrel), item.id, decision, v.now(), through)
        if decision == "reject":
            deletes.append(item.path)
            if not proposal:   # undo what the fork's commit did to the entries it superseded
                for sid in item.entry.supersedes:
                    old = _path_of(v, sid)
                    restored = _mark(v, old, sid, None, item.id) if old else None
                    if restored is not None:
                        writes[old] = restored
            return
        if proposal:
            if (v.root / target).exists():
                raise AcpmemError(f"{target} already exists", "rename the proposal's title, or reject it")
            if (entry.source or {}).get("consolidate"):
                _refuse_merged_again(v, entry)
            live = []
            for sid in entry.supersedes:
                old = _path_of(v, sid)
                marked = _mark(v, old, sid, entry.id, None) if old else None
                if marked is not None:
                    writes[old] = marked
                    live.append(sid)
            body = text if new is not None else base
            if tuple(live) != entry.supersedes:   # what it superseded is gone or superseded meanwhile
                body = dump_entry(parse_entry_bytes(body.encode("utf-8"), item.path, v.settings.types)
                                  .with_changes(supersedes=tuple(live)))
            writes[target] = body
            deletes.append(item.path)
        elif new is not None:
            writes[item.path] = text

    what = {"accept": "accept", "edit": "accept edited", "reject": "reject"}[decision]
    subject = f"{what} {'proposal' if proposal else 'fork write'} #{item.id} {entry.title}"
    why = {"accept": "Reviewed by a person and accepted.",
           "edit": "Reviewed by a person, corrected and accepted.",
           "reject": f"Reviewed by a person and rejected: {reason}" + (
               "" if proposal else "\nThis commit undoes the fork's write (the entries it superseded are live "
                                   "again); history is kept.")}[decision]
    if item.note:
        why += f"\nAsked for: {item.note}"
    sha = vault.apply(writes, deletes, subject=subject, why=why, kind=KIND_REVIEW, trailers=trailers,
                      check=under_lock)
    return Decision(item.id, decision, sha, item.kind, target, vault.layer)


def _refuse_merged_again(v: Vault, entry: Entry) -> None:
    """A merge proposal whose members another entry already supersedes (an earlier merge of the same cluster,
    accepted): accepting it would leave two live merged entries. Refused; the person rejects it instead."""
    known = {e.id: e for e in v.load(with_reads=False, light=True).entries}
    taken = sorted({known[s].superseded_by for s in entry.supersedes
                    if s in known and known[s].superseded_by and known[s].superseded_by != entry.id})
    if taken:
        raise Refused(f"proposal #{entry.id} merges entries already merged into "
                      + ", ".join("#" + t for t in taken),
                      f"reject it: acp memory review reject {entry.id} --reason 'merged already'")


def _path_of(v: Vault, ident: str) -> str | None:
    for e in v.load(with_reads=False, light=True).entries:
        if e.id == ident:
            return e.path
    return None


def queue_layered(vault) -> list[tuple[Vault, ReviewItem]]:
    """The queue of every layer read here (``VaultReader.layers``: the project vault, then the user vault), each
    item with the vault that holds it. Each layer's own ``[write] policy`` decides whether its fork writes are in."""
    return [(lv, item) for lv in vault.layers() for item in queue(lv)]


def find_layered(vault, prefix: str, pairs: list[tuple[Vault, ReviewItem]] | None = None) -> tuple[Vault, ReviewItem]:
    """``find`` across the layers: the queued item (proposal or fork write, in either vault) with this id or unique
    id prefix, and the vault that holds it; else, for ``reject``, an entry the fork wrote earlier in either layer
    (``acpmem.read.layers.resolve_layer``). An ambiguous prefix names the candidates with their layers."""
    wanted = (prefix or "").strip().lstrip("#")
    if not wanted:
        raise UsageError("no id given", "pass an id from `acp memory review --json`")
    pairs = queue_layered(vault) if pairs is None else pairs
    hits = [p for p in pairs if p[1].id == wanted] or [p for p in pairs if p[1].id.startswith(wanted)]
    if len(hits) > 1:
        raise AmbiguousId(wanted, sorted(f"{i.id} ({i.layer})" for _, i in hits))
    if hits:
        return hits[0]
    try:
        lv, e = resolve_layer(vault, wanted)
    except EntryNotFound:
        raise EntryNotFound(f"nothing to review with id '{wanted}'",
                            "`acp memory review --json` lists the queue") from None
    return lv, find(lv, e.id, [])


def decide_ids(vault: Vault, ids: list[str], decision: str, *, reason: str | None = None) -> list[Decision]:
    """``review accept ID…`` / ``review reject ID… --reason``: each id found in either layer (``find_layered``),
    one commit per id in the vault that holds it, in order; each vault's marker moves on with the last decision
    that leaves no fork write of that vault's queue undecided."""
    if not ids:
        raise UsageError(f"name what to {decision}", f"e.g. `acp memory review {decision} k3f9q2`; "
                                                     "`acp memory review --json` lists the queue")
    if decision == "reject" and not one_line(reason or ""):
        raise UsageError("a rejection needs a reason", "add --reason '…'")
    pairs = queue_layered(vault)
    heads = {lv.layer: lv.head() if (lv.root / ".git").exists() else None for lv in vault.layers()}
    chosen = [find_layered(vault, i, pairs) for i in ids]
    if len({(c.layer, c.id) for _, c in chosen}) != len(chosen):
        raise UsageError("the same id is named twice", "name each once")
    pending = {(i.layer, i.id) for _, i in pairs if i.kind == "fork-write"}
    out = []
    for lv, item in chosen:
        pending.discard((item.layer, item.id))
        left = any(layer == item.layer for layer, _ in pending)
        out.append(decide(lv, item, decision, reason=reason, through=None if left else heads.get(item.layer)))
    return out


def forget_or_reject(vault, prefix: str, reason: str) -> tuple[Vault, Entry, str, bool]:
    """``forget`` of an entry (``acpmem.read.layers.forget_layered``) — or, when no entry has this id, of a proposal
    awaiting review in either layer: a proposal is not in the memory, so there is nothing to forget; it is rejected
    with the reason (``decide_ids``, exactly as ``review reject ID --reason``). (the vault that held it, the entry,
    the commit, whether it was a proposal)."""
    try:
        lv, entry, sha = forget_layered(vault, prefix, reason)
        return lv, entry, sha, False
    except EntryNotFound:
        hit = find_proposal(vault, prefix)
        if hit is None:
            raise
    if not one_line(reason or ""):
        raise UsageError("forget needs --reason", "say why, e.g. --reason 'wrong: we moved to Postgres'")
    layer, entry = hit
    (d,) = decide_ids(vault, [entry.id], "reject", reason=reason)
    lv = next(v for v in vault.layers() if v.layer == layer)
    return lv, entry, d.commit or "", True


def editor_draft(vault, item: ReviewItem) -> Path:
    """Where an edit of ``item`` is drafted (``.acpmem/review/<id>.md``), filled with its text if new."""
    draft = vault.state_dir / "review" / f"{item.id}.md"
    files.ensure_dir(draft.parent)
    if not draft.exists():
        atomic_write(draft, read_exact(vault.root / item.path) or "")
    return draft
