"""Stage `own_data`: where the interpreter makes a value this process's own (`mark_entry` at a
root's entry, by parameter and attribute path) and where it stops being so (`EntryData.expire`
once the run is past the statement holding the combining call). `mark_assigned` and
`mark_combined` are driven through the fixtures of CC008 and tests/stages/test_local_data.py."""

from __future__ import annotations

import ast

from collcheck.static.own_data import mark_entry
from collcheck.static.program import OWN_DATA
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import Atom, BinOp, Expr, atoms

from .conftest import interpreter_of, regions_of

SNIPPET = """
def padded(plan):
    sizes = torch.tensor([plan.num_tokens])
    dist.all_reduce(sizes, op=dist.ReduceOp.MAX)
    return int(sizes.item())
def step(plan, dp, t):
    if plan.num_tokens == 0:
        return
    padded(plan)
    dist.all_reduce(t)
def bounded(plan, dp, t):
    length = plan.num_tokens
    if dp > 1:
        length = padded(plan)
    if length == 0:
        return
    dist.all_reduce(t)
def gather(items):
    out = [None] * 2
    dist.all_gather_object(out, items)
def typed(items: int = 3):
    gather(items)
"""


def _own(value: Expr | None) -> bool:
    return value is not None and any(a.kind == "nondet" and a.why.startswith(OWN_DATA) for a in atoms(value))


def test_a_parameter_and_an_attribute_path_of_one_are_this_processs_own_at_a_roots_entry() -> None:
    interpreter = interpreter_of(SNIPPET)
    step = interpreter.module.functions["step"]
    env = interpreter.entry_parameters(step, root=True)
    entry = mark_entry(interpreter.local_data, step, env)
    assert entry is not None
    assert _own(env["plan.num_tokens"]) and not _own(env["plan"]) and not _own(env["dp"])
    gather = interpreter.module.functions["gather"]
    whole = interpreter.entry_parameters(gather, root=True)
    assert mark_entry(interpreter.local_data, gather, whole) is not None and _own(whole["items"])


def test_a_parameter_the_model_knows_more_of_is_left_alone() -> None:
    interpreter = interpreter_of(SNIPPET)
    typed = interpreter.module.functions["typed"]
    env: dict[str, Expr] = {"items": Atom("type:int@param:items", "shared")}
    assert mark_entry(interpreter.local_data, typed, env) is None
    assert env == {"items": Atom("type:int@param:items", "shared")}


def test_past_the_statement_holding_the_combining_call_the_data_and_what_was_computed_from_it_agree() -> None:
    interpreter = interpreter_of(SNIPPET)
    bounded = interpreter.module.functions["bounded"]
    env = interpreter.entry_parameters(bounded, root=True)
    entry = mark_entry(interpreter.local_data, bounded, env)
    assert entry is not None
    derived = BinOp("+", env["plan.num_tokens"], Atom("k", "shared"))
    state = State({**env, "length": derived})
    before, inside, after = bounded.body[0], bounded.body[1], bounded.body[2]
    entry.expire(bounded.body, before, [state])
    entry.expire(bounded.body, inside, [state])  # the `if` that holds the call: still its own
    assert _own(state.env["length"])
    entry.expire([after], after, [state])  # another body (a helper's): nothing changes
    assert _own(state.env["length"])
    entry.expire(bounded.body, after, [state])
    assert not _own(state.env["length"]) and not _own(state.env["plan.num_tokens"])
    assert isinstance(after, ast.If)


def test_a_test_before_the_combining_call_forks_on_own_data_and_one_after_it_does_not() -> None:
    (region, *_) = regions_of(SNIPPET, "step")
    assert any(_own(condition) for path in region.paths for condition in path.conds)
    (region, *_) = regions_of(SNIPPET, "bounded")
    tests = [condition for path in region.paths for condition in path.conds]
    assert tests and not any(_own(condition) for condition in tests)


def test_a_tensors_kind_read_off_own_data_is_not_own_but_its_size_is() -> None:
    interpreter = interpreter_of(SNIPPET)
    gather = interpreter.module.functions["gather"]
    env = interpreter.entry_parameters(gather, root=True)
    assert mark_entry(interpreter.local_data, gather, env) is not None
    state = State(env)
    frame = Frame("gather", None, (), 0, (gather,))
    assert not _own(interpreter.pure(ast.parse("items.requires_grad", mode="eval").body, state, frame))
    assert _own(interpreter.pure(ast.parse("items.numel()", mode="eval").body, state, frame))
    assert _own(interpreter.pure(ast.parse("items.total", mode="eval").body, state, frame))
