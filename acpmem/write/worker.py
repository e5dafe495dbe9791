"""The background worker: one detached process per vault drains the pending requests, then exits.

The worker lock (``acpmem.infra.locks`` on ``.git/acpmem/worker.flock``, beside the queue: deleting ``.acpmem/``
never lets a second worker take a fresh lock beside the one still held) says whoever holds it is the only process
extracting in that vault. ``submit`` writes its request first and only then tries the lock: when it wins, it hands
the locked descriptor to the worker it starts (``acpmem.infra.detach``), so two commits at once start one worker.
The worker drains what is due, releases the lock, looks again, and only exits when the queue is empty after the
release: a request written while it was deciding to exit is either seen by that last look or finds the lock free
and starts a new worker.

Exactly once: a request is removed only after its commit exists, and before applying anything the history is
searched for the request's ``Acpmem-Request`` trailer (``acpmem.write.fork.process_request``).
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from acpmem.core.clock import parse_iso, utc_iso
from acpmem.core.errors import AcpmemError
from acpmem.infra import locks
from acpmem.write import requests

WORKER_LOCK = "worker.flock"          # not *.lock: lock files that stay are not leftovers
WORKER_LOG = "worker.log"
RETRY_LOCK = "worker-retry.flock"     # held by the one process waiting for scheduled retries
WORKER_IDLE_WAIT_S = requests.BACKOFF_CAP_S   # a retry scheduled this soon is waited for; later ones by the next worker
MAX_LOG_BYTES = 1_000_000


def lock_path(state_dir: Path) -> Path:
    return requests.queue_home(state_dir) / WORKER_LOCK


def try_worker_lock(state_dir: Path) -> int | None:
    """The worker lock's descriptor if it was free (now held), else None."""
    return locks.try_lock(lock_path(state_dir))


def start_worker(root: Path, state_dir: Path) -> bool:
    """Start a detached worker (``acpmem.infra.detach``) unless one holds the lock. True when this call started it."""
    # lazy: `stats` does not need it (measured +0.1 ms to its start-up)
    from acpmem.infra.detach import reap, spawn

    reap()
    fd = try_worker_lock(state_dir)
    if fd is None:
        return False
    spawn(fd, f"from acpmem.write.worker import worker_main; worker_main({str(root)!r}, {{fd}})",
          Path(state_dir) / WORKER_LOG, MAX_LOG_BYTES)
    return True


def process_now(vault, ids: list[str], *, extractor: str | None = None, env=None,
                progress: Callable[[str, str], None] | None = None,
                after_each: Callable[..., None] | None = None, lock_timeout: float = 300.0,
                then_hand_over: bool = True) -> list:
    """Extract the named requests in this process (``commit --wait``, ``extract``), holding the worker lock so no
    worker works on them at the same time; runs them even when they wait for their backoff or failed for good.
    Returns their ``fork.Outcome`` values; ``after_each`` gets each as it is done. Then (unless ``then_hand_over`` is false: the caller does it) a worker
    is started for what stays pending (``hand_over``)."""
    # lazy: `stats` does not need it (measured +109 ms to its start-up)
    from acpmem.write.fork import process_request

    vault.require_writable()
    outcomes = []
    with locks.held(lock_path(vault.state_dir), lock_timeout,
                    what="the extraction worker of this vault has been busy",
                    hint="retry later; `acp memory stats` lists the pending requests"):
        for rid in ids:
            outcomes.append(process_request(vault, rid, extractor=extractor, explicit=True, env=env,
                                            progress=progress))
            if after_each:
                after_each(outcomes[-1])
    if then_hand_over:
        hand_over(vault)
    return outcomes


def hand_over(vault, *, retries: bool = False) -> str:
    """After holding the worker lock without being the worker: start one when a request is due (a request
    submitted meanwhile found the lock taken and was told a worker runs) — with ``retries``, also when one is
    scheduled for a retry (``commit --wait`` that failed: the worker waits for its schedule, ``run_worker``; not
    one deferred by an extraction budget, which the next worker after the budget frees takes). The
    worker itself looks again the same way when it releases the lock. Returns ``started``, ``running`` (a worker
    holds the lock), ``none`` (nothing to hand over) or ``failed`` (it could not be started: said in
    ``vault.warnings``)."""
    now = utc_iso(vault.clock())
    try:
        if not any(r.due(now) or (retries and r.status == "pending" and not r.deferred)
                   for r in requests.list_requests(vault.state_dir)[0]):
            return "none"
        return "started" if start_worker(vault.root, vault.state_dir) else "running"
    except OSError as exc:
        vault.warnings.append(f"could not start the background worker ({exc}); pending requests stay pending")
        return "failed"


