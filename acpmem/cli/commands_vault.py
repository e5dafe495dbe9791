"""The vault commands of ``acp memory``: init, list, show, score, edit, forget, log, doctor."""
from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from acpmem.cli import hot
from acpmem.cli.app import (IdArg, JsonOpt, UserOpt, VaultOpt, app, as_path, complete_ids, open_user, open_vault,
                            params, vault_of)
from acpmem.cli.output import fail, out, out_json, using
from acpmem.core.limits import MAX_BUDGET_TOKENS, MAX_INT, MAX_TOP_N, MIN_INT


# --------------------------------------------------------------------------------------------- init

@app.command()
def init(path: Annotated[Optional[str], typer.Argument(metavar="PATH", show_default=False,
                                                       help="Where to create the vault (default: ./.acp-memory).")]
         = None,
         example: Annotated[bool, typer.Option("--example", help="Seed ten realistic example entries.")] = False,
         user: Annotated[bool, typer.Option("--user", help="Create your user vault instead (default "
                                                           "~/.acp-memory, or $ACPMEM_USER_VAULT): memory that "
                                                           "follows you across projects.")] = False,
         json_: JsonOpt = False) -> int:
    """Create a vault: its own git repository with a first commit, from the vault template.

    Inside a git workspace the vault is added to the workspace's .git/info/exclude, never committed into it.
    With --user, the user vault: read beside every project's vault; your preferences go there.

    Example: acp memory init --example && acp memory list

    Example: acp memory init --user
    """
    return hot.call("init", params(locals()))


# --------------------------------------------------------------------------------------------- list

class ListFormat(str, Enum):
    table = "table"
    json = "json"
    prompt = "prompt"
    markdown = "markdown"


@app.command("list")
def list_(ctx: typer.Context,
          fmt: Annotated[ListFormat, typer.Option("--format", "-f", help="table | json | prompt | markdown")]
          = ListFormat.table,
          all_: Annotated[bool, typer.Option("--all", help="Include superseded entries.")] = False,
          session: Annotated[Optional[str], typer.Option(help="Session id: the prompt form is frozen per session "
                                                              "(same bytes every call).")] = None,
          refresh: Annotated[bool, typer.Option(help="Take a new snapshot of the session's prompt index.")] = False,
          budget: Annotated[Optional[int], typer.Option(min=1, max=MAX_BUDGET_TOKENS,
                                                        help="Token budget of the prompt form "
                                                        "(default: acpmem.toml [index] budget_tokens).")] = None,
          json_: JsonOpt = False, vault: VaultOpt = None,
          all_branches: Annotated[bool, typer.Option("--all-branches", help="Include the entries learned on "
                                                                            "branches whose work this checkout "
                                                                            "lacks (hidden otherwise).")]
          = False) -> int:
    """The resident index: one line per entry `#id [type] title (importance N, created, last_read)`.

    `--format prompt` is the text a host injects into the system prompt: framed as data, ordered by score, cut to
    the token budget, saying how many entries were left out.

    An entry learned on another project branch is left out until that branch's work is in the checkout; a line
    says how many (docs/branches.md). --all-branches lists them too.

    Example: acp memory list --format prompt --session "$SESSION_ID"
    """
    return hot.call("list", params(locals()), vault_of(ctx, None))


# --------------------------------------------------------------------------------------------- show

@app.command()
def show(ctx: typer.Context, entry_id: IdArg, json_: JsonOpt = False, vault: VaultOpt = None,
         source: Annotated[bool, typer.Option("--source", help="Print the turns the entry cites (and, for a "
                                                               "compression block, its summary and covered turns) "
                                                               "from the session's transcript, framed as data.")]
         = False,
         transcript: Annotated[Optional[str], typer.Option("--transcript", metavar="FILE", show_default=False,
                                                           help="With --source: read the turns from this file "
                                                                "instead of the transcript recorded for the "
                                                                "session.")] = None) -> int:
    """One entry in full, with its citations and its layer (project or user). Marks it read.

    The id of a proposal waiting for review (either layer) shows the proposal, says so, and how to accept it.

    With --source, the turns its citations name instead, read from the transcript recorded for the session (or
    --transcript); it says so when the transcript was not recorded here or is gone.

    Example: acp memory show k3f

    Example: acp memory show k3f --source
    """
    return hot.call("show", params(locals()), vault_of(ctx, None))


# --------------------------------------------------------------------------------------------- score

@app.command()
def score(ctx: typer.Context,
          explain: Annotated[bool, typer.Option("--explain", help="Show every component of the score.")] = False,
          seed: Annotated[Optional[int], typer.Option(min=MIN_INT, max=MAX_INT, show_default=False,
                                                      help="Seed the jitter (reproducible).")] = None,
          at: Annotated[Optional[str], typer.Option(help="Score as of this ISO time instead of now.")] = None,
          session: Annotated[Optional[str], typer.Option(help="Jitter stable within this session id.")] = None,
          top: Annotated[Optional[int], typer.Option("--top", "-n", min=0, max=MAX_TOP_N,
                                                     help="How many are selected (default: [score] top_n, 5).")]
          = None,
          json_: JsonOpt = False, vault: VaultOpt = None) -> int:
    """The selection table: importance + min(days_since_last_read / 30, 5) + uniform(0, 0.5).

    Without --seed the jitter is stable within one --session and differs between sessions.

    Example: acp memory score --explain --seed 7 --at 2026-12-01T00:00:00Z
    """
    return hot.call("score", params(locals()), vault_of(ctx, None))


# --------------------------------------------------------------------------------------------- edit / forget / log

