"""``acp memory edit``: a human correction through $EDITOR, validated before it is committed.

The draft lives in ``.acpmem/edit/<id>.md`` until it is committed, so an invalid edit is never lost: the reason
is shown, and the editor re-opens on the same draft (on a terminal) or the draft path is printed for a retry
with ``--from``.
"""
from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from collections.abc import Callable

from acpmem.core.entryfile import parse_entry_bytes
from acpmem.core.errors import AcpmemError, EntryInvalid, SecretRefused, UsageError
from acpmem.infra.files import atomic_write
from acpmem.search.catalog import secret_kind
from acpmem.vault.writer import KIND_EDIT, Vault


def _editor() -> list[str]:
    cmd = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    return shlex.split(cmd)


def _validate(v: Vault, entry, text: str) -> None:
    new = parse_entry_bytes(text.encode("utf-8"), entry.path, v.settings.types)
    if new.id != entry.id:
        raise EntryInvalid(entry.path, "id", f"must stay '{entry.id}' (ids are stable; citations refer to them)")
    kind = secret_kind(new)
    if kind:
        raise SecretRefused(f"the edit contains what looks like a secret ({kind})",
                            "remove it; secrets never enter the vault")


def _refuse(v: Vault, entry, draft: Path, text: str, exc: EntryInvalid | SecretRefused) -> AcpmemError:
    """The error for a refused edit. The draft keeps the person's text — minus any secret, which never stays on
    disk, not even in local state."""
    note = ""
    if isinstance(exc, SecretRefused):
        from acpmem.core.redact import redact

        atomic_write(draft, redact(text)[0])
        note = " (the secret is replaced by [REDACTED:…] there)"
    return AcpmemError(f"edit refused: {exc.message}",
                       f"nothing was changed; your text is kept in {draft}{note} — run `acp memory edit {entry.id}` "
                       f"to re-open it, or fix it and `acp memory edit {entry.id} --from {draft}`")


def edit_entry(v: Vault, prefix: str, *, from_file: Path | None = None, message: str | None = None,
               confirm: Callable[[str], bool] | None = None) -> str:
    """Edit one entry; ``confirm(question)`` (a terminal prompt, from the CLI) decides whether to re-open the
    editor after an invalid edit — without it the draft is kept and the edit refused."""
    v.require_writable()
    entry = v.resolve(prefix)
    path = v.entry_path(entry)
    original = path.read_bytes().decode("utf-8")
    draft = v.state_dir / "edit" / f"{entry.id}.md"
    draft.parent.mkdir(parents=True, exist_ok=True)
    if from_file is not None:
        try:
            text = Path(from_file).read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {from_file}: {exc}", "pass a UTF-8 file") from None
    else:
        if not draft.exists():
            atomic_write(draft, original)
        while True:
            try:
                rc = subprocess.call([*_editor(), str(draft)])
            except FileNotFoundError:
                raise UsageError(f"editor {_editor()[0]!r} not found", "set $EDITOR, e.g. EDITOR=nano") from None
            if rc != 0:
                raise AcpmemError(f"the editor exited with status {rc}; nothing was changed",
                                  f"your draft is kept in {draft}")
            text = draft.read_text("utf-8")
            try:
                _validate(v, entry, text)
                break
            except (EntryInvalid, SecretRefused) as exc:
                if confirm is None or not confirm(f"Invalid: {exc}\nRe-open the editor?"):
                    raise _refuse(v, entry, draft, text, exc) from None
    if text == original:
        draft.unlink(missing_ok=True)
        return f"No changes to #{entry.id}."
    try:
        _validate(v, entry, text)
    except (EntryInvalid, SecretRefused) as exc:
        if from_file is not None and Path(from_file).resolve() != draft.resolve():
            atomic_write(draft, text)
        raise _refuse(v, entry, draft, text, exc) from None
    # base=original: if the file changed while the editor was open (a fork write, another edit), refuse rather
    # than overwrite that change
    sha = v.replace_entry_text(entry, text, subject=f"edit #{entry.id} {entry.title}",
                               why=message or "Corrected by hand with `acp memory edit`.", kind=KIND_EDIT,
                               base=original)
    draft.unlink(missing_ok=True)
    return f"Saved #{entry.id} (commit {sha[:12]})."
