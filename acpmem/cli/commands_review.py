"""The commands a person uses to control what the memory holds: ``remember``, ``review`` and ``consolidate``.

Each parses its arguments, makes library calls (``write.remember``, ``upkeep.review``, ``upkeep.consolidate``) and
renders the result; ``review`` without an action is a loop over the queue that asks for one decision per item.
"""
from __future__ import annotations

import subprocess
import sys
from typing import Annotated, Optional

import typer

from acpmem.cli import hot
from acpmem.cli.app import (JsonOpt, UserOpt, VaultOpt, app, complete_types, open_user, open_vault, params,
                            vault_of)
from acpmem.cli.commands_branches import branch_decide, branch_queue
from acpmem.cli.output import emit_warnings, fail, out, out_json, using, warn
from acpmem.core.errors import AcpmemError, Refused, UsageError


# --------------------------------------------------------------------------------------------- remember

@app.command()
def remember(ctx: typer.Context,
             text: Annotated[Optional[str], typer.Argument(metavar="TEXT", show_default=False,
                                                           help="The entry, verbatim; '-' or nothing reads stdin "
                                                                "(or opens $EDITOR on a terminal).")] = None,
             type_: Annotated[Optional[str], typer.Option("--type", "-t", autocompletion=complete_types,
                                                          show_default=False,
                                                          help="One of the vault's types (decision, lesson, fact, "
                                                               "user-preference, reference by default). Default: "
                                                               "fact; with --user, user-preference.")] = None,
             importance: Annotated[Optional[int], typer.Option("--importance", "-i", min=1, max=10,
                                                               show_default=False,
                                                               help="1-10: how much a future session loses without "
                                                                    "it. Default: 5.")] = None,
             title: Annotated[Optional[str], typer.Option("--title", help="One line (default: the text's first "
                                                                          "line).", show_default=False)] = None,
             edit: Annotated[bool, typer.Option("--edit", help="Write the text in $EDITOR.")] = False,
             user: Annotated[bool, typer.Option("--user", help="Write it to your user vault (~/.acp-memory, or "
                                                               "$ACPMEM_USER_VAULT), read in every project.")]
             = False,
             branch: Annotated[bool, typer.Option("--branch", help="Tie it to the project branch checked out now: "
                                                                   "seen there, in its children, and where it is "
                                                                   "merged.")] = False,
             global_: Annotated[bool, typer.Option("--global", help="Never tie it to a branch: seen in every "
                                                                    "checkout.")] = False,
             json_: JsonOpt = False, vault: VaultOpt = None) -> int:
    """Write an entry yourself, verbatim — no model in between — in one commit marked as a human write.

    The text is checked for secrets first; one is refused with an error and nothing is written. A person's entry
    counts at once, whatever [write] policy says.

    With --user it goes to your user vault (its id starts with u-), read beside every project's vault: for your
    preferences. Text holding a path of the project you are in is refused there, so one project's paths never
    reach another. Without a project vault here, --user writes to the user vault alone.

    Example: acp memory remember "Deploys go out on Tuesdays; Friday deploys need a second reviewer." --type decision --importance 7

    Example: git log -1 --format=%B | acp memory remember --type fact --importance 4 --title "Why we pinned pnpm"

    Example: acp memory remember "Answer with the short version first." --type user-preference --importance 8 --user

    On a project branch other than the default one, decisions, lessons and facts are tied to the branch ([branches]
    scoped in acpmem.toml): seen only where its work is checked out, until it merges. --branch or --global decides.

    Example: acp memory remember "The importer reads with pyarrow now" --type fact --branch
    """
    return hot.call("remember", params(locals()), vault_of(ctx, None))


# --------------------------------------------------------------------------------------------- review

