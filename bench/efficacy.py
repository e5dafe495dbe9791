"""Efficacy of memory end to end: what the next session's context holds, and what a model answers from it.

    python bench/efficacy.py --locomo PATH/locomo10.json [--conversations 2] [--sessions N] [--k 5]
        [--base-url URL [--model NAME]] [--answer-base-url URL --answer-model NAME --sample 60 --seed 1]
        [--scenarios bench/efficacy_scenarios] [--state DIR] [--out results.json]

Everything goes through acpmem's real path: a vault made by ``init_vault``; after each session of a conversation its
memory is written as a host writes it, one ``memory_commit`` (``acpmem.write.submit.submit`` with ``wait``: the
request file, the worker lock, the fork, the git commit); the next session's context is what a host gives its model,
the resident index frozen for a new session (``resident_index``; one session per arm and conversation or scenario,
so the index is one constant prefix a server's prompt cache keeps) plus ``memory_recall`` with the question
(``recall``, ``--k`` entries).

LoCoMo arms (the same questions for each):
  none          the question alone
  offline       index + recall over the vault the offline extractor wrote (no model)
  fork          index + recall over the vault the fork wrote on ``--base-url`` (only with ``--base-url``)
  raw-turns     the k best raw turns, each a one-turn entry, ranked by the same recall (the usual RAG baseline)
  observations  LoCoMo's human observations as entries, index + recall (the extraction ceiling)
  full          the whole conversation of the sessions run, when it fits ``--window`` tokens (chars / 4); else
                ``full (cut)``: its last turns that fit, the oldest left out, as a host's window does

Measured per arm over every question (categories 1-4) of the sessions run, no model needed:
  evidence@k    a recalled item cites a gold evidence turn (full: every evidence turn is in the text; none: never)
  contained     LoCoMo's answer, normalised, appears in the context text
With ``--answer-model`` (and ``--answer-base-url``, default ``--base-url``): a fixed-seed sample of ``--sample``
questions answered by that model from each arm's context at temperature 0; F1 of its answer against LoCoMo's (SQuAD
normalisation, no LLM judge), containment of LoCoMo's answer in it, prompt tokens (the server's ``usage``) and
seconds per answer. Per category: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop (LoCoMo's numbering);
5 (adversarial) is left out.

Coding scenarios (``--scenarios``, default bench/efficacy_scenarios/): each file a session one (a coding conversation
with compression blocks and ``memory_commit`` calls) and session-two prompts that need one of its memories, with the
words (``expect``) that memory holds. All scenarios' session ones go into one vault per arm (so every other scenario
is a neighbour the right memory must outrank); arms offline, fork (with ``--base-url``) and hand-written (the
scenario's own ``memory`` entries). carried = every expected word is in the context; recall-carried = in the k
recalled entries alone; with ``--answer-model`` also answered = every expected word is in the model's answer.

Nothing invented (fork and offline vaults): an entry's checkable facts (numbers, dates, capitalised names, code-like
words) each appear in the turns it cites; the share of entries with none missing is reported.

Resumable: ``--state DIR`` (default ./efficacy-state) keeps the vaults, the sessions already written and the answers
already given; a run stopped at any point continues where it was. Bad input (no dataset, an endpoint that does not
answer, a state folder of another run) is one line ``Error: ...`` and exit 1.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import string
import sys
import time
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from invented import check_vault   # noqa: E402  (bench/invented.py: the "nothing invented" check)

SEQ_BASE = 1000
NOTE = "facts about {a} and {b} from this conversation: events with their dates, plans, preferences, people"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DIA = re.compile(r"D:?(\d+):(\d+)")


class BenchError(Exception):
    """Bad input: said as one line, ``Error: what — what next``."""


# ------------------------------------------------------------------------------------------------ state (resumable)

def _same_run(key: dict) -> dict:
    """What must match for a state folder to be continued: every setting but the number of conversations (each
    conversation has its own vaults, so a run can be reported on its first conversations, or extended)."""
    return {k: v for k, v in key.items() if k != "conversations"}


class State:
    def __init__(self, root: Path, key: dict) -> None:
        self.root = root
        self.path = root / "state.json"
        root.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            try:
                self.data = json.loads(self.path.read_text("utf-8"))
            except ValueError:
                raise BenchError(f"{self.path} is not valid JSON — delete the state folder to start again") from None
            if _same_run(self.data.get("key") or {}) != _same_run(key):
                raise BenchError(f"the state folder {root} belongs to a run with other settings "
                                 f"({self.data.get('key')}) — pass another --state, or delete it to start again")
        else:
            self.data = {"key": key, "written": {}, "answers": {}}

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, ensure_ascii=False, indent=0), "utf-8")
        tmp.replace(self.path)


# ------------------------------------------------------------------------------------------------ text scoring

def normalise(text: str) -> str:
    text = str(text).lower()
    text = "".join(ch if ch not in string.punctuation else " " for ch in text)
    text = re.sub(r"\b(a|an|the|and)\b", " ", text)
    return " ".join(text.split())


def f1(prediction: str, truth: str) -> float:
    p, t = normalise(prediction).split(), normalise(truth).split()
    common = Counter(p) & Counter(t)
    same = sum(common.values())
    if not p or not t or same == 0:
        return 0.0
    precision, recall_ = same / len(p), same / len(t)
    return 2 * precision * recall_ / (precision + recall_)


def contains(text: str, answer: str) -> bool:
    a = normalise(answer)
    return bool(a) and f" {a} " in f" {normalise(text)} "


# ------------------------------------------------------------------------------------------------ the vaults

def make_vault(root: Path, extractor: str, base_url: str = "", model: str = "", settings: dict | None = None):
    from acpmem.vault.create import init_vault
    from acpmem.vault.writer import Vault

    if not (root / "acpmem.toml").exists():
        init_vault(root).close()
    path = root / "acpmem.toml"   # set on every run: a resumed run may reach the endpoint through a new proxy port
    text = path.read_text("utf-8")
    # retries in the far future: the bench runs each request once, no background worker races it for the model
    values = {"extractor": extractor, "max_retries": 0, "retry_base_seconds": 86400.0, **(settings or {})}
    if base_url:
        # the endpoint is the person's to choose, never a vault's (a vault's is not obeyed): the environment
        os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_MODEL"] = base_url, model
        os.environ.setdefault("OPENAI_API_KEY", "local")
    for key, val in values.items():
        line = next(ln for ln in text.splitlines() if ln.startswith(f"{key} = "))
        text = text.replace(line, f"{key} = {json.dumps(val)}", 1)
    path.write_text(text, "utf-8")
    return Vault(root)


def entries_vault(root: Path, items: list[dict], why: str):
    """A vault holding ``items`` ({title, body, type, citations: [(session, seq)]}) as entries, written once."""
    from acpmem.core.entry import Citation, Entry
    from acpmem.vault.create import init_vault
    from acpmem.vault.writer import Vault

    if (root / "entries").is_dir() and (root / ".done").exists():
        return Vault(root)
    if root.exists():
        import shutil
        shutil.rmtree(root)
    bv = init_vault(root)
    es = []
    for it in items:
        ident = bv.new_id({e.id for e in es})
        body = (it["body"].strip() or "(empty)") + "\n"
        e = Entry(id=ident, title=" ".join(it["title"].split())[:200] or "(empty)", type=it.get("type", "fact"),
                  importance=it.get("importance", 5), created=it.get("created", "2023-05-08T00:00:00Z"), body=body,
                  citation=tuple(dict.fromkeys(Citation(s, q) for s, q in it.get("citations", ()))))
        es.append(e.with_changes(path=bv.path_for(ident, e.title)))
    if es:
        bv.write_entries(es, subject=f"{len(es)} entries", why=why)
    (root / ".done").write_text("", "utf-8")
    return bv


def commit(vault, transcript: Path, session: str, seq: int, kind: str, note: str, importance: int,
           extractor: str, block: str | None = None) -> dict:
    """One ``memory_commit`` as a host makes it with ``--wait``: the real submit, then the fork in this process."""
    from acpmem.write.submit import submit

    t0 = time.monotonic()
    ack = submit(vault, type=kind, note=note, importance=importance, session=session, seq=seq,
                 transcript=str(transcript), wait=True, extractor=extractor, block=block)
    out = ack.outcome
    return {"status": out.status if out else ack.state, "entries": [e["id"] for e in (out.entries if out else ())],
            "error": ((out.error or {}).get("message") if out else None), "seconds": round(time.monotonic() - t0, 1),
            "extractor": out.extractor if out else None,
            "fallback": bool(out and any("block's summary" in n for n in out.notes))}


def context_for(vault, question: str, k: int, session: str, index: bool = True) -> tuple[str, list]:
    """What a host gives its model in a new session: the frozen resident index, then ``memory_recall`` of the
    question (k entries)."""
    from acpmem.read.resident import resident_index
    from acpmem.read.retrieval import recall, recall_text

    idx = resident_index(vault, session=session) if index else ""
    try:
        hits = recall(vault, question, limit=k, session=session)
    except Exception:   # a question recall refuses (empty after stripping): no hits
        hits = []
    return (idx + "\n\n" + recall_text(vault, hits) if hits else idx), hits


# ------------------------------------------------------------------------------------------------ answering model

class Answerer:
    def __init__(self, base_url: str, model: str, max_tokens: int = 64) -> None:
        self.base_url, self.model, self.max_tokens = base_url.rstrip("/"), model, max_tokens

    def ask(self, context: str, question: str) -> dict:
        import urllib.request

        system = ("Answer the user's question in a few words, from the memory below when it helps. "
                  "If it does not say, give your best short guess.")
        msgs = [{"role": "system", "content": system + ("\n\n<memory>\n" + context.strip() + "\n</memory>"
                                                         if context.strip() else "")},
                {"role": "user", "content": question}]
        body = json.dumps({"model": self.model, "messages": msgs, "temperature": 0, "seed": 1,
                           "max_tokens": self.max_tokens}).encode()
        req = urllib.request.Request(self.base_url + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        t0 = time.monotonic()
        with urllib.request.urlopen(req, timeout=1800) as r:
            doc = json.loads(r.read())
        text = ((doc.get("choices") or [{}])[0].get("message") or {}).get("content") or ""
        return {"answer": text.strip(), "prompt_tokens": (doc.get("usage") or {}).get("prompt_tokens"),
                "seconds": round(time.monotonic() - t0, 2)}


def check_endpoint(url: str, what: str) -> str:
    """The model the endpoint serves; a BenchError when it does not answer."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/models", timeout=10) as r:
            doc = json.loads(r.read())
    except (OSError, ValueError) as exc:
        why = getattr(exc, "reason", None) or exc
        raise BenchError(f"the endpoint {url} ({what}) does not answer ({why}) — start the server, or check the URL "
                         "(an OpenAI-compatible base URL ending in /v1)") from None
    models = [m.get("id") for m in (doc.get("data") or []) if isinstance(m, dict)]
    return models[0] if models else ""


