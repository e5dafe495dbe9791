"""The commands a person (or a script) runs by hand to write and tend a vault — ``remember``, ``init``, ``doctor``
and ``sync`` — as plain functions, beside the per-turn commands in ``acpmem.cli.hot``, and how a command opens the
vault it writes to.

Their typer commands (``acpmem.cli.commands_*``) pass their parameters through unchanged, and the fast path
(``acpmem.cli.fast``) calls the same functions with the same parameters, so both print the same bytes; a command
line the fast path cannot parse exactly (``-`` for stdin, help, anything unusual) goes to typer, which calls them
too. Typer and the pydantic it brings cost ~140 ms of CPU of such a run on its own (a third of a ``remember``,
two thirds of an ``init``). Kept free of typer; everything heavy is imported when the command runs.

Each function prints its output and returns the exit code, or raises ``AcpmemError``.
"""
from __future__ import annotations

import sys
from pathlib import Path

from acpmem.cli.output import emit_warnings, fail, out, out_json, using, warn
from acpmem.core.errors import AcpmemError, Refused, SyncConflict, UsageError, VaultNotFound


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


def init_cmd(*, path: str | None, example: bool, user: bool, json_: bool) -> int:
    # lazy: the per-turn commands import this module (``cli.hot``) and do not need it (measured +34 ms)
    from acpmem.vault.create import init_user_vault, init_vault

    if user:
        if path:
            raise UsageError("init --user takes no PATH", "set ACPMEM_USER_VAULT=PATH to put the user vault there")
        v = init_user_vault(example=example)
    else:
        v = init_vault(path or None, example=example)
    with using(v):   # its warnings (no git identity) said here, with how to set one
        n = len(v.load().entries)
    if json_:
        out_json({"vault": str(v.root), "entries": n})
        return 0
    # lazy: the per-turn commands import this module (``cli.hot``) and do not need it (measured +7.8 ms)
    from acpmem.core.render import count_entries

    out(f"Created the vault at {v.root} ({count_entries(n)}).")
    if user:   # `list` here would fail outside a project: the user vault is read beside a project's vault
        out("Next: in a project, `acp memory init` creates its vault and `acp memory list` there shows both layers; "
            "`acp memory remember TEXT --type user-preference --importance 7 --user` writes here from anywhere.")
        return 0
    out("Next: `acp memory list` to see the index, `acp memory --help` for everything else.")
    return 0


def doctor_cmd(*, fix: bool, json_: bool, vault: Path | None) -> int:
    # lazy: the per-turn commands import this module (``cli.hot``) and do not need it (measured +94 ms)
    from acpmem.upkeep.doctor import doctor as check

    with open_vault(vault) as v:   # closed when done (the index, libgit2's packs), its findings said below
        rep = check(v, fix=fix)
    if json_:
        out_json({"ok": rep.ok, "findings": [f.to_json() for f in rep.findings]})
    else:
        for f in rep.findings:
            out(f"{f.level:<8} {f.what}" + (f"\n         → {f.fix}" if f.fix else ""))
    if rep.ok:
        return 0
    errors = sum(f.level == "error" for f in rep.findings)
    return fail(f"{errors} problem{'s' if errors != 1 else ''} found in the vault",
                "each finding says how to fix it" + ("" if fix else "; `--fix` repairs what is safe"),
                code="problems_found")


def sync_cmd(*, remote: str | None, user: bool, json_: bool, vault: Path | None) -> int:
    # lazy: the per-turn commands import this module (``cli.hot``) and do not need it (measured +42 ms)
    from acpmem.vault.sync import sync as run_sync

    with (open_user(vault) if user else open_vault(vault)) as v:
        try:
            result = run_sync(v, remote)   # on a terminal, its steps are counted (cli.progress)
        except SyncConflict as exc:
            if not json_:   # under --json the error object's details name them
                for p in exc.data.get("paths", []):
                    warn(f"conflict: {p}")
            raise
        finally:
            emit_warnings(v)   # a conflict's warnings too, unlike `using`
    if json_:
        out_json(result.to_json())
        return 0
    how = {"up-to-date": "", "fast-forward": " (fast-forward)", "replay": " (this clone's commits replayed on top)",
           "merge": " (merged)", "finished-merge": " (your resolved merge committed)",
           "first-push": " (first push)"}[result.merge]
    tries = f" after {result.attempts} tries (the remote moved meanwhile)" if result.attempts > 1 else ""
    out(f"Synced with {result.remote}/{result.branch}: {result.incoming} commit(s) in{how}, {result.outgoing} out"
        f"{' and pushed' if result.pushed else ''}{tries}. HEAD {result.head[:12]}.")
    return 0


IMPLS = {"remember": remember_cmd, "init": init_cmd, "doctor": doctor_cmd, "sync": sync_cmd}
