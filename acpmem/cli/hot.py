"""The per-turn commands — ``list``, ``recall``, ``commit`` and ``hook claude-code`` — as plain functions (and, from
``acpmem.cli.reads``, ``show``, ``surface``, ``score`` and ``stats``).

Each typer command of these (``acpmem.cli.commands_*``) passes its parameters through to the function here
unchanged, and the fast path (``acpmem.cli.fast``) calls the same function with the same parameters parsed from a
table derived from the typer definitions; so both print the same bytes. Kept free of typer and rich (rich is imported
only for the table on a terminal): a hook pays for what is imported here on every turn.

Each function prints its output and returns the exit code, or raises ``AcpmemError``.
"""
from __future__ import annotations

import json
import os
import sys
from enum import Enum
from pathlib import Path

from acpmem.cli import reads, writes
from acpmem.cli.output import fail, is_tty, out, out_json, using, warn
from acpmem.core.errors import UsageError


PROBLEMS_SHOWN = 5   # invalid files named by list, one warning each; the rest counted (doctor lists them all)


def list_output(vault, fmt: str, *, include_all: bool = False, session: str | None = None,
                refresh: bool = False, budget: int | None = None, all_branches: bool = False) -> str:
    """The text of ``list`` in a non-terminal format: prompt, json, markdown or plain lines."""
    # lazy: the frozen `list --format prompt --session` does not need it (measured +9.7 ms to its start-up)
    from acpmem.core import render

    if fmt == "prompt":
        # lazy: the frozen `list --format prompt --session` does not need it (measured +17 ms to its start-up)
        from acpmem.read.resident import resident_index

        return resident_index(vault, session=session, refresh=refresh, budget_tokens=budget,
                              all_branches=all_branches)
    # lazy: the frozen `list --format prompt --session` does not need them (measured +24 ms to its start-up)
    from acpmem.read.layers import list_layered
    from acpmem.vault.projectgit import stale_map

    items, problems = list_layered(vault, include_superseded=include_all, light=fmt != "json")
    items, hidden = _on_branch(vault, items, all_branches)
    items = sorted(items, key=lambda i: (i.entry.created, i.entry.id), reverse=True)
    stale = stale_map(vault)
    two = len(vault.layers()) > 1   # then every text line names its layer too (JSON always does)
    for layer, p in problems[:PROBLEMS_SHOWN]:
        where = f"{layer} vault: " if two else ""
        warn(f"Warning: skipped {where}{render.problem_line(p.path, p.field, p.reason)} (see `acp memory doctor`)")
    if len(problems) > PROBLEMS_SHOWN:
        warn(f"Warning: … and {len(problems) - PROBLEMS_SHOWN} more invalid file(s): `acp memory doctor` lists "
             "them all")

    def marks(e):
        return stale[e.id] if e.id in stale else None

    if fmt == "json":
        return json.dumps({"entries": [render.entry_json(i.entry, {"layer": i.layer, "stale": s.to_json() if (
                                           s := marks(i.entry)) else None}) for i in items],
                           "problems": [{**p.to_json(), "layer": layer} for layer, p in problems],
                           "hidden": {"count": len(hidden.ids), "pending": hidden.pending,
                                      "reason": "learned on other branches whose work this checkout lacks"}},
                          ensure_ascii=False, indent=2) + "\n"
    if fmt == "markdown":
        return render.markdown_list([i.entry for i in items], [i.layer for i in items] if two else None)
    note = hidden.line() + "\n" if hidden.ids else ""
    return "\n".join(render.line(i.entry, i.layer if two else None, s.files if (s := marks(i.entry)) else None)
                     for i in items) + ("\n" if items else "(no entries)\n") + note


def _on_branch(vault, items, all_branches: bool):
    """The listed items this checkout sees, and the ``Hidden`` rest (``acpmem.vault.branches``)."""
    # lazy: the frozen `list --format prompt --session` does not need it (measured +15 ms to its start-up)
    from acpmem.vault.branches import NONE, hidden

    if all_branches:
        return items, NONE
    h = hidden(vault)
    if not h.ids:
        return items, h
    return [i for i in items if not (i.layer == vault.layer and i.entry.id in h.ids)], h