# ------------------------------------------------------------------------------------------------ LoCoMo

def dia(value) -> list[tuple[int, int]]:
    items = value if isinstance(value, list) else [value]
    return [(int(s), int(t)) for item in items for s, t in DIA.findall(str(item))]


def load_locomo(path: Path) -> list[dict]:
    if not path.is_file():
        raise BenchError(f"no dataset at {path} — pass LoCoMo's locomo10.json with --locomo")
    try:
        data = json.loads(path.read_text("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BenchError(f"{path} is not valid JSON ({exc}) — pass LoCoMo's locomo10.json") from None
    if not isinstance(data, list) or not data or not all(
            isinstance(c, dict) and isinstance(c.get("conversation"), dict) and isinstance(c.get("qa"), list)
            for c in data):
        raise BenchError(f"{path} is not a LoCoMo file (a list of conversations with 'conversation' and 'qa') — "
                         "pass LoCoMo's locomo10.json")
    return data


def sessions_of(conv: dict, limit: int | None) -> list[int]:
    c = conv["conversation"]
    found = sorted(int(m[1]) for k in c if (m := re.fullmatch(r"session_(\d+)", k)) and isinstance(c[k], list))
    return found[:limit] if limit else found


def transcript_of(conv: dict, s: int) -> tuple[list[dict], int]:
    c = conv["conversation"]
    a, b = c["speaker_a"], c["speaker_b"]
    msgs = [{"seq": s * SEQ_BASE, "role": "system",
             "content": f"A chat between {a} and {b} on {c.get(f'session_{s}_date_time', 'an unknown date')}."}]
    for turn in c[f"session_{s}"]:
        (_, t), = dia(turn["dia_id"])[:1] or [(s, len(msgs))]
        msgs.append({"seq": s * SEQ_BASE + t, "role": "user" if turn["speaker"] == a else "assistant",
                     "content": f"{turn['speaker']}: {turn.get('text', '')}"})
    seq = s * SEQ_BASE + 999
    if msgs[-1]["role"] == "user":
        msgs.append({"seq": seq - 1, "role": "assistant", "content": "I'll remember that."})
    msgs.append({"seq": seq, "role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_s{s}", "type": "function", "function": {"name": "memory_commit", "arguments": json.dumps(
            {"type": "fact", "note": NOTE.format(a=a, b=b), "importance": 5})}}]})
    return msgs, seq


