"""The typer applications of the command line (``acp`` and its ``memory`` group, which ``acpmem`` runs directly),
the options shared by the commands, and how a command finds its vault.

The commands themselves are in ``commands_vault``, ``commands_read``, ``commands_write`` and
``commands_integrations``; each registers on ``app`` here, and ``acpmem.cli.main`` imports them all. A command
parses its arguments, makes one library call and renders the result; errors become exit codes in one place
(``acpmem.cli.output.guarded``, ``acpmem.cli.main.run_typer``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from acpmem.cli import writes

HELP = """Cross-session long-term memory for LLM agents: a git-versioned markdown vault, a resident index and recall.

Start with `acp memory init --example` and `acp memory list`. Every command has --help with an example."""

_SETTINGS = {"help_option_names": ["-h", "--help"]}
# rich_markup_mode=None: help texts are plain text, so "[type]" or "[surface]" print as written
app = typer.Typer(name="memory", help=HELP, no_args_is_help=True, add_completion=True, rich_markup_mode=None,
                  pretty_exceptions_enable=False, context_settings=_SETTINGS)
root_app = typer.Typer(name="acp", help="acp tools. `acp memory --help` for long-term memory.", no_args_is_help=True,
                       add_completion=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                       context_settings=_SETTINGS)
root_app.add_typer(app, name="memory")
hook_app = typer.Typer(name="hook", help="Answer agent-harness hook events (Claude Code).", no_args_is_help=True,
                       rich_markup_mode=None, add_completion=False, pretty_exceptions_enable=False,
                       context_settings=_SETTINGS)
app.add_typer(hook_app, name="hook")


def complete_ids(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of entry ids, from the catalogs of the project and user vaults (never fails: a completion
    prints nothing)."""
    try:
        # lazy: typer's start-up (help, completion) does not need it (measured +13 ms)
        from acpmem.vault.reader import VaultReader

        with VaultReader.open(vault_of(ctx, ctx.params.get("vault"))) as v:
            return sorted(e.id for lv in v.layers() for e in lv.load(with_reads=False, light=True).entries
                          if e.id.startswith(incomplete))
    except Exception:  # noqa: BLE001 - no vault, a broken one: nothing to offer
        return []


def complete_types(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of entry types: the vault's, else the defaults."""
    # lazy: typer's start-up (help, completion) does not need it (measured +2.9 ms)
    from acpmem.core.entry import DEFAULT_TYPES

    try:
        # lazy: typer's start-up (help, completion) does not need it (measured +13 ms)
        from acpmem.vault.reader import VaultReader

        with VaultReader.open(vault_of(ctx, ctx.params.get("vault"))) as v:
            types = v.settings.types
    except Exception:  # noqa: BLE001
        types = DEFAULT_TYPES
    return [t for t in types if t.startswith(incomplete)]


VaultOpt = Annotated[Optional[str], typer.Option("--vault", metavar="PATH", show_default=False,
                                                 help="The vault folder (default: $ACPMEM_VAULT, else the nearest "
                                                      ".acp-memory/ above the current folder).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output (stable, documented).")]
UserOpt = Annotated[bool, typer.Option("--user", help="The user vault (~/.acp-memory, or $ACPMEM_USER_VAULT): "
                                                     "your memory across projects.")]
IdArg = Annotated[str, typer.Argument(metavar="ID", help="An entry id or any unique prefix of it.",
                                      autocompletion=complete_ids)]


@app.callback()
def _group(ctx: typer.Context, vault: VaultOpt = None) -> None:
    ctx.obj = {"vault": vault}


def vault_of(ctx: typer.Context | None, vault: str | None) -> str | None:
    """The vault a command names: its own --vault, else the group's (``acp memory --vault V COMMAND``)."""
    if vault:
        return vault
    while ctx is not None:
        if isinstance(ctx.obj, dict) and ctx.obj.get("vault"):
            return ctx.obj["vault"]
        ctx = ctx.parent
    return None


def open_vault(ctx: typer.Context, vault: str | None):
    """The ``Vault`` for a command: its own --vault, else the group's --vault, else discovery."""
    return writes.open_vault(vault_of(ctx, vault))


def open_user(ctx: typer.Context, vault: str | None):
    """The user vault for a ``--user`` command: the one the project vault here reads, else the default one."""
    return writes.open_user(vault_of(ctx, vault))


def open_for_user(ctx: typer.Context, vault: str | None):
    """The vault a ``--user`` write starts from: the project vault here (its paths are kept out of the user vault),
    else — no project vault here — the user vault alone."""
    return writes.open_for_user(vault_of(ctx, vault))


def as_path(value: str | None) -> Path | None:
    return Path(value) if value else None


def params(scope: dict) -> dict:
    """A per-turn command's parameters as typer parsed them (its ``locals()`` on entry), for ``hot.call``: every
    parameter passes through, so the typer command and the fast path call the same function the same way."""
    return {k: v for k, v in scope.items() if k != "ctx"}
