"""The write-path commands of ``acp memory``: commit, extract, tools, nudge, stats.

Each command parses its arguments, makes one library call (``queue.submit``, ``fork.process_requests``,
``tools.tool_definitions``, ``tools.nudge_text``, ``fork.stats``) and renders the result; errors are mapped to exit codes
by ``acpmem.cli.run``. Registered on ``acpmem.cli.app`` when ``acpmem.cli`` is imported.
"""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from acpmem.cli import JsonOpt, VaultOpt, app, emit_warnings, is_tty, open_vault, out, out_json, warn
from acpmem.errors import UsageError


class Extractor(str, Enum):
    auto = "auto"
    llm = "llm"
    offline = "offline"


class ForWhom(str, Enum):
    main = "main"
    fork = "fork"


class ToolFormat(str, Enum):
    openai = "openai"
    anthropic = "anthropic"
    mcp = "mcp"


class Lang(str, Enum):
    en = "en"
    zh = "zh"


TypeOpt = Annotated[Optional[str], typer.Option("--type", "-t", help="The kind of memory: one of the vault's types "
                                                "(decision, lesson, fact, user-preference, reference by default).",
                                                show_default=False)]
NoteOpt = Annotated[Optional[str], typer.Option("--note", help="One line: what to remember and why it matters "
                                                "(the distiller's focus; never the memory itself).",
                                                show_default=False)]
ImportanceOpt = Annotated[Optional[int], typer.Option("--importance", "-i", help="1-10: how much a future session "
                                                      "loses without it.", show_default=False)]
SessionOpt = Annotated[Optional[str], typer.Option("--session", help="The host's session id.", show_default=False)]
SeqOpt = Annotated[Optional[int], typer.Option("--seq", help="The host's event index of the memory_commit call; the "
                                               "fork sees the transcript up to it.", show_default=False)]
TranscriptOpt = Annotated[Optional[Path], typer.Option("--transcript", help="The conversation: OpenAI or Anthropic "
                                                       "chat JSON, JSONL, or a Claude Code session file.",
                                                       show_default=False)]
HostToolsOpt = Annotated[Optional[Path], typer.Option("--host-tools", help="A JSON file of the host's read-only tools "
                                                      "(OpenAI function tools), sent first and unchanged so the "
                                                      "provider's prompt cache hits.", show_default=False)]
ExtractorOpt = Annotated[Optional[Extractor], typer.Option("--extractor", help="auto (a model when one is configured, "
                                                           "else offline) | llm | offline. Default: [extraction] "
                                                           "extractor.", show_default=False)]


def _need(**values) -> None:
    missing = [f"--{k}" for k, v in values.items() if v is None]
    if missing:
        raise UsageError(f"missing {', '.join(missing)}", "give --type, --note, --importance, --session and --seq")


# --------------------------------------------------------------------------------------------- commit