def session_time(conv: dict, s: int) -> datetime | None:
    """When session ``s`` took place ("1:56 pm on 8 May, 2023"), as UTC; None where LoCoMo's text does not parse.
    A host writes a session's memory on the day of the session, so its entries are created then, not on the day
    the bench runs: the date an entry shows, and the date boost of a question naming a day, depend on it."""
    raw = " ".join(str(conv["conversation"].get(f"session_{s}_date_time", "")).split())
    try:
        return datetime.strptime(raw, "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def iso(dt: datetime | None) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ") if dt else "2023-05-08T00:00:00Z"


def turn_texts(conv: dict, sessions: list[int]) -> dict[tuple[int, int], str]:
    c = conv["conversation"]
    out = {}
    for s in sessions:
        date = c.get(f"session_{s}_date_time", "")
        for turn in c[f"session_{s}"]:
            for key in dia(turn["dia_id"])[:1]:
                out[key] = f"[{date}] {turn['speaker']}: {turn.get('text', '')}"
    return out


def cited_turns(entry) -> set[tuple[int, int]]:
    from acpmem.read.sources import cited_seqs

    return {(q // SEQ_BASE, q % SEQ_BASE) for c in entry.citation for q in cited_seqs(c) if isinstance(q, int)}


def run_locomo(a, st: State, log) -> dict:
    from acpmem.core.clock import now_utc

    data = load_locomo(a.locomo)
    arms_w = ["offline"] + (["fork"] if a.base_url else [])
    rows = []   # one per (question, arm)
    forks, invented_rows = [], []
    for ci, conv in enumerate(data[:a.conversations]):
        if ci < a.skip_conversations:
            continue
        sample = str(conv.get("sample_id") or f"conv{ci}")
        c = conv["conversation"]
        sessions = sessions_of(conv, a.sessions)
        texts = turn_texts(conv, sessions)
        vaults = {}
        for arm in arms_w:
            root = st.root / f"locomo-{ci}-{arm}"
            vault = make_vault(root, "llm" if arm == "fork" else "offline", a.fork_url if arm == "fork" else "",
                               a.model if arm == "fork" else "", a.fork_settings if arm == "fork" else None)
            for s in sessions:
                key = f"{arm}/{sample}/{s}"
                if key in st.data["written"]:
                    continue
                msgs, seq = transcript_of(conv, s)
                tpath = st.root / f"locomo-{ci}-s{s}.json"
                tpath.write_text(json.dumps({"messages": msgs}, ensure_ascii=False), "utf-8")
                when = session_time(conv, s)
                vault.clock = (lambda t=when: t) if when else now_utc   # the session's day, as a host would write
                r = commit(vault, tpath, f"{sample}-s{s}", seq, "fact", NOTE.format(a=c["speaker_a"], b=c["speaker_b"]), 5,
                           "llm" if arm == "fork" else "offline")
                st.data["written"][key] = r
                st.save()
                log(f"  [{arm}] {sample} session {s}: {r['status']}, {len(r['entries'])} entries, {r['seconds']} s "
                    f"{r['error'] or ''}")
            vault.clock = now_utc   # the questions are asked now
            forks += [dict(st.data["written"][f"{arm}/{sample}/{s}"], arm=arm) for s in sessions]
            vaults[arm] = vault
            invented_rows += [dict(r, arm=arm) for r in check_vault(vault)]   # nothing invented
        obs, raw = [], []
        for s in sessions:
            created = iso(session_time(conv, s))
            for speaker, items in ((conv.get("observation") or {}).get(f"session_{s}_observation") or {}).items():
                for item in items:
                    text, ids = (item[0], item[1]) if isinstance(item, list) and len(item) > 1 else (str(item), "")
                    obs.append({"title": text, "body": text, "created": created,
                                "citations": [(f"{sample}-s{x}", x * SEQ_BASE + t) for x, t in dia(ids)]})
            for (x, t), text in texts.items():
                if x == s:
                    raw.append({"title": text, "body": text, "created": created, "citations": [(f"{sample}-s{x}", x * SEQ_BASE + t)]})
        vaults["observations"] = entries_vault(st.root / f"locomo-{ci}-observations", obs, "LoCoMo observations")
        vaults["raw-turns"] = entries_vault(st.root / f"locomo-{ci}-raw-turns", raw, "LoCoMo raw turns")
        full = "\n".join(texts[k] for k in sorted(texts))
        fits = len(full) / 4 <= a.window
        kept = set(texts)
        if not fits:   # as a host with a window does: the oldest turns left out until the rest fits
            budget, kept = a.window * 4, set()
            for key in sorted(texts, reverse=True):
                budget -= len(texts[key]) + 1
                if budget < 0:
                    break
                kept.add(key)
            full = "\n".join(texts[k] for k in sorted(kept))
        n_q = 0
        for qi, qa in enumerate(conv["qa"]):
            cat = qa.get("category")
            evidence = set(dia(qa.get("evidence", [])))
            if cat not in CATEGORIES or not evidence or not evidence <= set(texts) or "answer" not in qa:
                continue
            n_q += 1
            qid = f"{sample}/{qi}"
            answer = str(qa["answer"])
            base = {"qid": qid, "category": CATEGORIES[cat]}
            rows.append({**base, "arm": "none", "evidence": False, "contained": False, "context": ""})
            for arm, vault in vaults.items():
                ctx, hits = context_for(vault, qa["question"], a.k, session=f"bench-{arm}-{sample}",
                                        index=arm != "raw-turns")
                if arm == "raw-turns":
                    ctx = "\n".join(h.entry.body.strip() for h in hits)
                cited = set().union(*(cited_turns(h.entry) for h in hits)) if hits else set()
                rows.append({**base, "arm": arm, "evidence": bool(cited & evidence), "contained": contains(ctx, answer),
                             "turns": len(cited), "context": ctx})
            rows.append({**base, "arm": "full" if fits else "full (cut)", "evidence": evidence <= kept,
                         "contained": contains(full, answer), "context": full})
        log(f"  {sample}: {len(sessions)} sessions, {len(texts)} turns, {n_q} questions; full context "
            f"{sum(len(t) for t in texts.values()) // 4} tokens ({'fits' if fits else 'over'} --window {a.window}: "
            f"{'whole' if fits else f'the last {len(kept)} turns'})")
        for v in vaults.values():
            v.close()
    result = {"forks": forks, "rows": rows, "invented": invented_rows}
    if a.answerer is not None:
        result["answers"] = answer_sample(a, st, rows, data, log)
    return result


def _answered_by_every_arm(rows: list[dict], st: State, prefix: str) -> set[str]:
    """The questions (prompts) the state holds an answer to for every arm (``--answered-only``)."""
    arms: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        arms[r["qid"]].add(r["arm"])
    return {q for q, want in arms.items() if all(f"{prefix}{arm}/{q}" in st.data["answers"] for arm in want)}


ARMS = ("none", "offline", "fork", "raw-turns", "observations", "full", "full (cut)", "hand-written")


def answers_arm(a, arm: str) -> bool:
    """Whether ``--answer-arms`` asks the model to answer from this arm's context."""
    return not a.answer_arms or arm in a.answer_arms


def asking_order(rows: list[dict]) -> list[dict]:
    """One arm's questions after another: consecutive prompts share the arm's resident index as their prefix, which
    llama-server keeps in its prompt cache (interleaved, each question would evaluate its arm's index again)."""
    first = {}
    for r in rows:
        first.setdefault(r["arm"], len(first))
    return sorted(rows, key=lambda r: first[r["arm"]])


def answer_sample(a, st: State, rows: list[dict], data: list[dict], log) -> list[dict]:
    qids = sorted({r["qid"] for r in rows})
    chosen = set(random.Random(a.seed).sample(qids, min(a.sample, len(qids))))
    by_id = {f"{conv.get('sample_id') or f'conv{ci}'}/{qi}": qa for ci, conv in enumerate(data)
             for qi, qa in enumerate(conv["qa"])}
    out = []
    todo = asking_order([r for r in rows if r["qid"] in chosen and answers_arm(a, r["arm"])])
    if a.answered_only:
        done = _answered_by_every_arm(todo, st, "")
        todo = [r for r in todo if r["qid"] in done]
    for n, r in enumerate(todo):
        key = f"{r['arm']}/{r['qid']}"
        if key not in st.data["answers"]:
            qa = by_id[r["qid"]]
            st.data["answers"][key] = a.answerer.ask(r["context"], qa["question"])
            st.save()
            if n % 10 == 0:
                log(f"  answered {n + 1}/{len(todo)}")
        got = st.data["answers"][key]
        truth = str(by_id[r["qid"]]["answer"])
        out.append({"qid": r["qid"], "arm": r["arm"], "category": r["category"], "f1": f1(got["answer"], truth),
                    "contained": contains(got["answer"], truth), "prompt_tokens": got["prompt_tokens"],
                    "seconds": got["seconds"]})
    return out


# ------------------------------------------------------------------------------------------------ coding scenarios

SUMMARY_HEAD = "[Compressed conversation section]"


def load_scenarios(folder: Path) -> list[dict]:
    if not folder.is_dir():
        raise BenchError(f"no scenario folder at {folder} — pass --scenarios DIR (bench/efficacy_scenarios)")
    out = []
    for p in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(p.read_text("utf-8"))
        except ValueError as exc:
            raise BenchError(f"{p} is not valid JSON ({exc}) — fix the scenario file") from None
        for key in ("id", "lang", "session1", "session2", "memory"):
            if key not in doc:
                raise BenchError(f"{p} has no '{key}' — a scenario needs id, lang, session1, session2, memory")
        out.append(doc)
    if not out:
        raise BenchError(f"no scenario files (*.json) in {folder} — pass the folder that holds them")
    return out


def scenario_messages(sc: dict) -> tuple[list[dict], list[dict]]:
    """Session one as OpenAI chat messages with seq, and its commits [{seq, type, note, importance, block}]."""
    msgs: list[dict] = [{"role": "system", "content": sc.get("system") or
                         f"You are a coding agent working in the {sc.get('project', 'current')} repository."}]
    commits = []
    blocks = 0
    for i, step in enumerate(sc["session1"]):
        if "block" in step:
            blocks += 1
            b = step["block"]
            msgs.append({"role": "user", "id": f"acp_summary_b{blocks}",
                         "content": f"{SUMMARY_HEAD} — {b.get('topic', '')}\n{b['summary']}"})
        elif "commit" in step:
            cm = step["commit"]
            cid = f"call_mc{i}"
            msgs.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": "memory_commit", "arguments": json.dumps(
                    {k: v for k, v in cm.items() if k in ("type", "note", "importance", "block")},
                    ensure_ascii=False)}}]})
            commits.append({**cm, "index": len(msgs) - 1})
            msgs.append({"role": "tool", "tool_call_id": cid, "content": "Noted: memory commit queued."})
        else:
            msgs.append({"role": "user", "content": step["user"]})
            if step.get("tool"):
                sid = f"call_sh{i}"
                msgs.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": sid, "type": "function", "function": {"name": "shell", "arguments": json.dumps(
                        {"cmd": step["tool"]["cmd"]}, ensure_ascii=False)}}]})
                msgs.append({"role": "tool", "tool_call_id": sid, "content": step["tool"]["output"]})
            msgs.append({"role": "assistant", "content": step["assistant"]})
    for seq, m in enumerate(msgs):
        m["seq"] = seq
    for c in commits:
        c["seq"] = msgs[c["index"]]["seq"]
    return msgs, commits


