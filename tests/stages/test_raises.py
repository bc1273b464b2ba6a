"""Stage `raises`: whether a function of the run may reach a `raise` of its own (`may_raise`),
itself or through the functions and methods it calls. The class a `raise` names, what a handler
catches and the data tests of a path are in tests/test_raises.py."""

from __future__ import annotations

from collcheck.static.loader import FunctionNode
from collcheck.static.raises import may_raise

from .conftest import function, module_of

SNIPPET = """
def check(x):
    if x is None:
        raise ValueError("missing")
def validated(x):
    check(x)
    return x
def bare():
    try:
        pass
    except Exception:
        raise
def quiet(x):
    return x
def recursive(n):
    return recursive(n - 1)
class Loader:
    def load(self):
        self.verify()
    def verify(self):
        raise RuntimeError("bad")
"""


def raising(qualname: str, known: dict[FunctionNode, bool] | None = None) -> bool:
    module = module_of(SNIPPET)
    return may_raise(function(module, qualname), module, {} if known is None else known)


def test_a_function_that_raises_itself_or_through_a_helper() -> None:
    assert raising("check")
    assert raising("validated")
    assert raising("Loader.load")  # through `self.verify()`


def test_a_bare_reraise_and_a_quiet_function_are_not_raises_of_their_own() -> None:
    assert not raising("bare")  # re-raises what it caught: nothing it names
    assert not raising("quiet")
    assert not raising("recursive")  # and recursion ends


def test_answers_are_kept_in_the_table_given() -> None:
    module = module_of(SNIPPET)
    known: dict[FunctionNode, bool] = {}
    assert may_raise(module.functions["validated"], module, known)
    assert known[module.functions["validated"]] and known[module.functions["check"]]
