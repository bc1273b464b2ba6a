"""The configuration under which a summarised function communicates (`when` in a summary).

In: the paths of a function being summarised, split into those that issue its collectives and
those that issue none, and what counts as configuration there: the function's own parameters and,
for a method, its receiver's attributes (`self.sharded`). Out: a `Condition` — a Python expression
over those names (`validate`, `self.sharded and not offload`) that is enough for the function to
communicate (no silent path is possible under it, z3 decides), with the literal defaults of the
parameters it names — or None when no such expression over configuration alone exists (the
collectives then depend on data, and the function is left out as before).

The caller decides the condition with what it can see (`collectives.py`): the arguments it passes,
the defaults, the receiver's attributes; where it cannot, the finding names the condition.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from collcheck.static.smt import SolveStats
from collcheck.static.symbolic import Atom, BoolOp, Compare, Const, Expr, Not, Z3Translator

MAX_CANDIDATES = 16  # sub-conditions tried per function
CANDIDATE_TIMEOUT_MS = 300
_OPERATORS = frozenset({"==", "!=", "<", "<=", ">", ">="})
_NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass(frozen=True)
class Configuration:
    """What may appear in a condition: the parameters of the function (their atoms are
    `param:NAME@where`) and, for a method, `self.ATTRIBUTE`."""

    parameters: tuple[str, ...]
    where: str
    method: bool


@dataclass(frozen=True)
class Condition:
    text: str  # a Python expression over parameter names and `self.ATTRIBUTE`
    defaults: tuple[tuple[str, bool | int | float | str], ...]  # literal defaults of those parameters


def sufficient_condition(
    communicating: list[tuple[Expr, ...]],
    silent: list[tuple[Expr, ...]],
    configuration: Configuration,
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    solving: SolveStats,
) -> Condition | None:
    """The weakest disjunction of configuration sub-conditions (read off the paths' own conditions,
    and their negations) under which no silent path can be taken and some communicating one can."""
    candidates: list[Expr] = []
    for conds in (*communicating, *silent):
        for part in _parts(conds):
            if _text(part, configuration) is not None and part not in candidates:
                candidates.extend(c for c in (part, Not(part)) if c not in candidates)
    if not candidates:
        return None
    z3 = solving.z3_in_context()
    translator = Z3Translator(z3)

    def holds(expr: Expr) -> Any:
        return translator.as_bool(expr, "a")

    def any_path(paths: list[tuple[Expr, ...]]) -> Any:
        return z3.Or(*[z3.And(*[holds(c) for c in conds]) if conds else z3.BoolVal(True) for conds in paths])

    silent_any, communicating_any = any_path(silent), any_path(communicating)

    def satisfiable(*facts: Any) -> bool:
        solver = z3.Solver()
        solver.set("timeout", CANDIDATE_TIMEOUT_MS)
        solver.add(*facts, *translator.side_constraints)
        return bool(solver.check() == z3.sat)

    accepted = [
        c
        for c in candidates[:MAX_CANDIDATES]
        if not satisfiable(holds(c), silent_any) and satisfiable(holds(c), communicating_any)
    ]
    kept = _without_duplicates(accepted, holds, satisfiable, z3)  # the weakest, once each
    if not kept:
        return None
    texts = [_text(c, configuration) for c in kept]
    text = " or ".join(t if len(texts) == 1 else f"({t})" for t in texts if t is not None)
    named = {n.id for n in ast.walk(ast.parse(text, mode="eval")) if isinstance(n, ast.Name)}
    defaults = tuple((name, value) for name, value in literal_defaults(function) if name in named)
    return Condition(text, defaults)


def _without_duplicates(kept: list[Expr], holds: Any, satisfiable: Any, z3: Any) -> list[Expr]:
    """One of each group of equivalent conditions, and none implied by another."""
    result: list[Expr] = []
    for candidate in kept:
        if any(not satisfiable(holds(candidate), z3.Not(holds(other))) for other in result):
            continue  # implied by one already kept
        result = [o for o in result if satisfiable(holds(o), z3.Not(holds(candidate)))]
        result.append(candidate)
    return result


def _parts(conds: tuple[Expr, ...]) -> Iterator[Expr]:
    """Each condition and its sub-conditions (through `and`, `or`, `not`)."""
    todo = list(conds)
    while todo:
        expr = todo.pop(0)
        yield expr
        if isinstance(expr, BoolOp):
            todo.extend(expr.values)
        elif isinstance(expr, Not):
            todo.append(expr.operand)


def _text(expr: Expr, configuration: Configuration) -> str | None:
    """The condition as a Python expression over configuration names, or None when it reads
    anything else."""
    if isinstance(expr, Const) and isinstance(expr.value, (bool, int, float, str)):
        return repr(expr.value)
    if isinstance(expr, Atom):
        return _configuration_name(expr, configuration)
    if isinstance(expr, Not) and isinstance(expr.operand, Not):
        return _text(expr.operand.operand, configuration)
    if isinstance(expr, Not) and isinstance(expr.operand, Compare) and expr.operand.op in _NEGATED:
        negated = expr.operand
        return _text(Compare(_NEGATED[negated.op], negated.left, negated.right), configuration)
    if isinstance(expr, Not):
        inner = _text(expr.operand, configuration)
        return None if inner is None else f"not ({inner})" if " " in inner else f"not {inner}"
    if isinstance(expr, Compare) and expr.op in _OPERATORS:
        left, right = _text(expr.left, configuration), _text(expr.right, configuration)
        return None if left is None or right is None else f"{left} {expr.op} {right}"
    if isinstance(expr, BoolOp):
        parts = [_text(v, configuration) for v in expr.values]
        if any(p is None for p in parts):
            return None
        return f" {expr.op} ".join(f"({p})" if " " in str(p) else str(p) for p in parts)
    return None


def _configuration_name(atom: Atom, configuration: Configuration) -> str | None:
    name, _, where = atom.name.partition("@")
    if name.startswith("param:") and where == configuration.where:
        parameter = name[len("param:") :]
        return parameter if parameter in configuration.parameters else None
    attribute = name[len("self.") :] if name.startswith("self.") and not where else ""
    return f"self.{attribute}" if configuration.method and attribute.isidentifier() else None


def literal_defaults(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
) -> list[tuple[str, bool | int | float | str]]:
    """The parameters whose default is a literal, with it."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    found: list[tuple[str, bool | int | float | str]] = []
    for arg, default in pairs:
        if isinstance(default, ast.Constant) and isinstance(default.value, (bool, int, float, str)):
            found.append((arg.arg, default.value))
    return found


