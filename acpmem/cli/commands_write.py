"""The write-path commands of ``acp memory``: commit, extract, tools, nudge, blocks, stats.

Each command parses its arguments, makes one library call (``write.submit``, ``write.worker.process_now``,
``core.tools``, ``upkeep.stats``) and renders the result.
"""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from acpmem.cli import hot
from acpmem.cli.app import JsonOpt, VaultOpt, app, complete_types, open_vault, params, vault_of
from acpmem.cli.output import fail, out, out_json, using, warn
from acpmem.core.blocks import turns_text
from acpmem.core.errors import AcpmemError, UsageError
from acpmem.write.requests import MAX_SEQ, pending_dir


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
    dsh = "dsh"


class Lang(str, Enum):
    en = "en"
    zh = "zh"


TypeOpt = Annotated[Optional[str], typer.Option("--type", "-t", help="The kind of memory: one of the vault's types "
                                                "(decision, lesson, fact, user-preference, reference by default).",
                                                show_default=False, autocompletion=complete_types)]
NoteOpt = Annotated[Optional[str], typer.Option("--note", help="One line: what to remember and why it matters "
                                                "(the distiller's focus; never the memory itself).",
                                                show_default=False)]
ImportanceOpt = Annotated[Optional[int], typer.Option("--importance", "-i", min=1, max=10, show_default=False,
                                                      help="1-10: how much a future session loses without it.")]
SessionOpt = Annotated[Optional[str], typer.Option("--session", help="The host's session id.", show_default=False)]
SeqOpt = Annotated[Optional[int], typer.Option("--seq", min=0, max=MAX_SEQ, show_default=False,
                                               help="The host's event index of the memory_commit call; the fork sees "
                                                    "the transcript up to it.")]
TranscriptOpt = Annotated[Optional[str], typer.Option("--transcript", metavar="FILE", help="The conversation: OpenAI or Anthropic "
                                                       "chat JSON, JSONL, a Claude Code session file, a DSH session "
                                                       "log (session.jsonl.zstd) or a pi session log.",
                                                       show_default=False)]
HostToolsOpt = Annotated[Optional[str], typer.Option("--host-tools", metavar="FILE", help="A JSON file of the host's read-only tools "
                                                      "(OpenAI function tools), sent first and unchanged so the "
                                                      "provider's prompt cache hits.", show_default=False)]
BlockOpt = Annotated[Optional[str], typer.Option("--block", metavar="BLOCK", show_default=False,
                                                help="A compression block of the transcript (b12) to keep: the fork "
                                                     "distils it and the entry cites its turns.")]
ExtractorOpt = Annotated[Optional[Extractor], typer.Option("--extractor", help="auto (a model when one is configured, "
                                                           "else offline) | llm | offline. Default: [extraction] "
                                                           "extractor.", show_default=False)]


def _need(**values) -> None:
    missing = [f"--{k}" for k, v in values.items() if v is None]
    if missing:
        raise UsageError(f"missing {', '.join(missing)}", "give --type, --note, --importance, --session and --seq")


# --------------------------------------------------------------------------------------------- commit

@app.command()
def commit(ctx: typer.Context, type_: TypeOpt = None, note: NoteOpt = None, importance: ImportanceOpt = None,
           session: SessionOpt = None, seq: SeqOpt = None, transcript: TranscriptOpt = None,
           host_tools: HostToolsOpt = None,
           wait: Annotated[bool, typer.Option("--wait", help="Extract now, in this process, and say what was "
                                                             "written (default: in the background).")] = False,
           extractor: ExtractorOpt = None, json_: JsonOpt = False, vault: VaultOpt = None,
           block: BlockOpt = None,
           branch: Annotated[bool, typer.Option("--branch", help="Tie its entries to the project branch checked out "
                                                                 "now, whatever [branches] scoped says.")] = False,
           global_: Annotated[bool, typer.Option("--global", help="Never tie its entries to a branch: seen in every "
                                                                  "checkout.")] = False) -> int:
    """Record the main conversation's intent to remember something, and extract it in the background.

    Writes a durable pending request under .git/acpmem/pending/, starts the vault's background worker if none is
    running, and prints the acknowledgement for the model at once. It never takes memory content: the fork distils
    the entry from the conversation up to --seq. With --wait the extraction runs inline.

    Example: acp memory commit --type lesson --note "session.append must be re-entrant" --importance 7
    --session "$SESSION_ID" --seq 42 --transcript ~/.claude/projects/p/$SESSION_ID.jsonl

    Example: acp memory commit --type decision --note "auth token design" --importance 8 --session s1 --seq 21
    --transcript session.jsonl.zstd --block b2
    """
    return hot.call("commit", params(locals()), vault_of(ctx, None))


