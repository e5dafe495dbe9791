"""The fixed sentences the offline extractor writes around what it quotes (``acpmem.write.offline``), in each
language, and how to take them out of a text: two offline extracts share them whatever they quote, so the lexical
channel (``acpmem.search.similar``) compares what is left, never the boilerplate ("no model was used", "not
distilled" read as a negation made two repeats a "contradiction")."""
from __future__ import annotations

import re

OFFLINE_TEXT = {
    "en": {"head": "Offline extract (no model was used): the conversation's messages most relevant to the focus, "
                   "quoted, not distilled.",
           "focus": "Focus", "none": "No message in the conversation matched the focus; the focus itself is all "
                                     "that was recorded."},
    "zh": {"head": "离线摘录（未使用模型）：对话中与重点最相关的消息原文摘录，未经提炼。",
           "focus": "重点", "none": "对话中没有与重点相关的消息；只记录了重点本身。"},
}

_SENTENCES = tuple(t[k] for t in OFFLINE_TEXT.values() for k in ("head", "none"))
_LABELS = re.compile("^(?:" + "|".join(re.escape(t["focus"]) for t in OFFLINE_TEXT.values()) + "): ", re.M)


def without_boilerplate(text: str) -> str:
    """``text`` without the offline extractor's fixed sentences and its "Focus: " label (a text that has none is
    returned as it is)."""
    found = False
    for sentence in _SENTENCES:
        if sentence in text:
            text = text.replace(sentence, "")
            found = True
    return _LABELS.sub("", text) if found else text
