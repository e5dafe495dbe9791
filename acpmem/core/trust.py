"""The trust boundary of a vault's settings: what a vault may decide and what only the person decides.

A vault's ``acpmem.toml`` is committed and arrives from a remote, written by anyone with push access. It may decide
what memory holds and how it behaves (budgets, policy, types, scoring, recall weights, timeouts). It may not decide
where the person's data and credentials go or where their own layer lives: those settings (``PERSON_ONLY``) come from
the person's own configuration file and environment. A vault's value for one of them is ignored, unless the person
adopted exactly those values with ``acp memory trust`` (their digest is recorded in the person's configuration).
``docs/security.md`` is the model in words; reading the files is ``acpmem.vault.config``. No I/O here.
"""
from __future__ import annotations

import json

from acpmem.core.fasthash import sha256

# section -> the settings only the person decides: where data goes (every endpoint), which model reads it, which
# environment variable's value is sent as the key, and where the person's own layer lives (a path outside the vault).
PERSON_ONLY: dict[str, tuple[str, ...]] = {
    "extraction": ("base_url", "model", "api_key_env"),
    "embeddings": ("base_url", "model", "api_key_env"),
    "rerank": ("base_url", "model", "api_key_env"),
    "layers": ("user_vault",),
}
ENDPOINT_SECTIONS = ("extraction", "embeddings", "rerank")


def is_person_only(section: str, key: str) -> bool:
    return key in PERSON_ONLY.get(section, ())


def claims(settings) -> dict[str, str]:
    """The person-only values a vault's settings set (``section.key`` -> value), those that differ from the default:
    a template's ``api_key_env = "OPENAI_API_KEY"`` or ``base_url = ""`` claims nothing."""
    out = {}
    for section, keys in PERSON_ONLY.items():
        sec = getattr(settings, section)
        for key in keys:
            value = sec[key]
            if value != type(sec)()[key]:
                out[f"{section}.{key}"] = value
    return out


def digest(found: dict[str, str]) -> str:
    """The digest ``acp memory trust`` records: of the keys and values together, so any change is asked again."""
    return "sha256:" + sha256(json.dumps(found, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def effective(settings, person: dict[str, dict], trusted: bool, env) -> tuple[object, tuple[str, ...]]:
    """The settings a command uses, and the vault's claims it ignored.

    ``settings``: the vault's, as read; ``person``: section -> {key: value} from the person's configuration (only
    person-only keys); ``trusted``: the person adopted this vault's claims as they are now; ``env``: the environment.
    For each person-only setting: the person's configuration, else — when trusted — the vault's value, else the
    default. The person's ``OPENAI_BASE_URL`` wins over any vault's endpoint, trusted or not: a trusted vault's
    ``base_url`` is used only where the person's environment names none."""
    found = claims(settings)
    ignored = () if trusted else tuple(sorted(found))
    changes = {}
    for section, keys in PERSON_ONLY.items():
        sec = getattr(settings, section)
        mine = person.get(section, {})
        new = {}
        for key in keys:
            if key in mine:
                value = mine[key]
            elif trusted and f"{section}.{key}" in found and not (key == "base_url" and env.get("OPENAI_BASE_URL")):
                value = sec[key]
            else:
                value = type(sec)()[key]
            if value != sec[key]:
                new[key] = value
        if new:
            changes[section] = sec.with_changes(**new)
    if changes or ignored:
        settings = settings.with_changes(ignored=ignored, **changes)
    return settings, ignored
