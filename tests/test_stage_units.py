"""The stages of the static analyzer tested alone: the value evaluator without the interpreter,
the call resolver without running anything, the module model without the engine."""

from __future__ import annotations

import ast

from collcheck.catalog import load_catalog
from collcheck.static.calls import CallKind, CallResolver
from collcheck.static.model import ModuleInfo, build_module
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
    # `body` only hands `helper` to unknown code: that is a callback, not a call of it.
    assert {f.name for f in module.communicating} == {"helper", "caller"}
    assert module.loader is None and module.globals == {}


def test_has_effect_agrees_with_resolve() -> None:
    resolver = CallResolver(_module())
    frame = Frame("body", None, (), 0, ())
    for text in ("dist.barrier()", "helper(t)", "sys.exit(1)", "pool.submit(helper)", "print(t)", "quiet(t)"):
        call = _call(text)
        resolved = resolver.resolve(call, frame).kind
        assert resolver.has_effect(call, frame) == (resolved is not CallKind.UNKNOWN), text
