"""What every command prints, and how every failure becomes an exit code — one place for both, shared by the typer
commands and the fast path (``acpmem.cli.fast``). Free of typer and rich: the per-turn commands import it.

Exit codes: 0 success; 1 a domain error, printed as one line ``Error: what happened — what to do next`` on stderr;
2 a usage error, in the same form; 130 interrupted. Nothing a user can cause prints a traceback: an unexpected
exception is one ``Error: internal error: …`` line (``ACPMEM_DEBUG=1`` shows the traceback).
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

from acpmem.core.errors import AcpmemError, error_line


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


def guarded(work: Callable[[], int | None]) -> int:
    """Run a command; map what it raises to one line on stderr and an exit code."""
    try:
        code = work()
        sys.stdout.flush()
        return code or 0
    except AcpmemError as exc:
        warn(exc.line())
        return exc.exit_code
    except BrokenPipeError:
        try:   # the reader went away: say nothing more, and let the interpreter's last flush find nowhere to fail
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
        warn(error_line(f"internal error: {type(exc).__name__}: {exc}",
                        "please report it; set ACPMEM_DEBUG=1 to see the traceback"))
        return 1
