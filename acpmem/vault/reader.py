"""The read side of a vault: ``VaultReader`` (settings, the derived catalog, the entries and their reads) and the
library's read operations over it (listing, scores, show).

Adapters (CLI, MCP server, hooks) call these and render the result; none of them reads files or git itself.
``acpmem.vault.writer.Vault`` extends ``VaultReader`` with the write machinery (lock, git, journal), which the
per-turn ``list --format prompt`` never imports.
"""
from __future__ import annotations

import errno
import json
import os
import sqlite3
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from acpmem.core import layout
from acpmem.core.clock import now_utc, parse_iso, utc_iso
from acpmem.core.entry import Entry
from acpmem.core.errors import AcpmemError, AmbiguousId, EntryNotFound, UsageError, VaultReadOnly
from acpmem.core.limits import MAX_INT, MAX_TOP_N, MIN_INT, clip, int_between, session_problem
from acpmem.core.settings import Settings
from acpmem.core.values import Value
from acpmem.infra import files
from acpmem.infra.files import disk_full
from acpmem.vault.config import load_settings
from acpmem.vault.discovery import discover, session_folder, state_location, user_vault_location, user_vault_problem

READ_ONLY_NOTICE = "read-only.noticed"   # in the state folder of a read-only vault: the warning was given
_UNSET = object()
_USER_HINTS = {
    "does not exist": "create it with `acp memory init --user`, or set ACPMEM_USER_VAULT=none",
    "is not a git repository": "restore its .git (or `git init` it and commit), or set ACPMEM_USER_VAULT=none",
}
TYPE_CHECKING = False  # typing costs ~5 ms at start-up; annotations only
if TYPE_CHECKING:
    from acpmem.core.score import Scored
    from acpmem.search.catalog import Changes, Problem


NOT_FOUND_HINT = ("see `acp memory list --all` for the ids; `acp memory log ID` shows the history of a forgotten "
                  "entry or a rejected proposal")


class Loaded(Value):
    """What ``VaultReader.load`` returns: the valid entries, the files that do not parse, and what changed on disk
    since the catalog last looked."""

    entries: list
    problems: list
    changes: Changes | None = None

    def live(self) -> list[Entry]:
        return [e for e in self.entries if not e.superseded]


