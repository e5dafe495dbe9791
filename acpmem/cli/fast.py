"""The fast path of the per-turn commands: parse ``acp memory list|recall|commit|hook claude-code`` (the reads
``show|surface|score|stats``, ``serve``, ``tools|nudge`` at a session's start, and ``remember|init|doctor|sync``,
run by hand) without typer.

Importing typer (and the pydantic it brings) costs several times a whole ``list --format prompt``, which a hook runs on
every turn. So these commands are parsed here from ``acpmem.cli.fastspec``, a table generated from the typer
definitions themselves (``python -m acpmem.cli.fastgen``; a test fails when the table and the typer commands
disagree), and handed to the same functions the typer commands call (``acpmem.cli.hot.call``).

This parser answers only what it can parse exactly as typer would: known options, canonical values (digits for
numbers, an exact choice), at most the declared positional arguments. Anything else — help, an unknown or
abbreviated option, a value that needs typer's conversion rules, a missing value, shell completion — returns None,
and typer parses the command line, prints the same output or the usage error. A hypothesis test over generated
argument lists holds both paths to the same stdout, stderr and exit code.
"""
from __future__ import annotations

import os

from acpmem.cli.fastspec import COMMANDS, GROUP
from acpmem.cli.hot import call
from acpmem.cli.output import guarded

_NO = object()


def _convert(p: dict, raw: str):
    kind = p["type"]
    if kind == "str":
        return raw
    if kind == "int":
        if not raw.isascii() or not raw.isdigit() or len(raw) > 40:   # int() refuses more than 4,300 digits
            return _NO
        value = int(raw)
        if (p["min"] is not None and value < p["min"]) or (p["max"] is not None and value > p["max"]):
            return _NO
        return value
    if kind == "choice":
        return raw if raw in p["choices"] else _NO
    return _NO


def parse(spec: dict, tokens: list[str], *, stop_at_positional: bool = False):
    """(values by parameter name, the tokens not consumed) when ``tokens`` parse exactly; else None.

    With ``stop_at_positional`` (a group's own options) parsing stops at the first positional token, which names
    the command."""
    by_opt: dict[str, tuple[dict, bool]] = {}
    arguments = []
    values: dict = {}
    for p in spec["params"]:
        values[p["name"]] = p["default"]
        if p["kind"] == "argument":
            arguments.append(p)
            continue
        for o in p["opts"]:
            by_opt[o] = (p, True)
        for o in p["off"]:
            by_opt[o] = (p, False)
    positional: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--" or tok == "-":
            return None
        if tok[:1] != "-":
            if stop_at_positional:
                break
            positional.append(tok)
            i += 1
            continue
        i += 1
        name, eq, raw = tok.partition("=") if tok[:2] == "--" else (tok, "", "")
        hit = by_opt.get(name)
        if hit is None:
            return None
        p, on = hit
        seen.add(p["name"])
        if p["flag"]:
            if eq:
                return None
            values[p["name"]] = on
            continue
        if not eq:
            if i >= len(tokens) or tokens[i][:1] == "-" and tokens[i] != "-":
                return None     # no value, or one that looks like an option: typer decides (a lone `-` is a value)
            raw = tokens[i]
            i += 1
        value = _convert(p, raw)
        if value is _NO:
            return None
        if p["multiple"]:
            values[p["name"]] = [*(values[p["name"]] or ()), value]
        else:
            values[p["name"]] = value
    if len(positional) > len(arguments):
        return None
    for p, raw in zip(arguments, positional):
        value = _convert(p, raw)
        if value is _NO:
            return None
        values[p["name"]] = value
        seen.add(p["name"])
    if any(p["required"] and p["name"] not in seen for p in spec["params"]):
        return None
    return values, tokens[i:]


def try_fast(argv: list[str], prog: str) -> int | None:
    """Run ``argv`` on the fast path when it parses exactly; None when typer must handle it."""
    env = os.environ
    if env.get("ACPMEM_NO_FASTPATH") or env.get("_ACP_COMPLETE") or env.get("_ACPMEM_COMPLETE"):
        return None
    args = list(argv)
    if prog == "acp":
        if args[:1] != ["memory"]:
            return None
        args = args[1:]

    got = parse(GROUP, args, stop_at_positional=True)
    if got is None:
        return None
    group, rest = got
    for name, spec in COMMANDS.items():
        words = name.split()
        if rest[:len(words)] != words:
            continue
        parsed = parse(spec, rest[len(words):])
        if parsed is None or parsed[1]:
            return None

        return guarded(lambda: call(name, parsed[0], group["vault"]))
    return None
