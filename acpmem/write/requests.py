"""Pending commit requests: one durable JSON file per ``memory_commit`` under ``.git/acpmem/pending/`` (``queue_home``:
kept when ``.acpmem/`` is deleted), written atomically and fsynced before the caller is answered; the retry
bookkeeping (attempts, backoff, failed); and the log of finished requests (``.git/acpmem/done.jsonl``).

Kept light on purpose (no typer, no git, no openai at import): ``commit`` must answer in well under 250 ms.
"""
from __future__ import annotations

import json
import os
import re
from datetime import datetime, timedelta
from pathlib import Path

from acpmem.infra import files
from acpmem.core import limits
from acpmem.core.blocks import valid_block_id
from acpmem.core.clock import parse_iso, utc_iso
from acpmem.core.errors import AcpmemError, UsageError
from acpmem.core.fasthash import sha256
from acpmem.core.ids import random_id
from acpmem.core.layout import PENDING_DIR
from acpmem.core.values import Value
from acpmem.infra.localstate import queue_home
from acpmem.infra.files import (NotRegularFile, append_record, atomic_write, fsync_dir, read_records, read_regular,
                                stale_temp_files)

DONE_LOG = "done.jsonl"
MAX_ATTEMPTS = 5
BACKOFF_BASE_S = 15.0
BACKOFF_CAP_S = 3600.0
MAX_SESSION_CHARS = limits.MAX_SESSION_CHARS
MAX_SEQ = limits.MAX_SEQ   # a seq is stored as an SQLite INTEGER
RECORDED_EXTRACTORS = ("offline", "llm")   # what a request records: ``auto`` is resolved when it is made
KEY_ID_CHARS = 32   # of a request's ``key_id``
_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def key_id_for(request_id: str, api_key: str | None) -> str | None:
    """Which key a request was made with, as it records it: SHA-256 of the key salted by the request's id (the key
    itself is never written), or None without a key."""
    if not api_key:
        return None
    digest = sha256(f"acpmem-request-key\0{request_id}\0{api_key}".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:KEY_ID_CHARS]


def ack_text(request_id: str, lang: str = "en", *, inline: bool = False, policy: str = "auto",
             deferred: str | None = None, conversation: bool = True) -> str:
    """The acknowledgement the main model gets; the fork closes the open ``memory_commit`` call with these exact bytes.
    ``inline``: the extraction runs now, in the caller's process (``commit --wait``), not in the background.
    ``policy`` (``[write] policy``) says what the result becomes, so the model does not promise what will not happen:
    under ``review`` a proposal a person accepts first. ``deferred``: the extraction budget is spent (why), so the
    request waits until it frees. ``conversation`` False: no transcript came with the commit, so the model is told
    that only its note will be kept (the fork never sees the conversation)."""
    text = _ack(request_id, lang, inline=inline, policy=policy, deferred=deferred)
    if conversation:
        return text
    if lang == "zh":
        return text + "只会保留这条说明：这次提交没有附带对话，条目只根据说明写成。"
    return text + " Only the note will be kept: no conversation came with this commit, so the entry is written " \
                  "from the note alone."


def _ack(request_id: str, lang: str, *, inline: bool, policy: str, deferred: str | None) -> str:
    if lang == "zh":
        when = "现在" if inline else "将在后台"
        if deferred:
            when = "因提炼预算已用完而推迟，预算恢复后"
        what = "提炼成待人工审核的提议（审核通过后才会使用）" if policy == "review" else "提炼并写入长期记忆"
        return f"已记录（{request_id}）：{when}{what}。"
    when = "now" if inline else "in the background"
    if deferred:
        when = f"once the extraction budget frees ({deferred}); it is deferred until then"
    if policy == "review":
        return f"Noted ({request_id}): it will be distilled {when} into a proposal that a person reviews; " \
               "it is not used until accepted."
    if deferred:
        return f"Noted ({request_id}): it will be distilled and written {when}."
    return f"Noted ({request_id}): it {'is distilled and written now' if inline else 'will be distilled and written in the background'}."


