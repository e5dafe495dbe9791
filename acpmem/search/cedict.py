"""The English↔Chinese dictionary recall translates with, derived from CC-CEDICT (``acpmem/data/``).

``load()`` parses the packaged list (~44k words, ~0.2 s) into dicts; a recall process that needs only a few
translations should not pay that on every call. The first use builds a SQLite copy in the user's cache
(``$XDG_CACHE_HOME/acpmem`` or ``~/.cache/acpmem``), named by a hash of the packaged data so an upgrade builds a
new one; afterwards each lookup is one indexed query. Where the cache cannot be written, the in-memory loader is
used.
"""
from __future__ import annotations

import functools
import json
import os
import sqlite3
from pathlib import Path

from acpmem.core.fasthash import sha256
from acpmem.core.layout import DATA_DIR
from acpmem.infra import files
from acpmem.infra.files import atomic_write, home_folder

DATA_FILE = DATA_DIR / "cedict-words.tsv.gz"


@functools.lru_cache(maxsize=1)
def load() -> tuple[dict[str, str], dict[str, str]]:
    """Return (english word → space-separated Chinese words, Chinese word → space-separated english words).

    The data is a word list derived from CC-CEDICT (CC BY-SA 4.0, MDBG and contributors) by
    ``bench/search_build_cedict.py``: ~44k simplified headwords with single-word English glosses, stored in
    both directions. Loaded on first use only (a query or index that mixes scripts): ~0.45 MB gzip on disk,
    about 130 ms and 23 MB of RAM to load on this 2-core machine.
    """
    # lazy: `surface` does not need it (measured +0.8 ms to its start-up)
    import gzip

    raw = DATA_FILE.read_bytes()
    text = gzip.decompress(raw).decode("utf-8")
    zh_part, _, en_part = text.partition("\n@en\n")
    zh_part = zh_part.partition("\n@zh\n")[2]
    zh_en = dict(line.split("\t", 1) for line in zh_part.splitlines() if "\t" in line)
    en_zh = dict(line.split("\t", 1) for line in en_part.splitlines() if "\t" in line)
    return en_zh, zh_en


def en_to_zh(word: str) -> tuple[str, ...]:
    return tuple(load()[0].get(word, "").split())


def zh_to_en(word: str) -> tuple[str, ...]:
    return tuple(load()[1].get(word, "").split())


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(home_folder("XDG_CACHE_HOME"), ".cache")
    return Path(base) / "acpmem"


class _SqliteStore:
    def __init__(self, path: Path) -> None:
        self._con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._memo: dict[tuple[str, str], tuple[str, ...]] = {}

    def _get(self, table: str, word: str) -> tuple[str, ...]:
        key = (table, word)
        if key not in self._memo:
            row = self._con.execute(f"SELECT v FROM {table} WHERE k=?", (word,)).fetchone()
            self._memo[key] = tuple(row[0].split()) if row else ()
        return self._memo[key]

    def en_to_zh(self, word: str) -> tuple[str, ...]:
        return self._get("en_zh", word)

    def zh_to_en(self, word: str) -> tuple[str, ...]:
        return self._get("zh_en", word)

    def known_zh(self, words) -> set[str]:
        """Which of ``words`` are Chinese headwords, in one query."""
        return {k for (k,) in self._con.execute("SELECT k FROM zh_en WHERE k IN (SELECT value FROM json_each(?))",
                                                (json.dumps(list(words), ensure_ascii=False),))}


class _MemoryStore:
    def en_to_zh(self, word: str) -> tuple[str, ...]:
        return en_to_zh(word)

    def zh_to_en(self, word: str) -> tuple[str, ...]:
        return zh_to_en(word)

    def known_zh(self, words) -> set[str]:
        return {w for w in words if zh_to_en(w)}


def _build(path: Path) -> None:
    """Build the database in memory and write it whole (readers only ever see a complete file)."""
    en_zh, zh_en = load()
    con = sqlite3.connect(":memory:")
    try:
        con.execute("CREATE TABLE en_zh (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID")
        con.execute("CREATE TABLE zh_en (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID")
        con.executemany("INSERT INTO en_zh VALUES (?, ?)", en_zh.items())
        con.executemany("INSERT INTO zh_en VALUES (?, ?)", zh_en.items())
        con.commit()
        data = con.serialize()
    finally:
        con.close()
    atomic_write(path, data, durable=False)


def cache_path() -> Path:
    """Where ``store`` keeps the SQLite copy: in the user's cache folder, named by the packaged data it is built from
    (so an upgrade builds a new one)."""
    st = os.stat(str(DATA_FILE))    # a plain package folder: importlib.resources costs ~12 ms to say the same
    tag = sha256(f"{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    return _cache_dir() / f"cedict-{tag}.sqlite"


@functools.lru_cache(maxsize=1)
def store():
    """The shared dictionary: an on-disk store when the cache is usable, else the in-memory one."""
    try:
        path = cache_path()
        if not path.exists():
            files.ensure_dir(path.parent)
            _build(path)
        return _SqliteStore(path)
    except (OSError, sqlite3.Error):
        return _MemoryStore()
