"""``acp memory consolidate``: merge clusters of near-duplicate and contradicting entries.

The clusters come from ``acpmem.write.duplicates`` (the words, the vectors, a model's verdicts: ``[consolidate]
similarity``). For each, the fork's model is asked for one
merged entry (``write.prompts.consolidate_instruction``, the fork's own ``memory_write`` tool); acpmem — not the model
— makes it supersede every entry of the cluster and carry every citation of them, so no fact loses its source. The
superseded entries stay in the vault (``list --all``, ``show``). Under ``[write] policy = "review"`` the merged
entries are proposals, under ``auto`` commits of kind ``consolidate`` — except a contradiction's, always a proposal
(a person decides which claim holds); with ``--dry-run``, no endpoint or writes
``off`` it is a report of the clusters only. Model calls go to the cost ledger and respect the extraction budgets.
"""
from __future__ import annotations

from collections import Counter

from acpmem.core.entry import Citation, Entry
from acpmem.core.entryfile import defuse_conflict_markers
from acpmem.core.errors import AcpmemError, EntryInvalid, ExtractionError
from acpmem.core.framing import frame
from acpmem.core.layout import PROPOSALS_DIR
from acpmem.core.redact import redact
from acpmem.core.tools import parse_write_args, tool_definitions
from acpmem.core.values import Value
from acpmem.infra import progress
from acpmem.search.similar import Cluster
from acpmem.vault.projectgit import merged_about
from acpmem.vault.proposals import proposals
from acpmem.vault.writer import KIND_CONSOLIDATE, KIND_PROPOSE
from acpmem.write import budget, costs, llm
from acpmem.write.draft import derive_title
from acpmem.write.duplicates import find
from acpmem.write.llm import resolve_model_config, with_served_model
from acpmem.write.prompts import consolidate_instruction


class ClusterOutcome(Value):
    """What became of one cluster: ``written`` / ``proposed`` (with the merged entry and the commit), ``reported``,
    ``skipped`` (an entry of it changed meanwhile), ``failed`` (the model call or its answer; the reason) or
    ``deferred`` (over the extraction budget)."""

    cluster: Cluster
    status: str
    entry: dict | None = None
    commit: str | None = None
    error: str | None = None

    def to_json(self) -> dict:
        return {**self.cluster.to_json(), "status": self.status, "entry": self.entry, "commit": self.commit,
                "error": self.error}


class ConsolidateResult(Value):
    """``mode``: ``report`` (and ``reason``: why nothing is written), ``commit`` or ``propose``; ``similarity``: how
    the clusters were found (``acpmem.write.duplicates``), with its notes and the model calls it made."""

    mode: str
    reason: str | None
    outcomes: tuple[ClusterOutcome, ...]
    entries: int
    similarity: str = "lexical"
    notes: tuple[str, ...] = ()
    judge_calls: int = 0

    def to_json(self) -> dict:
        return {"mode": self.mode, "reason": self.reason, "entries": self.entries, "similarity": self.similarity,
                "notes": list(self.notes), "judge_calls": self.judge_calls,
                "clusters": [o.to_json() for o in self.outcomes]}


def find_clusters(vault, types=None, *, similarity: str | None = None, env=None) -> list[Cluster]:
    """The clusters of the vault's live entries (the index is brought in step with the files first), by the
    ``similarity`` mode (default ``[consolidate] similarity``)."""
    return list(find(vault, types, mode=similarity, env=env).clusters)


def consolidate(vault, *, dry_run: bool = False, types=None, env=None,
                similarity: str | None = None) -> ConsolidateResult:
    """Find the clusters and, unless reporting only, merge each in one model call and one commit."""
    if not dry_run and vault.settings.write.policy != "off":
        vault.finish_interrupted()   # a merge killed before its commit is finished first, so it is not merged again
    got = find(vault, types, mode=similarity, env=env)
    found = list(got.clusters)
    extra = {"similarity": got.mode, "notes": got.notes, "judge_calls": got.calls}
    n = len(vault.load(with_reads=False, light=True).live())
    reason = None
    config = None
    if dry_run:
        reason = "--dry-run"
    elif vault.settings.write.policy == "off":
        reason = "writes are off in this vault (write.policy = off)"
    else:
        config = with_served_model(resolve_model_config(vault.settings.extraction, env), vault.state_dir)
        if not config.configured:
            reason = "no model endpoint is configured ([extraction] base_url / OPENAI_BASE_URL)"
    if reason is not None or not found:
        return ConsolidateResult("report", reason, tuple(ClusterOutcome(c, "reported") for c in found), n, **extra)
    vault.require_writable()
    mode = "propose" if vault.settings.write.policy == "review" else "commit"
    outcomes = []
    stop = None
    pending = pending_merges(vault)
    with progress.task("merging", len(found), unit="clusters") as shown:   # on a terminal (cli.progress)
        for c in found:
            shown.describe(f"{c.kind} of {len(c.ids)}")
            waiting = sorted({pending[i] for i in c.ids if i in pending})
            if stop is not None:
                outcomes.append(ClusterOutcome(c, "deferred", error=stop))
            elif waiting:   # one merge per cluster: a second proposal, both accepted, left two live merges
                outcomes.append(ClusterOutcome(c, "skipped", error="a merge of it awaits review: " + ", ".join(
                    "#" + w for w in waiting)))
            else:
                try:
                    # a contradiction is for a person to decide: its merge is a proposal, whatever the policy
                    outcomes.append(_merge(vault, c, config, "propose" if c.kind == "contradiction" else mode))
                except _OverBudget as exc:
                    stop = str(exc)
                    outcomes.append(ClusterOutcome(c, "deferred", error=stop))
                except (ExtractionError, EntryInvalid) as exc:
                    outcomes.append(ClusterOutcome(c, "failed", error=exc.message))
            o = outcomes[-1]
            shown.advance(note=f"{c.kind} {', '.join('#' + i for i in c.ids)}: {o.status}"
                               + (f" #{o.entry['id']}" if o.entry else "") + (f" ({o.error})" if o.error else ""))
    return ConsolidateResult(mode, None, tuple(outcomes), n, **extra)


