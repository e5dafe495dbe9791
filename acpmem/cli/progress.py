"""Progress on a terminal: whether this process shows what the library reports (``acpmem.infra.progress``); the
drawing, with rich on standard error, is ``acpmem.cli.bars``.

``install`` listens only when standard output and standard error are both a terminal (``TERM`` not ``dumb``) and
the command line has no ``--json``: a hook, a model's tool call, piped or redirected output never see a bar. rich is
imported when the first piece of long work starts, not before, so a command that has none — every per-turn call —
pays one ``isatty`` and nothing else.
"""
from __future__ import annotations

import os
import sys

from acpmem.infra import progress


def install(argv: list[str]) -> None:
    """Listen for progress in this process when a person watches a terminal and asked for no JSON."""
    if "--json" in argv or os.environ.get("TERM") == "dumb" or not _tty(sys.stdout) or not _tty(sys.stderr):
        return
    # lazy: the frozen `list --format prompt --session` does not need it (measured +1.7 ms to its start-up)
    from acpmem.cli.bars import Terminal

    progress.listen(Terminal())


def _tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False
