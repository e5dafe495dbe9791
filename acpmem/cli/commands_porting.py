"""The commands that carry memory between acpmem and other harnesses: ``import`` and ``export``.

Each parses its arguments, makes one library call (``upkeep.importing``, ``upkeep.exporting``) and renders the
result.
"""
from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from acpmem.cli.app import JsonOpt, VaultOpt, app, open_vault
from acpmem.cli.output import out, out_json, using


class ImportFormat(str, Enum):
    claude_md = "claude-md"
    claude_memory = "claude-memory"
    agents_md = "agents-md"
    codex_memories = "codex-memories"
    gemini = "gemini"
    cline = "cline"
    cursor = "cursor"
    basic_memory = "basic-memory"
    claude_recall = "claude-recall"
    acp_handoff = "acp-handoff"
    markdown = "markdown"


class Harness(str, Enum):
    claude_code = "claude-code"
    codex = "codex"
    agents_md = "agents-md"
    gemini = "gemini"


_VERB = {"new": "new", "update": "update", "unchanged": "unchanged", "duplicate": "duplicate",
         "contradiction": "contradicts", "skipped": "skipped"}


@app.command(name="import")
def import_(ctx: typer.Context,
            source: Annotated[str, typer.Argument(metavar="SOURCE", help="A memory file or folder of another "
                                                  "harness: CLAUDE.md, a Claude Code memory folder, AGENTS.md, "
                                                  "Codex's memories/MEMORY.md, GEMINI.md, memory-bank/, "
                                                  ".cursor/rules/, .cursorrules, basic-memory notes, a "
                                                  "billion-claude-recall session folder, a `bili export` handoff, "
                                                  "or a project folder holding such files.")],
            format_: Annotated[Optional[ImportFormat], typer.Option("--format", show_default=False,
                                                                    help="The format, when it cannot be told from "
                                                                         "the path and the content.")] = None,
            dry_run: Annotated[bool, typer.Option("--dry-run", help="Only show the plan; write nothing.")] = False,
            supersede_contradicted: Annotated[bool, typer.Option(
                "--supersede-contradicted", help="Import a memory that contradicts an entry, superseding that "
                                                 "entry (default: left out, shown in the plan).")] = False,
            json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """Bring what another harness remembers into this vault, each entry with a pointer back to its source.

    First a plan: each memory found is new, a duplicate of #id (by meaning, the vault's own duplicate check), a
    contradiction of #id, unchanged (imported before), an update (its source changed since it was imported: the
    new text supersedes the old entry), or skipped — a code block or a command for running the project (an
    instruction, not a memory), too short, too large, or holding what looks like a secret. Then, unless
    --dry-run, everything in one commit: a killed import leaves nothing half-written. Each entry's source: names
    the harness, the file, the section and line, and the content hash. Running it again brings nothing twice, and
    an entry a person edited since it was imported is never replaced. docs/import-export.md has each format's
    rules for type and importance.

    Example: acp memory import CLAUDE.md --dry-run

    Example: acp memory import ~/.claude/projects/-home-me-myproject/memory

    Example: acp memory import AGENTS.md --json

    Example: acp memory import notes/decisions.md --format markdown
    """
    # lazy: typer's start-up (help, completion) does not need it (measured +124 ms)
    from acpmem.upkeep.importing import import_source

    with using(open_vault(ctx, vault)) as v:
        plan = import_source(v, source, format_.value if format_ else None, dry_run=dry_run,
                             supersede_contradicted=supersede_contradicted)
    if json_:
        out_json(plan.to_json(dry_run))
        return
    for item in plan.items:
        d = item.to_json()
        ref = f" #{item.id}" if item.id else ""
        match = f" of #{item.match}" if item.match and item.action in ("duplicate", "contradiction") else ""
        where = f"{d['file']}:{d['line']}" if d["line"] else d["file"]
        out(f"{_VERB[item.action]:<11}{ref}{match} {d['title'][:70]}  ({where}) — {item.why}")
    c = plan.counts()
    summary = ", ".join(f"{n} {a}" for a, n in c.items() if n)
    if dry_run:
        out(f"Plan for {', '.join(plan.files)} ({plan.format}): {summary or 'nothing found'}. Nothing was written "
            "(--dry-run).")
    elif plan.commit:
        out(f"Imported {c['new'] + c['update']} entries from {', '.join(plan.files)} ({plan.format}) in commit "
            f"{plan.commit[:12]}: {summary}.")
    else:
        out(f"Nothing to import from {', '.join(plan.files)} ({plan.format}): {summary or 'nothing found'}.")


@app.command()
def export(ctx: typer.Context,
           to: Annotated[Harness, typer.Option("--to", help="The harness: claude-code (CLAUDE.md), codex or "
                                                            "agents-md (AGENTS.md), gemini (GEMINI.md).")],
           file: Annotated[Optional[str], typer.Option("--file", metavar="FILE", show_default=False,
                                                       help="The file to write (default: the harness's file in "
                                                            "the project root).")] = None,
           ids: Annotated[Optional[list[str]], typer.Option("--id", "--ids", metavar="ID", show_default=False,
                                                            help="Export these entries: repeat it, or give ids "
                                                                 "separated by commas (default: the resident "
                                                                 "index's entries).")] = None,
           dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the block; write nothing.")] = False,
           json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """Write the vault's memory into a harness's own memory file, so a harness without acpmem reads it too.

    The block goes between <!-- acpmem:begin --> and <!-- acpmem:end --> (appended when the file has none);
    exporting again replaces only what is between the markers — the rest of the file is kept byte for byte — and
    an unchanged vault changes nothing. By default the block holds what the resident index holds (the live
    entries, most important first, within [index] budget_tokens); --id chooses entries. The file is written
    atomically. `acp memory import` skips the block, so an exported file is never imported back.

    Example: acp memory export --to claude-code

    Example: acp memory export --to codex --ids k3f9q2,m2x8aa

    Example: acp memory export --to gemini --file docs/GEMINI.md --dry-run
    """
    # lazy: typer's start-up (help, completion) does not need them (measured +20 ms)
    from acpmem.core.render import count_entries
    from acpmem.upkeep.exporting import export as run

    with using(open_vault(ctx, vault)) as v:
        chosen = [i.strip() for value in ids or () for i in value.split(",") if i.strip()] or None
        got = run(v, to.value, file=file, ids=chosen, dry_run=dry_run)
    if json_:
        out_json(got.to_json(dry_run))
    elif dry_run:
        out(got.block.rstrip("\n"))
        out(f"(--dry-run: {got.path} {'would change' if got.changed else 'is up to date'}; nothing was written.)")
    elif got.changed:
        out(f"Exported {count_entries(len(got.ids))} to {got.path} (between the acpmem markers).")
    else:
        out(f"{got.path} is up to date ({count_entries(len(got.ids))}); nothing changed.")
