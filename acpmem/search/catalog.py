"""The catalog: a derived SQLite cache of parsed entry files under ``.acpmem/index.sqlite``.

Markdown files are the source of truth; parsing a thousand YAML frontmatters costs far more than a hook can
afford on every turn, so parsed entries (and parse problems) are cached per file, keyed by a stat signature
``(size, mtime_ns, ctime_ns, inode)``. ``ctime`` cannot be set from user space, so an edit that restores the
old size and mtime (``touch -r``), a ``git checkout`` or an atomic rename is still noticed without reading any
file. ``refresh`` reports what changed so the search index can update incrementally. The cache is never
committed; if it is corrupt or from another schema it is deleted and rebuilt.

A signature only tells changes apart when the timestamps do. Where they are coarse (a scheduler tick on Linux before
6.13, a second on ext3 or HFS+, two on FAT) a file rewritten with the same size within the granule it was read in —
in place, or by a rename or an unlink and create that reuses the freed inode number, as ``git checkout`` does — keeps
all four values. So a row read while its file's ctime was less than ``RACY_NS`` old is "racily clean" (git's term for
the same problem): it is kept in ``meta`` with its signature and a hash of the bytes read, and read again at every
refresh until the ctime is that old (after that any change gives a later ctime); other bytes are parsed, and a row
that differs is stored with its signature plus ``~`` and a hash of the row, so that what keys on the signature (the
search index, the vectors) sees a new version while the file's stat still matches the part before the ``~``.
"""
from __future__ import annotations

import json
import os
import sqlite3
import stat
import time
from pathlib import Path

from acpmem.core import layout
from acpmem.core.entry import Entry
from acpmem.core.entryfile import parse_entry_bytes
from acpmem.core.errors import EntryInvalid
from acpmem.core.fasthash import sha256
from acpmem.core.values import Value
from acpmem.infra import db, progress
from acpmem.infra.files import NotRegularFile, read_regular

SCHEMA_VERSION = 9  # raised when the entry parser refuses what it took before (5: conflict markers, 6: number
# ranges, 7: `files`, `commit` and a citation's `hash` checked, 8: `branch` and `anchor` checked; the branch index,
# 9: `evidence` checked)
DB_NAME = layout.DB_NAME
RACY_NS = 3_000_000_000   # the coarsest timestamps (FAT: 2 s) and some clock step; rows this recent are read again


class Problem(Value):
    """An entry file that does not parse: reported with its path and reason, kept out of the index."""

    path: str
    reason: str
    field: str | None = None

    def to_json(self) -> dict:
        return {"path": self.path, "field": self.field, "reason": self.reason}


class Changes(Value):
    """What a refresh found changed on disk: paths added, modified and removed. False when nothing changed.
    ``files``: how many entry files a refresh that looked at every one found (0 where it did not)."""

    added: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    files: int = 0

    def __bool__(self) -> bool:
        return bool(self.added or self.modified or self.removed)


class Snapshot(Value):
    """All valid entries, the problems, and what the refresh before them changed."""

    entries: list
    problems: list
    changes: Changes


def connect(db_path: Path) -> sqlite3.Connection:
    """Open the derived database, rebuilding it from nothing if it is unreadable or of another schema."""
    # the probe reads the files table's first page (count(*) would read them all: 47 ms at 100,000 entries)
    return db.connect(db_path, SCHEMA_VERSION, _create, probe="SELECT 1 FROM files LIMIT 1")


def connect_memory() -> sqlite3.Connection:
    """An empty catalog in memory: what a read fills from the files when the one on disk cannot be written."""
    return db.memory_connection(_create)


def _create(con: sqlite3.Connection) -> None:
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
        if not name.startswith("sqlite_"):
            con.execute(f'DROP TABLE IF EXISTS "{name}"')
    # The index fields are columns too, so the resident index (every turn) never parses the stored JSON.
    con.execute("""CREATE TABLE files (
        path TEXT PRIMARY KEY, sig TEXT NOT NULL, entry_id TEXT, ok INTEGER NOT NULL, data TEXT NOT NULL,
        title TEXT, type TEXT, importance INTEGER, created TEXT, last_read TEXT, superseded_by TEXT)""")
    con.execute("CREATE INDEX files_entry_id ON files(entry_id)")
    con.execute("CREATE INDEX files_sig ON files(path, sig)")  # covering: the staleness scan reads no rows
    # the entries tied to a project branch (acpmem.vault.branches), found every turn without reading every row
    con.execute("CREATE INDEX files_branch ON files(json_extract(data, '$.branch')) "
                "WHERE json_extract(data, '$.branch') IS NOT NULL")
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")


