"""Vault listings the read server holds for the commands it forks, so that a per-turn read of a vault nobody changed
neither looks at every entry file nor builds every entry again.

Why: at 1,000 entries, a served ``list --format prompt`` spent more than half of its own work on seeing that no file
changed (a ``stat`` per file) and building the entries from the catalog; both give the same answer turn after turn.

How. A command run in a child of the read server (``acpmem.cli.readserver``) that read a vault the long way says so
to the server (``loaded``: one line on a pipe, never waiting). When no request waits the server holds what was read
(``Holder.hold``): it asks the kernel to report every change under the vault's root and ``entries/`` (inotify),
and only then reads it itself — the light or the full listing (``catalog.snapshot``), or the search index's light
entries ``surface`` scores (``ROWS``: the catalog and the index brought up to date first). Before each fork it reads
the reports queued so far (``Holder.drain``, one system call when there are none): the kernel queues them inside
the system call that changes a file, so every change made before the request arrived is among them, and a vault
with one is let go (a queue overflow lets every vault go). A child then takes what is held (``get``, ``by_id``,
``rows``) as the long way would have given it, and skips the look at every file before a search (``current``).
The read times are held apart (``READS``, made by the ``reads_of`` the server passes in): they change at every
read and are checked against the files' bytes by the reader, who says when they are to be taken again
(``READ_TIMES``). Everything else (settings, branches) is read as before; what is held answers only for the same
entry types. A child that had to load the CJK segmenter says so as well (``segmenter_loaded``): the server, which
starts without it, loads it then, for the children after it.

Outside the server ``HELD`` is empty and nothing changes. Not on other systems than Linux (no inotify); not for a
vault larger than ``MAX_ENTRIES`` files, nor past ``MAX_HELD`` entries in all (the oldest vault is let go first);
not on a network file system, where another machine's changes are never reported (``inotify.sees_every_change``). As for
the watcher (``acpmem.search.watch``), an entry file changed through another hard link of it is not reported:
nobody keeps entry files that way.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from acpmem.core import layout
from acpmem.core.clock import parse_iso
from acpmem.search import catalog

MAX_ENTRIES = 20_000    # larger vaults are not held (their watcher keeps the catalog current)
MAX_VAULTS = 8          # vaults held at once (the oldest is let go)
MAX_HELD = 60_000       # entries held in all (at the bench's entry size 1.3 KB each light, 1.7 KB in full)
MAX_REPORT = 4000       # a report is one write on a pipe, whole (PIPE_BUF is 4,096)


LIGHT, FULL, ROWS = "light", "full", "rows"   # what is held of a vault: its light or full listing, its index rows
READ_TIMES = "reads"                          # a report that a held vault's read times grew: take them again
SEGMENTER = "segmenter"                       # a report that a child loaded the segmenter: the server loads it


class HeldListing:
    """What is held of one vault: the entry types it was made for, and either the listing ``catalog.snapshot``
    gave with the entry id of each problem's file (None where the file does not parse: what ``by_id`` needs), or
    the search index's light entries of its live entries (``query.light_entries``: what ``surface`` scores)."""

    __slots__ = ("types", "snapshot", "problem_ids", "rows", "ids", "order", "db_path")

    def __init__(self, types: tuple[str, ...], snapshot: catalog.Snapshot | None = None,
                 problem_ids: dict[str, str | None] | None = None, rows: list[tuple] | None = None):
        self.types, self.snapshot, self.problem_ids, self.rows = types, snapshot, problem_ids or {}, rows
        self.db_path = ""   # the database whose catalog it was read from (``hold``)
        # the entries' ids in sorted order, and the place of each in the listing: ``by_id`` finds a prefix by
        # bisection instead of looking at every entry (in a child, looking at an entry writes its reference count,
        # and the page it is on is copied from the server: ~70 of a `show`'s ~820 copies at 1,000 entries, ~3 µs each)
        entries = snapshot.entries if snapshot is not None else []
        self.order = sorted(range(len(entries)), key=lambda i: entries[i].id)
        self.ids = [entries[i].id for i in self.order]


HELD: dict[tuple[str, str], HeldListing] = {}   # (root, LIGHT|FULL|ROWS) → what is held; only in the read server
READS: dict[str, object] = {}                     # root → what ``Holder``'s ``reads_of`` gave for a held vault
REPORT_FD: list[int] = []                        # in the server's children: where ``loaded`` reports


def get(root: str, types: tuple[str, ...], light: bool) -> catalog.Snapshot | None:
    """The held listing of ``root`` for these entry types, or None."""
    h = HELD.get((root, LIGHT if light else FULL)) if HELD else None
    if h is None or h.types != types:
        return None
    return catalog.Snapshot(list(h.snapshot.entries), list(h.snapshot.problems), catalog.Changes())   # (copies)


def current(root: str, db_path: str) -> bool:
    """Whether something of ``root`` is held, read from the database ``db_path``: then that catalog was brought up
    to date after the kernel began reporting the vault's changes, and none came since (the search index may still
    need ``store.update``). Another database of the same vault — its state kept elsewhere once it became
    read-only, which a remount does without a change the kernel reports — was not."""
    return bool(HELD) and any(k[0] == root and h.db_path == db_path for k, h in HELD.items())


