"""What a memory is in another harness's markdown: the pieces of a text (``markdown_pieces``), the rule that tells a
memory from an instruction and gives each memory a type and an importance (``classify``), and the ``Candidate`` value
every format's reader makes (``docs/import-export.md``).

Memory or instruction (the rule ``classify`` states): a harness file mixes durable knowledge ("We deploy with Fly;
staging is eu-west") with instructions for running the project ("Run `make test` before a commit"). A piece is
an **instruction** — skipped — when it is a code block, when it sits under a heading about running the project
(build, commands, scripts, setup, install, usage, testing, development, environment, workflow) and names a command
(inline code, or a line starting with run / use / execute / install / a tool's name), or when it sits under a
heading that says *instructions*. A piece of fewer than ``MIN_WORDS`` words of prose (a lone link, a label) is too
short to be a memory, and one about the file itself ("This file provides guidance to Claude Code …") is not one.
Everything else is a memory. No I/O.
"""
from __future__ import annotations

import hashlib
import re

from acpmem.core.values import Value

MIN_WORDS = 3                    # words of prose a piece needs to be a memory
BEGIN_MARK = "<!-- acpmem:begin -->"   # acpmem's own export block (``acpmem.upkeep.exporting``): never imported
END_MARK = "<!-- acpmem:end -->"

# format -> the harness that writes it (the provenance's ``harness``)
FORMATS = {
    "claude-md": "claude-code",        # CLAUDE.md, CLAUDE.local.md
    "claude-memory": "claude-code",    # auto-memory: MEMORY.md + topic files under ~/.claude/projects/<p>/memory/
    "agents-md": "codex",              # AGENTS.md
    "codex-memories": "codex",         # ~/.codex/memories/MEMORY.md (# Task Group blocks)
    "gemini": "gemini-cli",            # GEMINI.md
    "cline": "cline",                  # memory-bank/*.md
    "cursor": "cursor",                # .cursor/rules/*.mdc, .cursorrules
    "basic-memory": "basic-memory",    # notes with permalink front matter, - [category] observations
    "claude-recall": "billion-claude-recall",   # ~/.claude/recall/<session>/{summaries.jsonl,rules.json,turns.jsonl}
    "acp-handoff": "billion-context",  # `bili export` session handoff markdown
    "markdown": "markdown",            # any markdown, only when asked for with --format
}

_COMMAND_HEADING = re.compile(r"\b(build|builds|building|commands?|scripts?|setup|set up|install|installation|usage|"
                              r"testing|tests?|run|running|development|dev|environment|workflow|getting started|"
                              r"quick ?start|lint|linting|tooling|ci)\b", re.I)
_IMPERATIVE = re.compile(r"^(run|use|execute|install|type|call|invoke|start|launch|npm|pnpm|yarn|make|pip|uv|cargo|"
                         r"go|python|pytest|docker)\b", re.I)