def off_text(lang: str = "en") -> str:
    """What ``memory_commit`` answers when ``[write] policy = "off"``: nothing is recorded."""
    if lang == "zh":
        return "此记忆库已关闭记忆写入（write.policy = off）：未记录任何内容。"
    return "Memory writes are off in this vault (write.policy = off): nothing was recorded."


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
    block: str | None = None   # a compression block the commit named (b12): the fork's focus and the citation
    deferred: str | None = None    # why it waits beyond its schedule (an extraction budget), or None
    # How it is extracted, fixed when it was made (whoever runs it honours it): ``offline`` or ``llm``, and for
    # ``llm`` the endpoint's base URL (None: OpenAI's) and model — never the key. None: made by an older acpmem,
    # run with the runner's settings.
    extractor: str | None = None
    base_url: str | None = None
    model: str | None = None
    # Which key it was made with (``key_id``: a digest salted by the request's id, never the key): a runner whose
    # endpoint is another sends it to the recorded endpoint only with that same key.
    key_id: str | None = None
    scope: str | None = None   # "branch" | "global": how its entries are tied to the project branch; None: by type

    @property
    def last_error(self) -> dict | None:
        return self.errors[-1] if self.errors else None

    def to_json(self) -> dict:
        return {"id": self.id, "created": self.created, "type": self.type, "note": self.note,
                "importance": self.importance, "session": self.session, "seq": self.seq, "ack": self.ack,
                "transcript": self.transcript, "host_tools": self.host_tools, "lang": self.lang,
                "status": self.status, "attempts": self.attempts, "next_attempt": self.next_attempt,
                "errors": list(self.errors), "redacted": list(self.redacted), "deferred": self.deferred,
                **({"block": self.block} if self.block else {}),
                **{k: getattr(self, k) for k in ("extractor", "base_url", "model", "key_id", "scope")
                   if getattr(self, k)}}

    @classmethod
    def from_json(cls, d: dict) -> "Request":
        """A request file's data; ``ValueError`` (or ``KeyError``, ``TypeError``) when it is not one — a hand edit
        may have put anything there, and a seq or importance the index cannot store must never reach an entry."""
        try:   # a lone surrogate (a "\ud800" escape) reads, but no file can hold it again: a retry could not be saved
            _encode_json(d)
        except UnicodeEncodeError:
            raise ValueError("it holds text that is not valid Unicode") from None
        seq, importance, attempts = d["seq"], d["importance"], d.get("attempts") or 0
        if not (limits.int_between(seq, 0, MAX_SEQ) and limits.int_between(importance, 1, 10)
                and limits.int_between(attempts, 0, 1_000_000)):   # a failed request may be retried by hand
            raise ValueError(f"seq, importance or attempts out of range ({limits.clip(seq)}, "
                             f"{limits.clip(importance)}, {limits.clip(attempts)})")
        why = limits.session_problem(d["session"])
        if why:
            raise ValueError(f"the session {why}")
        for key in ("id", "created", "type", "note", "ack"):
            if not isinstance(d[key], str):
                raise ValueError(f"{key} must be text")
        for key in ("transcript", "host_tools", "next_attempt"):
            if d.get(key) is not None and not isinstance(d[key], str):
                raise ValueError(f"{key} must be text")
        block = d.get("block")
        if block is not None and not valid_block_id(block):
            raise ValueError("block must be a block id like b12")
        if d.get("deferred") is not None and not isinstance(d["deferred"], str):
            raise ValueError("deferred must be text")
        if d.get("extractor") not in (None, *RECORDED_EXTRACTORS):
            raise ValueError(f"extractor must be one of {', '.join(RECORDED_EXTRACTORS)}")
        for key in ("base_url", "model"):
            if d.get(key) is not None and not (isinstance(d[key], str) and d[key] and len(d[key]) <= 2048):
                raise ValueError(f"{key} must be text")
        key_id = d.get("key_id")
        if key_id is not None and not (isinstance(key_id, str) and len(key_id) == KEY_ID_CHARS
                                       and all(c in "0123456789abcdef" for c in key_id)):
            raise ValueError(f"key_id must be {KEY_ID_CHARS} hexadecimal digits")
        if d.get("scope") not in (None, "branch", "global"):
            raise ValueError("scope must be branch or global")
        if d.get("next_attempt") is not None:
            parse_iso(d["next_attempt"])   # the worker computes with it: "zzzz" would stop it for good
        if d.get("status", "pending") not in ("pending", "failed", None) \
                or not all(isinstance(e, dict) for e in d.get("errors") or ()) \
                or not isinstance(d.get("errors") or [], list) or not isinstance(d.get("redacted") or [], list):
            raise ValueError("status, errors or redacted are not what acpmem writes")
        return cls(id=str(d["id"]), created=str(d["created"]), type=str(d["type"]), note=str(d["note"]),
                   importance=importance, session=str(d["session"]), seq=seq, ack=str(d["ack"]),
                   transcript=d.get("transcript"), host_tools=d.get("host_tools"), lang=d.get("lang") or "en",
                   status=d.get("status") or "pending", attempts=attempts,
                   next_attempt=d.get("next_attempt"), errors=tuple(d.get("errors") or ()),
                   redacted=tuple(d.get("redacted") or ()), block=d.get("block"), deferred=d.get("deferred"),
                   extractor=d.get("extractor"), base_url=d.get("base_url"), model=d.get("model"),
                   key_id=key_id, scope=d.get("scope"))

    def due(self, now: str) -> bool:
        return self.status == "pending" and (self.next_attempt is None or self.next_attempt <= now)