@app.command()
def review(ctx: typer.Context,
           action: Annotated[Optional[str], typer.Argument(metavar="ACTION", show_default=False,
                                                           help="accept or reject: decide without prompts on the "
                                                                "named ids; confirm (still true) or forget: a stale "
                                                                "entry's; keep (with --global) or drop: an entry "
                                                                "of a dead branch.")] = None,
           ids: Annotated[Optional[list[str]], typer.Argument(metavar="ID", show_default=False,
                                                              help="Ids (or unique prefixes) from the queue.")] = None,
           reason: Annotated[Optional[str], typer.Option("--reason", "-r", show_default=False,
                                                         help="Why (required to reject; goes into the "
                                                              "commit).")] = None,
           stale_: Annotated[bool, typer.Option("--stale", help="Review the stale entries instead (see `acp memory "
                                                                "stale`): confirm each still true, or forget it.")]
           = False,
           branches: Annotated[bool, typer.Option("--branches", help="List the entries of branches that died "
                                                                     "unmerged (no branch holds them).")] = False,
           global_: Annotated[bool, typer.Option("--global", help="With keep: the entry is seen in every "
                                                                  "checkout.")] = False,
           json_: JsonOpt = False, vault: VaultOpt = None) -> int:
    """Review what needs a person: proposals (under [write] policy = "review") and, under "auto", what the forks
    wrote since this clone last reviewed — in the project vault and in your user vault, each item with its layer.

    Without an action, each item is shown — its layer, the entry, what it supersedes as a diff, its citation and
    the note of the commit that asked for it — and you answer accept / edit / reject (with a reason) / skip / quit.
    Each decision is one commit marked as a human review, in the vault that holds the item (ids are found in
    either vault); a rejected fork write is undone by a commit, never by rewriting history. --json prints the
    queue of both vaults.

    Example: acp memory review

    Example: acp memory review --json

    Example: acp memory review accept k3f9q2 m2x8aa

    Example: acp memory review reject k3f9q2 --reason "wrong: the queue moved to Postgres"

    Stale entries (their project files changed since they were written): --stale shows each with the files and
    the commits that changed them, and you answer confirm (still true: the entry records the project's current
    commit) / forget (with a reason) / skip / quit; `review confirm ID…` and `review forget ID… --reason …` decide
    without prompts.

    Example: acp memory review --stale

    Example: acp memory review confirm k3f9q2

    Entries of a branch deleted or abandoned unmerged (docs/branches.md): --branches lists them; `review keep ID
    --global` keeps one for every checkout, `review drop ID` forgets it. Nothing else removes them.

    Example: acp memory review --branches

    Example: acp memory review keep k3f9q2 --global
    """
    # lazy: typer's start-up (help, completion) does not need it (measured +46 ms)
    from acpmem.upkeep import review as rv

    if action is not None and action not in ("accept", "reject", "confirm", "forget", "keep", "drop"):
        raise UsageError(f"unknown action {action!r}", "use `review accept ID…`, `review reject ID… --reason …`, "
                                                       "`review confirm ID…`, `review forget ID… --reason …`, "
                                                       "`review keep ID… --global` or `review drop ID…`")
    if action is None and ids:
        raise UsageError("ids go after accept, reject, confirm, forget, keep or drop",
                         "e.g. `acp memory review accept k3f9q2`")
    if global_ and action != "keep":
        raise UsageError("--global goes with keep", "e.g. `acp memory review keep k3f9q2 --global`")
    if action in ("keep", "drop"):
        return branch_decide(ctx, vault, action, list(ids or []), reason, global_, json_)
    if branches:
        return branch_queue(ctx, vault, json_)
    if action in ("confirm", "forget"):
        return _stale_decide(ctx, vault, action, list(ids or []), reason, json_)
    if stale_:
        return _stale_review(ctx, vault, json_)
    with open_vault(ctx, vault) as v:
        if action is not None:
            done = rv.decide_ids(v, list(ids or []), action, reason=reason)
            emit_warnings(v)
            if json_:
                out_json({"decisions": [d.to_json() for d in done]})
            else:
                two = len(v.layers()) > 1
                for d in done:
                    where = f" in the {d.layer} vault" if two else ""
                    out(f"{d.decision.capitalize()}ed {d.kind} #{d.id}{where} (commit {(d.commit or '')[:12]}).")
            return 0
        pairs = rv.queue_layered(v)
        if json_:
            emit_warnings(v)   # e.g. a broken user vault: its items are not in this list
            out_json({"policy": v.settings.write.policy,
                      "policies": {lv.layer: lv.settings.write.policy for lv in v.layers()},
                      "items": [i.to_json() for _, i in pairs]})
            return 0
        return _interactive(v, pairs)


