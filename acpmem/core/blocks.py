"""Compression blocks: what a compression engine folded a stretch of conversation into, as acpmem reads it.

A compression host (acp-kernel and the hosts that run it) replaces consumed turns with a summary block: ``bN``, a tier
(1 condenses messages, 2 condenses tier-1 blocks, 3 condenses tier-2 blocks), an optional topic, the summary text, the
turns it covers and the blocks it consumed. ``Block`` is that, host-independent; the readers in
``acpmem.hosts.dsh`` and ``acpmem.hosts.transcripts`` build it. Also here: the compact text form of a set of
turns (``"2-5,10,12-14"``, what an entry's citation stores), and the recognition of a kernel-rendered summary
message. Pure: no I/O.
"""
from __future__ import annotations

from acpmem.core.lazyre import compile_later
from acpmem.core.limits import MAX_SEQ
from acpmem.core.values import Value

BLOCK_RE = compile_later(r"b([0-9]{1,9})\Z")
# A compaction a host made without the kernel (pi's own): no kernel id, so acpmem names it after the host's entry.
HOST_BLOCK_RE = compile_later(r"pi-compaction-[A-Za-z0-9_-]{1,64}\Z")
COMPACTION_RE = compile_later(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z")
MAX_TURNS_CHARS = 4000        # the citation's ``turns`` text; past it the covered turns are cut to their span
MAX_TURN_PARTS = 500
SUMMARY_HEAD = "[Compressed conversation section]"
NO_TOPIC = "(none)"
_RECAP = compile_later(r"\n*\[(b[0-9]{1,9}) \| [0-9]+ messages?(?: \| topic: \"(.*)\")?\]\s*\Z")


class Block(Value):
    """One compression block. ``seqs``: the turns it covers, as the host's seqs (empty when the host did not say);
    ``nested``: the ids of the blocks it consumed; ``compaction_id``: the host's stable id (DSH ``compactionId``);
    ``at``: the seq where the block appears in the log or transcript (its summary event or message), if any;
    ``tier`` is None when the host did not say; ``id`` is None when the host's data does not name the block (a kernel
    summary inside a plain transcript: the id is lost on the wire); ``read_files`` / ``modified_files``: what a pi
    compaction recorded in its ``details``."""

    id: str | None
    summary: str
    tier: int | None = None
    topic: str | None = None
    seqs: tuple[int, ...] = ()
    nested: tuple[str, ...] = ()
    compaction_id: str | None = None
    at: int | None = None
    active: bool = True
    read_files: tuple[str, ...] = ()
    modified_files: tuple[str, ...] = ()

    def to_json(self) -> dict:
        out = {"id": self.id, "tier": self.tier, "topic": self.topic, "summary": self.summary,
               "turns": turns_text(self.seqs), "nested": list(self.nested), "compaction_id": self.compaction_id,
               "at": self.at, "active": self.active}
        if self.read_files or self.modified_files:
            out["read_files"], out["modified_files"] = list(self.read_files), list(self.modified_files)
        return out

    def label(self) -> str:
        """``b12 (tier 2, "JWT auth design")``: how a block is named to people and to the fork."""
        bits = [f"tier {self.tier}" if self.tier else "tier unknown"]
        if self.topic:
            bits.append(f'"{self.topic}"')
        if self.id is not None and HOST_BLOCK_RE.match(self.id):
            bits.append("pi's own compaction, no kernel id")
        return f"{self.id or 'id unknown'} ({', '.join(bits)})"


def valid_block_id(value: object) -> bool:
    """A kernel block id ``b12``, or ``pi-compaction-<entry id>`` (a pi compaction, which has no kernel id)."""
    if not isinstance(value, str):
        return False
    if BLOCK_RE.match(value) is not None:
        return int(value[1:]) <= MAX_SEQ
    return HOST_BLOCK_RE.match(value) is not None


def turns_text(seqs) -> str:
    """Sorted seqs as ``"2-5,10,12-14"``; over ``MAX_TURNS_CHARS`` (or ``MAX_TURN_PARTS`` runs) the span ``lo-hi``."""
    ordered = sorted(set(seqs))
    if not ordered:
        return ""
    runs, start, prev = [], ordered[0], ordered[0]
    for s in ordered[1:]:
        if s == prev + 1:
            prev = s
            continue
        runs.append((start, prev))
        start = prev = s
    runs.append((start, prev))
    text = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    if len(runs) > MAX_TURN_PARTS or len(text) > MAX_TURNS_CHARS:
        return f"{ordered[0]}-{ordered[-1]}"
    return text


def _runs(text: object) -> list[tuple[int, int]] | None:
    """The (lo, hi) runs of a ``turns`` text (``"2-5,10"``), in the order written, or None when it is not one (more
    than ``MAX_TURN_PARTS`` parts, a part that is no seq or range, a range that ends before it starts or past
    ``MAX_SEQ``)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return [(text, text)] if 0 <= text <= MAX_SEQ else None
    if not isinstance(text, str) or not text or len(text) > MAX_TURNS_CHARS:
        return None
    parts = text.split(",")
    if len(parts) > MAX_TURN_PARTS:
        return None
    runs = []
    for part in parts:
        m = _RUN.fullmatch(part.strip())
        if not m:
            return None
        lo = int(m[1])
        hi = int(m[2]) if m[2] else lo
        if not lo <= hi <= MAX_SEQ:
            return None
        runs.append((lo, hi))
    return runs


_RUN = compile_later(r"([0-9]{1,19})(?:-([0-9]{1,19}))?")


def parse_turns(text: object) -> tuple[int, ...] | None:
    """The seqs of a ``turns`` text (``"2-5,10"``), or None when it is not one (bounded: a range of more than a
    million turns, or more than ``MAX_TURN_PARTS`` parts, is refused)."""
    runs = _runs(text)
    if runs is None or any(hi - lo > 1_000_000 for lo, hi in runs) or \
            sum(hi - lo + 1 for lo, hi in runs[:-1]) > 1_000_000:
        return None
    return tuple(sorted({s for lo, hi in runs for s in range(lo, hi + 1)}))


def turn_runs(text: object, most: int) -> tuple[tuple[int, int], ...] | None:
    """The runs of a ``turns`` text (``"2-5,10"`` → (2, 5), (10, 10)) without expanding them; more than ``most``
    runs become their one span. None when it is not a turns text."""
    runs = _runs(text)
    if not runs:
        return None
    runs.sort()
    return tuple(runs) if len(runs) <= most else ((runs[0][0], max(hi for _, hi in runs)),)


def turns_span(seqs) -> str | int | None:
    """A citation seq for covered turns: ``n`` for one turn, ``"lo-hi"`` for several, None for none."""
    if not seqs:
        return None
    lo, hi = min(seqs), max(seqs)
    return lo if lo == hi else f"{lo}-{hi}"


def summary_message(text: str, message_id: object = None) -> tuple[str | None, str | None, str] | None:
    """A kernel-rendered summary message read back: ``(block id or None, topic or None, summary)``, or None when the
    message is not one. Two renderings: ``[Compressed conversation section] — <topic>\\n<summary>`` (the block id is
    only in the message id ``acp_summary_bN``) and the single-block recap ``[Compressed conversation section]\\n
    <summary>\\n\\n[b12 | N messages | topic: "…"]``."""
    ident = None
    if isinstance(message_id, str) and message_id.startswith("acp_summary_") and valid_block_id(message_id[12:]):
        ident = message_id[12:]
    if not isinstance(text, str) or not text.startswith(SUMMARY_HEAD):
        if ident is None:
            return None
        return ident, None, text if isinstance(text, str) else ""
    first, _, rest = text.partition("\n")
    topic = None
    tail = first[len(SUMMARY_HEAD):].strip()
    if tail.startswith(("—", "-")):
        topic = tail.lstrip("—-").strip() or None
    m = _RECAP.search(rest)
    if m:
        ident = ident or m[1]
        topic = topic or (m[2] or None)
        rest = rest[:m.start()]
    if topic == NO_TOPIC:      # the kernel's recap prints this when there is no topic
        topic = None
    return ident, topic, rest.strip("\n")
