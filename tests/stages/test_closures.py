"""Stage `closures`: nested functions handed to unknown code — do they escape (`escapes`), and
what they can read of the outer function (`late_bound_names`, `closure_of` -> `Closure`)."""

from __future__ import annotations

import ast

from collcheck.static.closures import closure_of, escapes, late_bound_names
from collcheck.static.state import State
from collcheck.static.symbolic import RANK, Atom, Compare, Const, Not

SOURCE = """
def outer(pool, data):
    size = len(data)
    count = 0
    def handed(t):
        return t + size + count
    def called(t):
        return t
    @decorated
    def registered():
        pass
    def returned():
        pass
    count = 1
    pool.submit(handed)
    called(1)
    return returned
"""


def functions() -> dict[str, ast.FunctionDef]:
    outer = ast.parse(SOURCE).body[0]
    assert isinstance(outer, ast.FunctionDef)
    found = {node.name: node for node in outer.body if isinstance(node, ast.FunctionDef)}
    found["outer"] = outer
    return found


def test_a_nested_function_escapes_by_name_or_decorator_but_not_by_being_called() -> None:
    found = functions()
    outer = found["outer"]
    assert escapes(outer, found["handed"])
    assert escapes(outer, found["registered"])
    assert escapes(outer, found["returned"])
    assert not escapes(outer, found["called"])


def test_names_assigned_again_after_the_def_are_late_bound() -> None:
    found = functions()
    assert "count" in late_bound_names(found["outer"], found["handed"])
    assert "size" not in late_bound_names(found["outer"], found["handed"])


def test_the_closure_keeps_what_is_fixed_and_the_condition_every_path_shares() -> None:
    found = functions()
    flag = Atom("flag", "shared")
    on_zero = Compare("==", RANK, Const(0))
    states = [
        State({"size": Const(3), "count": Const(0), "handed": Const(None)}, (on_zero, flag)),
        State({"size": Const(3), "count": Const(0)}, (on_zero, Not(flag))),
    ]
    closure = closure_of(found["outer"], found["handed"], states, {"called": found["called"]})
    assert closure.env == {"size": Const(3)}  # not the late-bound `count`, not itself
    assert closure.conds == (on_zero,)  # defined on rank 0 only
    assert set(closure.siblings) == {"called"} and closure.outer is found["outer"] and closure.depth == 1
