"""Pending commit requests and the background worker that drains them (SPEC §5.1).

Owns: the durable request files under ``.acpmem/pending/`` (one JSON file per ``memory_commit``, written atomically and
fsynced before the caller is answered), ``submit`` (the library call behind ``acp memory commit``, the MCP server and the
hooks), the retry bookkeeping (attempts, backoff, failed), the per-vault worker lock and the detached worker process,
and the typer-free fast path for ``acp memory commit``.

The worker lock is an ``flock`` on ``.acpmem/locks/worker.flock``; whoever holds it is the only process extracting in that
vault. ``submit`` writes its request first and only then tries the lock: when it wins, it hands the locked descriptor to
the worker it starts (the lock travels with the open file), so two commits at once start one worker. The worker drains
what is due, releases the lock, looks again, and only exits when the queue is empty after the release: a request written
while it was deciding to exit is either seen by that last look or finds the lock free and starts a new worker.

Exactly once: a request is removed only after its commit exists, and before applying anything the history is searched
for the request's ``Acpmem-Request`` trailer (see ``fork.process``).

Kept light on purpose (no typer, no git, no openai at import): ``commit`` must answer in well under 250 ms.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import re
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from acpmem.errors import AcpmemError, LockTimeout, UsageError

PENDING_DIR = "pending"
WORKER_LOCK = "worker.flock"          # not *.lock: lock files that stay are not leftovers
WORKER_LOG = "worker.log"
DONE_LOG = "done.jsonl"
MAX_ATTEMPTS = 5
BACKOFF_BASE_S = 15.0
BACKOFF_CAP_S = 3600.0
WORKER_IDLE_WAIT_S = 20.0             # the worker waits for a request due this soon; later ones wait for the next start
MAX_LOG_BYTES = 1_000_000
MAX_SESSION_CHARS = 512
_ID_CHARS = "abcdefghijkmnpqrstuvwxyz23456789"
_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def _utc(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_utc(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def ack_text(request_id: str, lang: str = "en") -> str:
    """The acknowledgement the main model gets; the fork closes the open ``memory_commit`` call with these exact bytes."""
    if lang == "zh":
        return f"已记录（{request_id}）：将在后台提炼并写入长期记忆。"
    return f"Noted ({request_id}): it will be distilled and written in the background."


@dataclass(frozen=True)
class Request:
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


@dataclass(frozen=True)
class Ack:
    """What ``submit`` returns: the request id, the acknowledgement text for the model, the request file, how the
    extraction runs (``started`` a new worker, ``running`` one was already at work, ``deferred`` none could be
    started — the request waits for the next worker or ``extract --pending`` —, ``inline`` with ``wait``), and
    with ``wait`` the outcome (``fork.Outcome``)."""

    request_id: str
    text: str
    path: str
    worker: str
    outcome: Any = None

    def to_json(self) -> dict:
        d = {"request": self.request_id, "text": self.text, "path": self.path, "worker": self.worker}
        if self.outcome is not None:
            d["outcome"] = self.outcome.to_json()
        return d


# --------------------------------------------------------------------------------------------- request files

def pending_dir(state_dir: Path) -> Path:
    return Path(state_dir) / PENDING_DIR


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_tmp(folder: Path, data: bytes) -> Path:
    tmp = folder / f".{os.getpid()}.{random.getrandbits(40):010x}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp


def _encode(req: Request) -> bytes:
    return (json.dumps(req.to_json(), ensure_ascii=False, indent=1) + "\n").encode("utf-8")


def save_request(state_dir: Path, req: Request, *, new: bool = False) -> Path:
    """Write a request file atomically (temp file, fsync, rename; ``new`` refuses to replace an existing id)."""
    folder = pending_dir(state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{req.id}.json"
    tmp = _write_tmp(folder, _encode(req))
    try:
        if new:
            os.link(tmp, path)   # fails if the id is taken: never overwrite another request
        else:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(folder)
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
    _fsync_dir(folder)


def prune_temp_files(state_dir: Path, older_than: float = 600.0) -> int:
    """Remove temp files a killed ``submit`` left in the pending folder (never a request file). Returns how many."""
    folder = pending_dir(state_dir)
    n = 0
    cutoff = time.time() - older_than
    for p in folder.glob(".*.tmp") if folder.is_dir() else ():
        with contextlib.suppress(OSError):
            if p.stat().st_mtime < cutoff:
                p.unlink()
                n += 1
    return n


def record_failure(state_dir: Path, req: Request, error: dict, now: datetime,
                   rng: random.Random | None = None) -> Request:
    """Count a failed attempt: keep the error (the last few), set the next attempt with exponential backoff, and mark
    the request failed after ``MAX_ATTEMPTS``. The request stays on disk either way."""
    attempts = req.attempts + 1
    errors = (*req.errors, {"at": _utc(now), **error})[-5:]
    if attempts >= MAX_ATTEMPTS:
        status, nxt = "failed", None
    else:
        delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempts - 1)) * (0.75 + 0.5 * (rng or random).random())
        status, nxt = "pending", _utc(now + timedelta(seconds=delay))
    new = replace(req, attempts=attempts, errors=errors, status=status, next_attempt=nxt)
    save_request(state_dir, new)
    return new


def append_done(state_dir: Path, record: dict) -> None:
    """One line per finished request in ``.acpmem/done.jsonl`` (outcome, commit, entries): the record of requests that
    wrote nothing, and what ``extract`` shows for a request that is already done."""
    from acpmem.llm import append_cost   # the same whole-line, flocked append

    append_cost(Path(state_dir) / DONE_LOG, record)


def read_done(state_dir: Path) -> list[dict]:
    from acpmem.llm import read_costs   # the same tolerant JSONL reader

    return read_costs(Path(state_dir) / DONE_LOG)


def find_done(state_dir: Path, request_id: str) -> dict | None:
    for rec in reversed(read_done(state_dir)):
        if rec.get("request") == request_id:
            return rec
    return None


# --------------------------------------------------------------------------------------------- submit

def new_request_id(rng: random.Random) -> str:
    return "r-" + "".join(rng.choice(_ID_CHARS) for _ in range(8))


def make_request(*, types: tuple[str, ...], type: str, note: str, importance: int | str, session: str,
                 seq: int | str, transcript: str | os.PathLike | None, host_tools: str | os.PathLike | None,
                 lang: str, created: str, request_id: str, cwd: Path | None = None) -> Request:
    """Validate a commit's arguments (the model's and the host's) and build the request. The note is redacted here,
    before it reaches any file; the secret kinds found are kept in ``redacted``."""
    from acpmem.tools import parse_commit_args

    args = parse_commit_args({"type": type, "note": note, "importance": importance}, types)
    if not isinstance(session, str) or not session.strip() or len(session) > MAX_SESSION_CHARS or "\x00" in session:
        raise UsageError("a session id must be 1–512 characters", "pass the host's session id with --session")
    if isinstance(seq, str) and seq.strip().isdigit():
        seq = int(seq)
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise UsageError(f"seq must be a non-negative integer, got {seq!r}",
                         "pass the host's event index of the memory_commit call with --seq")
    from acpmem.secrets import redact

    note_clean, found = redact(args.note)

    def absolute(p):
        if p is None or p == "":
            return None
        q = Path(p).expanduser()
        return str(q if q.is_absolute() else (cwd or Path.cwd()) / q)

    return Request(id=request_id, created=created, type=args.type, note=note_clean, importance=args.importance,
                   session=session.strip(), seq=seq, ack=ack_text(request_id, lang), transcript=absolute(transcript),
                   host_tools=absolute(host_tools), lang=lang, redacted=tuple(f.kind for f in found))


def submit(vault, *, type: str, note: str, importance: int, session: str, seq: int,
           transcript: str | os.PathLike | None = None, wait: bool = False,
           host_tools: str | os.PathLike | None = None, extractor: str | None = None) -> Ack:
    """Record a ``memory_commit`` durably and have it extracted: in a detached background worker (the default; returns
    at once) or inline with ``wait``. ``vault`` is a ``Vault``. Never takes memory content: only the intent (type, note,
    importance) and where the conversation is (session, seq, transcript). Raises ``EntryInvalid``/``UsageError`` for
    bad arguments, before anything is written."""
    settings = vault.settings
    vault.ensure_state()
    for _ in range(20):
        rid = new_request_id(vault.rng)
        req = make_request(types=settings.types, type=type, note=note, importance=importance, session=session, seq=seq,
                           transcript=transcript, host_tools=host_tools, lang=settings.language,
                           created=_utc(vault.clock()), request_id=rid)
        try:
            path = save_request(vault.state_dir, req, new=True)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 20 collisions of 40 random bits
        raise AcpmemError("could not pick a free request id", "retry")
    if wait:
        from acpmem.fork import process_requests

        outcomes = process_requests(vault, [req.id], extractor=extractor, explicit=True, hold_lock=True)
        return Ack(req.id, req.ack, str(path), "inline", outcomes[0] if outcomes else None)
    try:
        state = "started" if start_worker(vault.root, vault.state_dir) else "running"
    except OSError as exc:
        # The request is durable: the next commit's worker or `acp memory extract --pending` takes it.
        vault.warnings.append(f"could not start the background worker ({exc}); the request stays pending")
        state = "deferred"
    return Ack(req.id, req.ack, str(path), state)


# --------------------------------------------------------------------------------------------- the worker lock

def try_worker_lock(state_dir: Path) -> int | None:
    """The worker lock's descriptor if it was free (now held), else None."""
    from acpmem.detach import try_lock

    return try_lock(Path(state_dir) / "locks" / WORKER_LOCK)