def rows(root: str, types: tuple[str, ...]) -> list[tuple] | None:
    """The held (path, light entry) of ``root``'s live entries of these types in path order
    (``query.light_entries``), or None."""
    h = HELD.get((root, ROWS)) if HELD else None
    return h.rows if h is not None and h.types == types else None


def reads(root: str):
    """What is held of ``root``'s read times (``acpmem.vault.readlog.ReadsState``: checked against the files by the
    reader), or None."""
    return READS.get(root) if READS else None


def by_id(root: str, types: tuple[str, ...], prefix: str) -> catalog.Snapshot | None:
    """What ``catalog.by_id`` gives for ``prefix``, from the held light listing, or None."""
    h = HELD.get((root, LIGHT)) if HELD else None
    if h is None or h.types != types:
        return None
    ids, lo, hi = h.ids, 0, len(h.ids)
    while lo < hi:    # the first id not below the prefix: the ids that start with it follow it, together
        mid = (lo + hi) // 2
        if ids[mid] < prefix:
            lo = mid + 1
        else:
            hi = mid
    at = []
    while lo < len(ids) and ids[lo].startswith(prefix):
        at.append(h.order[lo])
        lo += 1
    entries, problem_ids = h.snapshot.entries, h.problem_ids
    return catalog.Snapshot([entries[i] for i in sorted(at)],       # in the listing's order
                            [p for p in h.snapshot.problems if problem_ids.get(p.path) is None or
                             problem_ids[p.path].startswith(prefix)], catalog.Changes())


def loaded(root: str, db_path: str, types: tuple[str, ...], kind: str) -> None:
    """In a child of the read server: say that ``root`` was read the long way for ``kind`` (the server may hold
    it). Never waits, never fails: a full pipe or a long path is simply not said."""
    if not REPORT_FD:
        return
    parts = (root, db_path, kind, *types)
    if any("\n" in p or "\x1f" in p for p in parts):   # (the report's own separators)
        return
    data = ("\x1f".join(parts) + "\n").encode("utf-8", "surrogateescape")
    if len(data) > MAX_REPORT:
        return
    try:
        os.write(REPORT_FD[0], data)
    except OSError:
        pass


def segmenter_loaded() -> None:
    """In a child of the read server: say that it had to load the CJK segmenter (jieba and its ~30 MB dictionary),
    which the server leaves out until a child needs it: every fork copies the page tables of what the server holds,
    and most vaults never segment a word. The server then loads it, and its next children have it."""
    if REPORT_FD:
        try:
            os.write(REPORT_FD[0], f"\x1f\x1f{SEGMENTER}\n".encode())
        except OSError:
            pass


def _settled(con) -> None:
    """Raise unless the catalog has no racily clean rows: files written a moment ago are read again by the next
    refresh, and held, the catalog would keep them marked (the staleness marks are then worked out anew every read);
    such a vault is held at a later report instead."""
    if catalog.racily_clean(con):
        raise BlockingIOError("written a moment ago")


def _size(held) -> int:
    return sum(len(h.rows) if h.rows is not None else len(h.snapshot.entries) + len(h.snapshot.problems)
               for h in held)


