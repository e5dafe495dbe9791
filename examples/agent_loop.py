#!/usr/bin/env python3
"""A minimal agent loop with acpmem long-term memory, against any OpenAI-compatible endpoint.

It shows the whole host API in one page:

1. the resident index (``acpmem.resident_index``, frozen for the session) goes at the top of the system prompt;
2. the main conversation gets ``memory_commit`` and ``memory_recall`` (``acpmem.tool_definitions``) — never
   ``memory_write``;
3. ``memory_commit`` → ``acpmem.submit`` with the session, the seq of the call and the transcript this loop
   keeps on disk (OpenAI chat JSON, rewritten atomically after every message);
4. ``memory_recall`` → ``acpmem.recall``, its hits framed as data for the model;
5. the fork (one extraction call with ``memory_write`` only) runs from ``submit``: inline with ``--fork inline`` (the
   default here, so a demo ends with the entry written), or in a detached background worker with
   ``--fork background`` — what a real host does, since the worker never delays the conversation.

Usage:

    export OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_MODEL=qwen2.5 OPENAI_API_KEY=unused
    python examples/agent_loop.py --vault .acp-memory "We deploy from release/* only; remember that."

Each argument is one user turn; without arguments it reads turns from stdin, one per line. The fork uses the
vault's [extraction] settings, else the same OPENAI_* variables (with no model configured it falls back to the
offline extractor).
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from pathlib import Path

from acpmem import AcpmemError, Vault, resident_index, tool_definitions
from acpmem.core.tools import parse_commit_args, parse_recall_args
from acpmem.infra.files import atomic_write

SYSTEM = "You are a helpful assistant working with the user on their software project. Be brief."


class Agent:
    def __init__(self, vault: Vault, client, model: str, session: str, transcript: Path, fork: str) -> None:
        self.vault, self.client, self.model = vault, client, model
        self.session, self.transcript, self.fork = session, transcript, fork
        s = vault.settings
        self.tools = tool_definitions(for_="main", format="openai", lang=s.language, types=s.types)
        # The index sits at the top of the system prompt and stays byte-identical all session (prompt cache).
        self.messages: list[dict] = [{"role": "system",
                                      "content": SYSTEM + "\n\n" + resident_index(vault, session=session)}]
        self.save()

    def save(self) -> None:
        atomic_write(self.transcript, json.dumps(self.messages, ensure_ascii=False, indent=1))

    def add(self, message: dict) -> None:
        self.messages.append(message)
        self.save()

    def turn(self, prompt: str, max_steps: int = 8) -> str:
        self.add({"role": "user", "content": prompt})
        for _ in range(max_steps):
            reply = self.client.chat.completions.create(model=self.model, messages=self.messages, tools=self.tools)
            msg = reply.choices[0].message
            self.add(msg.model_dump(exclude_none=True, exclude={"refusal", "annotations", "audio"}))
            if not msg.tool_calls:
                return msg.content or ""
            seq = len(self.messages) - 1    # the assistant message holding the calls: the commit's citation
            for call in msg.tool_calls:
                self.add({"role": "tool", "tool_call_id": call.id,
                          "content": self.run_tool(call.function.name, call.function.arguments, seq)})
        return "(stopped: too many tool calls in one turn)"

    def run_tool(self, name: str, arguments: str, seq: int) -> str:
        try:
            args = json.loads(arguments or "{}")
            if name == "memory_commit":
                from acpmem import submit

                a = parse_commit_args(args, self.vault.settings.types)
                ack = submit(self.vault, type=a.type, note=a.note, importance=a.importance, session=self.session,
                             seq=seq, transcript=str(self.transcript), wait=self.fork == "inline")
                return ack.text
            if name == "memory_recall":
                from acpmem import recall
                from acpmem.read.retrieval import recall_text

                a = parse_recall_args(args)
                hits = recall(self.vault, a.query, limit=a.limit, session=self.session)
                return recall_text(self.vault, hits)
            return f"Error: unknown tool {name!r}"
        except ValueError as exc:
            return f"Error: the arguments are not JSON ({exc})"
        except AcpmemError as exc:      # the model sees what was wrong and can call again
            return f"Error: {exc}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("prompts", nargs="*", help="user turns (default: read them from stdin, one per line)")
    p.add_argument("--vault", help="the vault (default: $ACPMEM_VAULT or the nearest .acp-memory/)")
    p.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"), help="default: $OPENAI_BASE_URL")
    p.add_argument("--model", default=os.environ.get("OPENAI_MODEL"), help="default: $OPENAI_MODEL")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY") or "unused", help="default: $OPENAI_API_KEY")
    p.add_argument("--session", help="session id (default: a new one)")
    p.add_argument("--transcript", help="where the conversation is kept (default: .acpmem/transcripts/SESSION.json "
                                        "in the vault)")
    p.add_argument("--fork", choices=("inline", "background"), default="inline",
                   help="run the extraction inline (the demo default) or in the background worker")
    args = p.parse_args(argv)
    if not args.model:
        p.error("no model: pass --model or set OPENAI_MODEL")

    import openai

    try:
        vault = Vault.open(args.vault)
        session = args.session or "agent-" + secrets.token_hex(4)
        transcript = Path(args.transcript) if args.transcript else \
            vault.state_dir / "transcripts" / f"{session}.json"
        client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key)
        agent = Agent(vault, client, args.model, session, transcript.resolve(), args.fork)
        prompts = args.prompts or (line.strip() for line in sys.stdin if line.strip())
        for prompt in prompts:
            print(agent.turn(prompt), flush=True)
    except AcpmemError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except openai.OpenAIError as exc:
        print(f"Error: the model call failed: {exc}", file=sys.stderr)
        return 1
    print(f"(session {session}; transcript {transcript})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
