"""Generate a small DSH session log (zstd-compressed JSONL) with two ACP compactions, deterministically, in the shape
the host writes (DSH 0.1.0-rc.8 with billion-context-dsh v0.2.10).

The shape: line 1 is the session header (``{"type": "session", …}``: no seq, not an event); every other line is
one event ``{"type", "seq", "time", "data", "sourceEventSeqs"?, "surfaceOp"?}`` numbered 0, 1, 2 … in log order,
or a packed row (``text-chunks`` / ``reasoning-chunks`` / ``tool-call-chunks``, ``seq0``) standing for a run of 3
or more streamed chunks. Each turn: the user's input spliced from the inbox, ``turn/start``, ``step/start``, the
``user/message``, the model's streamed chunks, its ``assistant/message``, a ``tool/call`` and ``tool/result`` per
call, ``step/end``, ``turn/end``. A compaction is the model's ``compress`` call: ``compaction/start``,
``compaction/summary`` (tier, ``kernelBlockId``, topic, ``parentBlockIds`` = the compaction ids of the blocks it
consumed, the covered message ids), the checkpoint ``user/message`` (``surfaceOp {op: "replace", start, end}``,
``sourceEventSeqs`` the plain list of the surface nodes it replaces), ``compaction/end``; then the tool result,
``compaction/prune`` and a replacement ``user/message`` that takes the call/result pair off the surface.

The session: a user and an agent design an auth flow (one assistant turn calls two tools at once), the model
compresses that work into block b1 (tier 1), the work goes on (tests, a lint fix), then it compresses b1's
checkpoint with the newer turns into b2 (tier 2, consuming b1), and the user asks to remember the design.
``events()`` also makes long logs for the benchmark (``filler`` extra turns before the first compaction).

This is our own generator: it follows the host's format, but only the host's own output proves a reader (see
``tests/fixtures/hosts/dsh/``).

    python examples/dsh/make_session.py session.jsonl.zstd
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

T0 = 1_755_839_000_000
MESSAGES = ("user/message", "assistant/message", "tool/result")
SESSION = "session-3aa366c3"


def _text(s: str) -> list[dict]:
    return [{"type": "text", "text": s}]


def _pieces(s: str, n: int = 3) -> list[str]:
    """``s`` cut into ``n`` (or more, for long text) streamed deltas."""
    size = max(1, -(-len(s) // max(n, len(s) // 40 or 1)))
    return [s[i:i + size] for i in range(0, len(s), size)] or [s]


class DshLog:
    """A DSH session log under construction, in the host's shape. ``rows`` are the lines in file order (the header,
    events, packed rows); ``next`` is the seq the next event gets."""

    def __init__(self, session: str = SESSION, cwd: str = "/work/app", t0: int = T0) -> None:
        self.header = {"type": "session", "version": 0, "id": session, "createdAt": t0, "cwd": cwd,
                       "delegationDepth": 0}
        self.rows: list[dict] = [self.header]
        self.next = 0
        self.t0 = t0
        self.turn_no = 0
        self.step_no = 0
        self.surface: list[int] = []
        self.compactions: dict[int, str] = {}   # checkpoint seq -> compactionId
        self.kinds: dict[int, str] = {}         # seq -> event type (packed chunks not included)
        self.calls: dict[str, int] = {}         # tool call id -> its tool/call seq

    # ----------------------------------------------------------------------------------------- events and rows
    def add(self, kind: str, data: dict, *, op=None, sources=None) -> int:
        seq = self.next
        ev: dict = {"type": kind, "seq": seq, "time": self.t0 + seq * 10, "data": data}
        if sources is not None:
            ev["sourceEventSeqs"] = list(sources)
        if op is not None:
            ev["surfaceOp"] = op
        self.rows.append(ev)
        self.kinds[seq] = kind
        self.next += 1
        if op == "append":
            self.surface.append(seq)
        elif isinstance(op, dict):
            i, j = self.surface.index(op["start"]), self.surface.index(op["end"])
            self.surface[i:j + 1] = [seq]
        return seq

    def chunk(self, chunk: dict) -> int:
        return self.add("assistant/chunk", {"turn": self.turn_no, "step": self.step_no, "chunk": chunk})

    def packed(self, kind: str, index: int, members: list[str], **call) -> list[int]:
        """A run of streamed deltas: one packed row for 3 or more (how the host stores them), else plain chunks."""
        if len(members) < 3:
            delta = {"text-chunks": "text-delta", "reasoning-chunks": "reasoning-delta",
                     "tool-call-chunks": "tool-call-delta"}[kind]
            out = []
            for m in members:
                c = {"type": delta, "index": index, **call, "argumentsDelta": m} if call else \
                    {"type": delta, "index": index, "text": m}
                out.append(self.chunk(c))
            return out
        seq0 = self.next
        data = {"turn": self.turn_no, "step": self.step_no, "index": index, "dt": [0] * (len(members) - 1)}
        data.update(call)
        data["args" if kind == "tool-call-chunks" else "texts"] = list(members)
        self.rows.append({"type": kind, "seq0": seq0, "time0": self.t0 + seq0 * 10, "data": data})
        self.next += len(members)
        return list(range(seq0, self.next))

    # ----------------------------------------------------------------------------------------- a conversation
    def user(self, text: str, *, turn: bool = True) -> int:
        """The user's input: spliced from the inbox, a new turn and step, then the message."""
        if turn:
            self.add("agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [
                {"content": _text(text), "source": {"kind": "user"}, "role": "user"}]})
            self.turn_no += 1
            self.step_no = 1
            self.add("turn/start", {"turn": self.turn_no})
            self.add("agent/inbox/spliced", {"target": "next-turn", "start": 0, "removedCount": 1, "inserted": []})
            self.add("step/start", {"turn": self.turn_no, "step": self.step_no})
        return self.add("user/message", {"content": _text(text), "source": {"kind": "user"}, "role": "user",
                                         "id": f"u-{self.next:06d}"}, op="append")

    def plugin_user(self, text: str, plugin: str, op="append", sources=None, **source) -> int:
        return self.add("user/message", {"content": _text(text), "source": {"kind": "plugin", "plugin": plugin,
                                                                            **source},
                                         "role": "user", "id": f"p-{self.next:06d}"}, op=op, sources=sources)

    def assistant(self, text: str, calls=(), *, reasoning: str | None = None, stream: bool = True) -> int:
        """The model's reply: its streamed chunks, the ``assistant/message`` citing them, a ``tool/call`` per
        call. ``calls``: ``(id, name, arguments)``."""
        streamed: list[int] = []
        content: list[dict] = []
        index = 0
        if stream and reasoning:
            streamed.append(self.chunk({"type": "block-start", "index": index, "blockType": "reasoning"}))
            streamed += self.packed("reasoning-chunks", index, _pieces(reasoning, 4))
            streamed.append(self.chunk({"type": "block-end", "index": index,
                                        "block": {"type": "reasoning", "text": reasoning}}))
            index += 1
        if reasoning:
            content.append({"type": "reasoning", "text": reasoning})
        if stream:
            streamed.append(self.chunk({"type": "block-start", "index": index, "blockType": "text"}))
            streamed += self.packed("text-chunks", index, _pieces(text))
            streamed.append(self.chunk({"type": "block-end", "index": index, "block": {"type": "text", "text": text}}))
            index += 1
        content.append({"type": "text", "text": text})
        for cid, name, args in calls:
            arguments = json.dumps(args, separators=(",", ":"))
            block = {"type": "tool-call", "id": cid, "name": name, "arguments": arguments}
            if stream:
                streamed.append(self.chunk({"type": "block-start", "index": index, "blockType": "tool-call"}))
                streamed += self.packed("tool-call-chunks", index, _pieces(arguments), id=cid, name=name)
                streamed.append(self.chunk({"type": "block-end", "index": index, "block": block}))
                index += 1
            content.append(block)
        if stream:
            streamed.append(self.chunk({"type": "usage", "usage": {"inputTokens": 1000, "outputTokens": 50}}))
            streamed.append(self.chunk({"type": "finish", "reason": {"kind": "tool-calls" if calls else "stop"}}))
        seq = self.add("assistant/message", {"turn": self.turn_no, "step": self.step_no, "message": {
            "role": "assistant", "content": content, "source": {"kind": "model", "provider": "deepseek",
                                                                 "model": "deepseek-chat"},
            "id": f"a-{self.next:06d}"}, "usage": {"inputTokens": 1000, "outputTokens": 50}},
            op="append", sources=streamed)
        for cid, name, args in calls:
            self.calls[cid] = self.add("tool/call", {"turn": self.turn_no, "step": self.step_no, "callId": cid,
                                                     "name": name, "arguments": json.dumps(args)})
        return seq

    def result(self, call_id: str, text: str) -> int:
        sources = [self.calls[call_id]] if call_id in self.calls else None
        return self.add("tool/result", {"turn": self.turn_no, "step": self.step_no, "message": {
            "source": {"kind": "tool", "callId": call_id},
            "content": [{"type": "tool-result", "toolCallId": call_id, "content": _text(text), "isError": False}],
            "role": "user", "id": f"r-{self.next:06d}"}}, op="append", sources=sources)

    def step(self) -> None:
        self.add("step/end", {"turn": self.turn_no, "step": self.step_no})
        self.step_no += 1
        self.add("step/start", {"turn": self.turn_no, "step": self.step_no})

    def end_turn(self) -> None:
        self.add("step/end", {"turn": self.turn_no, "step": self.step_no})
        self.add("turn/end", {"turn": self.turn_no, "reason": {"kind": "completed"}})

    def compaction(self, n: int, summary: str, lo: int, hi: int, *, tier: int | None = 1, topic: str | None = None,
                   kernel_id: str | None = "", parents=(), effective=None) -> int:
        """One compaction transaction over the surface nodes ``lo`` … ``hi``: start, summary, checkpoint, end.
        ``kernel_id`` "" names it ``b<n>``; None leaves it out (DSH's own compaction, like ``tier`` None).
        ``parents``: checkpoint seqs of the blocks it consumes (their compaction ids are recorded)."""
        cid = f"7f3c9a1e-0000-4000-8000-{n:012d}"
        i, j = self.surface.index(lo), self.surface.index(hi)
        shadowed = self.surface[i:j + 1]
        self.add("compaction/start", {"compactionId": cid, "turn": self.turn_no})
        data: dict = {"compactionId": cid, "summary": _text(summary), "shadowedRange": {"start": lo, "end": hi},
                      "shadowedSeqs": shadowed, "shadowedTokenCount": 120 * len(shadowed),
                      "provider": "deepseek", "model": "deepseek-chat"}
        if tier is not None:
            data["tier"] = tier
        if kernel_id is not None:
            data["kernelBlockId"] = kernel_id or f"b{n}"
        if topic is not None:
            data["topic"] = topic
        if parents:
            data["parentBlockIds"] = [self.compactions[p] for p in parents]
        if effective is not None:
            data["directMessageIds"] = list(effective)
            data["effectiveMessageIds"] = list(effective)
        self.add("compaction/summary", data)
        cp = self.plugin_user(summary, "compact", op={"op": "replace", "start": lo, "end": hi}, sources=shadowed,
                              compactionId=cid)
        self.compactions[cp] = cid
        self.add("compaction/end", {"compactionId": cid, "turn": self.turn_no})
        return cp

    def compress(self, n: int, summary: str, lo: int, hi: int, **kw) -> int:
        """The model's ``compress`` call over ``lo`` … ``hi`` (an ACP compaction), then the plugin hides the
        call/result pair: ``compaction/prune`` and a replacement user message."""
        args = {"topic": kw.get("topic") or "", "content": [{"startSeq": lo, "endSeq": hi, "summary": summary}]}
        call = self.assistant("Compressing.", [(f"call_c{n}", "compress", args)])
        cp = self.compaction(n, summary, lo, hi, **kw)
        done = f"Compressed 1 block(s), ~{100 * n} tokens reclaimed.\n  block {self.compactions[cp][:8]}: " \
               f"seqs {lo}..{hi}, tier {kw.get('tier') or 1}"
        res = self.result(f"call_c{n}", done)
        self.add("compaction/prune", {"shadowedRange": {"start": call, "end": res}, "shadowedSeqs": [call, res],
                                      "shadowedTokenCount": 120})
        self.plugin_user(done, "billion-context-dsh", op={"op": "replace", "start": call, "end": res},
                         sources=[call, res])
        return cp

    def lines(self) -> list[str]:
        return [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in self.rows]


