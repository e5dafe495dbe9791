"""The journal file of a change being written: its format, parsed strictly."""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from acpmem.core import layout
from acpmem.core.errors import UsageError

JOURNAL = "journal.json"


JOURNAL_MAX_BYTES = 1 << 30   # a journal holds whole entries: bounded by the vault


JOURNAL_TRAILER = "Acpmem-Journal"   # in the commit of a journaled change: recovery knows it happened


def inside(root: Path, rel: str) -> Path:
    """Resolve a vault-relative path, refusing anything that leaves the vault."""
    if not rel or "\x00" in rel or os.path.isabs(rel) or ".." in Path(rel).parts:
        raise UsageError(f"path {rel!r:.60} leaves the vault", "paths are relative to the vault, without '..'")
    p = root / rel
    parent = p.parent.resolve()
    if parent != root.resolve() and root.resolve() not in parent.parents:
        raise UsageError(f"path {rel!r:.60} leads out of the vault through a symlink", "remove the symlink")
    if p.is_symlink():
        raise UsageError(f"{rel} is a symlink; acpmem does not write through symlinks", "replace it with a file")
    return p


class BadJournal(Exception):
    pass


UNKNOWN = object()   # a journal of an older acpmem records no hashes


def hash_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_hash(p: Path) -> str | None:
    """The hash of a file's bytes; None when there is no file."""
    try:
        return hash_bytes(p.read_bytes())
    except (FileNotFoundError, NotADirectoryError):
        return None
    except IsADirectoryError:
        return "a folder"


def parse_journal(raw: bytes, root: Path) -> dict:
    """A journal as ``apply`` writes it (or as an older acpmem wrote it, without id and hashes), checked whole:
    ``BadJournal`` says what is wrong — a journal is only replayed when every part of it is what acpmem writes."""
    try:
        j = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadJournal("not JSON; cut short or written by hand") from None
    if not isinstance(j, dict):
        raise BadJournal("not a JSON object")
    writes, deletes = j.get("writes"), j.get("deletes")
    if not isinstance(writes, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in writes.items()):
        raise BadJournal("'writes' is not a map of paths to texts")
    if not isinstance(deletes, list) or not all(isinstance(x, str) for x in deletes):
        raise BadJournal("'deletes' is not a list of paths")
    if not writes and not deletes and "id" not in j:
        raise BadJournal("it names no file")
    for key in ("subject", "why"):
        if not isinstance(j.get(key), str):
            raise BadJournal(f"{key!r} is not text")
    trailers = j.get("trailers")
    if not isinstance(trailers, dict) or not all(isinstance(k, str) and re.fullmatch(r"Acpmem-[A-Za-z-]{1,40}", k)
                                                 and isinstance(v, (str, int, type(None))) for k, v in trailers.items()):
        raise BadJournal("'trailers' is not a map of Acpmem-* keys to texts")
    for rel in list(writes) + deletes:
        try:
            inside(root, rel)
        except UsageError as exc:
            raise BadJournal(exc.message) from None
        if rel.split("/")[0] in (".git", layout.STATE_DIRNAME):
            raise BadJournal(f"path {rel!r:.60} is not a vault file")
    ident = j.get("id")
    if ident is not None and not (isinstance(ident, str) and re.fullmatch(r"[0-9a-f]{16}", ident)):
        raise BadJournal("'id' is not a journal id")
    out = {"id": ident, "writes": writes, "deletes": deletes, "subject": j["subject"], "why": j["why"],
           "trailers": trailers, "before": {}, "after": {}}
    if ident is not None:
        for key in ("before", "after"):
            m = j.get(key)
            if not isinstance(m, dict) or set(m) != set(writes) | set(deletes) or not all(
                    v is None or (isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v)) for v in m.values()):
                raise BadJournal(f"{key!r} is not a hash for each of its files")
            out[key] = m
    else:   # an older acpmem's journal: its new contents are known, its old ones not
        out["after"] = {**{rel: None for rel in deletes},
                        **{rel: hash_bytes(t.encode("utf-8", "surrogatepass")) for rel, t in writes.items()}}
        out["before"] = {rel: UNKNOWN for rel in out["after"]}
    return out