def scan(entries_dir: Path) -> dict[str, str]:
    """relative path -> stat signature for every ``*.md`` directly under entries/ (symlinks are not followed).
    This loop runs on every read at full vault size, so it is kept to one stat and one string per file."""
    out: dict[str, str] = {}
    try:
        it = os.scandir(entries_dir)
    except FileNotFoundError:
        return out
    islnk = stat.S_ISLNK
    with it:
        for de in it:
            name = de.name
            if name[-3:] != ".md" or name[0] == ".":
                continue
            try:
                st = de.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            sig = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"
            out[layout.ENTRIES_DIR + "/" + name] = "symlink:" + sig if islnk(st.st_mode) else sig
    return out


def scan_digest(current: dict[str, str]) -> str:
    """What the cache records of a whole ``scan``: when the next scan gives the same, nothing changed."""
    return sha256("\n".join(sorted(f"{p}\t{s}" for p, s in current.items())).encode("utf-8")).hexdigest()


def refresh(con: sqlite3.Connection, root: Path) -> Changes:
    """Bring the cache in step with the files; returns what changed.

    The digest of the whole scan is kept beside the rows it produced (same transaction): when the files are as
    they were and no row is racily clean, one lookup answers and the cached signatures are not read at all."""
    t0 = time.time_ns()   # before any stat: a file changed after t0 - RACY_NS may change again unseen
    current = scan(root / layout.ENTRIES_DIR)
    digest = scan_digest(current)
    meta = dict(con.execute("SELECT key, value FROM meta WHERE key IN ('scan', 'racy')").fetchall())
    racy = _racy_map(meta.get("racy"))
    same = meta.get("scan") == digest
    if same and not racy:
        return Changes(files=len(current))
    added, modified, todo, removed = [], [], [], []
    if not same:   # (the same digest: every signature is as cached, only the racily clean rows need a look)
        cached = dict(con.execute("SELECT path, sig FROM files").fetchall())
        for path, sig in current.items():
            old = cached.get(path)
            if old is None:
                added.append(path)
                todo.append((path, sig))
            elif old != sig and old.partition("~")[0] != sig:
                modified.append(path)
                todo.append((path, sig))
        removed = [p for p in cached if p not in current]
    again = [(p, s) for p, (s, _) in racy.items() if current.get(p) == s]
    _store(con, root, t0, modified, todo, again, removed, racy, digest if not same else None, current)
    return Changes(tuple(added), tuple(modified), tuple(removed), len(current))


def _sig_of(root: Path, rel: str) -> str | None:
    """The stat signature ``scan`` gives one path, or None when the file is not there (or not an entry file)."""
    name = rel.rpartition("/")[2]
    if not rel.startswith(layout.ENTRIES_DIR + "/") or "/" in rel[8:] or name[-3:] != ".md" or name[0] == ".":
        return None
    try:
        st = os.lstat(root / rel)
    except (FileNotFoundError, NotADirectoryError):
        return None
    sig = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"
    return "symlink:" + sig if stat.S_ISLNK(st.st_mode) else sig


def refresh_paths(con: sqlite3.Connection, root: Path, paths) -> Changes:
    """Bring the rows of the given paths (``entries/NAME.md``) in step with their files, without looking at any
    other file: for a caller that knows what changed (the watcher, ``acpmem.search.watch``)."""
    t0 = time.time_ns()
    paths = sorted(set(paths))
    cached = dict(con.execute("SELECT path, sig FROM files WHERE path IN (SELECT value FROM json_each(?))",
                              (json.dumps(paths, ensure_ascii=False),)).fetchall())
    row = con.execute("SELECT value FROM meta WHERE key='racy'").fetchone()
    racy = _racy_map(row[0] if row else None)
    added, modified, removed, todo, again = [], [], [], [], []
    now: dict[str, str | None] = {}
    for path in paths:
        sig, old = _sig_of(root, path), cached.get(path)
        now[path] = sig
        if sig is None:
            if old is not None:
                removed.append(path)
        elif old != sig and (old is None or old.partition("~")[0] != sig):
            (added if old is None else modified).append(path)
            todo.append((path, sig))
        elif path in racy and racy[path][0] == sig:
            again.append((path, sig))
    _store(con, root, t0, modified, todo, again, removed, racy, None, now, partial=True)
    return Changes(tuple(added), tuple(modified), tuple(removed))


