"""Vault settings: the values of ``acpmem.toml`` and their strict validation from a parsed mapping.

Reading the file (and its cache) is ``acpmem.vault.config``; this module only turns a mapping into ``Settings``.
"""
from __future__ import annotations

import re

from acpmem.core.entry import DEFAULT_TYPES
from acpmem.core.errors import SettingsError
from acpmem.core.layout import SETTINGS_FILE
from acpmem.core.limits import MAX_BUDGET_TOKENS, MAX_TOP_N, clip, has_control, is_number, is_utf8
from acpmem.core.trust import PERSON_ONLY
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
    prompt: bool = True              # the Claude Code prompt hook surfaces what the prompt is about (recall)
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
    max_tokens_per_day: int = 0       # prompt + completion tokens of model calls in any 24 hours; 0 = no limit
    max_requests_per_hour: int = 0    # model calls in any hour; 0 = no limit
    local_timeout_seconds: float = 900.0   # an endpoint on this machine (CPU inference): instead of timeout_seconds
    max_tokens: int = 1024            # generated tokens per fork call, sent as max_tokens; 0 = not sent
    context_tokens: int = 0           # the model's context window; 0 = ask the server (llama-server /props), else none
    max_entries_per_answer: int = 8   # memory_write calls one answer may write; the rest dropped with a note
    window_turns: int = 0             # > 0: a conversation longer than this many turns is asked in windows of it
    max_windows: int = 8              # the most recent windows asked per commit; older turns left out with a note
    evidence: bool = True             # an entry keeps the words of the turns it cites (``evidence``), indexed
    second_look: bool = False         # answer = "json" in windows: a window's turns no fact rests on asked again
    temperature: float = -1.0         # sent as temperature when 0 or more; -1 = not sent (the server's default)
    stream: str = "auto"              # auto (streamed to a local endpoint) | on | off: a streamed call times out
                                      # only after a silence of the timeout, never while tokens arrive
    answer: str = "tools"             # tools (memory_write calls after the conversation) | json (the turns quoted,
                                      # the answer one JSON object held to a schema: for small local models)


class WriteSettings(Section):
    policy: str = "auto"              # auto | review | off (``acpmem.upkeep.review``)


class EmbeddingsSettings(Section):
    """The optional vector channel of recall: off while ``model`` is empty. ``base_url`` and the key fall back to
    ``OPENAI_BASE_URL`` and the variable named by ``api_key_env``, as for extraction."""
    base_url: str = ""
    model: str = ""                   # empty: no vector channel (recall is lexical only)
    api_key_env: str = "OPENAI_API_KEY"
    dimensions: int = 0               # 0: whatever the model returns (asked for when set)
    timeout_seconds: float = 0.5      # the query's embedding at recall time; then lexical alone
    batch_timeout_seconds: float = 30.0   # one batch of entries in the background
    batch_size: int = 64
    languages: str = "en"             # what the model understands (comma-separated: "en", "en,zh"); queries in
                                      # other scripts stay lexical
    weight: float = 0.75              # the vector channel's share in the fused score
    query_prefix: str = ""            # put before the query's text: what asymmetric models ask for ("query: " for
    document_prefix: str = ""         # the e5 family, "search_query: " / "search_document: " for nomic-embed)


class RerankSettings(Section):
    """The optional rerank stage of recall: off while ``model`` is empty. A rerank model (a cross-encoder) reads the
    query with each of the best ``candidates`` entries and scores them; recall merges that order with its own.
    ``base_url`` falls back to ``OPENAI_BASE_URL``, the key to the variable named by ``api_key_env``."""
    base_url: str = ""
    model: str = ""                   # empty: no rerank stage
    api_key_env: str = "OPENAI_API_KEY"
    timeout_seconds: float = 1.0      # the whole rerank call at recall time; then recall's own order
    candidates: int = 20              # how many of recall's best entries the model reorders
    languages: str = "en"             # what the model understands; queries in other scripts keep recall's order


