"""Boundary fuzzing, longer than CI runs it: every input a user or a model controls (command lines, MCP tool
arguments, the Python API, fork output, entry files, transcripts, acpmem.toml, the state files a person or a
teammate's clone can change) with generated hostile values, each fuzzer on a fresh example vault. The generators
and the property are ``tests/support/fuzzing.py``; the CI run is ``tests/test_fuzz_boundaries.py``.

Prints, per fuzzer, how many examples ran, how long it took, how the examples ended (success, or which clear error),
and what it found: a broken property with hypothesis's falsifying example (the smallest input that breaks it).
Exit status 1 when anything was found.

Usage: python bench/fuzz_boundaries.py [--examples N] [--only cli,mcp,...] [--seed S]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
sys.path.insert(0, str(HERE.parent))


def isolated_home(folder: Path) -> None:
    """A HOME and git identity of our own, and no ambient vault or model settings (as the tests have)."""
    home = folder / "home"
    home.mkdir()
    cfg = home / ".gitconfig"
    cfg.write_text("[user]\n\tname = Fuzz\n\temail = fuzz@example.invalid\n[init]\n\tdefaultBranch = main\n")
    os.environ.update(HOME=str(home), GIT_CONFIG_GLOBAL=str(cfg), GIT_CONFIG_NOSYSTEM="1", ACPMEM_NO_WATCH="1")
    for var in ("ACPMEM_VAULT", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "ACPMEM_SESSION", "ACPMEM_DEBUG"):
        os.environ.pop(var, None)


def describe(exc: BaseException) -> list[str]:
    """The failures hypothesis reported: each one's error and its falsifying example."""
    found = list(exc.exceptions) if isinstance(exc, BaseExceptionGroup) else [exc]
    lines = []
    for e in found:
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb) if "/acpmem/" in f.filename),
                     f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?")
        lines.append(f"  {type(e).__name__} at {where}: {str(e).splitlines()[0][:300] if str(e) else ''}")
        for note in getattr(e, "__notes__", []):
            lines.extend("    " + ln[:300] for ln in note.splitlines()[:12])
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=1000, help="examples per fuzzer (default 1000)")
    ap.add_argument("--only", default="", help="comma-separated fuzzers (default: all)")
    ap.add_argument("--seed", type=int, default=None, help="hypothesis seed, for a reproducible run")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="acpmem-fuzz-"))
    isolated_home(work)
    import warnings

    from hypothesis import seed as hyp_seed

    import fuzzing

    warnings.filterwarnings("ignore")
    names = [n for n in args.only.split(",") if n] or list(fuzzing.FUZZERS)
    unknown = set(names) - set(fuzzing.FUZZERS)
    if unknown:
        ap.error(f"unknown fuzzer(s) {', '.join(sorted(unknown))}; known: {', '.join(fuzzing.FUZZERS)}")
    total, failures = 0, 0
    print(f"{args.examples} examples per fuzzer; work folder {work}")
    for name in names:
        ctx = fuzzing.Ctx(work / name)
        fuzzer = fuzzing.FUZZERS[name]
        if args.seed is not None:
            fuzzer = lambda c, n, f=fuzzer: hyp_seed(args.seed)(lambda: f(c, n))()  # noqa: E731
        start = time.monotonic()
        try:
            ran = fuzzer(ctx, args.examples)
            problem = None
        except BaseException as exc:  # noqa: BLE001 - a broken property is what we are looking for
            if isinstance(exc, KeyboardInterrupt):
                raise
            ran, problem = sum(ctx.tally.values()), exc
        finally:
            ctx.done()
        took = time.monotonic() - start
        total += ran
        tally = ", ".join(f"{k} {v}" for k, v in sorted(ctx.tally.items(), key=lambda kv: -kv[1]))
        print(f"{name:<12} {ran:>6} examples in {took:6.1f} s   {tally}")
        if problem is None:
            print("  found nothing")
        else:
            failures += 1
            print("  FOUND:")
            print("\n".join(describe(problem)))
    print(f"{total} examples in all; {failures} fuzzer(s) found something")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
