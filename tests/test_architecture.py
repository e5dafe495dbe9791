"""The house, checked by parsing every module (``tests/support/archcheck.py``): imports flow one way between the layers,
no module cycles, no private names taken across modules, a pure core, no heavy import at start-up, empty package
``__init__`` files — and each check shown once to catch a planted fault in a throwaway package."""
from __future__ import annotations

import functools
import importlib
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import archcheck

PKG = Path(__file__).resolve().parents[1] / "acpmem"
# core → infra → search → hosts → vault → read → write → upkeep → integrations → cli: each layer may import the layers
# before it.
LAYERS = {"core": 0, "infra": 1, "search": 2, "hosts": 3, "vault": 4, "read": 5, "write": 6, "upkeep": 7,
          "integrations": 8, "cli": 9}
IO = {"os", "io", "subprocess", "sqlite3", "shutil", "socket", "fcntl", "tempfile", "glob", "urllib", "http",
      "select", "signal", "ctypes", "random", "time"}
HEAVY = {"openai", "mcp", "mcp_types", "anyio", "rjieba", "jieba", "detect_secrets", "httpx", "rich", "typer",
         "click", "yaml", "rapidfuzz", "pydantic", "numpy", "zstandard", "snowballstemmer", "Stemmer", "pygit2"}
TYPER_MODULES = {"acpmem.cli.app", "acpmem.cli.commands_vault", "acpmem.cli.commands_read",
                 "acpmem.cli.commands_write", "acpmem.cli.commands_review", "acpmem.cli.commands_integrations",
                 "acpmem.cli.commands_branches", "acpmem.cli.commands_porting"}


@functools.cache
def _mods():
    """Every module parsed once per test process (the checks only read the trees)."""
    return archcheck.load(PKG, "acpmem")


def test_imports_flow_one_way_between_the_layers():
    assert archcheck.layer_violations(_mods(), "acpmem", LAYERS) == []


def test_no_import_cycles_between_modules():
    assert archcheck.cycles(_mods()) == []


def test_no_module_takes_another_modules_private_names():
    assert archcheck.private_uses(_mods()) == []


def test_the_pure_core_does_no_io():
    for name, m in _mods().items():
        if not name.startswith("acpmem.core."):
            continue
        roots = {t.split(".")[0] for t in m.imports}
        assert not roots & IO, f"{name} imports {roots & IO}"
        # path arithmetic, no file access: only the layout names folders
        assert "pathlib" not in roots or name == "acpmem.core.layout", name
        assert not m.calls & {"open", "print", "input", "exec", "eval"}, f"{name} calls {m.calls & {'open', 'print'}}"
        # the clock is passed in: only the clock module reads it
        reads_clock = {c for c in m.calls if c.endswith((".now", ".utcnow", ".today"))}
        assert not reads_clock or name == "acpmem.core.clock", f"{name} reads the clock: {reads_clock}"


def test_heavy_libraries_are_never_imported_at_start_up():
    allowed = {name: {"typer"} for name in TYPER_MODULES}
    assert archcheck.top_level_imports(_mods(), HEAVY, allowed) == []


def test_package_init_files_import_nothing():
    """A per-turn command pays for every package ``__init__`` on its import path: they hold a docstring only."""
    import ast

    for init in PKG.rglob("__init__.py"):
        if init.parent == PKG:
            continue    # the top level resolves its exports lazily (checked below)
        body = ast.parse(init.read_text("utf-8")).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr), init


def test_the_lazy_exports_of_the_package_exist():
    import acpmem

    for name in acpmem.__all__:
        assert getattr(acpmem, name) is not None, name


def test_no_comment_cites_a_document_outside_the_repository():
    for path in [*PKG.rglob("*.py"), *PKG.parent.joinpath("tests").glob("*.py"),
                 *PKG.parent.joinpath("bench").glob("*.py"), PKG.parent / "README.md",
                 *PKG.parent.joinpath("docs").glob("*.md")]:
        assert not re.search(r"SPEC\s*§", path.read_text("utf-8")), path


def test_the_fast_path_table_is_derived_from_the_typer_commands():
    """``acpmem/cli/fastspec.py`` is what ``python -m acpmem.cli.fastgen`` makes from the typer definitions now."""
    from acpmem.cli import fastgen

    assert (PKG / "cli" / "fastspec.py").read_text("utf-8") == fastgen.render(fastgen.build()), \
        "run `python -m acpmem.cli.fastgen`"


def test_the_per_turn_commands_pass_every_typer_parameter_to_the_shared_function():
    """The typer command of a per-turn command and its function in ``cli.hot`` have the same parameters."""
    import inspect

    from acpmem.cli import hot
    from acpmem.cli.fastgen import FAST
    from acpmem.cli.main import typer_command

    group = typer_command("acpmem")
    for name in FAST:
        cmd = group
        for word in name.split():
            cmd = cmd.commands[word]
        typer_params = {p.name for p in cmd.params if p.name != "help"}
        assert typer_params == set(inspect.signature(hot.IMPLS[name]).parameters), name


# ------------------------------------------------------------------------------------------ the checks catch faults

def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "planted"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


