"""Stages `state` and `program`: path states and their joins (`merge_branches`, `merge_envs`,
`common_prefix`, `collapse_returns`, `kept_sequences`), and moving a recorded element onto
another call site (`Rebase`)."""

from __future__ import annotations

from collcheck.static.program import CommEvent, EventKind, Exit, ExitKind, LoopEvent, Path, Rebase, Site
from collcheck.static.state import (
    State,
    attributes_changed,
    collapse_returns,
    common_prefix,
    kept_sequences,
    merge_branches,
    merge_envs,
)
from collcheck.static.symbolic import RANK, Atom, Compare, Const, IfExp, Not, is_rank_dependent

TEST = Compare("==", RANK, Const(0))
BARRIER = CommEvent("barrier", EventKind.COLLECTIVE, "m.py", 3, 4, 3, 20)


def test_arms_that_did_not_communicate_are_joined_into_one_state() -> None:
    start = State({"x": Const(0)})
    then, orelse = start.fork(TEST), start.fork(Not(TEST))
    then.env["y"], orelse.env["y"] = Const(1), Const(2)
    (merged,) = merge_branches(start, TEST, [then], [orelse]) or []
    assert merged.conds == () and merged.env["y"] == IfExp(TEST, Const(1), Const(2))
    assert merged.env["x"] == Const(0)
    only_then = start.fork(TEST)
    only_then.env["z"] = RANK
    (maybe,) = merge_branches(start, TEST, [only_then], [start.fork()]) or []
    assert is_rank_dependent(maybe.env["z"])  # set on one arm only


def test_arms_that_communicate_or_exit_are_not_joined() -> None:
    start = State({})
    talking = start.fork(TEST)
    talking.events = (BARRIER,)
    assert merge_branches(start, TEST, [talking], [start.fork()]) is None
    leaving = start.fork(TEST)
    leaving.exit = Exit(ExitKind.RETURN, "m.py", 3, 4)
    assert merge_branches(start, TEST, [leaving], [start.fork()]) is None


def test_fork_adds_a_condition_unless_it_is_true() -> None:
    state = State({"a": Const(1)})
    assert state.fork(Const(True)).conds == () and state.fork(TEST).conds == (TEST,)
    child = state.fork()
    child.env["a"] = Const(2)
    assert state.env["a"] == Const(1)  # its own variables


def test_merged_environments_and_common_prefixes() -> None:
    merged = merge_envs([State({"a": Const(1), "b": Const(1)}), State({"a": Const(1), "b": RANK})])
    assert merged["a"] == Const(1) and is_rank_dependent(merged["b"])
    flag = Atom("flag", "shared")
    assert common_prefix([(flag, TEST), (flag, Not(TEST)), (flag,)]) == (flag,)


def test_a_helpers_quiet_returns_collapse_into_one_value() -> None:
    caller = State({})
    first, second = caller.fork(TEST), caller.fork(Not(TEST))
    ((state, value),) = collapse_returns(caller, [(first, Const(1)), (second, Const(2))])
    assert state.conds == () and value == IfExp(TEST, Const(1), Const(2))
    talking = caller.fork(TEST)
    talking.events = (BARRIER,)
    assert len(collapse_returns(caller, [(talking, Const(1)), (second, Const(2))])) == 2


def test_kept_sequences_leave_out_paths_that_raise() -> None:
    raised = State({}, (), (BARRIER,), Exit(ExitKind.RAISE, "m.py", 3, 4))
    assert kept_sequences([raised, State({}, (), ())]) == {()}


def test_attributes_changed_by_a_loop_body() -> None:
    start = State({"stopper.should_stop": Const(False), "x": Const(0)})
    body = State(dict(start.env))
    body.env["stopper.should_stop"], body.env["x"] = RANK, Const(1)
    assert attributes_changed(start, [body]) == {"stopper.should_stop"}  # dotted names only


def test_a_rebase_moves_a_recorded_element_onto_another_call_site() -> None:
    recorded = Site("f", "sync", "m.py", 10, 4)
    here = Site("g", "sync", "m.py", 20, 4)
    inner = Site("sync", "leaf", "m.py", 2, 4)
    rebase = Rebase((recorded,), (here,), (TEST,), (Not(TEST),))
    moved = rebase.element(
        CommEvent("barrier", EventKind.COLLECTIVE, "m.py", 2, 4, 2, 20, chain=(recorded, inner))
    )
    assert moved.chain == (here, inner)
    loop = LoopEvent("m.py", 2, 4, RANK, ("barrier",), "xs", None, (recorded,), body_conds=((TEST, RANK),))
    moved_loop = rebase.element(loop)
    assert isinstance(moved_loop, LoopEvent) and moved_loop.chain == (here,)
    assert moved_loop.body_conds == ((Not(TEST), RANK),)
    path = Path((TEST, RANK), (), Exit(ExitKind.RAISE, "m.py", 2, 4, (recorded,)))
    assert rebase.path(path) == Path((Not(TEST), RANK), (), Exit(ExitKind.RAISE, "m.py", 2, 4, (here,)))
    same = Rebase((recorded,), (recorded,), (), ())
    assert same.identity and same.path(path) is path


def test_a_condition_every_helper_path_holds_survives_the_collapse() -> None:
    caller = State({})
    fact = Compare("==", Atom("group_world:g", "shared"), Atom("world", "world"))
    first, second = caller.fork(fact).fork(TEST), caller.fork(fact).fork(Not(TEST))
    ((state, value),) = collapse_returns(caller, [(first, Const(1)), (second, Const(2))])
    assert state.conds == (fact,) and value == IfExp(TEST, Const(1), Const(2))
