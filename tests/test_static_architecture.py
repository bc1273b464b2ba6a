"""The static analyzer's stages stay small and separate: no module over the size limit, no import
circle between them, and no stage reaching into another's private members (docs/architecture.md)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "collcheck"
PACKAGES = ("static", "runtime")
MODULES = sorted(path for package in PACKAGES for path in (PACKAGE_ROOT / package).glob("*.py"))
MAX_LINES = 700


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _ident(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _static_imports(path: Path, package: str = "static") -> set[str]:
    """Modules of collcheck.<package> that `path` imports, at the top or inside functions."""
    found: set[str] = set()
    dotted = f"collcheck.{package}"
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == dotted:
                found.update(alias.name for alias in node.names)
            elif node.module.startswith(dotted + "."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(dotted + "."):
                    found.add(alias.name.split(".")[2])
    return found - {path.stem}


def _defined_private(tree: ast.Module) -> set[str]:
    """Private names a module defines: top-level names, methods, and attributes it assigns."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return {name for name in names if _private(name)}


# Underscored names that are documented public API of the standard library: `ast.AST._fields`.
DOCUMENTED_PUBLIC = frozenset({"_fields"})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in DOCUMENTED_PUBLIC


@pytest.mark.parametrize("path", MODULES, ids=[_ident(p) for p in MODULES])
def test_module_is_small(path: Path) -> None:
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package: str) -> None:
    modules = sorted((PACKAGE_ROOT / package).glob("*.py"))
    graph = {path.stem: _static_imports(path, package) for path in modules}
    done: set[str] = set()

    def visit(name: str, stack: tuple[str, ...]) -> None:
        assert name not in stack, " -> ".join((*stack, name))
        if name in done:
            return
        for imported in sorted(graph.get(name, ())):
            visit(imported, (*stack, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())


@functools.cache
def _runtime_private() -> frozenset[str]:
    """Private names some runtime module defines. The runtime must reach into torch's own private
    API (`torch._C`, `c10d._get_default_store`, `sys._getframe`), so there an underscored attribute
    is another module's private member only when a runtime module is the one that defines it."""
    return frozenset(
        name for path in (PACKAGE_ROOT / "runtime").glob("*.py") for name in _defined_private(_tree(path))
    )


@pytest.mark.parametrize("path", MODULES, ids=[_ident(p) for p in MODULES])
def test_no_private_member_of_another_module(path: Path) -> None:
    tree = _tree(path)
    own = _defined_private(tree)
    ours = _runtime_private() if path.parent.name == "runtime" else None
    foreign: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("collcheck"):
            foreign.extend(a.name for a in node.names if a.name.startswith("_") and a.name != "__future__")
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            foreign.extend([f"{node.attr} (line {node.lineno})"] if ours is None or node.attr in ours else [])
    assert not foreign, foreign


def test_the_checks_see_an_import_circle_and_a_foreign_private_member(tmp_path: Path) -> None:
    """The two structural checks above fail on code that breaks them (they cannot pass vacuously)."""
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text("from collcheck.static.b import thing\n", encoding="utf-8")
    second.write_text(
        "def f(x):\n    from collcheck.static.a import other\n    return x._hidden()\n", encoding="utf-8"
    )
    assert _static_imports(first) == {"b"} and _static_imports(second) == {"a"}
    tree = _tree(second)
    reads = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    assert reads == ["_hidden"] and "_hidden" not in _defined_private(tree)
