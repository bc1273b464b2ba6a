"""Values a loop leaves behind, and lists changed in place.

In: the names a loop body assigns (or changes with `xs.append(...)`), the variables each path of
one run of the body ends with, the path condition the body started from, the trip count and the
loop's inputs; a collection value and the length function of the evaluator. Out: each changed
variable's value after the loop (`loop_carried`): an unknown value computed from every value an
iteration may leave, from the tests that chose between them, from the trip count and the inputs;
for a list the loop fills, a `Sized` whose length is computed from how much each iteration adds
(not from what the entries hold). A name no iteration changes keeps its value. Also the short
constant loops that are unrolled (`unrolled_loop`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

from collcheck.static.program import is_posted
from collcheck.static.state import State
from collcheck.static.symbolic import Atom, BinOp, Const, Expr, IfExp, Not, Sized, TupleVal, fold, opaque
from collcheck.static.syntax import read_names


def is_collection(value: Expr | None) -> bool:
    """A list this code built (a literal, a comprehension, a slice, one of those per branch)."""
    if isinstance(value, IfExp):
        return is_collection(value.then) and is_collection(value.orelse)
    return isinstance(value, (TupleVal, Sized))


def grown_collection(
    old: Expr,
    call: ast.Call,
    added: tuple[Expr, ...],
    length_of: Callable[[Expr, ast.AST], Expr],
    where: str,
) -> Expr:
    """A collection after `call`, an in-place method on it (`syntax.MUTATING_METHODS`) given the
    values `added`: a new length from the old one and what was added, entries from both. A method
    whose effect on the length is not known leaves an unknown value of the old one and the
    arguments."""
    assert isinstance(call.func, ast.Attribute)
    method = call.func.attr
    if method == "append" and len(added) == 1 and isinstance(old, TupleVal) and len(old.items) < 16:
        return TupleVal((*old.items, added[0]))
    content = opaque(f"entries:{where}", (old, *added))
    if method in ("append", "insert") and added:
        return Sized(where, BinOp("+", length_of(old, call), Const(1)), content)
    if (method == "pop" and len(added) <= 1) or (method == "remove" and len(added) == 1):
        return Sized(where, BinOp("-", length_of(old, call), Const(1)), content)
    if method == "extend" and len(added) == 1:
        return Sized(where, BinOp("+", length_of(old, call), length_of(added[0], call)), content)
    return opaque(where, (old, *added))


MAX_SORTED_PATHS = 32  # body paths beyond this: every test of theirs counts as deciding


def _deciding(name: str, body: list[State], start: int) -> list[Expr]:
    """The tests that chose which value of `name` an iteration leaves: the body's own tests, but
    not one where every path that took it and every path that took its negation leave the same
    value (`count += 1` before `if rank == src: send(...) else: recv(...)` is the same count on
    both sides of the rank test)."""
    tests = [c for s in body for c in s.conds[start:]]
    if len(body) > MAX_SORTED_PATHS or any(name not in s.env for s in body):
        return tests
    own = [(s.conds[start:], s.env[name]) for s in body]
    kept: list[Expr] = []
    # The paths share their inherited tests: each test object is judged once (its answer is
    # the same every time; `tests` holds them, so their ids stay theirs).
    judged: set[int] = set()
    for test in tests:
        if id(test) in judged:
            continue
        judged.add(id(test))
        if any(test is seen or test == seen for seen in kept):
            continue
        positive = test.operand if isinstance(test, Not) else test
        took = [value for conds, value in own if _holds(conds, positive)]
        other = [value for conds, value in own if _holds(conds, Not(positive))]
        if not (took and other and _alike([*took, *other])):
            kept.append(test)
    return kept


def _holds(conds: tuple[Expr, ...], test: Expr) -> bool:
    # `in` on a tuple: identity, then `==`, item by item (what `any(c is t or c == t ...)` does,
    # in C: asked for every test of every path), never a hash.
    return test in conds


def _alike(values: list[Expr]) -> bool:
    """All equal. By identity first, then `==` (cheap on shared structure), never by hashing:
    an expression's hash walks the whole tree every time it is asked."""
    first = values[0]
    return all(value is first or value == first for value in values[1:])