@contextlib.contextmanager
def worker_lock(state_dir: Path, timeout: float = 120.0, sleep: Callable[[float], None] = time.sleep):
    """Hold the worker lock (waiting up to ``timeout`` for a running worker to finish its current request)."""
    deadline = time.monotonic() + timeout
    while True:
        fd = try_worker_lock(state_dir)
        if fd is not None:
            break
        if time.monotonic() > deadline:
            raise LockTimeout(f"the extraction worker of this vault has been busy for over {timeout:.0f} s",
                              "retry later; `acp memory stats` lists the pending requests")
        sleep(0.05)
    try:
        yield fd
    finally:
        os.close(fd)


def start_worker(root: Path, state_dir: Path) -> bool:
    """Start a detached worker (``acpmem.detach``) unless one holds the lock. True when this call started it."""
    from acpmem.detach import reap, spawn

    reap()
    fd = try_worker_lock(state_dir)
    if fd is None:
        return False
    spawn(fd, f"from acpmem.queue import worker_main; worker_main({str(root)!r}, {{fd}})",
          Path(state_dir) / WORKER_LOG, MAX_LOG_BYTES)
    return True


def worker_main(root: str, lock_fd: int | None = None) -> None:
    """The detached worker: drain the due requests, then exit (SPEC §5.2: one worker per vault, none left behind)."""
    from acpmem.vault import Vault

    with contextlib.suppress(OSError):
        os.chdir(root)   # never keep the caller's folder busy
    vault = Vault(Path(root))
    try:
        run_worker(vault, lock_fd)
    finally:
        vault.close()


