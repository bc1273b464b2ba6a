"""Attributes of objects built with per-rank keyword arguments.

`pbar = tqdm(total=n, disable=not is_main)`: the bar is disabled on every rank but the main one,
and `pbar.disable` reads that keyword's value. An object made by a call with a keyword argument
whose value differs between ranks exposes that value as the attribute of the same name (a
constructor keeping its arguments: the common case). Keywords whose value is the same on every
rank are not recorded, so nothing changes for them; binding the name again forgets what was
recorded for it.

A catalogued constructor (`[disabled_counters]`: `"tqdm.tqdm" = "disable:n"`) adds the counter
that such an object keeps still while disabled: `bar.n` is 0 on the ranks where `disable` holds
(tqdm's update() returns at once there) and moves on the others, so `while bar.n < total:` around
a collective runs a different number of times.

In: an assignment the interpreter has just bound, its path `State` and `Frame`. Out: entries
`name.keyword` in `state.env` (where the value evaluator reads dotted names first).

Containers kept in attributes (`self.pending.append(x)`, `self.seen[key] = value`): after such a
change the attribute holds another value, made of the old one and what was put in
(`record_container_change`, and `ValueEvaluator.bind` for a subscript). Changed on some ranks
only (under a rank-dependent condition, or with a per-rank value), the attribute then differs
between ranks where another method reads it (`if not self.pending: return`).
"""

from __future__ import annotations

import ast
from functools import lru_cache

from collcheck.static.loader import FunctionNode, ModuleInfo
from collcheck.static.names import dotted, qualified_name
from collcheck.static.receivers import CONTAINER_MUTATORS
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import Atom, Const, Expr, IfExp, TupleVal, is_rank_dependent, opaque
from collcheck.static.values import ValueEvaluator

# Not an identifier: never a dotted name of the analysed code. Lists the attributes recorded for
# a name, so that rebinding it forgets exactly those without scanning the whole environment.
_RECORDED = "{}.*"


def forget_keyword_attributes(env: dict[str, object], name: str) -> None:
    recorded = env.pop(_RECORDED.format(name), None)
    if isinstance(recorded, TupleVal):
        for item in recorded.items:
            env.pop(f"{name}.{item.value}" if isinstance(item, Const) else "", None)
    elif recorded is not None:  # merged from two branches: the list is lost, look for every one
        for key in [key for key in env if key.startswith(f"{name}.")]:
            del env[key]


def record_keyword_attributes(
    evaluator: ValueEvaluator, stmt: ast.Assign, state: State, frame: Frame
) -> None:
    """After `name = f(..., keyword=value)` (or `self.name = ...`): `name.keyword` is `value`
    where that differs between ranks; what was recorded for `name` before is forgotten."""
    names = [".".join(parts) for parts in map(dotted, stmt.targets) if parts]
    for name in names:
        forget_keyword_attributes(state.env, name)  # type: ignore[arg-type]
    if not names or not isinstance(stmt.value, ast.Call):
        return
    attributes: dict[str, Expr] = {}
    kept = _kept_arguments(evaluator.module, stmt.value) | catalog_kept_arguments(evaluator, stmt.value)
    for keyword in stmt.value.keywords:
        if keyword.arg is None:
            continue
        value = evaluator.pure(keyword.value, state, frame)
        if is_rank_dependent(value) or (keyword.arg in kept and _is_literal(value)):
            attributes[keyword.arg] = value
    attributes.update(_still_counter(evaluator, stmt.value, attributes, names[0]))
    for attribute, value in attributes.items():
        for name in names:
            state.env[f"{name}.{attribute}"] = value
    recorded = list(attributes)
    if recorded:
        for name in names:
            state.env[_RECORDED.format(name)] = TupleVal(tuple(Const(arg) for arg in recorded))


def _is_literal(value: Expr) -> bool:
    return isinstance(value, Const) and (
        value.value is None or isinstance(value.value, (bool, int, float, str))
    )


