"""Stage `symbolic`: symbolic values, how they carry the rank, and their z3 translation."""

from __future__ import annotations

import z3

from collcheck.static.symbolic import (
    FALSE,
    RANK,
    TRUE,
    WORLD,
    Atom,
    BinOp,
    BoolOp,
    Compare,
    Const,
    IfExp,
    Member,
    Not,
    TupleVal,
    Z3Translator,
    atoms,
    conjoin,
    constant_truth,
    fold,
    integer_arithmetic,
    is_rank_dependent,
    negate,
    opaque,
    substitute,
    tuple_item,
)

SHARED = Atom("n", "shared")
CLOCK = Atom("t", "nondet", why="wall-clock time")


def test_opaque_values_vary_per_rank_exactly_when_their_inputs_do() -> None:
    assert opaque("x", (SHARED, Const(1))).kind == "shared"
    assert opaque("x", (SHARED, BinOp("+", RANK, Const(1)))).kind == "perrank"
    timed = opaque("x", (CLOCK,))
    assert timed.kind == "nondet" and timed.why == "wall-clock time"
    assert opaque("x", (CLOCK, RANK)).kind == "perrank"  # the rank wins over a per-process value
    assert opaque("x").kind == "shared"


def test_rank_dependence_looks_through_every_node() -> None:
    assert is_rank_dependent(Compare("==", BinOp("%", RANK, Const(2)), Const(0)))
    assert is_rank_dependent(IfExp(SHARED, Const(1), Member(RANK, (Const(0),))))
    assert is_rank_dependent(CLOCK)  # per process, not per rank, but not alike either
    assert not is_rank_dependent(BinOp("-", WORLD, Const(1)))  # the world size is the same on all
    assert {a.name for a in atoms(BoolOp("and", (Compare("<", RANK, WORLD), SHARED)))} == {
        "rank",
        "world",
        "n",
    }


def test_negation_and_conjunction_simplify() -> None:
    assert negate(TRUE) == FALSE
    assert negate(Not(SHARED)) == SHARED
    assert negate(SHARED) == Not(SHARED)
    assert conjoin(()) == TRUE
    assert conjoin((TRUE, SHARED)) == SHARED
    assert conjoin((SHARED, FALSE)) == FALSE
    assert conjoin((SHARED, RANK)) == BoolOp("and", (SHARED, RANK))


def test_folding_and_constant_truth() -> None:
    assert fold(BinOp("*", BinOp("+", Const(1), Const(2)), Const(4))) == Const(12)
    assert fold(BinOp("//", Const(1), Const(0))) == BinOp("//", Const(1), Const(0))  # no error, no value
    assert fold(BinOp("+", RANK, Const(1))) == BinOp("+", RANK, Const(1))
    assert integer_arithmetic("ceildiv", 7, 2) == 4 and integer_arithmetic("%", 1, 0) is None
    assert constant_truth(Const(0)) is False and constant_truth(Not(Const(""))) is True
    assert constant_truth(RANK) is None


def test_tuple_items_through_a_choice() -> None:
    pair = IfExp(SHARED, TupleVal((RANK, Const(1))), TupleVal((Const(0), Const(1))))
    assert tuple_item(pair, 0) == IfExp(SHARED, RANK, Const(0))
    assert tuple_item(pair, 1) == Const(1)  # both arms agree
    assert tuple_item(pair, 0, length=3) is None
    assert tuple_item(RANK, 0) is None


def test_substitution_rebuilds_the_tree() -> None:
    value = Compare("==", BinOp("+", RANK, SHARED), Const(3))
    assert substitute(value, {SHARED: Const(1)}) == Compare("==", BinOp("+", RANK, Const(1)), Const(3))


def _check(*facts: object) -> z3.CheckSatResult:
    solver = z3.Solver()
    solver.add(*facts)
    return solver.check()


def test_per_rank_atoms_get_one_instance_per_side_and_shared_ones_one_in_all() -> None:
    tr = Z3Translator(z3)
    # A shared value is the same for both ranks: n == 0 on one side and n == 1 on the other is impossible.
    assert (
        _check(
            tr.as_bool(Compare("==", SHARED, Const(0)), "a"), tr.as_bool(Compare("==", SHARED, Const(1)), "b")
        )
        == z3.unsat
    )
    # A per-rank value can differ.
    per_rank = Atom("p", "perrank")
    assert (
        _check(
            tr.as_bool(Compare("==", per_rank, Const(0)), "a"),
            tr.as_bool(Compare("==", per_rank, Const(1)), "b"),
        )
        == z3.sat
    )
    # The rank itself is a side's own.
    assert _check(tr.rank("a") == 0, tr.rank("b") == 0, tr.rank("a") != tr.rank("b")) == z3.unsat
