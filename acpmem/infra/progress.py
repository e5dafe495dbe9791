"""Progress of long work, told to whoever listens: the library says what it is doing (``task``, ``waiting``) and the
command line, on a terminal, shows it (``acpmem.cli.progress``).

Nobody listens by default — a hook, a model's tool call, piped output, ``--json``, the MCP server — and then every
call here is a no-op that imports nothing and costs a function call. Listening is per process
(``listen``): the library never prints progress itself.
"""
from __future__ import annotations

import os

# the first index build of a vault this large shows its count; ``ACPMEM_PROGRESS_MIN_ENTRIES`` sets it (tests)
INDEX_MIN_ENTRIES = 2000
# a model that has not answered after this many seconds is said to be waited for; ``ACPMEM_WAIT_NOTICE_S`` sets it
WAIT_NOTICE_S = 3.0

_listener = None


class Task:
    """One piece of long work with a count (``total`` items of a ``unit``). The no-op one is what the library gets
    when nobody listens."""

    def advance(self, n: int = 1, note: str | None = None) -> None:
        """``n`` more items done; ``note``: a line worth keeping (a request's result), shown above the count."""

    def describe(self, what: str) -> None:
        """What is being done now (the stage of a sync, the request at hand)."""

    def update(self, done: int) -> None:
        """``done`` items done in all (a stage reached again: a sync that tries once more)."""

    def close(self) -> None:
        """Done (or given up): the count goes away."""

    def __enter__(self) -> "Task":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_NOTHING = Task()


def listen(listener) -> None:
    """Make ``listener`` the one that shows progress in this process (``None``: nobody). It has
    ``task(what, total, unit) -> Task`` and ``waiting(what, after_s) -> Task``."""
    global _listener
    _listener = listener


def listening() -> bool:
    return _listener is not None


def task(what: str, total: int, *, unit: str = "", at_least: int = 1) -> Task:
    """A count of ``total`` items for ``what``; a no-op when nobody listens or there are fewer than ``at_least``."""
    if _listener is None or total < at_least:
        return _NOTHING
    return _listener.task(what, total, unit)


def waiting(what: str) -> Task:
    """A wait of unknown length (a model's answer): shown, with the seconds waited, once it has lasted
    ``WAIT_NOTICE_S``."""
    if _listener is None:
        return _NOTHING
    return _listener.waiting(what, _number(os.environ.get("ACPMEM_WAIT_NOTICE_S"), WAIT_NOTICE_S))


def index_min_entries() -> int:
    """How many entries a first index build parses before it shows a count."""
    return int(_number(os.environ.get("ACPMEM_PROGRESS_MIN_ENTRIES"), INDEX_MIN_ENTRIES))


def _number(raw: str | None, default: float) -> float:
    try:
        value = float(raw) if raw else default
    except ValueError:
        return default
    return value if 0 <= value < 1e9 else default


__all__ = ["Task", "listen", "listening", "task", "waiting", "index_min_entries", "INDEX_MIN_ENTRIES",
           "WAIT_NOTICE_S"]
