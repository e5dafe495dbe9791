"""The person's own acpmem config (``$XDG_CONFIG_HOME/acpmem/config.toml``, else ``~/.config/acpmem/config.toml``)
for tests: where the settings a vault may not decide — endpoints, models, ``api_key_env``, the user vault — live
(``acpmem.core.trust``). Each test has its own HOME (``conftest._isolated_env``), so this never touches a real one."""
from __future__ import annotations

import json
import os
from pathlib import Path

PERSON_ONLY = {"base_url", "model", "api_key_env", "user_vault"}


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "acpmem" / "config.toml"


def set_person(section: str, values: dict, path: Path | None = None) -> Path:
    """Set ``values`` in ``[section]`` of the person's config (other sections kept; "" removes a key)."""
    import tomllib

    path = path or config_path()
    data = tomllib.loads(path.read_text("utf-8")) if path.exists() else {}
    table = data.setdefault(section, {})
    for k, v in values.items():
        if v == "":
            table.pop(k, None)
        else:
            table[k] = v
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"[{s}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in t.items()) + "\n"
                            for s, t in data.items() if t), "utf-8")
    return path


def split(values: dict) -> tuple[dict, dict]:
    """(the person's part, the vault's part) of one section's settings."""
    return ({k: v for k, v in values.items() if k in PERSON_ONLY},
            {k: v for k, v in values.items() if k not in PERSON_ONLY})
