"""The fork on a real model: a scripted coding session and LoCoMo sessions, extracted through the real fork.

    python bench/real_model.py --base-url http://127.0.0.1:8088/v1 [--model NAME] [--styles system,user]
        [--locomo locomo10.json --conversations 2 --sessions 2] [--record DIR] [--out results.json]
    python bench/real_model.py --llama-server PATH/llama-server --gguf MODEL.gguf [...]   # starts the server itself

Every fork goes through ``acpmem.write.worker.process_now`` against a real vault (``init_vault``), exactly as
``commit --wait`` runs it, with the endpoint reached through a recording proxy on 127.0.0.1 that keeps every raw
chat-completions answer (``--record DIR`` saves them: the fixtures of tests/fixtures/real_model/ came from here).

Coding session: 48 messages of a made-up project (a Python CLI), 8 ``memory_commit`` calls of the five types, two of
them with Chinese notes; one request per commit, in order, each with its conversation prefix. A commit counts as
on-topic when an entry it wrote names one of its keywords. Run once per prompt style (``--styles``;
``acpmem.write.context.PROMPT_STYLES``), each in a fresh vault.

LoCoMo (``--locomo``, bounded by ``--conversations`` and ``--sessions``): each session of a conversation becomes a
transcript (speaker A as user, B as assistant) closed by a ``memory_commit`` with a generic note; after all of a
conversation's sessions, each question (categories 1-4) whose evidence lies in those sessions is recalled
(``recall``, top 5) against the entries written. Evidence recall = share of questions with an evidence turn cited
by a top-5 entry. A fork entry cites the commit's seq and names the turns it rests on (and an entry that
supersedes another keeps that one's citations), so it is scored three ways: ``turn`` (an evidence turn is among the
turns it cites, as for the baselines), ``session`` (the evidence turn is in a session the entry cites) and ``words``
(in a cited session, and sharing at least a third of the smaller text's terms with the entry). Beside it, the same for the human-written LoCoMo
observations (one entry each, citing its turns) and for raw turns as entries (one per turn).

Seconds per fork: wall time of the whole fork (prompt, generation, commit); ``cold`` when the server's prompt cache
held under half the prompt (llama-server's ``timings.cache_n``), else ``warm``. The ratio to this run's
``python -c pass`` is printed beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SEQ_BASE = 1000
LOCOMO_NOTE = "facts about {a} and {b} from this conversation: events with their dates, plans, preferences, people"

# ------------------------------------------------------------------------------------------- the coding session
# (user ask, shell command, shell output, assistant explanation, user confirmation, commit type, note, importance,
#  keywords for on-topic)
TURNS = [
    ("tasks.json got corrupted again when two `tl add` ran at once. Can we fix the store?",
     "python -m tasklog add a & python -m tasklog add b; python -m json.tool ~/.tasklog/tasks.json",
     "Expecting ',' delimiter: line 41 column 3 (char 1032)",
     "Two processes rewrote tasks.json at the same time. I moved the store to SQLite in WAL mode "
     "(tasklog/store.py): each `add` is one transaction, so concurrent runs no longer corrupt it.",
     "Great, keep SQLite with WAL then.",
     "decision", "Task store is SQLite in WAL mode (tasklog/store.py), not tasks.json: concurrent CLI runs "
     "corrupted the JSON file", 8, ("sqlite", "wal")),
    ("The test suite hangs with `pytest -n 4`.",
     "pytest -n 4 -x tests/test_store.py",
     "[gw2] timeout: database is locked (tests/conftest.py:12 shared_db)",
     "The `shared_db` fixture points every xdist worker at one file, so they lock each other. Giving each test "
     "its own database under `tmp_path` fixes it: 212 passed in 9 s.",
     "Nice, that was annoying.",
     "lesson", "pytest-xdist workers sharing one SQLite file deadlock: each test needs its own db under tmp_path",
     7, ("xdist", "tmp_path")),
    ("Commit this as 'feat: sqlite store 🎉'.",
     "git log --oneline -5",
     "a1b2c3d fix: lock file on windows\n9f8e7d6 feat: due dates",
     "Done, but note the history uses conventional commits without emoji; I committed it as "
     "'feat: move the task store to sqlite'.",
     "Right, always conventional commits and never emoji in commit messages, please.",
     "user-preference", "Commit messages: conventional commits (feat:, fix:), never emoji", 8,
     ("conventional", "emoji")),
    ("Which Python versions does CI test?",
     "cat .github/workflows/ci.yml | grep python-version",
     "python-version: ['3.11', '3.12']",
     "CI runs 3.11 and 3.12. 3.10 was dropped because the config loader uses tomllib, which is 3.11+.",
     "OK, good to know.",
     "fact", "CI tests Python 3.11 and 3.12 only; 3.10 was dropped because the config loader needs tomllib", 6,
     ("3.11", "tomllib")),
    ("How do I cut a release?",
     "sed -n 1,20p docs/RELEASING.md",
     "1. make release VERSION=x.y.z\n2. the tag push triggers .github/workflows/publish.yml",
     "Releases are described in docs/RELEASING.md: run `make release VERSION=x.y.z`; pushing the tag runs "
     "publish.yml, which uploads to PyPI.",
     "Thanks.",
     "reference", "Release procedure: docs/RELEASING.md, `make release VERSION=x.y.z`, tag push runs publish.yml",
     5, ("releasing.md", "make release")),
    ("到期时间显示错了，差了 8 个小时。",
     "python -m tasklog show 12",
     "due: 2026-03-01 01:00 (expected 09:00)",
     "存储时混用了本地时间和 UTC。我把 tasklog/dates.py 改成一律以 UTC ISO 8601 存储，只在显示时转换为本地时区。",
     "好，以后都这样做。",
     "decision", "日期一律以 UTC ISO 8601 存储（tasklog/dates.py），只在显示时转换为本地时区", 8,
     ("utc", "iso 8601", "iso8601")),
    ("Windows 上 `tl --help` 输出乱码。",
     "set PYTHONIOENCODING & python -m tasklog --help",
     "UnicodeEncodeError: 'charmap' codec can't encode characters",
     "Windows 控制台默认 cp1252。入口脚本在启动时设置 PYTHONIOENCODING=utf-8（或调用 sys.stdout.reconfigure），"
     "中文帮助就正常了。",
     "可以了，谢谢。",
     "lesson", "Windows 上 --help 中文乱码：入口要设 PYTHONIOENCODING=utf-8 或 sys.stdout.reconfigure(encoding='utf-8')",
     6, ("pythonioencoding", "reconfigure", "utf-8")),
    ("The sync command failed with HTTP 429 for the whole team this morning.",
     "grep -n RATE tasklog/sync.py",
     "14: RATE_LIMIT = 100  # requests per minute per token",
     "The sync API allows 100 requests per minute per token. sync.py now batches task updates 50 per request and "
     "retries 429 with exponential backoff (1 s, 2 s, 4 s, at most 5 tries).",
     "Good.",
     "fact", "Sync API rate limit: 100 requests/min per token; sync.py batches 50 updates and retries 429 with backoff",
     7, ("100", "429", "backoff")),
]


def coding_messages() -> tuple[list[dict], list[dict]]:
    """The 48 messages (with seq) and the 8 commits: [{seq, type, note, importance, keywords}]."""
    msgs: list[dict] = [{"role": "system", "content": "You are a coding agent working in the tasklog repository "
                                                      "(a Python CLI for personal task lists)."}]
    commits = []
    for i, (ask, cmd, output, explain, confirm, kind, note, imp, keys) in enumerate(TURNS):
        sid, cid = f"call_sh{i}", f"call_mc{i}"
        msgs += [
            {"role": "user", "content": ask},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": sid, "type": "function", "function": {"name": "shell", "arguments": json.dumps({"cmd": cmd})}}]},
            {"role": "tool", "tool_call_id": sid, "content": output},
            {"role": "assistant", "content": explain},
            {"role": "user", "content": confirm},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": "memory_commit", "arguments": json.dumps(
                    {"type": kind, "note": note, "importance": imp}, ensure_ascii=False)}}]},
        ]
        if i < len(TURNS) - 1:   # the acknowledgement the agent got, before the next turn
            msgs.append({"role": "tool", "tool_call_id": cid, "content": "Noted: memory commit queued."})
        commits.append({"index": len(msgs) - (2 if i < len(TURNS) - 1 else 1), "type": kind, "note": note,
                        "importance": imp, "keywords": keys})
    for seq, m in enumerate(msgs):
        m["seq"] = seq
    for c in commits:
        c["seq"] = msgs[c["index"]]["seq"]
    return msgs, commits


# ------------------------------------------------------------------------------------------- recording proxy

class Proxy:
    """A forwarding HTTP proxy on 127.0.0.1 that records every chat-completions request and its raw answer."""

    def __init__(self, upstream: str, record_dir: Path | None = None) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.upstream = upstream.rstrip("/")
        self.record_dir = record_dir
        self.records: list[dict] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _forward(self, method: str) -> None:
                import urllib.error
                import urllib.request

                n = int(self.headers.get("content-length") or 0)
                data = self.rfile.read(n) if n else None
                root = proxy.upstream[:-3] if proxy.upstream.endswith("/v1") else proxy.upstream
                url = root + self.path
                req = urllib.request.Request(url, data=data, method=method,
                                             headers={"Content-Type": "application/json"})
                t0 = time.monotonic()
                try:
                    with urllib.request.urlopen(req, timeout=3600) as r:
                        if "event-stream" in (r.headers.get("content-type") or ""):
                            return self._relay(r, data, t0)
                        status, body = r.status, r.read()
                except urllib.error.HTTPError as e:
                    status, body = e.code, e.read()
                except OSError as e:
                    status, body = 502, json.dumps({"error": {"message": str(e)}}).encode()
                if method == "POST" and self.path.endswith("/chat/completions"):
                    try:
                        answer = json.loads(body)
                    except ValueError:
                        answer = body.decode("utf-8", "replace")
                    proxy._record(json.loads(data or b"null"), status, answer, time.monotonic() - t0)
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _relay(self, r, data: bytes | None, t0: float) -> None:
                """A streamed answer passed on chunk by chunk as it comes; recorded put together."""
                from acpmem.write.llm import _add_chunk

                self.send_response(r.status)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                answer = {"content": [], "calls": {}, "finish": None, "usage": None, "model": None, "extra": {}}
                chunks, closed = 0, False
                for line in r:
                    try:
                        self.wfile.write(line)
                        self.wfile.flush()
                    except (BrokenPipeError, ConnectionResetError):   # the client stopped reading (a loop)
                        closed = True
                        break
                    text = line.decode("utf-8", "replace").strip()
                    if text.startswith("data:") and text[5:].strip() not in ("", "[DONE]"):
                        try:
                            _add_chunk(answer, json.loads(text[5:]))
                            chunks += 1
                        except ValueError:
                            pass
                self.close_connection = True
                message = {"role": "assistant", "content": "".join(answer["content"]) or None}
                if answer["calls"]:
                    message["tool_calls"] = [answer["calls"][i] for i in sorted(answer["calls"])]
                resp = {"choices": [{"index": 0, "message": message, "finish_reason": answer["finish"]}],
                        "usage": answer["usage"] or {}, "model": answer["model"], "streamed_chunks": chunks,
                        "client_closed": closed,
                        **answer["extra"]}
                proxy._record(json.loads(data or b"null"), r.status, resp, time.monotonic() - t0)

            def do_GET(self):
                self._forward("GET")

            def do_POST(self):
                self._forward("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _record(self, request: object, status: int, answer: object, wall: float) -> None:
        rec = {"request": request, "status": status, "response": answer, "wall_s": round(wall, 2)}
        self.records.append(rec)
        if self.record_dir is None:
            return
        with self._lock:   # as it comes: a run cut short keeps what it got
            self.record_dir.mkdir(parents=True, exist_ok=True)
            from replay_model import next_answer_path   # beside this script: the record's format is kept there

            next_answer_path(self.record_dir).write_text(json.dumps(rec, ensure_ascii=False, indent=1), "utf-8")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def start_llama_server(binary: str, gguf: str, port: int, threads: int, ctx: int) -> subprocess.Popen:
    """llama-server as tools/local-llm's script starts it: loopback only, one slot, the GGUF's chat template."""
    import urllib.request

    proc = subprocess.Popen([binary, "-m", gguf, "--host", "127.0.0.1", "--port", str(port), "-c", str(ctx),
                             "-np", "1", "-t", str(threads), "-tb", str(threads), "--jinja", "--metrics"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited with {proc.returncode}")
        time.sleep(1)
    proc.terminate()
    raise SystemExit("llama-server not healthy after 300 s")


# ------------------------------------------------------------------------------------------- running forks

def make_vault(root: Path, base_url: str, model: str, **extra):
    from acpmem.vault.create import init_vault
    from acpmem.vault.writer import Vault

    init_vault(root).close()
    path = root / "acpmem.toml"
    text = path.read_text("utf-8")
    # retries far in the future: the bench runs them itself (--attempts), no background worker races it for the model
    values = {"extractor": "llm", "max_retries": 0, "retry_base_seconds": 86400.0, **VAULT_SETTINGS, **extra}
    # the endpoint is the person's to choose, never a vault's (a vault's is not obeyed): the environment
    os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_MODEL"] = base_url, model
    os.environ.setdefault("OPENAI_API_KEY", "local")
    for key, val in values.items():
        line = next(ln for ln in text.splitlines() if ln.startswith(f"{key} = "))
        text = text.replace(line, f"{key} = {json.dumps(val)}", 1)
    path.write_text(text, "utf-8")
    return Vault(root)


VAULT_SETTINGS: dict = {}   # --temperature, --stream: [extraction] settings of every vault the bench makes
REUSE = False  # --reuse: a LoCoMo conversation whose fork vault exists in --dir is scored again, not forked again
ATTEMPTS = 1   # --attempts: a request that failed is run again at once, as the queue would on its schedule


def fork_once(vault, transcript: Path, session: str, seq: int, kind: str, note: str, importance: int,
              proxy: Proxy) -> dict:
    """One request, run up to ``ATTEMPTS`` times while it fails; the row of its first attempt, with the final status
    and the attempts used."""
    first = None
    for attempt in range(ATTEMPTS):
        row = _attempt(vault, transcript, session, seq, kind, note, importance, proxy,
                       first["request"] if first else None)
        if first is None:
            first = dict(row, first_status=row["status"], attempts=1)
        else:
            first.update(status=row["status"], attempts=attempt + 1, entries=row["entries"],
                         retry_seconds=round(first.get("retry_seconds", 0) + row["seconds"], 1))
        if row["status"] not in ("retry", "failed"):
            break
    return first


def _attempt(vault, transcript: Path, session: str, seq: int, kind: str, note: str, importance: int,
             proxy: Proxy, rid: str | None) -> dict:
    from acpmem.write import requests, worker

    req = requests.load_request(vault.state_dir, rid) if rid else None
    req = req or requests.make_request(types=vault.settings.types, type=kind, note=note, importance=importance,
                                session=session, seq=seq, transcript=str(transcript), host_tools=None,
                                lang=vault.settings.language, created=vault.now(),
                                request_id=requests.new_request_id(vault.rng))
    vault.ensure_state()
    if not rid:
        requests.save_request(vault.state_dir, req, new=True)
    n0 = len(proxy.records)
    t0 = time.monotonic()
    (out,) = worker.process_now(vault, [req.id])
    wall = time.monotonic() - t0
    rec = proxy.records[n0] if len(proxy.records) > n0 else {}
    resp = rec.get("response") if isinstance(rec.get("response"), dict) else {}
    timings = resp.get("timings") or {}
    msg = ((resp.get("choices") or [{}])[0] or {}).get("message") or {}
    prompt_n = (resp.get("usage") or {}).get("prompt_tokens") or 0
    cache_n = timings.get("cache_n", 0) or 0
    entries = {e.id: e for e in vault.load().entries}
    return {"request": req.id, "status": out.status, "entries": [
                {"id": e["id"], "title": e["title"], "body": entries[e["id"]].body if e["id"] in entries else ""}
                for e in out.entries],
            "error": (out.error or {}).get("message"), "reason": (out.error or {}).get("reason"),
            "notes": list(out.notes), "seconds": round(wall, 1), "prompt_tokens": prompt_n, "cache_n": cache_n,
            "completion_tokens": (resp.get("usage") or {}).get("completion_tokens"),
            "cold": cache_n < prompt_n / 2, "native_tool_calls": bool(msg.get("tool_calls")),
            "finish_reason": ((resp.get("choices") or [{}])[0] or {}).get("finish_reason"),
            "record": rec}


def run_coding(base: Path, url: str, model: str, style: str, proxy: Proxy, log) -> list[dict]:
    from acpmem.write import context

    context.PROMPT_STYLE = style
    msgs, commits = coding_messages()
    tpath = base / f"coding-{style}.json"
    tpath.write_text(json.dumps({"messages": msgs}, ensure_ascii=False, indent=1), "utf-8")
    vault = make_vault(base / f"vault-coding-{style}", url, model)
    rows = []
    try:
        for i, c in enumerate(commits):
            r = fork_once(vault, tpath, "coding-1", c["seq"], c["type"], c["note"], c["importance"], proxy)
            text = " ".join(f"{e['title']} {e['body']}" for e in r["entries"]).lower()
            r.update(commit=i + 1, type=c["type"], note=c["note"],
                     on_topic=bool(r["entries"]) and any(k.lower() in text for k in c["keywords"]))
            rows.append(r)
            log(f"  [{style}] commit {i + 1} {c['type']:<15} {r['status']:<8} (attempts {r['attempts']}, first "
                f"{r['first_status']}) {len(r['entries'])} entries "
                f"on-topic={r['on_topic']} {r['seconds']:.0f} s ({'cold' if r['cold'] else 'warm'}) "
                f"{r['error'] or ''}")
    finally:
        vault.close()
    return rows


def locomo_transcript(conv: dict, s: int) -> tuple[list[dict], int]:
    c = conv["conversation"]
    a, b = c["speaker_a"], c["speaker_b"]
    msgs = [{"seq": s * SEQ_BASE, "role": "system",
             "content": f"A chat between {a} and {b} on {c.get(f'session_{s}_date_time', 'an unknown date')}."}]
    for turn in c[f"session_{s}"]:
        t = int(str(turn["dia_id"]).split(":")[1])
        msgs.append({"seq": s * SEQ_BASE + t, "role": "user" if turn["speaker"] == a else "assistant",
                     "content": f"{turn['speaker']}: {turn.get('text', '')}"})
    seq = s * SEQ_BASE + 999
    note = LOCOMO_NOTE.format(a=a, b=b)
    if msgs[-1]["role"] == "user":
        msgs.append({"seq": seq - 1, "role": "assistant", "content": "I'll remember that."})
    msgs.append({"seq": seq, "role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_s{s}", "type": "function", "function": {"name": "memory_commit", "arguments": json.dumps(
            {"type": "fact", "note": note, "importance": 5})}}]})
    return msgs, seq


def run_locomo(base: Path, data: list[dict], url: str, model: str, n_conv: int, n_sess: int, proxy: Proxy,
               log) -> dict:
    from search_locomo import dia_ids, questions

    from acpmem.core.entry import Citation, Entry
    from acpmem.vault.create import init_vault
    from acpmem.read.retrieval import recall
    from acpmem.vault.writer import Vault
    from acpmem.search.overlap import overlap
    from acpmem.read.sources import cited_seqs

    forks, scores = [], {"fork (session)": [], "fork (turn)": [], "fork (words)": [], "observations": [],
                         "raw turns": []}
    for ci, conv in enumerate(data[:n_conv]):
        sample = str(conv.get("sample_id") or f"conv{ci}")
        c = conv["conversation"]
        sessions = [s for s in range(1, n_sess + 1) if f"session_{s}" in c]
        turn_text = {(str(s), int(str(t["dia_id"]).split(":")[1])): t.get("text", "")
                     for s in sessions for t in c[f"session_{s}"]}
        root = base / f"vault-locomo-{ci}"
        reuse = REUSE and (root / "entries").is_dir()
        vault = Vault(root) if reuse else make_vault(root, url, model)
        try:
            for s in (() if reuse else sessions):
                msgs, seq = locomo_transcript(conv, s)
                tpath = base / f"locomo-{ci}-{s}.json"
                tpath.write_text(json.dumps({"messages": msgs}, ensure_ascii=False), "utf-8")
                r = fork_once(vault, tpath, sample, seq, "fact", LOCOMO_NOTE.format(a=c["speaker_a"],
                                                                                    b=c["speaker_b"]), 5, proxy)
                r.update(conversation=sample, session=s, turns=len(c[f"session_{s}"]))
                forks.append(r)
                log(f"  [locomo] {sample} session {s}: {r['status']} {len(r['entries'])} entries "
                    f"{r['seconds']:.0f} s ({'cold' if r['cold'] else 'warm'}) {r['error'] or ''}")
            # baselines: observations and raw turns of the same sessions, each in a vault of its own
            obs, raw = [], []
            for s in sessions:
                for speaker, items in (conv.get("observation", {}).get(f"session_{s}_observation") or {}).items():
                    for text, dia in items:
                        cites = tuple(dict.fromkeys(Citation(sample, int(x) * SEQ_BASE + t)
                                                    for x, t in dia_ids(dia)))
                        obs.append((text, cites))
                for (ss, t), text in turn_text.items():
                    if ss == str(s):
                        raw.append((text, (Citation(sample, s * SEQ_BASE + t),)))
            baseline = {}
            for name, items in (("observations", obs), ("raw turns", raw)):
                broot = base / f"vault-{name.replace(' ', '-')}-{ci}"
                if broot.exists():
                    import shutil
                    shutil.rmtree(broot)
                bv = init_vault(broot)
                es = []
                for text, cites in items:
                    ident = bv.new_id({e.id for e in es})
                    e = Entry(id=ident, title=" ".join(text.split())[:200] or "(empty)", type="fact", importance=5,
                              created="2023-05-08T00:00:00Z", body=(text.strip() or "(empty)") + "\n", citation=cites)
                    es.append(e.with_changes(path=bv.path_for(ident, e.title)))
                bv.write_entries(es, subject=f"{len(es)} {name}", why="bench/real_model.py baseline")
                baseline[name] = bv
            entries = {e.id: e for e in vault.load().entries}
            for qa, evidence in questions(conv):
                if not evidence or not all(ss in {str(x) for x in sessions} for ss, _ in evidence):
                    continue
                hits = recall(vault, qa["question"], limit=5, mark_read=False)
                sess_hit = turn_hit = words_hit = False
                for h in hits:
                    e = entries.get(h.entry.id, h.entry)
                    covered = {str(ci2.seq // SEQ_BASE) for ci2 in e.citation if isinstance(ci2.seq, int)}
                    cited = {(str(q // SEQ_BASE), q % SEQ_BASE) for ci2 in e.citation for q in cited_seqs(ci2)}
                    turn_hit = turn_hit or bool(cited & evidence)
                    for ss, t in evidence:
                        if ss in covered:
                            sess_hit = True
                            if overlap(f"{e.title}\n{e.body}", turn_text.get((ss, t), "")) >= 1 / 3:
                                words_hit = True
                scores["fork (session)"].append(sess_hit)
                scores["fork (turn)"].append(turn_hit)
                scores["fork (words)"].append(words_hit)
                for name, bv in baseline.items():
                    got = recall(bv, qa["question"], limit=5, mark_read=False)
                    cited = {(str(x.seq // SEQ_BASE), x.seq % SEQ_BASE) for h in got for x in h.entry.citation
                             if isinstance(x.seq, int)}
                    scores[name].append(bool(cited & evidence))
            for bv in baseline.values():
                bv.close()
        finally:
            vault.close()
    return {"forks": forks, "evidence_recall": {k: (round(sum(v) / len(v), 3) if v else None, len(v))
                                                for k, v in scores.items()}}


def summarize(rows: list[dict]) -> dict:
    n = len(rows)
    ok = [r for r in rows if r["status"] in ("written", "proposed")]
    cold = [r["seconds"] for r in rows if r["cold"]]
    warm = [r["seconds"] for r in rows if not r["cold"]]
    return {"forks": n, "written": len(ok),
            "written_first_attempt": sum(r.get("first_status", r["status"]) in ("written", "proposed") for r in rows),
            "attempts": sum(r.get("attempts", 1) for r in rows), "nothing": sum(r["status"] == "nothing" for r in rows),
            "failed": sum(r["status"] in ("retry", "failed") for r in rows),
            "on_topic": sum(bool(r.get("on_topic")) for r in rows),
            "native_tool_calls": sum(r["native_tool_calls"] for r in rows),
            "entries_per_fork": round(sum(len(r["entries"]) for r in rows) / n, 2) if n else 0,
            "median_s_cold": statistics.median(cold) if cold else None,
            "median_s_warm": statistics.median(warm) if warm else None,
            "cold_forks": len(cold), "warm_forks": len(warm)}


def python_pass_s() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", help="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8088/v1")
    p.add_argument("--model", default="", help="the model name (default: the one the endpoint serves)")
    p.add_argument("--llama-server", help="start this llama-server binary instead of --base-url")
    p.add_argument("--gguf", help="the GGUF model for --llama-server")
    p.add_argument("--port", type=int, default=8099)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--ctx", type=int, default=16384)
    p.add_argument("--styles", default="system", help="prompt styles to run the coding session with: system,user")
    p.add_argument("--no-coding", action="store_true", help="skip the coding session")
    p.add_argument("--locomo", type=Path, help="LoCoMo's locomo10.json")
    p.add_argument("--conversations", type=int, default=2)
    p.add_argument("--sessions", type=int, default=2, help="sessions per conversation")
    p.add_argument("--reuse", action="store_true", help="score LoCoMo fork vaults already in --dir again")
    p.add_argument("--attempts", type=int, default=1, help="attempts per request while it fails (default 1)")
    p.add_argument("--temperature", type=float, help="[extraction] temperature of the vaults (default: not sent)")
    p.add_argument("--stream", choices=("auto", "on", "off"), help="[extraction] stream of the vaults")
    p.add_argument("--record", type=Path, help="save every raw request/answer pair as JSON files here")
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    p.add_argument("--dir", type=Path, help="work folder (default: a temporary one)")
    a = p.parse_args()
    if not a.base_url and not (a.llama_server and a.gguf):
        p.error("give --base-url, or --llama-server with --gguf")
    global ATTEMPTS, REUSE
    ATTEMPTS, REUSE = max(1, a.attempts), a.reuse
    if a.temperature is not None:
        VAULT_SETTINGS["temperature"] = a.temperature
    if a.stream:
        VAULT_SETTINGS["stream"] = a.stream
    server = start_llama_server(a.llama_server, a.gguf, a.port, a.threads, a.ctx) if a.llama_server else None
    url = a.base_url or f"http://127.0.0.1:{a.port}/v1"
    proxy = Proxy(url, a.record)
    log = lambda m: print(m, flush=True)   # noqa: E731
    results: dict = {"base_url": url, "pass_s": round(python_pass_s(), 4)}
    try:
        from acpmem.write.llm import resolve_model_config, with_served_model

        model = a.model or with_served_model(resolve_model_config({"base_url": url}, env={})).model
        results["model"] = model
        with tempfile.TemporaryDirectory(prefix="acpmem-real-") as tmp:
            base = a.dir or Path(tmp)
            base.mkdir(parents=True, exist_ok=True)
            if not a.no_coding:
                for style in a.styles.split(","):
                    log(f"coding session, prompt style {style}")
                    rows = run_coding(base, proxy.base_url, model, style, proxy, log)
                    results[f"coding:{style}"] = {"summary": summarize(rows), "rows": rows}
            if a.locomo:
                log(f"LoCoMo: {a.conversations} conversation(s) x {a.sessions} session(s)")
                data = json.loads(a.locomo.read_text("utf-8"))
                lo = run_locomo(base, data, proxy.base_url, model, a.conversations, a.sessions, proxy, log)
                results["locomo"] = {"summary": summarize(lo["forks"]), "evidence_recall": lo["evidence_recall"],
                                     "rows": lo["forks"]}
    finally:
        proxy.close()
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    for key, val in results.items():
        if isinstance(val, dict) and "summary" in val:
            s = val["summary"]
            log(f"{key}: {s['written']}/{s['forks']} written ({s['written_first_attempt']} at the first attempt, "
                f"{s['attempts']} attempts), {s['on_topic']} on-topic, {s['nothing']} nothing, "
                f"{s['failed']} failed; {s['native_tool_calls']} native tool calls; {s['entries_per_fork']} entries/fork;"
                f" median {s['median_s_cold']} s cold ({s['cold_forks']}), {s['median_s_warm']} s warm "
                f"({s['warm_forks']}); python -c pass {results['pass_s']} s")
            if "evidence_recall" in val:
                for name, (share, n) in val["evidence_recall"].items():
                    log(f"  evidence recall @5, {name}: {share} over {n} questions")
    if a.out:
        for val in results.values():
            if isinstance(val, dict):
                for r in val.get("rows", ()):
                    r.pop("record", None)
        a.out.write_text(json.dumps(results, ensure_ascii=False, indent=1), "utf-8")


if __name__ == "__main__":
    main()
