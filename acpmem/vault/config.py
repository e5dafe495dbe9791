"""Reading ``acpmem.toml``: the vault's settings, through a JSON cache the per-turn commands can read cheaply; and
the person's side of them: their own config file and the vaults they trusted (``acpmem.core.trust``).

The parsed settings are cached as JSON under ``.acpmem/`` keyed by the file's stat, so the hot read commands
(``list --format prompt`` from a hook on every turn) skip the TOML parser. The same cache is the last good settings:
a file that no longer loads (a teammate's broken push) is read as them, with a warning (``Settings.broken``), so no
command of a clone wedges and ``sync`` can bring the fix. The person's own config is read only when it exists (one
``stat`` otherwise), their trust records only when the vault sets a person-only value.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from acpmem.core.errors import SettingsError
from acpmem.core.layout import SETTINGS_FILE
from acpmem.core.settings import Settings, person_from_mapping, settings_from_json, settings_from_mapping
from acpmem.core import trust
from acpmem.infra.files import atomic_write, home_folder

CACHE_VERSION = 6   # 6: the unknown settings named; 5: the embedding prefixes; 4: [layers]; 3: [write] and the extraction budgets; 2: every number range-checked (a cache of settings validated before must be read again)


CONFIG_FILE = "config.toml"      # the person's own settings, in their config folder
TRUST_FILE = "trusted.json"     # the vaults whose person-only settings they adopted (``acp memory trust``)


def load_settings(root: Path, state_dir: Path | None = None, *, fallback: bool = False,
                  env: dict | None = None) -> Settings:
    """The settings a command in the vault at ``root`` uses: its ``acpmem.toml`` (a missing file means defaults),
    with the person-only settings from the person's side (``acpmem.core.trust``; ``env`` defaults to
    ``os.environ``). ``fallback``: a file that does not load gives the last good settings (else defaults) with
    ``broken`` saying why, instead of ``SettingsError``."""
    env = os.environ if env is None else env
    try:
        s = vault_settings(root, state_dir)
    except SettingsError as exc:
        if not fallback:
            raise
        s = _last_good(state_dir).with_changes(broken=exc.message)
    return with_person(s, root, env)


def vault_settings(root: Path, state_dir: Path | None = None) -> Settings:
    """The vault's ``acpmem.toml`` as it is written, person-only values and all (``load_settings`` is what a
    command uses). Raises ``SettingsError`` for a file that does not load."""
    path = root / SETTINGS_FILE
    try:
        st = path.stat()
    except FileNotFoundError:
        return Settings()
    except OSError as exc:
        raise SettingsError(f"{path}: cannot be read ({exc.strerror})", "check the file's permissions") from None
    sig = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    cache = (state_dir / "settings.json") if state_dir else None
    if cache is not None:
        try:
            cached = json.loads(cache.read_text("utf-8"))
            if cached.get("sig") == sig and cached.get("v") == CACHE_VERSION:
                return settings_from_json(cached["settings"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    s = settings_from_mapping(_read_toml(path), str(path))
    if cache is not None and cache.parent.is_dir():
        try:   # regenerated when lost: atomic, not durable
            atomic_write(cache, json.dumps({"sig": sig, "v": CACHE_VERSION, "settings": s.to_json()}), durable=False)
        except OSError:  # the cache is an optimisation: a full disk or a read-only vault must not fail the read
            pass
    return s


def _read_toml(path: Path) -> dict:
    # lazy: `list --format prompt` does not need it (measured +4.1 ms to its start-up)
    import tomllib

    try:
        return tomllib.loads(path.read_text("utf-8"))
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


def _last_good(state_dir: Path | None) -> Settings:
    """The settings last read from the file while it loaded (the cache keeps them whatever the file is now), else
    the defaults."""
    if state_dir is not None:
        try:
            cached = json.loads((state_dir / "settings.json").read_text("utf-8"))
            if cached.get("v") == CACHE_VERSION:
                return settings_from_json(cached["settings"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return Settings()


# ------------------------------------------------------------------------------------------- the person's side

def config_dir(env=None) -> Path:
    """The person's acpmem config folder: ``$XDG_CONFIG_HOME/acpmem``, else ``~/.config/acpmem``."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or ""
    if not base or not os.path.isabs(base):   # the XDG rule: a relative value is ignored
        base = os.path.join(home_folder("XDG_CONFIG_HOME"), ".config")
    return Path(base) / "acpmem"


def person_config_path(env=None) -> Path:
    return config_dir(env) / CONFIG_FILE


def person_settings(env=None) -> dict[str, dict]:
    """The person's own person-only settings (``config.toml`` in ``config_dir``); {} when there is no file."""
    path = person_config_path(env)
    try:
        st = path.stat()
    except OSError:
        return {}
    key = [str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    memo = _PERSON_MEMO.get("key") == key and _PERSON_MEMO.get("value")
    if memo is not None and memo is not False:   # read once per process: discovery and the settings both ask
        return memo
    env_ = os.environ if env is None else env
    cache = Path(env_.get("XDG_CACHE_HOME") or os.path.join(home_folder("XDG_CACHE_HOME"), ".cache")) / "acpmem" / \
        "person-config.json"
    try:   # the per-turn commands skip the TOML parser, as for acpmem.toml
        cached = json.loads(cache.read_text("utf-8"))
        value = cached["value"] if cached.get("key") == key and cached.get("v") == CACHE_VERSION else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        value = None
    if not isinstance(value, dict):
        value = person_from_mapping(_read_toml(path), str(path))
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(cache, json.dumps({"key": key, "v": CACHE_VERSION, "value": value}), durable=False)
        except OSError:   # an optimisation: a read-only home must not fail the read
            pass
    _PERSON_MEMO.update(key=key, value=value)
    return value


_PERSON_MEMO: dict = {}


def trust_records(env=None) -> dict[str, dict]:
    """vault root -> {"digest", "values"} of the vaults whose person-only values the person adopted."""
    try:
        data = json.loads((config_dir(env) / TRUST_FILE).read_text("utf-8"))
        vaults = data.get("vaults", {})
        return vaults if isinstance(vaults, dict) else {}
    except (OSError, ValueError, AttributeError):
        return {}


def vault_key(root: Path) -> str:
    return os.path.realpath(root)


def is_trusted(root: Path, found: dict[str, str], env=None) -> bool:
    rec = trust_records(env).get(vault_key(root))
    return isinstance(rec, dict) and rec.get("digest") == trust.digest(found)


def with_person(s: Settings, root: Path, env) -> Settings:
    found = trust.claims(s)
    person = person_settings(env)
    if not found and not person:
        return s
    return trust.effective(s, person, bool(found) and is_trusted(root, found, env), env)[0]


def record_trust(root: Path, found: dict[str, str], env=None) -> Path:
    """Adopt ``found`` (the vault's person-only values now) for the vault at ``root``: its digest in the person's
    trust file. An empty ``found`` removes the record."""
    folder = config_dir(env)
    folder.mkdir(parents=True, exist_ok=True)
    vaults = trust_records(env)
    if found:
        vaults[vault_key(root)] = {"digest": trust.digest(found), "values": found}
    else:
        vaults.pop(vault_key(root), None)
    path = folder / TRUST_FILE
    atomic_write(path, json.dumps({"v": 1, "vaults": vaults}, indent=1, sort_keys=True) + "\n")
    return path
