"""The read commands a model or a hook may run every turn — ``show``, ``surface``, ``score`` and ``stats`` — and
those a host runs at every session's start — ``tools`` and ``nudge`` — as plain functions, beside ``list`` and
``recall`` in ``acpmem.cli.hot``.

Their typer commands (``acpmem.cli.commands_*``) pass their parameters through unchanged, and the fast path
(``acpmem.cli.fast``) calls the same functions with the same parameters, so both print the same bytes. Kept free of
typer, rich and the write machinery: each reads through ``VaultReader``; only ``show --source`` imports more.

Each function prints its output and returns the exit code, or raises ``AcpmemError``.
"""
from __future__ import annotations

from pathlib import Path

from acpmem.cli.output import emit_warnings, out, out_json, using, warn
from acpmem.core.errors import UsageError


def show_cmd(*, entry_id: str, json_: bool, vault: Path | None, source: bool, transcript: str | None) -> int:
    # lazy: the frozen `list --format prompt --session` does not need it (measured +15 ms to its start-up)
    from acpmem.vault.reader import VaultReader

    with VaultReader.open(vault) as v:
        if source:
            # lazy: the frozen `list --format prompt --session` does not need it (measured +4.7 ms to its start-up)
            from acpmem.read.sources import entry_source, source_text

            src = entry_source(v, entry_id, transcript=transcript)
            out_json(src.to_json()) if json_ else out(source_text(src).rstrip("\n"))
            return 0
        if transcript:
            raise UsageError("--transcript goes with --source", "add --source to read the cited turns")
        # lazy: the frozen `list --format prompt --session` does not need them (measured +19 ms to its start-up)
        from acpmem.core import render
        from acpmem.read.layers import show_or_proposal

        layer, e, proposal = show_or_proposal(v, entry_id)
        emit_warnings(v)
        accept = f"acp memory review accept {e.id}"
        # lazy: the frozen `list --format prompt --session` does not need it (measured +17 ms to its start-up)
        from acpmem.read.citecheck import served

        check = None if proposal else served(v, [(e, layer)]).get(e.id)   # staleness and the cited source
        if json_:
            out_json(render.entry_json(e, {"layer": layer, **({"proposal": True, "accept": accept} if proposal
                                                               else {}),
                                           **(check.to_json() if check is not None else {})}))
            return 0
        if proposal:
            out(f"Proposal awaiting review ({layer} layer): not in the memory until accepted — `{accept}`, or "
                f"`acp memory review reject {e.id} --reason …`.")
        out(render.show_text(e, v.clock(), layer if len(v.layers()) > 1 else None,
                             check.lines() if check is not None else None))
        return 0


def surface_cmd(*, session: str, seed: int | None, at: str | None, prompt: str | None, json_: bool,
                vault: Path | None) -> int:
    if prompt is not None:
        return _surface_prompt(session, prompt, seed, at, json_, vault)
    # lazy: the frozen `list --format prompt --session` does not need them (measured +48 ms to its start-up)
    from acpmem.vault.reader import VaultReader, parse_at
    from acpmem.read.retrieval import surface as do_surface, surface_text

    with VaultReader.open(vault) as v:
        result = do_surface(v, session, at=parse_at(at) if at is not None else None, seed=seed)
        emit_warnings(v)
        if json_:
            out_json(result.to_json())
        else:
            text = surface_text(v, result)
            if text:
                out(text)
        return 0


MAX_PROMPT_BYTES = 1 << 20   # of a prompt on stdin, the start is kept (recall reads its first 2,000 characters)


def prompt_text(prompt: str) -> str:
    """The user's message ``--prompt`` names: the text itself, or standard input for ``-``; refused when empty or
    not text."""
    from acpmem.core.limits import is_utf8   # lazy: with the other imports of --prompt

    if prompt == "-":
        import codecs
        import sys

        kept = sys.stdin.buffer.read(MAX_PROMPT_BYTES)
        while sys.stdin.buffer.read(1 << 16):   # the rest is read (the host's write must not fail) and dropped
            pass
        try:   # not final: a character cut at the limit is dropped, not an error
            prompt = codecs.getincrementaldecoder("utf-8")().decode(kept, final=len(kept) < MAX_PROMPT_BYTES)
        except UnicodeDecodeError:
            raise UsageError("the prompt on standard input is not UTF-8 text",
                             "pipe the user's message as UTF-8") from None
        where = "standard input holds no prompt"
    else:
        where = "the prompt is empty"
        if not is_utf8(prompt):
            raise UsageError("the prompt is not valid UTF-8 text", "pass the user's message as UTF-8, or pipe it "
                             "with --prompt -")
    if not prompt.strip():
        raise UsageError(where, "pass the user's message: --prompt TEXT, or --prompt - with the message on "
                         "standard input")
    return prompt.replace("\x00", " ")


