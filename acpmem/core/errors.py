"""The exception family of acpmem.

Every error a user can cause is an ``AcpmemError``: it carries what happened and what to do next, and the
CLI prints it as one line ``Error: <message> — <hint>`` with the error's exit code. Nothing else in the
package decides exit codes.
"""
from __future__ import annotations


class AcpmemError(Exception):
    """A domain error: one line for the user, with the next step."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, **data: object) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.data = data

    def __str__(self) -> str:
        return f"{self.message} — {self.hint}" if self.hint else self.message

    def line(self) -> str:
        return error_line(self.message, self.hint)

    def to_json(self) -> dict:
        out = {"error": type(self).__name__, "message": self.message}
        if self.hint:
            out["hint"] = self.hint
        return out


def error_line(message: str, hint: str | None = None) -> str:
    """``Error: message — hint`` on one line (newlines in either become spaces): how every error is shown."""
    text = " ".join(str(message).split())
    if hint:
        if text.endswith(".") and not text.endswith(".."):
            text = text[:-1]        # click's "Missing argument 'ID'." — the hint follows
        text += " — " + " ".join(str(hint).split())
    return f"Error: {text}"


class UsageError(AcpmemError):
    """Arguments that cannot be right (exit 2, like a command-line usage error)."""

    exit_code = 2


class VaultNotFound(AcpmemError):
    pass


class VaultExists(AcpmemError):
    pass


class VaultReadOnly(AcpmemError):
    """A write asked of a vault that cannot be written (a read-only mount, someone else's folder)."""


class SettingsError(AcpmemError):
    pass


class EntryInvalid(AcpmemError):
    """A file or a model output that is not a valid entry. Names the file, the field and the reason."""

    def __init__(self, path: str, field: str | None, reason: str, hint: str | None = None) -> None:
        where = f"{path}: " if path else ""
        what = f"field '{field}' " if field else ""
        super().__init__(f"{where}{what}{reason}", hint or "fix the file by hand or run `acp memory edit ID`",
                         path=path, field=field, reason=reason)
        self.path = path
        self.field = field
        self.reason = reason


class EntryNotFound(AcpmemError):
    pass


class AmbiguousId(AcpmemError):
    def __init__(self, prefix: str, matches: list[str]) -> None:
        shown = ", ".join(matches[:10]) + (" …" if len(matches) > 10 else "")
        super().__init__(f"Ambiguous id '{prefix}': matches {shown}", "pass more characters", matches=matches)
        self.matches = matches


class LockTimeout(AcpmemError):
    pass


class GitStateError(AcpmemError):
    pass


class SecretRefused(AcpmemError):
    pass


class TranscriptError(AcpmemError):
    pass


class ExtractionError(AcpmemError):
    pass


class SyncConflict(AcpmemError):
    pass
