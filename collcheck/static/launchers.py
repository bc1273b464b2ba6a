"""Functions a process launcher starts (`mp.spawn(train, nprocs=n)`): their first parameter is
the process index, a per-rank value whatever the parameter is called (`def train(gpu, ...)`).

In: a module's tree, import table and top-level functions, the catalog's `[launchers]` table
(launcher qualified name -> the value its callable's first argument holds, `local_rank`) and,
when known, the module's text. Out: the module's functions handed to a launcher, each with that
value expression. Only functions of the same file, named directly (`mp.spawn(train, ...)` or
`fn=train`), are recognised; one imported from another file is not.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from collcheck.static.names import ImportTable, qualified_name

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def launched_functions(
    tree: ast.Module,
    imports: ImportTable,
    functions: Mapping[str, FunctionNode],
    launchers: Mapping[str, str],
    text: str | None = None,
) -> dict[FunctionNode, str]:
    """Each top-level function that a catalogued launcher starts -> the value of its first
    parameter. A text that never names a launcher is not walked (nearly every module)."""
    if not launchers or not functions:
        return {}
    last_names = {name.rsplit(".", 1)[-1] for name in launchers}
    if text is not None and not any(name in text for name in last_names):
        return {}
    found: dict[FunctionNode, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _called_name(node.func) not in last_names:
            continue
        name = qualified_name(node.func, imports)
        if name is None or name not in launchers:
            continue
        target = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "fn"), None)
        if isinstance(target, ast.Name) and target.id in functions:
            found.setdefault(functions[target.id], launchers[name])
    return found


def _called_name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""