_BULLET = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`[^`]*`")
_WORD = re.compile(r"[^\W\d_]{2,}|[\u4e00-\u9fff]", re.U)
_LINK_ONLY = re.compile(r"^\s*(?:[-*+]\s*)?\[[^\]]*\]\([^)]*\)\s*(?:[—–-].*)?$")
_ABOUT_FILE = re.compile(r"^\s*this (?:file|document) (?:provides|gives|contains) (?:guidance|instructions|context)|"
                         r"\bprovides guidance to (?:claude|codex|gemini|ai|agents?)\b", re.I)


class Candidate(Value):
    """One piece of another harness's memory: its text, where it is (``file``, ``section``, ``line``; ``key`` for a
    piece that is a whole unit — a topic file, a rule, a summary), the type and importance chosen for it and why,
    or ``skip``: why it is not imported."""

    format: str
    file: str
    text: str
    section: str = ""
    line: int = 0
    key: str | None = None
    title: str | None = None
    type: str = "fact"
    importance: int = 5
    rule: str = ""
    skip: str | None = None

    @property
    def harness(self) -> str:
        return FORMATS[self.format]

    @property
    def hash(self) -> str:
        return text_hash(self.text)


def text_hash(text: str) -> str:
    """The content hash of a piece (16 hex digits of SHA-256 over its text, ends stripped): its provenance, and
    how a re-run knows it has it already."""
    return hashlib.sha256(text.strip().encode("utf-8", "surrogatepass")).hexdigest()[:16]


# --------------------------------------------------------------------------------------------- the rules

def prose_words(text: str) -> int:
    return len(_WORD.findall(_CODE_SPAN.sub(" ", re.sub(r"\]\([^)]*\)", "]", text))))


def classify(text: str, section: str, fmt: str) -> tuple[str, int, str] | str:
    """``(type, importance, rule)`` of a markdown piece, or the reason it is skipped (``str``). See the module
    docstring for memory-or-instruction; the type and importance rules are:

    * type: a heading or text about preferences, style, conventions or rules, or a text that starts with always /
      never / prefer / don't → ``decision`` (``user-preference`` for Cursor and user-level files is decided by the
      caller); pitfalls, gotchas, lessons, known issues, or "because" / "otherwise" / "beware" → ``lesson``; a piece
      that is mostly links → ``reference``; else ``fact``.
    * importance: 5; +2 for MUST / NEVER / ALWAYS / IMPORTANT / CRITICAL in capitals (the author stressed it),
      else +1 for must / never / always; −1 for a piece over 600 characters (a long piece is context, less often a
      rule); within 1..10."""
    words = prose_words(text)
    if _ABOUT_FILE.search(text[:200]):
        return "a note about the file itself (what it is for), not a memory"
    head = section.lower()
    last = section.rsplit(" > ", 1)[-1]
    if re.search(r"\binstructions?\b", last, re.I):
        return f"an instruction to the agent (under '{last}'), not a memory"
    if _COMMAND_HEADING.search(last) and (_CODE_SPAN.search(text) or _IMPERATIVE.match(text.lstrip("-*+ 0123456789.)"))):
        return f"an instruction for running the project (a command under '{last}'), not a memory"
    if words < MIN_WORDS:
        return f"too short to be a memory ({words} word{'s' if words != 1 else ''} of prose)"
    low = text.lower()
    body = low.lstrip("-*+ 0123456789.)")
    if re.search(r"https?://", text) and words < 12:
        typ, why = "reference", "mostly a link (reference)"
    elif re.search(r"\b(we (?:chose|decided|picked|went with|settled on)|decided to|decision)\b", low):
        typ, why = "decision", "a choice that was made (decision)"
    elif re.search(r"\b(pitfall|gotcha|lesson|known issue|troubleshoot|mistake|failure)", head) or \
            re.search(r"\b(because|otherwise|beware|careful|gotcha|turned out|the hard way)\b", low):
        typ, why = "lesson", "a pitfall or a reason (lesson)"
    elif re.search(r"\b(prefer|style|convention|guideline|rule|standard|do and don)", head) or \
            re.match(r"(always|never|prefer|don't|do not|avoid|must)\b", body):
        typ, why = "decision", "a convention or a rule (decision)"
    else:
        typ, why = "fact", "a statement about the project (fact)"
    imp = 5
    if re.search(r"\b(MUST|NEVER|ALWAYS|IMPORTANT|CRITICAL)\b", text):
        imp += 2
    elif re.search(r"\b(must|never|always)\b", low):
        imp += 1
    if len(text) > 600:
        imp -= 1
    return typ, max(1, min(10, imp)), why


# --------------------------------------------------------------------------------------------- markdown pieces

def markdown_pieces(text: str, first_line: int = 1) -> list[tuple[str, str, int, str | None]]:
    """``(text, section, line, skip)`` of each piece of a markdown text: a top-level list item with what is
    nested under it, a paragraph, a table, or a code block (skipped: a command block). Headings name the section
    (``A > B``); HTML comments and acpmem's own export block are left out."""
    out: list[tuple[str, str, int, str | None]] = []
    heads: list[tuple[int, str]] = []
    cur: list[str] = []
    cur_line = 0
    fence: str | None = None
    in_export = in_comment = False

    def section() -> str:
        return " > ".join(h for _, h in heads)

    def flush() -> None:
        nonlocal cur
        if cur:
            piece = "\n".join(cur).strip()
            if piece:
                out.append((piece, section(), cur_line, None))
        cur = []

    lines = text.split("\n")
    for i, raw in enumerate(lines):
        n = i + first_line
        line = raw.rstrip("\r")
        if in_export:
            if line.strip() == END_MARK:
                in_export = False
            continue
        if fence is not None:
            cur.append(line)
            if line.strip().startswith(fence):
                fence = None
                out.append(("\n".join(cur), section(), cur_line, "a code block: commands or code, not a memory"))
                cur = []
            continue
        if in_comment:
            if "-->" in line:
                in_comment = False
            continue
        stripped = line.strip()
        if stripped == BEGIN_MARK:
            flush()
            in_export = True
            continue
        if stripped.startswith("<!--"):
            flush()
            in_comment = "-->" not in stripped
            continue
        m = _FENCE.match(line)
        if m:
            flush()
            fence, cur, cur_line = m.group(1), [line], n
            continue
        h = _HEADING.match(line)
        if h:
            flush()
            level = len(h.group(1))
            while heads and heads[-1][0] >= level:
                heads.pop()
            heads.append((level, h.group(2).strip()))
            continue
        if not stripped:
            # a blank line ends a paragraph; a list item goes on while what follows is indented under it
            nxt = next((x for x in lines[i + 1:] if x.strip()), "")
            if cur and _BULLET.match(cur[0]) and (nxt.startswith(("  ", "\t")) and not _HEADING.match(nxt)):
                continue
            flush()
            continue
        b = _BULLET.match(line)
        if b and len(b.group(1)) == 0:
            flush()
            cur, cur_line = [line], n
            continue
        if not cur:
            cur_line = n
        cur.append(line)
    flush()
    if fence is not None and cur:
        out.append(("\n".join(cur), section(), cur_line, "a code block: commands or code, not a memory"))
    return out


def strip_bullet(text: str) -> str:
    return _BULLET.sub("", text, count=1) if "\n" not in text else text


def markdown_candidates(path: object, text: str, fmt: str, *, user_level: bool = False,
                        section_prefix: str = "", first_line: int = 1) -> list[Candidate]:
    out = []
    for piece, heads, line, skip in markdown_pieces(text, first_line):
        section = " > ".join(p for p in (section_prefix, heads) if p)
        body = strip_bullet(piece)
        if skip is None and _LINK_ONLY.match(piece) and fmt == "claude-memory":
            skip = "an index line of MEMORY.md (the file it points to is imported itself)"
        if skip is None:
            got = classify(body, heads, fmt)
            if isinstance(got, str):
                skip = got
            else:
                typ, imp, why = got
                if typ == "decision" and user_level:
                    typ, why = "user-preference", "a rule in a user-level file (user-preference)"
                out.append(Candidate(format=fmt, file=str(path), text=body, section=section, line=line, type=typ,
                                     importance=imp, rule=why))
                continue
        out.append(Candidate(format=fmt, file=str(path), text=body, section=section, line=line, skip=skip))
    return out
