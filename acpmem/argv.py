"""A small argv scanner for the typer-free fast paths (``acpmem.entry`` and ``queue.fast_commit``).

Anything it does not understand gives None, and typer handles the command with its full help and errors.
"""
from __future__ import annotations


def scan(args: list[str], values: dict[str, str], flags: dict[str, str], defaults: dict,
         positional: str | None = None, repeated: tuple[str, ...] = ()) -> dict | None:
    """``--opt V``/``--opt=V`` values (``values`` maps option to key; keys in ``repeated`` collect lists), flags,
    at most one positional; the keys of ``defaults`` start with their defaults."""
    opts = {k: (list(v) if isinstance(v, list) else v) for k, v in defaults.items()}
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, val = a.partition("=")
        if name in values:
            if not eq:
                if i + 1 >= len(args):
                    return None
                val = args[i + 1]
                i += 1
            key = values[name]
            if key in repeated:
                opts[key].append(val)
            else:
                opts[key] = val
        elif a in flags:
            opts[flags[a]] = True
        elif positional and not a.startswith("-") and opts.get(positional) is None:
            opts[positional] = a
        else:
            return None
        i += 1
    return opts
