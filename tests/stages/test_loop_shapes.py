"""Stage `loop_shapes`: a loop and the states its body ended in -> whether every iteration that
communicates issues the same collectives with the same arguments (`iterations_alike`)."""

from __future__ import annotations

import ast

from collcheck.static.loop_shapes import fixed_arguments, iterations_alike
from collcheck.static.program import CommEvent, EventKind, Site
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import RANK, Const, GroupVal

from .conftest import frame


def loop(text: str) -> ast.For:
    node = ast.parse(text).body[0]
    assert isinstance(node, ast.For)
    return node


def event_at(stmt: ast.For, index: int = 0, **fields: object) -> CommEvent:
    """The event of the `index`-th call of the loop body, where the interpreter would record it."""
    calls = [n for part in stmt.body for n in ast.walk(part) if isinstance(n, ast.Call)]
    node = calls[index]
    op = node.func.attr if isinstance(node.func, ast.Attribute) else "helper"
    return CommEvent(op, EventKind.COLLECTIVE, "m.py", node.lineno, node.col_offset, node.lineno, 0, **fields)  # type: ignore[arg-type]


def test_the_same_collective_on_loop_invariant_arguments_is_alike() -> None:
    stmt = loop("for batch in data:\n    x = model(batch)\n    dist.all_reduce(flag)\n")
    body = [
        State({}, (), (event_at(stmt, 1),)),
        State({}, (), ()),
    ]  # a path that does not communicate is fine
    assert iterations_alike(stmt, body, frame())


def test_arguments_that_change_between_iterations_are_not() -> None:
    stmt = loop("for i in range(4):\n    dist.broadcast(t, src=i)\n")
    assert not iterations_alike(stmt, [State({}, (), (event_at(stmt),))], frame())
    carried = loop("for _ in data:\n    n = n + 1\n    dist.all_reduce(n)\n")
    assert not iterations_alike(carried, [State({}, (), (event_at(carried),))], frame())


def test_iterations_with_different_sequences_are_not() -> None:
    stmt = loop("for x in data:\n    dist.barrier()\n    dist.all_reduce(t)\n")
    first, second = event_at(stmt, 0), event_at(stmt, 1)
    assert not iterations_alike(stmt, [State({}, (), (first,)), State({}, (), (second,))], frame())
    assert not iterations_alike(stmt, [State({}, (), ())], frame())  # none communicates


def test_a_helpers_collective_counts_with_fixed_arguments_only() -> None:
    stmt = loop("for x in data:\n    sync(t)\n")
    call = stmt.body[0].value  # type: ignore[attr-defined]
    site = Site("f", "sync", "m.py", call.lineno, call.col_offset)
    fixed = CommEvent("broadcast", EventKind.COLLECTIVE, "m.py", 2, 4, 2, 20, chain=(site,), root=Const(0))
    moving = CommEvent("broadcast", EventKind.COLLECTIVE, "m.py", 2, 4, 2, 20, chain=(site,), root=RANK)
    assert iterations_alike(stmt, [State({}, (), (fixed,))], frame())
    assert not iterations_alike(stmt, [State({}, (), (moving,))], frame())
    assert fixed_arguments(fixed, set()) and not fixed_arguments(fixed, {"self.step"})
    looked_up = CommEvent("barrier", EventKind.COLLECTIVE, "m.py", 2, 4, 2, 20, group=GroupVal("g", None))
    assert not fixed_arguments(looked_up, set())  # a group not created here may be another each time


def test_events_of_a_caller_frame_are_matched_below_its_chain() -> None:
    stmt = loop("for x in data:\n    dist.all_reduce(t)\n")
    outer = Site("main", "f", "m.py", 30, 4)
    inside: Frame = Frame("f", None, (outer,), 1, ())
    nested = CommEvent("all_reduce", EventKind.COLLECTIVE, "m.py", 2, 4, 2, 20, chain=(outer,))
    assert iterations_alike(stmt, [State({}, (), (nested,))], inside)
    assert not iterations_alike(stmt, [State({}, (), (nested,))], frame())  # another chain