def _rich_table(v, include_all: bool, all_branches: bool = False) -> None:
    # lazy: the frozen `list --format prompt --session` does not need them (+26 ms); rich is heavy, never imported at start-up
    from rich.console import Console
    from rich.markup import escape

    from acpmem.core import render
    from rich.table import Table

    from acpmem.core.render import stale_flag as render_stale
    from acpmem.read.layers import list_layered
    from acpmem.vault.projectgit import stale_map

    items, problems = list_layered(v, include_superseded=include_all)
    items, hidden = _on_branch(v, items, all_branches)
    stale = stale_map(v)
    two = len(v.layers()) > 1
    t = Table(show_header=True, header_style="bold")
    for col in (("layer",) if two else ()) + ("id", "type", "title", "imp", "created", "last read"):
        t.add_column(col, overflow="fold" if col == "title" else None)
    for i in sorted(items, key=lambda i: (i.entry.created, i.entry.id), reverse=True):
        e = i.entry
        # escaped: rich reads "[superseded]", "[stale: …]" and a bracket in a title as markup and drops them;
        # terminal_safe: what a reader cannot see is shown as \uXXXX
        t.add_row(*((i.layer,) if two else ()), e.id, escape(render.terminal_safe(e.type)),
                  escape(render.terminal_safe(e.title) + (" [superseded]" if e.superseded else "")
                         + (render_stale(stale[e.id].files) if e.id in stale else "")),
                  str(e.importance), e.created[:10], (e.last_read or "never")[:10])
    c = Console()
    c.print(t)
    if hidden.ids:
        c.print(escape(hidden.line()))
    for layer, p in problems[:PROBLEMS_SHOWN]:
        c.print(f"[yellow]skipped {f'{layer} vault: ' if two else ''}"
                f"{escape(render.problem_line(p.path, p.field, p.reason))}[/yellow]")
    if len(problems) > PROBLEMS_SHOWN:
        c.print(f"[yellow]… and {len(problems) - PROBLEMS_SHOWN} more invalid file(s): `acp memory doctor` lists "
                "them all[/yellow]")


def list_cmd(*, fmt: str, all_: bool, session: str | None, refresh: bool, budget: int | None, json_: bool,
             vault: Path | None, all_branches: bool = False) -> int:
    if json_ and fmt not in ("table", "json"):
        raise UsageError(f"--json and --format {fmt} ask for two different outputs", "pass one of them")
    if json_:
        fmt = "json"
    if session is not None:   # an empty one (a shell variable that was not set) is refused, not taken for none
        # lazy: chosen at run time (the frozen path below imports the module anyway)
        from acpmem.vault.discovery import check_session

        check_session(session)
    if fmt == "prompt" and session and not refresh and not all_branches:
        # The frozen index of a running session (every turn): one file read, no vault machinery.
        # lazy: `list` does not need them (measured +0.1 ms to its start-up)
        from acpmem.vault.discovery import discover, state_location
        from acpmem.read.snapshot import frozen_index

        text = frozen_index(state_location(discover(vault))[0], session)
        if text is not None:
            out(text)
            return 0
    from acpmem.vault.reader import VaultReader  # reading only: the write machinery stays unimported

    with using(VaultReader.open(vault)) as v:
        if fmt == "table" and is_tty():
            _rich_table(v, all_, all_branches)
        else:
            out(list_output(v, fmt, include_all=all_, session=session, refresh=refresh, budget=budget,
                            all_branches=all_branches))
    return 0


def recall_cmd(*, query: str, limit: int | None, type_: list[str] | None, all_: bool, session: str | None,
               json_: bool, vault: Path | None) -> int:
    # lazy: the frozen `list --format prompt --session` does not need them (measured +49 ms to its start-up)
    from acpmem.read.layers import recall_layered
    from acpmem.vault.reader import VaultReader
    from acpmem.read.retrieval import recall_text

    if session is not None:   # an empty one (a shell variable that was not set) is refused, not taken for none
        from acpmem.vault.discovery import check_session   # lazy: with the imports above

        check_session(session)

    with using(VaultReader.open(vault)) as v:
        report: dict = {}
        hits = recall_layered(v, query, limit=limit if limit is not None else v.settings.recall.limit,
                               types=type_ or None, include_superseded=all_, session=session, report=report)
        # lazy: the frozen `list --format prompt --session` does not need it (measured +17 ms to its start-up)
        from acpmem.read.citecheck import served

        checks = served(v, [(h.entry, h.layer) for h in hits])
        if json_:
            out(json.dumps({"query": query, "hits": [{**h.to_json(), **(checks[h.entry.id].to_json()
                                                                          if h.entry.id in checks else {})}
                                                     for h in hits], **report}, ensure_ascii=False, indent=2))
        else:
            out(recall_text(v, hits, {i: c.attrs() for i, c in checks.items()}))
    if not json_:   # --json carries them in the document
        for said in (report.get("warning"), report.get("rerank", {}).get("warning")):
            if said:
                warn(f"Warning: {said}")
    return 0


