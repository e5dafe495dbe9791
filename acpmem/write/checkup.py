"""``acp memory doctor`` over the whole vault: the vault's own checks (``acpmem.vault.health``) and the pending
extraction work this layer owns — requests that failed and when they are tried again, those that failed for good,
request files that do not parse.
"""
from __future__ import annotations

from acpmem.core.errors import AcpmemError
from acpmem.vault.health import Finding, Report
from acpmem.vault.health import doctor as vault_doctor
from acpmem.write import requests, worker


def doctor(vault, *, fix: bool = False) -> Report:
    """Check (and with ``fix`` repair what is safe in) the vault, its git state, the index and the pending work —
    and the same in the user vault read beside it. The user vault's findings carry ``layer = "user"`` and are never
    errors of the project: an error there is reported as a warning (the project vault works without it)."""
    user = vault.user if vault.layer == "project" else None
    theirs = set(user.warnings) if user is not None else set()
    rep = vault_doctor(vault, fix=fix, more=(check_requests, check_staleness))
    found = [f.with_changes(layer="user" if f.what.startswith("the user vault ") else vault.layer)
             for f in rep.findings if not (f.level == "warning" and f.what in theirs)]   # said below, as its own
    if user is not None:
        found += user_findings(user, fix=fix)
    return Report(tuple(found))


def user_findings(user, *, fix: bool = False) -> list[Finding]:
    """The user vault's doctor findings, labelled ``user``, its errors demoted to warnings (``error`` → ``warning``
    with "user vault:" in front, so the text says what it is about)."""
    try:
        rep = vault_doctor(user, fix=fix, more=(check_requests,))
        found = list(rep.findings)
    except AcpmemError as exc:   # e.g. --fix in a user vault whose repository is broken
        found = [Finding("error", exc.message, exc.hint)]
    return [f.with_changes(level="warning" if f.level == "error" else f.level, what=f"user vault: {f.what}",
                           layer="user") for f in found]


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
    deferred = [r for r in reqs if r.status == "pending" and r.deferred]
    if deferred:
        from acpmem.write import budget

        st = budget.current(vault.state_dir, vault.clock(), vault.settings.extraction)
        why = st.reason if st is not None and st.over else deferred[0].deferred
        add("warning", f"{len(deferred)} request(s) deferred: over the extraction budget ({why}); they are "
            f"extracted from {min(r.next_attempt or '' for r in deferred)} on",
            "wait, or raise [extraction] max_tokens_per_day / max_requests_per_hour in acpmem.toml")
    from acpmem.vault.proposals import proposals

    good, bad = proposals(vault)
    for rel, why in bad:
        add("error", f"{rel} is not a valid proposal: {why}", f"fix it by hand, or `git -C {vault.root} rm {rel}`")
    if good:
        add("info", f"{len(good)} proposal(s) wait for review", "`acp memory review`")
    waiting = [r for r in reqs if r.status == "pending" and not r.attempts and not r.deferred]
    if waiting:
        add("info", f"{len(waiting)} request(s) waiting for extraction")


def check_staleness(vault, add) -> None:
    """Entries whose project files changed since they were written (``acpmem.vault.projectgit``), and entries whose
    cited transcript is gone, changed or unreadable (``acpmem.write.citecheck``). Said only when there are some."""
    from acpmem.vault.projectgit import checks_on, stale_map
    from acpmem.write.citecheck import check_entries

    if not checks_on():
        return
    entries = vault.load(with_reads=False).live()
    stale = stale_map(vault)
    if stale:
        ids = ", ".join(f"#{i}" for i in sorted(stale)[:5]) + (" …" if len(stale) > 5 else "")
        add("info", f"{len(stale)} {'entry' if len(stale) == 1 else 'entries'} may be stale: project files "
            f"{'it is' if len(stale) == 1 else 'they are'} about changed since written ({ids})",
            "`acp memory stale` names the commits; `acp memory review --stale` confirms or forgets each")
    checked = check_entries(vault, entries)
    for status, said in (("gone", "a transcript that is gone"), ("changed", "turns that changed since written"),
                         ("unreadable", "a transcript that does not read")):
        ids = sorted(i for i, c in checked.items() if c.status == status)
        if ids:
            add("warning", f"{len(ids)} {'entry cites' if len(ids) == 1 else 'entries cite'} {said} "
                f"({', '.join('#' + i for i in ids[:5])}{' …' if len(ids) > 5 else ''})",
                "`acp memory show ID` says which citation; the entry is still served, marked")
