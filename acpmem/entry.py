"""Console-script entry points, with fast paths for the hot commands.

Four commands run on every turn or must return at once: ``list`` (above all ``--format prompt``, target 150 ms),
``hook claude-code``, ``recall`` (a tool call) and ``commit`` (target 250 ms). Importing typer alone costs ~100 ms on a small machine, so a
plain invocation of these whose options are all understood here is answered without typer, through the same
library functions the typer commands use; anything else (help, an unknown option, a parsing problem) goes to
typer, which gives the full behaviour. ``ACPMEM_NO_FASTPATH=1`` forces typer (tests compare both paths).
"""
from __future__ import annotations

import os
import sys

from acpmem.argv import scan

_FORMATS = ("table", "json", "prompt", "markdown")


def _parse_list(args: list[str]) -> dict | None:
    opts = scan(args, {"--format": "fmt", "-f": "fmt", "--session": "session", "--budget": "budget",
                        "--vault": "vault"},
                 {"--all": "include_all", "--refresh": "refresh", "--json": "json"},
                 {"fmt": "table", "session": None, "budget": None, "vault": None, "include_all": False,
                  "refresh": False, "json": False})
    if opts is None or opts["fmt"] not in _FORMATS:
        return None
    if opts["budget"] is not None:
        if not opts["budget"].isdigit():
            return None
        opts["budget"] = int(opts["budget"])
    if opts["json"]:
        opts["fmt"] = "json"
    if opts["fmt"] == "table" and sys.stdout.isatty():
        return None  # the rich table is typer's business
    return opts


def _parse_recall(args: list[str]) -> dict | None:
    opts = scan(args, {"--limit": "limit", "-n": "limit", "--type": "types", "-t": "types", "--session": "session",
                        "--vault": "vault"},
                 {"--all": "include_all", "--json": "json"},
                 {"query": None, "limit": None, "types": [], "include_all": False, "session": None, "vault": None,
                  "json": False}, positional="query", repeated=("types",))
    if opts is None or opts["query"] is None:
        return None
    if opts["limit"] is not None:
        if not opts["limit"].isdigit():
            return None
        opts["limit"] = int(opts["limit"])
    return opts


def _run(produce) -> int:
    from acpmem.errors import AcpmemError

    try:
        text = produce()
    except AcpmemError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return exc.exit_code
    try:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        return 1
    return 0


def _recall(vault_path: str | None, opts: dict) -> str:
    from acpmem.api import VaultReader
    from acpmem.listing import recall_output

    v = VaultReader.open(vault_path)
    try:
        return recall_output(v, opts["query"], limit=opts["limit"], types=opts["types"],
                             include_all=opts["include_all"], session=opts["session"], as_json=opts["json"])
    finally:
        v.close()


def _fast(args: list[str]) -> int | None:
    """Answer ``[--vault V] list …`` without typer; None when the full CLI is needed."""
    if os.environ.get("ACPMEM_NO_FASTPATH"):
        return None
    vault = None
    if args[:1] == ["--vault"] and len(args) >= 3:
        vault, args = args[1], args[2:]
    if args[:1] == ["commit"]:
        from acpmem.queue import fast_commit  # must return to the caller within 250 ms

        return fast_commit(args[1:], vault)
    if args[:1] == ["hook"]:
        from acpmem.hooks import fast_main  # the hook runs on every prompt: answer it without typer

        return fast_main(args, vault)
    if args[:1] == ["recall"]:
        ropts = _parse_recall(args[1:])
        return None if ropts is None else _run(lambda: _recall(ropts["vault"] or vault, ropts))
    if args[:1] != ["list"]:
        return None
    opts = _parse_list(args[1:])
    if opts is None:
        return None

    def produce() -> str:
        from acpmem.listing import list_text

        return list_text(opts["vault"] or vault, opts)

    return _run(produce)


def acpmem_main() -> None:
    code = _fast(sys.argv[1:])
    if code is None:
        from acpmem.cli import app, run

        code = run(app, "acpmem")
    sys.exit(code)


def acp_main() -> None:
    args = sys.argv[1:]
    code = _fast(args[1:]) if args[:1] == ["memory"] else None
    if code is None:
        from acpmem.cli import root_app, run

        code = run(root_app, "acp")
    sys.exit(code)