def _surface_prompt(session: str, prompt: str, seed: int | None, at: str | None, json_: bool,
                    vault: Path | None) -> int:
    """``surface --prompt``: stdout holds exactly what a host adds to the model's context (nothing when nothing is
    new; the reason then goes to stderr), or the result as JSON."""
    if seed is not None or at is not None:
        raise UsageError("--seed and --at go with surfacing by score, not with --prompt",
                         "drop them: --prompt surfaces what the message is about")
    text = prompt_text(prompt)
    # lazy: the frozen `list --format prompt --session` does not need them (as for surface by score)
    from acpmem.vault.reader import VaultReader
    from acpmem.read.prompted import prompt_surfacing
    from acpmem.read.retrieval import surface_text

    with VaultReader.open(vault) as v:
        result = prompt_surfacing(v, session, text)
        emit_warnings(v)
        if json_:
            out_json(result.to_json())
        elif result.entries:
            out(surface_text(v, result))
        elif result.reason:
            warn(f"(nothing surfaced: {result.reason})")
        return 0


def score_cmd(*, explain: bool, seed: int | None, at: str | None, session: str | None, top: int | None,
              json_: bool, vault: Path | None) -> int:
    # lazy: the frozen `list --format prompt --session` does not need them (measured +18 ms to its start-up)
    from acpmem.vault import reader
    from acpmem.read.layers import scores_layered

    with reader.VaultReader.open(vault) as v:
        when = reader.parse_at(at) if at is not None else None
        layered = scores_layered(v, at=when, seed=seed, session=session, top_n=top)
        emit_warnings(v)
        if json_:
            out_json({"at": (when or v.clock()).isoformat(),
                      "rows": [{**r.to_json(), "layer": layer} for layer, r in layered]})
            return 0
        two = len(v.layers()) > 1
    lay = (lambda layer: f"{layer:<8}") if two else (lambda layer: "")
    lines = []
    if explain:
        lines.append(f"{'':2}{'layer   ' if two else ''}{'id':<10}{'importance':>11}{'days':>9}{'anti-rec':>10}"
                     f"{'jitter':>9}{'total':>9}  title")
        for layer, r in layered:
            mark = "* " if r.selected else "  "
            lines.append(f"{mark}{lay(layer)}{r.entry.id:<10}{r.importance:>11.2f}{r.days_since_read:>9.2f}"
                         f"{r.anti_recency:>10.4f}{r.jitter:>9.4f}{r.total:>9.4f}  {r.entry.title[:60]}")
    else:
        for layer, r in layered:
            lines.append(f"{'*' if r.selected else ' '} {r.total:7.3f}  {lay(layer)}#{r.entry.id}  "
                         f"{r.entry.title[:70]}")
    lines.append(f"(* = selected: top {sum(r.selected for _, r in layered)})")
    out("\n".join(lines))   # one write: a thousand rows are a thousand calls otherwise
    return 0


def stats_cmd(*, json_: bool, vault: Path | None) -> int:
    # lazy: the frozen `list --format prompt --session` does not need them (measured +27 ms to its start-up)
    from acpmem.vault.reader import VaultReader
    from acpmem.upkeep.stats import stats as collect

    with using(VaultReader.open(vault)) as v:
        s = collect(v)
    if json_:
        out_json(s)
        return 0
    out("\n".join(stats_lines(s)))
    return 0


