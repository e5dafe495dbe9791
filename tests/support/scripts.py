"""A script of this repository's (``bench/``) as ``python SCRIPT ARGS`` runs it, in this process: ``run_script``.

A Python start and the script's imports cost ~0.15 s a run, most of what a ``--help`` or a refused argument costs;
where the process is not the point, the script runs here with what a process of its own would see — ``argv``, its
own folder first on the import path and the tests' folders off it (the tests' modules hidden from its imports too, so
a script that needs one fails here as it would alone), ``cwd`` as the current folder, ``input`` on standard input,
``sys.exit`` and an uncaught exception turned into the exit status Python gives them — and the environment, folder,
import path and modules it changed put back afterwards (``bench/team_model.py`` must not shadow the tests' one).
"""
from __future__ import annotations

import io
import os
import runpy
import subprocess
import sys
import traceback
from pathlib import Path

TESTS = str(Path(__file__).resolve().parents[1])


def _under(path: str | None, folder: str) -> bool:
    return bool(path) and (path == folder or path.startswith(folder + os.sep))


def run_script(script: Path, *args, cwd: Path, input: str | None = None) -> subprocess.CompletedProcess:
    """``python SCRIPT ARGS`` in ``cwd``, here: its exit status, standard output and standard error."""
    script = Path(script).resolve()
    folder = str(script.parent)
    argv = [str(script), *map(str, args)]
    saved_env, saved_cwd, saved_path, saved_argv = dict(os.environ), os.getcwd(), list(sys.path), sys.argv
    saved_std = sys.stdin, sys.stdout, sys.stderr
    hidden = {n: m for n, m in sys.modules.items() if _under(getattr(m, "__file__", None), TESTS)}
    before = set(sys.modules)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        for name in hidden:
            del sys.modules[name]
        sys.path[:] = [folder, *(p for p in saved_path if not _under(p, TESTS))]
        sys.argv = argv
        sys.stdin, sys.stdout, sys.stderr = io.StringIO(input or ""), out, err
        os.chdir(cwd)
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:               # sys.exit("message"): Python prints it and exits 1
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:   # noqa: BLE001 — as the interpreter does: the traceback, status 1
            traceback.print_exc()
            code = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_std
        sys.argv = saved_argv
        sys.path[:] = saved_path
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for name in set(sys.modules) - before:
            if _under(getattr(sys.modules[name], "__file__", None), folder):
                del sys.modules[name]
        sys.modules.update(hidden)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
