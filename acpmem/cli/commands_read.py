"""The read commands of ``acp memory``: recall and surface."""
from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from acpmem.cli import hot
from acpmem.cli.app import JsonOpt, VaultOpt, app, complete_types, params, vault_of
from acpmem.core.limits import MAX_INT, MIN_INT


@app.command()
def recall(ctx: typer.Context,
           query: Annotated[str, typer.Argument(metavar="QUERY", help="Words to look for (any language; typos "
                                                                       "and word forms are tolerated).")],
           limit: Annotated[Optional[int], typer.Option("--limit", "-n", min=1, max=100, show_default=False,
                                                        help="At most this many entries "
                                                             "(default: [recall] limit, 5).")] = None,
           type_: Annotated[Optional[List[str]], typer.Option("--type", "-t", autocompletion=complete_types,
                                                              help="Only entries of this type (repeatable).")] = None,
           all_: Annotated[bool, typer.Option("--all", help="Include superseded entries.")] = False,
           session: Annotated[Optional[str], typer.Option(help="The host's session id: recalled entries are then "
                                                               "not surfaced again in it.")] = None,
           json_: JsonOpt = False, vault: VaultOpt = None) -> int:
    """Search the vault and print the matching entries in full, framed as data. Marks them read (no commit).

    Example: acp memory recall "job queue sqlite" --limit 3
    """
    return hot.call("recall", params(locals()), vault_of(ctx, None))


@app.command()
def surface(ctx: typer.Context,
            session: Annotated[str, typer.Option(help="The host's session id (required): what was surfaced in it "
                                                      "is not surfaced again, and its byte budget is kept.")],
            seed: Annotated[Optional[int], typer.Option(min=MIN_INT, max=MAX_INT, show_default=False,
                                                        help="Seed the jitter instead of the session id.")] = None,
            at: Annotated[Optional[str], typer.Option(help="Score as of this ISO time instead of now.")] = None,
            prompt: Annotated[Optional[str], typer.Option(
                help="The user's message: surface the entries it is about instead of the best-scored ones "
                     "(`-` reads it from standard input). Prints exactly what to add to the model's context, "
                     "nothing when nothing is new; off when [surface] prompt = false.")] = None,
            json_: JsonOpt = False, vault: VaultOpt = None) -> int:
    """Per-turn surfacing: the top entries by score not yet surfaced in this session, in full (each capped),
    within the session's byte budget ([surface] in acpmem.toml). Marks them read.

    With --prompt, the entries the user's message is about (recall on its words), as the Claude Code prompt hook
    does: for a host's per-prompt hook. Each entry once per session, within the same budgets.

    Example: acp memory surface --session "$SESSION_ID"

    Example: printf '%s' "$USER_MESSAGE" | acp memory surface --session "$SESSION_ID" --prompt -
    """
    return hot.call("surface", params(locals()), vault_of(ctx, None))
