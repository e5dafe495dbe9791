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
from typing import Callable

from acpmem.errors import AcpmemError, EntryInvalid, SecretRefused, UsageError
from acpmem.model import parse_entry_bytes
from acpmem.vault import KIND_EDIT, Vault, atomic_write


def _editor() -> list[str]:
    cmd = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    return shlex.split(cmd)


def _validate(v: Vault, entry, text: str) -> None:
    new = parse_entry_bytes(text.encode("utf-8"), entry.path, v.settings.types)
    if new.id != entry.id:
        raise EntryInvalid(entry.path, "id", f"must stay '{entry.id}' (ids are stable; citations refer to them)")
    from acpmem.secrets import find_secrets

    found = find_secrets(new.title + "\n" + new.body)
    if found:
        raise SecretRefused(f"the edit contains what looks like a secret ({found[0].kind})",
                            "remove it; secrets never enter the vault")


def edit_entry(v: Vault, prefix: str, *, from_file: Path | None = None, message: str | None = None,
               confirm: Callable[[str], bool] | None = None) -> str:
    """Edit one entry; ``confirm(question)`` (a terminal prompt, from the CLI) decides whether to re-open the
    editor after an invalid edit — without it the draft is kept and the edit refused."""
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
        atomic_write(draft, text)
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
                if confirm is not None and confirm(f"Invalid: {exc}\nRe-open the editor?"):
                    continue
                raise AcpmemError(
                    f"edit refused: {exc.message}",
                    f"nothing was changed; your text is kept in {draft} — run `acp memory edit {entry.id}` to "
                    f"re-open it, or fix it and `acp memory edit {entry.id} --from {draft}`") from None
    if text == original:
        draft.unlink(missing_ok=True)
        return f"No changes to #{entry.id}."
    try:
        _validate(v, entry, text)
    except (EntryInvalid, SecretRefused) as exc:
        raise AcpmemError(f"edit refused: {exc.message}",
                          f"nothing was changed; your text is kept in {draft}") from None
    sha = v.replace_entry_text(entry, text, subject=f"edit #{entry.id} {entry.title}",
                               why=message or "Corrected by hand with `acp memory edit`.", kind=KIND_EDIT)
    draft.unlink(missing_ok=True)
    return f"Saved #{entry.id} (commit {sha[:12]})."
