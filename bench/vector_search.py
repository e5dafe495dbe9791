"""Exact vector search cost for the embedding channel: float32 blobs in SQLite, compared with numpy.

Usage: python bench/vector_search.py [--sizes 10000,100000] [--dim 384] [--runs 5]

For each size it fills a ``vectors.sqlite`` shaped as ``acpmem.search.vectors`` makes it (random unit vectors) and
measures, median of ``--runs``, for a rowid table and a WITHOUT ROWID one: reading every blob (the SQL join recall runs, without the index tables), turning them
into one float32 matrix, the product with a query and the top 100; and the import of numpy in a fresh process.
sqlite-vec is tried too: it needs a Python whose ``sqlite3`` can load extensions.
"""
from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path


def fill(path: Path, n: int, dim: int, without_rowid: bool = False) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    layout = "PRIMARY KEY (model, hash)) WITHOUT ROWID" if without_rowid else "UNIQUE (model, hash))"
    con.execute(f"CREATE TABLE vec (model TEXT, hash TEXT, dim INTEGER, v BLOB, {layout}")
    rng = random.Random(1)
    con.execute("BEGIN")
    for i in range(n):
        v = [rng.gauss(0, 1) for _ in range(dim)]
        norm = sum(x * x for x in v) ** 0.5
        con.execute("INSERT INTO vec VALUES ('m', ?, ?, ?)", (f"{i:032x}", dim, array("f", [x / norm for x in v])
                                                              .tobytes()))
    con.execute("COMMIT")
    con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    import numpy as np

    starts = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import numpy"], check=True)
        t1 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        starts.append((t1 - t0) - (time.perf_counter() - t1))
    print(f"import numpy: {1000 * statistics.median(starts):.0f} ms (process with it minus one without)")
    can_load = hasattr(sqlite3.connect(":memory:"), "enable_load_extension")
    print(f"sqlite-vec: this Python's sqlite3 {'can' if can_load else 'cannot'} load extensions")
    for n, without_rowid in ((int(s), w) for s in args.sizes.split(",") for w in (False, True)):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "vectors.sqlite"
            fill(path, n, args.dim, without_rowid)
            q = np.random.default_rng(2).standard_normal(args.dim).astype(np.float32)
            q /= np.linalg.norm(q)
            read, search = [], []
            for _ in range(args.runs):
                con = sqlite3.connect(path)
                t0 = time.perf_counter()
                rows = con.execute("SELECT hash, v FROM vec WHERE model = 'm' AND dim = ?", (args.dim,)).fetchall()
                t1 = time.perf_counter()
                mat = np.frombuffer(b"".join(v for _, v in rows), dtype=np.float32).reshape(len(rows), args.dim)
                sims = mat @ q
                best = np.argpartition(-sims, 99)[:100]
                t2 = time.perf_counter()
                assert len(best) == 100
                read.append(t1 - t0)
                search.append(t2 - t1)
                con.close()
            size = path.stat().st_size / 1e6
            print(f"{n} vectors of {args.dim}, {'WITHOUT ROWID' if without_rowid else 'rowid table'} ({size:.0f} MB): "
                  f"read {1000 * statistics.median(read):.1f} ms, matrix + product + top 100 "
                  f"{1000 * statistics.median(search):.1f} ms (median of {args.runs})")

if __name__ == "__main__":
    main()