@app.command()
def edit(ctx: typer.Context, entry_id: IdArg,
         from_file: Annotated[Optional[str], typer.Option("--from", metavar="FILE", show_default=False,
                                                          help="Take the new text from this file instead of "
                                                               "opening $EDITOR.")] = None,
         message: Annotated[Optional[str], typer.Option("--message", "-m", help="Why (goes into the commit).")]
         = None,
         user: UserOpt = False, vault: VaultOpt = None) -> None:
    """Correct an entry by hand: opens $VISUAL, else $EDITOR, else vi; validates; commits the correction (kind
    `edit` in `acp memory log`).

    An invalid edit is refused with the reason and nothing changes; your text is kept in a draft under
    .acpmem/edit/, re-opened on a terminal (you are asked) or by running the command again, or passed with --from.
    Text holding what looks like a secret is refused in every vault. The entry is found by id in the project vault
    or the user vault; --user looks in the user vault only. In the user vault, text holding a path of this project
    is refused (the user vault is read in every project).

    Example: EDITOR=nano acp memory edit k3f -m "the limit is 20/s now"

    Example: acp memory edit u-k3f --user --from fixed.md
    """
    # lazy: typer's start-up (help, completion) does not need it (measured +15 ms)
    from acpmem.read.layers import edit_layered

    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    with using(open_vault(ctx, vault)) as v:
        result = edit_layered(v, entry_id, user=user, from_file=as_path(from_file), message=message,
                              confirm=(lambda q: typer.confirm(q, default=True)) if interactive else None)
    out(result)


@app.command()
def forget(ctx: typer.Context, entry_id: IdArg,
           reason: Annotated[str, typer.Option("--reason", "-r", help="Why it should go (goes into the commit).")],
           json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """Remove an entry in a commit that says why. It stays recoverable from git history.

    The id of a proposal waiting for review (either layer) rejects the proposal with the reason, exactly as
    `acp memory review reject ID --reason …` does: a proposal is not in the memory yet.

    Example: acp memory forget k3f --reason "the queue moved to Postgres"
    """
    # lazy: typer's start-up (help, completion) does not need it (measured +46 ms)
    from acpmem.upkeep.review import forget_or_reject

    with using(open_vault(ctx, vault)) as v:
        lv, entry, sha, proposal = forget_or_reject(v, entry_id, reason)
    if json_:
        out_json({"forgotten": entry.id, "commit": sha, "layer": lv.layer,
                  **({"proposal": True, "decision": "reject"} if proposal else {})})
    elif proposal:
        out(f"Rejected proposal #{entry.id} {entry.title} ({lv.layer} layer, commit {sha[:12]}): it was waiting for "
            f"review, not in the memory — the same as `acp memory review reject {entry.id} --reason …`.")
    else:
        out(f"Forgot #{entry.id} {entry.title} (commit {sha[:12]}). Restore: git -C {lv.root} checkout "
            f"{sha[:12]}~1 -- {entry.path}")


@app.command()
def log(ctx: typer.Context,
        entry_id: Annotated[Optional[str], typer.Argument(metavar="ID", autocompletion=complete_ids,
                                                          help="An entry id or prefix; without it, the whole "
                                                               "vault.")] = None,
        limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=100_000, help="At most this many changes.")]
        = 50,
        user: UserOpt = False, json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """The history of one entry (in the project vault or the user vault, found by id) or of the vault (--user:
    the user vault's), with the kind of each change (fork-write, human-edit, edit, forget, supersede, …).

    The id of a proposal (waiting for review, accepted or rejected) shows its history too: the proposal commit,
    then the review decision.

    Example: acp memory log k3f
    """
    # lazy: typer's start-up (help, completion) does not need it (measured +15 ms)
    from acpmem.read.layers import log_layered

    v = open_user(ctx, vault) if user and not entry_id else open_vault(ctx, vault)
    items = log_layered(v, entry_id, limit=limit, user=user)
    if json_:
        out_json({"entry": entry_id, "changes": [i.to_json() for i in items]})
        return
    for i in items:
        out(f"{i.date[:19]}  {i.kind:<16} {i.commit}  {i.subject}")
    if not items:
        out("(no history)")


# --------------------------------------------------------------------------------------------- doctor

@app.command()
def doctor(ctx: typer.Context, fix: Annotated[bool, typer.Option("--fix", help="Repair what is safe to repair.")]
           = False,
           json_: JsonOpt = False, vault: VaultOpt = None) -> int:
    """Check every entry, the git state, locks, pending work and the index; --fix repairs what is safe.

    Exits 1 when a problem remains.

    Example: acp memory doctor --fix
    """
    return hot.call("doctor", params(locals()), vault_of(ctx, None))


# --------------------------------------------------------------------------------------------- embed

@app.command()
def embed(ctx: typer.Context, json_: JsonOpt = False, vault: VaultOpt = None) -> int:
    """Run the embedding pass now, in this process: embed every entry text that has no vector of [embeddings]
    model (all of them after a new model, document_prefix or dimensions), then prune the vectors no entry needs.

    The background pass does the same after writes and recalls; this one is for a person who wants it done now,
    and on a terminal it counts the texts. Exits 1 when the endpoint failed (what is embedded is kept).

    Example: acp memory embed
    """
    # lazy: typer's start-up (help, completion) does not need it (measured +53 ms)
    from acpmem.read.embedding import embed_now

    with using(open_vault(ctx, vault)) as v:
        result = embed_now(v)
    if json_:
        out_json(result)
    else:
        out(f"Embedded {result['embedded']} text(s); {result['missing']} missing, {result['pruned']} vector(s) "
            "pruned.")
    if result["error"]:
        return fail(f"the embedding pass stopped: {result['error']}",
                    "check [embeddings] base_url and model; `acp memory embed` again embeds what is missing",
                    code="embedding_failed")
    return 0