class _OverBudget(Exception):
    pass


def _branch_of(members) -> dict:
    """The branch scope of a merge of entries learned on one branch: the newest member's, so the merged entry is
    seen where every member was (its commit holds the older ones')."""
    newest = max(members, key=lambda e: e.created)
    x = newest.extra or {}
    if x.get("branch") is None:
        return {}
    return {k: x[k] for k in ("branch", "commit", "anchor") if x.get(k) is not None}


def pending_merges(vault) -> dict[str, str]:
    """Each entry a proposal under ``proposals/`` would supersede, and that proposal's id: an entry already in a
    merge (or any proposal) that awaits review is not merged again."""
    return {sid: p.id for p in proposals(vault)[0] for sid in p.supersedes}


def _merge(vault, cluster: Cluster, config, mode: str) -> ClusterOutcome:
    known = {e.id: e for e in vault.load(with_reads=False).entries}
    members = [known.get(i) for i in cluster.ids]
    if any(e is None or e.superseded for e in members):
        return ClusterOutcome(cluster, "skipped", error="an entry of it was superseded or removed meanwhile")
    if len({(e.extra or {}).get("branch") for e in members}) > 1:   # a merge would show one where it is false
        return ClusterOutcome(cluster, "skipped", error="its entries were learned on different branches "
                                                        "(docs/branches.md)")
    st = budget.current(vault.state_dir, vault.clock(), vault.settings.extraction)
    if st is not None and st.over:
        raise _OverBudget(f"{st.reason}; run it again after {st.frees_at}")
    lang = vault.settings.language
    framed = "\n\n".join(frame("related", e.body.strip(), attrs={"id": e.id, "type": e.type, "title": e.title,
                                                                 "created": e.created}) for e in members)
    body = {"model": config.model} if config.model else {}
    body.update(messages=[{"role": "user", "content": consolidate_instruction(cluster.kind, framed, lang)}],
                tools=tool_definitions("fork", "openai", lang, vault.settings.types), tool_choice="auto")
    now = vault.now()
    try:
        result = llm.call_chat(config, body)
    except ExtractionError as exc:
        costs.append(vault.state_dir, costs.record(None, at=now, request="consolidate", error=exc,
                                                   model=config.model))
        raise
    writes = [c for c in result.tool_calls if c.name == "memory_write" and c.arguments is not None]
    if not writes:
        costs.append(vault.state_dir, costs.record(result, at=now, request="consolidate", entries=0))
        return ClusterOutcome(cluster, "failed", error="the model wrote no merged entry")
    args = parse_write_args(writes[0].arguments, vault.settings.extraction.max_entry_bytes)
    costs.append(vault.state_dir, costs.record(result, at=now, request="consolidate", entries=1))

    content = redact(args.content, deep=True)[0]
    title = redact(args.title, deep=True)[0] if args.title else derive_title(content)
    types = Counter(e.type for e in members)
    typ = max(members, key=lambda e: (types[e.type], e.importance, e.created)).type
    cites: list[Citation] = list(dict.fromkeys(c for e in members for c in e.citation))
    label = config.extractor
    ident = vault.new_id()
    entry = Entry(id=ident, title=title, type=typ, importance=max(e.importance for e in members),
                  created=now, body=defuse_conflict_markers(content.strip("\n") + "\n"), citation=tuple(cites),
                  source={"consolidate": cluster.kind, "extractor": label}, supersedes=cluster.ids,
                  extra={**merged_about(vault, members), **_branch_of(members)})

    ids = ", ".join(f"#{i}" for i in cluster.ids)
    why = f"Merged by the fork ({label}) from {len(members)} entries ({cluster.kind}: {cluster.why}): {ids}."
    trailers = {"Acpmem-Consolidate": " ".join(cluster.ids), "Acpmem-Model": config.model or "",
                "Acpmem-Note": f"consolidate {cluster.kind}: {cluster.why}"}
    if mode == "propose":
        entry = entry.with_changes(path=vault.path_for(ident, title, PROPOSALS_DIR))
        sha = vault.write_entries([entry], subject=f"merge {ids} into #{ident} {title}", why=why,
                                  kind=KIND_PROPOSE, trailers=trailers)
    else:
        entry = entry.with_changes(path=vault.path_for(ident, title))
        updates = [e.with_changes(superseded_by=ident) for e in members]
        try:
            sha = vault.write_entries([entry], subject=f"merge {ids} into #{ident} {title}", why=why,
                                      kind=KIND_CONSOLIDATE, trailers=trailers, updates=updates)
        except AcpmemError as exc:
            return ClusterOutcome(cluster, "skipped", error=exc.message)
    return ClusterOutcome(cluster, "proposed" if mode == "propose" else "written",
                          {"id": ident, "title": title, "path": entry.path, "type": typ}, sha)
