"""The JSON Schemas (draft 2020-12) of every command's ``--json`` output and of the error object, shipped as package
data in ``acpmem/data/schemas/`` and printed by ``acp memory schema``. Each file stands alone: ``schema COMMAND``
prints a document a validator can use as it is. A test runs every command on a real vault and validates its output
against these files (docs/json.md lists them).
"""
from __future__ import annotations

import json
from importlib import resources

from acpmem.core.errors import UsageError

# the commands whose --json output has a schema (tools always prints JSON), then the stderr objects
NAMES = ("init", "list", "show", "score", "forget", "log", "doctor", "recall", "surface", "commit", "extract", "tools",
         "blocks", "stats", "remember", "review", "consolidate", "sync", "stale", "embed", "diff", "import", "export",
         "schema", "error", "warning")


def schema_text(name: str) -> str:
    """The schema file's text; an unknown name is a usage error (the set is fixed)."""
    if name not in NAMES:
        raise UsageError(f"no schema named {name!r}", f"one of: {', '.join(NAMES)} (`acp memory schema` lists them)")
    return resources.files("acpmem").joinpath("data", "schemas", f"{name}.json").read_text("utf-8")


def schema(name: str) -> dict:
    return json.loads(schema_text(name))


def listing() -> list[dict]:
    """Every schema: its name and title."""
    return [{"name": n, "title": schema(n)["title"]} for n in NAMES]
