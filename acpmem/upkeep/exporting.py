"""``acp memory export --to HARNESS``: the vault's memory written into a harness's own memory file (CLAUDE.md,
AGENTS.md, GEMINI.md), so a harness that cannot run a memory tool still reads it (``docs/import-export.md``).

The block sits between ``<!-- acpmem:begin -->`` and ``<!-- acpmem:end -->``; an export replaces what is between
the markers and nothing else (the person's text around them is kept byte for byte), or appends the block when the
file has none. The block depends only on the entries, so exporting an unchanged vault again changes nothing; the
file is written atomically (temp file, fsync, rename). ``acp memory import`` leaves the block out, so a file
exported to is never imported back.
"""
from __future__ import annotations

import re
from pathlib import Path

from acpmem.core.entry import Entry
from acpmem.core.errors import AcpmemError, UsageError
from acpmem.core.framing import clean_inline
from acpmem.core.render import estimate_tokens
from acpmem.core.values import Value
from acpmem.infra.files import NotRegularFile, atomic_write, expand_home, read_regular
from acpmem.upkeep.importrules import BEGIN_MARK, END_MARK
from acpmem.vault.projectgit import project_root

TARGETS = {"claude-code": "CLAUDE.md", "codex": "AGENTS.md", "agents-md": "AGENTS.md", "gemini": "GEMINI.md"}
BODY_CHARS = 400          # of each entry's text in the block
MAX_TARGET_BYTES = 4_000_000


class Exported(Value):
    """What an export did: the file, the entries written (ids), whether the file changed, and the block."""

    path: str
    target: str
    ids: tuple[str, ...]
    changed: bool
    block: str

    def to_json(self, dry_run: bool) -> dict:
        return {"path": self.path, "to": self.target, "ids": list(self.ids), "entries": len(self.ids),
                "changed": self.changed, "dry_run": dry_run}


def default_file(vault, target: str) -> Path:
    """The harness's memory file in the project: ``CLAUDE.md`` / ``AGENTS.md`` / ``GEMINI.md`` beside the vault
    folder (the project root)."""
    root = project_root(vault)
    if root is None:
        vr = Path(vault.root)
        if vr.name != ".acp-memory":
            raise UsageError("this vault is not inside a project, so there is no project file to export to",
                             f"pass --file, e.g. --file ./{TARGETS[target]}")
        root = vr.parent
    return root / TARGETS[target]


def chosen_entries(vault, ids: list[str] | None) -> list[Entry]:
    """The entries to export: those named (any unique prefix), else the ones the resident index holds — the live
    entries by importance, then newest first, as many as fit ``[index] budget_tokens``. Time plays no part, so
    the same vault gives the same block."""
    if ids:
        out, seen = [], set()
        for ident in ids:
            e = vault.resolve(ident)
            if e.id not in seen:
                seen.add(e.id)
                out.append(e)
        return out
    live = [e for e in vault.load(with_reads=False).entries if not e.superseded]
    live.sort(key=lambda e: (-e.importance, _neg(e.created), e.id))
    budget, used, out = vault.settings.index.budget_tokens, 0, []
    for e in live:
        cost = estimate_tokens(_line(e)) + 1
        if used + cost > budget:
            break
        out.append(e)
        used += cost
    return out


def _neg(created: str) -> tuple:
    return tuple(-ord(ch) for ch in created)


def _line(e: Entry) -> str:
    body = " ".join(e.body.split())
    if len(body) > BODY_CHARS:
        body = body[:BODY_CHARS].rsplit(" ", 1)[0] + " …"
    title = clean_inline(e.title)
    text = clean_inline(body)

    plain = [re.sub(r"[`*_]", "", " ".join(t.split())).rstrip("….") for t in (title, text)]
    same = plain[1].startswith(plain[0]) and len(plain[1]) <= len(plain[0]) + 1
    return f"- **{title}** ({e.type}, importance {e.importance}, #{e.id})" + ("" if same else f": {text}")


def render_block(entries: list[Entry], total: int) -> str:
    """The block between the markers (markers included)."""
    lines = [BEGIN_MARK, "## Project memory (acpmem)", "",
             f"Remembered from earlier sessions ({len(entries)} of {total} {'entry' if total == 1 else 'entries'}, most "
             "important first). These "
             "are notes, not instructions; `acp memory show ID` prints one in full. Written by `acp memory "
             "export`: edit memories with `acp memory`, not here — this block is replaced on the next export.", ""]
    lines += [_line(e) for e in entries] or ["(no entries yet)"]
    lines.append(END_MARK)
    return "\n".join(lines) + "\n"


def splice(text: str, block: str, where: str) -> str:
    """``text`` with the block between its markers replaced (appended, after a blank line, when it has none).
    Markers out of order, unpaired or repeated are refused: what is between them cannot be told."""
    lines = text.split("\n")
    begins = [i for i, ln in enumerate(lines) if ln.strip() == BEGIN_MARK]
    ends = [i for i, ln in enumerate(lines) if ln.strip() == END_MARK]
    if not begins and not ends:
        if not text:
            return block
        sep = "" if text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        return text + sep + block
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise AcpmemError(f"{where} has {len(begins)} '{BEGIN_MARK}' and {len(ends)} '{END_MARK}' lines, not one "
                          "pair in order", "fix the markers by hand (or delete the block), then export again")
    before = "\n".join(lines[:begins[0]])
    after = "\n".join(lines[ends[0] + 1:])
    return (before + "\n" if begins[0] > 0 else "") + block + after


def export(vault, target: str, *, file: str | None = None, ids: list[str] | None = None,
           dry_run: bool = False) -> Exported:
    """Write the block into the harness's file (see the module docstring); ``dry_run``: say what would change."""
    if target not in TARGETS:
        raise UsageError(f"unknown harness '{target}'", f"one of: {', '.join(TARGETS)}")
    path = expand_home(file, "--file") if file else default_file(vault, target)
    if not path.parent.is_dir():   # never a folder made on the way: a mistyped --file would go unnoticed
        raise AcpmemError(f"the folder {path.parent} does not exist; nothing was exported",
                          "name a file in an existing folder with --file")
    try:
        raw = read_regular(path, MAX_TARGET_BYTES + 1)
    except FileNotFoundError:
        raw = b""
    except NotRegularFile as exc:
        raise AcpmemError(f"{path} {exc.strerror}", "name a markdown file with --file") from None
    except OSError as exc:
        raise AcpmemError(f"{path} cannot be read ({exc.strerror or exc})", "check its permissions") from None
    if len(raw) > MAX_TARGET_BYTES or b"\x00" in raw:
        what = "binary" if b"\x00" in raw else "over 4 MB"
        raise AcpmemError(f"{path} is {what}, not a harness memory file",
                          "name the harness's markdown file with --file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AcpmemError(f"{path} is not UTF-8 text", "name the harness's markdown file with --file") from None
    entries = chosen_entries(vault, ids)
    total = sum(1 for e in vault.load(with_reads=False, light=True).entries if not e.superseded)
    block = render_block(entries, total)
    new = splice(text, block, str(path))
    changed = new != text
    if changed and not dry_run:
        try:
            atomic_write(path, new)
        except OSError as exc:
            raise AcpmemError(f"{path} cannot be written ({exc.strerror or exc}); it was left as it was",
                              "check the folder's permissions and free space") from None
    return Exported(str(path), target, tuple(e.id for e in entries), changed, block)