class VaultReader:
    """A vault opened for reading. Cheap to construct; settings and the catalog connection are opened on first use."""

    def __init__(self, root: Path, *, clock: Callable[[], datetime] = now_utc, rng=None,
                 layer: str = layout.LAYER_PROJECT) -> None:
        self.root = Path(root)
        self.layer = layer
        self._user = _UNSET
        self.entries_dir = self.root / layout.ENTRIES_DIR
        self.state_dir, self.read_only = state_location(self.root)
        self.clock = clock
        self._rng = rng
        self._settings: Settings | None = None
        self._said_of_settings: list[str] = []
        self._con = None
        self.warnings: list[str] = []
        if self.read_only and not (self.state_dir / READ_ONLY_NOTICE).exists():   # said once, not every turn
            self.warnings.append(f"the vault at {self.root} is read-only: it is read with its index kept in "
                                 f"{self.state_dir}; writes are refused")

    @classmethod
    def open(cls, explicit: str | os.PathLike | None = None, *, cwd: Path | None = None, **kw):
        return cls(discover(explicit, cwd=cwd), **kw)

    @property
    def rng(self):
        """The random generator (ids, jitter salts); injectable for tests, created on first use."""
        if self._rng is None:
            # lazy: `list --format prompt` does not need it (measured +0.7 ms to its start-up)
            import random

            self._rng = random.Random()
        return self._rng

    # ----------------------------------------------------------------- layers
    @property
    def user(self) -> "VaultReader | None":
        """The user vault read beside this project vault (same class, same clock and rng), or None: turned off,
        never created, or broken — then the project vault works alone and ``warnings`` holds one line saying why
        (nothing for a default ``~/.acp-memory`` that was never created). Opened on first use, once."""
        if self._user is _UNSET:
            self._user = None
            if self.layer == layout.LAYER_PROJECT:
                self._user = self._open_user()
        return self._user

    def layers(self) -> list["VaultReader"]:
        """This vault, then the user vault when there is one: what a session reads."""
        user = self.user
        return [self] if user is None else [self, user]

    def _open_user(self) -> "VaultReader | None":
        path, explicit = user_vault_location(self.settings.layers.user_vault)
        if path is None:
            return None
        try:
            same = os.path.realpath(path) == os.path.realpath(self.root)
        except (OSError, ValueError):
            same = False
        if same:   # this vault is the user vault (opened with --vault ~/.acp-memory): one layer, the user's
            self.layer = layout.LAYER_USER
            return None
        why = user_vault_problem(path)
        if why is not None:
            if explicit or why != "does not exist":
                hint = _USER_HINTS.get(why, "fix it, or set ACPMEM_USER_VAULT=none")
                self.warnings.append(f"the user vault {path} {why}: only this project's vault is read — {hint}")
            return None
        user = type(self)(path, clock=self.clock, rng=self._rng, layer=layout.LAYER_USER)
        try:
            user.settings
        except (AcpmemError, OSError) as exc:   # its acpmem.toml is broken, its state cannot be made
            what = exc.message if isinstance(exc, AcpmemError) else (exc.strerror or str(exc))
            self.warnings.append(f"the user vault {path} cannot be read ({what}): only this project's vault is "
                                 "read — fix it, or set ACPMEM_USER_VAULT=none")
            return None
        self.warnings.extend(user.warnings)
        return user

    # ----------------------------------------------------------------- state
    def require_writable(self) -> None:
        """Refuse a write to a read-only vault, before anything is changed."""
        if self.read_only:
            raise VaultReadOnly(f"the vault at {self.root} is read-only: nothing was changed",
                                "make it writable, or work in a writable clone (`git clone` it) and `acp memory "
                                "sync` from there")

    def ensure_state(self) -> None:
        for sub in ("", layout.LOCKS_DIR, layout.SESSIONS_DIR):
            files.ensure_dir(self.state_dir / sub)
        if self.read_only:
            (self.state_dir / READ_ONLY_NOTICE).touch()

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self.ensure_state()
            self._settings = load_settings(self.root, self.state_dir, fallback=True)
            path = str(self.root / layout.SETTINGS_FILE)
            broken = None
            if self._settings.broken:   # a teammate's broken push must not wedge the clone: sync brings the fix
                broken = (f"{self._settings.broken} — using the last good settings until it is fixed "
                          "(`acp memory sync` brings a fix; `acp memory doctor` says more)")
            self._said_of_settings = [w for w in (broken, self._settings.unknown_warning(path),
                                                  self._settings.trust_warning(path)) if w]
            self.warnings.extend(w for w in self._said_of_settings if w not in self.warnings)
        return self._settings

    def reload_settings(self) -> Settings:
        """Read ``acpmem.toml`` again (after a sync brought a new one): the old file's warnings give way to the new
        one's."""
        self._settings = None
        self.warnings[:] = [w for w in self.warnings if w not in self._said_of_settings]
        return self.settings

    @property
    def db_path(self) -> Path:
        return self.state_dir / layout.DB_NAME

    def db(self):
        if self._con is None:
            # lazy: the SessionStart hook does not need it (measured +6.5 ms to its start-up)
            from acpmem.search import catalog

            self.ensure_state()
            self._con = catalog.connect(self.db_path)
        return self._con

    def with_db(self, work: Callable):
        """``work(connection)``; a database that cannot be read is deleted and rebuilt once, a busy one is
        ``LockTimeout`` (``acpmem.infra.db.with_rebuild``)."""
        # lazy: the SessionStart hook does not need it (measured +0.7 ms to its start-up)
        from acpmem.infra import db

        try:
            return db.with_rebuild(self.db_path, lambda: work(self.db()), self.close)
        except (sqlite3.OperationalError, OSError) as exc:
            # SQLite says "disk I/O error" where it cannot grow its -shm or -wal file on a full disk
            if not (db.is_full(exc) or disk_full(self.state_dir)) or getattr(self, "_in_memory", False):
                raise
        # The disk is full: the derived index cannot be brought up to date, so this read is served from the files
        # through an index in memory (built now, kept for this process, written nowhere).
        # lazy: the SessionStart hook does not need it (measured +6.5 ms to its start-up)
        from acpmem.search import catalog

        if self._con is not None:
            self._con.close()
        self._con = catalog.connect_memory()
        self._in_memory = True
        self.warnings.append(f"the disk holding {self.state_dir} is full: the index there is not updated, entries "
                             "are read from their files (slower) — free some space")
        return work(self._con)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._user is not _UNSET and self._user is not None:
            self._user.close()
        if self._con is not None:
            self._con.close()
            self._con = None

    def now(self) -> str:
        return utc_iso(self.clock())

    # ----------------------------------------------------------------- reading
    def load(self, *, with_reads: bool = True, light: bool = False) -> Loaded:
        """Every valid entry (with the effective last_read) and every file that does not parse. ``light``: index
        fields only (no body or citations), for listings."""
        # lazy: the SessionStart hook does not need it (measured +6.5 ms to its start-up)
        from acpmem.search import catalog, held

        types = tuple(self.settings.types)
        snap = held.get(str(self.root), types, light)   # (only in the read server's children)
        if snap is None:
            snap = self.with_db(lambda con: catalog.snapshot(con, self.root, types, light=light,
                                                             changes=self._refresh(con)))
            held.loaded(str(self.root), str(self.db_path), types, held.LIGHT if light else held.FULL)
        entries = snap.entries
        if with_reads:
            # lazy: `stats` does not need it (measured +0.1 ms to its start-up)
            from acpmem.vault import readlog

            lr = readlog.served_reads(self.root, self.state_dir, self.db_path)
            if lr:
                entries = [e.with_changes(last_read=max(e.last_read or "", lr[e.id]))
                           if lr.get(e.id, "") > (e.last_read or "") else e for e in entries]
        return Loaded(entries, snap.problems, snap.changes)

    # A listing takes the word of the vault's watcher where one answers; a writer (``Vault``) looks at every file.
    asks_watcher = True

    def _refresh(self, con) -> "Changes":
        """Bring the catalog in step with the entry files before a listing (``load``, ``show``'s lookup by id).

        Where the vault's watcher answers (a vault of at least ``[index] watch_min_entries`` files keeps one:
        ``acpmem.search.watch``), it applies every change made so far and its word is taken, as a recall takes
        it; else every file is looked at (``catalog.refresh``: a ``stat`` each, ~35 ms at 10,000 entries), and a
        vault that large then starts its watcher, as a recall would. What changed is said only by a look at every
        file (a watcher applies the changes itself); nothing reads it but tests."""
        from acpmem.search import catalog

        watched = self.asks_watcher and self.state_dir == self.root / layout.STATE_DIRNAME   # (not a read-only
        if watched and os.path.exists(self.state_dir / layout.WATCH_SOCK):                  # vault's: it scans)
            # lazy: a vault without a watcher (under 5,000 entries) does not need it (measured +3 ms to `show`)
            from acpmem.search import watch

            if watch.enabled(self.settings) and watch.sync(self.state_dir, self.db_path):
                return catalog.Changes()
        changes = catalog.refresh(con, self.root)
        if watched and changes.files >= self.settings.index.watch_min_entries:
            from acpmem.search import watch

            if watch.enabled(self.settings):
                watch.start(self.root, self.state_dir, self.settings.index.watch_idle_minutes * 60)
        return changes

    def resolve(self, prefix: str, *, entries: list[Entry] | None = None) -> Entry:
        """The entry whose id is ``prefix`` or starts with it; an ambiguous prefix lists the candidates."""
        prefix = (prefix or "").strip().lstrip("#")
        if not prefix:
            raise UsageError("no entry id given", "pass an id or a unique prefix, e.g. `acp memory show k3f`")
        # through the id index (no row of another id read), then the one found in full
        loaded = self._by_id(prefix) if entries is None else None
        entries = loaded.entries if loaded is not None else entries
        exact = [e for e in entries if e.id == prefix]
        if exact:
            return exact[0] if loaded is None else self._in_full(exact[0])
        matches = sorted((e for e in entries if e.id.startswith(prefix)), key=lambda e: e.id)
        if not matches:
            broken = [p for p in (loaded.problems if loaded is not None else ())
                      if p.path.rpartition("/")[2].startswith(prefix) or p.path == prefix]
            if len(broken) == 1:
                raise EntryNotFound(f"{broken[0].path} does not parse: {broken[0].reason}",
                                    f"fix it with `acp memory edit {broken[0].path}`")
            raise EntryNotFound(f"no entry with id '{prefix}'", NOT_FOUND_HINT)
        if len(matches) > 1:
            raise AmbiguousId(prefix, [e.id for e in matches])
        return matches[0] if loaded is None else self._in_full(matches[0])

    def _by_id(self, prefix: str) -> Loaded:
        """What ``load(light=True)`` gives of the entries whose id starts with ``prefix``, and every problem."""
        # lazy: the SessionStart hook does not need it (measured +6.5 ms to its start-up)
        from acpmem.search import catalog, held
        from acpmem.vault import readlog

        types = tuple(self.settings.types)
        snap = held.by_id(str(self.root), types, prefix)   # (only in the read server's children)
        if snap is None:
            snap = self.with_db(lambda con: catalog.by_id(con, self.root, types, prefix, changes=self._refresh(con)))
            held.loaded(str(self.root), str(self.db_path), types, held.LIGHT)
        entries = snap.entries
        if entries:
            lr = readlog.served_reads(self.root, self.state_dir, self.db_path, frozenset(e.id for e in entries))
            entries = [e.with_changes(last_read=max(e.last_read or "", lr[e.id]))
                       if lr.get(e.id, "") > (e.last_read or "") else e for e in entries]
        return Loaded(entries, snap.problems, snap.changes)

    def _in_full(self, light: Entry) -> Entry:
        """The entry of a light listing (``load(light=True)``) with its body, citations and every field: its row's
        stored JSON, with the effective last_read the listing found."""
        row = self.with_db(lambda con: con.execute("SELECT data FROM files WHERE path = ? AND ok = 1",
                                                   (light.path,)).fetchone())
        if row is None:   # gone since the listing (another process refreshed the row): the whole vault once more
            return next((e for e in self.load().entries if e.id == light.id), light)
        return Entry.from_json(json.loads(row[0])).with_changes(last_read=light.last_read)

    def entry_path(self, entry: Entry) -> Path:
        return self.root / (entry.path or f"{layout.ENTRIES_DIR}/{entry.id}.md")

    def session_dir(self, session: str) -> Path:
        """Per-session local state (ledgers, the frozen index) under .acpmem/sessions/, named safely."""
        return session_folder(self.state_dir, session)

    def mark_read(self, ids: list[str]) -> None:
        """Record reads (never a commit, never a lock); folded into the next commit."""
        # lazy: `stats` does not need it (measured +0.1 ms to its start-up)
        from acpmem.vault import readlog

        try:
            self.ensure_state()
            readlog.record(self.state_dir, ids, self.now())
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT) and not disk_full(self.state_dir):
                raise
            # the read itself is served (from the files, as list is): only its record is lost, said once
            if not any(w.startswith(f"the disk holding {self.state_dir} is full") for w in self.warnings):
                self.warnings.append(f"the disk holding {self.state_dir} is full: this read is not recorded "
                                     "(free some space)")