def session(filler: int = 0) -> DshLog:
    g = DshLog()
    g.user("Design the auth flow for the API.")
    first = g.assistant("Looking at the current login code and the session store.",
                        [("call_a", "read_file", {"path": "src/auth/login.ts"}),
                         ("call_b", "read_file", {"path": "src/session/store.ts"})],
                        reasoning="Read the login module and the store first.")
    g.result("call_a", "export async function login(user, pass) { /* cookie sessions */ }")
    g.result("call_b", "export const store = new MemoryStore()")
    g.step()
    g.assistant("Proposal: JWT access tokens valid 15 minutes; refresh tokens in Redis for 30 days, "
                "rotated on every use.")
    g.end_turn()
    g.user("Agreed. Keep refresh tokens out of localStorage.")
    for i in range(filler):
        g.assistant(f"Step {i} copies rows of batch {i} and checks their counts.")
        g.end_turn()
        g.user(f"Filler question {i}: what does step {i} of the migration do?")
    last = g.assistant("Noted: refresh token in an httpOnly cookie; access token in memory only.")
    g.end_turn()
    g.user("Good. Tidy up the context.")
    covered = [s for s in g.surface if first <= s <= last]
    ids = [i for s in covered for i in ([f"{s}#call_a", f"{s}#call_b"] if s == first else [str(s)])]
    cp1 = g.compress(1, "JWT access 15m in memory; refresh 30d in Redis, rotated on use, httpOnly cookie "
                        "(src/auth/login.ts). Session store was an in-memory MemoryStore.", first, last,
                     topic="JWT auth design", effective=ids)
    g.step()
    g.assistant("Context tidied.")
    g.end_turn()
    g.user("Now add login tests.")
    g.assistant("Adding tests.", [("call_c", "write_file", {"path": "tests/login.test.ts"})])
    g.result("call_c", "wrote tests/login.test.ts")
    g.step()
    end = g.assistant("Login tests added and green; fixed a lint error in src/auth/login.ts.")
    g.end_turn()
    g.user("Fold the auth work together.")
    newer = [s for s in g.surface[g.surface.index(cp1) + 1:g.surface.index(end) + 1]]
    ids2 = ids + [str(s) for s in newer if g.kinds.get(s) in MESSAGES]
    g.compress(2, "Auth design (JWT 15m / Redis refresh 30d, httpOnly cookie) done; login tests added and green; "
                  "lint fixed.", cp1, end, tier=2, topic="Auth + tests", parents=[cp1], effective=ids2)
    g.step()
    g.assistant("Folded.")
    g.end_turn()
    g.user("Remember the auth design for later sessions.")
    g.assistant("Saving it.", [("call_m", "memory_commit", {"type": "decision", "note": "auth token design",
                                                            "importance": 8, "block": "b2"})])
    return g


