"""A helper is inlined for a per-process value only when it hands that value back itself.

`calls.CallResolver.returns_matter` inlines a quiet helper whose `return` carries a clock, a random
draw or a file's presence (`[nondeterministic]`), and not one whose `return` builds a container of
such draws: a list with one random entry per poller is as long on every rank, and taking it for a
per-process value made a list-emptiness test before an all-reduce diverge (sglang's failure
injection in disaggregation/utils.py).
"""

from __future__ import annotations

import ast

from collcheck.static.names import dotted, scalar_calls


def _names(source: str) -> set[str]:
    expression = ast.parse(source, mode="eval").body
    return {".".join(dotted(call.func) or ()) for call in scalar_calls(expression)}


def test_a_compared_draw_is_handed_back() -> None:
    assert "time.time" in _names("time.time() > deadline")
    assert "os.path.isfile" in _names("bool(os.path.isfile(path))")


def test_draws_inside_a_built_list_are_not() -> None:
    assert "random.random" not in _names("[0 if random.random() < p else q.poll() for q in qs]")
    assert "random.random" not in _names("lambda: random.random()")


def test_a_sliced_values_name_is_shown_as_the_source_spells_it() -> None:
    from collcheck.static.why import source_label

    # the evaluator names a slice `slice:<text>@line:col`; a message showed the mark (deepspeed)
    assert source_label("slice:logits.shape[:-1]@12:7") == "logits.shape[:-1]"


def test_a_name_bound_from_a_draw_and_a_tuple_element_are_handed_back() -> None:
    function = ast.parse("def f(p, d):\n    found = os.path.exists(p)\n    return found\n").body[0]
    assert isinstance(function, ast.FunctionDef)
    last = function.body[-1]
    assert isinstance(last, ast.Return) and last.value is not None
    returned = last.value
    assert "os.path.exists" in {".".join(dotted(c.func) or ()) for c in scalar_calls(returned, function)}
    assert "time.time" in _names("(time.time() > d, path)")
