"""Nested functions handed to code collcheck cannot see, analysed as roots of their own.

In: an analysed function (the *outer* one), a function defined in its body (the *inner* one) and
the interpreter states that reached the `def`. Out: whether the inner function escapes (its name
is used other than as the callee of a direct call: passed as an argument, returned, stored,
decorated) and, for one that does, a `Closure`: the outer function's variables the inner one can
read, and the condition under which it exists.

Why: `recursively_apply(_gather_one, data)`, `return loss_func`, `study.optimize(objective)`
hand the function to unknown code; at the outer function's call the interpreter records only
that a callback ran (`handoff.callback_event`), so a divergence inside the function's own body is
seen nowhere else. A nested function that is only called directly is inlined at its calls and is
not a root.

Soundness of what the closure keeps. Python reads a closure variable when the inner function
runs, not when it is defined, so a variable the outer function assigns again at or after the
`def` (or anywhere in a loop around it) may hold another value by then: such names are left out,
and read as unknown values the same on every rank. The condition is the part of the path
condition that every path reaching the `def` shares: a function defined only under
`if rank == 0:` exists on rank 0 only, so only ranks that satisfy it can run it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from collcheck.static.loader import FunctionNode
from collcheck.static.names import nodes_under
from collcheck.static.state import State, common_prefix, merge_envs
from collcheck.static.symbolic import Expr

MAX_NESTING = 3  # functions nested deeper than this in an analysed function are not roots


@dataclass(frozen=True)
class Closure:
    """What a nested root starts from: the outer function, the variables it can read from it, the
    condition under which it exists, and its sibling nested functions (callable by name)."""

    outer: FunctionNode
    env: dict[str, Expr]
    conds: tuple[Expr, ...]
    siblings: dict[str, FunctionNode] = field(default_factory=dict)
    depth: int = 1


def escapes(outer: FunctionNode, inner: FunctionNode) -> bool:
    """`inner` leaves `outer` by name (an argument, a return value, a stored value) or through a
    decorator; a name that only ever appears as the callee of a call does not."""
    if inner.decorator_list:
        return True
    callees = {id(node.func) for node in nodes_under(outer) if isinstance(node, ast.Call)}
    for node in nodes_under(outer):
        if (
            isinstance(node, ast.Name)
            and node.id == inner.name
            and isinstance(node.ctx, ast.Load)
            and id(node) not in callees
        ):
            return True
    return False


def late_bound_names(outer: FunctionNode, inner: FunctionNode) -> set[str]:
    """Names of `outer` that may hold another value when `inner` runs than at its `def`: stored at
    or after the `def`, or anywhere in a loop of `outer` that contains it."""
    names: set[str] = set()
    for node in nodes_under(outer):
        if _stored(node) and getattr(node, "lineno", 0) >= inner.lineno:
            names.update(_stored(node))
    for loop in _loops_around(outer, inner):
        for node in nodes_under(loop):
            names.update(_stored(node))
    return names


def _stored(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return [node.id]
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.alias):
        return [(node.asname or node.name).split(".")[0]]
    return []


def _loops_around(outer: FunctionNode, inner: FunctionNode) -> list[ast.stmt]:
    loops: list[ast.stmt] = []
    for node in nodes_under(outer):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and any(
            n is inner for n in nodes_under(node)
        ):
            loops.append(node)
    return loops


def closure_of(
    outer: FunctionNode,
    inner: FunctionNode,
    states: list[State],
    siblings: dict[str, FunctionNode],
    depth: int = 1,
) -> Closure:
    """The closure of `inner` from the states that reached its `def` (at least one)."""
    env = merge_envs(states)
    for name in late_bound_names(outer, inner):
        env.pop(name, None)
    env.pop(inner.name, None)
    return Closure(outer, env, common_prefix([state.conds for state in states]), dict(siblings), depth)