def events(filler: int = 0) -> list[dict]:
    """The rows of the example session in file order: the header, events and packed rows."""
    return session(filler).rows


def write(path: Path, filler: int = 0, *, compressed: bool = True) -> Path:
    """Write the session; zstd like the host: one frame holding only the header, then one frame per append batch
    (here: per turn)."""
    g = session(filler)
    lines = g.lines()
    if not compressed:
        path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
        return path
    import zstandard

    c = zstandard.ZstdCompressor(level=3, write_checksum=True)
    frames = [c.compress((lines[0] + "\n").encode("utf-8"))]
    batch: list[str] = []
    for line, row in zip(lines[1:], g.rows[1:]):
        batch.append(line + "\n")
        if row["type"] == "turn/end":
            frames.append(c.compress("".join(batch).encode("utf-8")))
            batch = []
    if batch:
        frames.append(c.compress("".join(batch).encode("utf-8")))
    path.write_bytes(b"".join(frames))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write a small DSH session log with two compactions.")
    ap.add_argument("out", help="the file to write, e.g. session.jsonl.zstd")
    ap.add_argument("--filler", type=int, default=0, help="extra turns before the first compaction")
    ap.add_argument("--plain", action="store_true", help="write plain JSONL instead of zstd")
    args = ap.parse_args(argv)
    write(Path(args.out), args.filler, compressed=not args.plain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
