"""The offline extractor: an honest, extractive, deterministic stand-in for the model.

With no model configured (or ``--extractor offline``) it ranks the transcript's messages against the commit's note with
the search engine, quotes the best few (a window around the matching words), and says plainly that the entry is an
extract. It cites exactly the seqs it quoted. Pure: a transcript and a note in, a title, a body and seqs out.
"""
from __future__ import annotations

import re

from acpmem.core.boilerplate import OFFLINE_TEXT
from acpmem.core.limits import without_surrogates
from acpmem.core.values import Value
from acpmem.search.analysis import SearchDoc
from acpmem.search.reference import MemoryIndex

MAX_MESSAGES = 3
EXCERPT_CHARS = 500
TITLE_CHARS = 120
_COMMIT_CALL = re.compile(r"^memory_commit\(.*$", re.M)

_TEXT = OFFLINE_TEXT


class OfflineText(Value):
    title: str
    body: str
    seqs: tuple[int, ...]


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def extract_offline(transcript, note: str, *, max_bytes: int = 8192, lang: str = "en",
                    max_messages: int = MAX_MESSAGES) -> OfflineText:
    """The entry the offline extractor writes for ``note`` from ``transcript`` (a ``Transcript`` prefix, or None)."""
    words = _TEXT.get(lang, _TEXT["en"])
    title = _clip(note, TITLE_CHARS)
    docs, by_key = [], {}
    for m in (transcript.messages if transcript is not None else ()):
        if m.role in ("system", "developer"):
            continue   # the host's standing instructions, not this conversation's content
        # a transcript's JSON may hold a lone surrogate ("\ud800"): quoted, it would make the entry unwritable
        text = _COMMIT_CALL.sub("", without_surrogates(transcript.text(m))).strip()
        if not text:
            continue
        key = str(len(docs))
        by_key[key] = (m, text)
        docs.append(SearchDoc(key, "", text))
    hits = MemoryIndex(docs).search(note, limit=max_messages, spread=False, dates=False,
                                    preview_length=EXCERPT_CHARS) if docs and note.strip() else []
    chosen = sorted(((by_key[h.id][0], h.preview) for h in hits if h.score > 0), key=lambda mp: mp[0].seq)
    head = [words["head"], "", f"{words['focus']}: {_clip(note, 1000)}", ""]
    if not chosen:
        body = "\n".join([*head, words["none"]])
        return OfflineText(title, _fit(body, max_bytes), ())
    lines, used = [], []
    budget = max_bytes - len("\n".join(head).encode("utf-8")) - 16
    per = max(80, budget // len(chosen))
    for m, preview in chosen:
        line = f"- seq {m.seq} ({m.role}): {_clip(preview, EXCERPT_CHARS)}"
        while len(line.encode("utf-8")) > per and len(line) > 40:
            line = line[:int(len(line) * 0.9)].rstrip() + "…"
        lines.append(line)
        used.append(m.seq)
    return OfflineText(title, _fit("\n".join([*head, *lines]), max_bytes), tuple(used))


def block_lines(block, body: str, lang: str = "en", max_bytes: int = 8192) -> str:
    """An offline extract of a compression block: the block's summary (what the compression engine distilled),
    then the quoted turns ``body``."""
    head = (f"压缩块 {block.id}（第 {block.tier or '?'} 层" + (f"，{block.topic}" if block.topic else "") + "）的摘要："
            if lang == "zh" else f"Compression block {block.label()}, its summary:")
    summary = "\n".join(f"> {line}" if line.strip() else ">" for line in block.summary.strip().splitlines())
    return _fit(f"{head}\n{summary}\n\n{body}", max_bytes)


def _fit(text: str, max_bytes: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes - 3].decode("utf-8", errors="ignore") + "…"
