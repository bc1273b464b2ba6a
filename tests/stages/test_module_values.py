"""Stage `module_values`: a module's globals (its top-level code run without recording events)
and the attributes its classes set on `self` (`complete_module`)."""

from __future__ import annotations

from collcheck.static.interpret import Interpreter
from collcheck.static.module_values import complete_module
from collcheck.static.symbolic import RANK, Const, TupleVal, is_rank_dependent

from .conftest import module_of

SNIPPET = """
SIZES = [1, 2]
LEADER = dist.get_rank() == 0
_GROUP = None
def group():
    global _GROUP
    if _GROUP is None:
        _GROUP = dist.new_group([0, 1])
    return _GROUP
class Trainer:
    LIMIT = 3
    def __init__(self):
        self.rank = dist.get_rank()
        self.steps = 10
    def step(self):
        return self.rank
if __name__ == "__main__":
    MAIN_ONLY = 1
"""


def test_globals_are_what_the_top_level_code_leaves() -> None:
    module = module_of(SNIPPET)
    complete_module(module, Interpreter(module))
    assert module.globals["SIZES"] == TupleVal((Const(1), Const(2)))
    assert is_rank_dependent(module.globals["LEADER"])
    assert "_GROUP" not in module.globals  # a function rebinds it: no value known at a call
    assert "MAIN_ONLY" not in module.globals  # the main guard is not import-time code


def test_attributes_set_on_self_are_known_in_every_method() -> None:
    module = module_of(SNIPPET)
    complete_module(module, Interpreter(module))
    attributes = module.classes["Trainer"].attributes
    assert attributes["rank"] == RANK
    assert attributes["LIMIT"] == Const(3)  # from the class body (the model)
    assert "steps" not in attributes  # the same on every rank and no group: nothing to keep
