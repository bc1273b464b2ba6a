"""Module-level values: a module's globals and the attributes its classes set on `self`.

In: a `ModuleInfo` from `model.build_module`. Out: the same model with `globals` (module-level
constants and groups, from running its top-level code without recording events) and each class's
`attributes` (`self.rank = dist.get_rank()` in one method is the rank when read in another)
filled in. `complete_loaded_module` is what `model.Loader` is given to do this for other files.
"""

from __future__ import annotations

import ast

from collcheck.config import Settings
from collcheck.static.groups import LOCAL_RANK_PREFIX, SIZE_PREFIX
from collcheck.static.inferred_types import infer_attribute
from collcheck.static.interpret import Interpreter
from collcheck.static.loader import FunctionNode, ModuleInfo, module_body, parameter_defaults
from collcheck.static.names import nodes_under
from collcheck.static.receivers import (
    EXACT,
    FUNCTION,
    MAX_SITES,
    SUBCLASS,
    bound_once,
    call_sites,
    function_value,
    object_class,
    object_value,
    passed_argument,
    used_attribute_object,
)
from collcheck.static.roles import ROLE_PREFIX, picks_p2p_role, stores
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import Atom, Expr, GroupVal, atoms, is_rank_dependent, opaque


def complete_module(module: ModuleInfo, interpreter: Interpreter) -> None:
    """Fill `module.globals` (module-level constants and groups) and its classes' attributes, by
    running its top-level code with `interpreter` without recording events."""
    setup = module_body(module.tree)[0]
    module.globals.update(_without_mutable_globals(interpreter.module_environment(setup), module))
    _class_attributes(module, interpreter)


def complete_loaded_module(module: ModuleInfo, settings: Settings) -> None:
    """`complete_module` for another file of the run, with an interpreter of its own."""
    interpreter = Interpreter(module, settings.max_paths, settings.max_inline_depth, settings.max_steps)
    complete_module(module, interpreter)
    interpreter.release()


def _without_mutable_globals(env: dict[str, Expr], module: ModuleInfo) -> dict[str, Expr]:
    """A module variable some function rebinds (`global _GROUP`, a lazy cache) has no known value:
    `_GROUP = None` at import time says nothing about it at the time of a call."""
    return {name: value for name, value in env.items() if name not in module.mutable_globals}


def _class_attributes(module: ModuleInfo, interpreter: Interpreter) -> None:
    """`self.rank = dist.get_rank()` in one method is the rank when read in another; so is
    `self.stage = stage` in `__init__` where every construction of the class in this file passes
    a per-rank value, or an object of one class of the file, for `stage` (see `receivers`)."""
    sites = ConstructionSites(module, interpreter)
    for class_name, info in module.classes.items():
        seen: dict[str, list[Expr]] = {}
        for method in info.methods.values():
            stores = _self_stores(method)
            if not stores:
                continue  # its parameters' values (the costly part) would go unused
            env = interpreter.entry_parameters(method)
            state = State(env)
            frame = Frame(method.name, class_name, (), interpreter.max_depth, ())
            for node, target in stores:
                # `pure` runs no call, so no event is recorded here.
                value = interpreter.pure(node.value, state, frame)
                if method.name == "__init__" and isinstance(node.value, ast.Name):
                    value = (
                        sites.argument(class_name, method, node.value.id)
                        or sites.injected(class_name, info.node, method, node.value.id, target.attr)
                        or sites.default_function(class_name, info.node, method, node.value.id, target.attr)
                        or value
                    )
                seen.setdefault(target.attr, []).append(value)
        held = _groups_asked_about(seen)
        for attribute, values in seen.items():
            if len(values) == 1:  # `self.engine = build_engine(cfg)`: its class told by its use
                values = [infer_attribute(module, info.node, attribute, values[0])]
            interesting = [v for v in values if _interesting(v) or (isinstance(v, Atom) and v.name in held)]
            if not interesting:
                continue
            if len(set(values)) == 1:
                info.attributes[attribute] = values[0]
            else:
                info.attributes[attribute] = opaque(f"self.{attribute}@{class_name}", tuple(values))


def _self_stores(method: FunctionNode) -> list[tuple[ast.Assign | ast.AnnAssign, ast.Attribute]]:
    """`self.attr = value` in `method`: each assignment with a value and its `self.attr` targets,
    in `ast.walk` order."""
    found: list[tuple[ast.Assign | ast.AnnAssign, ast.Attribute]] = []
    for node in nodes_under(method):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                found.append((node, target))
    return found


def _groups_asked_about(seen: dict[str, list[Expr]]) -> set[str]:
    """The keys of the groups whose local rank or size some attribute holds: `self.pp_rank =
    dist.get_rank(pp_group)` next to `self.pp_group = pp_group` makes the attribute that group (one
    key), so that `dist.barrier(self.pp_group)` after `if self.pp_rank != 0: return` is seen to be
    guarded by the rank inside its own group."""
    keys: set[str] = set()
    for values in seen.values():
        for value in values:
            for atom in atoms(value):
                for prefix in (LOCAL_RANK_PREFIX, SIZE_PREFIX):
                    if atom.name.startswith(prefix):
                        keys.add(atom.name[len(prefix) :])
    return keys


