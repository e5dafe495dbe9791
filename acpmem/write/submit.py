"""``submit``: the library call behind ``acp memory commit``, the MCP server and the hooks. It records a
``memory_commit`` durably (``acpmem.write.requests``) and has it extracted — by the vault's background worker
(``acpmem.write.worker``, started if none runs; the call returns at once) or inline with ``wait``.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from acpmem.core.clock import utc_iso
from acpmem.core.errors import AcpmemError, TranscriptError, UsageError
from acpmem.core.limits import clip, int_arg, path_problem
from acpmem.core.tools import parse_block_arg, parse_commit_args
from acpmem.core.values import Value
from acpmem.infra.files import expand_home
from acpmem.hosts.transcripts import last_seq, read_transcript
from acpmem.read.sources import record_request_transcript, record_transcript
from acpmem.write import requests
from acpmem.write.llm import resolve_model_config, with_served_model
from acpmem.write.worker import hand_over, process_now, start_worker


class Ack(Value):
    """What ``submit`` returns: the request id, the acknowledgement text for the model, the request file, how the
    extraction runs (``started`` a new worker, ``running`` one was already at work, ``deferred`` none could be
    started — the request waits for the next worker or ``extract --pending`` —, ``inline`` with ``wait``, ``off``
    when ``[write] policy = "off"``: no request, empty ``request_id`` and ``path``), the write policy, and with
    ``wait`` the outcome (``acpmem.write.fork.Outcome``)."""

    request_id: str
    text: str
    path: str
    worker: str
    outcome: Any = None
    policy: str = "auto"
    deferred: str | None = None
    retry: dict | None = None   # with ``wait``, when it stays pending: ``at`` (its next attempt) and ``worker``
    #                             (``started`` / ``running``: the background worker retries it; ``failed``: none)

    def to_json(self) -> dict:
        d = {"request": self.request_id, "text": self.text, "path": self.path, "worker": self.worker,
             "policy": self.policy, "deferred": self.deferred}
        if self.retry is not None:
            d["retry"] = self.retry
        if self.outcome is not None:
            d["outcome"] = self.outcome.to_json()
        return d


def check_readable(path: str | os.PathLike | None, what: str, hint: str) -> None:
    """A file named at commit time must be there now: the fork reads it later, in the background, where nobody
    would see the error."""
    if path is None or path == "":
        return
    why = path_problem(path)
    if why:
        raise UsageError(f"the {what} path {why}, got {clip(path)}", hint)
    p = expand_home(path, f"the {what} path")
    try:
        st = p.stat()
    except FileNotFoundError:
        raise TranscriptError(f"{p}: no such {what}", hint) from None
    except (OSError, ValueError) as exc:
        raise TranscriptError(f"{p}: cannot read the {what} ({getattr(exc, 'strerror', None) or exc})", hint) from None
    if not stat.S_ISREG(st.st_mode):
        raise TranscriptError(f"{p}: the {what} is not a file", hint)
    if not os.access(p, os.R_OK):
        raise TranscriptError(f"{p}: cannot read the {what} (permission denied)", "check the file's permissions")


def check_block(transcript: str | os.PathLike | None, block: str):
    """A block named at commit time must be in the transcript now (``TranscriptError`` naming those there are).
    Returns the transcript as read for its blocks (``read_transcript(…, turns=())``: a scan of a DSH log)."""
    block = parse_block_arg(block)
    if transcript is None or transcript == "":
        raise UsageError(f"block {block} is named without a transcript",
                         "pass the session log that has the block (--transcript), or commit without --block")

    t = read_transcript(expand_home(transcript, "the transcript path"), turns=())
    t.block(block)
    return t


def check_transcript(transcript: str | os.PathLike | None, seq: int | None, block: str | None = None) -> None:
    """What the fork will need from the transcript, checked now, where the caller sees the error (one
    ``TranscriptError`` with the next step), not later in the background: it parses (UTF-8, JSON, a zstd log that
    decompresses), holds a message, reaches ``seq`` (a turn at or after it: the commit is not beyond its end; and,
    but for a DSH log, which is scanned, a message at or before it: not before its start), and
    holds the ``block`` named (``seq`` None: not checked). Only that is read: the last seq (a DSH log is scanned, not built) and, with a
    block, the blocks."""
    if transcript is None or transcript == "":
        if block not in (None, ""):
            check_block(transcript, block)   # a block without a transcript: the UsageError saying so
        return

    path = expand_home(transcript, "the transcript path")
    last = None
    if block not in (None, ""):
        last = check_block(path, block).last_seq   # a whole read for JSON and JSONL, blocks only for a DSH log
    if last is None:
        last = last_seq(path, reaching=seq)   # and a seq before the first message is refused too
    if last is None:
        raise TranscriptError(f"{path}: no messages in this transcript",
                              "pass the conversation file the host writes for this session")
    if seq is not None and seq > last:
        raise TranscriptError(f"{path}: no turn at seq {seq} (the transcript ends at seq {last})",
                              f"pass the seq of the memory_commit call (at most {last}), or the transcript that "
                              "holds it")


def check_host_tools(path: str | os.PathLike | None) -> None:
    """A ``--host-tools`` file must be what the fork sends (``acpmem.write.context.load_host_tools``): now, not when a
    worker builds the request."""
    if path is None or path == "":
        return
    check_readable(path, "tool definition file", "pass the host's tools as a JSON file")
    # lazy: `commit` does not need it (measured +4.7 ms to its start-up)
    from acpmem.write.context import load_host_tools

    # Refused: the file's content, exit 1 like a bad transcript
    load_host_tools(str(expand_home(path, "the tool definition file")))


def submit(vault, *, type: str, note: str, importance: int, session: str, seq: int,
           transcript: str | os.PathLike | None = None, wait: bool = False,
           host_tools: str | os.PathLike | None = None, extractor: str | None = None,
           block: str | None = None, scope: str | None = None,
           on_recorded: Callable[[str, str], None] | None = None) -> Ack:
    """Record a ``memory_commit`` durably and have it extracted: in a detached background worker (the default; returns
    at once) or inline with ``wait``. ``vault`` is a ``VaultReader`` (a ``Vault`` with ``wait``). Never takes memory content: only the intent (type, note,
    importance) and where the conversation is (session, seq, transcript). ``block`` names a compression block of the
    transcript (``b12``) as the focus: it must be there now. ``on_recorded(request id, acknowledgement)``: called
    once the request is durable, before ``wait`` extracts it (``commit --wait`` prints the acknowledgement then, so
    a Ctrl-C while the model works cannot lose it). Raises ``EntryInvalid``/``UsageError``/``TranscriptError``
    for bad arguments, before anything is written."""
    vault.require_writable()
    if scope not in (None, "branch", "global"):
        raise UsageError(f"a scope is branch or global, got {clip(scope)}", "pass --branch or --global")
    settings = vault.settings
    policy = settings.write.policy
    if policy == "off":   # checked first: nothing is validated, recorded or started

        parse_commit_args({"type": type, "note": note, "importance": importance}, settings.types)
        return Ack("", requests.off_text(settings.language), "", "off", None, policy)
    if not (vault.root / ".git").exists():
        # refused now, as remember is: "Noted" would tell the model its memory was kept, and the worker would then
        # fail on its schedule in the background
        # lazy: `commit` does not need it (measured +6.9 ms to its start-up)
        from acpmem.vault.gitrun import no_repository

        raise no_repository(vault.root)
    check_readable(transcript, "transcript", "pass the conversation file the host writes for this session")
    check_host_tools(host_tools)
    at = int_arg(seq, 0, requests.MAX_SEQ)   # an unusable seq is make_request's error, below
    if at is not None:
        check_transcript(transcript, at, block)
    elif block not in (None, ""):
        check_block(transcript, block)
    vault.ensure_state()
    over = None
    how = settings.extraction.extractor if extractor in (None, "") else extractor
    if how not in ("auto", *requests.RECORDED_EXTRACTORS):
        raise UsageError(f"Unknown extractor '{clip(how)}'", "use --extractor auto | llm | offline")
    config = None
    if how != "offline":
        # an endpoint without a model: find the one it serves now, or say what to set — not later, in the background
        config = with_served_model(resolve_model_config(settings.extraction), vault.state_dir)
        if not config.configured:
            if how == "llm":
                said = "--extractor llm" if extractor else "[extraction] extractor = \"llm\""
                raise AcpmemError(f"{said}, but no model endpoint is configured",
                                  "set OPENAI_API_KEY (and OPENAI_MODEL / OPENAI_BASE_URL for other endpoints) or "
                                  "[extraction] in your own config (~/.config/acpmem/config.toml; a vault's "
                                  "acpmem.toml cannot choose it), or use --extractor offline")
            config, how = None, "offline"   # auto without an endpoint: the offline extractor, as it is recorded
        else:
            how = "llm"
            # lazy: `commit` does not need it (measured +0.8 ms to its start-up)
            from acpmem.write import budget

            if budget.limited(settings.extraction):
                over = budget.current(vault.state_dir, vault.clock(), settings.extraction)
                over = over if over is not None and over.over else None
    for _ in range(20):
        rid = requests.new_request_id(vault.rng)
        req = requests.make_request(types=settings.types, type=type, note=note, importance=importance,
                                    session=session, seq=seq, transcript=transcript, host_tools=host_tools,
                                    lang=settings.language, created=utc_iso(vault.clock()), request_id=rid,
                                    inline=wait, block=block, policy=policy,
                                    deferred=over.frees_at if over else None, extractor=how,
                                    base_url=config.base_url if config else None,
                                    model=config.model if config else None, scope=scope,
                                    api_key=config.api_key if config else None)
        if over is not None:   # waits, not attempted, until the budget frees (``acpmem.write.budget``)
            req = req.with_changes(deferred=over.reason, next_attempt=over.frees_at)
        try:
            path = requests.save_request(vault.state_dir, req, new=True)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 20 collisions of 40 random bits
        raise AcpmemError("could not pick a free request id", "retry")
    if req.transcript:
        record_transcript(vault, req.session, req.transcript, "commit")
        record_request_transcript(vault, req.session, req.id, req.transcript)
    if on_recorded is not None:
        on_recorded(req.id, req.ack)
    if wait:
        outcomes = process_now(vault, [req.id], then_hand_over=False)   # as the request records it
        retry = None
        left = requests.load_request(vault.state_dir, req.id)
        # what failed here stays pending, and the background worker retries it on its schedule
        who = hand_over(vault, retries=left is not None and left.status == "pending" and not left.deferred)
        if left is not None and left.status == "pending":
            retry = {"at": left.next_attempt, "worker": who}
        return Ack(req.id, req.ack, str(path), "inline", outcomes[0] if outcomes else None, policy, req.deferred,
                   retry)
    try:
        state = "started" if start_worker(vault.root, vault.state_dir) else "running"
    except OSError as exc:
        # The request is durable: the next commit's worker or `acp memory extract --pending` takes it.
        vault.warnings.append(f"could not start the background worker ({exc}); the request stays pending")
        state = "deferred"
    return Ack(req.id, req.ack, str(path), state, None, policy, req.deferred)
