"""The proposals of a vault (``proposals/``, under ``[write] policy = "review"``) as the read side sees them: the
list, and one found by id. What ``show`` and ``stats`` need, without the review machinery (``acpmem.upkeep.review``,
which decides them and imports the writer).
"""
from __future__ import annotations

import os

from acpmem.core import layout
from acpmem.core.entry import Entry
from acpmem.core.entryfile import MAX_FILE_BYTES, parse_entry_bytes
from acpmem.core.errors import EntryInvalid
from acpmem.infra.files import NotRegularFile, read_regular


def proposals(vault) -> tuple[list[Entry], list[tuple[str, str]]]:
    """The proposals (valid ones, oldest file name first) and the files under ``proposals/`` that do not parse
    (path, reason)."""
    folder = vault.root / layout.PROPOSALS_DIR
    good, bad = [], []
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".md") and not n.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    for name in names:
        rel = f"{layout.PROPOSALS_DIR}/{name}"
        p = folder / name
        if p.is_symlink():
            bad.append((rel, "a symlink"))
            continue
        try:
            data = read_regular(p, MAX_FILE_BYTES + 1)
            good.append(parse_entry_bytes(data, rel, vault.settings.types).with_changes(path=rel))
        except EntryInvalid as exc:
            bad.append((rel, exc.message))
        except NotRegularFile as exc:   # a FIFO would hang the review: never opened
            bad.append((rel, f"{exc.strerror} (acpmem reads only regular files); remove it"))
        except OSError as exc:
            bad.append((rel, f"cannot be read ({exc.strerror})"))
    return good, bad


def find_proposal(vault, prefix: str) -> tuple[str, Entry] | None:
    """The proposal (in either layer) with this id or unique id prefix, and its layer; None when there is none
    (``show`` of a proposal says it awaits review instead of "no entry")."""
    wanted = (prefix or "").strip().lstrip("#")
    if not wanted:
        return None
    found = [(lv.layer, e) for lv in vault.layers() for e in proposals(lv)[0]]
    hits = [p for p in found if p[1].id == wanted] or [p for p in found if p[1].id.startswith(wanted)]
    return hits[0] if len(hits) == 1 else None


__all__ = ["proposals", "find_proposal"]
