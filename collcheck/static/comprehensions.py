"""The value of a filtered list comprehension: `[f(t) for t in items if pred(t)]`.

In: the comprehension node and the evaluator that asks it (`values.ValueEvaluator`). Out: a
`Sized` whose length is named after the value of the list filtered and the text of the predicate
(the loop variable written `_`). Two comprehensions that filter the same list with the same
predicate have the same length wherever they are written; two that filter it with different
predicates have lengths that may differ, which is what a sender and a receiver of a list of
tensors must agree on (`p2p_schedule`). Comprehensions over `range(...)` (rank lists), and
those whose list or predicate reads a per-rank value, keep the evaluator's generic opaque value,
as does any other comprehension.
"""

from __future__ import annotations

import ast
from typing import Protocol

from collcheck.static.state import Frame, State
from collcheck.static.symbolic import Atom, Expr, Sized, opaque

FILTERED = "len:filter("  # the prefix of a filtered length's name
MAX_NAME = 300  # longer names (a list built from a large expression) fall back to the generic value


class Evaluator(Protocol):
    def pure(
        self, node: ast.expr | None, state: State, frame: Frame, known: dict[int, Expr] | None = None
    ) -> Expr: ...

    def trip_count(
        self, node: ast.expr, iterable: Expr, state: State, frame: Frame, known: dict[int, Expr] | None = None
    ) -> Expr: ...


def filtered_list(
    evaluator: Evaluator, node: ast.ListComp, state: State, frame: Frame, known: dict[int, Expr] | None
) -> Expr:
    """The comprehension's value (see the module)."""
    generator = node.generators[0] if len(node.generators) == 1 else None
    if generator is not None and _maps_a_sequence(generator):
        return _mapped(evaluator, node, generator, state, frame, known)
    if generator is None or not _filters_a_list(generator):
        return _generic(evaluator, node, state, frame, known)
    assert isinstance(generator.target, ast.Name)
    variable = generator.target.id
    source = evaluator.pure(generator.iter, state, frame, known)
    free = [
        name
        for test in generator.ifs
        for name in ast.walk(test)
        if isinstance(name, ast.Name) and name.id != variable
    ]
    read = tuple(evaluator.pure(name, state, frame, known) for name in free)
    predicate = " and ".join(_renamed(test, variable) for test in generator.ifs)
    name = f"filter({source}|{predicate})"
    if len(name) > MAX_NAME or opaque(name, (source, *read)).kind != "shared":
        # A predicate that reads the rank selects per rank: left as it was (an opaque value).
        return _generic(evaluator, node, state, frame, known)
    return Sized(name, Atom(FILTERED + name[len("filter(") :], "shared", lower=0))


def _filters_a_list(generator: ast.comprehension) -> bool:
    """`for t in <not a range> if ...`: rank lists built over `range(world)` keep their old value."""
    iterated = generator.iter
    over_range = (
        isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name) and iterated.func.id == "range"
    )
    return (
        bool(generator.ifs)
        and not generator.is_async
        and isinstance(generator.target, ast.Name)
        and not over_range
    )


def _maps_a_sequence(generator: ast.comprehension) -> bool:
    """`[f(x) for x in xs]`: one entry per item, whatever `f` computes."""
    return not generator.ifs and not generator.is_async


def _mapped(
    evaluator: Evaluator,
    node: ast.ListComp,
    generator: ast.comprehension,
    state: State,
    frame: Frame,
    known: dict[int, Expr] | None,
) -> Expr:
    """As many entries as the loop has items: the length is the trip count of the iterable (not
    what the entries hold: `[torch.randn(3) for _ in range(4)]` has four), the entries are the
    generic value."""
    source = evaluator.pure(generator.iter, state, frame, known)
    length = evaluator.trip_count(generator.iter, source, state, frame, known)
    return Sized(
        f"listcomp@{node.lineno}:{node.col_offset}", length, _generic(evaluator, node, state, frame, known)
    )


def _generic(
    evaluator: Evaluator, node: ast.ListComp, state: State, frame: Frame, known: dict[int, Expr] | None
) -> Expr:
    """What the evaluator gives any expression it has no rule for, reading its generators too
    (what is iterated and the filters: `[r for r in queue if now - r.t < limit]` varies with `now`)."""
    children = [node.elt]
    for generator in node.generators:
        children.extend((generator.iter, *generator.ifs))
    inputs = tuple(evaluator.pure(child, state, frame, known) for child in children)
    return opaque(f"listcomp@{node.lineno}:{node.col_offset}", inputs)


def _renamed(test: ast.expr, variable: str) -> str:
    """The predicate's text with the loop variable written `_`."""
    copy = ast.parse(ast.unparse(test), mode="eval").body
    for node in ast.walk(copy):
        if isinstance(node, ast.Name) and node.id == variable:
            node.id = "_"
    return ast.unparse(copy)
