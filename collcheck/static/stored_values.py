"""What an object of a class of the file holds in an attribute that its methods store from one
parameter: the memo test `if ws.rank != rank: ws.initialize(rank=rank)`.

In: the module model, the class of the object, the attribute read, the object's expression and
the function the read is in. Out: the expression of that function whose value the attribute holds
once stored (`rank` above), or None when the pattern does not hold. The class must store the
attribute only as `None` or from one parameter of one method, and every call of that method in
the file must be made in this function, on the same object, passing the same plain name. The
attribute then holds `None` (not stored yet) or what this function passed on an earlier run; the
evaluator uses it only when that value is one a process computes alike on every run (`kept_alike`:
its rank, its rank in a group) or that is the same on every rank, so the test asks only whether
it was stored yet. The attribute's name no longer decides its value (`ws.rank` is not the global
rank when the class stored a rank in a group there).
"""

from __future__ import annotations

import ast
from weakref import WeakKeyDictionary

from collcheck.static import groups
from collcheck.static.catalog_values import value_from_spec
from collcheck.static.loader import FunctionNode, ModuleInfo
from collcheck.static.names import nodes_under, source_text
from collcheck.static.receivers import passed_argument
from collcheck.static.symbolic import RANK, Atom, Expr, IfExp, is_rank_dependent
from collcheck.static.syntax import is_attribute_of

_METHOD_CALLS: WeakKeyDictionary[ModuleInfo, dict[str, list[ast.Call]]] = WeakKeyDictionary()
# (class, attribute) -> the method and parameter that store it, found once per module model
_STORES: WeakKeyDictionary[ModuleInfo, dict[tuple[str, str], tuple[FunctionNode, str] | None]] = (
    WeakKeyDictionary()
)

MAX_CHOICES = 4  # nested `a if c else b` looked into

# This process's place, fixed for its life: the values a stored copy of is still equal to.
_OWN_PLACES = (RANK, value_from_spec("local_rank", "stored"), value_from_spec("node_rank", "stored"))


def kept_alike(value: Expr, depth: int = 0) -> bool:
    """A value that, stored by a process and read back later, is what that process computes again,
    or changes on every rank alike: its rank, local rank, node rank or rank in a group, a value
    the same on every rank, or a choice between such values on a test the same on every rank
    (`tp_rank if use_tp else rank_in(group)`)."""
    if value in _OWN_PLACES or not is_rank_dependent(value):
        return True
    if isinstance(value, Atom) and value.name.startswith(groups.LOCAL_RANK_PREFIX):
        return True
    if isinstance(value, IfExp) and depth < MAX_CHOICES and not is_rank_dependent(value.test):
        return kept_alike(value.then, depth + 1) and kept_alike(value.orelse, depth + 1)
    return False


def stored_from(
    module: ModuleInfo, class_name: str, attribute: str, holder: ast.expr, function: FunctionNode | None
) -> ast.Name | None:
    """The plain name `function` passes to the one method that stores `attribute` (see above)."""
    info = module.classes.get(class_name)
    if info is None or function is None:
        return None
    stores = _STORES.setdefault(module, {})
    if (class_name, attribute) not in stores:
        stores[(class_name, attribute)] = _storing_method(info.methods, attribute)
    store = stores[(class_name, attribute)]
    if store is None:
        return None
    method, parameter = store
    params = [a.arg for a in [*method.args.posonlyargs, *method.args.args][1:]]
    holder_text = source_text(holder)
    passed: set[str] = set()
    inside = {id(n) for n in nodes_under(function)}
    for call in _method_calls(module).get(method.name, []):
        if not isinstance(call.func, ast.Attribute):  # `_method_calls` keeps method calls only
            return None
        if id(call) not in inside or source_text(call.func.value) != holder_text:
            return None
        argument = passed_argument(call, params, parameter)
        if not isinstance(argument, ast.Name):
            return None
        passed.add(argument.id)
    if len(passed) != 1:
        return None
    return ast.Name(id=passed.pop(), ctx=ast.Load())


def _method_calls(module: ModuleInfo) -> dict[str, list[ast.Call]]:
    """The file's calls of a method (`x.initialize(...)`) by the method's name; found once."""
    found = _METHOD_CALLS.get(module)
    if found is None:
        found = _METHOD_CALLS[module] = {}
        for call in nodes_under(module.tree):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
                found.setdefault(call.func.attr, []).append(call)
    return found


def _storing_method(methods: dict[str, FunctionNode], attribute: str) -> tuple[FunctionNode, str] | None:
    """The one (method, parameter) whose `self.<attribute> = parameter` is the class's only store of
    the attribute other than `None`."""
    found: set[tuple[str, str]] = set()
    for method in methods.values():
        positional = [*method.args.posonlyargs, *method.args.args]
        if not positional:
            continue
        own, params = (
            positional[0].arg,
            {a.arg for a in positional[1:]} | {a.arg for a in method.args.kwonlyargs},
        )
        for node in nodes_under(method):
            targets = _targets(node)
            if not any(is_attribute_of(t, own, attribute) for t in targets):
                continue
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if len(targets) != 1 or value is None:
                return None
            if isinstance(value, ast.Constant) and value.value is None:
                continue
            if not (isinstance(value, ast.Name) and value.id in params):
                return None
            found.add((method.name, value.id))
    if len(found) != 1:
        return None
    name, parameter = found.pop()
    return methods[name], parameter


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return [
            t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])
        ]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    return []
