"""What other harnesses remember, read into import candidates (``docs/import-export.md``).

One reader per format; ``detect`` names the format of a path from its name and its first bytes; ``read_source``
turns a file or folder into ``Candidate`` values (``acpmem.upkeep.importrules``): one memory-sized piece of text
each, with where it came from (file, section, line) and the type and importance its format's rule gives it, or the
reason it is skipped.

Reads files only; the vault is never touched here (``acpmem.upkeep.importing`` plans and writes).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from acpmem.core.errors import AcpmemError, UsageError
from acpmem.infra.files import NotRegularFile, expand_home, read_regular
from acpmem.upkeep.importrules import FORMATS, Candidate, markdown_candidates

MAX_SOURCE_BYTES = 4_000_000     # one source file; a bigger one is refused whole (nothing imported)
MAX_FILES = 500                  # files read from one folder
_CLINE_FILES = ("projectbrief.md", "productContext.md", "activeContext.md", "systemPatterns.md", "techContext.md",
                "progress.md")


# --------------------------------------------------------------------------------------------- reading files

def read_text(path: Path) -> str:
    """A source file's text: refused whole when missing, unreadable, over ``MAX_SOURCE_BYTES``, binary or not
    UTF-8."""
    path = path.resolve() if path.is_symlink() else path   # a link a person made to their own memory file
    try:
        raw = read_regular(path, MAX_SOURCE_BYTES + 1)
    except FileNotFoundError:
        raise AcpmemError(f"{path} does not exist", "check the path (e.g. ./CLAUDE.md)") from None
    except NotRegularFile as exc:
        raise AcpmemError(f"{path} {exc.strerror}", "name a file or a folder of memory files") from None
    except OSError as exc:
        raise AcpmemError(f"{path} cannot be read ({exc.strerror or exc})", "check its permissions") from None
    if len(raw) > MAX_SOURCE_BYTES:
        raise AcpmemError(f"{path} is over {MAX_SOURCE_BYTES:,} bytes: too large to be a memory file; nothing was "
                          "imported", "split it, or import the part that holds memories")
    if b"\x00" in raw[:65536] or b"\x00" in raw:
        raise AcpmemError(f"{path} is binary, not text; nothing was imported", "name a markdown or JSON memory file")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise AcpmemError(f"{path} is not UTF-8 text; nothing was imported",
                          "convert it to UTF-8 (e.g. iconv -t utf-8) and run the command again") from None


def front_matter(text: str) -> tuple[dict, str, int]:
    """``(mapping, body, lines used)`` of a ``---`` YAML front matter; ``({}, text, 0)`` without one (or with one
    that is not a mapping)."""
    if not text.startswith("---"):
        return {}, text, 0
    lines = text.split("\n")
    for i in range(1, min(len(lines), 200)):
        if lines[i].strip() == "---":
            # lazy: yaml is heavy, never imported at start-up
            import yaml

            try:
                meta = yaml.safe_load("\n".join(lines[1:i]))
            except yaml.YAMLError:
                return {}, text, 0
            if not isinstance(meta, dict):
                return {}, text, 0
            return meta, "\n".join(lines[i + 1:]), i + 1
    return {}, text, 0


# --------------------------------------------------------------------------------------------- detection

def detect(path: Path, text: str | None = None) -> str | None:
    """The format of a file, from its name, its folder and its first bytes; None when none fits."""
    name = path.name
    low = name.lower()
    if low in ("claude.md", "claude.local.md"):
        return "claude-md"
    if low == "agents.md" or low == "agents.override.md":
        return "agents-md"
    if low == "gemini.md":
        return "gemini"
    if low == ".cursorrules" or low.endswith(".mdc"):
        return "cursor"
    if low in ("summaries.jsonl", "rules.json", "turns.jsonl", "todos.json"):
        return "claude-recall"
    if path.parent.name == "memory-bank" or name in _CLINE_FILES:
        return "cline"
    if text is None or not low.endswith((".md", ".markdown")):
        return None
    head = text[:4000]
    if head.startswith("# billion-context session handoff"):
        return "acp-handoff"
    if low == "memory.md":
        return "codex-memories" if re.search(r"^# Task Group:", text, re.M) else "claude-memory"
    meta, _, _ = front_matter(head if head.count("---") >= 2 else text)
    if "permalink" in meta:
        return "basic-memory"
    if "name" in meta and "description" in meta and (isinstance(meta.get("metadata"), dict) or "type" in meta):
        return "claude-memory"
    return None


def folder_files(folder: Path) -> list[tuple[Path, str]]:
    """The memory files of a folder and their formats: a Claude Code memory folder, a Cline memory bank, a Cursor
    rules folder, a billion-claude-recall session folder, a Codex memories folder, a basic-memory project, or a
    project root (its CLAUDE.md, AGENTS.md, GEMINI.md, .cursorrules, .cursor/rules/, memory-bank/)."""
    found: list[tuple[Path, str]] = []
    if (folder / "summaries.jsonl").exists() or (folder / "rules.json").exists() or (folder / "turns.jsonl").exists():
        return [(folder / n, "claude-recall") for n in ("summaries.jsonl", "rules.json", "turns.jsonl")
                if (folder / n).exists()]
    if folder.name == "memory-bank":
        return [(p, "cline") for p in sorted(folder.glob("*.md"))][:MAX_FILES]
    if folder.name == "rules" and folder.parent.name == ".cursor":
        return [(p, "cursor") for p in sorted(folder.rglob("*.mdc"))][:MAX_FILES]
    project = False
    for name in ("CLAUDE.md", "CLAUDE.local.md", "AGENTS.md", "GEMINI.md", ".cursorrules"):
        p = folder / name
        if p.is_file():
            found.append((p, detect(p) or "markdown"))
            project = True
    if (folder / ".cursor" / "rules").is_dir():
        found += [(p, "cursor") for p in sorted((folder / ".cursor" / "rules").rglob("*.mdc"))]
        project = True
    if (folder / "memory-bank").is_dir():
        found += [(p, "cline") for p in sorted((folder / "memory-bank").glob("*.md"))]
        project = True
    if project:
        return found[:MAX_FILES]
    mem = folder / "MEMORY.md"
    if mem.is_file():
        text = read_text(mem)
        if re.search(r"^# Task Group:", text, re.M):
            return [(mem, "codex-memories")]
        return [(p, "claude-memory") for p in sorted(folder.rglob("*.md"))][:MAX_FILES]
    notes = sorted(p for p in folder.rglob("*.md") if ".git" not in p.parts)[:MAX_FILES]
    for p in notes:
        fmt = detect(p, read_text(p))
        if fmt is not None:
            found.append((p, fmt))
    return found


# --------------------------------------------------------------------------------------------- the formats

_CLAUDE_TYPES = {"user": ("user-preference", 7), "feedback": ("lesson", 7), "project": ("fact", 6),
                 "reference": ("reference", 5)}


def claude_memory(path: Path, text: str) -> list[Candidate]:
    """Claude Code's auto-memory: a topic file (front matter ``name``, ``description``, ``metadata.type`` — or a
    top-level ``type`` in older versions — of user / feedback / project / reference, then the fact) is one
    entry; MEMORY.md is its index (``- [Title](file.md) — hook`` lines, skipped) plus whatever else a person
    wrote there (read as markdown)."""
    meta, body, used = front_matter(text)
    if not meta:
        return markdown_candidates(path, text, "claude-memory")
    kind = meta.get("metadata", {}).get("type") if isinstance(meta.get("metadata"), dict) else None
    kind = kind or meta.get("type")
    typ, imp = _CLAUDE_TYPES.get(str(kind), ("fact", 5))
    used += body[:len(body) - len(body.lstrip())].count("\n")   # the blank lines before the fact
    body = body.strip()
    title = meta.get("description") or meta.get("name")
    title = str(title).strip() if title else None
    if not body:
        return [Candidate(format="claude-memory", file=str(path), text="", key="file", line=used + 1,
                          skip="an empty memory file")]
    return [Candidate(format="claude-memory", file=str(path), text=body, key="file", line=used + 1, title=title,
                      section=str(meta.get("name") or ""), type=typ, importance=imp,
                      rule=f"Claude Code memory type '{kind}' → {typ}, importance {imp}")]


def whole_file_markdown(path: Path, text: str, fmt: str, *, always: bool = False) -> list[Candidate]:
    """A file whose pieces are read as markdown (Cline's memory bank, Cursor rules, basic-memory notes): the
    front matter gives the title; Cursor's ``alwaysApply: true`` adds 1 to importance (the rule is in every
    session)."""
    meta, body, used = front_matter(text)
    prefix = str(meta.get("title") or meta.get("description") or "").strip() if meta else ""
    prefix = prefix or path.stem
    cands = markdown_candidates(path, body, fmt, user_level=False, section_prefix=prefix, first_line=used + 1)
    if fmt == "cursor" and (always or meta.get("alwaysApply") is True):
        cands = [c.with_changes(importance=min(10, c.importance + 1), rule=c.rule + "; alwaysApply: +1")
                 if c.skip is None else c for c in cands]
    if fmt == "basic-memory":
        cands = [_basic_observation(c) for c in cands]
    return cands


_OBSERVATION = re.compile(r"^\[([^\]]+)\]\s+(.*)$", re.S)
_BASIC_TYPES = {"decision": "decision", "preference": "user-preference", "lesson": "lesson", "fact": "fact",
                "reference": "reference", "tip": "lesson", "issue": "lesson", "problem": "lesson"}


def _basic_observation(c: Candidate) -> Candidate:
    """A basic-memory observation ``- [category] text #tag``: its category names the type when it is one we
    know; a relation line (``- relates_to [[Other]]``) is a link, not a memory."""
    if c.skip is not None:
        return c
    if re.match(r"^[a-z_]+\s+\[\[[^\]]+\]\]\s*$", c.text):
        return c.with_changes(skip="a relation between notes, not a memory")
    m = _OBSERVATION.match(c.text)
    if m:
        cat = m.group(1).strip().lower()
        text = re.sub(r"(?:\s+#[\w-]+)+\s*$", "", m.group(2)).strip()
        typ = _BASIC_TYPES.get(cat)
        if typ:
            return c.with_changes(text=text, type=typ, rule=f"basic-memory category [{cat}] → {typ}")
        return c.with_changes(text=text)
    return c


def codex_memories(path: Path, text: str) -> list[Candidate]:
    """Codex's consolidated memories (``~/.codex/memories/MEMORY.md``): ``# Task Group:`` blocks whose
    ``## User preferences``, ``## Reusable knowledge`` and ``## Failures and how to do differently`` bullets are
    memories (user-preference 7, fact 6, lesson 6); the ``## Task <n>`` sections are routing (rollout files,
    keywords) and are skipped."""
    out = []
    for c in markdown_candidates(path, text, "codex-memories"):
        last = c.section.rsplit(" > ", 1)[-1].lower() if c.section else ""
        where = c.section.lower()
        if " > task " in f" > {where}" and not any(k in last for k in ("preferences", "knowledge", "failures")):
            out.append(c.with_changes(skip="a Codex task routing section (rollout files, keywords), not a memory"))
            continue
        if c.skip is not None:
            out.append(c)
            continue
        text_ = re.sub(r"(\s*\[Task \d+\])+\s*$", "", c.text).strip()
        if "user preferences" in last:
            out.append(c.with_changes(text=text_, type="user-preference", importance=7,
                                      rule="Codex '## User preferences' → user-preference, importance 7"))
        elif "reusable knowledge" in last:
            out.append(c.with_changes(text=text_, type="fact", importance=6,
                                      rule="Codex '## Reusable knowledge' → fact, importance 6"))
        elif "failures" in last:
            out.append(c.with_changes(text=text_, type="lesson", importance=6,
                                      rule="Codex '## Failures and how to do differently' → lesson, importance 6"))
        else:
            out.append(c.with_changes(skip="a Codex task-group header (scope, applies_to), not a memory"))
    return out


def acp_handoff(path: Path, text: str) -> list[Candidate]:
    """billion-context's ``bili export`` handoff: each ``## Block bN — topic`` section (tier, tokens, then the
    summary) is one entry — a tier-3 block as a decision-grade fact of importance 6, lower tiers 5; a folded or full
    conversation (``## Conversation`` / ``## Full conversation``) is a transcript, skipped (``acp memory extract``
    distils transcripts)."""
    out: list[Candidate] = []
    blocks = list(re.finditer(r"^## (.+)$", text, re.M))
    for i, m in enumerate(blocks):
        head = m.group(1).strip()
        end = blocks[i + 1].start() if i + 1 < len(blocks) else len(text)
        body = text[m.end():end]
        line = text.count("\n", 0, m.start()) + 1
        bm = re.match(r"Block (b\d+)(?:\s+—\s+(.*))?$", head)
        if not bm:
            out.append(Candidate(format="acp-handoff", file=str(path), text=head, section=head, line=line,
                                 key=head, skip="a conversation transcript, not a memory (use `acp memory extract`)"))
            continue
        body = body.split("\n---\n")[0]
        tier_m = re.search(r"^tier (\d)", body, re.M)
        tier = int(tier_m.group(1)) if tier_m else 1
        summary = "\n".join(ln for ln in body.strip().split("\n") if not re.match(r"^tier \d · ", ln)).strip()
        summary = summary.split("\n### Original messages")[0].strip()
        imp = 6 if tier >= 3 else 5
        out.append(Candidate(format="acp-handoff", file=str(path), text=summary, section=head, line=line,
                             key=bm.group(1), title=bm.group(2), type="fact", importance=imp,
                             rule=f"a tier-{tier} compression block summary → fact, importance {imp}")
                   if summary else
                   Candidate(format="acp-handoff", file=str(path), text="", section=head, line=line,
                             key=bm.group(1), skip="an empty block"))
    return out


def claude_recall(path: Path, text: str) -> list[Candidate]:
    """billion-claude-recall's archive: ``rules.json`` rules (``recall_rule``: standing rules the model recorded)
    are user preferences of importance 7; ``summaries.jsonl`` records (``{id, tier, from, to, ts, text, covers?}``)
    not covered by a later digest are facts of importance 4 (a session's recap); ``turns.jsonl`` is the raw
    conversation, skipped whole; ``todos.json`` is a task list, skipped."""
    name = path.name.lower()
    if name in ("turns.jsonl", "todos.json"):
        what = "the archived conversation turns" if name == "turns.jsonl" else "a to-do list"
        return [Candidate(format="claude-recall", file=str(path), text="", key=name,
                          skip=f"{what}, not memories (`acp memory extract` distils a conversation)")]
    if name == "rules.json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise AcpmemError(f"{path} is not JSON ({exc.msg} at line {exc.lineno})",
                              "name billion-claude-recall's rules.json as it wrote it") from None
        rules = data.get("rules", data) if isinstance(data, dict) else data
        if not isinstance(rules, list):
            raise AcpmemError(f"{path} holds no list of rules", "name billion-claude-recall's rules.json")
        out = []
        for i, r in enumerate(rules):
            rid = r.get("id") if isinstance(r, dict) else None
            rtext = r.get("text") if isinstance(r, dict) else r
            if not isinstance(rtext, str) or not rtext.strip():
                continue
            out.append(Candidate(format="claude-recall", file=str(path), text=rtext.strip(), key=str(rid or f"rule{i + 1}"),
                                 section=str(rid or ""), line=i + 1, type="user-preference", importance=7,
                                 rule="a recall_rule standing rule → user-preference, importance 7"))
        return out
    recs = []
    for i, line in enumerate(text.split("\n")):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            raise AcpmemError(f"{path} line {i + 1} is not JSON", "name billion-claude-recall's summaries.jsonl "
                                                                  "as it wrote it") from None
        if isinstance(rec, dict) and isinstance(rec.get("text"), str):
            recs.append((i + 1, rec))
    covered = {c for _, r in recs for c in (r.get("covers") or []) if isinstance(c, str)}
    out = []
    for n, r in recs:
        sid = str(r.get("id") or f"line{n}")
        span = f"turns {r.get('from')}-{r.get('to')}" if r.get("from") is not None else ""
        if sid in covered:
            out.append(Candidate(format="claude-recall", file=str(path), text=r["text"].strip(), key=sid, line=n,
                                 section=sid, skip=f"summary {sid} is covered by a later digest (imported instead)"))
            continue
        out.append(Candidate(format="claude-recall", file=str(path), text=r["text"].strip(), key=sid, line=n,
                             section=" ".join(p for p in (sid, span) if p), type="fact", importance=4,
                             rule=f"a tier-{r.get('tier', 1)} session summary → fact, importance 4"))
    return out


def read_file(path: Path, fmt: str) -> list[Candidate]:
    text = read_text(path)
    home_level = path.parent == Path.home() / ".claude" or path.parent == Path.home() / ".codex" or \
        path.parent == Path.home() / ".gemini"
    if fmt in ("claude-md", "agents-md", "gemini", "markdown"):
        return markdown_candidates(path, text, fmt, user_level=home_level)
    if fmt == "claude-memory":
        return claude_memory(path, text)
    if fmt == "codex-memories":
        return codex_memories(path, text)
    if fmt in ("cline", "cursor", "basic-memory"):
        return whole_file_markdown(path, text, fmt, always=path.name == ".cursorrules")
    if fmt == "acp-handoff":
        return acp_handoff(path, text)
    if fmt == "claude-recall":
        return claude_recall(path, text)
    raise UsageError(f"unknown format '{fmt}'", f"one of: {', '.join(FORMATS)}")


def read_source(source: str | Path, fmt: str | None = None) -> tuple[list[Path], str, list[Candidate]]:
    """The files of ``source`` (a file or a folder), the format (``fmt`` forces it) and their candidates. Errors:
    a missing or unreadable source, a format that cannot be told (``--format`` names it), a huge or binary file."""
    if fmt is not None and fmt not in FORMATS:
        raise UsageError(f"unknown format '{fmt}'", f"one of: {', '.join(FORMATS)}")
    path = expand_home(source, "the source")
    try:
        there = path.exists() or path.is_symlink()
    except OSError as exc:   # a name too long for the file system, …
        raise AcpmemError(f"{path}: {exc.strerror or exc}", "check the path") from None
    if not there:
        raise AcpmemError(f"{path} does not exist", "check the path (e.g. ./CLAUDE.md or "
                                                    "~/.claude/projects/<project>/memory)")
    if path.is_dir():
        files = [(p, fmt or f) for p, f in folder_files(path)]
        if not files:
            raise AcpmemError(f"no memory files found in {path}",
                              "name the file itself, or pass --format (one of: " + ", ".join(FORMATS) + ")")
    else:
        got = fmt
        if got is None:
            text = read_text(path)
            got = detect(path, text)
        if got is None:
            raise AcpmemError(f"cannot tell the format of {path}",
                              "pass --format (one of: " + ", ".join(FORMATS) + ")")
        files = [(path, got)]
    cands: list[Candidate] = []
    for p, f in files:
        cands += read_file(p, f)
    formats = sorted({f for _, f in files})
    return [p for p, _ in files], ",".join(formats), cands
