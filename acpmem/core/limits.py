"""The bounds of every number and identifier acpmem stores, in one place, with checks cheap enough for the per-turn
paths.

A number that reaches the derived SQLite index must fit its INTEGER (64-bit signed), and Python refuses to turn a
decimal string of more than 4,300 digits into an int at all; so a number is checked for its range before anything
stores it, and digit strings for their length before anything converts them. Citation seqs are 0..``MAX_SEQ``: an
integer, a range ``lo-hi`` with ``lo <= hi``, or a kernel ref ``m12`` / ``b3``. Pure: values in, values out.
"""
from __future__ import annotations

import math
import re

MAX_INT = 2**63 - 1          # the largest SQLite INTEGER
MIN_INT = -2**63
MAX_SEQ = MAX_INT            # a seq (and both ends of a range, and a kernel ref's number) is 0..MAX_SEQ
MAX_SESSION_CHARS = 512
MAX_PATH_CHARS = 4096           # a file path the host passes (transcript, host tools): Linux's PATH_MAX
MAX_BUDGET_TOKENS = 1_000_000   # the resident index's token budget: --budget, [index] budget_tokens, the API
MAX_TOP_N = 1_000_000           # how many entries a score table selects
MAX_RECALL_LIMIT = 10_000       # recall(limit=…) from the Python API (the command line allows 100, MCP 20)

# Compiled on first use (a per-turn command that never checks a seq pays nothing for them).
_PATTERNS = {
    "digits": r"[0-9]{1,40}",       # ASCII only: "٥".isdigit() is True, and so is "²" (which int() refuses)
    "range": r"([0-9]{1,40})-([0-9]{1,40})",
    "kernel_ref": r"([mb])([0-9]{1,40})",
    "control": "[\x00-\x1f\x7f-\x9f]",
    "line_breaking": "[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]",   # control characters but the tab
    "surrogate": "[\ud800-\udfff]",
    "not_in_a_name": r"[^A-Za-z0-9_.-]",   # what a folder named after an id may not hold
}
_compiled: dict[str, re.Pattern] = {}


def _re(name: str) -> re.Pattern:
    rx = _compiled.get(name)
    if rx is None:
        rx = _compiled[name] = re.compile(_PATTERNS[name])
    return rx


def prepare() -> None:
    """Compile every pattern now (each is compiled on first use), for a process that forks readers
    (``acpmem.cli.readserver``): a child compiling one again costs ~0.2 ms of a read."""
    for name in _PATTERNS:
        _re(name)


def name_safe(text: str) -> str:
    """``text`` with every character but ASCII letters, digits, ``_``, ``.`` and ``-`` as ``_`` (one for one): a
    readable folder name for any id."""
    return _re("not_in_a_name").sub("_", text)