def run_scenarios(a, st: State, log) -> dict:
    scs = load_scenarios(a.scenarios)
    arms = ["offline"] + (["fork"] if a.base_url else [])
    vaults = {}
    forks, invented_rows = [], []
    for arm in arms:
        vault = make_vault(st.root / f"coding-{arm}", "llm" if arm == "fork" else "offline",
                           a.fork_url if arm == "fork" else "", a.model if arm == "fork" else "",
                           a.fork_settings if arm == "fork" else None)
        for sc in scs:
            msgs, commits = scenario_messages(sc)
            for n, cm in enumerate(commits):
                key = f"coding/{arm}/{sc['id']}/{n}"
                if key not in st.data["written"]:
                    # one file for the session, as a host keeps it: each commit reads it up to its own seq
                    tpath = st.root / f"coding-{sc['id']}.json"
                    tpath.write_text(json.dumps({"messages": msgs}, ensure_ascii=False), "utf-8")
                    r = commit(vault, tpath, f"{sc['id']}-s1", cm["seq"], cm["type"], cm["note"],
                               cm.get("importance", 6), "llm" if arm == "fork" else "offline", cm.get("block"))
                    st.data["written"][key] = r
                    st.save()
                    log(f"  [{arm}] {sc['id']} commit {n + 1} ({sc['lang']}): {r['status']}, "
                        f"{len(r['entries'])} entries, {r['seconds']} s {r['error'] or ''}")
                forks.append(dict(st.data["written"][key], arm=arm, scenario=sc["id"], lang=sc["lang"]))
        invented_rows += [dict(r, arm=arm) for r in check_vault(vault)]   # nothing invented
        vaults[arm] = vault
    hand = [{"title": m["title"], "body": m["body"], "type": m.get("type", "fact"),
             "importance": m.get("importance", 6), "citations": [(f"{sc['id']}-s1", 0)]}
            for sc in scs for m in sc["memory"]]
    vaults["hand-written"] = entries_vault(st.root / "coding-hand-written", hand, "hand-written memory")
    rows = []
    for sc in scs:
        for pi, p in enumerate(sc["session2"]):
            qid = f"{sc['id']}/{pi}"
            base = {"qid": qid, "scenario": sc["id"], "lang": sc["lang"]}
            rows.append({**base, "arm": "none", "carried": False, "recall_carried": False, "context": ""})
            for arm, vault in vaults.items():
                ctx, hits = context_for(vault, p["prompt"], a.k, session=f"bench-{arm}-{sc['id']}-s2")
                rec = "\n".join(f"{h.entry.title}\n{h.entry.body}" for h in hits)
                rows.append({**base, "arm": arm, "carried": all(w.lower() in ctx.lower() for w in p["expect"]),
                             "recall_carried": all(w.lower() in rec.lower() for w in p["expect"]), "context": ctx})
    for v in vaults.values():
        v.close()
    answers = []
    if a.answerer is not None:
        prompts = {f"{sc['id']}/{pi}": p for sc in scs for pi, p in enumerate(sc["session2"])}
        done = _answered_by_every_arm(rows, st, "coding/") if a.answered_only else None
        for r in asking_order([r for r in rows if answers_arm(a, r["arm"])]):
            key = f"coding/{r['arm']}/{r['qid']}"
            if done is not None and r["qid"] not in done:
                continue
            if key not in st.data["answers"]:
                st.data["answers"][key] = a.answerer.ask(r["context"], prompts[r["qid"]]["prompt"])
                st.save()
            got = st.data["answers"][key]
            expect = prompts[r["qid"]]["expect"]
            answers.append({"qid": r["qid"], "arm": r["arm"], "lang": r["lang"],
                            "followed": all(w.lower() in got["answer"].lower() for w in expect),
                            "prompt_tokens": got["prompt_tokens"], "seconds": got["seconds"]})
    return {"forks": forks, "rows": rows, "invented": invented_rows, "answers": answers,
            "scenarios": len(scs), "prompts": sum(len(sc["session2"]) for sc in scs)}


