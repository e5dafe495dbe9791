"""The write a person types by hand — ``remember`` — as a plain function, beside the per-turn commands in
``acpmem.cli.hot``, and how a command opens the vault it writes to.

Its typer command (``acpmem.cli.commands_review``) passes its parameters through unchanged, and the fast path
(``acpmem.cli.fast``) calls the same function with the same parameters, so both print the same bytes; a command
line the fast path cannot parse exactly (``-`` for stdin, help, anything unusual) goes to typer, which calls it too.
Typer and the pydantic it brings cost about half of a ``remember`` run on its own (~150 of ~300 ms). Kept free of
typer; everything heavy is imported when the command runs.

Each function prints its output and returns the exit code, or raises ``AcpmemError``.
"""
from __future__ import annotations

import sys
from pathlib import Path

from acpmem.cli.output import out, out_json, using
from acpmem.core.errors import AcpmemError, Refused, UsageError, VaultNotFound


def open_vault(vault: str | Path | None):
    """The ``Vault`` at ``vault``, else the one discovery finds."""
    # lazy: the per-turn commands import this module (``cli.hot``) and do not need it (measured +33 ms)
    from acpmem.vault.writer import Vault

    return Vault.open(vault)


def open_user(vault: str | Path | None):
    """The user vault for a ``--user`` command: the one the project vault at ``vault`` (or here) reads, else the
    default one."""
    # lazy: the per-turn commands import this module (``cli.hot``) and do not need it (measured +15 ms)
    from acpmem.read.layers import open_user_vault

    return open_user_vault(vault)


def open_for_user(vault: str | Path | None):
    """The vault a ``--user`` write starts from: the project vault at ``vault`` or here (its paths are kept out of
    the user vault), else — no project vault here, none named — the user vault alone."""
    try:
        return open_vault(vault)
    except VaultNotFound:
        if vault:
            raise
        return open_user(None)


def remember_cmd(*, text: str | None, type_: str | None, importance: int | None, title: str | None, edit: bool,
                 user: bool, branch: bool, global_: bool, json_: bool, vault: Path | None) -> int:
    # lazy: the per-turn commands import this module (``cli.hot``) and do not need it (measured +118 ms)
    from acpmem.write.remember import remember as write

    if text is not None and edit:
        raise UsageError("give TEXT or --edit, not both", "drop one")
    if branch and global_:
        raise UsageError("--branch and --global ask for two different scopes", "pass one of them")
    if text == "-" or (text is None and not edit and not sys.stdin.isatty()):
        text = _from_stdin()
    elif text is None:
        text = _from_editor(type_, importance, user)
    with using(open_for_user(vault) if user else open_vault(vault)) as v:
        entry, sha = write(v, text, type=type_, importance=importance, title=title, user=user,
                           scope="branch" if branch else "global" if global_ else None)
    layer = "user" if user else v.layer
    if json_:
        out_json({"id": entry.id, "title": entry.title, "path": entry.path, "commit": sha, "layer": layer,
                  "branch": (entry.extra or {}).get("branch")})
    else:
        where = " in the user vault" if layer == "user" else ""
        b = (entry.extra or {}).get("branch")
        on = f", on branch {b}" if b else ""
        out(f"Remembered #{entry.id} {entry.title}{where} ({entry.path}, commit {sha[:12]}{on}).")
    return 0


def _from_stdin() -> str:
    """The text piped in: at most one byte past what an entry file may hold (``remember < /dev/zero`` ends), UTF-8
    whatever the locale says."""
    # lazy: the per-turn commands import this module (``cli.hot``) and do not need it (measured +5.5 ms)
    from acpmem.core.entryfile import MAX_FILE_BYTES
    from acpmem.infra.files import read_bounded

    data = read_bounded(sys.stdin.buffer, MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise Refused(f"the text on stdin is over {MAX_FILE_BYTES:,} bytes, more than an entry may hold",
                         "pipe in the entry's text, a few KB; nothing was written")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("the text on stdin is not UTF-8", "pipe in UTF-8 text; nothing was written") from None


EDITOR_TEMPLATE_END = "-->"


def editor_template(type_: str | None, importance: int | None, user: bool) -> str:
    """The draft ``remember --edit`` opens: a comment saying what to write, dropped from what is saved."""
    kind = type_ or ("user-preference" if user else "fact (or the vault's first type)")
    return (f"<!-- acpmem remember: write the memory below this comment, then save and close the editor.\n"
            f"     The first line is the title (unless --title is given); the rest is the body, kept verbatim.\n"
            f"     Type: {kind}; importance: {importance or 5} (--type / --importance change them).\n"
            f"     This comment is dropped. An empty text writes nothing. {EDITOR_TEMPLATE_END}\n\n")


def strip_template(text: str) -> str:
    """The person's text without the template's comment (when it is still at the top)."""
    if text.startswith("<!-- acpmem remember:"):
        end = text.find(EDITOR_TEMPLATE_END)
        if end >= 0:
            return text[end + len(EDITOR_TEMPLATE_END):].lstrip("\n")
    return text


def _from_editor(type_: str | None, importance: int | None, user: bool) -> str:
    # lazy: the per-turn commands import this module (``cli.hot``) and do not need it (measured +39 ms)
    import os
    import subprocess
    import tempfile

    from acpmem.vault.edit import editor_command

    fd, path = tempfile.mkstemp(prefix="acpmem-remember-", suffix=".md")
    os.write(fd, editor_template(type_, importance, user).encode("utf-8"))
    os.close(fd)
    try:
        try:
            rc = subprocess.call([*editor_command(), path])
        except FileNotFoundError:
            raise AcpmemError(f"editor {editor_command()[0]!r} not found", "set $EDITOR, e.g. EDITOR=nano",
                              code="editor") from None
        if rc != 0:
            raise AcpmemError(f"the editor exited with status {rc}; nothing was written", "run the command again",
                              code="editor")
        with open(path, encoding="utf-8") as f:
            return strip_template(f.read())
    finally:
        os.unlink(path)


IMPLS = {"remember": remember_cmd}
