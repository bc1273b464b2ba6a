"""Hooks a class of the file registers on its own objects: what `obj.state_dict()` and `obj(x)` run.

In: the module model's classes and functions (their syntax only: the loader asks this too, before
the module model is complete). Out: per class, the hooks registered on its objects (`ClassHooks`):
for each hooked entry point of `torch.nn.Module` (`state_dict`, `load_state_dict`, the object's
call), the functions run before it and after it, in registration order.

A wrapper that gathers shards for a checkpoint does it in a state-dict hook that its constructor
registers (`self.register_state_dict_pre_hook(self._gather)`, or a helper of the file that
registers on the module it is handed: `_install_hooks(self)`); a layer that synchronises its
input does it in a forward pre-hook. torch's `Module.state_dict()` and `Module.__call__` run them,
so no line of the file calls them: without this, `model.state_dict()` on one rank is unknown code.

A hook is `self.METHOD` (a method of the class, run on the object) or a function of the file by
name; the hooked object is its first argument, the other arguments (prefix, inputs, output) are
values of no known content. Registrations are read from every method of the class and of its bases
of the file, and from a function of the file that a method calls with `self` first (the
registration on that function's first parameter). Left out: hooks registered from outside the
class (`model.register_forward_hook(fn)` in a training script), `functools.partial` hooks,
global hooks (`register_module_forward_hook`), and hooks that a later call removes
(`handle.remove()`): a hook is taken to be registered for the object's whole life.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol
from weakref import WeakKeyDictionary

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


# What this module (and method_wrappers) read of the loader's model: the loader asks them while it
# builds the model, so they describe it here instead of importing it.
class ClassModel(Protocol):
    @property
    def node(self) -> ast.ClassDef: ...
    @property
    def methods(self) -> Mapping[str, FunctionNode]: ...
    @property
    def bases(self) -> Sequence[str]: ...


class ModuleModel(Protocol):
    @property
    def classes(self) -> Mapping[str, ClassModel]: ...
    @property
    def functions(self) -> Mapping[str, FunctionNode]: ...


CALL = "__call__"  # the object called (`model(x)`): `forward` with its hooks around it


class Moment(Enum):
    BEFORE = "before"
    AFTER = "after"


# torch.nn.Module's registration methods: the entry point whose run calls the hook, and when.
REGISTRATIONS: Mapping[str, tuple[str, Moment]] = {
    "register_state_dict_pre_hook": ("state_dict", Moment.BEFORE),
    "register_state_dict_post_hook": ("state_dict", Moment.AFTER),
    "_register_state_dict_hook": ("state_dict", Moment.AFTER),
    "register_load_state_dict_pre_hook": ("load_state_dict", Moment.BEFORE),
    "_register_load_state_dict_pre_hook": ("load_state_dict", Moment.BEFORE),
    "register_load_state_dict_post_hook": ("load_state_dict", Moment.AFTER),
    "register_forward_pre_hook": (CALL, Moment.BEFORE),
    "register_forward_hook": (CALL, Moment.AFTER),
}
HOOKED_METHODS = frozenset(entry for entry, _ in REGISTRATIONS.values() if entry != CALL)
MAX_CLASS_DEPTH = 8


@dataclass(frozen=True, slots=True)
class Hook:
    """A registered hook: `method` of the class, run on the object (`bound`), or a function of
    the file by that name."""

    name: str
    bound: bool


@dataclass(frozen=True, slots=True)
class ClassHooks:
    """The hooks of one entry point of a class's objects, in the order torch runs them."""

    before: tuple[Hook, ...]
    after: tuple[Hook, ...]


def module_hook_table(
    module: ModuleModel, words: frozenset[str] | None = None
) -> dict[tuple[str, str], ClassHooks]:
    """`registered_hooks` of the module's classes, once per module model. `words`: the file's
    identifiers, when known (the loader's): a file that names no registration method (most) has
    none, found without a walk."""
    found = _TABLES.get(module)
    if found is None:
        found = {}
        if words is None or not words.isdisjoint(REGISTRATIONS):
            classes = {
                name: (info.node, [b for b in info.bases if b in module.classes])
                for name, info in module.classes.items()
            }
            found = registered_hooks(classes, module.functions)
        _TABLES[module] = found
    return found


