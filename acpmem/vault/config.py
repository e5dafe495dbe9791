"""Reading ``acpmem.toml``: the vault's settings, through a JSON cache the per-turn commands can read cheaply.

The parsed settings are cached as JSON under ``.acpmem/`` keyed by the file's stat, so the hot read commands
(``list --format prompt`` from a hook on every turn) skip the TOML parser.
"""
from __future__ import annotations

import json
from pathlib import Path

from acpmem.core.errors import SettingsError
from acpmem.core.layout import SETTINGS_FILE
from acpmem.core.settings import Settings, settings_from_json, settings_from_mapping
from acpmem.infra.files import atomic_write

CACHE_VERSION = 6   # 6: the unknown settings named; 5: the embedding prefixes; 4: [layers]; 3: [write] and the extraction budgets; 2: every number range-checked (a cache of settings validated before must be read again)


def load_settings(root: Path, state_dir: Path | None = None) -> Settings:
    """Read ``acpmem.toml`` at the vault root; a missing file means defaults."""
    path = root / SETTINGS_FILE
    try:
        st = path.stat()
    except FileNotFoundError:
        return Settings()
    sig = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    cache = (state_dir / "settings.json") if state_dir else None
    if cache is not None:
        try:
            cached = json.loads(cache.read_text("utf-8"))
            if cached.get("sig") == sig and cached.get("v") == CACHE_VERSION:
                return settings_from_json(cached["settings"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    import tomllib

    try:
        data = tomllib.loads(path.read_text("utf-8"))
    except OSError as exc:
        raise SettingsError(f"{path}: cannot be read ({exc.strerror})", "check the file's permissions") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: not valid TOML: {exc}", "fix the file; the template has every setting") from None
    except ValueError:   # tomllib turns a 5,000-digit number into an int, which Python refuses
        raise SettingsError(f"{path}: holds a number too long to read (more than 4300 digits)",
                            "fix the file; the template has every setting") from None
    except RecursionError:
        raise SettingsError(f"{path}: is nested too deeply to read", "fix the file; the template has every setting") \
            from None
    s = settings_from_mapping(data, str(path))
    if cache is not None and cache.parent.is_dir():
        try:   # regenerated when lost: atomic, not durable
            atomic_write(cache, json.dumps({"sig": sig, "v": CACHE_VERSION, "settings": s.to_json()}), durable=False)
        except OSError:  # the cache is an optimisation: a full disk or a read-only vault must not fail the read
            pass
    return s
