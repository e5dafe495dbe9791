"""The progress bars of a terminal (``acpmem.cli.progress`` decides whether there is one): every count of long work
in one rich ``Progress`` on standard error, each kept line (a request's result) printed above it, and the line of a
wait (``waiting for the model (N s)``) once it has lasted a few seconds. Transient: when the work is done the bars go
and the command's own output follows.
"""
from __future__ import annotations

import threading
import time


class Terminal:
    """Draws every task of the process in one rich ``Progress`` on standard error (created with the first task,
    stopped when the last one closes)."""

    def __init__(self) -> None:
        self._bars = None
        self._open = 0
        self._lock = threading.Lock()

    def _start(self):
        if self._bars is None:
            # lazy: rich is heavy, never imported at start-up
            from rich.console import Console
            from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn
            from rich.text import Text

            class Count(ProgressColumn):
                """``12/40 requests 0:03`` for a count; nothing for a wait (its line counts its seconds)."""

                def render(self, task):
                    if task.total is None:
                        return Text("")
                    s = int(task.elapsed or 0)
                    return Text(f"{int(task.completed)}/{int(task.total)} {task.fields.get('unit', '')} "
                                f"{s // 60}:{s % 60:02d}")

            # stdout is the command's output: never redirected into the bar's console
            self._bars = Progress(TextColumn("{task.description}"), BarColumn(), Count(),
                                  console=Console(stderr=True), transient=True, redirect_stdout=False,
                                  redirect_stderr=False)
            self._bars.start()
        self._open += 1
        return self._bars

    def _stop(self) -> None:
        self._open -= 1
        if self._open == 0 and self._bars is not None:
            self._bars.stop()
            self._bars = None

    def task(self, what: str, total: int, unit: str):
        with self._lock:
            bars = self._start()
            return _Bar(self, bars, bars.add_task(what, total=total, unit=unit), what)

    def waiting(self, what: str, after_s: float):
        return _Wait(self, what, after_s)


class _Bar:
    def __init__(self, owner: Terminal, bars, ident, what: str) -> None:
        self._owner, self._bars, self._id, self._what = owner, bars, ident, what
        self._closed = False

    def advance(self, n: int = 1, note: str | None = None) -> None:
        if note:
            self._bars.console.print(note, markup=False, highlight=False, soft_wrap=True)
        self._bars.advance(self._id, n)

    def describe(self, what: str) -> None:
        self._bars.update(self._id, description=f"{self._what}: {what}")

    def update(self, done: int) -> None:
        self._bars.update(self._id, completed=done)

    def close(self) -> None:
        with self._owner._lock:
            if self._closed:
                return
            self._closed = True
            if self._owner._open > 1:   # the others go on: this one's line goes
                self._bars.remove_task(self._id)
            self._owner._stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Wait:
    """``what (N s)``, from ``after_s`` seconds into the wait until it ends, counting the seconds."""

    def __init__(self, owner: Terminal, what: str, after_s: float) -> None:
        self._owner, self._what, self._after = owner, what, max(0.0, after_s)
        self._line = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        if after_s <= 0:
            self._show()
        else:
            self._timer = threading.Timer(after_s, self._show)
            self._timer.daemon = True
            self._timer.start()

    def _show(self) -> None:
        with self._lock:
            if self._done.is_set() or self._line is not None:
                return
            with self._owner._lock:
                bars = self._owner._start()
            self._started = time.monotonic() - self._after
            self._line = (bars, bars.add_task(f"{self._what} ({int(self._after)} s)", total=None, unit=""))
            threading.Thread(target=self._tick, daemon=True).start()

    def _describe(self) -> None:
        bars, ident = self._line
        bars.update(ident, description=f"{self._what} ({int(time.monotonic() - self._started)} s)")

    def _tick(self) -> None:
        while not self._done.wait(1.0):
            with self._lock:
                if self._line is not None and not self._done.is_set():
                    self._describe()

    def close(self) -> None:
        with self._lock:
            self._done.set()
            timer = getattr(self, "_timer", None)
            if timer is not None:
                timer.cancel()
            if self._line is None:
                return
            bars, ident = self._line
            with self._owner._lock:
                if self._owner._open > 1:
                    bars.remove_task(ident)
                self._owner._stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
