"""A vault for the per-prompt surfacing tests of the hosts (pi, DSH): one entry a user's message is about, among many
that it is not, so what reaches the model request is the prompt's choice, not the whole memory.

Not a test file: tests/test_pi_plugin.py and tests/test_dsh_plugin.py import it.

    target = fill_vault(project / ".acp-memory")   # the id of the entry PROMPT is about
    # ... the host sends PROMPT; the request carries DETAIL (the entry's body, which the resident index does not)
"""
from __future__ import annotations

from pathlib import Path

PROMPT = "Which port does the billing webhook listen on in staging?"
TITLE = "The billing webhook listens on port 8443 in staging"
DETAIL = "the staging load balancer keeps 443 for the dashboard, so the webhook got 8443"
OTHERS = 40

_TOPICS = ["lint rules", "cache eviction", "font loading", "image thumbnails", "release notes", "cron schedule",
           "log rotation", "docker layers", "unit fixtures", "locale strings", "keyboard shortcuts", "dark theme",
           "pagination size", "search synonyms", "avatar upload", "password hashing", "session cookies", "csv export",
           "pdf rendering", "email templates"]


def fill_vault(root: Path) -> str:
    """Write the entry ``PROMPT`` is about and ``OTHERS`` entries of other work into the vault at ``root``, in one
    commit; returns the target entry's id."""
    from acpmem.core.entry import Citation, Entry
    from acpmem.vault.writer import Vault

    v = Vault(root)
    try:
        taken: set[str] = set()
        made = []

        def entry(title: str, body: str, typ: str, importance: int) -> Entry:
            ident = v.new_id(taken)
            taken.add(ident)
            e = Entry(id=ident, title=title, type=typ, importance=importance, created="2026-11-01T10:00:00Z",
                      body=body + "\n", citation=(Citation("s-earlier", 4),))
            return e.with_changes(path=v.path_for(ident, title))

        target = entry(TITLE, f"- Stripe posts to /hooks/billing on port 8443: {DETAIL}.", "fact", 5)
        made.append(target)
        for n in range(OTHERS):
            topic = _TOPICS[n % len(_TOPICS)]
            made.append(entry(f"Keep the {topic} as agreed, round {n}",
                              f"- The {topic} stay as the team agreed in round {n}; change them only with a review.",
                              "decision", 6 + n % 3))   # scored above the target: surfacing by score would skip it
        v.write_entries(made, subject="test: a vault of many entries", why="the per-prompt surfacing tests")
        return target.id
    finally:
        v.close()


def turn_off_prompt_surfacing(root: Path) -> None:
    toml = root / "acpmem.toml"
    text = toml.read_text("utf-8")
    assert "prompt = true" in text
    toml.write_text(text.replace("prompt = true", "prompt = false"), "utf-8")


__all__ = ["fill_vault", "turn_off_prompt_surfacing", "PROMPT", "TITLE", "DETAIL", "OTHERS"]