class ConsolidateSettings(Section):
    """How duplicates and contradictions are found (``docs/duplicates.md``): by ``consolidate`` and by the fork's
    check before it writes."""
    similarity: str = "auto"          # auto (the best configured) | lexical | embedding | model
    embedding_threshold: float = 0.62  # cosine of two entry vectors from which they are a pair
    model_pairs: int = 20             # candidate pairs per model call (one call judges a batch)
    max_candidates: int = 200         # candidate pairs a consolidate run sends to the model at most
    fork_check: bool = True           # the fork drops a write that restates an entry, proposes one that contradicts


class GitSettings(Section):
    lock_timeout_seconds: float = 60.0
    foreign_lock_wait_seconds: float = 10.0
    remote: str = "origin"
    sync_seconds: float = 120.0   # how long `sync` keeps retrying a push the remote rejected because it moved


class LayersSettings(Section):
    """The user vault beside this project vault (``acpmem.read.layers``)."""
    user_vault: str = ""          # "" the default (~/.acp-memory), "none" off, else a path; $ACPMEM_USER_VAULT wins
    user_share: float = 0.3       # the user layer's share of the resident index's token budget


class BranchesSettings(Section):
    """Which entries are tied to the project branch they were learned on (``docs/branches.md``)."""
    scoped: str = "decision,lesson,fact"   # the types scoped by default, comma-separated ("" = none); the user
                                           # layer and user preferences never are
    remote: str = "origin"                 # whose HEAD names the default branch (refs/remotes/<remote>/HEAD)

    def scoped_types(self) -> tuple[str, ...]:
        return tuple(t.strip() for t in self.scoped.split(",") if t.strip())


class Settings(Value):
    types: tuple[str, ...] = DEFAULT_TYPES
    language: str = "en"
    score: ScoreSettings = ScoreSettings()  # the sections are frozen: one default instance serves every Settings
    index: IndexSettings = IndexSettings()
    surface: SurfaceSettings = SurfaceSettings()
    recall: RecallSettings = RecallSettings()
    extraction: ExtractionSettings = ExtractionSettings()
    git: GitSettings = GitSettings()
    layers: LayersSettings = LayersSettings()
    write: WriteSettings = WriteSettings()
    embeddings: EmbeddingsSettings = EmbeddingsSettings()
    rerank: RerankSettings = RerankSettings()
    consolidate: ConsolidateSettings = ConsolidateSettings()
    branches: BranchesSettings = BranchesSettings()
    unknown: tuple[str, ...] = ()   # settings and sections the file has that this acpmem does not know: ignored
    ignored: tuple[str, ...] = ()   # person-only settings the vault set and the person did not trust: ignored
    broken: str = ""                # the file does not load (why): these are the last good settings, or defaults

    def unknown_warning(self, path: str = SETTINGS_FILE) -> str | None:
        """The one warning line about ``unknown``, or None."""
        if not self.unknown:
            return None
        names = ", ".join(f"'{n}'" for n in self.unknown[:10]) + (" …" if len(self.unknown) > 10 else "")
        return (f"{path}: ignored what this acpmem does not know: {names} (set by a newer acpmem, or misspelt) — "
                "upgrade acpmem to use it, or remove it; see the comments in the template acpmem.toml")

    def trust_warning(self, path: str = SETTINGS_FILE) -> str | None:
        """The one warning line about ``ignored`` (``acpmem.core.trust``), or None."""
        if not self.ignored:
            return None
        names = ", ".join(f"'{n}'" for n in self.ignored)
        return (f"{path}: ignored {names}: only you decide where your data and keys go and where your own layer "
                "lives, not a vault — set them in your own config (~/.config/acpmem/config.toml), or adopt this "
                "file's values with `acp memory trust` (see docs/security.md)")

    def to_json(self) -> dict:
        d = self.__dict__
        return {n: d[n].to_json() if isinstance(d[n], Section) else d[n] for n in self._fields
                if n not in ("ignored", "broken")}


