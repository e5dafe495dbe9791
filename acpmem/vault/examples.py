"""Example entries for ``acp memory init --example``: what a few weeks of real use look like (some in Chinese)."""
from __future__ import annotations

from datetime import datetime, timedelta

from acpmem.core.clock import utc_iso
from acpmem.core.entry import Citation, Entry

_EXAMPLES = [
    ("decision", 8, 21, "Use SQLite WAL mode for the job queue; Postgres only once we run more than one host",
     "- The job queue lives in `queue.db` (SQLite, WAL mode, `synchronous=NORMAL`).\n"
     "- Postgres was rejected for now: one host, no ops budget, and WAL handles ~2k writes/s here.\n"
     "- Revisit when a second worker host is added.", "a41f0c2e", 212),
    ("lesson", 9, 18, "Session append must be re-entrant: the post-tool hook can fire while a write is in flight",
     "- `session.append` is called from the post-tool hook, which can fire again before the first append returns.\n"
     "- Guard it with the per-session lock in `state.ts`; a plain boolean flag lost entries under load.", "7d2c1e0a",
     1283),
    ("user-preference", 7, 30, "The user wants short answers first, details only when asked",
     "- Lead with the answer in one or two sentences; offer the details instead of printing them.\n"
     "- No summaries of what was just done at the end of a reply.", "0b9e77d1", 14),
    ("fact", 6, 12, "Staging deploys run from the release/* branches; main deploys nowhere",
     "- CI deploys `release/*` to staging on every push; production is a manual promotion of a staging build.\n"
     "- Pushing to `main` only runs tests.", "c03f5a90", 77),
    ("reference", 5, 9, "Rate limits of the search API: 10 requests/s per key, 429 with Retry-After",
     "- The search API allows 10 requests per second per key and answers 429 with a `Retry-After` header.\n"
     "- The client in `search/client.py` already honours it; do not add a second retry layer.", "c03f5a90", 140),
    ("lesson", 8, 6, "pytest-xdist breaks the git fixtures: tests share one HOME and race on ~/.gitconfig",
     "- Under `pytest -n auto` the git fixtures raced on `~/.gitconfig` and failed one run in five.\n"
     "- Each test now sets `HOME` and `GIT_CONFIG_GLOBAL` to its tmp_path; keep it that way.", "5e61a7b3", 402),
    ("decision", 7, 3, "日志统一使用结构化 JSON 输出，字段名用 snake_case",
     "- 所有服务的日志改为一行一个 JSON 对象，便于 Loki 检索。\n"
     "- 字段名统一 snake_case；时间戳用 UTC 的 ISO 8601。\n- 旧的纯文本日志格式不再维护。", "9a1d3c44", 66),
    ("user-preference", 6, 25, "用户希望代码注释用英文，提交信息和讨论用中文",
     "- 代码里的注释和标识符一律用英文。\n- 和用户的对话、提交信息（commit message）用中文。", "2f8b0e19", 8),
    ("lesson", 7, 2, "上传大文件时必须用分片上传，单次请求超过 100 MB 会被网关直接断开",
     "- 网关对单个请求体有 100 MB 的硬限制，超过时连接被重置，客户端只看到 `ECONNRESET`。\n"
     "- 大文件走分片上传接口（每片 8 MB），断点续传靠服务端返回的 upload_id。", "e7c2b5d0", 311),
    ("fact", 4, 40, "The design docs live in docs/adr/, one numbered ADR per decision",
     "- Architecture decisions are recorded as `docs/adr/NNNN-title.md` (MADR template).\n"
     "- Superseded ADRs stay in place with a `Superseded by` line.", "0b9e77d1", 51),
]


def example_entries(vault, now: datetime) -> list[Entry]:
    out: list[Entry] = []
    taken: set[str] = set()
    for typ, imp, days_ago, title, body, session, seq in _EXAMPLES:
        ident = vault.new_id(taken)
        taken.add(ident)
        created = utc_iso(now - timedelta(days=days_ago, hours=imp))
        read = utc_iso(now - timedelta(days=days_ago // 3)) if days_ago > 10 else None
        e = Entry(id=ident, title=title, type=typ, importance=imp, created=created, last_read=read,
                  body=body + "\n", citation=(Citation(session, seq),),
                  source={"request": f"r-example-{len(out) + 1:02d}", "extractor": "example"})
        out.append(e.with_changes(path=vault.path_for(ident, title)))
    return out
