"""The ``acp memory`` command line: parse arguments → one library call → render.

Errors are mapped to exit codes once, in ``run``: an ``AcpmemError`` prints one line ``Error: … — next step`` on
stderr and exits with its code (1, or 2 for usage errors); nothing a user can cause prints a traceback. Library
modules are imported inside the commands, so ``--help`` and the hook paths pay only for what they use. The
read/write/integration commands live in ``cli_read``, ``cli_write`` and ``cli_integrations`` and register on the
same app.
"""
from __future__ import annotations

import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from acpmem.errors import AcpmemError, UsageError

HELP = """Cross-session long-term memory for LLM agents: a git-versioned markdown vault, a resident index and recall.

Start with `acp memory init --example` and `acp memory list`. Every command has --help with an example."""

# rich_markup_mode=None: help texts are plain text, so "[type]" or "[surface]" print as written
app = typer.Typer(name="memory", help=HELP, no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  pretty_exceptions_enable=False, context_settings={"help_option_names": ["-h", "--help"]})
root_app = typer.Typer(name="acp", help="acp tools. `acp memory --help` for long-term memory.", no_args_is_help=True,
                       add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                       context_settings={"help_option_names": ["-h", "--help"]})
root_app.add_typer(app, name="memory")

VaultOpt = Annotated[Optional[Path], typer.Option("--vault", help="The vault folder (default: $ACPMEM_VAULT, "
                                                  "else the nearest .acp-memory/ above the current folder).",
                                                  show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output (stable, documented).")]


class State:
    vault: Optional[Path] = None


@app.callback()
def _main(vault: VaultOpt = None) -> None:
    State.vault = vault


def open_vault(vault: Optional[Path] = None):
    """The Vault for a command: its own --vault, else the group's --vault, else discovery."""
    from acpmem.vault import Vault

    return Vault.open(vault or State.vault)


def out(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


def out_json(data) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def warn(text: str) -> None:
    sys.stderr.write(text + "\n")


def is_tty() -> bool:
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"


def emit_warnings(v) -> None:
    for w in getattr(v, "warnings", []):
        warn(f"Warning: {w}")


# --------------------------------------------------------------------------------------------- init

@app.command()
def init(path: Annotated[Optional[Path], typer.Argument(help="Where to create the vault (default: ./.acp-memory).",
                                                        show_default=False)] = None,
         example: Annotated[bool, typer.Option("--example", help="Seed ten realistic example entries.")] = False,
         json_: JsonOpt = False) -> None:
    """Create a vault: its own git repository with a first commit, from the vault template.

    Inside a git workspace the vault is added to the workspace's .git/info/exclude, never committed into it.

    Example: acp memory init --example && acp memory list
    """
    from acpmem.vault import init_vault

    v = init_vault(path, example=example)
    n = len(v.load().entries)
    if json_:
        out_json({"vault": str(v.root), "entries": n})
        return
    out(f"Created the vault at {v.root} ({n} entries).")
    out("Next: `acp memory list` to see the index, `acp memory --help` for everything else.")


# --------------------------------------------------------------------------------------------- list

class ListFormat(str, Enum):
    table = "table"
    json = "json"
    prompt = "prompt"
    markdown = "markdown"


@app.command("list")
def list_(fmt: Annotated[ListFormat, typer.Option("--format", "-f", help="table | json | prompt | markdown")]
          = ListFormat.table,
          all_: Annotated[bool, typer.Option("--all", help="Include superseded entries.")] = False,
          session: Annotated[Optional[str], typer.Option(help="Session id: the prompt form is frozen per session "
                                                              "(same bytes every call).")] = None,
          refresh: Annotated[bool, typer.Option(help="Take a new snapshot of the session's prompt index.")] = False,
          budget: Annotated[Optional[int], typer.Option(help="Token budget of the prompt form "
                                                             "(default: acpmem.toml [index] budget_tokens).")] = None,
          json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """The resident index: one line per entry `#id [type] title (importance N, created, last_read)`.

    `--format prompt` is the text a host injects into the system prompt: framed as data, ordered by score, cut to
    the token budget, saying how many entries were left out.

    Example: acp memory list --format prompt --session "$SESSION_ID"
    """
    from acpmem.listing import list_output

    v = open_vault(vault)
    fmt_s = "json" if json_ else fmt.value
    if fmt_s == "table" and is_tty():
        _rich_table(v, all_)
        return
    out(list_output(v, fmt_s, include_all=all_, session=session, refresh=refresh, budget=budget))


def _rich_table(v, include_all: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from acpmem import api

    entries, problems = api.list_entries(v, include_superseded=include_all)
    t = Table(show_header=True, header_style="bold")
    for col in ("id", "type", "title", "imp", "created", "last read"):
        t.add_column(col, overflow="fold" if col == "title" else None)
    for e in sorted(entries, key=lambda e: (e.created, e.id), reverse=True):
        t.add_row(e.id, e.type, e.title + (" [superseded]" if e.superseded else ""), str(e.importance),
                  e.created[:10], (e.last_read or "never")[:10])
    c = Console()
    c.print(t)
    for p in problems:
        c.print(f"[yellow]skipped {p.path}: {p.reason}[/yellow]")


# --------------------------------------------------------------------------------------------- show

@app.command()
def show(entry_id: Annotated[str, typer.Argument(metavar="ID", help="An entry id or any unique prefix of it.")],
         json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """One entry in full, with its citations. Marks it read.

    Example: acp memory show k3f
    """
    from acpmem import api, render

    v = open_vault(vault)
    e = api.show(v, entry_id)
    if json_:
        out_json(render.entry_json(e))
    else:
        out(render.show_text(e, v.clock()))


# --------------------------------------------------------------------------------------------- score

@app.command()
def score(explain: Annotated[bool, typer.Option("--explain", help="Show every component of the score.")] = False,
          seed: Annotated[Optional[int], typer.Option(help="Seed the jitter (reproducible).")] = None,
          at: Annotated[Optional[str], typer.Option(help="Score as of this ISO time instead of now.")] = None,
          session: Annotated[Optional[str], typer.Option(help="Jitter stable within this session id.")] = None,
          top: Annotated[Optional[int], typer.Option("--top", "-n", help="How many are selected "
                                                                           "(default: [score] top_n, 5).")] = None,
          json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """The selection table: importance + min(days_since_last_read / 30, 5) + uniform(0, 0.5).

    Without --seed the jitter is stable within one --session and differs between sessions.

    Example: acp memory score --explain --seed 7 --at 2026-12-01T00:00:00Z
    """
    from acpmem import api

    v = open_vault(vault)
    when = api.entries_at(v, at) if at else None
    rows = api.scores(v, at=when, seed=seed, session=session, top_n=top)
    if json_:
        out_json({"at": (when or v.clock()).isoformat(), "rows": [r.to_json() for r in rows]})
        return
    if explain:
        out(f"{'':2}{'id':<10}{'importance':>11}{'days':>9}{'anti-rec':>10}{'jitter':>9}{'total':>9}  title")
        for r in rows:
            mark = "* " if r.selected else "  "
            out(f"{mark}{r.entry.id:<10}{r.importance:>11.2f}{r.days_since_read:>9.2f}{r.anti_recency:>10.4f}"
                f"{r.jitter:>9.4f}{r.total:>9.4f}  {r.entry.title[:60]}")
    else:
        for r in rows:
            out(f"{'*' if r.selected else ' '} {r.total:7.3f}  #{r.entry.id}  {r.entry.title[:70]}")
    out(f"(* = selected: top {sum(r.selected for r in rows)})")


# --------------------------------------------------------------------------------------------- edit / forget / log

@app.command()
def edit(entry_id: Annotated[str, typer.Argument(metavar="ID", help="An entry id or unique prefix.")],
         from_file: Annotated[Optional[Path], typer.Option("--from", help="Take the new text from this file instead "
                                                                          "of opening $EDITOR.")] = None,
         message: Annotated[Optional[str], typer.Option("--message", "-m", help="Why (goes into the commit).")]
         = None,
         vault: VaultOpt = None) -> None:
    """Correct an entry by hand: opens $VISUAL / $EDITOR, validates, commits the correction as a human edit.

    An invalid edit is refused with the reason; your text is kept and the editor can be re-opened.

    Example: EDITOR=nano acp memory edit k3f -m "the limit is 20/s now"
    """
    from acpmem.edit import edit_entry

    v = open_vault(vault)
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    result = edit_entry(v, entry_id, from_file=from_file, message=message,
                        confirm=(lambda q: typer.confirm(q, default=True)) if interactive else None)
    emit_warnings(v)
    out(result)


@app.command()
def forget(entry_id: Annotated[str, typer.Argument(metavar="ID", help="An entry id or unique prefix.")],
           reason: Annotated[str, typer.Option("--reason", "-r", help="Why it should go (goes into the commit).")],
           json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """Remove an entry in a commit that says why. It stays recoverable from git history.

    Example: acp memory forget k3f --reason "the queue moved to Postgres"
    """
    v = open_vault(vault)
    entry, sha = v.forget(entry_id, reason)
    emit_warnings(v)
    if json_:
        out_json({"forgotten": entry.id, "commit": sha})
    else:
        out(f"Forgot #{entry.id} {entry.title} (commit {sha[:12]}). Restore: git -C {v.root} checkout "
            f"{sha[:12]}~1 -- {entry.path}")


@app.command()
def log(entry_id: Annotated[Optional[str], typer.Argument(metavar="[ID]", help="An entry id or prefix; "
                                                                                "without it, the whole vault.")]
        = None,
        limit: Annotated[int, typer.Option("--limit", "-n", help="At most this many changes.")] = 50,
        json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """The history of one entry or of the vault, with the kind of each change
    (fork-write, human-edit, edit, forget, supersede, …).

    Example: acp memory log k3f
    """
    v = open_vault(vault)
    items = v.log(entry_id, limit=limit)
    if json_:
        out_json([i.to_json() for i in items])
        return
    for i in items:
        out(f"{i.date[:19]}  {i.kind:<16} {i.commit}  {i.subject}")
    if not items:
        out("(no history)")


# --------------------------------------------------------------------------------------------- doctor

@app.command()
def doctor(fix: Annotated[bool, typer.Option("--fix", help="Repair what is safe to repair.")] = False,
           json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """Check every entry, the git state, locks, pending work and the index; --fix repairs what is safe.

    Exits 1 when a problem remains.

    Example: acp memory doctor --fix
    """
    from acpmem import api

    v = open_vault(vault)
    rep = api.doctor(v, fix=fix)
    if json_:
        out_json({"ok": rep.ok, "findings": [f.to_json() for f in rep.findings]})
    else:
        for f in rep.findings:
            out(f"{f.level:<8} {f.what}" + (f"\n         → {f.fix}" if f.fix else ""))
    if not rep.ok:
        raise typer.Exit(1)


# --------------------------------------------------------------------------------------------- running

def _register_more() -> None:
    import importlib

    for name in ("acpmem.cli_read", "acpmem.cli_write", "acpmem.cli_integrations"):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


_register_more()


def run(typer_app: typer.Typer, prog: str, argv: list[str] | None = None) -> int:
    """Run a typer app with acpmem's error mapping. Returns the exit code."""
    try:
        typer_app(args=argv, prog_name=prog, standalone_mode=True)
        return 0
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except AcpmemError as exc:
        warn(f"Error: {exc}")
        return exc.exit_code
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 1
    except KeyboardInterrupt:
        warn("Interrupted.")
        return 130
    except Exception as exc:  # a bug: say so in one line, keep the traceback behind a switch
        if os.environ.get("ACPMEM_DEBUG"):
            raise
        warn(f"Error: internal error: {type(exc).__name__}: {exc} — please report it; "
             "set ACPMEM_DEBUG=1 to see the traceback")
        return 1


__all__ = ["app", "root_app", "run", "open_vault", "UsageError"]