# The range of every number (inclusive; ``open`` excludes the low end): a value outside it is refused when the file
# is read, never met later as a division by zero, a negative budget or an SQLite overflow. Floats must be finite.
_RANGES: dict[tuple[str, str], tuple[float, float, bool]] = {
    ("score", "importance_weight"): (0, 100, False),
    ("score", "recency_divisor_days"): (0, 36_500, True),
    ("score", "recency_cap"): (0, 1000, False),
    ("score", "jitter_max"): (0, 100, False),
    ("score", "top_n"): (0, MAX_TOP_N, False),
    ("index", "budget_tokens"): (1, MAX_BUDGET_TOKENS, False),
    ("index", "watch_min_entries"): (0, 1_000_000_000, False),
    ("index", "watch_idle_minutes"): (0, 525_600, True),
    ("surface", "top_n"): (0, 10_000, False),
    ("surface", "entry_cap_bytes"): (1, 1_000_000, False),
    ("surface", "session_budget_bytes"): (0, 1_000_000_000, False),
    ("recall", "limit"): (1, 100, False),
    ("extraction", "timeout_seconds"): (0, 3600, True),
    ("extraction", "local_timeout_seconds"): (0, 3600, True),
    ("extraction", "max_tokens"): (0, 1_000_000, False),
    ("extraction", "context_tokens"): (0, 100_000_000, False),
    ("extraction", "max_entries_per_answer"): (1, 1000, False),
    ("extraction", "window_turns"): (0, 100_000, False),
    ("extraction", "max_windows"): (1, 32, False),   # a vault's value (a teammate's push) bounds the calls a commit costs
    ("extraction", "temperature"): (-1, 2, False),
    ("extraction", "max_retries"): (0, 10, False),
    ("extraction", "max_entry_bytes"): (256, 900_000, False),
    ("extraction", "retry_base_seconds"): (0, 86_400, True),
    ("extraction", "max_attempts"): (1, 100, False),
    ("extraction", "max_tokens_per_day"): (0, 1_000_000_000_000, False),
    ("extraction", "max_requests_per_hour"): (0, 1_000_000, False),
    ("embeddings", "dimensions"): (0, 8192, False),
    ("embeddings", "timeout_seconds"): (0, 60, True),
    ("embeddings", "batch_timeout_seconds"): (0, 3600, True),
    ("embeddings", "batch_size"): (1, 2048, False),
    ("embeddings", "weight"): (0, 10, False),
    ("rerank", "timeout_seconds"): (0, 60, True),
    ("rerank", "candidates"): (2, 200, False),
    ("consolidate", "embedding_threshold"): (0, 1, True),
    ("consolidate", "model_pairs"): (1, 200, False),
    ("consolidate", "max_candidates"): (0, 100_000, False),
    ("git", "lock_timeout_seconds"): (0, 86_400, False),
    ("git", "foreign_lock_wait_seconds"): (0, 86_400, False),
    ("git", "sync_seconds"): (0, 86_400, False),
    ("layers", "user_share"): (0, 1, False),
}
_HINT = "see the comments in the template acpmem.toml"
_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_MAX_TEXT = 2048
_MAX_TYPES = 100
_MAX_TYPE_CHARS = 64

_SECTIONS = {"score": ScoreSettings, "index": IndexSettings, "surface": SurfaceSettings,
             "recall": RecallSettings, "extraction": ExtractionSettings, "git": GitSettings,
             "layers": LayersSettings, "write": WriteSettings,
             "embeddings": EmbeddingsSettings, "rerank": RerankSettings, "consolidate": ConsolidateSettings,
             "branches": BranchesSettings}
POLICIES = ("auto", "review", "off")
SIMILARITY_MODES = ("auto", "lexical", "embedding", "model")
STREAM_MODES = ("auto", "on", "off")
ANSWER_FORMATS = ("tools", "json")


