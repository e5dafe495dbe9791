"""``acp memory remember``: a person writes an entry verbatim — no model in between — in one commit of kind
``human-write``. The text is checked for secrets and refused (never redacted: the person is there to fix it); it
counts at once under every write policy, since a person wrote it (``docs/design.md``, "Write policy and review").

Takes the vault object, never discovers one, so it works on any vault layer. With ``user=True`` it writes to the
user vault read beside the project vault (a ``u-`` id, one commit there); text that holds a path of this project is
refused there, as a secret is — the person is there to fix it, and a silent ``<project path>`` in their own words
would surprise them (``docs/design.md``, "Layers and review together").
"""
from __future__ import annotations

from acpmem.core.entry import MAX_TITLE_CHARS, Entry
from acpmem.core.errors import Refused, SecretRefused, UsageError
from acpmem.core.layout import LAYER_USER
from acpmem.core.limits import breaks_line, clip, int_between
from acpmem.core.projectpaths import redact_project_paths
from acpmem.core.redact import find_secrets
from acpmem.read.layers import project_path_forms, vault_for_layer
from acpmem.vault.branches import scope_for, with_scope
from acpmem.vault.writer import KIND_REMEMBER
from acpmem.write.draft import derive_title


DEFAULT_IMPORTANCE = 5


def default_type(types, user: bool) -> str:
    """The type of an entry a person writes without ``--type``: user-preference in the user vault, else fact —
    when the vault defines it, else its first type."""
    want = "user-preference" if user else "fact"
    return want if want in types else types[0]


def remember(vault, text: str, *, type: str | None = None, importance: int | None = None, title: str | None = None,
             user: bool = False, scope: str | None = None) -> tuple[Entry, str]:
    """Write ``text`` as a new entry of ``type`` (default: ``default_type``) and ``importance`` (default 5) (title:
    ``title`` or the text's first line).
    ``user``: in the user vault read beside ``vault`` (``vault`` itself when it is the user vault). Returns the
    entry and the commit. Raises ``UsageError`` for bad arguments, for a missing user vault and for a user-vault
    text holding a path of this project, and ``SecretRefused`` when the text holds what looks like a secret;
    nothing is written then. ``scope``: ``branch`` ties the entry to the project branch checked out now,
    ``global`` never; None: as ``[branches] scoped`` says for its type (``acpmem.vault.branches``)."""
    forbid: tuple[str, ...] = ()
    if user and scope == "branch":
        raise UsageError("--branch and --user: the user vault is read in every project, never tied to a branch",
                         "drop one of them")
    if user:
        target = vault_for_layer(vault, LAYER_USER)
        if target is not vault:
            forbid = project_path_forms(vault)
        vault = target
    vault.require_writable()
    settings = vault.settings
    if type is None:
        type = default_type(settings.types, user)
    if importance is None:
        importance = DEFAULT_IMPORTANCE
    if type not in settings.types:
        raise Refused(f"unknown entry type {clip(type)}", f"the types of this vault: {', '.join(settings.types)}")
    if not int_between(importance, 1, 10):
        raise UsageError(f"importance must be an integer 1..10, got {clip(importance)}", "e.g. --importance 6")
    if not isinstance(text, str) or not text.strip():
        raise UsageError("nothing to remember: the text is empty", "pass TEXT, pipe it on stdin, or use --edit")
    body = text.strip("\n") + "\n"
    limit = settings.extraction.max_entry_bytes
    if len(body.encode("utf-8", "surrogatepass")) > limit:
        raise Refused(f"the text is {len(body.encode('utf-8', 'surrogatepass')):,} bytes; entries hold at most "
                         f"{limit:,} (extraction.max_entry_bytes)", "shorten it, or split it into several entries")
    if title is not None:
        title = title.strip()
        if not title or breaks_line(title) or len(title) > MAX_TITLE_CHARS:
            raise UsageError(f"a title is one line of 1..{MAX_TITLE_CHARS} characters, got {clip(title)}",
                             "e.g. --title 'We deploy on Tuesdays'")
    else:
        title = derive_title(body)

    found = find_secrets(title + "\n" + body, deep=True)
    if found:
        kinds = ", ".join(dict.fromkeys(f.kind for f in found))
        raise SecretRefused(f"the text contains what looks like a secret ({kinds}); nothing was written",
                            "remove it and run the command again; secrets never enter the vault")
    if forbid:
        if redact_project_paths(title + "\n" + body, forbid)[1]:
            raise Refused("the text holds a path of this project, and the user vault is read in every project; "
                             "nothing was written", "remove the path, or drop --user to remember it in this "
                                                    "project's vault")

    ident = vault.new_id()
    entry = Entry(id=ident, title=title, type=type, importance=importance, created=vault.now(), body=body,
                  source={"by": "human", "command": "remember"})
    entry = entry.with_changes(path=vault.path_for(ident, title))
    if not user:
        entry = with_scope(entry, scope_for(vault, type, scope))
    sha = vault.write_entries([entry], subject=f"remember #{ident} {title}",
                              why="Written by a person with `acp memory remember`, verbatim.", kind=KIND_REMEMBER,
                              trailers={"Acpmem-Author": "human"})
    return entry, sha
