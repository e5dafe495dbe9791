"""acpmem — cross-session long-term memory for LLM agents.

The library owns the algorithms (entry model, selection and decay, recall, the tool interface); the CLI, the MCP
server and the hooks are thin adapters over it. Everything the CLI does is importable from here; names are
resolved lazily so ``import acpmem`` stays cheap for hooks::

    from acpmem import Vault, resident_index, recall, submit
    v = Vault.open("/path/to/.acp-memory")
    print(resident_index(v, session="s1"))
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "Vault": "acpmem.vault", "init_vault": "acpmem.vault", "discover": "acpmem.vault",
    "Entry": "acpmem.model", "Citation": "acpmem.model", "parse_entry": "acpmem.model", "dump_entry": "acpmem.model",
    "Settings": "acpmem.settings", "load_settings": "acpmem.settings",
    "list_entries": "acpmem.api", "resident_index": "acpmem.api", "scores": "acpmem.api", "show": "acpmem.api",
    "doctor": "acpmem.api",
    "rank": "acpmem.score", "score_entry": "acpmem.score",
    "recall": "acpmem.retrieval", "surface": "acpmem.retrieval",
    "submit": "acpmem.queue",
    "tool_definitions": "acpmem.tools", "nudge_text": "acpmem.tools",
    "read_transcript": "acpmem.transcript",
    "AcpmemError": "acpmem.errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'acpmem' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
