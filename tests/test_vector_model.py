"""The embedding channel as a state machine: a real vault (real git, real SQLite) and the real loopback embeddings
server, driven through writes, hand edits (same length and not), deletions, settings changes (model, prefixes,
``dimensions``), an endpoint that fails or starts serving vectors of another length under the same name, embedding
passes and recalls in any order. After every step the vectors are what the model says they should be.

The model keeps, for each live entry file, the text acpmem embeds (title and body), and which (key, text, length)
vectors the store holds. The background pass a recall would start is kept out by holding its lock, so every pass
is one this machine runs (the pass's contract: its caller holds the lock)."""
from __future__ import annotations

import os
import random
import time

import numpy as np
from hypothesis import HealthCheck, Phase, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from acpmem.core.entry import Citation, Entry
from acpmem.core.entryfile import parse_entry
from acpmem.infra import embedclient, locks
from acpmem.search import query as index_query, vectors, watch
from acpmem.read import embedding
from acpmem.vault.create import init_vault
from acpmem.vault.reader import VaultReader
from acpmem.read.retrieval import recall
from embeddings_server import embeddings_server, vector
from test_embedding import configure

WORDS = ("session persist deploy retry upload kafka lag pnpm lockfile nginx timeout backup migration sqlite "
         "jitter alert gateway cache token refresh").split()
PHRASE = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)
MODELS = ("hash-a", "hash-b")
PREFIXES = ("", "passage: ", "search_document: ")
SERVER = {}      # the one loopback server of a test run (set by the test)


