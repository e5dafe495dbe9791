"""The exception family of acpmem.

Every error a user can cause is an ``AcpmemError``: it carries what happened and what to do next, and the
CLI prints it as one line ``Error: <message> — <hint>`` (with ``--json``: one JSON object, ``to_json``) with the
error's exit code. Nothing else in the package decides exit codes.

The rule for the two exit codes (docs/json.md): 2, a usage error (``UsageError``), when the command line cannot be
right whatever the vault holds — an unknown option, a value of the wrong form or out of its fixed range, options
that do not go together, an empty id or reason. 1 for everything else: a well-formed argument that this vault or
this content refuses (an id it does not hold, a type it does not define, text over its size limit or holding a
secret or a project path) and every failure of the vault, git, a model or a file. Each class has a stable ``code``
string that scripts can match on.
"""
from __future__ import annotations


class AcpmemError(Exception):
    """A domain error: one line for the user, with the next step."""

    exit_code = 1
    code = "error"

    def __init__(self, message: str, hint: str | None = None, *, code: str | None = None, **data: object) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.data = data
        if code is not None:   # a more precise code than the class's (``not_found`` for a request id)
            self.code = code

    def __str__(self) -> str:
        return f"{self.message} — {self.hint}" if self.hint else self.message

    def line(self) -> str:
        return error_line(self.message, self.hint)

    def to_json(self) -> dict:
        """The error as ``--json`` prints it on stderr: ``{"error": {"code", "message", "hint", "exit"}}``, plus
        ``details`` when the error names things (the ids an ambiguous prefix matches, the conflicted paths)."""
        return error_json(self.code, self.message, self.hint, self.exit_code, _plain(self.data))


def _plain(data: dict) -> dict:
    """The JSON-safe part of an error's data: text, numbers, flags, lists of them."""
    ok = (str, int, float, bool, type(None))
    return {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in data.items()
            if isinstance(v, ok) or isinstance(v, (list, tuple)) and all(isinstance(i, ok) for i in v)}


def error_json(code: str, message: str, hint: str | None, exit_code: int, details: dict | None = None) -> dict:
    """The one JSON form of every failure (``acpmem/schemas/error.json``): message and hint on one line each."""
    err: dict = {"code": code, "message": " ".join(str(message).split()),
                 "hint": " ".join(str(hint).split()) if hint else None, "exit": exit_code}
    if details:
        err["details"] = details
    return {"error": err}


def error_line(message: str, hint: str | None = None) -> str:
    """``Error: message — hint`` on one line (newlines in either become spaces): how every error is shown."""
    text = " ".join(str(message).split())
    if hint:
        if text.endswith(".") and not text.endswith(".."):
            text = text[:-1]        # click's "Missing argument 'ID'." — the hint follows
        text += " — " + " ".join(str(hint).split())
    return f"Error: {text}"


class UsageError(AcpmemError):
    """Arguments that cannot be right whatever the vault holds (exit 2, like a command-line usage error)."""

    exit_code = 2
    code = "usage"


class Refused(AcpmemError):
    """A well-formed argument this vault or this content refuses: a type the vault does not define, text over its size
    limit, a path of this project in the user vault (exit 1, like every content error)."""

    code = "refused"


class VaultNotFound(AcpmemError):
    code = "vault_not_found"


class VaultExists(AcpmemError):
    code = "vault_exists"


class VaultReadOnly(AcpmemError):
    """A write asked of a vault that cannot be written (a read-only mount, someone else's folder)."""

    code = "read_only"


class SettingsError(AcpmemError):
    code = "settings"


class EntryInvalid(AcpmemError):
    """A file or a model output that is not a valid entry. Names the file, the field and the reason."""

    code = "invalid_entry"

    def __init__(self, path: str, field: str | None, reason: str, hint: str | None = None) -> None:
        where = f"{path}: " if path else ""
        what = f"field '{field}' " if field else ""
        super().__init__(f"{where}{what}{reason}", hint or "fix the file by hand or run `acp memory edit ID`",
                         path=path, field=field, reason=reason)
        self.path = path
        self.field = field
        self.reason = reason


class EntryNotFound(AcpmemError):
    code = "not_found"


class AmbiguousId(AcpmemError):
    code = "ambiguous_id"

    def __init__(self, prefix: str, matches: list[str]) -> None:
        shown = ", ".join(matches[:10]) + (" …" if len(matches) > 10 else "")
        super().__init__(f"Ambiguous id '{prefix}': matches {shown}", "pass more characters", matches=matches)
        self.matches = matches


class LockTimeout(AcpmemError):
    code = "lock_timeout"


class GitStateError(AcpmemError):
    code = "git_state"


class SecretRefused(AcpmemError):
    code = "secret_refused"


class TranscriptError(AcpmemError):
    code = "transcript"


class ExtractionError(AcpmemError):
    code = "extraction"


class SyncConflict(AcpmemError):
    code = "sync_conflict"
