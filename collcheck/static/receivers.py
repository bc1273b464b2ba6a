"""Receivers' classes: which class of the file an object is an instance of, and which method a
call on it runs.

In: a symbolic value, a call, an annotation or a function of the module model. Out: object values
and the method a call on one of them runs.

An object of a class of the analysed file is a shared `Atom` named after its class and where it
was made: `object:<path>::<Class>@<where>` when the class is exact (`Syncer()` built here), and
`instance:<path>::<Class>@<where>` when it may be a subclass (an annotated parameter `s: Syncer`,
a factory's declared return type, an object handed to a constructor). Such values travel like any
other (assignments, arguments of inlined helpers, `self.x = ...` in `__init__`), so a receiver's
class is the class of the value it holds where the call is made. The path in the name keeps an
object of one file from being read as a class of the same name in another file: only classes of
the file whose runner reads the value are dispatched to (classes of other files are not
followed).

Dispatch: the method is looked up in the class and its bases of the file (`model.inherited`).
When the object may be a subclass and a subclass of the file overrides the method, the call is
not followed: the candidates may issue different collectives, and following one would report a
divergence the other override may not have (precision first; the call stays unknown code).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache

from collcheck.static.model import FunctionNode, ModuleInfo, inherited
from collcheck.static.names import ImportTable
from collcheck.static.symbolic import Atom, Expr

EXACT = "object:"
SUBCLASS = "instance:"
MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})


@dataclass(frozen=True, slots=True)
class ObjectClass:
    """The class of the file an object belongs to; `exact`: not a subclass of it."""

    name: str
    exact: bool


def object_value(module: ModuleInfo, class_name: str, where: str, exact: bool) -> Atom:
    prefix = EXACT if exact else SUBCLASS
    return Atom(f"{prefix}{module.path}::{class_name}@{where}", "shared")


def object_class(module: ModuleInfo, value: Expr | None) -> ObjectClass | None:
    """The class of `module` that `value` is an object of, if it is one."""
    if not isinstance(value, Atom):
        return None
    name = value.name
    if name.startswith(EXACT):
        exact, rest = True, name[len(EXACT) :]
    elif name.startswith(SUBCLASS):
        exact, rest = False, name[len(SUBCLASS) :]
    else:
        return None
    held = rest.rpartition("@")[0]
    path, _, class_name = held.rpartition("::")
    if path != module.path or class_name not in module.classes:
        return None
    return ObjectClass(class_name, exact)


def class_named(module: ModuleInfo, imports: ImportTable, node: ast.expr) -> str | None:
    """The class of the file `node` names (not shadowed by an import)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # `s: "Syncer"`
        return node.value if node.value in module.classes and imports.lookup(node.value) is None else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # `Syncer | None`
        sides = [class_named(module, imports, side) for side in (node.left, node.right)]
        named = [side for side in sides if side is not None]
        others = [s for s in (node.left, node.right) if not _is_none(s)]
        return named[0] if len(named) == 1 and len(others) == 1 else None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Optional":
        return class_named(module, imports, node.slice)
    if isinstance(node, ast.Name) and node.id in module.classes and imports.lookup(node.id) is None:
        return node.id
    return None


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def factory_class(module: ModuleInfo, imports: ImportTable, function: FunctionNode) -> str | None:
    """The class a function of the file returns an instance of: its declared return type, or the
    one class every `return` of its own body constructs (`return Syncer(...)`)."""
    if function.returns is not None:
        return class_named(module, imports, function.returns)
    found: set[str | None] = set()
    for node in _own_nodes(function):
        if isinstance(node, ast.Return):
            value = node.value
            built = class_named(module, imports, value.func) if isinstance(value, ast.Call) else None
            found.add(built)
        elif isinstance(node, (ast.Yield, ast.YieldFrom)):
            return None
    return next(iter(found)) if len(found) == 1 else None


def _own_nodes(function: FunctionNode) -> list[ast.AST]:
    """The nodes of `function`'s body, not of the functions and classes defined inside it."""
    nodes: list[ast.AST] = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        nodes.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return nodes


def method_of(module: ModuleInfo, owner: ObjectClass, name: str) -> FunctionNode | None:
    """The method `name` a call on an object of `owner` runs, or None (not defined in the file, or
    overridden by a subclass the object may be)."""
    found: FunctionNode | None = inherited(module, owner.name, name, lambda info: info.methods)
    if found is None or owner.exact:
        return found
    for other, info in module.classes.items():
        if other != owner.name and name in info.methods and _derives_from(module, other, owner.name):
            return None
    return found


def call_method(module: ModuleInfo, owner: ObjectClass, module_bases: frozenset[str]) -> FunctionNode | None:
    """What calling the object itself runs (`model(x)`): its `__call__`, or the `forward` of a
    torch module (`module_bases`: the framework classes the class derives from)."""
    found = method_of(module, owner, "__call__")
    if found is not None:
        return found
    if module_bases & MODULE_BASES:
        return method_of(module, owner, "forward")
    return None


def _derives_from(module: ModuleInfo, class_name: str, base: str, depth: int = 0) -> bool:
    info = module.classes.get(class_name)
    if info is None or depth > 16:
        return False
    return base in info.bases or any(_derives_from(module, b, base, depth + 1) for b in info.bases)


@lru_cache(maxsize=4096)
def writes_own_state(function: FunctionNode) -> bool:
    """The method stores an attribute of its first parameter (`self.seen = True`, `self.n += 1`)."""
    args = [*function.args.posonlyargs, *function.args.args]
    if not args:
        return False
    first = args[0].arg
    for node in _own_nodes(function):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == first
        ):
            return True
    return False
