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


def install(argv: list[str]) -> None:
    """Listen for progress in this process when a person watches a terminal and asked for no JSON."""
    from acpmem.infra import progress

    if "--json" in argv or os.environ.get("TERM") == "dumb" or not _tty(sys.stdout) or not _tty(sys.stderr):
        return
    from acpmem.cli.bars import Terminal

    progress.listen(Terminal())


def _tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False