class VectorChannel(RuleBasedStateMachine):
    base = None  # a tmp folder, set by the test

    @initialize(seed=st.integers(0, 2**16), first=st.lists(st.tuples(PHRASE, PHRASE), min_size=1, max_size=5))
    def make_vault(self, seed: int, first: list) -> None:
        self.srv = SERVER["srv"]
        self.srv.status, self.srv.dim, self.srv.dim_override = 200, 64, None
        root = self.base / f"v{os.getpid()}-{time.monotonic_ns()}"
        self.writer = init_vault(root, rng=random.Random(seed))
        self.root = root
        self.cfg = {"model": MODELS[0], "query_prefix": "", "document_prefix": "",
                    "dimensions": 0, "batch_size": 2, "timeout_seconds": 10.0}   # a loaded machine is no failure
        self.texts: dict[str, str] = {}          # entry path -> the text acpmem embeds
        self.synced: dict[str, int] = {}         # entry path -> the version of its file the last pass recorded (a
                                                 # vector counts for an entry only once a pass has seen that file:
                                                 # one edited away and back to the same text is a file it has not)
        self.version: dict[str, int] = {}        # entry path -> which write of the file is on disk
        self.writes = 0
        self.stored: set[tuple[str, str, int]] = set()   # (vector key, text, length) the store holds
        self.clean = False                       # a successful pass since the last change
        self.reader = self.configure()
        self.lock_fd = locks.try_lock(embedding.lock_path(self.reader.state_dir))
        assert self.lock_fd is not None
        for title, body in first:
            self.write(title, body)

    def teardown(self) -> None:
        if getattr(self, "lock_fd", None) is not None:
            os.close(self.lock_fd)
        for v in (getattr(self, "reader", None), getattr(self, "writer", None)):
            if v is not None:
                v.close()

    # ------------------------------------------------------------------------------------------ helpers
    def configure(self) -> VaultReader:
        """Write ``cfg`` as the vault's [embeddings] and read the settings anew."""
        if getattr(self, "reader", None) is not None:
            self.reader.close()
        self.reader = configure(self.writer, self.srv, **self.cfg)
        return self.reader

    @property
    def endpoint(self) -> embedclient.Endpoint:
        return embedding.endpoint(self.reader.settings)

    def length(self) -> int:
        """The length of what the server answers now."""
        return self.srv.dim_override or self.cfg["dimensions"] or self.srv.dim

    def text_of(self, path: str) -> str:
        e = parse_entry((self.root / path).read_text("utf-8"), path)
        return vectors.embed_text({"title": e.title, "body": e.body})

    @property
    def key(self) -> tuple:
        """What makes vectors of one kind, as the model sees it: the model name, the document prefix and the
        dimensions asked for (a change of any makes other vectors)."""
        return self.cfg["model"], self.cfg["document_prefix"], self.cfg["dimensions"]

    def present(self) -> int:
        key, n = self.key, self.length()
        return sum(self.synced.get(p) == self.version[p] and (key, t, n) in self.stored
                   for p, t in self.texts.items())

    def failing(self) -> bool:
        """The endpoint answers no usable vectors: an error, or a length other than the ``dimensions`` asked for."""
        dims = self.cfg["dimensions"]
        return self.srv.status != 200 or bool(dims and self.srv.dim_override and self.srv.dim_override != dims)

    def unembedded(self) -> set[str]:
        """Current texts with no vector of the key at all (of any length): what a pass sends."""
        key = self.key
        held = {t for k, t, _ in self.stored if k == key}
        return set(self.texts.values()) - held

    def after_pass(self, got: dict, hint: int = 0) -> None:
        """What a pass leaves: a failing endpoint changes nothing; else every current text at the endpoint's length
        when it embedded anything (a new length drops the others), and otherwise what was held, pruned."""
        key, n = self.key, self.length()
        self.synced = dict(self.version)    # every pass first records the files as they are, then embeds
        if hint:
            self.stored = {x for x in self.stored if x[0] != key or x[2] == hint}
        if self.failing():
            if self.unembedded():
                assert got["error"] and got["embedded"] == 0, got
            return
        assert got["error"] is None and got["missing"] == 0, got
        if self.unembedded():
            self.stored = {(key, t, n) for t in self.texts.values()}
        else:
            self.stored = {x for x in self.stored if x[0] == key and x[1] in set(self.texts.values())}
        self.clean = self.present() == len(self.texts)
        if self.clean:
            self.check_store()

    # -------------------------------------------------------------------------------------------- rules
    @rule(title=PHRASE, body=PHRASE)
    def write(self, title: str, body: str) -> None:
        ident = self.writer.new_id()
        e = Entry(id=ident, title=title, type="fact", importance=5, created="2026-11-01T10:00:00Z",
                  body=body + "\n", citation=(Citation("s1", len(self.texts) + 1),))
        e = e.with_changes(path=self.writer.path_for(ident, title))
        self.writer.write_entries([e], subject="model write", why="test")
        self.texts[e.path] = self.text_of(e.path)
        self.writes += 1
        self.version[e.path] = self.writes
        self.clean = False

    @precondition(lambda self: bool(self.texts))
    @rule(data=st.data(), same_length=st.booleans())
    def hand_edit(self, data, same_length: bool) -> None:
        path = data.draw(st.sampled_from(sorted(self.texts)))
        f = self.root / path
        old = f.read_text("utf-8")
        end = old.index("\n---\n", 3) + 5
        body = old[end:]
        if same_length:     # one word for another of the same length: the size does not change
            words = body.split()
            i = data.draw(st.integers(0, len(words) - 1))
            same = [w for w in WORDS if len(w) == len(words[i]) and w != words[i]]
            if not same:
                return
            words[i] = data.draw(st.sampled_from(same))
            new = " ".join(words) + "\n"
            new = new if len(new) == len(body) else body.replace(body.split()[i], words[i], 1)
        else:
            new = data.draw(PHRASE) + " edited by hand\n"
        f.write_text(old[:end] + new, "utf-8")
        self.texts[path] = self.text_of(path)
        self.writes += 1
        self.version[path] = self.writes
        self.clean = False

    @precondition(lambda self: len(self.texts) > 1)
    @rule(data=st.data())
    def delete(self, data) -> None:
        path = data.draw(st.sampled_from(sorted(self.texts)))
        (self.root / path).unlink()
        del self.texts[path]
        del self.version[path]
        self.clean = False

    @rule(model=st.sampled_from(MODELS), qp=st.sampled_from(("", "query: ", "search_query: ")),
          dp=st.sampled_from(PREFIXES))
    def reconfigure(self, model: str, qp: str, dp: str) -> None:
        self.cfg.update(model=model, query_prefix=qp, document_prefix=dp)
        self.configure()
        self.clean = self.clean and not self.failing() and self.present() == len(self.texts)

    @rule(dims=st.sampled_from((16, 32, 0)))
    def ask_for_dimensions(self, dims: int) -> None:
        """``[embeddings] dimensions``, which OpenAI's text-embedding-3 models (and this server) honour."""
        self.cfg.update(dimensions=dims)
        self.configure()
        self.clean = self.clean and not self.failing() and self.present() == len(self.texts)

    @rule(mode=st.sampled_from(("ok", "error", "wrong length")))
    def endpoint_changes(self, mode: str) -> None:
        self.srv.status, self.srv.dim_override = 200, None
        if mode == "error":
            self.srv.status = 500
        elif mode == "wrong length":
            self.srv.dim_override = 8
        self.clean = self.clean and not self.failing() and self.present() == len(self.texts)

    @rule()
    def another_model_behind_the_name(self) -> None:
        """The endpoint serves another model under the same name (an Ollama tag pointed elsewhere): its vectors
        have another length."""
        self.srv.dim = 48 if self.srv.dim == 64 else 64
        self.clean = self.clean and not self.failing() and self.present() == len(self.texts)

    @rule()
    def embedding_pass(self) -> None:
        self.after_pass(embedding.run_pass(self.reader))

    @rule(words=PHRASE)
    def recall_something(self, words: str) -> None:
        """A recall, with the background pass free to start: when entries lack vectors it starts the real detached
        pass (told the query's vector length), which this step waits for."""
        os.close(self.lock_fd)
        self.lock_fd = None
        report: dict = {}
        hits = recall(self.reader, words, limit=5, mark_read=False, report=report)
        deadline = time.monotonic() + 60
        while (fd := locks.try_lock(embedding.lock_path(self.reader.state_dir))) is None:
            assert time.monotonic() < deadline, "the background pass did not finish"
            time.sleep(0.02)
        self.lock_fd = fd
        assert len(hits) <= 5
        vec = report["vectors"]
        assert vec["model"] == self.cfg["model"]
        assert vec["present"] + vec["missing"] == len(self.texts)
        if self.failing():
            assert "warning" in report and vec["used"] is False
        else:
            assert "warning" not in report
            assert vec["present"] == self.present(), (vec, self.present())
            if self.clean and self.texts:
                assert vec["missing"] == 0 and vec["used"] is True
        if not vec["used"]:     # the vector channel took no part: exactly lexical search
            lexical = self.reader.with_db(lambda con: [h.id for h in index_query.search(con, words, 5)])
            assert [h.entry.path for h in hits] == lexical
        if vec["missing"]:      # the pass ran in the background: the same outcome as one run here
            log = (self.reader.state_dir / "embed.log").read_text("utf-8").splitlines()[-1]
            err = log.split(" still missing: ", 1)[1] if " still missing: " in log else None
            embedded = int(log.split("] embedded ", 1)[1].split(" ", 1)[0])
            hint = 0 if self.failing() else self.length()
            self.after_pass({"error": err, "embedded": embedded, "missing": 0 if err is None else 1}, hint)

    # ------------------------------------------------------------------------------------------ invariants
    @invariant()
    def every_live_entry_is_counted_once(self) -> None:
        if not hasattr(self, "reader"):
            return
        st_ = embedding.channel_status(self.reader, probe=False)
        assert st_["present"] + st_["missing"] == len(self.texts), (st_, len(self.texts))
        assert st_["model"] == self.cfg["model"]

    def check_store(self) -> None:
        """The vectors held for the current key are those of the current texts, with the document prefix, at the
        endpoint's length (the deterministic server's vectors, unit length)."""
        key, n = self.endpoint.vector_key, self.length()
        prefix = self.cfg["document_prefix"]

        def rows(con):
            watch.fresh(con, self.reader.root, self.reader.state_dir, self.reader.settings)
            m = vectors.load_matrix(con, self.reader.state_dir, key, n, types=self.reader.settings.types)
            path_of = dict(con.execute("SELECT key, path FROM idx_docs"))
            return m, path_of

        m, path_of = self.reader.with_db(rows)
        assert m.n == len(self.texts) == m.total
        for r, k in enumerate(m.keys):
            want = np.asarray(vector(prefix + self.texts[path_of[int(k)]], n, {}), dtype=np.float32)
            want /= np.linalg.norm(want)
            assert np.allclose(m.mat[r], want, atol=1e-5), path_of[int(k)]
        vcon = vectors.connect(self.reader.state_dir)
        try:
            assert {m for (m,) in vcon.execute("SELECT DISTINCT model FROM vec")} <= {key}
            assert {d for (d,) in vcon.execute("SELECT DISTINCT dim FROM vec")} <= {n}
        finally:
            vcon.close()


def test_the_vector_channel_keeps_its_invariants(tmp_path, monkeypatch):
    monkeypatch.setenv("ACPMEM_NO_WATCH", "1")
    VectorChannel.base = tmp_path
    # no explain phase: on this Python it traces every line, which turns a failure into a timeout that hides it
    machine = settings(max_examples=int(os.environ.get("ACPMEM_MODEL_EXAMPLES", "30")), stateful_step_count=30,
                       deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])(VectorChannel)
    with embeddings_server() as srv:
        SERVER["srv"] = srv
        try:
            machine.TestCase().runTest()
        finally:
            SERVER.clear()
