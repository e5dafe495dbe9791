"""Keeping a project's paths out of the user layer: every path at or under a project's folders is replaced.

The user vault is read in every project of a person, so an entry written there must not carry where one project
lives (``/home/ann/work/acme/src/billing.py`` says which client, which repository, which file). Pure: the
project's folders are passed in.
"""
from __future__ import annotations

import re

REPLACEMENT = "<project path>"
_TAIL = r"(?:[/\\][^\s`'\"()<>\[\]{},;|]*)?"   # the rest of a path under the root, up to a delimiter


def path_forms(roots: list[str], home: str | None = None) -> tuple[str, ...]:
    """The spellings of ``roots`` a text may use: as given, and ``~/…`` when under ``home``. A root that is the
    file-system root, ``home`` itself or above it is dropped (redacting it would erase every path)."""
    forms: list[str] = []
    home = (home or "").rstrip("/")
    for r in roots:
        r = r.rstrip("/")
        if not r or r.count("/") < 2 or (home and (home == r or home.startswith(r + "/"))):
            continue
        forms.append(r)
        if home and r.startswith(home + "/"):
            forms.append("~" + r[len(home):])
    return tuple(sorted(set(forms), key=len, reverse=True))


def redact_project_paths(text: str, forms: tuple[str, ...]) -> tuple[str, int]:
    """``text`` with every path at or under one of ``forms`` (``path_forms``) replaced by ``<project path>``, and
    how many were replaced."""
    if not forms or not text:
        return text, 0
    pat = re.compile("(?:" + "|".join(re.escape(f) for f in forms) + r")(?![A-Za-z0-9_-]|\.[A-Za-z0-9_])" + _TAIL)
    return pat.subn(REPLACEMENT, text)


def project_roots(vault_root: str, vault_dirname: str) -> list[str]:
    """A project vault's folders: the vault, and the workspace around it when the vault is its ``.acp-memory``;
    (string work only: the caller passes each spelling it knows, e.g. the real path too)"""
    root = vault_root.rstrip("/")
    parent, _, name = root.rpartition("/")
    return [root, parent] if name == vault_dirname and parent else [root]
