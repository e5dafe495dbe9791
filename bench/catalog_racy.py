"""What the catalog's racily clean rows cost: a vault of generated entries (written in one commit, so every file is
"racily clean" for the first ``catalog.RACY_NS``), then ``catalog.refresh`` timed while those rows are read again at
each refresh and once they are trusted (the one-lookup answer).

    python bench/catalog_racy.py [--sizes 1000,10000]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def measure(n: int) -> str:
    from list_speed import build

    from acpmem.search import catalog

    with tempfile.TemporaryDirectory(prefix="acpmem-racy-") as tmp:
        root = Path(tmp) / "vault"
        build(root, n)
        con = catalog.connect(root / ".acpmem" / catalog.DB_NAME)
        t = time.perf_counter()
        catalog.refresh(con, root)
        first = time.perf_counter() - t
        racy: list[float] = []
        while con.execute("SELECT 1 FROM meta WHERE key='racy'").fetchone():
            t = time.perf_counter()
            catalog.refresh(con, root)
            racy.append(time.perf_counter() - t)
        steady = []
        for _ in range(20):
            t = time.perf_counter()
            catalog.refresh(con, root)
            steady.append(time.perf_counter() - t)
        con.close()
    during = f"median {statistics.median(racy) * 1000:.1f} ms over {len(racy)} refreshes" if racy else "none measured"
    return (f"{n} entries: first refresh {first * 1000:.0f} ms; while all are racily clean {during}; "
            f"after: median {statistics.median(steady) * 1000:.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000", help="vault sizes, comma-separated")
    args = ap.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        print(measure(n), flush=True)


if __name__ == "__main__":
    main()