@app.command()
def commit(type_: TypeOpt = None, note: NoteOpt = None, importance: ImportanceOpt = None, session: SessionOpt = None,
           seq: SeqOpt = None, transcript: TranscriptOpt = None, host_tools: HostToolsOpt = None,
           wait: Annotated[bool, typer.Option("--wait", help="Extract now, in this process, and say what was "
                                                             "written (default: in the background).")] = False,
           extractor: ExtractorOpt = None, json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """Record the main conversation's intent to remember something, and extract it in the background.

    Writes a durable pending request under .acpmem/pending/, starts the vault's background worker if none is
    running, and prints the acknowledgement for the model at once. It never takes memory content: the fork distils
    the entry from the conversation up to --seq. With --wait the extraction runs inline.

    Example: acp memory commit --type lesson --note "session.append must be re-entrant" --importance 7
    --session "$SESSION_ID" --seq 42 --transcript ~/.claude/projects/p/$SESSION_ID.jsonl
    """
    from acpmem.queue import submit

    _need(type=type_, note=note, importance=importance, session=session, seq=seq)
    v = open_vault(vault)
    try:
        ack = submit(v, type=type_, note=note, importance=importance, session=session, seq=seq,
                     transcript=transcript, wait=wait, host_tools=host_tools,
                     extractor=extractor.value if extractor else None)
    finally:
        v.close()
    emit_warnings(v)
    if json_:
        out_json(ack.to_json())
    else:
        out(ack.text)
        if ack.outcome is not None:
            out(ack.outcome.summary())
    if ack.outcome is not None and not ack.outcome.ok:
        raise typer.Exit(1)


# --------------------------------------------------------------------------------------------- extract

@app.command()
def extract(requests: Annotated[Optional[list[str]], typer.Argument(metavar="[REQUEST]...",
                                                                     help="Pending request ids (r-…).",
                                                                     show_default=False)] = None,
            pending: Annotated[bool, typer.Option("--pending", help="Every pending request, due or not (not those "
                                                                    "that failed for good: name them).")] = False,
            transcript: TranscriptOpt = None, note: NoteOpt = None, type_: TypeOpt = None,
            importance: ImportanceOpt = None, session: SessionOpt = None, seq: SeqOpt = None,
            host_tools: HostToolsOpt = None,
            dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the exact request body (JSON) that would "
                                                                    "be sent; call no model, write nothing.")] = False,
            extractor: ExtractorOpt = None, json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """Run the fork now: named pending requests, all of them (--pending), or a new one from --note and a transcript.

    Shows progress, the entries written, the commit, tokens and cache hits. A request that fails stays pending
    with the error recorded (exit 1).

    Example: acp memory extract --pending
    Example: acp memory extract --transcript chat.json --note "we pin pnpm 9" --type decision --importance 6
    --session s1 --seq 12 --dry-run
    """
    from acpmem import queue

    v = open_vault(vault)
    try:
        ad_hoc = note is not None
        if ad_hoc:
            _need(type=type_, note=note, importance=importance, session=session, seq=seq)
            if requests or pending:
                raise UsageError("give request ids, --pending, or --note with a transcript, not several",
                                 "run extract once per kind")
        elif transcript is not None or type_ or importance is not None or session or seq is not None:
            raise UsageError("--transcript, --type, --importance, --session and --seq go with --note",
                             "add --note, or name pending requests")
        if ad_hoc:
            v.ensure_state()
            req = queue.make_request(types=v.settings.types, type=type_, note=note, importance=importance,
                                     session=session, seq=seq, transcript=transcript, host_tools=host_tools,
                                     lang=v.settings.language, created=queue._utc(v.clock()),
                                     request_id=queue.new_request_id(v.rng))
            if not dry_run:
                queue.save_request(v.state_dir, req, new=True)
            ids, reqs = [req.id], [req]
        else:
            if not requests and not pending:
                raise UsageError("nothing to extract", "name request ids, pass --pending, or pass --note and "
                                                       "--transcript; `acp memory stats` lists pending requests")
            listed, broken = queue.list_requests(v.state_dir)
            for name in broken:
                warn(f"Warning: .acpmem/pending/{name} is not a valid request file (left as it is)")
            ids = list(requests or []) + [r.id for r in listed if pending and r.status == "pending"
                                          and r.id not in (requests or [])]
            reqs = [r for r in listed if r.id in ids]
            if dry_run:
                unknown = [i for i in ids if i not in {r.id for r in reqs}]
                if unknown:
                    raise UsageError(f"no pending request {unknown[0]}", "`acp memory stats --json` lists them")
        if dry_run:
            _dry_run(v, reqs, extractor)
            return
        if not ids:
            out("No pending requests.") if not json_ else out_json({"outcomes": [], "totals": _totals([])})
            return
        outcomes = _run(v, ids, extractor, show_progress=is_tty() and not json_)
    finally:
        v.close()
    emit_warnings(v)
    if json_:
        out_json({"outcomes": [o.to_json() for o in outcomes], "totals": _totals(outcomes)})
    else:
        for o in outcomes:
            out(o.summary())
            for e in o.entries:
                out(f"  #{e['id']} [{e['type']}] {e['title']}  ({e['path']})")
        t = _totals(outcomes)
        if t["calls"]:
            out(f"Model calls: {t['calls']}; tokens: {t['prompt_tokens']} prompt ({t['cached_tokens']} cached, "
                f"{t['cache_hit_rate']:.0%} cache hits), {t['completion_tokens']} completion.")
    if not all(o.ok for o in outcomes):
        raise typer.Exit(1)


def _run(v, ids: list[str], extractor, *, show_progress: bool):
    from acpmem.fork import process_requests

    ex = extractor.value if extractor else None
    if not show_progress:
        return process_requests(v, ids, extractor=ex, explicit=True)
    from rich.progress import Progress, SpinnerColumn, TextColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), transient=True) as bar:
        task = bar.add_task("waiting for the worker lock", total=len(ids))

        def progress(rid: str, what: str) -> None:
            bar.update(task, description=f"{rid}: {what}")

        outcomes = []
        for rid in ids:
            outcomes += process_requests(v, [rid], extractor=ex, explicit=True, progress=progress)
            bar.advance(task)
        return outcomes


