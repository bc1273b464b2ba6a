"""Stage `values`: the value evaluator alone (`ValueEvaluator.pure`, `trip_count`, `bind`), no
interpreter: expressions to symbolic values with their rank taint."""

from __future__ import annotations

import ast

import pytest

from collcheck.static.state import State
from collcheck.static.symbolic import (
    RANK,
    WORLD,
    Atom,
    BinOp,
    BoolOp,
    Compare,
    Const,
    Expr,
    IfExp,
    Member,
    Not,
    Sized,
    TupleVal,
    is_rank_dependent,
)
from collcheck.static.values import ValueEvaluator

from .conftest import expr, frame, module_of

SNIPPET = """
import time
import random
LIMIT = 4
def helper(x):
    return x
"""


@pytest.fixture(scope="module")
def evaluator() -> ValueEvaluator:
    return ValueEvaluator(module_of(SNIPPET, complete=True))


def value(evaluator: ValueEvaluator, text: str, env: dict[str, Expr] | None = None) -> Expr:
    return evaluator.pure(expr(text), State(dict(env or {})), frame())


def test_catalogued_rank_functions_are_the_rank_and_the_world(evaluator: ValueEvaluator) -> None:
    assert value(evaluator, "dist.get_rank()") == RANK
    assert value(evaluator, "dist.get_world_size()") == WORLD
    assert value(evaluator, "(dist.get_rank() + 1) % dist.get_world_size()") == BinOp(
        "%", BinOp("+", RANK, Const(1)), WORLD
    )


def test_an_environment_variable_is_text_until_read_as_a_number(evaluator: ValueEvaluator) -> None:
    text = value(evaluator, "os.environ['RANK']")
    assert isinstance(text, Atom) and not is_rank_dependent(text)  # "0" and "1" are both true
    assert value(evaluator, "os.environ['RANK'] == '0'") == Compare("==", RANK, Const(0))
    assert is_rank_dependent(value(evaluator, "int(os.environ['LOCAL_RANK'])"))


def test_per_process_sources_are_nondet_with_a_reason(evaluator: ValueEvaluator) -> None:
    clock = value(evaluator, "time.time()")
    assert isinstance(clock, Atom) and clock.kind == "nondet" and clock.why == "wall-clock time"
    dice = value(evaluator, "random.random()")
    assert isinstance(dice, Atom) and dice.kind == "nondet"


def test_names_come_from_the_path_then_the_module_then_are_unknown_but_alike(
    evaluator: ValueEvaluator,
) -> None:
    assert value(evaluator, "LIMIT") == Const(4)
    assert value(evaluator, "LIMIT", {"LIMIT": RANK}) == RANK  # the path's own binding wins
    unknown = value(evaluator, "somewhere_else")
    assert isinstance(unknown, Atom) and unknown.kind == "shared"
    assert not is_rank_dependent(value(evaluator, "len(items) + 3"))


def test_tests_and_choices_keep_their_structure(evaluator: ValueEvaluator) -> None:
    rank_zero = Compare("==", RANK, Const(0))
    assert value(evaluator, "1 if dist.get_rank() == 0 else 2") == IfExp(rank_zero, Const(1), Const(2))
    assert value(evaluator, "dist.get_rank() in (0, 1)") == Member(RANK, (Const(0), Const(1)))
    assert value(evaluator, "0 < dist.get_rank() < 3") == BoolOp(
        "and", (Compare("<", Const(0), RANK), Compare("<", RANK, Const(3)))
    )
    assert value(evaluator, "not dist.get_rank()") == Not(RANK)


def test_a_strided_slice_has_a_per_rank_length(evaluator: ValueEvaluator) -> None:
    part = value(evaluator, "items[dist.get_rank()::dist.get_world_size()]")
    assert isinstance(part, Sized) and is_rank_dependent(part.length)
    whole = value(evaluator, "items[0:4]")
    assert isinstance(whole, Sized) and not is_rank_dependent(whole.length)
    assert value(evaluator, "[1, 2, dist.get_rank()]") == TupleVal((Const(1), Const(2), RANK))
    assert value(evaluator, "len([1, 2, 3])") == Const(3)


def test_trip_counts(evaluator: ValueEvaluator) -> None:
    state, here = State({}), frame()

    def trips(text: str) -> Expr:
        node = expr(text)
        return evaluator.trip_count(node, evaluator.pure(node, state, here), state, here)

    assert trips("range(dist.get_rank())") == BinOp("max", Const(0), BinOp("-", RANK, Const(0)))
    assert trips("(a, b, c)") == Const(3)
    assert not is_rank_dependent(trips("range(0, n, 2)"))
    assert is_rank_dependent(trips("zip(range(dist.get_rank()), range(8))"))
    assert is_rank_dependent(trips("enumerate(items[dist.get_rank():])"))


def test_bind_unpacks_tuples_item_by_item(evaluator: ValueEvaluator) -> None:
    state = State({})
    target = ast.parse("a, (b, c) = v").body[0]
    assert isinstance(target, ast.Assign)
    evaluator.bind(target.targets[0], TupleVal((Const(1), TupleVal((RANK, WORLD)))), state)
    assert state.env == {"a": Const(1), "b": RANK, "c": WORLD}
    # an unknown value unpacked: each part an unknown computed from it, per rank when it is
    state = State({})
    evaluator.bind(target.targets[0], BinOp("+", RANK, Const(1)), state)
    assert is_rank_dependent(state.env["a"]) and is_rank_dependent(state.env["c"])
