"""The on-disk English↔Chinese store answers exactly like the packaged list, and falls back when the cache
cannot be written."""
from __future__ import annotations

import os

from acpmem.search import cedict


def test_sqlite_store_matches_the_packaged_list(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cedict.store.cache_clear()
    s = cedict.store()
    assert type(s).__name__ == "_SqliteStore"
    assert list((tmp_path / "cache" / "acpmem").glob("cedict-*.sqlite"))
    for word in ("cache", "upload", "queue", "gateway", "nonexistentword"):
        assert s.en_to_zh(word) == cedict.en_to_zh(word)
    for word in ("缓存", "上传", "日志", "不存在的词语"):
        assert s.zh_to_en(word) == cedict.zh_to_en(word)
    assert "缓存" in s.en_to_zh("cache")
    cedict.store.cache_clear()


def test_unwritable_cache_falls_back_to_memory(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    monkeypatch.setenv("XDG_CACHE_HOME", str(ro / "sub"))
    if os.geteuid() == 0:  # root writes anywhere: point the cache at a file instead of a folder
        (tmp_path / "file").write_text("x")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
    cedict.store.cache_clear()
    s = cedict.store()
    assert type(s).__name__ == "_MemoryStore"
    assert s.en_to_zh("upload") == cedict.en_to_zh("upload")
    cedict.store.cache_clear()


def test_the_installed_package_names_the_word_lists_licence():
    """The wheel carries CC-CEDICT-derived data under CC BY-SA 4.0 beside acpmem's MIT code: the installed
    package's metadata says both (an SPDX expression, not the table form setuptools stops building in 2027) and
    ships the licence file naming the data file."""
    from importlib import metadata

    meta = metadata.metadata("acpmem")
    assert meta["License-Expression"] == "MIT AND CC-BY-SA-4.0"
    (lic,) = [f for f in metadata.files("acpmem") if f.name == "LICENSE"]
    text = lic.read_text()
    assert text.startswith("MIT License") and "cedict-words.tsv.gz" in text and "CC BY-SA 4.0" in text


def test_the_word_check_of_consolidate_and_import_reads_the_cached_store(tmp_path):
    """Whether a word is English (what tells a tool's or product's name from a plain word when near-duplicates are
    looked for: ``consolidate``, ``import``) is one indexed lookup in the cached store, not the whole packaged list
    loaded (~0.1 s a process), and answers as the list does."""
    import json
    import subprocess
    import sys

    words = ["queue", "uploads", "rebuilding", "kubectl", "grafana", "zzqx"]
    code = ("import json, sys; from acpmem.search import cedict, english, similar; w = sys.argv[1:]; "
            "keys = [similar._is_key(x) for x in w]; loaded = cedict.load.cache_info().currsize; "
            "print(json.dumps([keys, loaded, [not english.known_word(x, cedict.en_to_zh) for x in w]]))")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    first = subprocess.run([sys.executable, "-c", code, *words], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert list((tmp_path / "acpmem").glob("cedict-*.sqlite"))       # built by the first, from the list
    again = subprocess.run([sys.executable, "-c", code, *words], env=env, capture_output=True, text=True, timeout=120)
    keys, loaded, by_list = json.loads(again.stdout)
    assert loaded == 0 and keys == by_list == [False, False, False, True, True, True], again.stdout