def _totals(outcomes) -> dict:
    t = {"requests": len(outcomes), "written": sum(len(o.entries) for o in outcomes), "calls": 0,
         "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0}
    for o in outcomes:
        if o.usage:
            t["calls"] += 1
            for k in ("prompt_tokens", "cached_tokens", "completion_tokens"):
                t[k] += o.usage.get(k, 0)
    t["cache_hit_rate"] = round(t["cached_tokens"] / t["prompt_tokens"], 4) if t["prompt_tokens"] else 0.0
    return t


def _dry_run(v, reqs, extractor) -> None:
    from acpmem import fork
    from acpmem.llm import resolve_model_config

    ex = extractor.value if extractor else None
    if ex == "offline":
        from acpmem.offline import extract_offline

        shown = []
        for r in reqs:
            d = extract_offline(fork.conversation(r), r.note, max_bytes=v.settings.extraction.max_entry_bytes,
                                lang=v.settings.language)
            shown.append({"request": r.id, "extractor": "offline", "title": d.title, "body": d.body,
                          "seqs": list(d.seqs)})
        out_json(shown[0] if len(shown) == 1 else shown)
        return
    model = resolve_model_config(v.settings.extraction).model
    bodies = [fork.build_body(v, r, model) for r in reqs]
    out_json(bodies[0] if len(bodies) == 1 else [{"request": r.id, "body": b} for r, b in zip(reqs, bodies)])


# --------------------------------------------------------------------------------------------- tools / nudge

def _vault_defaults(vault):
    """The vault's types and language when a vault is found; the defaults otherwise (these commands need none)."""
    from acpmem.errors import VaultNotFound
    from acpmem.model import DEFAULT_TYPES

    try:
        v = open_vault(vault)
    except VaultNotFound:
        return DEFAULT_TYPES, "en"
    try:
        return v.settings.types, v.settings.language
    finally:
        v.close()


@app.command()
def tools(for_: Annotated[ForWhom, typer.Option("--for", help="main: memory_commit + memory_recall; fork: "
                                                              "memory_write.")] = ForWhom.main,
          fmt: Annotated[ToolFormat, typer.Option("--format", "-f", help="openai | anthropic | mcp")]
          = ToolFormat.openai,
          lang: Annotated[Optional[Lang], typer.Option("--lang", help="en | zh (default: the vault's language).",
                                                       show_default=False)] = None,
          vault: VaultOpt = None) -> None:
    """The memory tool definitions as JSON, for a harness to register (SPEC §5.3).

    The type enum comes from the vault when one is found, else the default types.

    Example: acp memory tools --for main --format anthropic --lang zh
    """
    from acpmem.tools import tool_definitions

    types, vlang = _vault_defaults(vault)
    out_json(tool_definitions(for_.value, fmt.value, lang.value if lang else vlang, types))


@app.command()
def nudge(lang: Annotated[Optional[Lang], typer.Option("--lang", help="en | zh (default: the vault's language).",
                                                       show_default=False)] = None,
          vault: VaultOpt = None) -> None:
    """The memory guidance a compression nudge appends: commit what lasts, then compress what is consumed.

    Example: acp memory nudge --lang zh
    """
    from acpmem.tools import nudge_text

    out(nudge_text(lang.value if lang else _vault_defaults(vault)[1]))


# --------------------------------------------------------------------------------------------- stats

@app.command()
def stats(json_: JsonOpt = False, vault: VaultOpt = None) -> None:
    """Counts and costs: entries by type, sizes on disk, the index, session budgets used, pending and failed
    requests, and what extraction has cost so far (tokens, cache hits, latency).

    Example: acp memory stats --json
    """
    from acpmem.fork import stats as collect

    v = open_vault(vault)
    try:
        s = collect(v)
    finally:
        v.close()
    if json_:
        out_json(s)
        return
    e = s["entries"]
    out(f"Entries: {e['live']} live, {e['superseded']} superseded, {e['invalid']} invalid")
    for t, n in e["by_type"].items():
        out(f"  {t:<18}{n:>6}")
    d = s["disk"]
    out(f"Disk: entries {_size(d['entries_bytes'])}, git {_size(d['git_bytes'])}, "
        f"local state {_size(d['state_bytes'])}, index {_size(d['index_bytes'])}")
    ss = s["sessions"]
    out(f"Sessions: {ss['count']} with local state ({_size(ss['bytes'])})")
    for row in ss["budgets"]:
        out(f"  {row['session']:<30} surfaced {_size(row['used_bytes'])} of {_size(row['budget_bytes'])}")
    r = s["requests"]
    out(f"Requests: {r['pending']} pending, {r['failed']} failed, {r['done']} done")
    for item in r["items"]:
        err = f" — {item['last_error']}" if item.get("last_error") else ""
        out(f"  {item['id']} {item['status']:<8} attempts {item['attempts']}  {item['note'][:50]}{err}")
    c = s["costs"]
    out(f"Extraction: {c['calls']} model calls ({c['failed']} failed), {c['prompt_tokens']} prompt tokens "
        f"({c['cache_hit_rate']:.0%} cached), {c['completion_tokens']} completion tokens, {c['latency_s']:.1f} s")


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