def _racy_map(value: str | None) -> dict[str, tuple[str, str]]:
    """The racily clean rows kept in ``meta``: path -> (the signature they were read with, ``_fingerprint`` of the
    bytes); a value that is not that is none."""
    try:
        got = json.loads(value) if value else {}
    except ValueError:
        return {}
    if not isinstance(got, dict):
        return {}
    return {p: (v[0], v[1]) for p, v in got.items()
            if isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)}


def racily_clean(con: sqlite3.Connection) -> bool:
    """Whether rows the last refresh read are still racily clean (the next refresh reads them again)."""
    row = con.execute("SELECT value FROM meta WHERE key = 'racy'").fetchone()
    return bool(row and _racy_map(row[0]))


def _is_racy(sig: str, t0: int) -> bool:
    """Whether a file with this signature, read after ``t0``, may still change without changing its signature: its
    ctime (which every change sets to the present, a new file too; unlike the mtime it cannot be set back or ahead)
    is within ``RACY_NS`` of ``t0``."""
    try:
        return int(sig.rsplit(":", 2)[1]) >= t0 - RACY_NS
    except (ValueError, IndexError):
        return True


def _store(con: sqlite3.Connection, root: Path, t0: int, modified: list, todo: list, again: list, removed: list,
           racy: dict[str, tuple[str, str]], digest: str | None, current: dict, *, partial: bool = False) -> None:
    """Parse ``todo`` (path, signature) and read the racily clean rows ``again`` once more (bytes that differ from
    those read before are parsed; a row that then differs from the cached one is added to ``modified``); then write,
    in one transaction, the rows, the removals, the racy rows (``current``: the signatures found now, of every file
    or of the ``partial`` refresh's paths) and the digest: ``digest`` when a full scan found a new one, none after a
    ``partial`` refresh that changed rows, so that the next full scan compares signatures. Nothing is written when
    nothing differs from what is stored."""
    rows, mine = [], {}
    with progress.task("reading entries", len(todo), unit="entries", at_least=progress.index_min_entries()) as shown:
        for n, (path, sig) in enumerate(todo, 1):
            data = _read(root, path, sig)
            rows.append((path, sig) + _parse_row(path, data))
            if _is_racy(sig, t0):
                mine[path] = (sig, _fingerprint(data))
            if n % 100 == 0 or n == len(todo):
                shown.advance(100 if n % 100 == 0 else n % 100)
    if again:
        stored = {r[0]: tuple(r[1:]) for r in con.execute(
            "SELECT path, entry_id, ok, data, title, type, importance, created, last_read, superseded_by FROM files "
            "WHERE path IN (SELECT value FROM json_each(?))", (json.dumps([p for p, _ in again]),))}
        for path, sig in again:
            data = _read(root, path, sig)
            seen = _fingerprint(data)
            if not seen or seen != racy[path][1]:   # other bytes than were read (or none): parse and compare
                parsed = _parse_row(path, data)
                if stored.get(path) != parsed:
                    modified.append(path)
                    # the same stat, another text: a signature of its own for what keys on it (the search index,
                    # the vectors), whose part before the "~" still matches the file's
                    version = sha256(repr(parsed).encode("utf-8", "surrogatepass")).hexdigest()[:12]
                    rows.append((path, f"{sig}~{version}") + parsed)
            if _is_racy(sig, t0):
                mine[path] = (sig, seen)
    looked = set(todo) | set(again)

    def still(known: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
        """The racy rows after this refresh: those it read again or found changed or gone are replaced by ``mine``;
        those it did not look at (a partial refresh's other paths, rows another process wrote since) stay."""
        kept = {p: v for p, v in known.items()
                if (partial and p not in current) or (current.get(p) == v[0] and (p, v[0]) not in looked)}
        return kept | mine

    if not rows and not removed and digest is None and still(racy) == racy:
        return
    con.execute("BEGIN IMMEDIATE")
    try:
        con.executemany("DELETE FROM files WHERE path=?", [(p,) for p in removed])
        con.executemany("INSERT OR REPLACE INTO files(path, sig, entry_id, ok, data, title, type, importance, created,"
                        " last_read, superseded_by) VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
        if digest is not None:
            con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('scan', ?)", (digest,))
        elif partial and (rows or removed):
            con.execute("DELETE FROM meta WHERE key='scan'")
        row = con.execute("SELECT value FROM meta WHERE key='racy'").fetchone()   # as it is now, in the transaction
        new_racy = still(_racy_map(row[0] if row else None))
        if new_racy:
            con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('racy', ?)",
                        (json.dumps({p: list(v) for p, v in new_racy.items()}, ensure_ascii=False,
                                    sort_keys=True),))
        else:
            con.execute("DELETE FROM meta WHERE key='racy'")
        con.execute("COMMIT")
    except BaseException:
        db.rollback(con)
        raise


_NO_META = (None,) * 6


def _problem_row(reason: str, field: str | None = None) -> tuple:
    return (None, 0, json.dumps({"reason": reason, "field": field})) + _NO_META


def _read(root: Path, rel: str, sig: str) -> bytes | tuple:
    """The file's bytes (up to one more than the parser takes), or the problem row when it cannot be read."""
    if sig.startswith("symlink:"):
        return _problem_row("entry files may not be symlinks (it could lead out of the vault)")

    try:
        return read_regular(root / rel, 2_000_001)
    except NotRegularFile as exc:   # a FIFO would hang every read: never opened
        return _problem_row(f"{exc.strerror} (acpmem reads only regular files); remove it")
    except OSError as exc:
        return _problem_row(f"cannot be read: {exc.strerror}")


def _fingerprint(data: bytes | tuple) -> str:
    """What a racily clean row is compared by: a hash of the bytes read ("" when none could be)."""
    return sha256(data).hexdigest() if isinstance(data, bytes) else ""


def _parse_row(rel: str, data: bytes | tuple) -> tuple:
    """(entry_id, ok, data, title, type, importance, created, last_read, superseded_by) for one file, from the bytes
    ``_read`` gave."""
    if not isinstance(data, bytes):
        return data
    try:
        entry = parse_entry_bytes(data, rel, None)  # the type is checked against the settings at read time
    except EntryInvalid as exc:
        return _problem_row(exc.reason, exc.field)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # validation should have said why; whatever got past it is this file's problem, never the listing's
        return _problem_row(f"cannot be parsed ({type(exc).__name__}: {str(exc)[:200]})")
    # A secret written by hand is kept out of the cache and the index (neither stores a byte of it), like an
    # invalid file: reported, never committed (a human edit is validated the same way), until the person removes it.
    kind = secret_kind(entry)
    if kind:
        return _problem_row(f"contains what looks like a secret ({kind}); remove it — the file is kept out of "
                            "the index and is never committed")
    try:
        data = json.dumps(entry.to_json(), ensure_ascii=False)
    except (ValueError, TypeError, RecursionError) as exc:
        return _problem_row(f"cannot be stored ({type(exc).__name__}: {str(exc)[:200]})")
    return (entry.id, 1, data, entry.title, entry.type, entry.importance, entry.created, entry.last_read,
            entry.superseded_by)


def secret_kind(entry: Entry) -> str | None:
    """The kind of the first secret in an entry's title, body or the fields a person added, or None. What acpmem itself
    redacted (``[REDACTED:kind]``, e.g. ``password = "[REDACTED:credential]"``) is not a secret."""
    # lazy: `list --format prompt` does not need it (measured +5.0 ms to its start-up)
    from acpmem.core.redact import REDACTED_RE, find_secrets

    extra = json.dumps(entry.extra, ensure_ascii=False, default=str) if entry.extra else ""
    text = entry.title + "\n" + entry.body + "\n" + extra
    for f in find_secrets(text):
        if not REDACTED_RE.search(text[f.start:f.end]):
            return f.kind
    return None


def snapshot(con: sqlite3.Connection, root: Path, types: tuple[str, ...], *, light: bool = False,
             changes: Changes | None = None) -> Snapshot:
    """All valid entries and the problems, after a refresh (``changes``: the caller has brought the cache in step
    already, and this is what it found). Duplicate ids: the first path wins, others are problems.

    ``light`` builds entries from the index columns only (id, title, type, importance, created, last_read,
    superseded_by; empty body and citations): what the resident index and listings need, without parsing JSON."""
    changes = refresh(con, root) if changes is None else changes
    # light: the stored JSON is read for problem rows only
    cols = ("CASE WHEN ok THEN NULL ELSE data END, entry_id, title, type, importance, created, last_read, "
            "superseded_by") if light else "data"
    entries, problems = _entries_of(con.execute(f"SELECT path, sig, ok, {cols} FROM files ORDER BY path"), types,
                                    light)
    return Snapshot(entries, problems, changes)


def by_id(con: sqlite3.Connection, root: Path, types: tuple[str, ...], prefix: str, *,
          changes: Changes | None = None) -> Snapshot:
    """After a refresh (``changes``: as for ``snapshot``), the entries whose id starts with ``prefix`` (light, as
    ``snapshot(light=True)`` gives them) and every problem row: what ``snapshot`` would give of them, read through
    the id index instead of every row (``show`` of one entry in a vault of thousands)."""
    changes = refresh(con, root) if changes is None else changes
    cols = "CASE WHEN ok THEN NULL ELSE data END, entry_id, title, type, importance, created, last_read, superseded_by"
    # two lookups in the id index: the ids between prefix and prefix + the highest code point (those that start
    # with it), and the rows with no id (the files that do not parse)
    try:
        prefix.encode("utf-8")
    except UnicodeEncodeError:   # (a lone surrogate from the command line) no id holds one: only the problems
        rows = []
    else:
        rows = con.execute(f"SELECT path, sig, ok, {cols} FROM files WHERE entry_id >= ? AND entry_id < ?",
                           (prefix, prefix + "\U0010ffff")).fetchall()
    rows += con.execute(f"SELECT path, sig, ok, {cols} FROM files WHERE entry_id IS NULL").fetchall()
    entries, problems = _entries_of(sorted(rows, key=lambda r: r[0]), types, True)
    return Snapshot([e for e in entries if e.id.startswith(prefix)], problems, changes)


def _entries_of(rows, types: tuple[str, ...], light: bool) -> tuple[list[Entry], list[Problem]]:
    """The valid entries and the problems of catalog rows ``(path, sig, ok, data or the index columns…)`` in path
    order. Duplicate ids: the file changed first keeps the id, the other is a problem."""
    entries: list[Entry] = []
    problems: list[Problem] = []
    seen: dict[str, tuple[int, str, str]] = {}   # id -> (its place in entries, path, signature)
    for path, sig, ok, data, *meta in rows:
        if not ok:
            d = json.loads(data)
            problems.append(Problem(path, d["reason"], d.get("field")))
            continue
        if light:
            ident, title, typ, imp, created, last_read, sup = meta
            # positional: twice as fast as keywords, for every entry on every turn
            e = Entry(ident, title, typ, imp, created, "", last_read, (), 3, None, (), sup, None, path)
        else:
            e = Entry.from_json(json.loads(data))
        if e.type not in types:
            problems.append(Problem(path, f"'{e.type}' is not one of {', '.join(types)}", "type"))
            continue
        if e.id in seen:
            # Two files, one id (a copied file, an id changed by hand): the file changed last is the one in the
            # wrong — its ctime is the later one, and a person cannot set it back — and the entry as it was stays.
            place, other, other_sig = seen[e.id]
            if _ctime(sig) < _ctime(other_sig):
                entries[place] = e
                seen[e.id] = (place, path, sig)
                path, other = other, path
            problems.append(Problem(path, f"duplicate id '{e.id}' (also in {other})", "id"))
            continue
        seen[e.id] = (len(entries), path, sig)
        entries.append(e)
    return entries, problems


def _ctime(sig: str) -> int:
    """The ctime (ns) a stat signature records (``size:mtime:ctime:inode``, maybe ``~version`` after it)."""
    try:
        return int(sig.partition("~")[0].rsplit(":", 2)[1])
    except (ValueError, IndexError):
        return 0