def pending_dir(state_dir: Path) -> Path:
    """The folder of the pending request files (``queue_home``)."""
    return queue_home(state_dir) / PENDING_DIR


def _old_pending_dir(state_dir: Path) -> Path | None:
    """Where an older acpmem kept the pending requests (``.acpmem/pending/``), when that is not the folder now."""
    old = Path(state_dir) / PENDING_DIR
    return None if old == pending_dir(state_dir) else old


def _adopt(old: Path, new: Path) -> None:
    """Move one request file an older acpmem left in ``.acpmem/pending/`` to the queue (the newer of two copies of
    one request wins: an older acpmem may still be writing there). Moved, never dropped: a rename where both are on
    one file system, else a durable copy first and the old file removed after it."""
    try:
        try:
            if os.stat(new).st_mtime_ns > os.stat(old).st_mtime_ns:
                old.unlink()
                return
        except FileNotFoundError:
            pass
        files.move_durably(old, new, 64_000_001)
    except (FileNotFoundError, NotRegularFile):
        return   # moved or finished by another process meanwhile; a FIFO is never read


def _adopt_old(state_dir: Path, request_id: str | None = None) -> None:
    """Take over the requests an older acpmem queued in ``.acpmem/pending/`` (all, or the one named), but never a
    file git tracks (``_committed``)."""
    old = _old_pending_dir(state_dir)
    if old is None:
        return
    if request_id is not None:
        names = [f"{request_id}.json"]
    else:
        try:
            names = [n for n in os.listdir(old) if n.endswith(".json") and not n.startswith(".")]
        except OSError:
            return
    names = [name for name in names if os.path.lexists(old / name)]
    if not names:
        return
    shared = _committed(Path(state_dir), old)
    new = pending_dir(state_dir)
    for name in names:
        if name not in shared:
            _adopt(old / name, new / name)


def _committed(state_dir: Path, old: Path) -> set[str]:
    """The names in ``old`` that git tracks: they came with a commit, maybe a teammate's (``git add -f``), never
    from an older acpmem of this clone. A request names the transcript it reads and the endpoint it is sent to
    with this person's key; one taken over from a commit would send their conversation and key wherever a
    teammate chose. Where git cannot say, every name (nothing is taken over; ``doctor`` names the cause)."""
    # lazy: only where an older acpmem's folder holds a request (an upgrade), never on the per-turn paths
    from acpmem.vault.gitlib import tracked_under

    root = state_dir.parent
    found = tracked_under(root, os.path.relpath(old, root))
    if found is None:
        try:
            return set(os.listdir(old))
        except OSError:
            return set()   # gone: nothing left to take over
    return {os.path.basename(name) for name in found}


MAX_REQUEST_BYTES = 16_000_000   # a request file is a few KB; a hand-made one this large is not one acpmem wrote


def _read(path: Path) -> str:
    """A request file's text: a regular file only (a FIFO is never opened), at most ``MAX_REQUEST_BYTES``."""
    data = read_regular(path, MAX_REQUEST_BYTES + 1)
    if len(data) > MAX_REQUEST_BYTES:
        raise ValueError(f"larger than {MAX_REQUEST_BYTES // 1_000_000} MB")
    return data.decode("utf-8")


def _encode_json(data) -> bytes:
    return (json.dumps(data, ensure_ascii=False, indent=1) + "\n").encode("utf-8")


