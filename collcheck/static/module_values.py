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
from collcheck.static.interpret import Interpreter
from collcheck.static.model import ModuleInfo, module_body
from collcheck.static.names import nodes_under
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


def _without_mutable_globals(env: dict[str, Expr], module: ModuleInfo) -> dict[str, Expr]:
    """A module variable some function rebinds (`global _GROUP`, a lazy cache) has no known value:
    `_GROUP = None` at import time says nothing about it at the time of a call."""
    return {name: value for name, value in env.items() if name not in module.mutable_globals}


def _class_attributes(module: ModuleInfo, interpreter: Interpreter) -> None:
    """`self.rank = dist.get_rank()` in one method is the rank when read in another."""
    for class_name, info in module.classes.items():
        seen: dict[str, list[Expr]] = {}
        for method in info.methods.values():
            env = interpreter.entry_parameters(method)
            state = State(env)
            frame = Frame(method.name, class_name, (), interpreter.max_depth, ())
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
                        # `pure` runs no call, so no event is recorded here.
                        seen.setdefault(target.attr, []).append(interpreter.pure(node.value, state, frame))
        held = _groups_asked_about(seen)
        for attribute, values in seen.items():
            interesting = [
                v
                for v in values
                if is_rank_dependent(v)
                or isinstance(v, GroupVal)
                or (isinstance(v, Atom) and (v.name.startswith("type:") or v.name in held))
            ]
            if not interesting:
                continue
            if len(set(values)) == 1:
                info.attributes[attribute] = values[0]
            else:
                info.attributes[attribute] = opaque(f"self.{attribute}@{class_name}", tuple(values))


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