def worker_main(root: str, lock_fd: int | None = None) -> None:
    """The detached worker: drain the due requests, then exit (one worker per vault, none left behind)."""
    # lazy: `stats` does not need it (measured +16 ms to its start-up)
    from acpmem.vault.writer import Vault

    with contextlib.suppress(OSError):
        os.chdir(root)   # never keep the caller's folder busy
    vault = Vault(Path(root))
    try:
        run_worker(vault, lock_fd)
        if vault.settings.embeddings.model:     # what was written gets its vectors in the background
            # lazy: `stats` does not need it (measured +36 ms to its start-up)
            from acpmem.read.embedding import start_background

            start_background(vault.root, vault.state_dir)
    finally:
        vault.close()


def _log(msg: str) -> None:
    sys.stderr.write(f"{utc_iso(datetime.now(timezone.utc))} [{os.getpid()}] {msg}\n")
    sys.stderr.flush()


def retry_lock_path(state_dir: Path) -> Path:
    return requests.queue_home(state_dir) / RETRY_LOCK


def retry_waiter(state_dir: Path) -> int | None:
    """The pid of the process waiting for the vault's scheduled retries (0 if unknown), or None when none waits."""
    return locks.holder(retry_lock_path(state_dir))


def run_worker(vault, lock_fd: int | None = None, *, idle_wait: float = WORKER_IDLE_WAIT_S,
               sleep: Callable[[float], None] = time.sleep, log: Callable[[str], None] = _log) -> int:
    """Drain the queue while holding the worker lock, then wait for the retries it scheduled; returns how many
    requests were processed. ``lock_fd`` is the descriptor handed over by ``start_worker`` (already locked); without
    it the lock is taken here or not at all.

    Retries keep their own schedule: a failed request is pending with a ``next_attempt`` (exponential backoff, at most
    ``requests.MAX_ATTEMPTS`` tries). When nothing is due but a retry is scheduled within ``idle_wait`` seconds, the
    worker waits for it — without the worker lock, so ``commit --wait``, ``extract`` or a new worker are never held
    up, and holding the retry lock, so only one process per vault waits."""
    # lazy: `stats` does not need it (measured +109 ms to its start-up)
    from acpmem.write.fork import process_request

    fd = lock_fd if lock_fd is not None else try_worker_lock(vault.state_dir)
    if fd is None:
        return 0
    if vault.settings.write.policy == "off":   # requests queued before stay pending until writes are on again
        os.close(fd)
        log("writes are off (write.policy = off): pending requests stay pending")
        return 0
    done = 0
    requests.prune_temp_files(vault.state_dir)
    try:
        while True:
            if _gone(vault):
                log("stopped: the vault's folder is gone (deleted meanwhile); nothing is written for it")
                return done
            now = utc_iso(vault.clock())
            due = [r for r in requests.list_requests(vault.state_dir)[0] if r.due(now)]
            if due:
                try:
                    log(process_request(vault, due[0].id).summary())
                except AcpmemError as exc:  # the vault cannot be written now (no git, …): stop, keep the queue
                    log(f"stopped: {exc}; {len(due)} request(s) stay pending, the next commit starts a worker")
                    return done
                done += 1
                continue
            # Release, then look once more: a request written just before the release is seen here, one written
            # after it finds the lock free and starts its own worker.
            os.close(fd)
            fd = None
            reqs = requests.list_requests(vault.state_dir)[0]
            now = utc_iso(vault.clock())
            if not any(r.due(now) for r in reqs):
                scheduled = [parse_iso(r.next_attempt) for r in reqs if r.status == "pending" and r.next_attempt]
                delay = (min(scheduled) - vault.clock()).total_seconds() if scheduled else None
                if delay is None or delay > idle_wait or not _wait_for_retry(vault, delay, sleep, log):
                    return done
            fd = try_worker_lock(vault.state_dir)
            if fd is None:
                return done    # another worker runs: it does what is due
    finally:
        if fd is not None:
            os.close(fd)


def _gone(vault) -> bool:
    """The vault's folder (or its git) was deleted while the worker ran: writing on would make a stray
    ``.acpmem/`` in its place."""
    return not (vault.root / ".git").exists()


def _wait_for_retry(vault, delay: float, sleep: Callable[[float], None], log: Callable[[str], None]) -> bool:
    """Sleep until the next scheduled retry as the vault's one retry waiter; False when another process waits."""
    rfd = locks.try_lock(retry_lock_path(vault.state_dir))
    if rfd is None:
        return False
    try:
        locks.write_holder(rfd, os.getpid())
        log(f"waiting {delay:.0f} s for the next scheduled retry")
        deadline = time.monotonic() + max(delay, 0.0)
        while (left := deadline - time.monotonic()) > 0:
            sleep(min(left, 1.0))
            if _gone(vault):
                return False
        return True
    finally:
        os.close(rfd)