def _encode(req: Request) -> bytes:
    return _encode_json(req.to_json())


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
    _adopt_old(state_dir, check_request_id(request_id))
    path = pending_dir(state_dir) / f"{request_id}.json"
    try:
        req = Request.from_json(json.loads(_read(path)))
        if req.id != request_id:
            raise ValueError(f"it holds request {req.id!r:.80}")
        return req
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError, NotRegularFile) as exc:
        raise AcpmemError(f"{path}: not a valid request file ({str(exc)[:200]})",
                          "delete it, or fix it by hand; `acp memory stats` lists the requests") from None


def list_requests(state_dir: Path) -> tuple[list[Request], list[str]]:
    """Every request file, oldest first, and the files that do not parse (named, never deleted)."""
    _adopt_old(state_dir)
    folder = pending_dir(state_dir)
    out, broken = [], []
    try:
        names = sorted(p for p in os.listdir(folder) if p.endswith(".json") and not p.startswith("."))
    except FileNotFoundError:
        return [], []
    for name in names:
        try:
            req = Request.from_json(json.loads(_read(folder / name)))
            if f"{check_request_id(req.id)}.json" != name:   # the worker would look for another file, for ever
                raise ValueError(f"the request id {req.id!r:.80} is not the file's name")
            out.append(req)
        except FileNotFoundError:
            continue   # finished meanwhile
        except UsageError:
            broken.append(name)
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError, NotRegularFile):
            broken.append(name)
    out.sort(key=lambda r: (r.created, r.id))
    return out, broken


def remove_request(state_dir: Path, request_id: str) -> None:
    folder = pending_dir(state_dir)
    (folder / f"{request_id}.json").unlink(missing_ok=True)
    fsync_dir(folder)
    old = _old_pending_dir(state_dir)
    if old is not None and os.path.lexists(old / f"{request_id}.json"):   # a copy an older acpmem wrote there
        (old / f"{request_id}.json").unlink(missing_ok=True)


def prune_temp_files(state_dir: Path) -> int:
    """Remove temp files a killed ``submit`` left in the pending folder (never a request file). Returns how many."""
    old = _old_pending_dir(state_dir)
    stale = [*stale_temp_files(pending_dir(state_dir)), *(stale_temp_files(old) if old is not None else ())]
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
    new = req.with_changes(attempts=attempts, errors=errors, status=status, next_attempt=nxt, deferred=None)
    save_request(state_dir, new)
    return new


def defer(state_dir: Path, req: Request, reason: str, until: str) -> Request:
    """Keep a request pending, not attempted, until ``until`` (ISO), saying why (an extraction budget is spent). Not
    a failed attempt: its attempts and backoff are unchanged."""
    new = req.with_changes(deferred=reason, next_attempt=until)
    save_request(state_dir, new)
    return new


def append_done(state_dir: Path, record: dict) -> None:
    """One line per finished request in ``.git/acpmem/done.jsonl`` (``queue_home``; outcome, commit, entries): the
    record of requests that wrote nothing, and what ``extract`` shows for a request that is already done. Beside
    the queue, so that deleting ``.acpmem/`` does not forget that a request was done."""
    append_record(queue_home(state_dir) / DONE_LOG, record)


def read_done(state_dir: Path) -> list[dict]:
    """The finished requests, oldest first (those an older acpmem logged in ``.acpmem/done.jsonl`` first, unless
    git tracks that file: it then came with a commit, maybe a teammate's, and would say which of this clone's
    requests are done)."""
    home = queue_home(state_dir) / DONE_LOG
    old = Path(state_dir) / DONE_LOG
    older = read_records(old) if old != home and os.path.lexists(old) and not _tracked_done(old) else []
    return older + read_records(home)


def _tracked_done(old: Path) -> bool:
    """Whether git tracks the old done log (where git cannot say: as if it did, so it is not read). Asked of the
    git executable, not libgit2: ``stats`` reads this log and loads no libgit2 otherwise (measured: +47 ms to
    its CPU with libgit2, +9 ms with ``git ls-files``)."""
    # lazy: only where an older acpmem's log is there (an upgrade), never on the per-turn paths
    from acpmem.vault.gitrun import tracked

    root = old.parent.parent
    found = tracked(root, os.path.relpath(old, root))
    return found is None or bool(found)


