"""Stage `conditions`: where each branch test of a path came from (`ConditionSources.note` and
`lookup` -> `ConditionSource`), so that a counterexample can say which test split the ranks."""

from __future__ import annotations

import ast

from collcheck.findings import ConditionKind
from collcheck.static.conditions import ConditionSources, shorten, source_of
from collcheck.static.symbolic import RANK, Compare, Const, Not, negate

from .conftest import interpreter_of


def test_a_test_and_its_negation_lead_back_to_the_node_it_was_read_at() -> None:
    node = ast.parse("if rank == 0:\n    pass\n").body[0]
    assert isinstance(node, ast.If)
    sources = ConditionSources()
    test = Compare("==", RANK, Const(0))
    sources.note(test, source_of(node.test, "m.py"))
    found = sources.lookup(test)
    assert found is not None
    source, written = found
    assert (source.path, source.line, source.column, source.kind) == ("m.py", 1, 3, ConditionKind.TEST)
    assert source.text == "rank == 0" and written is test
    other = sources.lookup(negate(test))  # the other arm's condition
    assert other is not None and other[0] is source


def test_conditions_are_looked_up_by_identity_not_by_value() -> None:
    sources = ConditionSources()
    node = ast.parse("x", mode="eval").body
    sources.note(Compare("==", RANK, Const(0)), source_of(node, "m.py"))
    assert sources.lookup(Compare("==", RANK, Const(0))) is None  # an equal but other object
    assert sources.lookup(Not(Compare("==", RANK, Const(0)))) is None


def test_a_loop_condition_shows_the_text_it_is_given() -> None:
    node = ast.parse("xs", mode="eval").body
    source = source_of(node, "m.py", ConditionKind.LOOP, "for x in xs")
    assert source.text == "for x in xs" and source.kind == ConditionKind.LOOP


def test_long_texts_are_shortened_to_one_line() -> None:
    assert shorten("a\n   b") == "a b"
    cut = shorten("x" * 100, limit=10)
    assert cut == "xxxxxxx..." and len(cut) == 10


def test_the_interpreter_notes_the_tests_it_forks_on() -> None:
    body = """
    def f(t):
        if dist.get_rank() == 0:
            dist.barrier()
    """
    interpreter = interpreter_of(body)
    (region,) = interpreter.run_function(interpreter.module.functions["f"], None, "f")
    for path in region.paths:
        (cond,) = path.conds
        found = interpreter.conditions.lookup(cond)
        assert found is not None and found[0].text == "dist.get_rank() == 0"
