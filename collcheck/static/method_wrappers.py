"""Methods a constructor replaces on the object by a wrapper: what `obj.NAME(...)` then runs.

In: the module model's classes and functions. Out: per (class, method name), a synthetic method
(`Wrapped`) whose body is the wrapper's inner function, to be run on the object in place of the
class's own method; and whether a call is the wrapper's own call of the method it wraps.

A metric or a checkpointer that must synchronise around whatever a subclass computes does it by
rebinding the method per object in `__init__`: `self.compute = self._synced(self.compute)`,
where `_synced(fn)` defines `def inner(*args, **kwargs)` that communicates and calls `fn`, and
returns `inner`. Every later `obj.compute()` runs `inner`, not the `def compute` of the class, so
that without this the collective is seen nowhere. Recognised: an assignment
`self.NAME = self.WRAP(self.NAME)` (or `WRAP(self.NAME)`, a function of the file) at the top level
of the class's `__init__` (or a base's of the file), where WRAP's last statement returns a function
it defines. The inner function's body runs as a method of the object: its `self` is the object,
and a call of WRAP's parameter (`fn(*args)`) calls the class's own method NAME. Other variables of
WRAP that the inner function reads are unknown values. Left out: wrappers of other files,
decorators from libraries (`functools.lru_cache`), and rebinding outside `__init__`.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Mapping
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from collcheck.static.module_hooks import FunctionNode, ModuleModel

# Set on the calls of the wrapped method that the wrapper's body makes: they run the class's own
# method, not the wrapper again.
ORIGINAL = "collcheck_wrapped_original"
MAX_CLASS_DEPTH = 8


@dataclass(frozen=True, eq=False)
class Wrapped:
    """`method`: the synthetic method run for `obj.NAME(...)` (the module model walks it with the
    class's methods, so that it and its callers communicate as its body says)."""

    method: ast.FunctionDef


def wrapped_methods(module: ModuleModel) -> dict[tuple[str, str], Wrapped]:
    """(class, method name) -> the wrapper its objects run, once per module model."""
    found = _TABLES.get(module)
    if found is None:
        found = {}
        for class_name, info in module.classes.items():
            init = info.methods.get("__init__")
            if init is not None:
                for name, wrapper, bound in _rebindings(init, info.methods, module.functions):
                    made = _wrapped(wrapper, name, bound)
                    if made is not None:
                        found[(class_name, name)] = made
        _TABLES[module] = found
    return found


_TABLES: WeakKeyDictionary[ModuleModel, dict[tuple[str, str], Wrapped]] = WeakKeyDictionary()


def wrapper_of(module: ModuleModel, class_name: str, name: str, depth: int = 0) -> Wrapped | None:
    """The wrapper of method `name` on objects of `class_name`, from its `__init__` or a base's."""
    table = wrapped_methods(module)
    if not table:
        return None
    found = table.get((class_name, name))
    info = module.classes.get(class_name)
    if found is not None or info is None or depth > MAX_CLASS_DEPTH or "__init__" in info.methods:
        return found  # an own `__init__` replaces the base's (a `super().__init__()` is not followed)
    for base in info.bases:
        found = wrapper_of(module, base, name, depth + 1)
        if found is not None:
            return found
    return None


def is_original_call(call: ast.Call) -> bool:
    return bool(getattr(call, ORIGINAL, False))


def _rebindings(
    init: FunctionNode, methods: Mapping[str, FunctionNode], functions: Mapping[str, FunctionNode]
) -> list[tuple[str, FunctionNode, bool]]:
    """`self.NAME = self.WRAP(self.NAME)` / `WRAP(self.NAME)` at the top level of `init`: the
    method's name, the wrapper, and whether the wrapper is a method (run on the object)."""
    arguments = [*init.args.posonlyargs, *init.args.args]
    if not arguments:
        return []
    receiver = arguments[0].arg
    found = []
    for statement in init.body:
        value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
        targets = (
            statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
        )
        if not isinstance(value, ast.Call) or len(targets) != 1 or len(value.args) != 1:
            continue
        target, argument = targets[0], value.args[0]
        if not (_is_own_attribute(target, receiver) and _is_own_attribute(argument, receiver)):
            continue
        assert isinstance(target, ast.Attribute) and isinstance(argument, ast.Attribute)
        if target.attr != argument.attr or target.attr not in methods:
            continue
        func = value.func
        bound = _is_own_attribute(func, receiver)
        if isinstance(func, ast.Attribute):
            wrapper = methods.get(func.attr) if bound else None
        else:
            wrapper = functions.get(func.id) if isinstance(func, ast.Name) else None
        if wrapper is not None:
            found.append((target.attr, wrapper, bound))
    return found


def _is_own_attribute(node: ast.expr | None, receiver: str) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == receiver


def _wrapped(wrapper: FunctionNode, name: str, bound: bool) -> Wrapped | None:
    """The synthetic method of `wrapper`'s returned inner function (None when it returns none)."""
    parameters = [a.arg for a in [*wrapper.args.posonlyargs, *wrapper.args.args]][1 if bound else 0 :]
    last = wrapper.body[-1] if wrapper.body else None
    if not parameters or not isinstance(last, ast.Return) or not isinstance(last.value, ast.Name):
        return None
    returned = last.value.id
    inner = next(
        (
            s
            for s in wrapper.body
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == returned
        ),
        None,
    )
    if inner is None:
        return None
    receiver = next(a.arg for a in [*wrapper.args.posonlyargs, *wrapper.args.args]) if bound else "self"
    wrapped_parameter = parameters[0]
    body = [_calls_original(copy.deepcopy(s), wrapped_parameter, receiver, name) for s in inner.body]
    own = [a for a in [*inner.args.posonlyargs, *inner.args.args] if not (bound and a.arg == receiver)]
    arguments = ast.arguments(
        posonlyargs=[],
        args=[ast.arg(receiver), *own],
        vararg=inner.args.vararg,
        kwonlyargs=inner.args.kwonlyargs,
        kw_defaults=inner.args.kw_defaults,
        kwarg=inner.args.kwarg,
        defaults=inner.args.defaults,
    )
    method = ast.FunctionDef(name=name, args=arguments, body=body, decorator_list=[], returns=None)
    ast.copy_location(method, inner)
    method.end_lineno, method.end_col_offset = inner.end_lineno, inner.end_col_offset
    ast.fix_missing_locations(method)
    return Wrapped(method)


def _calls_original(statement: ast.stmt, parameter: str, receiver: str, name: str) -> ast.stmt:
    """`parameter(...)` in the wrapper's body becomes `receiver.NAME(...)`, marked to run the
    class's own method."""
    for node in ast.walk(statement):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == parameter:
            node.func = ast.copy_location(
                ast.Attribute(ast.Name(receiver, ast.Load()), name, ast.Load()), node.func
            )
            ast.fix_missing_locations(node.func)
            setattr(node, ORIGINAL, True)
    return statement