# ------------------------------------------------------------------------------------------------ tables

def share(xs) -> str:
    xs = list(xs)
    return f"{sum(xs) / len(xs):.3f}" if xs else "-"


def mean(xs) -> str:
    xs = [x for x in xs if x is not None]
    return f"{sum(xs) / len(xs):.1f}" if xs else "-"


def table(head: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


ARM_ORDER = ["none", "offline", "fork", "raw-turns", "observations", "full", "full (cut)", "hand-written"]


def arm_sorted(arms) -> list[str]:
    return sorted(set(arms), key=lambda x: ARM_ORDER.index(x) if x in ARM_ORDER else 99)


def report(res: dict, k: int) -> str:
    out = []
    lo = res.get("locomo")
    if lo:
        rows = lo["rows"]
        n = len({r["qid"] for r in rows})
        out.append(f"LoCoMo: {n} questions (categories 1-4)\n")
        cats = list(CATEGORIES.values())
        body = []
        for arm in arm_sorted(r["arm"] for r in rows):
            rs = [r for r in rows if r["arm"] == arm]
            body.append([arm, len(rs), share(r["evidence"] for r in rs), share(r["contained"] for r in rs),
                         mean(r["turns"] for r in rs if "turns" in r),
                         *[share(r["evidence"] for r in rs if r["category"] == c) for c in cats]])
        out.append(table(["arm", "questions", f"evidence@{k}", "answer in context", "turns cited in context",
                          *[f"evidence {c}" for c in cats]], body))
        if lo.get("answers"):
            ans = lo["answers"]
            out.append(f"\nanswered by the model, {len({x['qid'] for x in ans})} sampled questions\n")
            body = []
            for arm in arm_sorted(x["arm"] for x in ans):
                xs = [x for x in ans if x["arm"] == arm]
                body.append([arm, len(xs), f"{sum(x['f1'] for x in xs) / len(xs):.3f}",
                             share(x["contained"] for x in xs), mean(x["prompt_tokens"] for x in xs),
                             mean(x["seconds"] for x in xs),
                             *[(f"{sum(x['f1'] for x in xs if x['category'] == c) / max(1, sum(x['category'] == c for x in xs)):.3f}"
                                if any(x["category"] == c for x in xs) else "-") for c in cats]])
            out.append(table(["arm", "answers", "F1", "answer contained", "prompt tokens", "s/answer",
                              *[f"F1 {c}" for c in cats]], body))
        out.append("\n" + writes_line("LoCoMo", lo))
    co = res.get("coding")
    if co:
        rows = co["rows"]
        out.append(f"\nCoding scenarios: {co['scenarios']} scenarios, {co['prompts']} session-two prompts\n")
        body = []
        for arm in arm_sorted(r["arm"] for r in rows):
            rs = [r for r in rows if r["arm"] == arm]
            body.append([arm, len(rs), share(r["carried"] for r in rs), share(r["recall_carried"] for r in rs),
                         share(r["carried"] for r in rs if r["lang"] == "en"),
                         share(r["carried"] for r in rs if r["lang"] == "zh")])
        out.append(table(["arm", "prompts", "carried (index + recall)", f"carried by recall@{k} alone",
                          "carried, English", "carried, Chinese"], body))
        if co.get("answers"):
            body = []
            for arm in arm_sorted(x["arm"] for x in co["answers"]):
                xs = [x for x in co["answers"] if x["arm"] == arm]
                body.append([arm, len(xs), share(x["followed"] for x in xs), mean(x["prompt_tokens"] for x in xs),
                             mean(x["seconds"] for x in xs)])
            out.append("\n" + table(["arm", "answers", "answer follows the memory", "prompt tokens", "s/answer"],
                                    body))
        out.append("\n" + writes_line("coding", co))
    return "\n".join(out)


def writes_line(name: str, part: dict) -> str:
    lines = []
    for arm in arm_sorted(f["arm"] for f in part["forks"]):
        fs = [f for f in part["forks"] if f["arm"] == arm]
        ok = [f for f in fs if f["status"] in ("written", "proposed")]
        inv = [x for x in part["invented"] if x["arm"] == arm and x.get("checked", True)]
        clean = sum(not x["missing"] for x in inv)
        by_lang = ""
        if any("lang" in f for f in fs):
            by_lang = "; " + ", ".join(
                f"{lang}: {sum(f['status'] in ('written', 'proposed') for f in fs if f.get('lang') == lang)}/"
                f"{sum(f.get('lang') == lang for f in fs)}" for lang in ("en", "zh"))
        fell = sum(bool(f.get("fallback")) for f in fs)
        by_lang += f"; {fell} of them the block's summary after an unusable answer" if fell else ""
        lines.append(f"{name} writes, {arm}: {len(ok)}/{len(fs)} commits wrote entries{by_lang}; "
                     f"{sum(len(f['entries']) for f in fs)} entries; median {median([f['seconds'] for f in fs])} s; "
                     f"nothing invented: {clean}/{len(inv)} entries"
                     + (f" ({clean / len(inv):.3f})" if inv else ""))
    return "\n".join(lines)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else "-"


# ------------------------------------------------------------------------------------------------ main

class _Parser(argparse.ArgumentParser):
    """An argument that does not parse is one line, like the rest of the bench's bad input, with argparse's exit
    status (2) and a pointer to the usage rather than the whole of it."""

    def error(self, message: str):
        print(f"Error: {message} — usage: python bench/efficacy.py --help", file=sys.stderr)
        raise SystemExit(2)


def parse(argv: list[str] | None):
    p = _Parser(description=__doc__.splitlines()[0])
    p.add_argument("--locomo", type=Path, help="LoCoMo's locomo10.json (leave out to run only the coding scenarios)")
    p.add_argument("--conversations", type=int, default=2)
    p.add_argument("--skip-conversations", type=int, default=0,
                   help="leave out the first N of the --conversations (to run one conversation beside another run; "
                        "its vaults are named by their place in the file, so two state folders can be put together)")
    p.add_argument("--sessions", type=int, default=0, help="the first N sessions of each conversation (0: all)")
    p.add_argument("--k", type=int, default=5, help="entries recalled per question (default 5)")
    p.add_argument("--window", type=int, default=14000, help="full context only under this many tokens (chars/4)")
    p.add_argument("--base-url", default="", help="the fork's OpenAI-compatible endpoint (adds the fork arm)")
    p.add_argument("--model", default="", help="the fork's model (default: the one the endpoint serves)")
    p.add_argument("--temperature", type=float, default=0.0, help="[extraction] temperature of the fork vaults")
    p.add_argument("--window-turns", type=int, default=0,
                   help="[extraction] window_turns of the fork vaults (0: the whole session in one call)")
    p.add_argument("--fork-max-tokens", type=int, default=1024, help="[extraction] max_tokens of the fork vaults")
    p.add_argument("--no-evidence", action="store_true", help="[extraction] evidence = false in the fork vaults")
    p.add_argument("--fork-answer", choices=("tools", "json"), default="tools",
                   help="[extraction] answer of the fork vaults: memory_write calls, or one JSON object held to a "
                        "schema over the quoted turns")
    p.add_argument("--second-look", action="store_true",
                   help="[extraction] second_look = true in the fork vaults (with --fork-answer json): a window's "
                        "turns no fact rests on asked again")
    p.add_argument("--answer-base-url", default="", help="the answering model's endpoint (default --base-url)")
    p.add_argument("--answer-model", default="", help="answer sampled questions with this model")
    p.add_argument("--answer-arms", type=lambda v: [x.strip() for x in v.split(",") if x.strip()], default=[],
                   help="answer from these arms only, comma-separated (default: every arm)")
    p.add_argument("--sample", type=int, default=60, help="LoCoMo questions answered per arm (fixed seed)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--answered-only", action="store_true",
                   help="ask the model nothing more: report the questions the state folder has every arm's answer to "
                        "(a run stopped before its answers were done)")
    p.add_argument("--scenarios", type=Path, default=HERE / "efficacy_scenarios")
    p.add_argument("--no-scenarios", action="store_true", help="skip the coding scenarios")
    p.add_argument("--state", type=Path, default=Path("efficacy-state"), help="resumable state folder")
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    p.add_argument("--record", type=Path, help="keep every raw request/answer of the fork as JSON files here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    log = lambda m: print(m, flush=True)   # noqa: E731
    try:
        if a.locomo is None and a.no_scenarios:
            raise BenchError("nothing to run — pass --locomo PATH, or leave out --no-scenarios")
        if a.k < 1 or a.conversations < 1 or a.sessions < 0 or a.sample < 0 \
                or not 0 <= a.skip_conversations < a.conversations:
            raise BenchError("--k and --conversations must be at least 1, --sessions and --sample at least 0, "
                             "--skip-conversations under --conversations — fix the numbers")
        unknown = [x for x in a.answer_arms if x not in ARMS]
        if unknown:
            raise BenchError(f"no arm {unknown[0]!r} — --answer-arms takes some of {', '.join(ARMS)}")
        if a.locomo is not None:
            load_locomo(a.locomo)   # bad input is said before anything is written
        if not a.no_scenarios:
            load_scenarios(a.scenarios)
        if a.base_url:
            a.model = a.model or check_endpoint(a.base_url, "--base-url")
        if a.window_turns < 0 or a.fork_max_tokens < 0:
            raise BenchError("--window-turns and --fork-max-tokens must be 0 or more — fix the numbers")
        a.fork_settings = {"temperature": a.temperature, "max_attempts": 1, "window_turns": a.window_turns,
                           "max_tokens": a.fork_max_tokens, "evidence": not a.no_evidence, "answer": a.fork_answer}
        if a.second_look:   # only when on, so a state folder of a run before it keeps its settings key
            if a.fork_answer != "json":
                raise BenchError("--second-look reads the quoted turns of --fork-answer json — add it")
            a.fork_settings["second_look"] = True
        if a.record is not None and a.record.exists() and not a.record.is_dir():
            raise BenchError(f"--record {a.record} is a file — pass a folder (created if missing)")
        proxy = None
        if a.base_url and a.record:   # every raw answer of the fork kept, as bench/real_model.py does
            try:   # said now, not by the proxy's thread at the first answer
                a.record.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BenchError(f"--record {a.record}: {exc.strerror or exc} — pass a folder you can write") from None
            from real_model import Proxy

            proxy = Proxy(a.base_url, a.record)
            a.fork_url = proxy.base_url
        else:
            a.fork_url = a.base_url
        a.answerer = None
        if a.answer_model or a.answer_base_url:
            url = a.answer_base_url or a.base_url
            if not url:
                raise BenchError("--answer-model needs an endpoint — pass --answer-base-url or --base-url")
            served = check_endpoint(url, "--answer-base-url")
            a.answerer = Answerer(url, a.answer_model or served)
        key = {"locomo": str(a.locomo) if a.locomo else None, "conversations": a.conversations,
               "sessions": a.sessions, "k": a.k, "base_url": a.base_url, "model": a.model,
               "answer_model": a.answerer.model if a.answerer else None, "seed": a.seed, "entries_dated": "session",
               **({"fork": {k: v for k, v in a.fork_settings.items() if k != "max_attempts"}} if a.base_url else {})}
        st = State(a.state, key)
        res: dict = {"settings": key}
        if a.locomo is not None:
            log(f"LoCoMo {a.locomo}: {a.conversations} conversation(s), "
                f"{'all' if not a.sessions else a.sessions} sessions each")
            res["locomo"] = run_locomo(a, st, log)
        if not a.no_scenarios:
            log(f"coding scenarios {a.scenarios}")
            res["coding"] = run_scenarios(a, st, log)
    except BenchError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("Error: interrupted — run the same command again to continue from the state folder", file=sys.stderr)
        return 1
    except Exception as exc:   # never a traceback: one line, and the state folder keeps what was done
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(f"Error: {type(exc).__name__}: {first[:300]} — run the same command again to continue; the state "
              f"folder keeps what was done", file=sys.stderr)
        return 1
    print()
    print(report(res, a.k))
    if a.out:
        for part in ("locomo", "coding"):
            for r in (res.get(part) or {}).get("rows", ()):
                r.pop("context", None)
        a.out.write_text(json.dumps(res, ensure_ascii=False, indent=1), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
