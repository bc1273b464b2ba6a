"""Stage `fallback`: the reduced mode of a function over the work budget — live paths with the
same sequence and the same rank decisions joined into one (`join_paths`), simple statements
told apart (`is_simple`)."""

from __future__ import annotations

import ast

from collcheck.static.fallback import JOIN_SHARE, RankedConditions, is_simple, join_after, join_paths
from collcheck.static.program import CommEvent, EventKind, Exit, ExitKind
from collcheck.static.state import State
from collcheck.static.symbolic import RANK, Atom, BoolOp, Compare, Const, IfExp, Not

DATA = Atom("flag", "shared")
OTHER = Atom("other", "shared")
RANKED = Compare("==", RANK, Const(0))
BARRIER = CommEvent("barrier", EventKind.COLLECTIVE, "m.py", 3, 4, 3, 20)


def test_paths_parted_by_a_data_test_alike_on_every_rank_are_joined_exactly() -> None:
    then = State({"x": Const(1)}, (DATA,), (BARRIER,))
    orelse = State({"x": Const(2)}, (Not(DATA),), (BARRIER,))
    (joined,) = join_paths([then, orelse], RankedConditions())
    assert joined.conds == ()  # `flag or not flag`: nothing left to say
    assert joined.env["x"] == IfExp(DATA, Const(1), Const(2))
    assert joined.events == (BARRIER,)


def test_a_disjunction_that_is_not_plainly_true_is_kept() -> None:
    first = State({}, (DATA,), ())
    second = State({}, (OTHER,), ())
    (joined,) = join_paths([first, second], RankedConditions())
    assert joined.conds == (BoolOp("or", (DATA, OTHER)),)


def test_paths_parted_on_the_rank_or_on_their_events_are_never_joined() -> None:
    ranked = [State({}, (RANKED,), ()), State({}, (Not(RANKED),), ())]
    assert join_paths(ranked, RankedConditions()) == ranked
    talking = [State({}, (DATA,), (BARRIER,)), State({}, (Not(DATA),), ())]
    assert join_paths(talking, RankedConditions()) == talking


def test_ended_paths_stay_as_they_are_in_place() -> None:
    ended = State({}, (DATA,), (), Exit(ExitKind.RETURN, "m.py", 3, 4))
    first, second = State({}, (OTHER,), ()), State({}, (Not(OTHER),), ())
    joined = join_paths([first, ended, second], RankedConditions())
    assert len(joined) == 2 and joined[1] is ended


def test_ranked_conditions_are_judged_once_by_identity() -> None:
    ranked = RankedConditions()
    assert ranked(RANKED) and not ranked(DATA)


def test_simple_statements() -> None:
    simple = ["x = 1", "x += 1", "f(x)", "pass", "assert x", "del x", "x: int = 1"]
    compound = ["if x:\n    pass", "for x in y:\n    pass", "def f():\n    pass", "import os", "return"]
    assert all(is_simple(ast.parse(text).body[0]) for text in simple)
    assert not any(is_simple(ast.parse(text).body[0]) for text in compound)


def _settings_forks(count: int) -> list[State]:
    """`count` live paths with the same (no) events, each under its own settings decision."""
    return [
        State({"x": Const(i)}, (Compare("==", Atom("cfg.mode", "shared"), Const(i)),)) for i in range(count)
    ]


def test_join_after_joins_live_paths_only_when_joining_and_crowded() -> None:
    """The full analysis's second try (`joining`) joins live paths parted by settings alone once a
    block holds more than a JOIN_SHARE of max_paths; below that, or in the plain run, they stay."""
    crowded = _settings_forks(256 // JOIN_SHARE + 1)
    joined = join_after(crowded, crowded, RankedConditions(), 256, joining=True)
    assert len(joined) == 1
    assert join_after(crowded, crowded, RankedConditions(), 256, joining=False) == crowded
    few = _settings_forks(256 // JOIN_SHARE)
    assert join_after(few, few, RankedConditions(), 256, joining=True) == few
