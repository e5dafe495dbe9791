"""Reading a package's imports with ``ast`` and checking the house rules on them (``docs/design.md``,
"Architecture"): the direction between layers, no cycles between modules, no ``_private`` name taken from another
module, no I/O in the pure core, no heavy library imported at start-up.

Parametrised by the package's folder and name, so a test can run the same checks on a throwaway package with a
planted fault and see each one reported.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Module:
    name: str                       # dotted, e.g. acpmem.vault.reader
    path: Path
    tree: ast.Module
    imports: dict[str, int] = field(default_factory=dict)          # imported module -> first line
    top_level: set[str] = field(default_factory=set)                # modules imported at module level
    private: list[tuple[int, str]] = field(default_factory=list)    # (line, "module._name") taken from elsewhere
    calls: set[str] = field(default_factory=set)                    # names and dotted attributes called


def _module_name(pkg_root: Path, pkg: str, path: Path) -> str:
    rel = path.relative_to(pkg_root).with_suffix("").parts
    parts = [pkg, *rel]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _runtime_nodes(tree: ast.AST):
    """Every node, except those under ``if TYPE_CHECKING:`` (annotations only: never imported at run time)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
                todo.extend(child.orelse)
                continue
            todo.append(child)


def load(pkg_root: Path, pkg: str) -> dict[str, Module]:
    """Every module of the package with its imports resolved to module names."""
    mods = {}
    for path in sorted(pkg_root.rglob("*.py")):
        name = _module_name(pkg_root, pkg, path)
        mods[name] = Module(name, path, ast.parse(path.read_text("utf-8")))
    for m in mods.values():
        bound: dict[str, str] = {}    # local name -> module it names (for attribute access to private names)
        top = set(id(n) for n in m.tree.body)
        for node in _runtime_nodes(m.tree):
            if isinstance(node, ast.Call):
                d = _dotted(node.func)
                if d:
                    m.calls.add(d)
            if isinstance(node, ast.Import):
                for a in node.names:
                    m.imports.setdefault(a.name, node.lineno)
                    if id(node) in top:
                        m.top_level.add(a.name)
                    if a.asname:
                        bound[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = m.name.split(".")
                    if m.path.name != "__init__.py":
                        here = here[:-1]
                    here = here[: len(here) - node.level + 1]
                    base = ".".join(here + ([node.module] if node.module else []))
                for a in node.names:
                    full = f"{base}.{a.name}"
                    target = full if full in mods else base
                    m.imports.setdefault(target, node.lineno)
                    if id(node) in top:
                        m.top_level.add(target)
                    if full in mods:
                        bound[a.asname or a.name] = full
                    elif a.name.startswith("_") and not a.name.startswith("__") and base.split(".")[0] == pkg:
                        m.private.append((node.lineno, full))
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                target = bound.get(node.value.id)
                if target and target != m.name and node.attr.startswith("_") and not node.attr.startswith("__"):
                    m.private.append((node.lineno, f"{target}.{node.attr}"))
    return mods


def graph(mods: dict[str, Module]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in it, functions included)."""
    return {name: {t for t in m.imports if t in mods and t != name} for name, m in mods.items()}


def cycles(mods: dict[str, Module]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    g = graph(mods)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def layer_violations(mods: dict[str, Module], pkg: str, layers: dict[str, int],
                     allowed_extra: dict[str, set[str]] | None = None) -> list[str]:
    """Imports that go against the direction: a module may import its own package and lower layers only
    (``allowed_extra`` lists further packages a package may import, e.g. cli may use integrations)."""
    allowed_extra = allowed_extra or {}
    out = []

    def layer_of(name: str) -> str | None:
        parts = name.split(".")
        return parts[1] if len(parts) > 1 and parts[1] in layers else None

    for name, m in mods.items():
        mine = layer_of(name)
        if mine is None:
            continue
        for target, line in m.imports.items():
            if target not in mods:
                continue
            theirs = layer_of(target)
            if theirs is None or theirs == mine:
                continue
            if layers[theirs] < layers[mine] or theirs in allowed_extra.get(mine, set()):
                continue
            out.append(f"{m.path.name}:{line}: {name} ({mine}) imports {target} ({theirs})")
    return out


def private_uses(mods: dict[str, Module]) -> list[str]:
    return [f"{m.name}:{line}: {what}" for m in mods.values() for line, what in m.private
            if what.rsplit(".", 1)[0] != m.name]


def top_level_imports(mods: dict[str, Module], roots: set[str], allowed: dict[str, set[str]]) -> list[str]:
    """Modules that import any of ``roots`` at module level (``allowed``: module -> roots it may)."""
    out = []
    for name, m in mods.items():
        bad = {t.split(".")[0] for t in m.top_level} & roots
        bad -= allowed.get(name, set())
        if bad:
            out.append(f"{name} imports {sorted(bad)} at start-up")
    return out
