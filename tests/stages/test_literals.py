"""Stage `literals`: what literal values are (text, numerals spelled as text, booleans, ranges)."""

from __future__ import annotations

from collcheck.static.literals import is_boolean, is_numeral, is_text, numeric_text, small_literal_range
from collcheck.static.symbolic import RANK, Atom, BinOp, Compare, Const, Member, Not


def test_small_literal_ranges() -> None:
    assert small_literal_range([Const(4)]) == range(4)
    assert small_literal_range([Const(1), Const(9), Const(2)]) == range(1, 9, 2)
    assert small_literal_range([Const(17)]) is None  # too many values
    assert small_literal_range([Const(0), Const(8), Const(0)]) is None  # Python's error, not a range
    assert small_literal_range([RANK]) is None
    assert small_literal_range([Const(True)]) is None  # a bool is no int literal here
    assert small_literal_range([]) is None


def test_kinds_of_literal() -> None:
    assert is_text(Const("x")) and not is_text(Const(1))
    assert is_numeral(Const("-3")) and is_numeral(Const("0"))
    assert not is_numeral(Const("3.5")) and not is_numeral(Const(3))
    assert is_boolean(Const(False)) and is_boolean(Compare("<", RANK, Const(1)))
    assert is_boolean(Not(RANK)) and is_boolean(Member(RANK, ()))
    assert not is_boolean(Const(1)) and not is_boolean(BinOp("+", RANK, Const(1)))


def test_a_numeral_compared_with_the_rank_is_the_number_it_spells() -> None:
    assert numeric_text(Const("0"), RANK) == Const(0)
    assert numeric_text(Const("-2"), RANK) == Const(-2)
    # Not against a value alike on every rank, and not text that is no numeral.
    assert numeric_text(Const("0"), Atom("n", "shared")) == Const("0")
    assert numeric_text(Const("main"), RANK) == Const("main")