def _coerce(cls, section: str, data: dict, path: str, unknown: list[str]):
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: [{section}] must be a table", _HINT)
    known = cls._fields
    kwargs = {}
    for k, v in data.items():
        if k not in known:   # a newer acpmem's setting, synced through git: ignored, said (``Settings.unknown``)
            unknown.append(f"{section}.{k}")
            continue
        default = cls._defaults[k]
        if isinstance(default, bool):
            ok = isinstance(v, bool)
        elif isinstance(default, float):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            if ok:
                try:
                    v = float(v)
                except OverflowError:   # an integer beyond any float: out of every range below
                    v = float("inf")
        elif isinstance(default, int):
            ok = isinstance(v, int) and not isinstance(v, bool)
        else:
            ok = isinstance(v, type(default))
        if not ok:
            raise SettingsError(f"{path}: '{section}.{k}' must be {type(default).__name__}, got {clip(v)}",
                                _HINT)
        _check_value(section, k, v, path)
        kwargs[k] = v
    return cls(**kwargs)


def _check_value(section: str, key: str, v: object, path: str) -> None:
    """The range of a number, the shape of a text setting."""
    name = f"{section}.{key}"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        lo, hi, open_low = _RANGES[(section, key)]
        if not is_number(v) or v > hi or v < lo or (open_low and v == lo):
            low = f"more than {lo:g}" if open_low else f"at least {lo:g}"
            raise SettingsError(f"{path}: '{name}' must be {low} and at most {hi:g}, got {clip(v)}",
                                _HINT)
    elif isinstance(v, str):
        if len(v) > _MAX_TEXT or has_control(v) or not is_utf8(v):
            raise SettingsError(f"{path}: '{name}' must be one line of text without control characters",
                                _HINT)
        if key == "api_key_env" and v and not re.fullmatch(_ENV_NAME, v):
            raise SettingsError(f"{path}: '{name}' must be the name of an environment variable, got {clip(v)}",
                                "e.g. api_key_env = \"OPENAI_API_KEY\"")
        if key == "user_vault" and v.strip() != v:
            raise SettingsError(f"{path}: '{name}' must be a path, \"none\" or empty, without spaces around it",
                                "e.g. user_vault = \"~/.acp-memory\"")
        if key == "scoped" and not all(re.fullmatch(r"[^,\s]+", t.strip()) for t in v.split(",") if t.strip()):
            raise SettingsError(f"{path}: '{name}' must be entry types separated by commas, got {clip(v)}",
                                'e.g. scoped = "decision,lesson,fact", or "" for none')
        if key == "remote" and (not v.strip() or v.startswith("-") or " " in v):
            raise SettingsError(f"{path}: '{name}' must be the name of a git remote, got {clip(v)}",
                                "e.g. remote = \"origin\"")