def stats_lines(s: dict) -> list[str]:
    """The text of ``stats``, line by line, from what ``acpmem.upkeep.stats.stats`` collected."""
    lines = []
    add = lines.append
    e = s["entries"]
    add(f"Entries: {e['live']} live, {e['superseded']} superseded, {e['invalid']} invalid"
        + (" (project layer)" if s.get("user") else ""))
    for t, n in e["by_type"].items():
        add(f"  {t:<18}{n:>6}")
    if s.get("user"):
        u = s["user"]
        ue = u["entries"]
        add(f"User layer ({u['vault']}): {ue['live']} live, {ue['superseded']} superseded, {ue['invalid']} invalid; "
            f"entries {size_text(u['disk']['entries_bytes'])}, git {size_text(u['disk']['git_bytes'])}")
        for t, n in ue["by_type"].items():
            if n:
                add(f"  {t:<18}{n:>6}")
        ur = u["review"]
        add(f"  write policy: {ur['policy']}; {ur['proposals']} proposal(s) waiting for review")
    d = s["disk"]
    add(f"Disk: entries {size_text(d['entries_bytes'])}, git {size_text(d['git_bytes'])}, "
        f"local state {size_text(d['state_bytes'])}, index {size_text(d['index_bytes'])}")
    ss = s["sessions"]
    add(f"Sessions: {ss['count']} with local state ({size_text(ss['bytes'])})")
    for row in ss["budgets"]:
        add(f"  {row['session']:<30} surfaced {size_text(row['used_bytes'])} of {size_text(row['budget_bytes'])}")
    r = s["requests"]
    add(f"Requests: {r['pending']} pending, {r['failed']} failed, {r['done']} done")
    for item in r["items"]:
        err = f" — {item['last_error']}" if item.get("last_error") else ""
        nxt = f", next try {item['next_attempt']}" if item["status"] == "pending" and item.get("next_attempt") else ""
        err += f" — deferred: {item['deferred']}" if item.get("deferred") else ""
        add(f"  {item['id']} {item['status']:<8} attempts {item['attempts']}{nxt}  {item['note'][:50]}{err}")
    if r["next_retry"]:
        who = f"process {r['retry_waiter']} waits for it" if r["retry_waiter"] else \
            "no process waits for it: the next commit's worker, or `acp memory extract --pending`, runs it"
        add(f"  next scheduled retry {r['next_retry']} ({who})")
    b = s.get("budget")
    if b:
        state = f"over budget: {b['reason']}; {b['deferred_requests']} request(s) deferred until {b['frees_at']}" \
            if b["over"] else "within budget"
        add(f"Budget: {b['tokens_24h']} tokens in 24 h (max {b['max_tokens_per_day'] or 'none'}), {b['calls_1h']} "
            f"calls in the last hour (max {b['max_requests_per_hour'] or 'none'}); {state}")
    rv = s["review"]
    add(f"Write policy{' (project layer)' if s.get('user') else ''}: {rv['policy']}; {rv['proposals']} proposal(s) "
        "waiting for review")
    c = s["costs"]
    add(f"Extraction: {c['calls']} model calls ({c['failed']} failed), {c['prompt_tokens']} prompt tokens "
        f"({c['cache_hit_rate']:.0%} cached), {c['completion_tokens']} completion tokens, {c['latency_s']:.1f} s")
    if "embeddings" in s:
        m = s["embeddings"]
        ec = m["costs"]
        add(f"Embeddings: model {m['model']} at {m['base_url']}: {m['present']} entries with vectors, "
            f"{m['missing']} missing; {ec['calls']} call(s) ({ec['failed']} failed), {ec['texts']} texts, "
            f"{ec['prompt_tokens']} tokens, {ec['latency_s']:.1f} s")
    if "rerank" in s:
        rr = s["rerank"]
        add(f"Rerank: model {rr['model']} at {rr['base_url'] or '(no base_url)'} reorders recall's best "
            f"{rr['candidates']}")
    return lines


def size_text(n: float) -> str:
    """A byte count for a person: B, KB, MB or GB."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _vault_defaults(vault: Path | None):
    """The vault's types and language when a vault is found; the defaults otherwise (``tools`` and ``nudge`` need
    none). A third value: whether a user vault is read beside it (the fork's memory_write then has a layer field)."""
    # lazy: the frozen `list --format prompt --session` does not need them (measured +13 ms to its start-up)
    from acpmem.core.entry import DEFAULT_TYPES
    from acpmem.core.errors import VaultNotFound
    from acpmem.vault.reader import VaultReader

    try:
        v = VaultReader.open(vault)
    except VaultNotFound:
        return DEFAULT_TYPES, "en", False
    with v:
        return v.settings.types, v.settings.language, len(v.layers()) > 1


def tools_cmd(*, for_: str, fmt: str, lang: str | None, vault: Path | None) -> int:
    """``tools``: what a host registers at the start of every session (pi's and DSH's plugins run it then)."""
    # lazy: the frozen `list --format prompt --session` does not need it (measured +5.7 ms to its start-up)
    from acpmem.core.tools import tool_definitions

    types, vlang, layers = _vault_defaults(vault)
    out_json(tool_definitions(for_, fmt, lang or vlang, types, layers=layers))
    return 0


def nudge_cmd(*, lang: str | None, voice: str, vault: Path | None) -> int:
    """``nudge``: the memory guidance a host appends to its compression kernel's nudge."""
    # lazy: the frozen `list --format prompt --session` does not need it (measured +5.7 ms to its start-up)
    from acpmem.core.tools import nudge_text

    out(nudge_text(lang or _vault_defaults(vault)[1], voice))
    return 0


IMPLS = {"show": show_cmd, "surface": surface_cmd, "score": score_cmd, "stats": stats_cmd, "tools": tools_cmd,
         "nudge": nudge_cmd}