def find_done(state_dir: Path, request_id: str) -> dict | None:
    for rec in reversed(read_done(state_dir)):
        if rec.get("request") == request_id:
            return rec
    return None


def new_request_id(rng) -> str:
    return "r-" + random_id(rng, 8)


def check_host_args(host: dict) -> dict:
    """The host's own arguments of a ``memory_commit`` (``session``, ``seq``, ``transcript``, as an MCP client may add
    them), checked before anything uses them: an empty value means "not given"; anything else must be what
    ``make_request`` accepts (a seq as an int). Raises ``UsageError``."""
    out = {}
    session = host.get("session")
    if session not in (None, ""):
        why = limits.session_problem(session)
        if why:
            raise UsageError(f"a session id {why}, got {limits.clip(session)}", "pass the host's session id as text")
        out["session"] = session
    seq = host.get("seq")
    if seq is not None:
        out["seq"] = limits.int_arg(seq, 0, MAX_SEQ)
        if out["seq"] is None:
            raise UsageError(f"seq must be an integer 0..{MAX_SEQ}, got {limits.clip(seq)}",
                             "pass the host's event index of the memory_commit call")
    transcript = host.get("transcript")
    if transcript not in (None, ""):
        why = limits.path_problem(transcript)
        if why:
            raise UsageError(f"the transcript path {why}, got {limits.clip(transcript)}",
                             "pass the path of the file the host wrote")
        out["transcript"] = transcript
    return out


def make_request(*, types: tuple[str, ...], type: str, note: str, importance: int | str, session: str,
                 seq: int | str, transcript: str | os.PathLike | None, host_tools: str | os.PathLike | None,
                 lang: str, created: str, request_id: str, cwd: Path | None = None, inline: bool = False,
                 block: str | None = None, policy: str = "auto", deferred: str | None = None,
                 extractor: str | None = None, base_url: str | None = None, model: str | None = None,
                 scope: str | None = None, api_key: str | None = None) -> Request:
    """Validate a commit's arguments (the model's and the host's) and build the request. The note is redacted here,
    before it reaches any file; the secret kinds found are kept in ``redacted``. ``extractor`` (``offline`` or
    ``llm``), ``base_url`` and ``model``: how it is to be extracted (``Request``); ``api_key``: the key it is made
    with, recorded only as ``key_id``."""
    # lazy: `stats` does not need it (measured +4.7 ms to its start-up)
    from acpmem.core.tools import parse_commit_args

    args = parse_commit_args({"type": type, "note": note, "importance": importance, "block": block}, types)
    why = limits.session_problem(session)
    if why:
        raise UsageError(f"a session id {why}, got {limits.clip(session)}",
                         "pass the host's session id (1–512 characters) with --session")
    given = seq
    seq = limits.int_arg(seq, 0, MAX_SEQ)
    if seq is None:
        raise UsageError(f"seq must be an integer 0..{MAX_SEQ}, got {limits.clip(given)}",
                         "pass the host's event index of the memory_commit call with --seq")
    for name, value in (("transcript", transcript), ("host tools", host_tools)):
        why = None if value is None else limits.path_problem(value)
        if why:
            raise UsageError(f"the {name} path {why}, got {limits.clip(value)}",
                             "pass the path of the file the host wrote")
    # lazy: `stats` does not need it (measured +5.8 ms to its start-up)
    from acpmem.core.redact import redact

    note_clean, found = redact(args.note)

    def absolute(p):
        if p is None or p == "":
            return None
        q = files.expand_home(p, "the path")
        return str(q if q.is_absolute() else (cwd or Path.cwd()) / q)

    return Request(id=request_id, created=created, type=args.type, note=note_clean, importance=args.importance,
                   session=session.strip(), seq=seq,
                   ack=ack_text(request_id, lang, inline=inline, policy=policy, deferred=deferred,
                                conversation=transcript not in (None, "")),
                   transcript=absolute(transcript), host_tools=absolute(host_tools), lang=lang,
                   redacted=tuple(f.kind for f in found), block=args.block,
                   extractor=extractor if extractor in RECORDED_EXTRACTORS else None,
                   base_url=(base_url or None) if extractor == "llm" else None,
                   model=(model or None) if extractor == "llm" else None,
                   key_id=key_id_for(request_id, api_key) if extractor == "llm" else None,
                   scope=scope if scope in ("branch", "global") else None)
