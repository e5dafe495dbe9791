"""Pending commit requests: one durable JSON file per ``memory_commit`` under ``.acpmem/pending/``, written
atomically and fsynced before the caller is answered; the retry bookkeeping (attempts, backoff, failed); and the log
of finished requests (``.acpmem/done.jsonl``).

Kept light on purpose (no typer, no git, no openai at import): ``commit`` must answer in well under 250 ms.
"""
from __future__ import annotations

import json
import os
import re
from datetime import datetime, timedelta
from pathlib import Path

from acpmem.core.clock import utc_iso
from acpmem.core.errors import AcpmemError, UsageError
from acpmem.core.ids import random_id
from acpmem.core.layout import PENDING_DIR
from acpmem.core.values import Value
from acpmem.infra.files import append_record, atomic_write, fsync_dir, read_records, stale_temp_files

DONE_LOG = "done.jsonl"
MAX_ATTEMPTS = 5
BACKOFF_BASE_S = 15.0
BACKOFF_CAP_S = 3600.0
MAX_SESSION_CHARS = 512
MAX_SEQ = 2**63 - 1        # a seq is stored as an SQLite INTEGER
_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def ack_text(request_id: str, lang: str = "en", *, inline: bool = False) -> str:
    """The acknowledgement the main model gets; the fork closes the open ``memory_commit`` call with these exact bytes.
    ``inline``: the extraction runs now, in the caller's process (``commit --wait``), not in the background."""
    if lang == "zh":
        return f"已记录（{request_id}）：{'现在' if inline else '将在后台'}提炼并写入长期记忆。"
    return f"Noted ({request_id}): it {'is distilled and written now' if inline else 'will be distilled and written in the background'}."


class Request(Value):
    """One pending ``memory_commit``: what the main conversation asked for, where its transcript is, and the retry
    state. ``status`` is ``pending`` or ``failed`` (attempts exhausted: kept and listed, retried only by hand)."""

    id: str
    created: str
    type: str
    note: str
    importance: int
    session: str
    seq: int
    ack: str
    transcript: str | None = None
    host_tools: str | None = None
    lang: str = "en"
    status: str = "pending"
    attempts: int = 0
    next_attempt: str | None = None
    errors: tuple[dict, ...] = ()
    redacted: tuple[str, ...] = ()

    @property
    def last_error(self) -> dict | None:
        return self.errors[-1] if self.errors else None

    def to_json(self) -> dict:
        return {"id": self.id, "created": self.created, "type": self.type, "note": self.note,
                "importance": self.importance, "session": self.session, "seq": self.seq, "ack": self.ack,
                "transcript": self.transcript, "host_tools": self.host_tools, "lang": self.lang,
                "status": self.status, "attempts": self.attempts, "next_attempt": self.next_attempt,
                "errors": list(self.errors), "redacted": list(self.redacted)}

    @classmethod
    def from_json(cls, d: dict) -> "Request":
        return cls(id=str(d["id"]), created=str(d["created"]), type=str(d["type"]), note=str(d["note"]),
                   importance=int(d["importance"]), session=str(d["session"]), seq=int(d["seq"]), ack=str(d["ack"]),
                   transcript=d.get("transcript"), host_tools=d.get("host_tools"), lang=d.get("lang") or "en",
                   status=d.get("status") or "pending", attempts=int(d.get("attempts") or 0),
                   next_attempt=d.get("next_attempt"), errors=tuple(d.get("errors") or ()),
                   redacted=tuple(d.get("redacted") or ()))

    def due(self, now: str) -> bool:
        return self.status == "pending" and (self.next_attempt is None or self.next_attempt <= now)


def pending_dir(state_dir: Path) -> Path:
    return Path(state_dir) / PENDING_DIR


def _encode(req: Request) -> bytes:
    return (json.dumps(req.to_json(), ensure_ascii=False, indent=1) + "\n").encode("utf-8")


def save_request(state_dir: Path, req: Request, *, new: bool = False) -> Path:
    """Write a request file atomically and durably; ``new`` refuses to replace an existing id
    (``FileExistsError``)."""
    path = pending_dir(state_dir) / f"{req.id}.json"
    atomic_write(path, _encode(req), replace=not new)
    return path


def check_request_id(request_id: str) -> str:
    if not isinstance(request_id, str) or not _REQUEST_ID_RE.fullmatch(request_id):
        raise UsageError(f"not a request id: {request_id!r:.70}", "request ids look like r-k3f9q2ab")
    return request_id


