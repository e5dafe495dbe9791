"""The integration commands of ``acp memory``: ``serve`` (MCP over stdio), ``hook claude-code``, ``sync`` and
``trust``.

Each is parse → one library call (``integrations.mcp_server.serve``, ``integrations.claude_code``,
``vault.sync.sync``) → render.
"""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from acpmem.cli import hot
from acpmem.cli.app import JsonOpt, UserOpt, VaultOpt, app, hook_app, open_user, open_vault, params, vault_of
from acpmem.cli.output import out, out_json


@app.command()
def serve(ctx: typer.Context,
          session: Annotated[Optional[str], typer.Option(help="Session id for the commits' citations and the frozen "
                                                              "index (default: $ACPMEM_SESSION, else "
                                                              "$CLAUDE_CODE_SESSION_ID, else one generated per "
                                                              "server process).", show_default=False)] = None,
          transcript: Annotated[Optional[str], typer.Option(metavar="FILE", show_default=False,
                                                            help="The conversation file the fork distils from "
                                                                 "(OpenAI/Anthropic JSON, JSONL, Claude Code JSONL).")]
          = None,
          vault: VaultOpt = None) -> None:
    """MCP server over stdio: memory_commit and memory_recall as tools, the index as the resource memory://index,
    and an entry's cited turns as memory://entry/{id}/source (what `show ID --source` prints).

    Only the main conversation's tools, never memory_write (only the fork writes). A tool call takes only the
    arguments its schema lists (anything else is refused).

    A harness that knows the session may pass it in the request's _meta: acpmem/session, acpmem/seq and
    acpmem/transcript. Otherwise: the session is --session, else $ACPMEM_SESSION, else $CLAUDE_CODE_SESSION_ID
    (set by Claude Code), else one per process; the transcript is --transcript, else the one the Claude Code
    SessionStart hook recorded for that session; seq is the transcript's last message, else a count of this
    server's commits.

    Example: claude mcp add acpmem -- acp memory serve
    """
    return hot.call("serve", params(locals()), vault_of(ctx, None))


@hook_app.command("claude-code")
def claude_code(ctx: typer.Context, vault: VaultOpt = None) -> int:
    """Read one Claude Code hook event (JSON on stdin) and answer in Claude Code's hook format.

    SessionStart → the resident index (frozen for that session_id) as additional context; UserPromptSubmit →
    per-turn surfacing when `[surface] enabled = true` in acpmem.toml; other events → nothing. The vault is found
    from the event's cwd unless --vault or $ACPMEM_VAULT names it; no vault → no output, exit 0. A problem →
    one line on stderr and exit 1, which Claude Code shows without blocking the session.

    Example (.claude/settings.json): {"hooks": {"SessionStart": [{"hooks": [{"type": "command",
    "command": "acp memory hook claude-code"}]}]}}
    """
    return hot.call("hook claude-code", params(locals()), vault_of(ctx, None))


@app.command()
def sync(ctx: typer.Context,
         remote: Annotated[Optional[str], typer.Option("--remote", "-r", show_default=False,
                                                       help="The git remote (default: acpmem.toml [git] remote, "
                                                            "\"origin\").")] = None,
         user: UserOpt = False, json_: JsonOpt = False, vault: VaultOpt = None) -> int:
    """Exchange the vault with a git remote: commit what is pending, fetch, put this clone's commits on top of
    the remote's (MEMORY.md regenerated in them), push. --user syncs your user vault instead (between your
    machines).

    Reads and different entries written on two clones never conflict, and an exchange adds no commit of its own.
    When other clones push meanwhile, sync fetches and tries again, waiting a little longer each time, for at most
    [git] sync_seconds (default 120). When both sides changed the same entry, a merge stays in progress with both
    versions in the file (nothing is lost or pushed); edit it, then run `acp memory sync` again to finish. No
    remote yet: `git -C VAULT remote add origin URL`.

    Example: acp memory sync --remote origin

    Example: acp memory sync --user
    """
    return hot.call("sync", params(locals()), vault_of(ctx, None))


@app.command()
def trust(ctx: typer.Context,
          revoke: Annotated[bool, typer.Option("--revoke", help="Forget the trust: the vault's values are ignored "
                                                                "again.")] = False,
          user: UserOpt = False, vault: VaultOpt = None) -> None:
    """Adopt the settings in this vault's acpmem.toml that only you decide — endpoints (base_url), models,
    api_key_env, [layers] user_vault — as they are now, like `direnv allow`.

    A vault's acpmem.toml arrives from its remote, written by anyone who can push, so acpmem ignores those settings
    in it (with a warning) unless you adopt them here: their digest is recorded in your own config folder
    (~/.config/acpmem/trusted.json, or $XDG_CONFIG_HOME/acpmem). When the file changes any of them, they are
    ignored again until you run this again. Your own ~/.config/acpmem/config.toml and OPENAI_BASE_URL still win.
    Read the values this prints before you trust them: they say where your conversations, queries and the key in
    the variable api_key_env names are sent.

    Example: acp memory trust          (then `acp memory doctor` no longer lists them)

    Example: acp memory trust --revoke
    """
    # lazy: typer's start-up (help, completion) does not need them (measured +7.8 ms)
    from acpmem.core import trust as model
    from acpmem.vault.config import record_trust, vault_settings

    with (open_user(ctx, vault) if user else open_vault(ctx, vault)) as v:
        path = v.root / "acpmem.toml"
        found = {} if revoke else model.claims(vault_settings(v.root, v.state_dir))
        where = record_trust(v.root, found)
    if revoke:
        out(f"The person-only settings of {path} are ignored again (removed from {where}).")
    elif not found:
        out(f"Nothing to trust: {path} sets none of the settings only you decide.")
    else:
        out(f"Trusted for {v.root} (recorded in {where}), until the file changes them:")
        for key, value in found.items():
            out(f"  {key} = {value!r}")
        out("Your own config.toml and OPENAI_BASE_URL still win over them; `acp memory trust --revoke` undoes this.")


@app.command()
def schema(name: Annotated[Optional[str], typer.Argument(metavar="COMMAND", show_default=False,
                                                        help="A command (list, show, recall, …), or error / "
                                                             "warning for what --json prints on stderr.")] = None,
           json_: JsonOpt = False) -> None:
    """The JSON Schema (draft 2020-12) of a command's --json output, shipped with acpmem; without COMMAND, the
    list of schemas. `error` is the object every command prints on stderr when it fails under --json.

    Example: acp memory schema recall > recall.schema.json

    Example: acp memory schema error
    """
    # lazy: typer's start-up (help, completion) does not need it (measured +1.1 ms)
    from acpmem.cli.schemas import listing, schema_text

    if name is not None:
        out(schema_text(name).rstrip("\n"))
        return
    rows = listing()
    if json_:
        out_json({"schemas": rows})
        return
    for r in rows:
        out(f"{r['name']:<12} {r['title']}")
    out("`acp memory schema COMMAND` prints one.")
