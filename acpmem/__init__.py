"""acpmem — cross-session long-term memory for LLM agents.

The library owns the algorithms (entry model, selection and decay, recall, the tool interface); the CLI, the MCP
server and the hooks are thin adapters over it. Everything the CLI does is importable from here; names are
resolved lazily so ``import acpmem`` stays cheap for hooks::

    from acpmem import Vault, resident_index, recall, submit
    v = Vault.open("/path/to/.acp-memory")
    print(resident_index(v, session="s1"))
"""
__version__ = "0.1.0"

_EXPORTS = {
    "Vault": "acpmem.vault.writer", "VaultReader": "acpmem.vault.reader",
    "init_vault": "acpmem.vault.create", "discover": "acpmem.vault.discovery",
    "Entry": "acpmem.core.entry", "Citation": "acpmem.core.entry",
    "parse_entry": "acpmem.core.entryfile", "dump_entry": "acpmem.core.entryfile",
    "Settings": "acpmem.core.settings", "load_settings": "acpmem.vault.config",
    "list_entries": "acpmem.vault.reader", "scores": "acpmem.vault.reader", "show": "acpmem.vault.reader",
    "resident_index": "acpmem.read.resident",
    "doctor": "acpmem.upkeep.doctor",
    "rank": "acpmem.core.score", "score_entry": "acpmem.core.score",
    "recall": "acpmem.read.retrieval", "surface": "acpmem.read.retrieval",
    "submit": "acpmem.write.submit", "remember": "acpmem.write.remember",
    "tool_definitions": "acpmem.core.tools", "nudge_text": "acpmem.core.tools",
    "read_transcript": "acpmem.hosts.transcripts",
    "Block": "acpmem.core.blocks", "entry_source": "acpmem.read.sources", "source_text": "acpmem.read.sources",
    "record_transcript": "acpmem.read.sources",
    "AcpmemError": "acpmem.core.errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'acpmem' has no attribute {name!r}")
    # lazy: `importlib` (with `warnings`) is 0.3 ms of every `acp` start-up, a served read's client included (a
    # third of what that client adds to a Python start); only a library caller reaching a name here needs it
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