def _log(msg: str) -> None:
    sys.stderr.write(f"{_utc(datetime.now(timezone.utc))} [{os.getpid()}] {msg}\n")
    sys.stderr.flush()


def run_worker(vault, lock_fd: int | None = None, *, idle_wait: float = WORKER_IDLE_WAIT_S,
               sleep: Callable[[float], None] = time.sleep, log: Callable[[str], None] = _log) -> int:
    """Drain the queue while holding the worker lock; returns how many requests were processed. ``lock_fd`` is the
    descriptor handed over by ``start_worker`` (already locked); without it the lock is taken here or not at all."""
    from acpmem.fork import process_requests

    fd = lock_fd if lock_fd is not None else try_worker_lock(vault.state_dir)
    if fd is None:
        return 0
    done = 0
    idle_since = time.monotonic()
    prune_temp_files(vault.state_dir)
    try:
        while True:
            now = _utc(vault.clock())
            reqs, _ = list_requests(vault.state_dir)
            due = [r for r in reqs if r.due(now)]
            if due:
                for out in process_requests(vault, [due[0].id], hold_lock=False):
                    log(out.summary())
                done += 1
                idle_since = time.monotonic()
                continue
            waiting = [r for r in reqs if r.status == "pending" and r.next_attempt]
            soon = [r for r in waiting if (_parse_utc(r.next_attempt) - vault.clock()).total_seconds() <= idle_wait]
            if soon and time.monotonic() - idle_since < idle_wait:
                sleep(0.25)
                continue
            # Release, then look once more: a request written just before the release is seen here, one written
            # after it finds the lock free and starts its own worker.
            os.close(fd)
            fd = None
            now = _utc(vault.clock())
            if not any(r.due(now) for r in list_requests(vault.state_dir)[0]):
                return done
            fd = try_worker_lock(vault.state_dir)
            if fd is None:
                return done
    finally:
        if fd is not None:
            os.close(fd)


