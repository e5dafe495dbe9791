"""``acp memory edit``: a human correction through $EDITOR, validated before it is committed.

The draft lives in ``.acpmem/edit/<id>.md`` until it is committed, so an invalid edit is never lost: the reason
is shown, and the editor re-opens on the same draft (on a terminal) or the draft path is printed for a retry
with ``--from``.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from acpmem.core.entryfile import MAX_FILE_BYTES, parse_entry_bytes
from acpmem.core.errors import AcpmemError, EntryInvalid, EntryNotFound, Refused, SecretRefused
from acpmem.core.layout import ENTRIES_DIR
from acpmem.core.projectpaths import redact_project_paths
from acpmem.core.redact import redact
from acpmem.infra import files
from acpmem.infra.files import NotRegularFile, atomic_write, read_bounded, read_exact, read_regular
from acpmem.search.catalog import secret_kind
from acpmem.vault.writer import KIND_EDIT, Vault


def editor_command() -> list[str]:
    """The person's editor: $VISUAL, else $EDITOR, else vi or nano, whichever the machine has (split like a shell
    would). With none of them, ``vi``: running it fails with the error that says which variable to set. With no
    editor set and no terminal (stdin or stdout not one: a script, a pipe, a host's tool call) a full-screen editor
    would wait for keys nobody types: refused with one line instead."""
    cmd = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    if not cmd:
        if not (_isatty(sys.stdin) and _isatty(sys.stdout)):
            raise AcpmemError("no editor is set ($VISUAL, $EDITOR) and this is not a terminal: no editor was "
                              "started", "pass the new text with --from FILE, or set EDITOR", code="editor")

        cmd = next((name for name in ("vi", "nano") if shutil.which(name)), "vi")
    return shlex.split(cmd)


_editor = editor_command


def _isatty(stream) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (ValueError, OSError):   # closed
        return False


class _Target:
    """What is edited: an entry, or an entry file that does not parse (``doctor`` lists those)."""

    def __init__(self, path: str, original: str, entry_id: str | None, title: str) -> None:
        self.path, self.original, self.entry_id, self.title = path, original, entry_id, title

    @property
    def name(self) -> str:
        """How the person names it on the command line."""
        return self.entry_id if self.entry_id else self.path


def _target(v: Vault, prefix: str) -> _Target:
    """The entry with this id (or unique prefix); else the one entry file that does not parse named by its path or
    the start of its file name."""
    try:
        entry = v.resolve(prefix)
    except EntryNotFound:
        wanted = (prefix or "").strip().lstrip("#")
        broken = [p.path for p in v.load(with_reads=False).problems]
        hits = [p for p in broken if wanted and (p == wanted or p == f"{ENTRIES_DIR}/{wanted}"
                                                 or p.rpartition("/")[2].startswith(wanted))]
        if len(hits) != 1:
            raise
        try:
            read_regular(v.root / hits[0], 0)
        except NotRegularFile as exc:   # a FIFO in entries/: opening it for the editor would hang
            raise EntryInvalid(hits[0], None, f"{exc.strerror}, so it cannot be edited",
                               f"remove it (rm {v.root / hits[0]})") from None
        except OSError:
            pass
        original = read_exact(v.root / hits[0])
        if original is None:
            raise EntryInvalid(hits[0], None, "cannot be read as UTF-8 text",
                               "fix it in an editor that can, then `acp memory doctor`") from None
        return _Target(hits[0], original, None, hits[0])
    return _Target(entry.path, v.entry_path(entry).read_bytes().decode("utf-8"), entry.id, entry.title)


def _validate(v: Vault, target: _Target, text: str, forbid: tuple[str, ...] = ()) -> str:
    """The id of the edited text, when it is a valid entry that may replace the target (and, in the user vault,
    holds none of the project paths ``forbid``)."""
    new = parse_entry_bytes(text.encode("utf-8"), target.path, v.settings.types)
    why = v.id_problem(target.path, new.id, target.entry_id)   # the check hand edits get too
    if why:
        raise EntryInvalid(target.path, "id", why.removeprefix("field 'id' ").removeprefix(": "),
                           "give this entry an id of its own" if target.entry_id is None else None)
    refuse_unsafe(new, text, target.path, forbid)
    return new.id


def refuse_unsafe(new, text: str, path: str, forbid: tuple[str, ...] = ()) -> None:
    """A person's text for an entry (an edit, a reviewed proposal): no secret and, for the user vault, none of the
    project paths ``forbid`` — else ``SecretRefused`` / ``EntryInvalid``."""
    kind = secret_kind(new)
    if kind:
        raise SecretRefused(f"the edit contains what looks like a secret ({kind})",
                            "remove it; secrets never enter the vault")
    if forbid:
        if redact_project_paths(text, forbid)[1]:
            raise EntryInvalid(path, None, "holds a path of this project, and the user vault is read in "
                               "every project", "remove the path (or write the entry in the project vault)")


def _refuse(v: Vault, target: _Target, draft: Path, text: str, exc: EntryInvalid | SecretRefused) -> AcpmemError:
    """The error for a refused edit. The draft keeps the person's text — minus any secret, which never stays on
    disk, not even in local state."""
    note = ""
    if isinstance(exc, SecretRefused):
        atomic_write(draft, redact(text)[0])
        note = " (the secret is replaced by [REDACTED:…] there)"
    return AcpmemError(f"edit refused: {exc.message}",
                       f"nothing was changed; your text is kept in {draft}{note} — run `acp memory edit {target.name}` "
                       f"to re-open it, or fix it and `acp memory edit {target.name} --from {draft}`")


def edit_entry(v: Vault, prefix: str, *, from_file: Path | None = None, message: str | None = None,
               confirm: Callable[[str], bool] | None = None, forbid_paths: tuple[str, ...] = ()) -> str:
    """Edit one entry — by id or unique prefix, or an entry file that does not parse, by its path or file name;
    ``confirm(question)`` (a terminal prompt, from the CLI) decides whether to re-open the editor after an invalid
    edit — without it the draft is kept and the edit refused. ``forbid_paths``: spellings of the project's folders
    the text may not hold (editing the user vault from a project, ``acpmem.read.layers.project_path_forms``)."""
    v.require_writable()
    target = _target(v, prefix)
    original = target.original
    draft = v.state_dir / "edit" / (f"{target.entry_id}.md" if target.entry_id else target.path.rpartition("/")[2])
    files.ensure_dir(draft.parent)
    if from_file is not None:
        try:   # a pipe or a device may be named (`--from /dev/stdin`): read at most one byte past the limit
            with open(from_file, "rb") as fh:
                data = read_bounded(fh, MAX_FILE_BYTES + 1)
            text = data.decode("utf-8")
        except OSError as exc:
            raise AcpmemError(f"cannot read {from_file}: {exc.strerror or exc}", "pass a UTF-8 file",
                              code="unreadable") from None
        except UnicodeDecodeError as exc:
            raise AcpmemError(f"cannot read {from_file}: not UTF-8 (byte {exc.start})", "pass a UTF-8 file",
                              code="unreadable") from None   # the byte as an entry file's check counts it
        if len(data) > MAX_FILE_BYTES:
            raise Refused(f"{from_file} holds more than {MAX_FILE_BYTES:,} bytes, more than an entry file may",
                             "pass the entry's text: its frontmatter and a body of a few KB; nothing was changed")
    else:
        if not draft.exists():
            atomic_write(draft, original)
        while True:
            try:
                rc = subprocess.call([*_editor(), str(draft)])
            except FileNotFoundError:
                raise AcpmemError(f"editor {_editor()[0]!r} not found", "set $EDITOR, e.g. EDITOR=nano",
                                  code="editor") from None
            if rc != 0:
                raise AcpmemError(f"the editor exited with status {rc}; nothing was changed",
                                  f"your draft is kept in {draft}", code="editor")
            text = draft.read_text("utf-8")
            try:
                _validate(v, target, text, forbid_paths)
                break
            except (EntryInvalid, SecretRefused) as exc:
                if confirm is None or not confirm(f"Invalid: {exc}\nRe-open the editor?"):
                    raise _refuse(v, target, draft, text, exc) from None
    if text == original:
        draft.unlink(missing_ok=True)
        return f"No changes to {'#' + target.entry_id if target.entry_id else target.path}."
    try:
        entry_id = _validate(v, target, text, forbid_paths)
    except (EntryInvalid, SecretRefused) as exc:
        if from_file is not None and Path(from_file).resolve() != draft.resolve():
            atomic_write(draft, text)
        raise _refuse(v, target, draft, text, exc) from None
    # base=original: if the file changed while the editor was open (a fork write, another edit), refuse rather
    # than overwrite that change
    what = f"#{entry_id} {target.title}" if target.entry_id else f"{target.path} (was invalid)"
    sha = v.replace_file_text(target.path, text, subject=f"edit {what}", entry_id=entry_id,
                              why=message or "Corrected by hand with `acp memory edit`.", kind=KIND_EDIT,
                              base=original)
    draft.unlink(missing_ok=True)
    if sha is None:   # the text is what the last commit holds (an uncommitted change was undone): nothing to commit
        return f"Saved #{entry_id}: the file is as the last commit has it (nothing to commit)."
    return f"Saved #{entry_id} (commit {sha[:12]})."
