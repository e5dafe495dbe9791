"""Duplicates and contradictions by meaning, through every channel a vault has configured (``docs/duplicates.md``).

``[consolidate] similarity`` chooses the mode; ``auto`` is the best configured:

* ``lexical`` — the words (``acpmem.search.similar``), always there;
* ``embedding`` — that, and pairs of entries whose vectors (the ``[embeddings]`` channel, made by its background
  pass, which ``find`` runs first for entries that have none) are close: cosine ≥ ``embedding_threshold``;
* ``model`` — the candidate pairs of both, looser (lexical similarity ≥ ``CANDIDATE_FLOOR``, cosine ≥ the
  threshold less ``EMBED_CANDIDATE_MARGIN``), judged by the ``[extraction]`` model: ``model_pairs`` pairs per
  call, at most ``max_candidates`` per run, each call within the extraction budgets and on the cost ledger. The
  model's verdict (duplicate, contradiction, different) decides a pair it answered; a pair it did not answer (over
  budget, a failed call, an answer without it) keeps the words' and vectors' verdict.

``find`` is what ``consolidate`` clusters; ``check_write`` is the fork's check of one new write against the entries
it was shown (the words and the vectors; the fork's own model already saw those entries and could supersede them).
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

from acpmem.core.clock import utc_iso
from acpmem.core.entry import Entry
from acpmem.core.errors import ExtractionError, SettingsError, UsageError
from acpmem.core.framing import frame
from acpmem.core.settings import SIMILARITY_MODES
from acpmem.core.tools import judge_tool
from acpmem.core.values import Value
from acpmem.infra import embedclient, files, locks
from acpmem.read import embedding
from acpmem.read.embedding import endpoint
from acpmem.read.retrieval import with_index
from acpmem.search import similar, vectors
from acpmem.search.similar import Cluster, Pair
from acpmem.write import budget, costs, llm
from acpmem.write.answers import json_values
from acpmem.write.llm import resolve_model_config, with_served_model
from acpmem.write.prompts import judge_instruction

CANDIDATE_FLOOR = 0.2           # lexical similarity from which a pair is sent to the model
EMBED_CANDIDATE_MARGIN = 0.12   # a pair this much under embedding_threshold is still sent to the model
PAIR_TEXT_CHARS = 400           # of each entry's text in a judging call
JUDGE_REQUEST = "consolidate-judge"   # the cost ledger's request of a judging call


class Found(Value):
    """What ``find`` found: the mode used, the clusters, the pairs (entry ids, kind, similarity, channel) and notes
    (what a channel could not do); ``calls``: model calls made, ``judged``: pairs the model answered."""

    mode: str
    clusters: tuple[Cluster, ...]
    pairs: tuple[tuple[str, str, str, float, str], ...] = ()
    notes: tuple[str, ...] = ()
    calls: int = 0
    judged: int = 0


def _model_config(vault, env):
    return with_served_model(resolve_model_config(vault.settings.extraction, env), vault.state_dir)


def resolve_mode(vault, env: Mapping[str, str] | None = None, override: str | None = None, *, config=None) -> str:
    """The mode to use: ``override`` > ``[consolidate] similarity``; ``auto`` → model when a model endpoint is
    configured, else embedding when an embeddings model is, else lexical. A mode asked for by name whose channel
    is not configured is a ``SettingsError`` (exit 1: it depends on the vault, not the command line)."""
    want = override or vault.settings.consolidate.similarity
    if want not in SIMILARITY_MODES:
        raise UsageError(f"unknown similarity mode '{want}'", "use auto, lexical, embedding or model")
    embed_ok = endpoint(vault.settings, env) is not None
    if want in ("auto", "model"):
        cfg = config if config is not None else _model_config(vault, env)
        if cfg.configured:
            return "model"
        if want == "model":
            raise SettingsError("similarity = model, but no model endpoint is configured",
                             "set [extraction] base_url and model in your own config (~/.config/acpmem/config.toml), "
                             "or OPENAI_BASE_URL / OPENAI_MODEL, or use similarity = auto")
    if want in ("auto", "embedding"):
        if embed_ok:
            return "embedding"
        if want == "embedding":
            raise SettingsError("similarity = embedding, but no embeddings model is configured",
                             "set [embeddings] model (and base_url), or use similarity = auto")
    return "lexical"


def find(vault, types=None, *, mode: str | None = None, env: Mapping[str, str] | None = None) -> Found:
    """The clusters of the vault's live entries by ``mode`` (``resolve_mode``)."""
    config = _model_config(vault, env)
    mode = resolve_mode(vault, env, mode, config=config)
    cfg = vault.settings.consolidate
    notes: list[str] = []
    ep = None
    if mode in ("embedding", "model"):
        ep = endpoint(vault.settings, env)
        if ep is not None:
            notes += _embed_missing(vault, env)
    floor = CANDIDATE_FLOOR if mode == "model" else None
    vec_floor = cfg.embedding_threshold - (EMBED_CANDIDATE_MARGIN if mode == "model" else 0.0)

    def work(con):
        c = similar.corpus(con, types)
        pairs = similar.lexical_pairs(c, floor=floor)
        if ep is not None:
            pairs += _vector_pairs(con, vault, ep, c, cfg.embedding_threshold, vec_floor, types, notes)
        return c, pairs

    c, pairs = with_index(vault, work)
    merged = _merge(pairs)
    calls = judged = 0
    if mode == "model" and merged:
        merged, calls, judged = _judged(vault, config, c, merged, notes)
    final = [p for p in merged if p.kind in ("duplicate", "contradiction")]
    out = tuple((c.meta[p.a][0], c.meta[p.b][0], p.kind, round(p.similarity, 3), p.channel) for p in final)
    return Found(mode, tuple(similar.join(final, c.meta)), out, tuple(notes), calls, judged)