def catalog_kept_arguments(evaluator: ValueEvaluator, call: ast.Call) -> frozenset[str]:
    """The keywords a catalogued (summarised) class's constructor keeps as attributes of the same
    names (`[kept_arguments]`), for `call` when it builds one."""
    qualified = qualified_name(call.func, evaluator.local_imports)
    if qualified is None or qualified not in evaluator.catalog.types:
        return frozenset()
    kept = evaluator.catalog.kept_arguments.get(evaluator.catalog.types[qualified] or qualified, "")
    return frozenset(filter(None, kept.split(",")))


def _kept_arguments(module: ModuleInfo, call: ast.Call) -> frozenset[str]:
    """For `Timer(sync=False)` of a class of the file: `kept_constructor_arguments`."""
    if not isinstance(call.func, ast.Name) or call.func.id not in module.classes:
        return frozenset()
    return kept_constructor_arguments(module, call.func.id)


def kept_constructor_arguments(module: ModuleInfo, class_name: str) -> frozenset[str]:
    """The parameters the class's `__init__` stores, as they are, in the attribute of the same name
    (`self.sync = sync`, one assignment of that attribute in `__init__`, at its top level, the
    parameter never rebound there), that no other method of the class changes and no base of the
    file's own may set: the object's configuration a caller shows by the keyword it passes (a `with
    timer:` whose `__exit__` tests `self.sync`)."""
    info = module.classes[class_name]
    init = info.methods.get("__init__")
    if init is None or any(base.rsplit(".", 1)[-1] in module.classes for base in info.bases):
        return frozenset()  # a base of the file's own may set the attribute too
    # An attribute another method may change (`timer.enable_sync()`) is not the constructor's.
    changed = {
        node.attr
        for name, method in info.methods.items()
        if name != "__init__"
        for node in ast.walk(method)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del))
    }
    return _stored_parameters(init) - changed


@lru_cache(maxsize=512)
def _stored_parameters(init: FunctionNode) -> frozenset[str]:
    args = init.args
    parameters = {a.arg for a in [*args.posonlyargs, *args.args[1:], *args.kwonlyargs]}
    stores: dict[str, int] = {}
    rebound: set[str] = set()
    for node in ast.walk(init):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and dotted(node.value) == ["self"]
        ):
            stores[node.attr] = stores.get(node.attr, 0) + 1
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            rebound.add(node.id)
    kept = set()
    for stmt in init.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Name)):
            continue
        target, name = stmt.targets[0], stmt.value.id
        if (
            isinstance(target, ast.Attribute)
            and dotted(target.value) == ["self"]
            and target.attr == name
            and name in parameters
            and name not in rebound
            and stores.get(name) == 1
        ):
            kept.add(name)
    return frozenset(kept)


def _still_counter(
    evaluator: ValueEvaluator, call: ast.Call, keywords: dict[str, Expr], name: str
) -> dict[str, Expr]:
    """`bar = tqdm(..., disable=D)` with a per-rank D (catalog `[disabled_counters]`): `bar.n` is 0
    where D holds (a disabled bar never counts) and moves elsewhere."""
    qualified = qualified_name(call.func, evaluator.local_imports)
    spec = evaluator.catalog.disabled_counters.get(qualified) if qualified else None
    if spec is None:
        return {}
    keyword, _, attribute = spec.partition(":")
    disabled = keywords.get(keyword)
    if disabled is None:
        return {}
    moving = Atom(f"counter:{name}.{attribute}@{call.lineno}:{call.col_offset}", "shared")
    return {attribute: IfExp(disabled, Const(0), moving)}


def record_container_change(evaluator: ValueEvaluator, node: ast.expr, state: State, frame: Frame) -> None:
    """`self.pending.append(x)` as a statement: the attribute (a dotted name of two parts or more:
    not a local variable) holds a changed container from here on."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CONTAINER_MUTATORS
    ):
        return
    parts = dotted(node.func.value)
    if not parts or len(parts) < 2:
        return
    key = ".".join(parts)
    old = evaluator.pure(node.func.value, state, frame)
    if isinstance(old, Atom) and old.name.startswith(("type:", "object:", "instance:")):
        return  # an object of a known type: its own methods, not a container
    # Made of the old container only: what is put in may differ between ranks (each rank's own
    # tensor) while whether and how often the container changes does not.
    where = f"{node.lineno}:{node.col_offset}"
    state.env[key] = opaque(f"changed:{key}@{where}", (old,))