def list_entries(vault: VaultReader, *, include_superseded: bool = False,
                 light: bool = False) -> tuple[list[Entry], list[Problem]]:
    """The entries (and the files that do not parse). ``light``: index fields only, no body — for listings."""
    loaded = vault.load(light=light)
    entries = loaded.entries if include_superseded else loaded.live()
    return entries, loaded.problems


def jitter_salt(vault: VaultReader, seed: int | None, session: str | None) -> str:
    """The score's jitter salt: the seed, else the session, else a fresh random one (``core.score.salt_for``)."""
    # lazy: `recall` does not need it (measured +0.2 ms to its start-up)
    from acpmem.core.score import salt_for

    if seed is not None and not int_between(seed, MIN_INT, MAX_INT):
        raise UsageError(f"a seed must be a 64-bit integer, got {clip(seed)}", "e.g. --seed 7")
    why = session_problem(session) if session else None
    if why:   # it salts a hash: text that cannot be encoded would fail there
        raise UsageError(f"a session id {why}, got {clip(session)}", "pass the host's session id")
    salt = salt_for(seed, session)
    if salt is None:   # without a pinned rng, no `random` import on the per-turn listing
        bits = vault._rng.getrandbits(64) if vault._rng is not None else int.from_bytes(os.urandom(8), "big")
        salt = f"random:{bits:016x}"
    return salt


