"""The suite's own machinery: the test modules' asserts rewritten once a run by the controlling process
(``tests/support/rewrite_once.py``), not once by every worker."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import rewrite_once


def test_pytests_internals_are_what_the_one_rewrite_uses():
    # where they are not, every worker rewrites every module again: 8-9 s of CPU a run, and nothing else says so
    assert rewrite_once._internals() is not None


def test_this_module_was_rewritten_before_the_workers_started(pytestconfig):
    rw = rewrite_once._internals()
    here = Path(__file__).resolve()
    pyc = rw.get_cache_dir(here) / (here.name[:-3] + rw.PYC_TAIL)
    if not hasattr(pytestconfig, "workerinput") or pytestconfig.getoption("assertmode") != "rewrite":
        # one process (no workers, or --collect-only), or no rewriting (--assert=plain): nothing was made for workers
        assert os.environ.get(rewrite_once.ENV) is None and not getattr(pytestconfig, "_acpmem_rewritten", None)
        return
    # in a worker: this module's rewritten code is where this worker read it from, current with the source
    assert rw._read_pyc(here, pyc) is not None, pyc
    run = os.environ.get(rewrite_once.ENV)
    if run:   # where Python may not write beside the sources: the run's folder, which the workers read
        assert Path(run) in pyc.parents, (run, pyc)
    else:     # where pytest itself keeps them (a worker here could not have written it there): beside the sources,
        # or under PYTHONPYCACHEPREFIX where one is set
        usual = Path(sys.pycache_prefix).joinpath(*here.parent.parts[1:]) if sys.pycache_prefix \
            else here.parent / "__pycache__"
        assert not sys.dont_write_bytecode and pyc.parent == usual, pyc
