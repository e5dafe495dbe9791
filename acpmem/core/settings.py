"""Vault settings: the values of ``acpmem.toml`` and their strict validation from a parsed mapping.

Reading the file (and its cache) is ``acpmem.vault.config``; this module only turns a mapping into ``Settings``.
"""
from __future__ import annotations

from acpmem.core.entry import DEFAULT_TYPES
from acpmem.core.errors import SettingsError
from acpmem.core.layout import SETTINGS_FILE
from acpmem.core.values import Value


class Section(Value):
    """One table of ``acpmem.toml``; also reads as a mapping of its settings (``dict(section)``)."""

    def keys(self) -> tuple[str, ...]:
        return self._fields

    def __getitem__(self, key: str) -> object:
        if key not in self._fields:
            raise KeyError(key)
        return self.__dict__[key]

    def to_json(self) -> dict:
        return {n: self.__dict__[n] for n in self._fields}


class ScoreSettings(Section):
    importance_weight: float = 1.0
    recency_divisor_days: float = 30.0
    recency_cap: float = 5.0
    jitter_max: float = 0.5
    top_n: int = 5


class IndexSettings(Section):
    budget_tokens: int = 2000
    watch: bool = True               # keep a watcher process for large vaults (Linux inotify)
    watch_min_entries: int = 5000
    watch_idle_minutes: float = 30.0


class SurfaceSettings(Section):
    enabled: bool = False
    top_n: int = 5
    entry_cap_bytes: int = 4096
    session_budget_bytes: int = 61440


class RecallSettings(Section):
    limit: int = 5


class ExtractionSettings(Section):
    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    timeout_seconds: float = 60.0
    max_retries: int = 3
    extractor: str = "auto"          # auto | llm | offline
    max_entry_bytes: int = 8192
    retry_base_seconds: float = 15.0  # a failed request's first retry; doubling after that
    max_attempts: int = 5             # then it is failed for good (kept, retried only when asked)


class GitSettings(Section):
    lock_timeout_seconds: float = 60.0
    foreign_lock_wait_seconds: float = 10.0
    remote: str = "origin"


class Settings(Value):
    types: tuple[str, ...] = DEFAULT_TYPES
    language: str = "en"
    score: ScoreSettings = ScoreSettings()  # the sections are frozen: one default instance serves every Settings
    index: IndexSettings = IndexSettings()
    surface: SurfaceSettings = SurfaceSettings()
    recall: RecallSettings = RecallSettings()
    extraction: ExtractionSettings = ExtractionSettings()
    git: GitSettings = GitSettings()

    def to_json(self) -> dict:
        d = self.__dict__
        return {n: d[n].to_json() if isinstance(d[n], Section) else d[n] for n in self._fields}


_SECTIONS = {"score": ScoreSettings, "index": IndexSettings, "surface": SurfaceSettings,
             "recall": RecallSettings, "extraction": ExtractionSettings, "git": GitSettings}


def _coerce(cls, section: str, data: dict, path: str):
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: [{section}] must be a table", "see the comments in the template acpmem.toml")
    known = cls._fields
    kwargs = {}
    for k, v in data.items():
        if k not in known:
            raise SettingsError(f"{path}: unknown setting '{section}.{k}'",
                                f"known settings in [{section}]: {', '.join(known)}")
        default = cls._defaults[k]
        if isinstance(default, bool):
            ok = isinstance(v, bool)
        elif isinstance(default, float):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            v = float(v) if ok else v
        elif isinstance(default, int):
            ok = isinstance(v, int) and not isinstance(v, bool)
        else:
            ok = isinstance(v, type(default))
        if not ok:
            raise SettingsError(f"{path}: '{section}.{k}' must be {type(default).__name__}, got {v!r:.40}")
        kwargs[k] = v
    return cls(**kwargs)


def settings_from_mapping(data: dict, path: str = SETTINGS_FILE) -> Settings:
    vault = data.get("vault", {})
    if not isinstance(vault, dict):
        raise SettingsError(f"{path}: [vault] must be a table")
    types = vault.get("types", list(DEFAULT_TYPES))
    if not isinstance(types, list) or not types or not all(isinstance(t, str) and t.strip() for t in types):
        raise SettingsError(f"{path}: vault.types must be a non-empty list of names")
    language = vault.get("language", "en")
    if language not in ("en", "zh"):
        raise SettingsError(f"{path}: vault.language must be 'en' or 'zh', got {language!r}")
    extra = set(vault) - {"types", "language"}
    if extra:
        raise SettingsError(f"{path}: unknown setting 'vault.{sorted(extra)[0]}'")
    unknown = set(data) - set(_SECTIONS) - {"vault"}
    if unknown:
        raise SettingsError(f"{path}: unknown section [{sorted(unknown)[0]}]",
                            f"sections: vault, {', '.join(_SECTIONS)}")
    kwargs = {name: _coerce(cls, name, data.get(name, {}), path) for name, cls in _SECTIONS.items()}
    s = Settings(types=tuple(types), language=language, **kwargs)
    if s.extraction.extractor not in ("auto", "llm", "offline"):
        raise SettingsError(f"{path}: extraction.extractor must be auto, llm or offline")
    return s


def settings_from_json(d: dict) -> Settings:
    kwargs = {name: cls(**d[name]) for name, cls in _SECTIONS.items()}
    return Settings(types=tuple(d["types"]), language=d["language"], **kwargs)