def _merge(pairs: list[Pair]) -> list[Pair]:
    """One pair per two entries: a contradiction from any channel, else a duplicate, else the best candidate."""
    rank = {"contradiction": 2, "duplicate": 1, "candidate": 0}
    best: dict[tuple[int, int], Pair] = {}
    for p in pairs:
        k = (p.a, p.b) if p.a < p.b else (p.b, p.a)
        q = best.get(k)
        if q is None or (rank[p.kind], p.similarity) > (rank[q.kind], q.similarity):
            best[k] = p.with_changes(a=k[0], b=k[1])
    return sorted(best.values(), key=lambda p: (p.kind == "candidate", -p.similarity, p.a, p.b))


def _embed_missing(vault, env) -> list[str]:
    """Run the embedding pass for entries without a vector (unless the background one is running): a note when
    some stay without one."""
    path = embedding.lock_path(vault.state_dir)
    files.ensure_dir(path.parent)
    fd = locks.try_lock(path)
    if fd is None:
        return ["the background embedding pass is running: entries it has not embedded yet are compared by words"]

    try:
        got = embedding.run_pass(vault, env)
    finally:
        os.close(fd)
    if got.get("error"):
        return [f"{got['missing']} entries have no vector ({got['error']}): they are compared by words"]
    return []


def _vector_pairs(con, vault, ep, c, threshold: float, floor: float, types, notes: list[str]) -> list[Pair]:
    vcon = vectors.connect(vault.state_dir)
    try:
        row = vcon.execute("SELECT dim FROM vec WHERE model = ? GROUP BY dim ORDER BY count(*) DESC LIMIT 1",
                           (ep.vector_key,)).fetchone()
    finally:
        vcon.close()
    if row is None:
        return []
    m = vectors.load_matrix(con, vault.state_dir, ep.vector_key, int(row[0]), types=types)
    if m.total > m.n:
        notes.append(f"{m.total - m.n} entries have no current vector: they are compared by words")
    np = m.np
    keys = [int(k) for k in m.keys]
    wanted = set(c.meta)
    out = []
    block = 1024
    for start in range(0, m.n, block):
        sims = m.mat[start:start + block] @ m.mat.T
        rows, cols = np.nonzero(sims >= floor)
        for i, j in zip(rows.tolist(), cols.tolist()):
            a, b = keys[start + i], keys[j]
            if a >= b or a not in wanted or b not in wanted:
                continue
            cos = float(sims[i, j])
            if cos < threshold:
                out.append(Pair(a, b, cos, "candidate", f"cosine {cos:.2f}", "embedding"))
                continue
            why = similar.differs_features(c.full(a), c.full(b))
            out.append(Pair(a, b, cos, "contradiction" if why else "duplicate",
                            why or f"close in meaning (cosine {cos:.2f})", "embedding"))
    return out


# --------------------------------------------------------------------------------------------- the model