def commit_cmd(*, type_: str | None, note: str | None, importance: int | None, session: str | None,
               seq: int | None, transcript: str | None, host_tools: str | None, wait: bool,
               extractor: str | None, json_: bool, vault: Path | None, block: str | None = None,
               branch: bool = False, global_: bool = False) -> int:
    missing = [f"--{k}" for k, v in (("type", type_), ("note", note), ("importance", importance),
                                      ("session", session), ("seq", seq)) if v is None]
    if missing:
        raise UsageError(f"missing {', '.join(missing)}", "give --type, --note, --importance, --session and --seq")
    if branch and global_:
        raise UsageError("--branch and --global ask for two different scopes", "pass one of them")
    if wait:   # the fork runs in this process and writes: the whole vault
        # lazy: chosen at run time
        from acpmem.vault.writer import Vault as Opened
    else:      # a durable request and a worker: the read side is enough, and cheap to import
        # lazy: chosen at run time
        from acpmem.vault.reader import VaultReader as Opened
    # lazy: the frozen `list --format prompt --session` does not need it (measured +42 ms to its start-up)
    from acpmem.write.submit import submit

    said: list[str] = []

    def recorded(request_id: str, text: str) -> None:
        """Before the inline extraction: the acknowledgement now (a Ctrl-C meanwhile keeps the request pending)."""
        said.append(request_id)
        if wait and not json_:
            out(text)
            sys.stdout.flush()

    with using(Opened.open(vault)) as v:
        ack = submit(v, type=type_, note=note, importance=importance, session=session, seq=seq,
                     transcript=_path(transcript), wait=wait, host_tools=_path(host_tools), extractor=extractor,
                     block=block, scope="branch" if branch else "global" if global_ else None,
                     on_recorded=recorded)
    if json_:
        out_json(ack.to_json())
    else:
        if not (wait and said):
            out(ack.text)
        if ack.outcome is not None:
            out(ack.outcome.summary())
    if ack.outcome is not None and not ack.outcome.ok:
        o = ack.outcome
        return fail(f"{o.request} was not extracted: {(o.error or {}).get('message') or o.status}",
                    f"{retry_line(ack.retry)}; `acp memory doctor` shows it", code="not_extracted")
    return 0


def retry_line(retry: dict | None) -> str:
    """What happens next to a request ``commit --wait`` could not extract (``Ack.retry``)."""
    if retry is None:
        return "it failed for good (`acp memory extract --failed` tries again once the cause is fixed)"
    when = f"at {retry['at']}" if retry.get("at") else "now"
    if retry.get("worker") in ("started", "running"):
        return f"it stays pending and the background worker retries it {when}"
    return f"it stays pending, due {when}, and no background worker could be started: run `acp memory extract " \
           "--pending` to retry it"


def hook_claude_code(*, vault: Path | None) -> int:
    # lazy: the frozen `list --format prompt --session` does not need it (measured +1.4 ms to its start-up)
    from acpmem.integrations.claude_code import MAX_EVENT_BYTES, claude_code

    a = claude_code(sys.stdin.buffer.read(MAX_EVENT_BYTES + 1), vault=vault)
    if a.stdout:
        sys.stdout.write(a.stdout)
        sys.stdout.flush()
    if a.stderr:
        sys.stderr.write(a.stderr)
    return a.exit_code


def serve_cmd(*, session: str | None, transcript: str | None, vault: Path | None) -> int:
    """``acp memory serve``: on the fast path too, so the MCP handshake is not kept waiting for typer (clients that
    start their servers asynchronously begin the session without the tools of one that answers late)."""
    # lazy: the frozen `list --format prompt --session` does not need them (measured +27 ms to its start-up)
    from acpmem.core.layout import ENV_VAULT
    from acpmem.integrations.mcp_server import serve
    from acpmem.vault.discovery import discover

    project = os.environ.get("CLAUDE_PROJECT_DIR")  # Claude Code names the project of the MCP servers it starts
    if not vault and not os.environ.get(ENV_VAULT) and project:
        root = discover(None, cwd=Path(project))
    else:
        root = discover(vault)
    serve(root, session=session, transcript=str(Path(transcript).resolve()) if transcript else None)
    return 0


IMPLS = {"list": list_cmd, "recall": recall_cmd, "commit": commit_cmd, "hook claude-code": hook_claude_code,
         "serve": serve_cmd, **reads.IMPLS, **writes.IMPLS}


def call(name: str, params: dict, group_vault: str | None = None) -> int:
    """Run the per-turn command ``name`` with the parameters its typer command received (or the fast path parsed
    from the same definition): choices become their values, repeated options a list (or None), and the command's
    own ``--vault`` falls back to the group's (``acp memory --vault V list``)."""
    kw = {}
    for key, value in params.items():
        if isinstance(value, Enum):   # a choice, as typer gives it
            value = value.value
        elif isinstance(value, (list, tuple)):
            value = list(value) or None
        kw[key] = value
    if "vault" in kw:   # `init` takes none: it creates one
        kw["vault"] = _path(kw["vault"] or group_vault)
    return IMPLS[name](**kw)


def _path(value) -> Path | None:
    return Path(value) if value else None
