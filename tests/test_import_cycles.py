"""No import cycles among the project's modules.

A cycle makes import order matter and hides which module owns what. The graph is read from the
source (AST), so function-level imports count too; ``from pkg import name`` counts as an import of
``pkg`` itself (its ``__init__`` runs and is read), so a submodule importing from its own package's
``__init__`` that imports it back is a cycle. Imports under ``if TYPE_CHECKING:`` never run and are
left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("data_prep", "sanitizer", "train", "eval")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules(packages: tuple[str, ...] = PACKAGES, root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file. A script beside a package of its name (``pkg/tool.py`` and ``pkg/tool/``)
    is left out: the import system finds the package first, so no import can reach the script and it
    can be in no cycle."""
    modules: dict[str, Path] = {}
    for path in (p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))):
        name = module_name(path, root)
        if name not in modules or path.name == "__init__.py":
            modules[name] = path
    return modules


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST):
    """Every node but those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child):
                stack.extend(child.orelse)
            else:
                stack.append(child)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """Project modules ``module`` imports at run time."""
    out: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(node, module, path.name == "__init__.py")
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)
    return {m for m in out if m in known and m != module}


def import_graph(packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    modules = project_modules(packages)
    return {m: imports_of(m, p, set(modules)) for m, p in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_sees_package_init_and_function_level_imports(tmp_path):
    graph = {"p": {"p.a"}, "p.a": {"p.b"}, "p.b": {"p"}, "q": set()}
    assert cycles(graph) == [["p", "p.a", "p.b"]]
    src = (
        "from typing import TYPE_CHECKING\n"
        "from p import b\n"
        "if TYPE_CHECKING:\n    from q import x\n"
        "def f():\n    from p.c import y\n"
    )
    (tmp_path / "a.py").write_text(src)
    assert imports_of("p.a", tmp_path / "a.py", {"p", "p.b", "p.c", "q"}) == {"p", "p.b", "p.c"}


def test_a_package_shadows_the_script_of_its_name(tmp_path):
    for f in ("pkgx/__init__.py", "pkgx/tool.py", "pkgx/tool/__init__.py"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    assert project_modules(("pkgx",), tmp_path)["pkgx.tool"].name == "__init__.py"


def test_no_import_cycles():
    assert cycles(import_graph()) == []
