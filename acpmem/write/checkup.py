"""``acp memory doctor`` over the whole vault: the vault's own checks (``acpmem.vault.health``) and the pending
extraction work this layer owns — requests that failed and when they are tried again, those that failed for good,
request files that do not parse.
"""
from __future__ import annotations

from acpmem.vault.health import Report
from acpmem.vault.health import doctor as vault_doctor
from acpmem.write import requests, worker


def doctor(vault, *, fix: bool = False) -> Report:
    """Check (and with ``fix`` repair what is safe in) the vault, its git state, the index and the pending work."""
    return vault_doctor(vault, fix=fix, more=(check_requests,))


def check_requests(vault, add) -> None:
    """Pending work: requests whose extraction failed (and when they are tried again), those that failed for
    good, and request files that do not parse."""
    reqs, broken = requests.list_requests(vault.state_dir)
    pending = requests.pending_dir(vault.state_dir)
    for name in broken:
        add("error", f"{pending / name} is not a valid request file",
            "fix it by hand, or delete it to drop that request")
    waiter = worker.retry_waiter(vault.state_dir)
    for r in reqs:
        last = (r.last_error or {}).get("message", "")
        if r.status == "failed":
            add("error", f"request {r.id} failed for good after {r.attempts} attempts: {last}",
                f"fix the cause, then `acp memory extract {r.id}` (or `--failed` for all); delete "
                f"{pending / (r.id + '.json')} to drop it")
        elif r.attempts:
            when = f"tried again at {r.next_attempt}" if r.next_attempt else "tried again by the next worker"
            who = f" (process {waiter} waits for it)" if waiter else ""
            add("warning", f"request {r.id} failed {r.attempts} time(s) ({last}); {when}{who}",
                f"`acp memory extract {r.id}` tries it now")
    waiting = [r for r in reqs if r.status == "pending" and not r.attempts]
    if waiting:
        add("info", f"{len(waiting)} request(s) waiting for extraction")
