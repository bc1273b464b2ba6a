"""Qualified-name resolution from import statements, without importing anything.

`import torch.distributed as dist; dist.all_reduce` and `from torch.distributed import all_reduce
as ar; ar` both resolve to `torch.distributed.all_reduce`. Scopes are respected the way Python
does it for imports: function-level imports shadow module-level ones.

`bind_import` and `bind_from` are the one place that says which local name an import binds to
which qualified name. Two readers feed them: `add_import` here (an `ast` import node of a parsed
module, for the engine) and `project._import_table` (import lines matched in the text, for the
project index, which must not parse every file of the run: about 40 times cheaper than parsing).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from weakref import WeakKeyDictionary

Alias = tuple[str, str | None]  # (the imported name, its `as` name or None)


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


def resolve_relative(module: str | None, level: int, current_package: str) -> str:
    if level == 0:
        return module or ""
    parts = current_package.split(".") if current_package else []
    base = parts[: len(parts) - (level - 1)] if level - 1 <= len(parts) else []
    if module:
        base.append(module)
    return ".".join(base)


def bind_import(names: dict[str, str], aliases: Iterable[Alias]) -> None:
    """`import a.b as c` binds `c` to `a.b`; `import a.b` binds `a` (the name Python binds)."""
    for name, asname in aliases:
        if asname:
            names[asname] = name
        else:
            top = name.split(".", 1)[0]
            names[top] = top


def bind_from(
    names: dict[str, str], module: str | None, level: int, aliases: Iterable[Alias], current_package: str = ""
) -> None:
    """`from m import a as b` binds `b` to `m.a`; a relative `m` is resolved against
    `current_package` (with none, to its module part alone; the project index finds it beside
    the importer). `*` binds nothing that can be named."""
    base = resolve_relative(module, level, current_package)
    for name, asname in aliases:
        if name == "*":
            continue
        names[asname or name] = f"{base}.{name}" if base else name


def add_import(table: ImportTable, node: ast.Import | ast.ImportFrom, current_package: str = "") -> None:
    aliases = [(alias.name, alias.asname) for alias in node.names]
    if isinstance(node, ast.Import):
        bind_import(table.names, aliases)
    else:
        bind_from(table.names, node.module, node.level, aliases, current_package)


_NODES = "_collcheck_nodes"


def nodes_under(node: ast.AST) -> tuple[ast.AST, ...]:
    """`ast.walk(node)`, in the same order, kept on the node itself: the nodes of one function
    are asked for by several stages (the module model, class attributes, imports, closures, the
    interpreter for every run of a helper), and walking is the costliest part of asking. Kept on
    the node so that it lives exactly as long as the tree (a cache keyed by nodes would keep
    every file's tree alive); trees are never changed after parsing."""
    found: tuple[ast.AST, ...] | None = node.__dict__.get(_NODES)
    if found is None:
        found = _breadth_first(node)
        setattr(node, _NODES, found)
    return found


def forget_walks(root: ast.AST) -> None:
    """Drop the walks `nodes_under` kept on the nodes of a tree that its model no longer needs.
    Each walk holds its own node: a reference cycle, which otherwise only a full collection frees
    (with the whole tree, since a node's walk holds every node below it)."""
    for node in root.__dict__.get(_NODES) or _breadth_first(root):
        node.__dict__.pop(_NODES, None)


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """What `ast.iter_child_nodes` yields, in its order, as a list: about twice as fast (no two
    generators a node); the interpreter's stages ask it of millions of nodes a large tree."""
    children: list[ast.AST] = []
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, ast.AST):
            children.append(value)
        elif isinstance(value, list):
            children.extend(item for item in value if isinstance(item, ast.AST))
    return children