def _stale_decide(ctx, vault, action: str, ids: list[str], reason: str | None, json_: bool) -> int:
    """``review confirm|forget ID…``: each id decided, one commit each."""
    # lazy: typer's start-up (help, completion) does not need it (measured +8.4 ms)
    from acpmem.vault.projectgit import confirm

    if not ids:
        raise UsageError(f"name the entries to {action}", f"e.g. `acp memory review {action} k3f9q2`"
                         + (" --reason '…'" if action == "forget" else ""))
    if action == "forget" and not (reason or "").strip():
        raise UsageError("forget needs --reason", "say why, e.g. --reason 'the parser was rewritten'")
    done = []
    with using(open_vault(ctx, vault)) as v:
        for i in ids:
            if action == "confirm":
                e, head, sha = confirm(v, i)
                done.append({"id": e.id, "decision": "confirm", "project_commit": head, "commit": sha})
            else:
                e, sha = v.forget(i, reason)
                done.append({"id": e.id, "decision": "forget", "commit": sha})
    if json_:
        out_json({"decisions": done})
    else:
        for d in done:
            what = f"Confirmed #{d['id']} still true at project commit {d['project_commit'][:12]}" \
                if d["decision"] == "confirm" else f"Forgot #{d['id']}"
            out(f"{what} (commit {d['commit'][:12]}).")
    return 0


def _stale_review(ctx, vault, json_: bool) -> int:
    """``review --stale``: each stale entry shown with its changed files and commits; confirm / forget / skip."""
    # lazy: typer's start-up (help, completion) does not need it (measured +8.4 ms)
    from acpmem.vault.projectgit import confirm, stale_report

    with open_vault(ctx, vault) as v:
        entries = {e.id: e for e in v.load(with_reads=False).entries}
        report = stale_report(v)
        if json_:
            out_json({"stale": [s.to_json() for s in report]})
            return 0
        emit_warnings(v)
        if not report:
            out("No stale entries.")
            return 0
        counts = {"confirm": 0, "forget": 0, "skip": 0}
        for n, s in enumerate(report, 1):
            e = entries.get(s.id)
            out(f"\n[{n}/{len(report)}] #{s.id} {e.title if e else ''}")
            for line in (e.body.rstrip("\n").splitlines() if e else ()):
                out(f"    {line}")
            out(f"  Files changed since project commit {s.commit[:12]}: {', '.join(s.files)}")
            for c in s.commits:
                out(f"    {c['commit'][:12]} {c['subject']}")
            while True:
                answer = _ask("[c]onfirm still true  [f]orget  [s]kip  [q]uit > ")
                if answer is None or answer.lower() in ("q", "quit"):
                    out(_summary(counts, len(report) - n + 1))
                    return 0
                choice = {"c": "confirm", "f": "forget", "s": "skip"}.get(answer.lower()[:1])
                if choice is None:
                    out("Answer c, f, s or q.")
                    continue
                try:
                    if choice == "confirm":
                        _, head, sha = confirm(v, s.id)
                        out(f"  confirmed at project commit {head[:12]} (commit {sha[:12]})")
                    elif choice == "forget":
                        why = _ask("Reason: ")
                        if not why:
                            out("Forgetting needs a reason (or answer s to skip).")
                            continue
                        _, sha = v.forget(s.id, why)
                        out(f"  forgotten (commit {sha[:12]})")
                except AcpmemError as exc:
                    warn(exc.line())
                    continue
                counts[choice] += 1
                break
        out(_summary(counts, 0))
        return 0


# --------------------------------------------------------------------------------------------- stale

@app.command()
def stale(ctx: typer.Context, json_: JsonOpt = False, vault: VaultOpt = None) -> int:
    """Name the entries whose project files changed in git since they were written, with the commits that changed
    them.

    An entry the fork writes records the project files its cited turns read or changed (`files:`) and the
    project's commit at the time (`commit:`); both are plain frontmatter you can edit. An entry is stale when one
    of its files differs between that commit and the project's HEAD. `list`, `recall` and the resident index mark
    stale entries; `acp memory review --stale` confirms each (still true: it records the current commit) or
    forgets it. Without a git project around the vault, nothing is ever stale.

    Example: acp memory stale

    Example: acp memory stale --json
    """
    # lazy: typer's start-up (help, completion) does not need it (measured +8.4 ms)
    from acpmem.vault.projectgit import checks_on, project_head, stale_report, unknown_commits

    with using(open_vault(ctx, vault)) as v:
        titles = {e.id: e.title for e in v.load(with_reads=False, light=True).entries}
        ph = project_head(v)
        report = stale_report(v)
        unknown = unknown_commits(v) if ph is not None else []
    if json_:
        out_json({"project": str(ph[0]) if ph else None, "head": ph[1] if ph else None, "checks": checks_on(),
                  "stale": [{**s.to_json(), "title": titles.get(s.id)} for s in report],
                  "unknown_commit": [{"id": i, "commit": c} for i, c in unknown]})
        return 0
    if not checks_on():
        out("The staleness check is off (ACPMEM_CHECKS=off).")
        return 0
    if ph is None:
        out("No git project around this vault (or it has no commit yet): no entry can be stale.")
        return 0
    if not report:
        out(f"No stale entries (project {ph[0]} at {ph[1][:12]}).")
    for s in report:
        out(f"#{s.id} {titles.get(s.id, '')}")
        out(f"  files changed since {s.commit[:12]}: {', '.join(s.files)}")
        for c in s.commits:
            out(f"    {c['commit'][:12]} {c['subject']}")
    for i, c in unknown:
        out(f"#{i} {titles.get(i, '')}: its commit {c[:12]} is not in this clone's project history; not checked")
    if report:
        out(f"\n{len(report)} stale {'entry' if len(report) == 1 else 'entries'}: `acp memory review --stale` "
            "confirms or forgets each.")
    return 0


