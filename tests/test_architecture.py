"""The direction of imports, checked by parsing every module: the pure core does no I/O, the library never
imports the CLI, and heavy libraries are imported only inside the functions that need them."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "acpmem"
PURE = {"model", "score", "search", "lexicon", "framing", "secrets", "render", "tools", "errors"}
ADAPTERS = {"cli", "cli_read", "cli_write", "cli_integrations", "entry", "listing", "mcp_server", "hooks", "__main__"}
IO_MODULES = {"subprocess", "sqlite3", "shutil", "socket", "urllib", "http"}
VAULT_LAYER = {"acpmem.vault", "acpmem.catalog", "acpmem.reads", "acpmem.index", "acpmem.api", "acpmem.queue"}
HEAVY = {"openai", "git", "mcp", "rjieba", "jieba", "detect_secrets", "httpx", "rich", "typer"}


def _imports(tree: ast.AST, top_level_only: bool) -> set[str]:
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def _modules():
    for p in sorted(PKG.glob("*.py")):
        yield p.stem, ast.parse(p.read_text("utf-8"))


def test_pure_core_does_no_io_and_knows_no_vault():
    for name, tree in _modules():
        if name not in PURE:
            continue
        used = _imports(tree, top_level_only=False)
        roots = {u.split(".")[0] for u in used}
        assert not roots & IO_MODULES, f"{name} imports {roots & IO_MODULES}"
        assert not used & VAULT_LAYER, f"{name} imports {used & VAULT_LAYER}"


def test_library_never_imports_the_adapters():
    for name, tree in _modules():
        if name in ADAPTERS:
            continue
        used = _imports(tree, top_level_only=False)
        bad = {u for u in used if u.split(".")[0] in ("typer", "rich")
               or any(u == f"acpmem.{a}" or u.startswith(f"acpmem.{a}.") for a in ADAPTERS)}
        assert not bad, f"library module {name} imports {bad}"


def test_heavy_imports_are_never_at_module_level():
    for name, tree in _modules():
        top = {u.split(".")[0] for u in _imports(tree, top_level_only=True)}
        allowed = {"typer"} if name in ADAPTERS else set()
        assert not (top & HEAVY) - allowed, f"{name} imports {top & HEAVY} at start-up"
