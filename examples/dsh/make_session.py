"""Generate a small DSH-style session log (zstd-compressed JSONL) with two compactions, deterministically.

The session: a user and an agent design an auth flow (turns 1-8, one assistant turn calls two tools at once), the
host compacts turns 2-8 into block b1 (tier 1), the work goes on (tests, a lint fix), then the host compacts b1's
checkpoint and the newer turns into b2 (tier 2), and the user asks to remember the design. ``events()`` also makes
long logs for the benchmark (``filler`` extra turns before the first compaction).

    python examples/dsh/make_session.py session.jsonl.zstd
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

T0 = 1_755_839_000_000
MESSAGES = ("user/message", "assistant/message", "tool/result")


def _text(s: str) -> list[dict]:
    return [{"type": "text", "text": s}]


def events(filler: int = 0) -> list[dict]:
    out: list[dict] = []

    def add(kind: str, data: dict, op=None, sources=None) -> int:
        seq = len(out)
        ev = {"seq": seq, "time": T0 + seq * 1000, "type": kind, "data": data}
        if op is not None:
            ev["surfaceOp"] = op
        if sources is not None:
            ev["sourceEventSeqs"] = sources
        out.append(ev)
        return seq

    def user(text: str) -> int:
        return add("user/message", {"content": _text(text), "source": {"kind": "user"}}, "append")

    def assistant(text: str, calls=()) -> int:
        content = _text(text) + [{"type": "tool-call", "id": cid, "name": name, "arguments": args}
                                 for cid, name, args in calls]
        return add("assistant/message", {"message": {"role": "assistant", "content": content}}, "append")

    def result(call_id: str, text: str) -> int:
        return add("tool/result", {"message": {"role": "tool", "content": [
            {"type": "tool-result", "toolCallId": call_id, "content": _text(text)}]}}, "append")

    def compact(n: int, summary: str, topic: str, tier: int, lo: int, hi: int, shadowed: list[int],
                parents=()) -> int:
        cid = f"7f3c9a1e-0000-4000-8000-{n:012d}"
        add("compaction/start", {"compactionId": cid})
        data = {"compactionId": cid, "summary": _text(summary), "shadowedRange": {"start": lo, "end": hi},
                "shadowedSeqs": shadowed, "shadowedTokenCount": 120 * len(shadowed), "provider": "deepseek",
                "model": "deepseek-chat", "tier": tier, "kernelBlockId": f"b{n}", "topic": topic}
        if parents:
            data["parentBlockIds"] = list(parents)
        add("compaction/summary", data)
        cp = add("user/message", {"content": _text(summary), "source": {"kind": "plugin", "plugin": "compact",
                                                                         "compactionId": cid}},
                 {"op": "replace", "startSeq": lo, "endSeq": hi}, [[lo, hi]])
        add("compaction/end", {"compactionId": cid, "turn": n})
        return cp

    out.append({"type": "session", "version": 0, "id": "session-3aa366c3", "cwd": "/work/app", "createdAt": T0})
    user("Design the auth flow for the API.")                                                   # 1
    first = assistant("Looking at the current login code and the session store.",
                      [("call_a", "read_file", {"path": "src/auth/login.ts"}),
                       ("call_b", "read_file", {"path": "src/session/store.ts"})])                # 2
    result("call_a", "export async function login(user, pass) { /* cookie sessions */ }")       # 3
    result("call_b", "export const store = new MemoryStore()")                                  # 4
    assistant("Proposal: JWT access tokens valid 15 minutes; refresh tokens in Redis for 30 days, "
              "rotated on every use.")                                                          # 5
    user("Agreed. Keep refresh tokens out of localStorage.")                                    # 6
    for i in range(filler):
        user(f"Filler question {i}: what does step {i} of the migration do?")
        assistant(f"Step {i} copies rows of batch {i} and checks their counts.")
    last = assistant("Noted: refresh token in an httpOnly cookie; access token in memory only.")
    cp1 = compact(1, "JWT access 15m in memory; refresh 30d in Redis, rotated on use, httpOnly cookie "
                     "(src/auth/login.ts). Session store was an in-memory MemoryStore.",
                  "JWT auth design", 1, first, last, list(range(first, last + 1)))
    user("Now add login tests.")
    assistant("Adding tests.", [("call_c", "write_file", {"path": "tests/login.test.ts"})])
    result("call_c", "wrote tests/login.test.ts")
    assistant("Login tests added and green; fixed a lint error in src/auth/login.ts.")
    compact(2, "Auth design (JWT 15m / Redis refresh 30d, httpOnly cookie) done; login tests added and green; "
               "lint fixed.", "Auth + tests", 2, cp1, len(out) - 1,
            [cp1, *(e["seq"] for e in out[cp1 + 1:] if e["type"] in MESSAGES)], ["b1"])
    user("Remember the auth design for later sessions.")
    assistant("Saving it.", [("call_m", "memory_commit", {"type": "decision", "note": "auth token design",
                                                          "importance": 8, "block": "b2"})])
    return out


def write(path: Path, filler: int = 0, *, compressed: bool = True) -> Path:
    data = "".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in events(filler))
    raw = data.encode("utf-8")
    if compressed:
        import zstandard

        raw = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(raw)
    path.write_bytes(raw)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write a small DSH-style session log with two compactions.")
    ap.add_argument("out", help="the file to write, e.g. session.jsonl.zstd")
    ap.add_argument("--filler", type=int, default=0, help="extra turns before the first compaction")
    ap.add_argument("--plain", action="store_true", help="write plain JSONL instead of zstd")
    args = ap.parse_args(argv)
    write(Path(args.out), args.filler, compressed=not args.plain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