UNDECIDED = object()  # a name whose value the call site does not show


def decide(text: str, literal: Callable[[ast.expr], object]) -> bool | None:
    """A condition's truth at a call site, with Kleene's three values: `literal` gives each name's
    (or `self.ATTRIBUTE`'s) value, or UNDECIDED."""
    try:
        tree = _parsed(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return _truth(tree.body, literal)


@lru_cache(maxsize=256)
def _parsed(text: str) -> ast.Expression:
    return ast.parse(text, mode="eval")


def _truth(node: ast.expr, literal: Callable[[ast.expr], object]) -> bool | None:
    if isinstance(node, ast.BoolOp):
        parts = [_truth(v, literal) for v in node.values]
        settled = isinstance(node.op, ast.Or)  # the value that settles it: True for `or`
        if settled in parts:
            return settled
        return None if None in parts else not settled
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _truth(node.operand, literal)
        return None if inner is None else not inner
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = literal(node.left), literal(node.comparators[0])
        if left is UNDECIDED or right is UNDECIDED:
            return None
        return _compared(node.ops[0], left, right)
    value = literal(node)
    return None if value is UNDECIDED else bool(value)


def _compared(op: ast.cmpop, left: Any, right: Any) -> bool | None:
    try:
        if isinstance(op, ast.Eq):
            return bool(left == right)
        if isinstance(op, ast.NotEq):
            return bool(left != right)
        if isinstance(op, ast.Lt):
            return bool(left < right)
        if isinstance(op, ast.LtE):
            return bool(left <= right)
        if isinstance(op, ast.Gt):
            return bool(left > right)
        if isinstance(op, ast.GtE):
            return bool(left >= right)
    except TypeError:
        return None
    return None
