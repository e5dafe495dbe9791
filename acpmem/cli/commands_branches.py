"""The commands about memory that follows the code's branches (``docs/branches.md``): ``diff BASE..BRANCH``, and
the part of ``review`` that decides the entries of a branch that died (``review --branches``, ``review keep ID
--global``, ``review drop ID``)."""
from __future__ import annotations

from typing import Annotated

import typer

from acpmem.cli.app import JsonOpt, VaultOpt, app, open_vault
from acpmem.cli.output import out, out_json, using
from acpmem.core.errors import UsageError


@app.command()
def diff(ctx: typer.Context,
         spec: Annotated[str, typer.Argument(metavar="BASE..BRANCH", help="The branch a merge goes into, two dots, "
                                                                         "the branch merged.")],
         json_: JsonOpt = False, vault: VaultOpt = None) -> int:
    """What a merge of BRANCH into BASE brings into BASE's memory: the entries learned on BRANCH (or branches merged
    into it) that BASE does not see yet. Put it in the pull request.

    Nothing needs doing at the merge itself: once BRANCH's commits are in BASE (a merge, a squash merge, a rebase),
    BASE sees them.

    Example: acp memory diff main..feature/importer

    Example: acp memory diff main..feature/importer --json
    """
    # lazy: typer's start-up (help, completion) does not need it (measured +42 ms)
    from acpmem.upkeep.branchreview import merge_diff

    with using(open_vault(ctx, vault)) as v:
        doc = merge_diff(v, spec)
    if json_:
        out_json(doc)
        return 0
    n = len(doc["entries"])
    if not n:
        out(f"A merge of {doc['branch']} into {doc['base']} brings no memory: {doc['base']} already sees every "
            f"entry {doc['branch']} sees.")
        return 0
    out(f"A merge of {doc['branch']} into {doc['base']} brings {n} {'entry' if n == 1 else 'entries'}:")
    for e in doc["entries"]:
        out(f"  #{e['id']} [{e['type']}] {e['title']} (learned on {e['branch']})")
    return 0


def branch_queue(ctx, vault, json_: bool) -> int:
    """``review --branches``: the entries no branch holds (their branch deleted or abandoned unmerged)."""
    # lazy: typer's start-up (help, completion) does not need it (measured +42 ms)
    from acpmem.upkeep.branchreview import orphans

    with using(open_vault(ctx, vault)) as v:
        left = orphans(v)
    if json_:
        out_json({"orphans": [s.to_json() for s in left]})
        return 0
    if not left:
        out("No entry waits for a decision: every branch-scoped entry's branch exists or is merged.")
        return 0
    for s in left:
        out(f"#{s.id} [{s.type}] {s.title}\n  {s.why}")
    n = len(left)
    out(f"\n{n} {'entry' if n == 1 else 'entries'} of dead branches: `acp memory review keep ID --global` keeps one "
        "for every checkout, `acp memory review drop ID` forgets it.")
    return 0


def branch_decide(ctx, vault, action: str, ids: list[str], reason: str | None, global_: bool, json_: bool) -> int:
    """``review keep ID… --global`` / ``review drop ID…``: one commit each."""
    # lazy: typer's start-up (help, completion) does not need it (measured +42 ms)
    from acpmem.upkeep.branchreview import keep_global

    if not ids:
        raise UsageError(f"name the entries to {action}", f"e.g. `acp memory review {action} k3f9q2`"
                         + (" --global" if action == "keep" else ""))
    if action == "keep" and not global_:
        raise UsageError("keep needs --global: the entry is then seen in every checkout",
                         "e.g. `acp memory review keep k3f9q2 --global`")
    with using(open_vault(ctx, vault)) as v:
        done = []
        for i in ids:
            if action == "keep":
                e, sha = keep_global(v, i)
            else:
                found = v.resolve(i)
                b = (found.extra or {}).get("branch") if found.extra else None
                why = (reason or "").strip() or (f"learned on branch {b}, which died unmerged" if b else
                                                 "dropped in review")
                e, sha = v.forget(i, why)
            done.append({"id": e.id, "decision": action, "commit": sha})
    if json_:
        out_json({"decisions": done})
    else:
        for d in done:
            what = f"Kept #{d['id']} for every branch" if d["decision"] == "keep" else f"Dropped #{d['id']}"
            out(f"{what} (commit {d['commit'][:12]}).")
    return 0
