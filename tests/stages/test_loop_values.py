"""Stage `loop_values`: what a loop leaves behind — lists changed in place (`grown_collection`),
variables carried out of a loop (`loop_carried`), short loops unrolled (`unrolled_loop`), `while`
trip counts (`while_trips`) and what one iteration binds (`loop_element`)."""

from __future__ import annotations

import ast

from collcheck.static.loop_values import (
    grown_collection,
    is_collection,
    loop_carried,
    loop_element,
    unrolled_loop,
    while_trips,
)
from collcheck.static.program import CommEvent, EventKind
from collcheck.static.state import State
from collcheck.static.symbolic import (
    RANK,
    Atom,
    BinOp,
    Compare,
    Const,
    Expr,
    IfExp,
    Not,
    Sized,
    TupleVal,
    is_rank_dependent,
    opaque,
)

from .conftest import call, expr


def length_of(value: Expr, node: ast.AST) -> Expr:
    if isinstance(value, TupleVal):
        return Const(len(value.items))
    if isinstance(value, Sized):
        return value.length
    return opaque(f"len({value})", (value,))


SHARED = Atom("n", "shared")
BARRIER = CommEvent("barrier", EventKind.COLLECTIVE, "m.py", 3, 4, 3, 20)


def test_in_place_methods_change_a_lists_length() -> None:
    pair = TupleVal((Const(1), Const(2)))
    assert grown_collection(pair, call("xs.append(v)"), (RANK,), length_of, "w") == TupleVal(
        (Const(1), Const(2), RANK)
    )
    many = Sized("xs", SHARED)
    grown = grown_collection(many, call("xs.append(v)"), (RANK,), length_of, "w")
    assert isinstance(grown, Sized) and grown.length == BinOp("+", SHARED, Const(1))
    assert not is_rank_dependent(grown.length) and is_rank_dependent(grown.content)  # entries, not length
    popped = grown_collection(many, call("xs.pop()"), (), length_of, "w")
    assert isinstance(popped, Sized) and popped.length == BinOp("-", SHARED, Const(1))
    extended = grown_collection(many, call("xs.extend(ys)"), (pair,), length_of, "w")
    assert isinstance(extended, Sized) and extended.length == BinOp("+", SHARED, Const(2))
    unknown = grown_collection(many, call("xs.sort()"), (), length_of, "w")
    assert isinstance(unknown, Atom)


def test_collections_are_literals_sized_values_and_choices_of_them() -> None:
    assert is_collection(TupleVal(())) and is_collection(Sized("xs", SHARED))
    assert is_collection(IfExp(RANK, TupleVal(()), Sized("xs", SHARED)))
    assert not is_collection(SHARED) and not is_collection(None)


def test_a_variable_the_loop_changes_is_computed_from_what_iterations_leave() -> None:
    stmt = ast.parse("for x in items:\n    total = total + x\n").body[0]
    outer: dict[str, Expr] = {"total": Const(0), "kept": Const(1)}
    body = [State({"total": BinOp("+", Const(0), RANK), "kept": Const(1)})]
    carried = loop_carried(["total", "kept"], outer, body, 0, SHARED, (), "3:0", length_of, stmt)
    assert set(carried) == {"total"}  # `kept` is the same in every iteration: it keeps its value
    assert is_rank_dependent(carried["total"])
    alike = [State({"total": BinOp("+", Const(0), SHARED)})]
    assert not is_rank_dependent(
        loop_carried(["total"], outer, alike, 0, SHARED, (), "3:0", length_of, stmt)["total"]
    )


def test_a_list_filled_under_a_rank_test_has_a_per_rank_length() -> None:
    stmt = ast.parse("for x in items:\n    if x == rank:\n        owned.append(x)\n").body[0]
    test = Compare("==", Atom("x", "shared"), RANK)
    outer: dict[str, Expr] = {"owned": TupleVal(())}
    body = [State({"owned": TupleVal((SHARED,))}, (test,)), State({"owned": TupleVal(())}, (Not(test),))]
    carried = loop_carried(["owned"], outer, body, 0, SHARED, (), "3:0", length_of, stmt)["owned"]
    assert isinstance(carried, Sized) and is_rank_dependent(carried.length)
    # filled alike on every path: a length of the loop alone
    same = [State({"owned": TupleVal((RANK,))}, (test,)), State({"owned": TupleVal((SHARED,))}, (Not(test),))]
    carried = loop_carried(["owned"], outer, same, 0, SHARED, (), "3:0", length_of, stmt)["owned"]
    assert isinstance(carried, Sized) and not is_rank_dependent(carried.length)


def test_short_constant_loops_with_one_path_are_unrolled() -> None:
    outer = State({}, (), (BARRIER,))
    body = [State({}, (), (BARRIER, BARRIER))]
    after = State({})
    unrolled = unrolled_loop(Const(2), body, outer, after, record=True)
    assert unrolled == [after] and after.events == (BARRIER, BARRIER, BARRIER, BARRIER, BARRIER)
    assert unrolled_loop(Const(9), body, outer, State({}), record=True) is None  # too long
    assert unrolled_loop(SHARED, body, outer, State({}), record=True) is None  # not a constant
    two_paths = [State({}, (), (BARRIER,)), State({}, (), ())]
    assert unrolled_loop(Const(2), two_paths, outer, State({}), record=True) is None


def test_a_while_loops_trips_come_from_what_its_test_reads() -> None:
    test = expr("queue")
    alike = while_trips(
        test, [State({"queue": Sized("q", SHARED, Atom("r", "nondet"))})], {"queue"}, (), "5:0", length_of
    )
    assert alike.lower == 0 and not is_rank_dependent(alike)  # the length, not the random entries
    ranked = while_trips(expr("step < rank"), [State({"step": SHARED})], {"step"}, (RANK,), "5:0", length_of)
    assert is_rank_dependent(ranked)


def test_one_iteration_of_zip_and_enumerate_binds_an_item_of_each() -> None:
    stmt = ast.parse("for a, b in zip(xs, ys):\n    pass\n").body[0]
    assert isinstance(stmt, ast.For)
    values = {"xs": RANK, "ys": SHARED}

    def value_of(node: ast.expr) -> Expr:
        return values[node.id] if isinstance(node, ast.Name) else SHARED

    element = loop_element(stmt, SHARED, value_of)
    assert isinstance(element, TupleVal) and [is_rank_dependent(i) for i in element.items] == [True, False]
    counted = ast.parse("for i, y in enumerate(xs):\n    pass\n").body[0]
    assert isinstance(counted, ast.For)
    index, item = loop_element(counted, SHARED, value_of).items  # type: ignore[union-attr]
    assert not is_rank_dependent(index) and is_rank_dependent(item)
