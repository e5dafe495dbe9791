"""The embedding channel of a vault: the query's vector at recall time, and the background pass that embeds entries.

Off unless ``[embeddings] model`` is set (``acpmem.infra.embedclient.resolve``). A recall never waits for entry
vectors: it uses those present and reports how many are missing; when some are, it starts the background pass (one
detached process per vault, under ``.acpmem/locks/embed.flock``), as the extraction worker does after its writes.
The pass brings the vectors in step with the catalog — new and edited entries (hand edits included), a changed
model — in batches of ``[embeddings] batch_size``, records each call in the cost ledger (``kind: "embeddings"``) and
prunes what no entry needs. A failing endpoint stops the pass; the next recall or write starts another.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path

from acpmem.core.clock import utc_iso
from acpmem.core.errors import AcpmemError, SettingsError
from acpmem.core.layout import LOCKS_DIR
from acpmem.core.values import Value
from acpmem.infra import embedclient, files, locks, progress
from acpmem.infra.detach import reap, spawn
from acpmem.infra.files import append_record
from acpmem.search import vectors, watch
from acpmem.search.analysis import has_cjk
from acpmem.vault.reader import VaultReader

EMBED_LOCK = "embed.flock"
EMBED_LOG = "embed.log"
COSTS_FILE = "costs.jsonl"      # the vault's cost ledger (``acpmem.write.costs``)
MAX_LOG_BYTES = 1_000_000


class QueryVector(Value):
    """The query's side of the channel for one recall: its vector (None: lexical alone) and why not."""

    endpoint: embedclient.Endpoint
    vector: tuple[float, ...] | None
    share: float
    warning: str | None = None
    skipped: str | None = None     # the query is not for this model (its language): lexical alone, no warning


def endpoint(settings, env: Mapping[str, str] | None = None) -> embedclient.Endpoint | None:
    return embedclient.resolve(dict(settings.embeddings), env)


def query_vector(settings, query: str, env: Mapping[str, str] | None = None) -> QueryVector | None:
    """None when the channel is off; else the query's vector within ``[embeddings] timeout_seconds``, or the reason
    recall goes on with lexical search alone."""
    ep = endpoint(settings, env)
    if ep is None:
        return None
    cfg = settings.embeddings
    languages = {x.strip() for x in cfg.languages.split(",")}
    if has_cjk(query) and "zh" not in languages:
        return QueryVector(ep, None, 0.0, skipped="the query is Chinese and the model is set for "
                           + ", ".join(sorted(languages)))
    try:
        got = embedclient.embed(ep, [ep.query_prefix + query], cfg.timeout_seconds)
    except embedclient.EmbeddingFailed as exc:
        return QueryVector(ep, None, 0.0, warning=f"{exc}; recall used lexical search alone")
    return QueryVector(ep, got.vectors[0], cfg.weight)


def lock_path(state_dir: Path) -> Path:
    return Path(state_dir) / LOCKS_DIR / EMBED_LOCK


def start_background(root: Path, state_dir: Path, dim: int = 0) -> bool:
    """Start the detached embedding pass unless one runs. True when this call started it. ``dim``: the length of
    the endpoint's vectors now, when a recall found entry vectors of another length (see ``run_pass``)."""
    reap()
    files.ensure_dir(Path(state_dir, LOCKS_DIR))
    fd = locks.try_lock(lock_path(state_dir))
    if fd is None:
        return False
    spawn(fd, f"from acpmem.read.embedding import embed_main; embed_main({str(root)!r}, {{fd}}, {int(dim)})",
          Path(state_dir) / EMBED_LOG, MAX_LOG_BYTES)
    return True


def embed_main(root: str, lock_fd: int, dim: int = 0) -> None:
    """The detached pass (``start_background``): embed what is missing, then exit."""
    with contextlib.suppress(OSError):
        os.chdir(root)
    vault = VaultReader(Path(root))
    try:
        result = run_pass(vault, log=_log, dim=dim)
        _log(f"embedded {result['embedded']} text(s), {result['missing']} still missing"
             + (f": {result['error']}" if result.get("error") else ""))
    finally:
        os.close(lock_fd)
        vault.close()


def embed_now(vault, env: Mapping[str, str] | None = None) -> dict:
    """``acp memory embed``: the pass, run by hand in this process under the embed lock (``run_pass``'s counts).
    Refused while the channel is off or another pass (the background one) runs."""
    if not vault.settings.embeddings.model:   # the vault's settings, not the command line: exit 1
        raise SettingsError("the embedding channel is off: there is nothing to embed",
                         "set [embeddings] model (and base_url) in acpmem.toml")
    vault.ensure_state()
    fd = locks.try_lock(lock_path(vault.state_dir))
    if fd is None:
        raise AcpmemError("an embedding pass is already running for this vault",
                          f"wait for it (its log: {Path(vault.state_dir) / EMBED_LOG}), then run this again")
    try:
        return run_pass(vault, env)
    finally:
        os.close(fd)


def _log(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} [{os.getpid()}] {msg}\n")
    sys.stderr.flush()