# --------------------------------------------------------------------------------------------- `commit` fast path

_COMMIT_OPTS = {"--type": "type", "--note": "note", "--importance": "importance", "--session": "session",
                "--seq": "seq", "--transcript": "transcript", "--vault": "vault", "--host-tools": "host_tools"}
_COMMIT_FLAGS = {"--json": "json"}


def parse_commit_argv(args: list[str]) -> dict | None:
    """Parse ``commit`` options without typer; None when typer should handle it (help, --wait, anything unknown)."""
    from acpmem.argv import scan

    opts = scan(args, _COMMIT_OPTS, _COMMIT_FLAGS, {"json": False})
    if opts is None or not all(k in opts for k in ("type", "note", "importance", "session", "seq")):
        return None   # typer prints the usage error
    return opts


class _LightVault:
    """What ``submit`` needs of a ``Vault`` (root, state, settings, clock, rng, warnings) without importing
    ``acpmem.vault``, whose sqlite, git and file-tree imports are most of a commit's start-up time."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state_dir = root / ".acpmem"
        self.rng = random.Random()
        self.warnings: list[str] = []
        self._settings = None

    @staticmethod
    def clock() -> datetime:
        return datetime.now(timezone.utc)

    def ensure_state(self) -> None:
        for sub in ("locks", "sessions", PENDING_DIR):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)

    @property
    def settings(self):
        if self._settings is None:
            self.ensure_state()
            from acpmem.settings import load_settings  # reads the JSON cache when acpmem.toml is unchanged

            self._settings = load_settings(self.root, self.state_dir)
        return self._settings

    def close(self) -> None:
        pass


def fast_commit(args: list[str], vault: str | None = None) -> int | None:
    """``[--vault V] commit …`` answered without typer (entry.py calls this); None when the full CLI is needed."""
    opts = parse_commit_argv(args)
    if opts is None:
        return None
    try:
        from acpmem.discovery import discover

        v = _LightVault(discover(opts.get("vault") or vault))
        try:
            ack = submit(v, type=opts["type"], note=opts["note"], importance=opts["importance"],
                         session=opts["session"], seq=opts["seq"], transcript=opts.get("transcript"),
                         host_tools=opts.get("host_tools"))
        finally:
            v.close()
    except AcpmemError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return exc.exit_code
    for w in v.warnings:
        sys.stderr.write(f"Warning: {w}\n")
    text = json.dumps(ack.to_json(), ensure_ascii=False, indent=2) if opts["json"] else ack.text
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        return 1
    return 0