_TABLES: WeakKeyDictionary[ModuleModel, dict[tuple[str, str], ClassHooks]] = WeakKeyDictionary()


def registered_hooks(
    classes: Mapping[str, tuple[ast.ClassDef, list[str]]], functions: Mapping[str, FunctionNode]
) -> dict[tuple[str, str], ClassHooks]:
    """(class, entry point) -> its hooks, for every class of the file (`classes`: the class's node
    and the names of its bases of the file) whose methods, or those of its bases, register some."""
    handed = {
        name: _registrations(function, _first_parameter(function)) for name, function in functions.items()
    }
    handed = {name: found for name, found in handed.items() if found}
    own: dict[str, list[tuple[str, Moment, Hook]]] = {}
    for name, (node, _) in classes.items():
        found: list[tuple[str, Moment, Hook]] = []
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                receiver = _first_parameter(statement)
                found.extend(_registrations(statement, receiver))
                found.extend(_handed_registrations(statement, receiver, handed))
        own[name] = found
    result: dict[tuple[str, str], ClassHooks] = {}
    for name in classes:
        every: list[tuple[str, Moment, Hook]] = []
        for ancestor in _lineage(name, classes):
            every.extend(own.get(ancestor, ()))
        for entry in {entry for entry, _, _ in every}:
            before = tuple(h for e, m, h in every if e == entry and m is Moment.BEFORE)
            after = tuple(h for e, m, h in every if e == entry and m is Moment.AFTER)
            result[(name, entry)] = ClassHooks(before, after)
    return result


def _lineage(name: str, classes: Mapping[str, tuple[ast.ClassDef, list[str]]]) -> list[str]:
    """The class and its bases of the file, bases first (their constructors register first)."""
    order: list[str] = []

    def visit(current: str, depth: int) -> None:
        if current in order or current not in classes or depth > MAX_CLASS_DEPTH:
            return
        for base in classes[current][1]:
            visit(base, depth + 1)
        order.append(current)

    visit(name, 0)
    return order


def _first_parameter(function: FunctionNode) -> str | None:
    arguments = [*function.args.posonlyargs, *function.args.args]
    return arguments[0].arg if arguments else None


def _registrations(function: FunctionNode, receiver: str | None) -> list[tuple[str, Moment, Hook]]:
    """`receiver.register_...(hook)` calls in `function`'s own body (not in nested functions)."""
    if receiver is None:
        return []
    found = []
    for node in _own_calls(function):
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in REGISTRATIONS and node.args):
            continue
        if not (isinstance(func.value, ast.Name) and func.value.id == receiver):
            continue
        hook = _hook(node.args[0], receiver)
        if hook is not None:
            entry, moment = REGISTRATIONS[func.attr]
            found.append((entry, moment, hook))
    return found


def _handed_registrations(
    function: FunctionNode, receiver: str | None, handed: Mapping[str, list[tuple[str, Moment, Hook]]]
) -> list[tuple[str, Moment, Hook]]:
    """The registrations of the file's functions that `function` hands its receiver to first
    (`_install_hooks(self)`): those functions register on their own first parameter. A bound hook
    there is a method of that parameter's class, unknown: only plain functions are kept."""
    if receiver is None:
        return []
    found: list[tuple[str, Moment, Hook]] = []
    for node in _own_calls(function):
        if not (isinstance(node.func, ast.Name) and node.func.id in handed and node.args):
            continue
        first = node.args[0]
        if isinstance(first, ast.Name) and first.id == receiver:
            found.extend(r for r in handed[node.func.id] if not r[2].bound)
    return found


def _hook(argument: ast.expr, receiver: str) -> Hook | None:
    if isinstance(argument, ast.Name):
        return Hook(argument.id, False)
    if (
        isinstance(argument, ast.Attribute)
        and isinstance(argument.value, ast.Name)
        and argument.value.id == receiver
    ):
        return Hook(argument.attr, True)
    return None


def _own_calls(function: FunctionNode) -> list[ast.Call]:
    """The calls of `function`'s body, nested functions and classes left out (they run later)."""
    calls: list[ast.Call] = []
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            calls.append(node)
        pending.extend(ast.iter_child_nodes(node))
    calls.sort(key=lambda call: (call.lineno, call.col_offset))
    return calls