def run_pass(vault, env: Mapping[str, str] | None = None, log: Callable[[str], None] = lambda m: None,
             dim: int = 0) -> dict:
    """Embed every current entry text that has no vector of the configured model, in batches; prune the rest.
    The caller holds the embed lock (or knows nobody else embeds). Returns counts and the error that stopped it.

    Vectors of another length than the endpoint's answers now (``dim`` when a recall saw it, else the first
    batch's) are dropped and their texts embedded again: the endpoint serves another model under the same name
    (an Ollama tag pointed elsewhere), and no query could be compared with them. Once per pass: an endpoint whose
    length changes again within one pass stops it with an error."""
    ep = endpoint(vault.settings, env)
    if ep is None:
        return {"embedded": 0, "missing": 0, "pruned": 0, "error": None}
    cfg = vault.settings.embeddings
    key = ep.vector_key
    vcon = vectors.connect(vault.state_dir)
    shown = progress.task("embedding", 0)
    try:
        def todo(con):
            watch.fresh(con, vault.root, vault.state_dir, vault.settings)
            vectors.sync(con, vcon)
            return vectors.missing_texts(con, vcon, key)

        dropped = vectors.drop_other_dims(vcon, key, dim) if dim else 0
        texts = vault.with_db(todo)
        done, error, i = 0, None, 0
        size = cfg.batch_size
        shown = progress.task("embedding", len(texts), unit="texts")   # a pass run by hand, on a terminal
        while i < len(texts):
            shown.update(i)
            batch = texts[i:i + size]
            try:
                got = embedclient.embed(ep, [ep.document_prefix + t for _, t in batch], cfg.batch_timeout_seconds)
            except embedclient.EmbeddingFailed as exc:
                _ledger(vault.state_dir, ep.model, len(batch), None, str(exc))
                if getattr(exc, "timed_out", False) and len(batch) > 1:
                    size = max(1, len(batch) // 2)   # a slow endpoint still makes progress, a smaller batch at a time
                    log(f"a batch of {len(batch)} timed out; trying batches of {size}")
                    continue
                error = str(exc)
                break
            _ledger(vault.state_dir, ep.model, len(batch), got, None)
            length = len(got.vectors[0]) if got.vectors else 0
            gone = vectors.drop_other_dims(vcon, key, length)
            if gone and dropped:
                error = (f"the embeddings endpoint answers vectors of changing length ({length} now) for "
                         f"{ep.model}; check what it serves under that name")
                break
            vectors.store(vcon, key, [(h, v) for (h, _), v in zip(batch, got.vectors)])
            done += len(batch)
            if gone:        # the texts of the dropped vectors are missing now: start over (once)
                dropped = gone
                log(f"dropped {gone} vector(s) of another length than the endpoint's {length}")
                texts, i = vault.with_db(todo), 0
                continue
            i += len(batch)
            log(f"embedded {done} of {len(texts)}")
        shown.close()
        missing = len(vault.with_db(todo)) if error else 0
        pruned = vectors.prune(vcon, key) if error is None else 0
        return {"embedded": done, "missing": missing, "pruned": pruned, "error": error}
    finally:
        shown.close()
        vcon.close()


def _ledger(state_dir: Path, model: str, texts: int, got: embedclient.Embedded | None, error: str | None) -> None:
    rec: dict = {"at": utc_iso_now(), "kind": "embeddings", "model": model, "ok": error is None, "texts": texts}
    if got is not None:
        rec.update(prompt_tokens=got.tokens, latency_s=round(got.latency_s, 3))
    if error is not None:
        rec["error"] = error
    with contextlib.suppress(OSError):
        append_record(Path(state_dir) / COSTS_FILE, rec)


def utc_iso_now() -> str:
    return utc_iso(datetime.now(timezone.utc))


def channel_status(vault, env: Mapping[str, str] | None = None, *, probe: bool = True) -> dict | None:
    """For ``doctor`` and ``stats``: the model, the endpoint, whether it answers (one short probe), and how many
    live entries have vectors — of the length the endpoint answers now, when the probe says it. None when the
    channel is off."""
    ep = endpoint(vault.settings, env)
    if ep is None:
        return None
    out: dict = {"model": ep.model, "base_url": ep.base_url}
    length = 0
    if probe:
        try:
            got = embedclient.embed(ep, [ep.query_prefix + "ping"], max(vault.settings.embeddings.timeout_seconds, 2.0))
            out["reachable"] = True
            length = len(got.vectors[0]) if got.vectors else 0
        except embedclient.EmbeddingFailed as exc:
            out["reachable"] = False
            out["error"] = str(exc)

    def count(con):     # an edited entry's vector is of its old text (another signature): it counts as missing
        watch.fresh(con, vault.root, vault.state_dir, vault.settings)
        return vectors.status(con, vault.state_dir, ep.vector_key, types=vault.settings.types, dim=length)

    out = {**out, **vault.with_db(count).to_json(), "model": ep.model}
    return out


__all__ = ["QueryVector", "query_vector", "start_background", "embed_main", "embed_now", "run_pass",
           "channel_status", "endpoint"]
