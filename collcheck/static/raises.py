"""Exceptions the analysed code raises itself: which class a `raise` names, whether an `except`
clause catches it, and whether a function of the run may reach a `raise` of its own.

In: an `ast.Raise`, an `ast.ExceptHandler` and the module's class bases, a function of the run and
the module that defines it. Out: a class name ("" when the statement does not say which), a
verdict. Read by the handlers (`handlers.ExceptionFlow`): a handler whose exceptions come only from
`raise` statements the analysis followed is entered under the conditions of those statements, not
on some ranks only; and by the helper inliner (`helpers.HelperInliner.inline`), which runs, inside
the body of such a `try`, the helpers that may raise, so that their `raise` statements are seen
with their conditions.

Nothing here resolves a value: a `raise` is found by syntax, a callee by its name (a function of
the run, a method of the same class).
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable, Mapping

from collcheck.static.loader import FunctionNode, ModuleInfo, inherited, remote_function
from collcheck.static.names import ImportTable, add_import, nodes_under, qualified_name
from collcheck.static.symbolic import Expr, atoms

MAX_RAISE_DEPTH = 3  # calls followed from a helper to find a `raise` of its own
MAX_BASES_DEPTH = 8  # classes walked up from a raised class to a caught one
LOOP_ITEM = re.compile(r"item\d*@")  # what `loop_values.loop_element` names a loop's item


def raised_class(stmt: ast.Raise, classes: Mapping[str, object]) -> str:
    """The class `raise ValueError(...)`, `raise errors.Bad(...)` or `raise KeyError` raises; ""
    for a re-raise or a raised value (`raise error`), whose class the statement does not say."""
    exc = stmt.exc
    if exc is None:
        return ""
    target = exc.func if isinstance(exc, ast.Call) else exc
    if isinstance(target, ast.Attribute):
        name = target.attr
    elif isinstance(target, ast.Name):
        name = target.id
    else:
        return ""
    if isinstance(exc, ast.Call) or name in classes or _builtin_exception(name) is not None:
        return name
    return ""


def catches(handler: ast.ExceptHandler, raised: str, bases: Mapping[str, list[str]]) -> bool:
    """May `handler` catch an exception of class `raised`? Yes unless the names say it cannot: an
    unknown class (""), a class of another file whose bases are not known here, a handler type
    that is not a plain name may all be caught."""
    if handler.type is None or not raised:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    caught: set[str] = set()
    for node in types:
        if isinstance(node, ast.Attribute):
            caught.add(node.attr)
        elif isinstance(node, ast.Name):
            caught.add(node.id)
        else:
            return True
    return _derives(raised, caught, bases, 0)


def _derives(name: str, caught: set[str], bases: Mapping[str, list[str]], depth: int) -> bool:
    if name in caught:
        return True
    builtin = _builtin_exception(name)
    if builtin is not None:  # a built-in class derives only from built-in ones
        return any(
            (other := _builtin_exception(kind)) is not None and issubclass(builtin, other) for kind in caught
        )
    if name not in bases or depth > MAX_BASES_DEPTH:
        return True  # a class defined elsewhere: it may derive from what is caught
    return any(_derives(base.rsplit(".", 1)[-1], caught, bases, depth + 1) for base in bases[name])


def _builtin_exception(name: str) -> type[BaseException] | None:
    found = getattr(builtins, name, None)
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


def data_tests(conds: tuple[Expr, ...], held_by_module: Callable[[str], bool]) -> tuple[Expr, ...]:
    """The tests of a path to a `raise` that read data: an item of a collection a loop runs over
    (`for sample in samples`), or what a method of a local value or a library function computed
    (`sample.sum()`, `torch.load(p)`). Data may differ between ranks though the model takes it to
    be the same, so a `raise` under such a test may be taken on one rank alone. Settings,
    arguments, sizes, a plain function's result, items read by key (`config["mode"]`) and methods
    of what the module holds (`platform.supports(...)`, `self.config.get(...)`) are not data.
    `held_by_module`: whether a name is the module's (a global, an import, `self`)."""
    return tuple(test for test in conds if _reads_data(test, held_by_module))


def _reads_data(test: Expr, held_by_module: Callable[[str], bool]) -> bool:
    for atom in atoms(test):
        if LOOP_ITEM.match(atom.name):
            return True
        if atom.name.startswith("call:"):
            called = atom.name[5:].split("(", 1)[0]
            if "." in called and not held_by_module(called.split(".", 1)[0]):
                return True
    return False


def may_raise(
    function: FunctionNode, owner: ModuleInfo, known: dict[FunctionNode, bool], depth: int = 0
) -> bool:
    """`function` holds a `raise` of a class it names, or calls a function of the run that does (by
    its name, or as a method of its own class), up to MAX_RAISE_DEPTH calls deep. `known`: the
    answers so far (a function on the current chain counts as not raising until it is answered)."""
    if function in known:
        return known[function]
    known[function] = False
    found = any(isinstance(node, ast.Raise) and node.exc is not None for node in nodes_under(function))
    if not found and depth < MAX_RAISE_DEPTH:
        found = any(
            may_raise(callee, module, known, depth + 1) for module, callee in _callees(function, owner)
        )
    if found or depth == 0:
        known[function] = found  # a callee cut off by the depth is asked again from nearer
    else:
        del known[function]
    return found


def _callees(function: FunctionNode, owner: ModuleInfo) -> list[tuple[ModuleInfo, FunctionNode]]:
    """The functions of the run that `function` calls by name or as `self.method(...)`, as the
    resolver finds them (another file's only when it communicates, reads the rank or may raise)."""
    table: ImportTable | None = None
    class_name = next(
        (name for name, info in owner.classes.items() if function in info.methods.values()), None
    )
    found: list[tuple[ModuleInfo, FunctionNode]] = []
    for node in nodes_under(function):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in owner.functions:
            found.append((owner, owner.functions[func.id]))
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
            and class_name is not None
        ):
            method = inherited(owner, class_name, func.attr, lambda info: info.methods)
            if method is not None:
                found.append((owner, method))
        elif owner.project is not None:
            if table is None:
                table = _function_imports(function, owner)
            name = qualified_name(func, table)
            # Only the files the resolver would open too (a verdict depends on no other file).
            last = name.rsplit(".", 1)[-1] if name is not None else ""
            followed = owner.project.may_follow(last) or owner.project.may_raise(last)
            located = remote_function(owner, name, communicating_only=False) if followed and name else None
            if located is not None:
                found.append(located)
    return found


def _function_imports(function: FunctionNode, owner: ModuleInfo) -> ImportTable:
    """The module's import table with the imports written inside `function`."""
    table = owner.imports.child()
    for node in nodes_under(function):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            add_import(table, node)
    return table