def _breadth_first(node: ast.AST) -> tuple[ast.AST, ...]:
    """What `ast.walk` yields, in its order (breadth first, fields in declaration order), about
    1.7 times faster: one list read by index instead of a deque and two generators a node."""
    found = [node]
    append = found.append
    position = 0
    while position < len(found):
        current = found[position]
        position += 1
        for name in current._fields:
            value = getattr(current, name, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        append(item)
            elif isinstance(value, ast.AST):
                append(value)
    return tuple(found)


@lru_cache(maxsize=65536)
def source_text(node: ast.AST, unreadable: str = "<expr>") -> str:
    """Source text of a node (cached: the same nodes are named again on every path), or
    `unreadable` for a tree `ast.unparse` cannot print."""
    try:
        return ast.unparse(node)
    except (ValueError, RecursionError):  # pragma: no cover - malformed synthetic trees
        return unreadable


# Calls that bind a function's arguments and hand back a callable that runs it later.
PARTIAL_CALLS = frozenset({"functools.partial", "functools.partialmethod"})


def dotted(node: ast.expr) -> list[str] | None:
    """`a.b.c` -> ["a", "b", "c"]; None for anything that is not a plain dotted name."""
    parts = dotted_parts(node)
    return list(parts) if parts is not None else None


@lru_cache(maxsize=65536)
def dotted_parts(node: ast.expr) -> tuple[str, ...] | None:
    """`dotted`, as a tuple, cached: the interpreter asks it of every call's callee (and its
    receiver) on every path through it, and the answer is a function of the tree."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return tuple(reversed(parts))
    return None


def qualified_name(node: ast.expr, table: ImportTable) -> str | None:
    """The qualified name of a dotted expression whose head is an import."""
    parts = dotted_parts(node)
    if not parts:
        return None
    head = table.lookup(parts[0])
    if head is None:
        return None
    return ".".join((head, *parts[1:]))


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


PROCESS_CONSTRUCTORS = frozenset({"Process"})


def starts_a_process(call: ast.Call) -> bool:
    """`call` builds a process object handed a `target` (the callable the new process runs)."""
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return called in PROCESS_CONSTRUCTORS and any(keyword.arg == "target" for keyword in call.keywords)


def environ_key(node: ast.Subscript, imports: ImportTable) -> str | None:
    """The key of `os.environ["KEY"]`, when `node` reads one with a literal key."""
    if qualified_name(node.value, imports) != "os.environ":
        return None
    if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    return None


_IMPORTED: WeakKeyDictionary[ast.Module, frozenset[str]] = WeakKeyDictionary()


def imported_modules(tree: ast.Module) -> frozenset[str]:
    """Every module a file imports anywhere, absolute imports only (`import torch.distributed as
    dist`: `torch.distributed`; `from torch.utils.data.distributed import DistributedSampler`: the
    module and `...DistributedSampler`)."""
    found = _IMPORTED.get(tree)
    if found is None:
        names: set[str] = set()
        for node in _statements(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        found = _IMPORTED[tree] = frozenset(names)
    return found


# What holds statements: a statement (its bodies), an `except` clause, a `case` of a `match`.
_STATEMENT_HOLDERS = (ast.stmt, ast.excepthandler, ast.match_case)


def _statements(tree: ast.Module) -> list[ast.AST]:
    """Every statement of the tree, at any depth (and the `except` and `case` clauses holding
    some), in no particular order. An import is a statement, never part of an expression: this is
    what `ast.walk` finds of them without visiting the expressions, most of a tree's nodes (the
    full walk was a tenth of a cold run of vllm)."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        found.append(node)
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                stack.extend(item for item in value if isinstance(item, _STATEMENT_HOLDERS))
    return found


def imports_under(tree: ast.Module, prefixes: Iterable[str]) -> bool:
    """The file imports a module at or under one of `prefixes` (`torch.distributed`)."""
    wanted = tuple(prefixes)
    return any(name == p or name.startswith(p + ".") for name in imported_modules(tree) for p in wanted)


# A tuple is not among them: its length is fixed, and `return time.time() > d, path` hands back
# the test itself to the caller that unpacks it.
_CONTAINERS: tuple[type[ast.AST], ...] = (ast.List, ast.Set, ast.Dict, ast.Lambda)
_CONTAINERS += (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def scalar_calls(expression: ast.expr, function: ast.AST | None = None) -> list[ast.Call]:
    """The calls whose result flows into `expression`'s value itself, not into an element of a
    container it builds: `time.time() > t` and `bool(os.path.isfile(p))` name theirs, while
    `[random.random() < p for _ in xs]` does not (the list's length is not the draws'). A name
    the function bound from such a call (`found = os.path.exists(p)`, `return found`) counts as
    the call: `function`'s single-name assignments are followed, one level."""
    outside = _outside_containers(expression)
    found = [node for node in outside if isinstance(node, ast.Call)]
    if function is not None:
        names = {node.id for node in outside if isinstance(node, ast.Name)}
        for assign in nodes_under(function):
            if isinstance(assign, ast.Assign) and len(assign.targets) == 1:
                target = assign.targets[0]
                if isinstance(target, ast.Name) and target.id in names:
                    found.extend(scalar_calls(assign.value))
    return found


def _outside_containers(expression: ast.expr) -> list[ast.AST]:
    """The nodes of `expression` that are not inside a container it builds."""
    nodes: list[ast.AST] = []
    pending: list[ast.AST] = [expression]
    while pending:
        node = pending.pop()
        if not isinstance(node, _CONTAINERS):
            nodes.append(node)
            pending.extend(child_nodes(node))
    return nodes
