"""The library's read-side operations over a vault: the read-only vault, listing, the frozen resident index,
scores, show, doctor.

Adapters (CLI, MCP server, hooks) call these and render the result; none of them reads files or git itself.
``VaultReader`` is everything the read commands need from a vault (settings, the derived catalog, the entries and
their reads); ``acpmem.vault.Vault`` extends it with the write machinery (lock, git, journal), which the per-turn
``list --format prompt`` never imports.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from acpmem import catalog, reads
from acpmem.discovery import STATE_DIRNAME, discover, session_folder
from acpmem.errors import AmbiguousId, EntryNotFound, LockTimeout, UsageError
from acpmem.model import Entry, parse_iso, utc_iso
from acpmem.settings import Settings, load_settings

TYPE_CHECKING = False  # typing costs ~5 ms at start-up; annotations only
if TYPE_CHECKING:
    from acpmem.catalog import Problem
    from acpmem.score import Scored
    from acpmem.vault import Vault


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


class Loaded:
    """What ``VaultReader.load`` returns: the valid entries, the files that do not parse, and what changed on disk
    since the catalog last looked."""

    __slots__ = ("entries", "problems", "changes")

    def __init__(self, entries: list[Entry], problems: list[Problem], changes: catalog.Changes | None = None) -> None:
        self.entries = entries
        self.problems = problems
        self.changes = catalog.Changes() if changes is None else changes

    def __repr__(self) -> str:
        return f"Loaded(entries={self.entries!r}, problems={self.problems!r}, changes={self.changes!r})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.entries, self.problems, self.changes) == (other.entries, other.problems, other.changes)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it was

    def live(self) -> list[Entry]:
        return [e for e in self.entries if not e.superseded]


class VaultReader:
    """A vault opened for reading. Cheap to construct; settings and the catalog connection are opened on first use."""

    def __init__(self, root: Path, *, clock: Callable[[], datetime] = now_utc, rng=None) -> None:
        self.root = Path(root)
        self.entries_dir = self.root / "entries"
        self.state_dir = self.root / STATE_DIRNAME
        self.clock = clock
        self._rng = rng  # used by Vault (ids, lock back-off); taken here so both are opened alike
        self._settings: Settings | None = None
        self._con = None
        self.warnings: list[str] = []

    @classmethod
    def open(cls, explicit: str | os.PathLike | None = None, *, cwd: Path | None = None, **kw):
        return cls(discover(explicit, cwd=cwd), **kw)

    # ----------------------------------------------------------------- state
    def ensure_state(self) -> None:
        for sub in ("", "locks", "sessions", "pending"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self.ensure_state()
            self._settings = load_settings(self.root, self.state_dir)
        return self._settings

    def db(self):
        if self._con is None:
            self.ensure_state()
            self._con = catalog.connect(self.state_dir / catalog.DB_NAME)
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def now(self) -> str:
        return utc_iso(self.clock())

    # ----------------------------------------------------------------- reading
    def load(self, *, with_reads: bool = True, light: bool = False) -> Loaded:
        """Every valid entry (with the effective last_read) and every file that does not parse. ``light``: index
        fields only (no body or citations), for listings."""
        try:
            snap = catalog.snapshot(self.db(), self.root, self.settings.types, light=light)
        except catalog.sqlite3.DatabaseError as exc:
            if not catalog.is_corrupt(exc):
                raise LockTimeout(f"the vault's index is busy ({exc})",
                                  "another acpmem process is rebuilding it; run the command again in a moment") from None
            self.close()
            catalog.delete(self.state_dir / catalog.DB_NAME)
            snap = catalog.snapshot(self.db(), self.root, self.settings.types, light=light)
        entries = snap.entries
        if with_reads:
            lr = reads.last_reads(self.root, self.state_dir)
            if lr:
                entries = [e.with_changes(last_read=max(e.last_read or "", lr[e.id]))
                           if lr.get(e.id, "") > (e.last_read or "") else e for e in entries]
        return Loaded(entries, snap.problems, snap.changes)

    def resolve(self, prefix: str, *, entries: list[Entry] | None = None) -> Entry:
        """The entry whose id is ``prefix`` or starts with it; an ambiguous prefix lists the candidates."""
        prefix = (prefix or "").strip().lstrip("#")
        if not prefix:
            raise UsageError("no entry id given", "pass an id or a unique prefix, e.g. `acp memory show k3f`")
        entries = self.load().entries if entries is None else entries
        exact = [e for e in entries if e.id == prefix]
        if exact:
            return exact[0]
        matches = sorted((e for e in entries if e.id.startswith(prefix)), key=lambda e: e.id)
        if not matches:
            raise EntryNotFound(f"no entry with id '{prefix}'", "see `acp memory list --all` for the ids")
        if len(matches) > 1:
            raise AmbiguousId(prefix, [e.id for e in matches])
        return matches[0]

    def entry_path(self, entry: Entry) -> Path:
        return self.root / (entry.path or f"entries/{entry.id}.md")

    def mark_read(self, ids: list[str]) -> None:
        """Record reads (never a commit, never a lock); folded into the next commit."""
        self.ensure_state()
        reads.record(self.state_dir, ids, self.now())



def list_entries(vault: VaultReader, *, include_superseded: bool = False,
                 light: bool = False) -> tuple[list[Entry], list[Problem]]:
    """The entries (and the files that do not parse). ``light``: index fields only, no body — for listings."""
    loaded = vault.load(light=light)
    entries = loaded.entries if include_superseded else loaded.live()
    return entries, loaded.problems


def scores(vault: VaultReader, *, at: datetime | None = None, seed: int | None = None, session: str | None = None,
           top_n: int | None = None) -> list[Scored]:
    from acpmem.score import rank, salt_for

    at = at or vault.clock()
    entries, _ = list_entries(vault, light=True)
    return rank(entries, at, salt_for(seed, session), vault.settings.score, top_n)


def session_dir(vault: VaultReader, session: str) -> Path:
    """Per-session local state (ledgers, the frozen index) under .acpmem/sessions/, named safely."""
    return session_folder(vault.state_dir, session)


def resident_index(vault: VaultReader, *, session: str | None = None, refresh: bool = False, at: datetime | None = None,
                   seed: int | None = None, budget_tokens: int | None = None) -> str:
    """The resident index text (SPEC §6.1). With a session id it is frozen: the first call stores the text and
    every later call in that session returns the same bytes, until ``refresh``."""
    snap_path = session_dir(vault, session) / "index.txt" if session else None
    if snap_path is not None and not refresh:
        try:
            return snap_path.read_text("utf-8")
        except FileNotFoundError:
            pass
    from acpmem.render import prompt_index
    from acpmem.score import rank_iter, salt_for

    at = at or vault.clock()
    entries, _ = list_entries(vault, light=True)
    # Scored lazily: the text stops at its token budget, long before the last entry of a large vault.
    ranked = rank_iter(entries, at, salt_for(seed, session), vault.settings.score, top_n=len(entries))
    text = prompt_index(ranked, at, vault.settings, budget_tokens=budget_tokens, total_entries=len(entries))
    if snap_path is not None:
        snap_path.parent.mkdir(parents=True, exist_ok=True)
        if refresh:
            from acpmem.files import atomic_write

            atomic_write(snap_path, text)
        else:
            tmp = snap_path.with_name(f".index.{os.getpid()}.tmp")
            tmp.write_text(text, "utf-8")
            try:
                os.link(tmp, snap_path)  # first writer wins, so concurrent first calls agree
            except FileExistsError:
                text = snap_path.read_text("utf-8")
            finally:
                tmp.unlink(missing_ok=True)
    return text


def show(vault: VaultReader, prefix: str, *, mark_read: bool = True) -> Entry:
    """One entry by id or unique prefix (superseded ones too); marks it read."""
    entry = vault.resolve(prefix)
    if mark_read:
        vault.mark_read([entry.id])
        entry = entry.with_changes(last_read=vault.now())
    return entry


def doctor(vault: Vault, *, fix: bool = False):
    """Check and optionally repair the vault (see ``acpmem.doctor``; kept out of this module's imports, which the
    per-turn listing pays)."""
    from acpmem.doctor import doctor as run

    return run(vault, fix=fix)


def entries_at(vault: VaultReader, at: str) -> datetime:
    try:
        return parse_iso(at)
    except ValueError:
        raise UsageError(f"--at {at!r} is not an ISO time", "use e.g. 2026-11-29T12:00:00Z") from None


__all__ = ["VaultReader", "Loaded", "list_entries", "scores", "resident_index", "show", "doctor", "session_dir"]