KEPT_ATOMS = ("type:", EXACT, SUBCLASS, SIZE_PREFIX, FUNCTION)  # the atoms `_interesting` keeps


def _interesting(value: Expr) -> bool:
    """Worth keeping as a class attribute: per-rank, a group, a group's size (what its local ranks
    count up to: `(self.pp_rank + 1) % self.pp_size`), an object of a known type, or a function of
    the file (`self.gather_fn = gather_all`, called later as `self.gather_fn(x)`)."""
    return (
        is_rank_dependent(value)
        or isinstance(value, GroupVal)
        or (isinstance(value, Atom) and value.name.startswith(KEPT_ATOMS))
    )


class ConstructionSites:
    """The calls of a file's own classes (`Stage(pp_rank=...)`), found once the first time one is
    asked for: what a constructor's parameter holds when every call in the file agrees on it."""

    def __init__(self, module: ModuleInfo, interpreter: Interpreter) -> None:
        self.module = module
        self.interpreter = interpreter

    def argument(self, class_name: str, init: FunctionNode, parameter: str) -> Expr | None:
        """The value every construction of `class_name` in the file passes for `parameter` of its
        `__init__`, when that is per-rank (each value) or an object of one class of the file."""
        params = [a.arg for a in [*init.args.posonlyargs, *init.args.args]][1:]
        keyword_only = {a.arg for a in init.args.kwonlyargs}
        if parameter not in params and parameter not in keyword_only:
            return None
        sites = call_sites(self.module).get(class_name, [])
        values: list[Expr] = []
        for call, function in sites[:MAX_SITES]:
            node = passed_argument(call, params, parameter)
            if node is None:
                return None
            values.append(self._value(node, function))
        if not values or len(sites) > MAX_SITES:
            return None
        if all(is_rank_dependent(v) for v in values):
            return (
                values[0]
                if len(set(values)) == 1
                else opaque(f"init:{class_name}.{parameter}", tuple(values))
            )
        if len(set(values)) == 1 and _interesting(values[0]):  # a group, a catalogued type
            return values[0]
        owners = {object_class(self.module, v) for v in values}
        owner = owners.pop() if len(owners) == 1 else None
        if owner is not None:
            return object_value(self.module, owner.name, f"init:{class_name}.{parameter}", owner.exact)
        return None

    def injected(
        self, class_name: str, owner: ast.ClassDef, init: FunctionNode, parameter: str, attribute: str
    ) -> Expr | None:
        """A constructor's parameter kept as `self.<attribute>` where the file never builds the class
        (its origin is unknown): what the class's own use of the attribute says it is. A number whose
        tests pick this process's part in point-to-point transfers is this process's own
        (`roles.picks_p2p_role`); an object used as exactly one class of the file is one of it
        (`receivers.used_attribute_object`). Else None."""
        arguments = init.args
        named = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
        if call_sites(self.module).get(class_name) or parameter not in named:
            return None
        if stores(owner, attribute) != 1:  # set again elsewhere: not only the constructor's
            return None
        if picks_p2p_role(owner, attribute, self.module.imports, self.module.catalog):
            return Atom(f"{ROLE_PREFIX}self.{attribute}@{class_name}", "perrank", lower=0)
        return used_attribute_object(self.module, class_name, attribute)

    def default_function(
        self, class_name: str, owner: ast.ClassDef, init: FunctionNode, parameter: str, attribute: str
    ) -> Expr | None:
        """A constructor's parameter kept as `self.<attribute>` whose default is a function of the
        file (`gather_fn=gather_all`), where no construction in the file passes another: the
        attribute holds that function, so `self.<attribute>(x)` runs it (and what it does with
        `x`, combining it across ranks, is known). A class the file builds with another callable,
        or that stores the attribute again elsewhere, is not read so. Else None."""
        default = parameter_defaults(init).get(parameter)
        if not isinstance(default, ast.Name) or default.id not in self.module.functions:
            return None
        if self.module.imports.lookup(default.id) is not None or stores(owner, attribute) != 1:
            return None
        params = [a.arg for a in [*init.args.posonlyargs, *init.args.args]][1:]
        sites = call_sites(self.module).get(class_name, [])
        if len(sites) > MAX_SITES or any(passed_argument(call, params, parameter) for call, _ in sites):
            return None
        return function_value(self.module, default.id)

    def _value(self, node: ast.expr, function: FunctionNode | None) -> Expr:
        """The argument's value: an expression, or a name the calling function binds once
        (`stage = get_stage(); Stage(stage)`)."""
        interpreter = self.interpreter
        env = interpreter.entry_parameters(function) if function is not None else {}
        frame = Frame(function.name if function else "<module>", None, (), interpreter.max_depth, ())
        if isinstance(node, ast.Name) and node.id not in env:
            node = bound_once(function, node.id) or node
        return interpreter.pure(node, State(dict(env)), frame)