def pair_text(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PAIR_TEXT_CHARS else text[:PAIR_TEXT_CHARS].rstrip() + " …"


def _judged(vault, config, c, pairs: list[Pair], notes: list[str]) -> tuple[list[Pair], int, int]:
    cap = vault.settings.consolidate.max_candidates
    sent = pairs[:cap]
    if len(pairs) > cap:
        notes.append(f"{len(pairs) - cap} candidate pair(s) over [consolidate] max_candidates = {cap} were not "
                     "sent to the model")
    verdicts, calls, more = judge_pairs(vault, config, [(c.text[p.a], c.text[p.b]) for p in sent])
    notes += more
    out = []
    judged = 0
    for p, v in zip(sent, verdicts):
        if v is None:
            out.append(p)
            continue
        judged += 1
        if v != "different":
            out.append(p.with_changes(kind=v, why=f"the model judged them a {v}", channel="model"))
    return out + pairs[cap:], calls, judged


def judge_pairs(vault, config, items: list[tuple[str, str]]) -> tuple[list[str | None], int, list[str]]:
    """The model's verdict for each (text, text) pair (None: not answered), in calls of ``[consolidate]
    model_pairs`` pairs, each within the extraction budgets and recorded on the cost ledger; the calls made and
    notes on what was not judged."""
    verdicts: list[str | None] = [None] * len(items)
    notes: list[str] = []
    calls = 0
    size = vault.settings.consolidate.model_pairs
    lang = vault.settings.language
    for start in range(0, len(items), size):
        st = budget.current(vault.state_dir, vault.clock(), vault.settings.extraction)
        if st is not None and st.over:
            notes.append(f"{len(items) - start} pair(s) not judged by the model: {st.reason}; run it again after "
                         f"{st.frees_at}")
            break
        chunk = items[start:start + size]
        text = "\n\n".join(f"Pair {n}:\n" + frame("entry", pair_text(a), attrs={"pair": str(n), "side": "a"})
                           + "\n" + frame("entry", pair_text(b), attrs={"pair": str(n), "side": "b"})
                           for n, (a, b) in enumerate(chunk, 1))
        body = {"model": config.model} if config.model else {}
        body.update(messages=[{"role": "user", "content": judge_instruction(text, len(chunk), lang)}],
                    tools=[judge_tool()], tool_choice="auto")
        if vault.settings.extraction.max_tokens:
            body["max_tokens"] = vault.settings.extraction.max_tokens
        at = utc_iso(vault.clock())
        try:
            result = llm.call_chat(config, body)
        except ExtractionError as exc:
            costs.append(vault.state_dir, costs.record(None, at=at, request=JUDGE_REQUEST, error=exc,
                                                       model=config.model))
            notes.append(f"{len(items) - start} pair(s) not judged by the model: {exc.message}")
            break
        calls += 1
        got = read_verdicts(result.tool_calls, result.text, len(chunk))
        costs.append(vault.state_dir, costs.record(result, at=at, request=JUDGE_REQUEST, entries=0))
        if len(got) < len(chunk):
            notes.append(f"the model answered {len(got)} of {len(chunk)} pair(s) of a call; the rest keep the "
                         "words' verdict")
        for n, v in got.items():
            verdicts[start + n - 1] = v
    return verdicts, calls, notes


_VERDICT_WORDS = {"duplicate": "duplicate", "duplicates": "duplicate", "dup": "duplicate", "same": "duplicate",
                  "paraphrase": "duplicate", "contradiction": "contradiction", "contradicts": "contradiction",
                  "contradictory": "contradiction", "conflict": "contradiction", "contradict": "contradiction",
                  "different": "different", "distinct": "different", "unrelated": "different",
                  "none": "different", "neither": "different"}
_LINE = re.compile(r"(?:pair\s*)?#?(\d{1,4})\s*[:.)\]=–-]+\s*[*_`\"']*\s*([a-z]+)", re.I)


def _verdict(value: object) -> str | None:
    return _VERDICT_WORDS.get(str(value).strip().strip("*_`\"'.").lower()) if value is not None else None


def _from_value(value: object, n: int, out: dict[int, str]) -> None:
    """Verdicts out of one JSON value: {"verdicts": [...]}, a list of {"pair", "verdict"}, or {"1": "duplicate"}."""
    if isinstance(value, dict) and isinstance(value.get("verdicts"), (list, dict)):
        value = value["verdicts"]
    items = value.items() if isinstance(value, dict) else enumerate(value, 1) if isinstance(value, list) else ()
    for k, v in items:
        if isinstance(v, dict):
            k = v.get("pair", v.get("id", v.get("index", k)))
            v = v.get("verdict", v.get("label", v.get("answer")))
        try:
            i = int(k)
        except (TypeError, ValueError):
            continue
        got = _verdict(v)
        if 1 <= i <= n and got and i not in out:
            out[i] = got


def read_verdicts(tool_calls, text: str | None, n: int) -> dict[int, str]:
    """Pair number (1..n) → verdict from an answer: the tool's arguments, JSON in the text (fenced, tagged or
    bare), or lines such as ``1: duplicate`` / ``Pair 2 - contradiction``. What is not read is left out."""
    out: dict[int, str] = {}
    for call in tool_calls or ():
        if call.arguments is not None:
            _from_value(call.arguments, n, out)
    if not out and text:
        for value in json_values(text):
            if isinstance(value, dict) and isinstance(value.get("arguments"), (dict, list)):
                value = value["arguments"]
            _from_value(value, n, out)
        if not out:
            for m in _LINE.finditer(text):
                got = _verdict(m.group(2))
                i = int(m.group(1))
                if got and 1 <= i <= n and i not in out:
                    out[i] = got
    return out


# --------------------------------------------------------------------------------------------- the fork's check

class Match(Value):
    """A shown entry a new write duplicates or contradicts: the kind, the entry, the similarity and why."""

    kind: str
    entry: Entry
    similarity: float
    why: str


def check_write(vault, text: str, shown: list[Entry], env: Mapping[str, str] | None = None,
                notes: list[str] | None = None, idf=None) -> Match | None:
    """The entry among ``shown`` the new ``text`` contradicts (first) or duplicates (the closest), by the words
    and — when an embeddings model is configured and the mode is not ``lexical`` — by the vectors (one call for
    the new text and the shown entries). None when it is new. ``idf``: the term weights (``index_idf``) when the
    caller checks many texts against one index (an import), read once instead of once per text."""
    if not shown:
        return None
    fa = similar.features(text)
    feats = [similar.features(f"{e.title}\n{e.body}") for e in shown]
    if idf is None:
        idf = index_idf(vault, set(fa.terms).union(*(f.terms for f in feats)),
                        {e.id: f.terms for e, f in zip(shown, feats)})
    found: list[Match] = []
    for e, fb in zip(shown, feats):
        got = similar.judge(fa, fb, idf)
        if got is not None:
            found.append(Match(got[0], e, got[1], got[2]))
    if vault.settings.consolidate.similarity != "lexical":
        found += _vector_matches(vault, text, fa, shown, env, notes)
    if not found:
        return None
    return max(found, key=lambda m: (m.kind == "contradiction", m.similarity))


def index_idf(vault, terms: set[str], shown: Mapping[str, frozenset[str]] | None = None) -> similar.TermWeights:
    """The weights of ``terms`` over the vault's live entries (their number and each term's document frequency, read
    for these terms only) — about the weights ``consolidate`` gives them — for a check that compares one text with a
    few. ``shown``: the terms of the entries compared, by id; those the index does not hold yet (the fork's earlier
    windows) are counted too."""
    shown = shown or {}
    def read(con):
        n = con.execute("SELECT count(*) FROM idx_docs WHERE sup = 0").fetchone()[0]
        df = dict(con.execute("SELECT term, df FROM idx_terms WHERE term IN (SELECT value FROM json_each(?))",
                              (json.dumps(sorted(terms)),)))
        held = {r[0] for r in con.execute("SELECT entry_id FROM idx_docs WHERE entry_id IN "
                                          "(SELECT value FROM json_each(?))", (json.dumps(list(shown)),))}
        return n, df, held

    try:
        n, df, held = vault.with_db(read)
    except Exception:   # noqa: BLE001 - an index that cannot be read: the shown entries alone
        n, df, held = 0, {}, set()
    for ident, its_terms in shown.items():
        if ident not in held:
            n += 1
            for t in its_terms & terms:
                df[t] = df.get(t, 0) + 1
    return similar.TermWeights(n, df)


def _vector_matches(vault, text: str, fa, shown: list[Entry], env, notes) -> list[Match]:
    ep = endpoint(vault.settings, env)
    if ep is None:
        return []
    texts = [text] + [f"{e.title}\n\n{e.body}" for e in shown]
    try:
        got = embedclient.embed(ep, [ep.document_prefix + t for t in texts],
                                vault.settings.embeddings.batch_timeout_seconds)
    except embedclient.EmbeddingFailed as exc:
        if notes is not None:
            notes.append(f"the duplicate check used words alone: {exc}")
        return []

    def unit(v):
        norm = sum(x * x for x in v) ** 0.5 or 1.0
        return [x / norm for x in v]

    q, *rest = (unit(v) for v in got.vectors)
    threshold = vault.settings.consolidate.embedding_threshold
    out = []
    for e, v in zip(shown, rest):
        cos = sum(x * y for x, y in zip(q, v))
        if cos >= threshold:
            why = similar.differs_features(fa, similar.features(f"{e.title}\n{e.body}"))
            out.append(Match("contradiction" if why else "duplicate", e, cos,
                             why or f"close in meaning (cosine {cos:.2f})"))
    return out