def int_between(value: object, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def is_number(value: object) -> bool:
    """A finite int or float (not a bool, not NaN, not an infinity)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def decimal(value: str) -> int | None:
    """The value of a string of ASCII digits (at most 40 of them, leading zeros allowed), else None."""
    if isinstance(value, str) and _re("digits").fullmatch(value):
        return int(value)
    return None


def int_arg(value: object, lo: int, hi: int) -> int | None:
    """An integer argument as models and shells send it — ``7`` or ``"7"`` (ASCII digits, spaces around allowed) —
    within ``lo..hi``; None when it is anything else."""
    if isinstance(value, str):
        value = decimal(value.strip())
    return value if int_between(value, lo, hi) else None


def seq_span(seq: object) -> tuple[int, int] | None:
    """The turns ``(lo, hi)`` a valid citation seq covers: an int ``n`` and a message ref ``"mn"`` give ``(n, n)``, a
    range ``"lo-hi"`` gives ``(lo, hi)``. None for a block ref (``"b3"``: not a turn) and for anything invalid."""
    if isinstance(seq, bool):
        return None
    if isinstance(seq, int):
        return (seq, seq) if 0 <= seq <= MAX_SEQ else None
    if not isinstance(seq, str):
        return None
    m = _re("range").fullmatch(seq)
    if m:
        lo, hi = int(m[1]), int(m[2])
        return (lo, hi) if lo <= hi <= MAX_SEQ else None
    m = _re("kernel_ref").fullmatch(seq)
    if m and m[1] == "m":
        n = int(m[2])
        return (n, n) if n <= MAX_SEQ else None
    return None


def valid_seq(seq: object) -> bool:
    """A citation seq: an int 0..MAX_SEQ, a range ``"lo-hi"`` of those with ``lo <= hi``, or a kernel ref ``"m12"`` /
    ``"b3"`` whose number is one of those."""
    if seq_span(seq) is not None:
        return True
    m = _re("kernel_ref").fullmatch(seq) if isinstance(seq, str) else None
    return bool(m) and int(m[2]) <= MAX_SEQ


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character (C0, DEL or C1), line breaks and tabs included."""
    return _re("control").search(text) is not None


def one_line(text: str) -> str:
    """``text`` as one line: control characters (line breaks included) become spaces, runs of whitespace one space."""
    return " ".join(_re("control").sub(" ", text).split())


def breaks_line(text: str) -> bool:
    """Whether ``text`` holds a line break or a control character other than the tab."""
    return _re("line_breaking").search(text) is not None


def is_utf8(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (no lone surrogates, which a non-UTF-8 command line or JSON
    ``"\\ud800"`` produce)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def without_surrogates(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so it can be written as UTF-8."""
    return text if is_utf8(text) else _re("surrogate").sub("\ufffd", text)


def session_problem(session: object) -> str | None:
    """Why ``session`` is not a session id (1–512 characters, not only spaces, no control characters, valid
    text), or None when it is one."""
    if not isinstance(session, str):
        return f"must be text, got {type(session).__name__}"
    if not session.strip() or len(session) > MAX_SESSION_CHARS:
        return f"must be 1–{MAX_SESSION_CHARS} characters"
    if has_control(session) or not is_utf8(session):
        return "must not contain control characters or invalid text"
    return None


def path_problem(path: object) -> str | None:
    """Why ``path`` is not a usable file path given by the host (text or ``os.PathLike``, no NUL, valid text, at
    most ``MAX_PATH_CHARS``), or None when it is one."""
    text = path.__fspath__() if hasattr(path, "__fspath__") else path
    if not isinstance(text, str):
        return "must be a file path (text)"
    if "\x00" in text or len(text) > MAX_PATH_CHARS or not is_utf8(text):
        return f"must be valid text without NUL, of at most {MAX_PATH_CHARS} characters"
    return None


def bad_value(value: object, depth: int = 0) -> object:
    """The first value in ``value`` (a YAML/JSON-like tree) that cannot be stored — an int outside 64 bits, a NaN or
    an infinity, text holding a NUL — or None when there is none. ``value`` itself when the tree is absurdly deep."""
    if isinstance(value, str):
        return value if "\x00" in value else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return None if MIN_INT <= value <= MAX_INT else value
    if isinstance(value, float):
        return None if math.isfinite(value) else value
    if depth > 100:
        return value
    if isinstance(value, dict):
        for k, v in value.items():
            bad = bad_value(k, depth + 1)
            if bad is None:
                bad = bad_value(v, depth + 1)
            if bad is not None:
                return bad
    elif isinstance(value, (list, tuple)):
        for v in value:
            bad = bad_value(v, depth + 1)
            if bad is not None:
                return bad
    return None


def clip(value: object, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters, for an error message (a huge int never goes through ``str``)."""
    if isinstance(value, int) and not isinstance(value, bool) and not MIN_INT <= value <= MAX_INT:
        return f"a {value.bit_length()}-bit integer"
    try:
        text = repr(value)
    except (ValueError, RecursionError):   # a huge int or a deep structure inside
        return f"a {type(value).__name__} that cannot be shown"
    return text if len(text) <= limit else text[: limit - 1] + "…"
