"""Stage `syntax`: facts read off the tree alone — names a loop changes or reads, calls in
evaluation order, set expressions, the lazy-initialisation idiom, handlers of per-rank errors."""

from __future__ import annotations

import ast

from collcheck.static.syntax import (
    assigned_names,
    called_names,
    calls_in_order,
    catches_data_errors,
    global_names,
    irrefutable,
    is_set_expr,
    lazy_initialisation,
    loop_variant_names,
    may_leave,
    mentions,
    mutated_names,
    read_names,
)

from .conftest import expr, statement


def test_names_a_loop_changes_from_one_iteration_to_the_next() -> None:
    stmt = statement("for i in xs:\n    buf = make(n)\n    total = total + i\n    x.y = i\n")
    assert isinstance(stmt, ast.For)
    variant = loop_variant_names(stmt)
    assert {"i", "total", "x.y"} <= variant
    assert "buf" not in variant  # assigned once from loop-invariant names


def test_reads_and_mentions() -> None:
    node = expr("f(a.b.c, d)")
    assert {"f", "a", "a.b", "a.b.c", "d"} <= read_names(node)
    assert mentions(node, {"a.b"}) and not mentions(node, {"e"})


def test_assigned_and_mutated_names() -> None:
    body = ast.parse("a = 1\nb, (c, d) = v\nxs.append(1)\nfor e in r:\n    pass\n").body
    assert {"a", "b", "c", "d", "e"} <= assigned_names(body)
    assert "xs" in mutated_names(body)


def test_calls_come_in_evaluation_order() -> None:
    order = [ast.unparse(c.func) for c in calls_in_order(expr("f(g(x), h())"))]
    assert order == ["g", "h", "f"]


def test_set_expressions() -> None:
    assert is_set_expr(expr("{1, 2}")) and is_set_expr(expr("set(xs)"))
    assert is_set_expr(expr("a.union(b)"), {"a"})
    assert is_set_expr(expr("s"), {"s"}) and not is_set_expr(expr("[1, 2]"))


def test_called_names_and_globals() -> None:
    tree = ast.parse("def f():\n    global COUNT\n    g()\n    obj.h()\n")
    assert {"g", "h"} <= called_names(tree)
    function = tree.body[0]
    assert isinstance(function, ast.FunctionDef) and global_names(function) == {"COUNT"}


def test_a_value_made_on_first_use_and_cached() -> None:
    stmt = statement("if CACHE is None:\n    CACHE = build()\n")
    assert isinstance(stmt, ast.If)
    assert lazy_initialisation(stmt, {"CACHE"}) == "CACHE"
    assert lazy_initialisation(stmt, set()) is None  # no function rebinds it: not a cache


def test_handlers_of_errors_one_rank_can_hit_alone() -> None:
    def handler(text: str) -> ast.ExceptHandler:
        node = statement(f"try:\n    pass\n{text}\n    pass\n")
        assert isinstance(node, ast.Try)
        return node.handlers[0]

    assert catches_data_errors(handler("except OSError:"))
    assert catches_data_errors(handler("except torch.cuda.OutOfMemoryError:"))
    assert not catches_data_errors(handler("except KeyboardInterrupt:"))


def test_a_block_that_may_leave() -> None:
    assert may_leave(ast.parse("def f():\n    if x:\n        return\n").body[0].body)  # type: ignore[attr-defined]
    assert not may_leave(ast.parse("x = 1\ny = 2\n").body)


def test_irrefutable_cases() -> None:
    match = statement(
        "match x:\n    case 0:\n        pass\n    case _:\n        pass\n    case y:\n        pass\n"
        "    case z if z:\n        pass\n    case [a]:\n        pass\n"
    )
    assert isinstance(match, ast.Match)
    assert [irrefutable(case) for case in match.cases] == [False, True, True, False, False]
