"""pytest's assertion rewriting of the test modules done once a run, by the controlling process, instead of once by
every pytest-xdist worker.

pytest rewrites the asserts of each test module as it imports it — ~2.9 s of CPU for this suite's modules — and keeps
the result beside them in ``__pycache__``, except where Python may not write bytecode (``PYTHONDONTWRITEBYTECODE``,
as set on the machines this suite runs on, or a folder it cannot write) or before there is one (a fresh clone): then
each of the four workers rewrote every module again, 8–9 s of CPU a run that nothing asserts on. Here the
controlling process rewrites them before the workers start: into ``__pycache__`` where pytest itself would write,
or, where it may not, into a folder of this run (removed at its end) that the workers read from instead. What is
written is pytest's own file, which pytest checks against the source's hash as it reads it, so a stale or foreign
one is rewritten as before. Where pytest's internals are not what this expects, it does nothing and the workers
rewrite as they did.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ENV = "ACPMEM_TESTS_REWRITTEN"   # the run's folder, where the workers read the rewritten modules from


def _internals():
    try:
        from _pytest.assertion import rewrite as rw

        for name in ("get_cache_dir", "_rewrite_test", "_write_pyc", "_read_pyc", "try_makedirs", "PYC_TAIL",
                     "assertstate_key"):
            getattr(rw, name)
        return rw
    except (ImportError, AttributeError):
        return None


def _mirror(base: Path, source: Path) -> Path:
    """Where the rewritten ``source`` is kept under ``base`` (its folder's path mirrored, as ``sys.pycache_prefix``
    does)."""
    return base.joinpath(*source.parent.parts[1:])


def _modules(config) -> list[Path]:
    """The test modules this run collects from: those under the paths it was given (in tests/), and the conftest."""
    where = Path(config.invocation_params.dir)
    found: set[Path] = {TESTS / "conftest.py"}
    for arg in config.args:
        path = (where / str(arg).split("::", 1)[0]).resolve()
        if path == TESTS or TESTS in path.parents or path in TESTS.parents:
            if path.is_dir():
                found.update(p for p in (TESTS if path in TESTS.parents else path).rglob("test_*.py")
                             if "support" not in p.relative_to(TESTS).parts)
            elif path.name.startswith("test_") and path.suffix == ".py":
                found.add(path)
    return sorted(p for p in found if p.is_file())


def prepare(config) -> Path | None:
    """In the controlling process of a run with workers: rewrite the test modules once. Returns the run's
    folder it made (to remove at the end; its path is in ``ENV`` for the workers), or None."""
    rw = _internals()
    # as pytest-xdist decides whether it starts workers (none for --collect-only)
    workers = len(config.getoption("tx", None) or ())
    if rw is None or hasattr(config, "workerinput") or workers < 1 or config.getoption("collectonly", False) \
            or config.getoption("dist", "no") == "no" or config.getoption("assertmode", "rewrite") != "rewrite":
        return None
    try:
        state = config.stash[rw.assertstate_key]
    except KeyError:
        return None
    modules = _modules(config)
    here = not sys.dont_write_bytecode and all(rw.try_makedirs(rw.get_cache_dir(fn)) for fn in modules)
    run = None if here else Path(tempfile.mkdtemp(prefix="acpmem-tests-rewritten-"))
    for fn in modules:
        try:
            usual = rw.get_cache_dir(fn) / (fn.name[:-3] + rw.PYC_TAIL)
            target = usual if run is None else _mirror(run, fn) / usual.name
            target.parent.mkdir(parents=True, exist_ok=True)
            if rw._read_pyc(fn, usual) is not None:   # already rewritten (checked against the source's hash)
                if target != usual:
                    shutil.copyfile(usual, target)
                continue
            source_hash, co = rw._rewrite_test(fn, config)
            rw._write_pyc(state, co, source_hash, target)
        except Exception:   # that module is rewritten by each worker, as before
            continue
    if run is not None:
        os.environ[ENV] = str(run)
    return run


def point_worker(config) -> None:
    """In a worker: read the test modules rewritten by the controlling process from the run's folder, if it made one."""
    run = os.environ.get(ENV)
    rw = _internals()
    if not run or rw is None or not hasattr(config, "workerinput"):
        return
    usual = rw.get_cache_dir
    base = Path(run)

    def get_cache_dir(file_path: Path) -> Path:
        if TESTS in Path(file_path).parents:
            return _mirror(base, Path(file_path))
        return usual(file_path)

    rw.get_cache_dir = get_cache_dir


def finish(run: Path | None) -> None:
    if run is not None:
        shutil.rmtree(run, ignore_errors=True)
        os.environ.pop(ENV, None)
