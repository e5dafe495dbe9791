"""Read bookkeeping: when each entry was last read, without a commit per read and without merge conflicts.

The design (``docs/design.md``, "Read bookkeeping"):

* A read (``recall``, ``surface``, ``show``) appends one line ``<id>\\t<time>`` to ``.acpmem/reads.log``, a local,
  never-committed file, with a single ``O_APPEND`` write: no lock, no git, no waiting.
* The next time acpmem commits anything (a fork write, a forget, a human edit it records, a ``sync``), it folds that
  log into ``reads/<clone-id>.tsv`` — one line per entry, sorted — inside the same commit. Each clone writes only its
  own file, so two clones that both read and then sync never touch the same file: the merge is conflict-free by
  construction (``.gitattributes`` adds ``merge=union`` as a second line of defence for copied clones).
* Entry files are not touched by reads, so ``git log`` of an entry shows only its content changes.
* The effective ``last_read`` of an entry is the latest of its frontmatter value, every clone's ``reads/*.tsv`` and the
  local log; it survives a clone and a sync because the TSV files are committed.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from acpmem.core.clock import parse_iso
from acpmem.core.layout import READS_DIR
from acpmem.infra.files import append_bytes, atomic_write, read_regular

MAX_LOG_BYTES = 256_000_000   # a committed reads/ or reviews/ file read at most this far (30 bytes a line)
LOCAL_LOG = "reads.log"


def clone_id(state_dir: Path) -> str:
    """A stable random id for this clone, kept in ``.acpmem/clone-id``."""
    path = state_dir / "clone-id"
    try:
        value = path.read_text("ascii").strip()
        if value:
            return value
    except (OSError, UnicodeDecodeError):
        pass
    value = os.urandom(4).hex()
    try:
        atomic_write(path, value + "\n", replace=False)  # first writer wins; others read its value
    except FileExistsError:
        value = path.read_text("ascii").strip() or value
    return value


def record(state_dir: Path, ids: list[str], at: str) -> None:
    """Append reads to the local log with one write (atomic for small appends on a local filesystem)."""
    if not ids:
        return
    append_bytes(state_dir / LOCAL_LOG, "".join(f"{i}\t{at}\n" for i in ids).encode("utf-8"))


# The times acpmem writes (``core.clock.utc_iso``); they compare as text in time order. A line holding anything else
# — a hand edit, a bad merge of a teammate's file — is skipped: it would win every comparison ("zzzz" > "2026-…") and
# then fail every score.
_TIME = r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z"
_time_re: re.Pattern | None = None


def _valid_time(at: str) -> bool:
    global _time_re
    if _time_re is None:   # compiled on first use, not at import
        _time_re = re.compile(_TIME)
    if not _time_re.fullmatch(at):
        return False
    if at[8:10] < "29" and at[:4] != "0000":   # every other day exists in every month of every year
        return True
    try:
        parse_iso(at)
    except ValueError:
        return False
    return True


def _parse_lines(text: str, into: dict[str, str], only: frozenset[str] | None = None) -> None:
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 2:
            continue
        ident, at = parts[0].strip(), parts[1].strip()
        if only is not None and ident not in only:
            continue
        if ident and at and at > into.get(ident, "") and _valid_time(at):
            into[ident] = at


class ReadsState:
    """What ``last_reads`` read, to be taken again while its files hold the same bytes (``acpmem.search.held``: the
    read server holds one per vault it holds): every committed ``reads/*.tsv`` (name, bytes), the local log's whole
    lines, and the times they gave. The local log only grows by appends between two folds: a later read compares
    the bytes (cheap) and parses only what was appended (the parsing is what costs: ~0.5 µs a line)."""

    __slots__ = ("files", "log", "times")

    def __init__(self, files: list[tuple[str, bytes]], log: bytes, times: dict[str, str]) -> None:
        self.files, self.log, self.times = files, log, times


MAX_STATE_BYTES = 4 << 20   # reads files larger than this in all (130,000 lines) are read the long way every time


def _committed(root: Path) -> list[tuple[str, bytes]] | None:
    """(name, bytes) of every ``reads/*.tsv`` in order; None where one is not a regular file or cannot be read
    (``last_reads`` skips it: left to it)."""
    try:
        names = sorted(n for n in os.listdir(root / READS_DIR) if n.endswith(".tsv"))
    except FileNotFoundError:
        return []
    try:
        return [(name, read_regular(root / READS_DIR / name, MAX_LOG_BYTES)) for name in names]
    except OSError:
        return None


def _local_log(state_dir: Path) -> bytes | None:
    """The local log's bytes (b"" when there is none); None where it is not a regular file."""
    try:
        return read_regular(state_dir / LOCAL_LOG, MAX_LOG_BYTES)
    except FileNotFoundError:
        return b""
    except OSError:
        return None


def reads_state(root: Path, state_dir: Path) -> ReadsState | None:
    """Read every reads file as ``last_reads`` does, keeping what was read; None where that is not to be held (a
    file not regular, more than ``MAX_STATE_BYTES`` in all)."""
    files, log = _committed(root), _local_log(state_dir)
    if files is None or log is None or sum(len(b) for _, b in files) + len(log) > MAX_STATE_BYTES:
        return None
    log = log[:log.rfind(b"\n") + 1]   # whole lines: an append may be on its way
    times: dict[str, str] = {}
    for _, data in files:
        _parse_lines(data.decode("utf-8", "replace"), times)
    _parse_lines(log.decode("utf-8", "replace"), times)
    return ReadsState(files, log, times)


def _from_state(root: Path, state_dir: Path, state: ReadsState) -> tuple[dict[str, str], int] | None:
    """``last_reads`` from ``state`` and what was appended to the local log since (and how many bytes that was);
    None where a file's bytes are not as they were (a teammate's reads arrived, the log was folded into a commit)."""
    if _committed(root) != state.files:
        return None
    log = _local_log(state_dir)
    if log is None or len(log) >= MAX_LOG_BYTES or not log.startswith(state.log):
        return None   # (the long way reads a log past the bound whole)
    out = dict(state.times)
    if len(log) > len(state.log):
        _parse_lines(log[len(state.log):].decode("utf-8", "replace"), out)
    return out, len(log) - len(state.log)


REFRESH_BYTES = 64 << 10   # appended to the local log since the read server took it: it is asked to take it again


def served_reads(root: Path, state_dir: Path, db_path: Path, only: frozenset[str] | None = None) -> dict[str, str]:
    """``last_reads``, from what the read server holds of them where this is one of its children and the files are
    as they were then. Where they are not (a teammate's reads synced, the log folded), or the log grew past
    ``REFRESH_BYTES`` since, the server is told to take them again."""
    # lazy: only the readers of every entry need it, and they import it already
    from acpmem.search import held

    state = held.reads(str(root))
    if state is None:
        return last_reads(root, state_dir, only)
    got = _from_state(root, state_dir, state)
    if got is None or got[1] > REFRESH_BYTES:
        held.loaded(str(root), str(db_path), (), held.READ_TIMES)
    if got is None:
        return last_reads(root, state_dir, only)
    times = got[0]
    return times if only is None else {k: times[k] for k in only if k in times}


def last_reads(root: Path, state_dir: Path, only: frozenset[str] | None = None) -> dict[str, str]:
    """id -> latest read time over every clone's committed file and the local log; ``only``: of these ids alone
    (``show`` of one entry: no time of another checked)."""
    out: dict[str, str] = {}
    try:
        names = sorted(os.listdir(root / READS_DIR))
    except FileNotFoundError:
        names = []
    for name in names:
        if name.endswith(".tsv"):
            try:
                # a FIFO put there would hang every listing: regular files only
                _parse_lines(read_regular(root / READS_DIR / name, MAX_LOG_BYTES).decode("utf-8", "replace"), out,
                             only)
            except OSError:
                pass
    log = _local_log(state_dir)
    if log:
        for ident, at in _log_times(state_dir, log).items():
            if (only is None or ident in only) and at > out.get(ident, ""):
                out[ident] = at
    return out


SEEN = "reads.log.seen"   # what the local log's first bytes gave (``_log_times``)
SEEN_FROM = 64 << 10      # a local log (or the part of it past what ``SEEN`` holds) longer than this is summed up


def _log_times(state_dir: Path, log: bytes) -> dict[str, str]:
    """id -> latest valid read time in the local log's bytes ``log``, as ``_parse_lines`` gives them.

    The log grows by a line per read until the next commit folds it, and parsing is what costs (~1.5 µs a line:
    11,000 lines, a busy day or two without a commit, added 17 ms to every listing). So once it is longer than
    ``SEEN_FROM``, what its whole lines gave is kept in ``SEEN``, with their length and checksum; a later read
    whose log starts with those same bytes (checked by the checksum: a fold, a truncation or an edit changes them)
    parses only what was appended since. It is derived state, written atomically, by whichever read wrote last;
    where it cannot be written (a read-only vault) the log is parsed whole, as before."""
    times: dict[str, str] = {}
    if len(log) <= SEEN_FROM:
        _parse_lines(log.decode("utf-8", "replace"), times)
        return times
    # lazy: only a long log needs it
    from binascii import crc32

    start = 0
    seen = _read_seen(state_dir)
    if seen is not None and seen[0] <= len(log) and crc32(memoryview(log)[:seen[0]]) == seen[1]:
        start, times = seen[0], seen[2]
    whole = log.rfind(b"\n") + 1    # an append may be on its way: the last line is parsed, never kept
    if whole - start > SEEN_FROM:
        _parse_lines(log[start:whole].decode("utf-8", "replace"), times)
        _write_seen(state_dir, whole, crc32(memoryview(log)[:whole]), times)
        start = whole
    _parse_lines(log[start:].decode("utf-8", "replace"), times)
    return times


def _read_seen(state_dir: Path) -> tuple[int, int, dict[str, str]] | None:
    """(length, checksum, times) from ``SEEN``; None where it is missing or not as ``_write_seen`` writes it."""
    try:
        text = read_regular(state_dir / SEEN, MAX_LOG_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    head, _, rest = text.partition("\n")
    parts = head.split(" ")
    # (at most 20 digits: what it writes; int() refuses a number of more than 4,300 digits outright)
    if len(parts) != 3 or parts[0] != "acpmem-reads-seen-1" or \
            not all(p.isascii() and p.isdigit() and len(p) <= 20 for p in parts[1:]):
        return None
    times: dict[str, str] = {}
    _parse_lines(rest, times)
    return int(parts[1]), int(parts[2]), times


def _write_seen(state_dir: Path, length: int, checksum: int, times: dict[str, str]) -> None:
    body = "".join(f"{i}\t{t}\n" for i, t in sorted(times.items()))
    try:
        atomic_write(state_dir / SEEN, f"acpmem-reads-seen-1 {length} {checksum}\n{body}", durable=False)
    except OSError:
        pass   # (a read-only vault: the next read parses the log whole again)


def fold(root: Path, state_dir: Path) -> tuple[str, str, Path | None] | None:
    """Prepare the fold of the local log into this clone's committed file. Call with the repository lock held.

    Returns (relative path, new text, the claimed log to delete after the commit) or None if there is nothing to
    fold. The log is claimed by renaming it, so reads appended meanwhile go to a fresh log and are kept.
    """
    log = state_dir / LOCAL_LOG
    claimed = state_dir / (LOCAL_LOG + ".folding")
    if not claimed.exists():
        try:
            os.replace(log, claimed)
        except FileNotFoundError:
            return None
    rel = f"{READS_DIR}/{clone_id(state_dir)}.tsv"
    current: dict[str, str] = {}
    try:
        _parse_lines((root / rel).read_text("utf-8"), current)
    except FileNotFoundError:
        pass
    before = dict(current)
    _parse_lines(claimed.read_text("utf-8", errors="replace"), current)
    if current == before:
        claimed.unlink(missing_ok=True)
        return None
    text = "".join(f"{i}\t{current[i]}\n" for i in sorted(current))
    return rel, text, claimed