# --------------------------------------------------------------------------------------------- extract

@app.command()
def extract(ctx: typer.Context,
            requests: Annotated[Optional[list[str]], typer.Argument(metavar="REQUEST",
                                                                     help="Pending request ids (r-…).",
                                                                     show_default=False)] = None,
            pending: Annotated[bool, typer.Option("--pending", help="Every pending request, due or not (not those "
                                                                    "that failed for good).")] = False,
            failed: Annotated[bool, typer.Option("--failed", help="Every request that failed for good (after "
                                                                  "fixing the cause: `acp memory doctor` shows "
                                                                  "it).")] = False,
            transcript: TranscriptOpt = None, note: NoteOpt = None, type_: TypeOpt = None,
            importance: ImportanceOpt = None, session: SessionOpt = None, seq: SeqOpt = None,
            host_tools: HostToolsOpt = None,
            dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the exact request body (JSON) that would "
                                                                    "be sent; call no model, write nothing.")] = False,
            extractor: ExtractorOpt = None, json_: JsonOpt = False, vault: VaultOpt = None,
            block: BlockOpt = None) -> int:
    """Run the fork now: named pending requests, all of them (--pending), those that failed for good (--failed), or
    a new one from --note and a transcript.

    On a terminal it counts the requests and shows each result as it finishes; then the entries written, the commit,
    tokens and cache hits. A request that fails stays pending with the error recorded (exit 1).

    With --note, --block names a compression block of the transcript as the focus, checked before anything is
    queued, as `commit --block` does.

    Example: acp memory extract --pending

    Example: acp memory extract --transcript chat.json --note "we pin pnpm 9" --type decision --importance 6
    --session s1 --seq 12 --dry-run

    Example: acp memory extract --transcript session.jsonl.zstd --block b2 --note "auth token design" --type decision
    --importance 8 --session s1 --seq 21
    """
    # lazy: typer's start-up (help, completion) does not need it (measured +55 ms)
    from acpmem.write import extract as ex

    requests = list(requests or [])
    ex_name = extractor.value if extractor else None
    if note is not None:
        _need(type=type_, note=note, importance=importance, session=session, seq=seq)
        if requests or pending or failed:
            raise UsageError("give request ids, --pending / --failed, or --note with a transcript, not several",
                             "run extract once per kind")
    elif transcript is not None or type_ or importance is not None or session or seq is not None or block:
        raise UsageError("--transcript, --block, --type, --importance, --session and --seq go with --note",
                         "add --note, or name pending requests")
    elif not requests and not pending and not failed:
        raise UsageError("nothing to extract", "name request ids, pass --pending or --failed, or pass --note and "
                                               "--transcript; `acp memory stats` lists pending requests")
    with using(open_vault(ctx, vault)) as v:
        if note is not None:
            req = ex.new_request(v, type=type_, note=note, importance=importance, session=session, seq=seq,
                                 transcript=transcript, host_tools=host_tools, save=not dry_run, block=block)
            ids, reqs = [req.id], [req]
        else:
            ids, reqs, broken = ex.select(v, requests, pending=pending, failed=failed)

            for name in broken:
                warn(f"Warning: {pending_dir(v.state_dir) / name} is not a valid request file (left as it is)")
            unknown = [i for i in ids if i not in {r.id for r in reqs}]
            if dry_run and unknown:
                raise AcpmemError(f"no pending request {unknown[0]}", "`acp memory stats --json` lists them",
                                  code="not_found")
        if dry_run:
            out_json(ex.dry_run(v, reqs, ex_name))
            return 0
        if not ids:
            out("No pending requests.") if not json_ else out_json({"outcomes": [], "totals": ex.totals([])})
            return 0
        outcomes = ex.run(v, ids, extractor=ex_name)   # on a terminal, a count and each result (cli.progress)
        who = None
        if any(o.status == "retry" for o in outcomes):   # what stays pending is retried on its schedule
            # lazy: typer's start-up (help, completion) does not need it (measured +1.9 ms)
            from acpmem.write.worker import hand_over

            who = hand_over(v, retries=True)
    totals = ex.totals(outcomes)
    if json_:
        out_json({"outcomes": [o.to_json() for o in outcomes], "totals": totals})
    else:
        for o in outcomes:
            out(o.summary())
            for e in o.entries:
                out(f"  #{e['id']} [{e['type']}] {e['title']}  ({e['path']})")
        if totals["calls"]:
            out(f"Model calls: {totals['calls']}; tokens: {totals['prompt_tokens']} prompt "
                f"({totals['cached_tokens']} cached, {totals['cache_hit_rate']:.0%} cache hits), "
                f"{totals['completion_tokens']} completion.")
    bad = [o for o in outcomes if not o.ok]
    if bad:
        what = "; ".join(f"{o.request}: {(o.error or {}).get('message') or o.status}" for o in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        if all(o.status == "failed" for o in bad):
            later = "they failed for good (`acp memory extract --failed` tries again once the cause is fixed)"
        elif who in ("started", "running"):
            later = "those not failed for good stay pending and the background worker retries them on their schedule"
        else:
            later = "those not failed for good stay pending; `acp memory extract --pending` retries them"
        return fail(f"{len(bad)} of {len(outcomes)} request(s) not extracted: {what}{more}",
                    f"{later}; `acp memory doctor` shows them", code="not_extracted")
    return 0


# --------------------------------------------------------------------------------------------- tools / nudge

@app.command()
def tools(ctx: typer.Context,
          for_: Annotated[ForWhom, typer.Option("--for", help="main: memory_commit + memory_recall; fork: "
                                                              "memory_write.")] = ForWhom.main,
          fmt: Annotated[ToolFormat, typer.Option("--format", "-f", help="openai | anthropic | mcp | dsh (DSH "
                                                                          "defineTool parameter maps)")]
          = ToolFormat.openai,
          lang: Annotated[Optional[Lang], typer.Option("--lang", help="en | zh (default: the vault's language).",
                                                       show_default=False)] = None,
          vault: VaultOpt = None) -> int:
    """The memory tool definitions as JSON, for a harness to register.

    The type enum comes from the vault when one is found, else the default types.

    Example: acp memory tools --for main --format anthropic --lang zh
    """
    return hot.call("tools", params(locals()), vault_of(ctx, None))


class Voice(str, Enum):
    gentle = "gentle"
    emergency = "emergency"
    tier = "tier"


@app.command()
def nudge(ctx: typer.Context,
          lang: Annotated[Optional[Lang], typer.Option("--lang", help="en | zh (default: the vault's language).",
                                                       show_default=False)] = None,
          voice: Annotated[Voice, typer.Option("--voice", help="The compression kernel's nudge it follows: gentle | "
                                                               "emergency | tier.")] = Voice.gentle,
          vault: VaultOpt = None) -> int:
    """The memory guidance to append after a compression kernel's nudge text: (1) stable conclusions, or a
    compression block worth keeping, go to memory_commit (with block); (2) consumed content is compressed as before.

    Example: acp memory nudge --lang zh --voice tier
    """
    return hot.call("nudge", params(locals()), vault_of(ctx, None))


# --------------------------------------------------------------------------------------------- blocks

@app.command()
def blocks(transcript: Annotated[str, typer.Argument(metavar="FILE", show_default=False,
                                                     help="A DSH session log, a pi session log (its kernel state "
                                                          "beside it), or any transcript acpmem reads.")],
           json_: JsonOpt = False) -> None:
    """The compression blocks a session holds: id, tier, topic, the turns each covers, and whether a later block
    consumed it. What `commit --block` can name.

    Example: acp memory blocks ~/.dsh/sessions/p/session-3aa366c3/session.jsonl.zstd
    """
    # lazy: typer's start-up (help, completion) does not need it (measured +12 ms)
    from acpmem.hosts.transcripts import read_transcript

    t = read_transcript(Path(transcript), turns=())
    for w in t.warnings:
        warn(f"Warning: {w}")
    if json_:
        out_json({"transcript": t.source, "blocks": [b.to_json() for b in t.blocks]})
        return
    if not t.blocks:
        out(f"{t.source}: no compression blocks")
        return
    for b in t.blocks:
        extra = (f"  nested {', '.join(b.nested)}" if b.nested else "") + ("" if b.active else "  (consumed)")
        out(f"{b.label()}  turns {turns_text(b.seqs) or 'not recorded'}{extra}")
        first = b.summary.strip().splitlines()[0] if b.summary.strip() else ""
        out(f"    {first[:110] + ('…' if len(first) > 110 else '')}")


# --------------------------------------------------------------------------------------------- stats

@app.command()
def stats(ctx: typer.Context, json_: JsonOpt = False, vault: VaultOpt = None) -> int:
    """Counts and costs: entries by type, sizes on disk, the index, session budgets used, pending and failed
    requests, and what extraction has cost so far (tokens, cache hits, latency).

    Example: acp memory stats --json
    """
    return hot.call("stats", params(locals()), vault_of(ctx, None))
