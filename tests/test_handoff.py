"""What a hand-off of a communicating callable to unknown code may absorb (static/handoff.py),
what the resolver learns about the callable handed on (static/calls.py), and a per-rank group
lookup kept in a variable (static/group_values.py)."""

from __future__ import annotations

import ast

from collcheck.catalog import load_catalog
from collcheck.static.calls import CALLBACK_OP, CallResolver
from collcheck.static.group_values import group_value
from collcheck.static.handoff import may_match
from collcheck.static.loader import build_module
from collcheck.static.program import CommEvent, Element, EventKind, LoopEvent
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import RANK, Atom, BinOp, Const
from collcheck.static.values import ValueEvaluator

FRAME = Frame("body", None, (), 0, ())


def _op(op: str, line: int = 1) -> CommEvent:
    return CommEvent(
        op=op, kind=EventKind.COLLECTIVE, path="m.py", line=line, column=0, end_line=line, end_column=0
    )


def _callback(*ops: str, unknown: bool = False, line: int = 9) -> CommEvent:
    return CommEvent(
        op=CALLBACK_OP,
        kind=EventKind.OPAQUE,
        path="m.py",
        line=line,
        column=0,
        end_line=line,
        end_column=0,
        callback_ops=None if unknown else frozenset(ops),
    )


def _loop(*events: CommEvent) -> LoopEvent:
    return LoopEvent(
        path="m.py",
        line=5,
        column=0,
        trip=Const(3),
        body_ops=tuple(e.op for e in events),
        order="items",
        first=events[0],
    )


def test_a_barrier_before_a_hand_off_of_all_reduces_is_never_met() -> None:
    rank0: tuple[Element, ...] = (_op("barrier"), _callback("all_reduce"))
    others: tuple[Element, ...] = (_callback("all_reduce"),)
    assert not may_match(rank0, others)


def test_a_hand_off_that_issues_the_missing_collective_may_meet_it() -> None:
    assert may_match((_op("barrier"), _callback("barrier")), (_callback("barrier"),))
    # Or any number of it, zero included: a hook registered on rank 0 alone may never run.
    assert may_match((_callback("all_gather"), _op("barrier")), (_op("barrier"),))


def test_a_divergence_after_the_same_hand_off_is_still_one() -> None:
    assert not may_match((_callback("all_reduce"), _op("barrier")), (_callback("all_reduce"),))


def test_a_hand_off_of_unknown_collectives_may_absorb_anything() -> None:
    assert may_match((_op("barrier"), _op("broadcast")), (_callback(unknown=True),))


def test_a_loop_of_one_hand_off_is_one_hand_off() -> None:
    hooks = _loop(_callback("all_reduce"))
    assert not may_match((_op("barrier"), hooks), (hooks,))
    assert may_match((_op("all_reduce"), hooks), (hooks,))
    # A loop that hands on two callables: not known what each issues.
    twice = _loop(_callback("all_reduce"), _callback("all_reduce", line=10))
    assert may_match((_op("barrier"), twice), (twice,))


def test_a_callback_may_stand_for_a_communicating_loop_sharing_an_op() -> None:
    loop = _loop(_op("broadcast"), _op("barrier", line=2))
    assert may_match((_callback("broadcast"),), (loop,))
    assert not may_match((_callback("all_gather"),), (loop,))


def _resolver(source: str) -> tuple[CallResolver, ast.Module]:
    tree = ast.parse(source)
    return CallResolver(build_module(tree, "m.py", load_catalog())), tree


def _last_call(tree: ast.Module) -> ast.Call:
    statement = tree.body[-1]
    assert isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
    return statement.value


SOURCE = """
import functools
import torch.distributed as dist


def reduce(t):
    dist.all_reduce(t)


def reduce_then_wait(t):
    reduce(t)
    dist.barrier()


def quiet(t):
    return t
"""


def test_the_resolver_names_what_a_handed_callable_issues() -> None:
    cases = {
        "apply(reduce, xs)": frozenset({"all_reduce"}),
        "apply(reduce_then_wait, xs)": frozenset({"all_reduce", "barrier"}),
        "apply(lambda t: dist.broadcast(t, src=0), xs)": frozenset({"broadcast"}),
        "apply(functools.partial(reduce), xs)": frozenset({"all_reduce"}),
        "apply(dist.all_gather_object, xs)": frozenset({"all_gather_object"}),
    }
    for text, ops in cases.items():
        resolver, tree = _resolver(SOURCE + text + "\n")
        handed = resolver.handoff(_last_call(tree), FRAME)
        assert handed is not None and handed.ops == ops, text
    for text in ("apply(quiet, xs)", "apply(lambda t: t, xs)", "functools.partial(reduce, t)"):
        resolver, tree = _resolver(SOURCE + text + "\n")
        assert resolver.handoff(_last_call(tree), FRAME) is None, text


def test_a_looked_up_group_kept_in_a_variable_is_the_group_looked_up() -> None:
    module = build_module(ast.parse("import torch.distributed as dist\n"), "m.py", load_catalog())
    evaluator = ValueEvaluator(module)
    lookup = ast.parse("groups[key]", mode="eval").body
    name = ast.parse("g", mode="eval").body
    state = State({"groups": Atom("param:groups", "shared"), "key": BinOp("//", RANK, Const(8))})
    state.env["g"] = evaluator.pure(lookup, state, FRAME)
    held = group_value(evaluator, name, state, FRAME, {})
    assert held is not None and not held.per_rank and held.color == BinOp("//", RANK, Const(8))
    # The same lookup on another path with another key: no longer a group the ranks meet on.
    other = State({**state.env, "key": BinOp("%", RANK, Const(8))})
    evaluator.pure(lookup, other, FRAME)
    unknown = group_value(evaluator, name, state, FRAME, {})
    assert unknown is not None and unknown.per_rank
