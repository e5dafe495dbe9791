"""Output forms of entries: plain lines, JSON, markdown, the resident-index prompt and MEMORY.md.

Pure: takes entries and scores, returns text. The terminal table (rich) is built in the CLI, which alone knows
whether it writes to a terminal.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from datetime import datetime

from acpmem.core.clock import parse_iso
from acpmem.core.entry import Entry
from acpmem.core.framing import DATA_NOTICE_EN, DATA_NOTICE_ZH, clean_inline, frame
from acpmem.core.lazyre import compile_later
from acpmem.core.score import Scored
from acpmem.core.settings import Settings


_MAYBE_HIDDEN = compile_later(r"[^\t\n\x20-\x7e]")


def _shown(ch: str) -> str:
    if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
        o = ord(ch)
        return f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}"
    return ch


def terminal_safe(text: str) -> str:
    """Text for a person's terminal: what a reader cannot see or what changes how the line is laid out — control
    characters (an escape sequence), zero-width and bidi characters (U+202E turns a line around), tag characters —
    written as ``\\uXXXX``, so it shows instead of acting. Newlines and tabs stay. (JSON output keeps the text as
    stored; the prompt forms strip these characters, ``acpmem.core.framing``.)"""
    return _MAYBE_HIDDEN.sub(lambda m: _shown(m.group()), text)


_PATH_ESCAPES = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r",
                 '"': '\\"', "\\": "\\\\"}


def quote_path(path: str) -> str:
    """A file name as git prints it with ``core.quotepath``: unchanged when it holds only characters a reader can
    see; else between double quotes, with C escapes (``\\t``, ``\\"``, ``\\\\``) and each UTF-8 byte of a
    character a reader cannot see (an escape sequence, zero-width, bidi) as octal ``\\ooo`` — a name holding
    terminal escapes (OSC 52 writes the clipboard) shows instead of acting. Visible non-ASCII stays as it is."""
    if not _MAYBE_HIDDEN.search(path) and '"' not in path and "\\" not in path:
        return path
    out, quoted = [], False
    for ch in path:
        if ch in _PATH_ESCAPES:
            out.append(_PATH_ESCAPES[ch])
            quoted = True
        elif ch >= " " and ch != "\x7f" and unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Zl", "Zp", "Co",
                                                                           "Cn"):
            out.append(ch)
        else:
            out.append("".join(f"\\{b:03o}" for b in ch.encode("utf-8", "surrogatepass")))
            quoted = True
    return f'"{"".join(out)}"' if quoted else path


def problem_line(path: str, field: str | None, reason: str) -> str:
    """An invalid file as a person reads it: the path quoted (``quote_path``), the field named when one is at
    fault, and the reason (made safe for a terminal)."""
    return f"{quote_path(path)}: {f'field {field!r} ' if field else ''}{terminal_safe(reason)}"


def count_entries(n: int) -> str:
    """"1 entry", "2 entries"."""
    return f"{n} entry" if n == 1 else f"{n} entries"


def estimate_tokens(text: str) -> int:
    """A conservative token estimate without a tokenizer: ~4 ASCII characters per token, one per other character
    (CJK text is close to one token per character in current tokenizers)."""
    if text.isascii():
        return (len(text) + 3) // 4
    ascii_n = len(text.encode("ascii", "ignore"))   # (counted in C: this runs for every line of every listing)
    return (ascii_n + 3) // 4 + (len(text) - ascii_n)


def ago(iso: str | None, at: datetime) -> str:
    if not iso:
        return "never read"
    days = (at - parse_iso(iso)).total_seconds() / 86400
    if days < 1:
        return "read today"
    if days < 60:
        return f"read {int(days)}d ago"
    return f"read {int(days / 30)}mo ago"


STALE_MARK = "files changed since written"   # the resident index's and list's word for a stale entry


def stale_flag(files) -> str:
    """`` [stale: a.py, b.py]`` — what ``list`` appends to a stale entry's line (``acpmem.vault.projectgit``)."""
    shown = ", ".join(clean_inline(f) for f in list(files)[:3]) + (" …" if len(files) > 3 else "")
    return f" [stale: {shown} changed]"


def line(e: Entry, layer: str | None = None, stale=None) -> str:
    """``#id [type] title (importance N, created, last_read)`` — the one-line form ``list`` prints; with ``layer``
    (when a user vault is read beside the project's) the layer leads the line, padded to one width; ``stale``: the
    entry's changed files (a flag at the end)."""
    flag = (" [superseded]" if e.superseded else "") + (stale_flag(stale) if stale else "")
    return terminal_safe((f"{layer:<7} " if layer else "") + (f"#{e.id} [{e.type}] {e.title} (importance {e.importance}, created {e.created[:10]}, "
            f"last_read {e.last_read[:10] if e.last_read else 'never'}){flag}"))


def entry_json(e: Entry, extra: dict | None = None) -> dict:
    d = {"id": e.id, "title": e.title, "type": e.type, "importance": e.importance, "created": e.created,
         "last_read": e.last_read, "citation": [c.to_dict() for c in e.citation], "tier": e.tier,
         "source": e.source, "supersedes": list(e.supersedes), "superseded_by": e.superseded_by,
         "path": e.path, "body": e.body}
    if e.extra:
        d["extra"] = e.extra
    if extra:
        d.update(extra)
    return d


def markdown_list(entries: list[Entry], layers: list[str] | None = None) -> str:
    """A markdown table of the entries; with ``layers`` (one per entry) a first column says each one's layer."""
    lead, rule = ("| layer ", "|---") if layers is not None else ("", "")
    out = [f"{lead}| id | type | title | importance | created | last read |", f"{rule}|---|---|---|---|---|---|"]
    for i, e in enumerate(entries):
        title = e.title.replace("|", "\\|")
        out.append((f"| {layers[i]} " if layers is not None else "") +
                   f"| `{e.id}` | {e.type} | {title} | {e.importance} | {e.created[:10]} | "
                   f"{e.last_read[:10] if e.last_read else 'never'} |")
    return terminal_safe("\n".join(out) + "\n")


def index_line(e: Entry, at: datetime, stale=()) -> str:
    """One line of the resident index; an entry in ``stale`` (ids) says its files changed since it was written."""
    mark = f", {STALE_MARK}" if e.id in stale else ""
    return f"- [{e.type}] {clean_inline(e.title)} (#{e.id}, importance {e.importance}, {ago(e.last_read, at)}{mark})"


# What acpmem itself wrote into a prompt: a framed block (its closing line repeats the opening line's nonce), the data
# notice, the resident index's heading and its how-to-read line. A host may hand it back inside the user's message —
# Gemini CLI's non-interactive mode prepends the SessionStart hook's context (the index) to the prompt it passes the
# BeforeAgent hook — and it is not what the user asked about.
_OWN_FRAMED = compile_later(r'<<acpmem-data [^\n]*?nonce="([0-9a-f]+)">>.*?<</acpmem-data nonce="\1">>', re.S)
_OWN_LINES = compile_later(r"# Long-term memory \([^\n]*\)|# 长期记忆（[^\n]*）|To read one in full, call memory_recall [^\n]*"
                           r"|需要全文时调用 memory_recall[^\n]*")


def without_own_text(text: str) -> str:
    """``text`` without what acpmem put into prompts (see above): what is left is the person's own."""
    if "acpmem-data" not in text and "memory_recall" not in text:
        return text
    if "&lt;&lt;acpmem-data" in text:   # Gemini CLI hands the context back with < and > escaped
        text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
    text = _OWN_FRAMED.sub(" ", text)
    for notice in (DATA_NOTICE_EN, DATA_NOTICE_ZH):
        text = text.replace(notice, " ")
    return _OWN_LINES.sub(" ", text)


def prompt_index(ranked: Iterable[Scored], at: datetime, settings: Settings, *, budget_tokens: int | None = None,
                 total_entries: int | None = None, stale=()) -> str:
    """The resident index: a notice, then one framed line per entry by score, cut to the token budget, and a line
    saying how many entries were left out. ``stale``: the ids whose files changed in the project (marked)."""
    budget = settings.index.budget_tokens if budget_tokens is None else budget_tokens
    zh = settings.language == "zh"
    n = len(ranked) if total_entries is None else total_entries
    if zh:
        head = (f"# 长期记忆（共 {n} 条，来自以前的会话，按优先级排序）\n{DATA_NOTICE_ZH}\n"
                "需要全文时调用 memory_recall（用 id 或关键词），或运行 `acp memory show ID`。")
    else:
        head = (f"# Long-term memory ({count_entries(n)} from earlier sessions, most relevant first)\n{DATA_NOTICE_EN}\n"
                "To read one in full, call memory_recall with its id or words from it, or run `acp memory show ID`.")
    used = estimate_tokens(head) + 40  # the frame lines and the closing note
    lines: list[str] = []
    for s in ranked:
        text = index_line(s.entry, at, stale)
        cost = estimate_tokens(text) + 1
        if used + cost > budget:
            break
        lines.append(text)
        used += cost
    left = n - len(lines)
    body = "\n".join(lines) if lines else ("(no entries yet)" if n == 0 else "(none fit the budget)")
    out = head + "\n" + frame("index", body, attrs={"entries": str(len(lines)), "of": str(n)})
    if left > 0:
        out += (f"\n（另有 {left} 条因篇幅未列出，可用 memory_recall 搜索。）" if zh else
                f"\n({left} more {'entry' if left == 1 else 'entries'} not shown to fit the budget; "
                f"memory_recall searches all of them.)")
    return out + "\n"


class _Part:
    """One layer's share of a layered resident index, filled line by line."""

    def __init__(self, layer: str, ranked: Iterable[Scored], total: int, budget: int, stale=()) -> None:
        self.layer, self.ranked, self.total, self.budget = layer, iter(ranked), total, budget
        self.stale = stale
        self.lines: list[str] = []
        self.used = 0
        self.exhausted = False
        self._pending: str | None = None

    def fill(self, at: datetime, room: int) -> int:
        """Take lines while they fit in ``room`` more tokens; returns the tokens used. An entry that does not fit is
        kept for a later call with more room."""
        spent = 0
        pending = self._pending
        while True:
            if pending is None:
                s = next(self.ranked, None)
                if s is None:
                    self.exhausted = True
                    break
                pending = index_line(s.entry, at, self.stale)
            cost = estimate_tokens(pending) + 1
            if spent + cost > room:
                break
            self.lines.append(pending)
            spent += cost
            pending = None
        self._pending = pending
        self.used += spent
        return spent


_LAYER_NAMES = {"en": {"project": "this project", "user": "you, in every project"},
                "zh": {"project": "本项目", "user": "你本人，适用于所有项目"}}


def layered_prompt_index(layers: list[tuple[str, Iterable[Scored], int, float]], at: datetime,
                         settings: Settings, *, budget_tokens: int | None = None, stale=()) -> str:
    """The resident index of several layers (the project vault, the user vault), each given as (layer, its entries
    ranked — taken lazily —, how many it has, its share of the token budget): one shared notice, then one framed
    part per layer with the layer in its frame, each cut to its share and saying what it cut. A share one part does
    not need (it runs out of entries) goes to the others, so a small user vault leaves the project its room."""
    budget = settings.index.budget_tokens if budget_tokens is None else budget_tokens
    zh = settings.language == "zh"
    n = sum(total for _, _, total, _ in layers)
    if zh:
        head = (f"# 长期记忆（共 {n} 条，来自以前的会话，按层分组、按优先级排序）\n{DATA_NOTICE_ZH}\n"
                "需要全文时调用 memory_recall（用 id 或关键词），或运行 `acp memory show ID`。")
    else:
        head = (f"# Long-term memory ({count_entries(n)} from earlier sessions, by layer, most relevant first)\n"
                f"{DATA_NOTICE_EN}\n"
                "To read one in full, call memory_recall with its id or words from it, or run `acp memory show ID`.")
    overhead = 60   # a part's heading, frame lines and cut note
    room = max(0, budget - estimate_tokens(head))
    parts = [_Part(layer, ranked, total, int(room * share), stale) for layer, ranked, total, share in layers]
    parts[0].budget += room - sum(p.budget for p in parts)   # rounding: the first (project) part keeps the rest
    for p in parts:
        p.fill(at, max(0, p.budget - overhead))
    spare = sum(max(0, p.budget - overhead - p.used) for p in parts if p.exhausted)
    for p in parts:   # hand what finished parts left over to the parts that still have entries
        if spare > 0 and not p.exhausted:
            spare -= p.fill(at, spare)
    names = _LAYER_NAMES["zh" if zh else "en"]
    blocks = [head]
    for p in parts:
        shown = len(p.lines)
        body = "\n".join(p.lines) if p.lines else ("(no entries yet)" if p.total == 0 else "(none fit the budget)")
        title = names.get(p.layer, p.layer)
        blocks.append((f"## {p.layer} 层（{title}）" if zh else f"## {p.layer} layer ({title})") + "\n" +
                      frame("index", body, attrs={"layer": p.layer, "entries": str(shown), "of": str(p.total)}))
        left = p.total - shown
        if left > 0:
            blocks.append(f"（{p.layer} 层另有 {left} 条因篇幅未列出，可用 memory_recall 搜索。）" if zh else
                          f"({left} more {p.layer} {'entry' if left == 1 else 'entries'} not shown to fit the "
                          f"budget; memory_recall searches all of them.)")
    return "\n".join(blocks) + "\n"


def memory_md(entries: list[Entry], settings: Settings) -> str:
    """MEMORY.md: the generated human view of the index. Deterministic (no reads, no jitter), so two clones that
    write the same entries generate the same file."""
    live = [e for e in entries if not e.superseded]
    gone = len(entries) - len(live)
    out = ["# Memory", "",
           "<!-- Generated by acpmem with every commit: do not edit here, edit the files in entries/ "
           "(or run `acp memory edit ID`). -->", "",
           count_entries(len(live)) + (f" ({gone} superseded, kept in entries/ for history)" if gone else "") + ".", ""]
    order = {t: i for i, t in enumerate(settings.types)}
    by_type: dict[str, list[Entry]] = {}
    for e in live:
        by_type.setdefault(e.type, []).append(e)
    for typ in sorted(by_type, key=lambda t: (order.get(t, len(order)), t)):
        out += [f"## {typ}", ""]
        for e in sorted(by_type[typ], key=lambda e: (-e.importance, e.created, e.id)):
            title = e.title.replace("[", "\\[").replace("]", "\\]")
            out.append(f"- [{title}]({e.path}) — `{e.id}` · importance {e.importance} · {e.created[:10]}")
        out.append("")
    return "\n".join(out)


def show_text(e: Entry, at: datetime, layer: str | None = None, checks: list[str] | None = None) -> str:
    cites = ", ".join(str(c) for c in e.citation) or "none"
    src = e.source or {}
    lines = [f"#{e.id} [{e.type}] {e.title}",
             f"importance {e.importance} · created {e.created} · last read {e.last_read or 'never'} "
             f"({ago(e.last_read, at)})",
             f"citations: {cites}",
             f"source: {', '.join(f'{k}={v}' for k, v in src.items()) or 'by hand'}"]
    if e.supersedes:
        lines.append(f"supersedes: {', '.join(e.supersedes)}")
    if e.superseded_by:
        lines.append(f"superseded by: {e.superseded_by}")
    lines.append(f"file: {e.path}" + (f" ({layer} vault)" if layer else ""))
    lines.extend(checks or ())
    lines.append("")
    lines.append(e.body.strip("\n"))
    return terminal_safe("\n".join(lines) + "\n")
