"""What every command prints, and how every failure becomes an exit code — one place for both, shared by the typer
commands and the fast path (``acpmem.cli.fast``). Free of typer and rich: the per-turn commands import it.

Exit codes: 0 success; 1 a content error, printed as one line ``Error: what happened — what to do next`` on stderr;
2 a usage error, in the same form; 130 interrupted (the rule: ``acpmem.core.errors``, docs/json.md). With ``--json``
on the command line every failure is one JSON object on stderr instead, ``{"error": {"code", "message", "hint",
"exit"}}`` (``acpmem/schemas/error.json``), and so is every warning, ``{"warning": {"message"}}``, one per line.
Nothing a user can cause prints a traceback: an unexpected exception is one ``internal error`` (``ACPMEM_DEBUG=1``
shows the traceback).
"""
from __future__ import annotations

import codecs
import contextlib
import errno
import json
import os
import sys
from collections.abc import Callable

from acpmem.core.errors import AcpmemError, error_json, error_line

_JSON = [False]   # whether this command line asked for --json: its failures and warnings are then JSON (``json_errors``)


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


def wants_json(argv: list[str]) -> bool:
    """Whether a command line asks for JSON output: ``--json`` (or ``--format json``) before any ``--``."""
    for i, tok in enumerate(argv):
        if tok == "--":
            return False
        if tok == "--json" or tok == "--format=json" or tok in ("--format", "-f") and argv[i + 1:i + 2] == ["json"]:
            return True
    return False


@contextlib.contextmanager
def json_errors(on: bool):
    """While on, ``fail``, ``guarded`` and ``warn`` speak JSON on stderr (one object a line)."""
    saved = _JSON[0]
    _JSON[0] = on
    try:
        yield
    finally:
        _JSON[0] = saved


def warn(text: str) -> None:
    """A line on stderr. Under ``--json`` an ``Error: …`` or ``Warning: …`` line is said as a JSON object instead
    (an error line that reaches here has no code of its own: ``error``)."""
    if _JSON[0]:
        if text.startswith("Warning: "):
            text = json.dumps({"warning": {"message": " ".join(text[9:].split())}}, ensure_ascii=False)
        elif text.startswith("Error: "):
            message, _, hint = text[7:].partition(" — ")
            text = json.dumps(error_json("error", message, hint or None, 1), ensure_ascii=False)
    sys.stderr.write(text + "\n")


def fail(message: str, hint: str | None = None, *, code: str = "error", exit_code: int = 1) -> int:
    """Say a failure — one ``Error: …`` line, or under ``--json`` one JSON object — and return its exit code."""
    if _JSON[0]:
        sys.stderr.write(json.dumps(error_json(code, message, hint, exit_code), ensure_ascii=False) + "\n")
    else:
        sys.stderr.write(error_line(message, hint) + "\n")
    return exit_code


def fail_error(exc: AcpmemError) -> int:
    if _JSON[0]:
        sys.stderr.write(json.dumps(exc.to_json(), ensure_ascii=False) + "\n")
    else:
        sys.stderr.write(exc.line() + "\n")
    return exc.exit_code


def is_tty() -> bool:
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"


def emit_warnings(v) -> None:
    for w in getattr(v, "warnings", []):
        warn(f"Warning: {w}")


@contextlib.contextmanager
def using(v):
    """A command's vault for the block: closed when the block ends, however it ends; then, when it succeeded, what
    the vault noticed on the way said as warnings (``emit_warnings``)."""
    with v:
        yield v
    emit_warnings(v)


def guarded(work: Callable[[], int | None]) -> int:
    """Run a command; map what it raises to one line on stderr and an exit code."""
    try:
        code = work()
        sys.stdout.flush()
        return code or 0
    except AcpmemError as exc:
        return fail_error(exc)
    except (BrokenPipeError, OutputFailed) as exc:
        _silence_stdout()
        cause = exc.cause if isinstance(exc, OutputFailed) else exc
        if isinstance(cause, BrokenPipeError):   # the reader went away (`| head`): nothing more to say
            return 1
        return fail(f"could not write the output: {cause.strerror or cause}",
                    "check where standard output goes (a full disk, a closed descriptor); whatever the command "
                    "changed in the vault is done", code="output_failed")
    except KeyboardInterrupt:
        return interrupted()
    except Exception as exc:  # a bug: say so in one line, keep the traceback behind a switch
        if os.environ.get("ACPMEM_DEBUG"):
            raise
        said = reachable(exc)
        if said is not None:
            return fail(*said[:2], code=said[2])
        return fail(f"internal error: {type(exc).__name__}: {exc}",
                    "please report it; set ACPMEM_DEBUG=1 to see the traceback", code="internal")


def interrupted() -> int:
    """Ctrl-C: ``Interrupted.`` (under ``--json`` the error object, code ``interrupted``), exit 130."""
    if _JSON[0]:
        return fail("interrupted", "run the command again; what it finished before is kept", code="interrupted",
                    exit_code=130)
    sys.stderr.write("Interrupted.\n")
    return 130


def _in_the_way(exc: OSError) -> str | None:
    """For a folder that could not be made (``EEXIST`` or ``ENOTDIR``): the path on the way to it that is there and
    not a folder (a file, a link to nothing), or None when there is none (then it is not that)."""
    if exc.errno not in (errno.EEXIST, errno.ENOTDIR) or not isinstance(exc.filename, str):
        return None
    path = os.path.abspath(exc.filename)
    chain = [path]
    while os.path.dirname(chain[-1]) != chain[-1]:
        chain.append(os.path.dirname(chain[-1]))
    for part in reversed(chain if exc.errno == errno.ENOTDIR else chain[:1]):
        if os.path.lexists(part) and not os.path.isdir(part):
            return part
    return None


def reachable(exc: BaseException) -> tuple[str, str, str] | None:
    """(message, hint, code) for a failure a user's situation causes, not a bug: the current folder was deleted, the
    disk is full, a file cannot be written. None for anything else."""
    if isinstance(exc, OSError):
        try:
            os.getcwd()
        except FileNotFoundError:
            return ("the current folder no longer exists (it was deleted or moved)",
                    "cd to an existing folder, or pass --vault PATH", "no_folder")
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            where = f" ({exc.filename})" if exc.filename else ""
            return f"the disk is full{where}", "free some space, then run the command again", "disk_full"
        if exc.errno == errno.EROFS:
            return (f"{exc.filename or 'a file'} is on a read-only file system",
                    "work in a writable copy of the vault", "read_only")
        blocker = _in_the_way(exc)
        if blocker is not None:   # e.g. a file named .acpmem in the vault
            return (f"{blocker} is not a folder, and acpmem keeps one there",
                    "move the file in the way aside, then run the command again", "in_the_way")
        return None
    text = str(exc)
    if type(exc).__name__ == "OperationalError" and ("disk is full" in text or "disk I/O error" in text):
        return (f"the disk is full, or the vault's index cannot be written ({text})",
                "free some space, then run the command again", "disk_full")
    return None