def _show(item, n: int, total: int) -> None:
    e = item.entry
    out(f"\n[{n}/{total}] {item.kind} #{item.id} ({item.layer} layer)  {e.type}, importance {e.importance}"
        + (f"  (commit {item.commit[:12]})" if item.commit else ""))
    out(f"  {e.title}")
    for line in e.body.rstrip("\n").splitlines():
        out(f"    {line}")
    if e.citation:
        out("  Citation: " + ", ".join(str(c) for c in e.citation))
    if item.note:
        out(f"  Asked for: {item.note}")
    for s in item.supersedes:
        if s.get("missing"):
            out(f"  Supersedes #{s['id']} (no longer in the vault)")
            continue
        out(f"  Supersedes #{s['id']} {s['title']}:")
        for line in s["diff"].rstrip("\n").splitlines():
            out(f"    {line}")


def _ask(prompt: str) -> str | None:
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = sys.stdin.readline()
    return None if not line else line.strip()


def _interactive(v, pairs) -> int:
    # lazy: typer's start-up (help, completion) does not need them (measured +47 ms)
    from acpmem.upkeep import review as rv
    from acpmem.read.layers import project_path_forms

    emit_warnings(v)
    if not pairs:
        out("Nothing to review.")
        return 0
    heads = {lv.layer: lv.head() for lv in {id(lv): lv for lv, _ in pairs}.values()}
    forks = {(i.layer, i.id) for _, i in pairs if i.kind == "fork-write"}
    skipped: set[str] = set()   # the layers where something was skipped: their marker stays where it is
    counts = {"accept": 0, "edit": 0, "reject": 0, "skip": 0}
    for n, (lv, item) in enumerate(pairs, 1):
        _show(item, n, len(pairs))
        while True:
            answer = _ask("[a]ccept  [e]dit  [r]eject  [s]kip  [q]uit > ")
            if answer is None or answer.lower() in ("q", "quit"):
                out(_summary(counts, len(pairs) - n + 1))
                return 0
            choice = {"a": "accept", "e": "edit", "r": "reject", "s": "skip"}.get(answer.lower()[:1])
            if choice is None:
                out("Answer a, e, r, s or q.")
                continue
            if choice == "skip":
                skipped.add(item.layer)
                counts["skip"] += 1
                break
            reason, text = None, None
            if choice == "reject":
                reason = _ask("Reason: ")
                if not reason:
                    out("A rejection needs a reason (or answer s to skip).")
                    continue
            if choice == "edit":
                text = _edit(lv, item)
                if text is None:
                    continue
            forks.discard((item.layer, item.id))
            left = item.layer in skipped or any(layer == item.layer for layer, _ in forks)
            try:
                d = rv.decide(lv, item, choice, reason=reason, text=text,
                              through=None if left else heads[item.layer],
                              forbid_paths=project_path_forms(v) if lv is not v else ())
            except AcpmemError as exc:
                warn(exc.line())
                continue
            counts[choice] += 1
            out(f"  {choice}ed (commit {(d.commit or '')[:12]})")
            if choice == "edit":
                rv.editor_draft(lv, item).unlink(missing_ok=True)
            break
    out(_summary(counts, 0))
    return 0


def _edit(v, item) -> str | None:
    # lazy: typer's start-up (help, completion) does not need them (measured +46 ms)
    from acpmem.upkeep import review as rv
    from acpmem.vault.edit import editor_command

    draft = rv.editor_draft(v, item)
    try:
        rc = subprocess.call([*editor_command(), str(draft)])
    except FileNotFoundError:
        warn(f"Error: editor {editor_command()[0]!r} not found — set $EDITOR, e.g. EDITOR=nano")
        return None
    if rc != 0:
        warn(f"Error: the editor exited with status {rc} — your draft is kept in {draft}")
        return None
    return draft.read_text("utf-8")


