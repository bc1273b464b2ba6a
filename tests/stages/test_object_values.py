"""Stage `object_values`: attributes of objects built with per-rank keywords (`bar.disable`, a
disabled bar's `bar.n`: `record_keyword_attributes`) and containers kept in attributes changed in
place (`record_container_change`)."""

from __future__ import annotations

import ast

from collcheck.static.object_values import record_container_change, record_keyword_attributes
from collcheck.static.state import State
from collcheck.static.symbolic import RANK, Compare, Const, IfExp, Not, TupleVal, is_rank_dependent
from collcheck.static.values import ValueEvaluator

from .conftest import expr, frame, module_of, statement

MAIN = Compare("==", RANK, Const(0))


def evaluator() -> ValueEvaluator:
    return ValueEvaluator(module_of("from tqdm import tqdm\n", complete=True))


def assign(text: str) -> ast.Assign:
    node = statement(text)
    assert isinstance(node, ast.Assign)
    return node


def test_a_per_rank_keyword_is_the_attribute_of_the_same_name() -> None:
    state = State({"main": MAIN})
    record_keyword_attributes(
        evaluator(), assign("bar = tqdm(total=n, disable=not main, leave=True)"), state, frame()
    )
    assert state.env["bar.disable"] == Not(MAIN)
    assert "bar.leave" not in state.env and "bar.total" not in state.env  # the same on every rank
    # the catalogued counter of a disabled bar stands still where `disable` holds
    counter = state.env["bar.n"]
    assert isinstance(counter, IfExp) and counter.test == Not(MAIN) and counter.then == Const(0)


def test_binding_the_name_again_forgets_what_was_recorded() -> None:
    state = State({"main": MAIN})
    ev = evaluator()
    record_keyword_attributes(ev, assign("bar = tqdm(disable=not main)"), state, frame())
    record_keyword_attributes(ev, assign("bar = tqdm(total=n)"), state, frame())
    assert not [key for key in state.env if key.startswith("bar.")]


def test_a_container_in_an_attribute_changed_in_place_is_another_value() -> None:
    state = State({"self.pending": TupleVal(())})
    record_container_change(evaluator(), expr("self.pending.append(x)"), state, frame())
    changed = state.env["self.pending"]
    assert changed != TupleVal(()) and not is_rank_dependent(changed)  # how often, not what is put in
    local = State({"pending": TupleVal(())})
    record_container_change(evaluator(), expr("pending.append(x)"), local, frame())
    assert local.env["pending"] == TupleVal(())  # a local variable: the evaluator's own business
