"""Stage `group_values`: the evaluator's reading of groups — the group a `group=` argument names
(`group_value`), a rank's place in a group (`dist.get_rank(g)`, `g.rank()`), members listed by
index, catalogued object types (`type_of`) — each keyed by the group so conditions and collectives
on it are tied together."""

from __future__ import annotations

import ast

import pytest

from collcheck.static import groups
from collcheck.static.group_values import group_value, none_or_not, parameters_with_literal_defaults, type_of
from collcheck.static.state import State
from collcheck.static.symbolic import RANK, Atom, Const, Expr, GroupVal, IfExp, Sized
from collcheck.static.values import ValueEvaluator

from .conftest import expr, frame, module_of

TP = GroupVal("tp", None, created=True)


@pytest.fixture(scope="module")
def evaluator() -> ValueEvaluator:
    return ValueEvaluator(module_of("from accelerate import Accelerator\n", complete=True))


def state() -> State:
    return State(
        {
            "g": TP,
            "other": Atom("param:other", "shared"),
            "table": Atom("table", "shared"),
            "acc": Atom("type:accelerate.Accelerator@param:acc", "shared"),
        }
    )


def group(evaluator: ValueEvaluator, text: str) -> GroupVal | None:
    return group_value(evaluator, expr(text), state(), frame(), {})


def value(evaluator: ValueEvaluator, text: str) -> Expr:
    return evaluator.pure(expr(text), state(), frame())


def test_the_default_group_however_spelled_is_none(evaluator: ValueEvaluator) -> None:
    assert group(evaluator, "None") is None
    assert group(evaluator, "dist.group.WORLD") is None


def test_a_group_held_by_a_name_is_that_group_and_an_unknown_one_is_keyed_by_its_value(
    evaluator: ValueEvaluator,
) -> None:
    assert group(evaluator, "g") is TP
    unknown = group(evaluator, "other")
    assert unknown == GroupVal("param:other", None)  # unknown membership, alike on every rank


def test_a_group_looked_up_by_a_per_rank_key_has_that_key_as_its_colour(evaluator: ValueEvaluator) -> None:
    looked_up = group(evaluator, "table[dist.get_rank()]")
    assert looked_up is not None and looked_up.color == RANK and not looked_up.per_rank
    sliced = group(evaluator, "table[dist.get_rank():]")
    assert sliced is not None and sliced.per_rank and sliced.color is None


def test_a_ranks_place_in_a_group_is_keyed_by_the_group(evaluator: ValueEvaluator) -> None:
    local, size = groups.local_rank("tp"), groups.group_size("tp")
    assert value(evaluator, "dist.get_rank(g)") == local
    assert value(evaluator, "dist.get_world_size(group=g)") == size
    assert value(evaluator, "g.rank()") == local and value(evaluator, "g.size()") == size
    assert value(evaluator, "dist.get_group_rank(g, dist.get_rank())") == local
    assert value(evaluator, "dist.get_rank(None)") == RANK  # the world group spelled out


def test_members_listed_by_index_are_global_ranks_of_the_group(evaluator: ValueEvaluator) -> None:
    first = groups.global_rank_of("tp", 0)
    assert value(evaluator, "dist.get_process_group_ranks(g)[0]") == first
    assert value(evaluator, "dist.get_global_rank(g, 0)") == first


def test_catalogued_types_of_objects(evaluator: ValueEvaluator) -> None:
    assert type_of(evaluator, expr("acc"), state()) == "accelerate.Accelerator"
    assert type_of(evaluator, expr("Accelerator()"), None) == "accelerate.Accelerator"
    assert type_of(evaluator, expr("other"), state()) is None


def test_parameters_with_int_literal_defaults() -> None:
    function = ast.parse("def f(a, b=0, c='x', *, d=1, e=None): pass").body[0]
    assert isinstance(function, ast.FunctionDef)
    assert parameters_with_literal_defaults(function.args) == {"b", "d"}


def test_a_slice_is_never_none_and_unknowns_stay_as_they_are() -> None:
    sliced = Sized("slice:xs[r:]", RANK)
    assert none_or_not(sliced) != sliced and isinstance(none_or_not(sliced), Const)
    unknown = Atom("x", "shared")
    assert none_or_not(unknown) == unknown
    assert none_or_not(IfExp(RANK, sliced, Const(None))) == IfExp(RANK, none_or_not(sliced), Const(None))