def load_request(state_dir: Path, request_id: str) -> Request | None:
    path = pending_dir(state_dir) / f"{check_request_id(request_id)}.json"
    try:
        return Request.from_json(json.loads(path.read_text("utf-8")))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise AcpmemError(f"{path}: not a valid request file ({exc})",
                          "delete it, or fix it by hand; `acp memory stats` lists the requests") from None


def list_requests(state_dir: Path) -> tuple[list[Request], list[str]]:
    """Every request file, oldest first, and the files that do not parse (named, never deleted)."""
    folder = pending_dir(state_dir)
    out, broken = [], []
    try:
        names = sorted(p for p in os.listdir(folder) if p.endswith(".json") and not p.startswith("."))
    except FileNotFoundError:
        return [], []
    for name in names:
        try:
            out.append(Request.from_json(json.loads((folder / name).read_text("utf-8"))))
        except FileNotFoundError:
            continue   # finished meanwhile
        except (ValueError, KeyError, TypeError):
            broken.append(name)
    out.sort(key=lambda r: (r.created, r.id))
    return out, broken


def remove_request(state_dir: Path, request_id: str) -> None:
    folder = pending_dir(state_dir)
    (folder / f"{request_id}.json").unlink(missing_ok=True)
    fsync_dir(folder)


def prune_temp_files(state_dir: Path) -> int:
    """Remove temp files a killed ``submit`` left in the pending folder (never a request file). Returns how many."""
    stale = stale_temp_files(pending_dir(state_dir))
    for p in stale:
        p.unlink(missing_ok=True)
    return len(stale)


def record_failure(state_dir: Path, req: Request, error: dict, now: datetime, rng, *,
                   base_seconds: float = BACKOFF_BASE_S, max_attempts: int = MAX_ATTEMPTS) -> Request:
    """Count a failed attempt: keep the error (the last few), set the next attempt with exponential backoff, and mark
    the request failed after ``MAX_ATTEMPTS``. The request stays on disk either way."""
    attempts = req.attempts + 1
    errors = (*req.errors, {"at": utc_iso(now), **error})[-5:]
    if attempts >= max_attempts:
        status, nxt = "failed", None
    else:
        delay = min(BACKOFF_CAP_S, base_seconds * 2 ** (attempts - 1)) * (0.75 + 0.5 * rng.random())
        status, nxt = "pending", utc_iso(now + timedelta(seconds=delay))
    new = req.with_changes(attempts=attempts, errors=errors, status=status, next_attempt=nxt)
    save_request(state_dir, new)
    return new


def append_done(state_dir: Path, record: dict) -> None:
    """One line per finished request in ``.acpmem/done.jsonl`` (outcome, commit, entries): the record of requests that
    wrote nothing, and what ``extract`` shows for a request that is already done."""
    append_record(Path(state_dir) / DONE_LOG, record)


def read_done(state_dir: Path) -> list[dict]:
    return read_records(Path(state_dir) / DONE_LOG)


def find_done(state_dir: Path, request_id: str) -> dict | None:
    for rec in reversed(read_done(state_dir)):
        if rec.get("request") == request_id:
            return rec
    return None


def new_request_id(rng) -> str:
    return "r-" + random_id(rng, 8)


def make_request(*, types: tuple[str, ...], type: str, note: str, importance: int | str, session: str,
                 seq: int | str, transcript: str | os.PathLike | None, host_tools: str | os.PathLike | None,
                 lang: str, created: str, request_id: str, cwd: Path | None = None, inline: bool = False) -> Request:
    """Validate a commit's arguments (the model's and the host's) and build the request. The note is redacted here,
    before it reaches any file; the secret kinds found are kept in ``redacted``."""
    from acpmem.core.tools import parse_commit_args

    args = parse_commit_args({"type": type, "note": note, "importance": importance}, types)
    if not isinstance(session, str) or not session.strip() or len(session) > MAX_SESSION_CHARS or "\x00" in session:
        raise UsageError("a session id must be 1–512 characters", "pass the host's session id with --session")
    if isinstance(seq, str) and seq.strip().isdigit():
        seq = int(seq)
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise UsageError(f"seq must be a non-negative integer, got {seq!r}",
                         "pass the host's event index of the memory_commit call with --seq")
    from acpmem.core.redact import redact

    note_clean, found = redact(args.note)

    def absolute(p):
        if p is None or p == "":
            return None
        q = Path(p).expanduser()
        return str(q if q.is_absolute() else (cwd or Path.cwd()) / q)

    return Request(id=request_id, created=created, type=args.type, note=note_clean, importance=args.importance,
                   session=session.strip(), seq=seq, ack=ack_text(request_id, lang, inline=inline), transcript=absolute(transcript),
                   host_tools=absolute(host_tools), lang=lang, redacted=tuple(f.kind for f in found))