def loop_carried(
    changed: Iterable[str],
    outer: dict[str, Expr],
    body: list[State],
    start: int,
    trip: Expr,
    inputs: tuple[Expr, ...],
    where: str,
    length_of: Callable[[Expr, ast.AST], Expr],
    stmt: ast.stmt,
) -> dict[str, Expr]:
    """The changed variables' values after the loop (see the module). `start`: how many conditions
    the body's paths inherited; the ones after it are the body's own tests."""
    result: dict[str, Expr] = {}
    for name in changed:
        values = [s.env[name] for s in body if name in s.env]
        if not values or (name in outer and all(v == outer[name] for v in values)):
            continue  # no iteration changes it (a method called on it that is not a list's)
        # Which value an iteration leaves depends on the tests its path took in the body, when
        # the paths leave different values.
        deciding = _deciding(name, body, start) if not _alike(values) else []
        entries = opaque(f"{name}@loop{where}", (*values, *deciding, trip, *inputs))
        carried: Expr = entries
        if is_collection(outer.get(name)) and all(is_collection(v) for v in values):
            lengths = [length_of(v, stmt) for v in values]
            deciding = deciding if not _alike(lengths) else []
            # how many iterations and what each adds, not what the items hold (`inputs`)
            counted = opaque(f"len:{name}@loop{where}", (*lengths, *deciding, trip))
            carried = Sized(entries.name, Atom(counted.name, counted.kind, counted.why, lower=0), entries)
        result[name] = carried
    return result


def unrolled_loop(
    trip: Expr, body: list[State], outer: State, after: State, record: bool
) -> list[State] | None:
    """`for _ in range(2): barrier()` is two barriers: unroll short constant loops with one path."""
    count = fold(trip)
    if not isinstance(count, Const) or not isinstance(count.value, int) or count.value > 8:
        return None
    if len(body) != 1 or body[0].exit is not None:
        return None
    if all(is_posted(event) for event in body[0].events):
        return None  # a transfer per iteration (`range(2)`): the schedule runs the loop with `i` bound
    if record:
        after.events = (*outer.events, *(body[0].events * count.value))
    return [after]


def _read_as_size(test: ast.expr, name: str) -> bool:
    """A loop test reads `name` only for its size: `while xs:`, `while not xs`, `len(xs) > 0`."""
    sized_reads = 0
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len":
            sized_reads += sum(1 for a in node.args if isinstance(a, ast.Name) and a.id == name)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.Name) and test.id == name:
        sized_reads += 1
    total = sum(1 for node in ast.walk(test) if isinstance(node, ast.Name) and node.id == name)
    return total > 0 and total == sized_reads


def while_trips(
    test: ast.expr | None,
    body: list[State],
    changed: set[str],
    inputs: tuple[Expr, ...],
    where: str,
    length_of: Callable[[Expr, ast.AST], Expr],
) -> Atom:
    """How often a `while` loop runs: unknown, computed from the test's value and from what the
    body changes of the names the test reads (a list's length only, when the test reads only
    that: `while queue:` does not run a random number of times because the queue holds random
    tensors)."""
    names = read_names(test) if test is not None else set()  # `self.should_stop` too
    feeding = []
    for state in body:
        for name in names & changed:
            value = state.env.get(name, Const(None))
            sized = test is not None and isinstance(value, Sized) and _read_as_size(test, name)
            feeding.append(length_of(value, test) if sized and test is not None else value)
    tested = tuple(length_of(v, test) if isinstance(v, Sized) and test is not None else v for v in inputs)
    trips = opaque(f"trips@{where}", (*tested, *feeding))
    return Atom(trips.name, trips.kind, trips.why, lower=0)


def loop_element(stmt: ast.For | ast.AsyncFor, iterable: Expr, value_of: Callable[[ast.expr], Expr]) -> Expr:
    """What one iteration of `for target in iterable` binds: an item of the iterable; for
    `zip(xs, ys)` or `enumerate(xs)` unpacked into as many names, an item of each sequence apiece
    (the names of `for model, load in zip(models, loads)` do not take on each other's nature)."""
    where = f"{stmt.lineno}:{stmt.col_offset}"
    call, target = stmt.iter, stmt.target
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and isinstance(target, ast.Tuple):
        parts = [a for a in call.args if not isinstance(a, ast.Starred)]
        if call.func.id == "zip" and len(parts) == len(call.args) == len(target.elts) and not call.keywords:
            return TupleVal(tuple(opaque(f"item{i}@{where}", (value_of(p),)) for i, p in enumerate(parts)))
        if call.func.id == "enumerate" and len(call.args) == 1 and len(target.elts) == 2 and parts:
            return TupleVal(
                (Atom(f"index@{where}", "shared", lower=0), opaque(f"item@{where}", (value_of(parts[0]),)))
            )
    return opaque(f"item@{where}", (iterable,))