def scores(vault: VaultReader, *, at: datetime | None = None, seed: int | None = None, session: str | None = None,
           top_n: int | None = None) -> list[Scored]:
    # lazy: `recall` does not need it (measured +0.2 ms to its start-up)
    from acpmem.core.score import rank

    if top_n is not None and not int_between(top_n, 0, MAX_TOP_N):
        raise UsageError(f"top_n must be an integer 0..{MAX_TOP_N}, got {clip(top_n)}", "e.g. --top 5")
    at = at or vault.clock()
    entries, _ = list_entries(vault, light=True)
    return rank(entries, at, jitter_salt(vault, seed, session), vault.settings.score, top_n)


def show(vault: VaultReader, prefix: str, *, mark_read: bool = True) -> Entry:
    """One entry by id or unique prefix (superseded ones too); marks it read."""
    entry = vault.resolve(prefix)
    return shown(vault, entry) if mark_read else entry


def shown(vault: VaultReader, entry: Entry) -> Entry:
    """``entry`` (found in ``vault``) marked read: the read recorded, and its last_read now."""
    vault.mark_read([entry.id])
    return entry.with_changes(last_read=vault.now())


def parse_at(at: str) -> datetime:
    """An ``--at`` time given by a person."""
    try:
        return parse_iso(at)
    except ValueError:
        raise UsageError(f"--at {at!r} is not an ISO time", "use e.g. 2026-11-29T12:00:00Z") from None


__all__ = ["VaultReader", "Loaded", "list_entries", "scores", "show", "shown", "parse_at", "jitter_salt"]
