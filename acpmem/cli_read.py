"""``acp memory recall`` and ``acp memory surface``: argument parsing and rendering over ``acpmem.retrieval``.

Registered on ``acpmem.cli.app`` when ``acpmem.cli`` is imported (``_register_more``).
"""
from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from acpmem.cli import JsonOpt, VaultOpt, app, open_vault, out, out_json


@app.command()
def recall(query: Annotated[str, typer.Argument(metavar="QUERY", help="Words to look for (any language; typos "
                                                                       "and word forms are tolerated).")],
           limit: Annotated[Optional[int], typer.Option("--limit", "-n", help="At most this many entries "
                                                                               "(default: [recall] limit, 5).",
                                                        show_default=False)] = None,
           type_: Annotated[Optional[List[str]], typer.Option("--type", "-t", help="Only entries of this type "
                                                                                    "(repeatable).")] = None,
           all_: Annotated[bool, typer.Option("--all", help="Include superseded entries.")] = False,
           session: Annotated[Optional[str], typer.Option(help="The host's session id: recalled entries are then "
                                                               "not surfaced again in it.")] = None,
           json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """Search the vault and print the matching entries in full, framed as data. Marks them read (no commit).

    Example: acp memory recall "job queue sqlite" --limit 3
    """
    from acpmem.listing import recall_output

    out(recall_output(open_vault(vault), query, limit=limit, types=type_, include_all=all_, session=session,
                      as_json=json_))


@app.command()
def surface(session: Annotated[str, typer.Option(help="The host's session id (required): what was surfaced in it "
                                                      "is not surfaced again, and its byte budget is kept.")],
            seed: Annotated[Optional[int], typer.Option(help="Seed the jitter instead of the session id.")] = None,
            at: Annotated[Optional[str], typer.Option(help="Score as of this ISO time instead of now.")] = None,
            json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """Per-turn surfacing: the top entries by score not yet surfaced in this session, in full (each capped),
    within the session's byte budget ([surface] in acpmem.toml). Marks them read.

    Example: acp memory surface --session "$SESSION_ID"
    """
    from acpmem import api
    from acpmem.retrieval import surface as do_surface, surface_text

    v = open_vault(vault)
    result = do_surface(v, session, at=api.entries_at(v, at) if at else None, seed=seed)
    if json_:
        out_json(result.to_json())
    else:
        text = surface_text(v, result)
        if text:
            out(text)