def test_the_checks_report_a_planted_cycle_a_wrong_direction_and_a_private_name(tmp_path):
    root = _plant(tmp_path, {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/a.py": "from planted.core import b\n",
        "core/b.py": "def f():\n    from planted.core import a\n",       # a cycle, through a function-level import
        "core/c.py": "from planted.vault.w import helper\n",                  # the core reaching up a layer
        "vault/__init__.py": "",
        "vault/w.py": "from planted.core import b\nb._secret\nfrom planted.core.a import _hidden\n"
                      "def helper(): pass\n",
    })
    mods = archcheck.load(root, "planted")
    assert archcheck.cycles(mods) == [["planted.core.a", "planted.core.b"]]
    (wrong,) = archcheck.layer_violations(mods, "planted", {"core": 0, "vault": 1})
    assert "planted.core.c (core) imports planted.vault.w (vault)" in wrong
    assert sorted(what.split(": ")[1] for what in archcheck.private_uses(mods)) == \
        ["planted.core.a._hidden", "planted.core.b._secret"]
    # imports only an annotation needs are not a cycle
    root2 = _plant(tmp_path / "2", {"__init__.py": "", "x.py": "import planted.y\n",
                                    "y.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    import planted.x\n"})
    assert archcheck.cycles(archcheck.load(root2, "planted")) == []


def test_the_checks_report_a_heavy_import_at_start_up(tmp_path):
    root = _plant(tmp_path, {"__init__.py": "", "m.py": "import typer\n", "n.py": "def f():\n    import typer\n"})
    assert archcheck.top_level_imports(archcheck.load(root, "planted"), {"typer"}, {}) == \
        ["planted.m imports ['typer'] at start-up"]


# One interpreter that has imported nothing but this: a child forked from it per module imports that module first,
# alone — what a fresh interpreter would, without the ~20 ms of a Python start-up each (the file 9.9 → ~6 s of CPU).
# It loads the code of acpmem's modules once (from the compiled files, or compiling the sources), without importing
# any of them, and its children's imports take the code from it: where no compiled file is kept
# (PYTHONDONTWRITEBYTECODE, a fresh checkout) each child compiled every module it imports again.
IMPORT_EACH = """
import importlib, importlib.machinery, importlib.util, os, sys, traceback
compiled = {}
for folder, _, files in os.walk(os.path.dirname(importlib.util.find_spec("acpmem").origin)):
    for name in files:
        if name.endswith(".py"):
            path = os.path.join(folder, name)
            compiled[path] = importlib.machinery.SourceFileLoader(name[:-3], path).get_code(name[:-3])
get_code = importlib.machinery.SourceFileLoader.get_code
importlib.machinery.SourceFileLoader.get_code = lambda self, fullname: compiled.get(self.path) or get_code(
    self, fullname)
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(line.strip())
            code = 0
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stderr.flush()
        os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


def test_every_module_imports_on_its_own(tmp_path):
    """Each module imports first, alone, in an interpreter that has imported nothing of acpmem nor any library (an
    import cycle hidden by import order would fail here): a child forked per module from one that imported only
    ``importlib``, ``os``, ``sys`` and ``traceback``."""
    names = sorted(_mods())
    err = tmp_path / "stderr"
    with open(err, "w+") as errors:
        p = subprocess.Popen([sys.executable, "-c", IMPORT_EACH], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=errors, text=True)
        try:
            for name in names:
                p.stdin.write(name + "\n")
                p.stdin.flush()
                code = p.stdout.readline().strip()
                errors.seek(0)
                assert code == "0", (name, code, errors.read()[-800:])
        finally:
            p.stdin.close()
            p.wait(timeout=60)
    assert len(names) > 100 and importlib.import_module("acpmem.cli.main").main


# ------------------------------------------------------------------------------------------ the per-turn commands

PER_TURN_PROBE = """
import json, sys
from acpmem.cli.fast import try_fast
code = try_fast(sys.argv[1:], "acpmem")
sys.stderr.write("\\n" + json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""
# what a per-turn command never loads: the heavy libraries, the write machinery, the progress bars, and the typing
# and dataclasses modules (a few ms each, with what they generate)
PER_TURN_BANNED = HEAVY | {"acpmem.vault.writer", "acpmem.vault.gitlib", "acpmem.vault.gitrun", "acpmem.upkeep.review",
                           "acpmem.cli.bars", "dataclasses", "inspect", "typing"}


def test_the_per_turn_commands_load_nothing_heavy(tmp_path):
    """Each per-turn read — ``list``, ``show``, ``surface``, ``score``, ``stats``, ``recall`` — is answered by the fast
    path (never typer) and loads none of ``PER_TURN_BANNED``; the search index's stemmer only where the command
    searches or its index is checked (``recall``, ``surface``)."""
    import json

    from acpmem.vault.create import init_vault

    v = init_vault(tmp_path / "vault", example=True)
    first = v.load().entries[0].id
    v.close()
    env = {**__import__("os").environ, "ACPMEM_USER_VAULT": "none"}
    stemmer = {"Stemmer", "snowballstemmer"}
    for argv, allowed in ((["list", "--format", "prompt"], set()), (["list"], set()), (["show", first], set()),
                          (["show", first, "--json"], set()), (["surface", "--session", "t1"], stemmer),
                          (["score", "--explain"], set()), (["stats"], set()), (["stats", "--json"], set()),
                          (["recall", "upload"], stemmer)):
        for _ in range(2):   # the first call builds the derived index; the second is a turn like any other
            r = subprocess.run([sys.executable, "-c", PER_TURN_PROBE, *argv, "--vault", str(v.root)],
                               capture_output=True, text=True, timeout=120, env=env)
        report = json.loads(r.stderr.rsplit("\n", 1)[-1])
        assert report["code"] == 0, (argv, r.stderr)
        loaded = {m for m in report["modules"] if m in PER_TURN_BANNED or m.split(".")[0] in PER_TURN_BANNED}
        assert loaded <= allowed, (argv, sorted(loaded - allowed))