def settings_from_mapping(data: dict, path: str = SETTINGS_FILE) -> Settings:
    vault = data.get("vault", {})
    if not isinstance(vault, dict):
        raise SettingsError(f"{path}: [vault] must be a table", _HINT)
    types = vault.get("types", list(DEFAULT_TYPES))
    if not isinstance(types, list) or not types or not all(isinstance(t, str) and t.strip() for t in types):
        raise SettingsError(f"{path}: vault.types must be a non-empty list of names",
                            "e.g. types = [\"decision\", \"lesson\", \"fact\"]")
    if len(types) > _MAX_TYPES or len(set(types)) != len(types) or any(
            len(t) > _MAX_TYPE_CHARS or t != t.strip() or has_control(t) or not is_utf8(t) for t in types):
        raise SettingsError(f"{path}: vault.types must be at most {_MAX_TYPES} different names of at most "
                            f"{_MAX_TYPE_CHARS} characters, without control characters or spaces around them",
                            "e.g. types = [\"decision\", \"lesson\", \"fact\"]")
    language = vault.get("language", "en")
    if language not in ("en", "zh"):
        raise SettingsError(f"{path}: vault.language must be 'en' or 'zh', got {clip(language)}",
                            "language = \"en\" or language = \"zh\"")
    # What this acpmem does not know — a setting or a section a newer one added, synced through git — is ignored
    # and named (``unknown``, one warning line), so one new key never stops every command of an older acpmem;
    # a known key with a bad value is still refused.
    unknown = [f"vault.{k}" for k in sorted(set(vault) - {"types", "language"})]
    unknown += [f"[{k}]" if isinstance(data[k], dict) else k for k in sorted(set(data) - set(_SECTIONS) - {"vault"})]
    kwargs = {name: _coerce(cls, name, data.get(name, {}), path, unknown) for name, cls in _SECTIONS.items()}
    s = Settings(types=tuple(types), language=language, unknown=tuple(unknown), **kwargs)
    for section in (s.embeddings, s.rerank):
        if not all(x.strip() in ("en", "zh") for x in section.languages.split(",")):
            name = "embeddings" if section is s.embeddings else "rerank"
            raise SettingsError(f"{path}: {name}.languages must name languages among en, zh, got "
                                f"{clip(section.languages)}", 'e.g. languages = "en" or languages = "en,zh"')
    if s.extraction.extractor not in ("auto", "llm", "offline"):
        raise SettingsError(f"{path}: extraction.extractor must be auto, llm or offline",
                            "extractor = \"auto\", \"llm\" or \"offline\"")
    if s.consolidate.similarity not in SIMILARITY_MODES:
        raise SettingsError(f"{path}: consolidate.similarity must be auto, lexical, embedding or model, got "
                            f"{clip(s.consolidate.similarity)}", 'similarity = "auto" (the best configured)')
    if s.extraction.answer not in ANSWER_FORMATS:
        raise SettingsError(f"{path}: extraction.answer must be tools or json, got {clip(s.extraction.answer)}",
                            'answer = "tools" (memory_write calls) or "json" (a JSON object held to a schema)')
    if s.extraction.stream not in STREAM_MODES:
        raise SettingsError(f"{path}: extraction.stream must be auto, on or off, got {clip(s.extraction.stream)}",
                            'stream = "auto" (streamed to an endpoint on this machine), "on" or "off"')
    if s.write.policy not in POLICIES:
        raise SettingsError(f"{path}: write.policy must be auto, review or off, got {clip(s.write.policy)}",
                            "policy = \"auto\" (writes count at once), \"review\" (a person accepts them) or "
                            "\"off\"")
    return s


def settings_from_json(d: dict) -> Settings:
    kwargs = {name: cls(**d.get(name, {})) for name, cls in _SECTIONS.items()}
    return Settings(types=tuple(d["types"]), language=d["language"], unknown=tuple(d.get("unknown", ())),
                    broken=d.get("broken", ""), **kwargs)


def person_from_mapping(data: dict, path: str) -> dict[str, dict]:
    """The person's own settings (their configuration file: ``acpmem.vault.config.person_config_path``): only the
    settings a vault may not decide (``acpmem.core.trust.PERSON_ONLY``), each validated as in ``acpmem.toml``."""
    out: dict[str, dict] = {}
    hint = "it holds only [extraction], [embeddings], [rerank] base_url / model / api_key_env and [layers] " \
           "user_vault (see docs/configuration.md)"
    for section, table in data.items():
        if section not in PERSON_ONLY or not isinstance(table, dict):
            raise SettingsError(f"{path}: [{section}] does not belong in your own config", hint)
        for key, v in table.items():
            if key not in PERSON_ONLY[section]:
                raise SettingsError(f"{path}: '{section}.{key}' does not belong in your own config (a vault's "
                                    "acpmem.toml decides it)", hint)
            if not isinstance(v, str):
                raise SettingsError(f"{path}: '{section}.{key}' must be str, got {clip(v)}", hint)
            _check_value(section, key, v, path)
        out[section] = dict(table)
    return out