class Holder:
    """The server's side: the inotify watches, the reports read, the listings held."""

    def __init__(self, reads_of: Callable[[Path, Path], object] | None = None) -> None:
        # ``reads_of(root, state_dir)``: what to hold of a held vault's read times (``acpmem.vault.readlog``, a layer
        # above this one, passed in by the server); taken again each time the vault is held anew
        self.reads_of = reads_of
        # lazy: only the read server holds listings; a read in its own process asks ``get`` alone (measured +0.4 ms
        # to its start-up: the inotify module, with ``struct``)
        from acpmem.infra import inotify

        self.ino = inotify.Inotify()
        self.roots: dict[int, set[str]] = {}   # watch → the roots it vouches for (one folder, two spellings)
        self.wanted: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}   # reported, not yet held
        self._partial = b""
        self.refused: set[str] = set()        # roots never held while this server lives: too large, or not local
        self.grown: dict[str, str] = {}       # held vaults whose read times grew much since taken → their database
        self.segment = False                  # a child loaded the segmenter: load it here

    def close(self) -> None:
        self.ino.close()
        HELD.clear()
        READS.clear()

    def read_reports(self, fd: int) -> None:
        """Take the children's reports queued on ``fd`` (non-blocking)."""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._partial += chunk
        *lines, self._partial = self._partial.split(b"\n")
        for raw in lines:
            parts = raw.decode("utf-8", "surrogateescape").split("\x1f")
            if len(parts) >= 3 and parts[2] in (LIGHT, FULL, ROWS):
                key = (parts[0], parts[2])
                if key not in HELD:
                    self.wanted[key] = (parts[1], tuple(parts[3:]))
            elif len(parts) >= 3 and parts[2] == READ_TIMES and parts[0] in READS:
                self.grown[parts[0]] = parts[1]
            elif parts == ["", "", SEGMENTER]:
                self.segment = True

    def drain(self) -> None:
        """Let go of every listing of a vault that changed since it was taken (all of them after an overflow)."""
        from acpmem.infra.inotify import IN_Q_OVERFLOW   # (loaded by ``__init__``)

        for wd, mask, _name in self.ino.read():
            if mask & IN_Q_OVERFLOW:
                self._let_go(None)
                continue
            for root in tuple(self.roots.get(wd, ())):
                self._let_go(root)

    def _let_go(self, root: str | None) -> None:
        for key in [k for k in HELD if root is None or k[0] == root]:
            del HELD[key]
        for key in [k for k in READS if root is None or k == root]:
            del READS[key]
        for wd in [wd for wd, rs in self.roots.items() if root is None or root in rs]:
            rs = self.roots[wd]
            rs.discard(root) if root is not None else rs.clear()
            if not rs:
                del self.roots[wd]
                self.ino.remove(wd)

    def hold_wanted(self) -> None:
        """Hold what the children reported (called when no request waits)."""
        if self.segment:
            from acpmem.search.analysis import segmenter

            self.segment = False
            segmenter()
        while self.wanted:
            key, (db_path, types) = self.wanted.popitem()
            self.hold(key[0], db_path, types, key[1])
        while self.grown:
            root, db_path = self.grown.popitem()
            if root in READS:
                READS.pop(root)
                self._hold_reads(root, db_path)

    def _hold_reads(self, root: str, db_path: str) -> None:
        if self.reads_of is None:
            return
        try:
            state = self.reads_of(Path(root), Path(db_path).parent)
        except Exception:   # noqa: BLE001 — not held: the children read them the long way
            state = None
        if state is not None:
            READS[root] = state

    def hold(self, root: str, db_path: str, types: tuple[str, ...], kind: str) -> bool:
        """Watch ``root`` and its ``entries/``, then read it for ``kind``: whether it is now held."""
        from acpmem.infra import inotify   # (loaded by ``__init__``)

        if (root, kind) in HELD:
            return True
        if root in self.refused:
            return False
        if not inotify.sees_every_change(root):
            self.refused.add(root)
            return False
        while len({k[0] for k in HELD} | {root}) > MAX_VAULTS:
            self._let_go(next(iter(HELD))[0])
        try:
            if not any(root in rs for rs in self.roots.values()):
                for path, mask in ((Path(root), inotify.ROOT_EVENTS),
                                   (Path(root) / layout.ENTRIES_DIR, inotify.ENTRY_EVENTS)):
                    self.roots.setdefault(self.ino.add(path, mask), set()).add(root)
            con = catalog.connect(Path(db_path))
            try:
                # (the child that reported it has just brought the catalog up to date: counting its rows is cheap)
                if con.execute("SELECT count(*) FROM files").fetchone()[0] > MAX_ENTRIES:
                    self.refused.add(root)
                    raise OverflowError("too large to hold")
                got = self._read(con, Path(root), types, kind)
            finally:
                con.close()
        except Exception:   # noqa: BLE001 — not held: the children list it the long way, as before
            self._let_go(root)
            return False
        mine = sum(_size([h]) for k, h in HELD.items() if k[0] == root) + _size([got])
        if mine > MAX_HELD:   # too large whatever else is let go
            if not any(k[0] == root for k in HELD):
                self._let_go(root)   # (its watches)
            return False
        while _size(HELD.values()) + _size([got]) > MAX_HELD:
            self._let_go(next(k[0] for k in HELD if k[0] != root))   # the oldest other vault
        got.db_path = db_path
        HELD[(root, kind)] = got
        if root not in READS:
            self._hold_reads(root, db_path)
        for e in got.snapshot.entries if got.snapshot is not None else ():   # the times the children score by
            parse_iso(e.last_read or e.created)
        for _, e in got.rows or ():
            parse_iso(e.last_read or e.created)
        return True

    @staticmethod
    def _read(con, root: Path, types: tuple[str, ...], kind: str) -> HeldListing:
        if kind == ROWS:
            from acpmem.search import query, store

            catalog.refresh(con, root)
            _settled(con)
            store.update(con)
            return HeldListing(types, rows=query.light_entries(query.light_rows(con, types=types)))
        snap = catalog.snapshot(con, root, types, light=kind == LIGHT)
        _settled(con)
        bad = {p.path for p in snap.problems}
        ids = {path: ident for path, ident in con.execute("SELECT path, entry_id FROM files") if path in bad}
        return HeldListing(types, catalog.Snapshot(snap.entries, snap.problems, catalog.Changes()), ids)


__all__ = ["HELD", "READS", "READ_TIMES", "HeldListing", "Holder", "get", "rows", "reads", "current", "by_id", "loaded",
           "LIGHT", "FULL", "ROWS", "MAX_ENTRIES", "MAX_VAULTS", "MAX_HELD"]
