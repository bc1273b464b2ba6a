"""Stage `inliner`: a helper call -> the caller's states after it (`HelperInliner.inline`), which
helpers are run at all, and the `Summary` a run leaves for the next call in the same context.
(Reuse across many call sites and recursion are in tests/test_summaries.py.)"""

from __future__ import annotations

import ast

from collcheck.static.inliner import Summary
from collcheck.static.interpret import Interpreter
from collcheck.static.program import CommEvent, Site
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import RANK, Atom, BinOp, Const, Expr, is_rank_dependent

from .conftest import call, interpreter_of

SNIPPET = """
def sync(t, op="sum"):
    dist.all_reduce(t, op=op)
def bump(x):
    return x + 1
def own_rank():
    return dist.get_rank()
def outer(t):
    sync(t)
class Meter:
    def mark(self, value):
        self.seen = value
def f(t):
    pass
"""


def setup(max_depth: int | None = None) -> tuple[Interpreter, Frame]:
    interpreter = interpreter_of(SNIPPET)
    if max_depth is not None:
        interpreter.max_depth = max_depth
    caller = interpreter.module.functions["f"]
    interpreter.local_imports = interpreter.function_imports(caller)
    return interpreter, Frame("f", None, (), 0, (caller,))


def inline(
    interpreter: Interpreter, here: Frame, text: str, state: State, name: str, method_of: str | None = None
) -> list[tuple[State, Expr]]:
    node = call(text)
    node.lineno = node.end_lineno = 40  # a call site of `f`'s body, so that chains name a line
    if method_of is not None:
        function = interpreter.module.classes[method_of].methods[name]
        receiver = text.split(".", 1)[0]
        return interpreter.inline(node, function, method_of, True, state, here, {}, receiver)
    return interpreter.inline(node, interpreter.module.functions[name], None, False, state, here, {})


def executions(interpreter: Interpreter, name: str) -> int:
    return sum(count for node, count in interpreter.summaries.executions.items() if node.name == name)


def test_a_quiet_helper_with_arguments_alike_on_every_rank_is_not_run() -> None:
    interpreter, here = setup()
    state = State({"n": Atom("n", "shared")})
    ((after, value),) = inline(interpreter, here, "bump(n)", state, "bump")
    assert after is state and executions(interpreter, "bump") == 0
    assert not is_rank_dependent(value)


def test_a_quiet_helper_handed_the_rank_runs_and_returns_its_result() -> None:
    interpreter, here = setup()
    ((_, value),) = inline(interpreter, here, "bump(r)", State({"r": RANK}), "bump")
    assert value == BinOp("+", RANK, Const(1))
    assert executions(interpreter, "bump") == 1


def test_a_helper_that_reads_the_rank_itself_runs_whatever_its_arguments() -> None:
    interpreter, here = setup()
    ((_, value),) = inline(interpreter, here, "own_rank()", State({}), "own_rank")
    assert value == RANK


def test_a_communicating_helpers_events_follow_the_callers_with_the_call_site() -> None:
    interpreter, here = setup()
    ((after, _),) = inline(interpreter, here, "sync(t, op='max')", State({}), "sync")
    (reduce,) = after.events
    assert isinstance(reduce, CommEvent) and reduce.op == "all_reduce"
    assert reduce.chain == (Site("f", "sync", "m.py", 40, 0, "m.py"),)
    assert reduce.reduce_op == Const("MAX")  # the keyword passed, normalised


def test_a_second_call_in_the_same_context_reuses_the_summary_on_its_own_site() -> None:
    interpreter, here = setup()
    ((first, _),) = inline(interpreter, here, "sync(t)", State({}), "sync")
    node = ast.parse("sync(t)", mode="eval").body
    assert isinstance(node, ast.Call)
    node.lineno = node.end_lineno = 41
    ((second, _),) = interpreter.inline(
        node, interpreter.module.functions["sync"], None, False, State({}), here, {}
    )
    assert executions(interpreter, "sync") == 1 and interpreter.summaries.reused == 1
    assert [e.chain[0].line for e in (*first.events, *second.events)] == [40, 41]
    (summaries,) = interpreter.summaries.entries.values()
    (summary,) = summaries
    assert isinstance(summary, Summary) and len(summary.results) == 1
    assert [e.op for e in summary.results[0].events] == ["all_reduce"]


def test_the_depth_limit_stops_inlining() -> None:
    interpreter, here = setup(max_depth=0)
    ((after, _),) = inline(interpreter, here, "outer(t)", State({}), "outer")
    assert after.events == () and executions(interpreter, "outer") == 0
    interpreter, here = setup(max_depth=1)
    ((after, _),) = inline(interpreter, here, "outer(t)", State({}), "outer")
    assert after.events == ()  # `outer` runs, the `sync` it calls is one level too deep
    interpreter, here = setup()
    ((after, _),) = inline(interpreter, here, "outer(t)", State({}), "outer")
    assert [e.op for e in after.events] == ["all_reduce"]


def test_attributes_a_method_stores_outlive_the_call_on_its_receiver() -> None:
    interpreter, here = setup()
    conds = (BinOp("%", RANK, Const(2)),)  # called on some ranks only: what it stores may differ
    ((after, _),) = inline(interpreter, here, "meter.mark(r)", State({"r": RANK}, conds), "mark", "Meter")
    assert after.env["meter.seen"] == RANK


def test_arguments_bind_to_parameters_with_defaults_and_keywords() -> None:
    interpreter, here = setup()
    sync = interpreter.module.functions["sync"]
    env = interpreter.bind_call_arguments(call("sync(r)"), sync, False, State({"r": RANK}), here, {})
    assert env == {"t": RANK, "op": Const("sum")}
    env = interpreter.bind_call_arguments(call("sync(1, op=r)"), sync, False, State({"r": RANK}), here, {})
    assert env == {"t": Const(1), "op": RANK}
