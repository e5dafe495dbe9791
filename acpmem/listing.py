"""What the hot read commands (``list``, ``recall``) print, shared by the typer commands and the fast paths in
``acpmem.entry``.

Kept free of typer and rich so the per-turn ``list --format prompt`` and ``recall`` stay cheap.
"""
from __future__ import annotations

import json
import sys


def list_output(vault, fmt: str, *, include_all: bool = False, session: str | None = None,
                refresh: bool = False, budget: int | None = None) -> str:
    from acpmem import api, render

    if fmt == "prompt":
        return api.resident_index(vault, session=session, refresh=refresh, budget_tokens=budget)
    entries, problems = api.list_entries(vault, include_superseded=include_all, light=fmt != "json")
    entries = sorted(entries, key=lambda e: (e.created, e.id), reverse=True)
    for p in problems:
        sys.stderr.write(f"Warning: skipped {p.path}: {p.reason} (see `acp memory doctor`)\n")
    if fmt == "json":
        return json.dumps({"entries": [render.entry_json(e) for e in entries],
                           "problems": [p.to_json() for p in problems]}, ensure_ascii=False, indent=2) + "\n"
    if fmt == "markdown":
        return render.markdown_list(entries)
    return "\n".join(render.line(e) for e in entries) + ("\n" if entries else "(no entries)\n")


def list_text(vault_path: str | None, opts: dict) -> str:
    if opts["fmt"] == "prompt" and opts["session"] and not opts["refresh"]:
        # The frozen index of a running session (every turn): one file read, no vault machinery.
        from acpmem.discovery import STATE_DIRNAME, discover, session_folder

        try:
            return (session_folder(discover(vault_path) / STATE_DIRNAME, opts["session"]) / "index.txt").read_text("utf-8")
        except FileNotFoundError:
            pass
    from acpmem.api import VaultReader  # reading only: the write machinery (acpmem.vault) stays unimported

    v = VaultReader.open(vault_path)
    try:
        return list_output(v, opts["fmt"], include_all=opts["include_all"], session=opts["session"],
                           refresh=opts["refresh"], budget=opts["budget"])
    finally:
        v.close()


def recall_output(vault, query: str, *, limit: int | None = None, types: list[str] | None = None,
                  include_all: bool = False, session: str | None = None, as_json: bool = False) -> str:
    from acpmem.retrieval import recall, recall_text

    hits = recall(vault, query, limit=limit if limit is not None else vault.settings.recall.limit,
                  types=types or None, include_superseded=include_all, session=session)
    if as_json:
        return json.dumps({"query": query, "hits": [h.to_json() for h in hits]}, ensure_ascii=False, indent=2) + "\n"
    text = recall_text(vault, hits)
    return text if text.endswith("\n") else text + "\n"
