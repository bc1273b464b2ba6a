"""Qualified-name resolution from import statements, without importing anything.

`import torch.distributed as dist; dist.all_reduce` and `from torch.distributed import all_reduce
as ar; ar` both resolve to `torch.distributed.all_reduce`. Scopes are respected the way Python
does it for imports: function-level imports shadow module-level ones.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass
class ImportTable:
    """Local name -> qualified name, for one scope (module or function)."""

    names: dict[str, str] = field(default_factory=dict)
    parent: ImportTable | None = None

    def lookup(self, name: str) -> str | None:
        table: ImportTable | None = self
        while table is not None:
            if name in table.names:
                return table.names[name]
            table = table.parent
        return None

    def child(self) -> ImportTable:
        return ImportTable(parent=self)


def package_of(module_name: str, is_package: bool) -> str:
    return module_name if is_package else module_name.rpartition(".")[0]


def resolve_relative(module: str | None, level: int, current_package: str) -> str:
    if level == 0:
        return module or ""
    parts = current_package.split(".") if current_package else []
    base = parts[: len(parts) - (level - 1)] if level - 1 <= len(parts) else []
    if module:
        base.append(module)
    return ".".join(base)


def add_import(table: ImportTable, node: ast.Import | ast.ImportFrom, current_package: str = "") -> None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                table.names[alias.asname] = alias.name
            else:
                top = alias.name.split(".", 1)[0]
                table.names[top] = top
        return
    base = resolve_relative(node.module, node.level, current_package)
    for alias in node.names:
        if alias.name == "*":
            continue
        table.names[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name


def dotted(node: ast.expr) -> list[str] | None:
    """`a.b.c` -> ["a", "b", "c"]; None for anything that is not a plain dotted name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


def qualified_name(node: ast.expr, table: ImportTable) -> str | None:
    """The qualified name of a dotted expression whose head is an import."""
    parts = dotted(node)
    if not parts:
        return None
    head = table.lookup(parts[0])
    if head is None:
        return None
    return ".".join([head, *parts[1:]])


def module_imports(tree: ast.Module, current_package: str = "") -> ImportTable:
    """Imports at module level, including those nested in `if`/`try` blocks (e.g. TYPE_CHECKING)."""
    table = ImportTable()
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            add_import(table, node, current_package)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            stack.extend(ast.iter_child_nodes(node))  # type: ignore[arg-type]
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)
    return table
