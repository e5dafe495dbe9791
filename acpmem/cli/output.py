"""What every command prints, and how every failure becomes an exit code — one place for both, shared by the typer
commands and the fast path (``acpmem.cli.fast``). Free of typer and rich: the per-turn commands import it.

Exit codes: 0 success; 1 a domain error, printed as one line ``Error: what happened — what to do next`` on stderr;
2 a usage error, in the same form; 130 interrupted. Nothing a user can cause prints a traceback: an unexpected
exception is one ``Error: internal error: …`` line (``ACPMEM_DEBUG=1`` shows the traceback).
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
from collections.abc import Callable

from acpmem.core.errors import AcpmemError, error_line


class OutputFailed(Exception):
    """Standard output refused what a command printed (a full disk, a closed descriptor, a pipe whose reader left)."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(cause.strerror or str(cause))
        self.cause = cause


class _Stdout:
    """Standard output as the commands see it: a write or flush that fails is ``OutputFailed``, so the one error
    edge (``guarded``) can tell the output's failure from the vault's."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise OutputFailed(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise OutputFailed(exc) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class _Closed:
    """What stands for standard output when the process was started with it closed (``>&-``)."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


def _escape(err: UnicodeError):
    """What the output's encoding cannot say (``PYTHONIOENCODING=ascii``) as ``\\uXXXX`` escapes: readable in text and
    the same string in JSON (a character past U+FFFF as its surrogate pair)."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    parts = []
    for ch in err.object[err.start:err.end]:
        o = ord(ch)
        if o > 0xFFFF:
            o -= 0x10000
            parts.append(f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}")
        else:
            parts.append(f"\\u{o:04x}")
    return "".join(parts), err.end


@contextlib.contextmanager
def standard_output():
    """Standard output for one command line: failures become ``OutputFailed`` (``guarded`` says them in one line) and
    characters the output's encoding lacks are escaped, never an internal error; restored afterwards."""
    import codecs

    codecs.register_error("acpmem-escape", _escape)
    saved = sys.stdout
    stream = saved if saved is not None else _Closed()
    if isinstance(stream, _Stdout):
        yield
        return
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None and getattr(stream, "errors", "strict") == "strict":
        with contextlib.suppress(Exception):
            reconfigure(errors="acpmem-escape")
    sys.stdout = _Stdout(stream)
    try:
        yield
    finally:
        if isinstance(sys.stdout, _Stdout):
            sys.stdout = saved


def standard_descriptors() -> None:
    """A process started with descriptor 0, 1 or 2 closed gets /dev/null there, before anything else is opened: else
    the next file opened (the index, an entry) would take that number, and what git or Python writes to "standard
    output" would land in it. Standard output itself stays closed to the commands (``standard_output``)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.open(os.devnull, os.O_RDWR)   # the lowest free number: this one


def _silence_stdout() -> None:
    """After the output failed: what is still buffered goes to /dev/null, so the interpreter's last flush cannot fail
    (and print a traceback) once we have said what happened."""
    stream = sys.stdout._stream if isinstance(sys.stdout, _Stdout) else sys.stdout
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, AttributeError, ValueError):
        pass


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
    except (BrokenPipeError, OutputFailed) as exc:
        _silence_stdout()
        cause = exc.cause if isinstance(exc, OutputFailed) else exc
        if isinstance(cause, BrokenPipeError):   # the reader went away (`| head`): nothing more to say
            return 1
        warn(error_line(f"could not write the output: {cause.strerror or cause}",
                        "check where standard output goes (a full disk, a closed descriptor); whatever the command "
                        "changed in the vault is done"))
        return 1
    except KeyboardInterrupt:
        warn("Interrupted.")
        return 130
    except Exception as exc:  # a bug: say so in one line, keep the traceback behind a switch
        if os.environ.get("ACPMEM_DEBUG"):
            raise
        said = reachable(exc)
        if said is not None:
            warn(said)
            return 1
        warn(error_line(f"internal error: {type(exc).__name__}: {exc}",
                        "please report it; set ACPMEM_DEBUG=1 to see the traceback"))
        return 1


def reachable(exc: BaseException) -> str | None:
    """The one line for a failure a user's situation causes, not a bug: the current folder was deleted, the disk is
    full, a file cannot be written. None for anything else."""
    if isinstance(exc, OSError):
        try:
            os.getcwd()
        except FileNotFoundError:
            return error_line("the current folder no longer exists (it was deleted or moved)",
                              "cd to an existing folder, or pass --vault PATH")
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            where = f" ({exc.filename})" if exc.filename else ""
            return error_line(f"the disk is full{where}", "free some space, then run the command again")
        if exc.errno == errno.EROFS:
            return error_line(f"{exc.filename or 'a file'} is on a read-only file system",
                              "work in a writable copy of the vault")
        return None
    text = str(exc)
    if type(exc).__name__ == "OperationalError" and ("disk is full" in text or "disk I/O error" in text):
        return error_line(f"the disk is full, or the vault's index cannot be written ({text})",
                          "free some space, then run the command again")
    return None