def _summary(counts: dict, left: int) -> str:
    parts = [f"{n} {k}{'ed' if k != 'skip' else 'ped'}" for k, n in counts.items() if n]
    return "Reviewed: " + (", ".join(parts) or "nothing") + (f"; {left} left for later." if left else ".")


# --------------------------------------------------------------------------------------------- consolidate

@app.command()
def consolidate(ctx: typer.Context,
                dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report the clusters; write nothing "
                                                                        "(only the model mode calls a model).")] = False,
                type_: Annotated[Optional[list[str]], typer.Option("--type", "-t", autocompletion=complete_types,
                                                                   show_default=False,
                                                                   help="Only entries of this type "
                                                                        "(repeatable).")] = None,
                similarity: Annotated[Optional[str], typer.Option(
                    "--similarity", help="How to find them: auto (the best configured), lexical, embedding or "
                                         "model; default [consolidate] similarity.", show_default=False)] = None,
                user: UserOpt = False, json_: JsonOpt = False, vault: VaultOpt = None) -> int:
    """Find clusters of near-duplicate and contradicting entries and merge each into one entry.

    Duplicates are found by meaning: by the words (stems, abbreviations, tool names, negation), by the
    [embeddings] vectors when a model is set, and — with an [extraction] model — by that model judging the
    candidate pairs, a batch per call ([consolidate] similarity; docs/duplicates.md). The fork's model writes one
    merged entry per cluster, which supersedes every entry of it and keeps all their citations. A contradiction
    (the same subject, an opposite claim) is always a proposal for a person to decide (`acp memory review`), never
    merged on its own; under [write] policy = "review" every merge is. With --dry-run, or without a model endpoint,
    it only reports the clusters. Superseded entries stay readable: `acp memory list --all`, `show ID`.

    One layer at a time: the project vault, or with --user your user vault (under its own policy). A cluster never
    mixes the layers, so a project entry is never merged into your user vault, nor the other way round.

    Example: acp memory consolidate --dry-run

    Example: acp memory consolidate --user --dry-run

    Example: acp memory consolidate --type decision

    Example: acp memory consolidate --dry-run --similarity lexical
    """
    # lazy: typer's start-up (help, completion) does not need it (measured +116 ms)
    from acpmem.upkeep.consolidate import consolidate as run

    with using(open_user(ctx, vault) if user else open_vault(ctx, vault)) as v:
        unknown = [t for t in type_ or () if t not in v.settings.types]
        if unknown:
            raise Refused(f"unknown entry type '{unknown[0]}'", f"the types of this vault: "
                                                                   f"{', '.join(v.settings.types)}")
        res = run(v, dry_run=dry_run, types=type_ or None, similarity=similarity)
        titles = {e.id: e.title for e in v.load(with_reads=False, light=True).entries}
    if json_:
        out_json(res.to_json())
    else:
        # lazy: typer's start-up (help, completion) does not need it (measured +7.8 ms)
        from acpmem.core.render import count_entries

        head = (f"{len(res.outcomes)} cluster(s) among {count_entries(res.entries).replace(' entr', ' live entr')}"
                f", by {res.similarity}")
        if res.judge_calls:
            head += f" ({res.judge_calls} model call(s) judged the candidate pairs)"
        out(head + (f" (report only: {res.reason})." if res.reason else "."))
        for note in res.notes:
            out(f"note: {note}")
        for o in res.outcomes:
            c = o.cluster
            out(f"\n{c.kind}: {c.why}")
            for i in c.ids:
                out(f"  #{i} {titles.get(i, '')}")
            if o.status in ("written", "proposed"):
                verb = "merged into" if o.status == "written" else "proposed as"
                out(f"  → {verb} #{o.entry['id']} {o.entry['title']} (commit {(o.commit or '')[:12]})")
            elif o.status != "reported":
                out(f"  → {o.status}: {o.error}")
    failed = [o for o in res.outcomes if o.status == "failed"]
    if failed:
        return fail(f"{len(failed)} cluster(s) not merged: {failed[0].error}",
                    "run it again, or `acp memory consolidate --dry-run` to see the clusters", code="not_merged")
    return 0
