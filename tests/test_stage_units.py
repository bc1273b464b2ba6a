"""The stages of the static analyzer tested alone: the value evaluator without the interpreter,
the call resolver without running anything, the module model without the engine."""

from __future__ import annotations

import ast

from collcheck.catalog import load_catalog
from collcheck.static.calls import CallKind, CallResolver
from collcheck.static.loader import ModuleInfo, build_module
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import RANK, is_rank_dependent
from collcheck.static.values import ValueEvaluator

SOURCE = """
import sys
import torch.distributed as dist

def helper(x):
    dist.all_reduce(x)

def quiet(x):
    return x + 1

def caller(x):
    quiet(x)
    helper(x)

def body(x, pool):
    pool.submit(helper)
    sys.exit(1)
"""


def _module() -> ModuleInfo:
    return build_module(ast.parse(SOURCE), "m.py", load_catalog())


def _expr(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def _call(text: str) -> ast.Call:
    node = _expr(text)
    assert isinstance(node, ast.Call)
    return node


def test_the_evaluator_alone_taints_values_derived_from_the_rank() -> None:
    evaluator = ValueEvaluator(_module())
    frame = Frame("f", None, (), 0, ())
    state = State({})
    assert RANK in [evaluator.pure(_expr("dist.get_rank()"), state, frame)]
    assert is_rank_dependent(evaluator.pure(_expr("dist.get_rank() % 2 == 0"), state, frame))
    assert not is_rank_dependent(evaluator.pure(_expr("len(items) + 3"), state, frame))


def test_the_resolver_alone_names_each_kind_of_call() -> None:
    module = _module()
    resolver = CallResolver(module)
    frame = Frame("body", None, (), 0, ())
    kinds = {
        text: resolver.resolve(_call(text), frame).kind
        for text in ("dist.barrier()", "helper(t)", "sys.exit(1)", "pool.submit(helper)", "print(t)")
    }
    assert kinds == {
        "dist.barrier()": CallKind.COLLECTIVE,
        "helper(t)": CallKind.HELPER,
        "sys.exit(1)": CallKind.EXIT,
        "pool.submit(helper)": CallKind.CALLBACK,
        "print(t)": CallKind.UNKNOWN,
    }
    collective = resolver.resolve(_call("dist.all_reduce(t)"), frame)
    assert collective.spec is not None and collective.spec.op == "all_reduce"


def test_the_model_alone_finds_the_communicating_functions() -> None:
    module = _module()
    # `body` hands `helper` to unknown code, which may call it (a callback event, see calls.py):
    # it reaches helper's collectives as surely as `caller` does.
    assert {f.name for f in module.communicating} == {"helper", "caller", "body"}
    assert module.loader is None and module.globals == {}


def test_has_effect_agrees_with_resolve() -> None:
    resolver = CallResolver(_module())
    frame = Frame("body", None, (), 0, ())
    for text in ("dist.barrier()", "helper(t)", "sys.exit(1)", "pool.submit(helper)", "print(t)", "quiet(t)"):
        call = _call(text)
        resolved = resolver.resolve(call, frame).kind
        assert resolver.has_effect(call, frame) == (resolved is not CallKind.UNKNOWN), text


def test_a_catalog_value_names_a_groups_listed_member() -> None:
    from collcheck.static import groups
    from collcheck.static.catalog_values import value_from_spec

    assert value_from_spec("group_ranks[tp][0]", "here") == groups.global_rank_of("tp", 0)
    assert value_from_spec("group_ranks[pp][-1]", "here") == groups.global_rank_of("pp", -1)
    assert is_rank_dependent(groups.global_rank_of("tp", 0))  # another block, another member
    assert not is_rank_dependent(groups.global_rank_of("world", 0))


def test_a_cached_return_is_told_from_an_ordinary_early_return() -> None:
    from collcheck.static.syntax import cached_return

    tree = ast.parse(
        "def probe(k):\n"
        "    global CACHE\n"
        "    if CACHE is not None:\n"
        "        return CACHE[k]\n"
        "    CACHE = {}\n"
        "    return CACHE[k]\n"
    )
    function = tree.body[0]
    assert isinstance(function, ast.FunctionDef)
    test, rest = function.body[1], function.body[2:]
    assert cached_return(test, rest, {"CACHE"})
    assert not cached_return(test, rest, set())  # not a global any function rebinds
    assert not cached_return(test, rest[1:], {"CACHE"})  # the rest never fills it


def test_loops_whose_trip_count_depends_on_the_rank_are_uneven_inside() -> None:
    from collcheck.static.state import Enclosing
    from collcheck.static.symbolic import Const

    assert Enclosing.NO_LOOP.inside(Const(4)) is Enclosing.EVEN_LOOPS
    assert Enclosing.EVEN_LOOPS.inside(RANK) is Enclosing.UNEVEN_LOOP
    assert Enclosing.UNEVEN_LOOP.inside(Const(4)) is Enclosing.UNEVEN_LOOP
    assert Enclosing.EVEN_LOOPS.inside(None) is Enclosing.UNEVEN_LOOP  # a `while`
