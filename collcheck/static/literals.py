"""What literal values are, for the evaluator (values.py): text, numerals spelled as text, booleans,
and `range`s of a few int literals.

Comes in: symbolic values (`Expr`). Goes out: booleans, a `range`, or the value a numeral spells.
An environment variable is text until read as a number (`os.environ["RANK"] == "0"` compares
the rank with 0; `if os.environ.get("RANK"):` is true for "0").
"""

from __future__ import annotations

from collcheck.static.symbolic import BoolOp, Compare, Const, Expr, InRange, Member, Not, is_rank_dependent


def small_literal_range(args: list[Expr]) -> range | None:
    """`range(...)` of 1-3 int literals with at most 16 values (a zero step is Python's error,
    not a range: left opaque)."""
    ints = [a.value for a in args if isinstance(a, Const) and type(a.value) is int]
    if not 1 <= len(args) <= 3 or len(ints) != len(args) or (len(ints) == 3 and ints[2] == 0):
        return None
    values = range(*ints)
    return values if len(values) <= 16 else None


def is_text(value: Expr) -> bool:
    return isinstance(value, Const) and isinstance(value.value, str)


def is_boolean(value: Expr) -> bool:
    return isinstance(value, (Compare, BoolOp, Not, Member, InRange)) or (
        isinstance(value, Const) and isinstance(value.value, bool)
    )


def is_numeral(value: Expr) -> bool:
    return isinstance(value, Const) and isinstance(value.value, str) and value.value.lstrip("-").isdigit()


def numeric_text(value: Expr, other: Expr) -> Expr:
    """`os.environ["RANK"] == "0"`: compare the rank with the number the string spells."""
    if (
        isinstance(value, Const)
        and isinstance(value.value, str)
        and value.value.lstrip("-").isdigit()
        and is_rank_dependent(other)
    ):
        return Const(int(value.value))
    return value
