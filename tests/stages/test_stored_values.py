"""Stage `stored_values`: what an attribute holds that a class stores from one parameter of one
method, read where that method is called (`stored_from`), and which values a process computes
alike on every run (`kept_alike`)."""

from __future__ import annotations

import ast

from collcheck.static import groups
from collcheck.static.stored_values import kept_alike, stored_from
from collcheck.static.symbolic import RANK, Atom, BinOp, Const, IfExp

from .conftest import module_of

SNIPPET = """
class Space:
    def __init__(self):
        self.rank = None
        self.size = None
    def build(self, size, rank):
        self.rank = rank
        self.size = size + 1
    def release(self):
        self.rank = None
def ensure(group):
    rank = dist.get_rank(group)
    space = make()
    if space.rank != rank:
        space.build(4, rank=rank)
def elsewhere(space, rank):
    return space.rank == rank
"""


def _holder(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def test_the_attribute_holds_the_name_this_function_passes_to_the_one_storing_method() -> None:
    module = module_of(SNIPPET)
    ensure = module.functions["ensure"]
    found = stored_from(module, "Space", "rank", _holder("space"), ensure)
    assert isinstance(found, ast.Name) and found.id == "rank"


def test_no_stored_value_where_the_pattern_does_not_hold() -> None:
    module = module_of(SNIPPET)
    ensure, elsewhere = module.functions["ensure"], module.functions["elsewhere"]
    assert stored_from(module, "Space", "size", _holder("space"), ensure) is None  # not a parameter
    assert stored_from(module, "Space", "rank", _holder("other"), ensure) is None  # another object
    assert stored_from(module, "Space", "rank", _holder("space"), elsewhere) is None  # called elsewhere
    assert stored_from(module, "Missing", "rank", _holder("space"), ensure) is None


def test_a_process_keeps_its_ranks_and_the_values_every_rank_shares() -> None:
    in_group = groups.local_rank("tp")
    shared = Atom("config.tp_rank", "shared")
    assert kept_alike(RANK) and kept_alike(in_group) and kept_alike(shared)
    assert kept_alike(IfExp(Atom("use_tp", "shared"), shared, in_group))
    assert not kept_alike(IfExp(BinOp("==", RANK, Const(0)), shared, in_group))  # a per-rank choice
    assert not kept_alike(Atom("free_memory", "nondet"))  # this process's own data
