"""Stage test of collcheck/static/roles.py: which constructor numbers pick a process's part in
point-to-point transfers (by the class's own tests and peers, never by a name)."""

from __future__ import annotations

import ast

import pytest

from collcheck.static.names import ImportTable, add_import
from collcheck.static.roles import picks_p2p_role, stores

from .conftest import catalog, source_of

CLASS = """
class Stage:
    def __init__(self, stage, stages, level, rank, group):
        self.stage = stage
        self.stages = stages
        self.level = level
        self.rank = rank
        self.group = group

    def hand_over(self, t):
        if self.stage == 0:
            dist.all_reduce(t)
        else:
            dist.recv(t, src=self.stage - 1)
        if self.stage < self.stages - 1:
            dist.send(t, dst=(self.stage + 1) % self.stages)
        if self.level == 3:
            dist.barrier(group=self.group)
        if self.rank == 0:
            dist.send(t, dst=1)
        if self.group is None:
            dist.recv(t, src=0)
"""


def _verdict(attribute: str, body: str = CLASS) -> bool:
    tree = ast.parse(source_of(body))
    imports = ImportTable()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            add_import(imports, node)
    owner = next(node for node in tree.body if isinstance(node, ast.ClassDef))
    return picks_p2p_role(owner, attribute, imports, catalog())


@pytest.mark.parametrize(
    ("attribute", "picks"),
    [
        ("stage", True),  # its tests guard a receive and a send, and peers are a step from it
        ("stages", False),  # compared with, and a ring's size in a peer: no place of its own
        ("level", False),  # tested around a collective only: a configured level is tested so too
        ("rank", False),  # guards a send only, and is called `rank`: neither makes a place
        ("group", False),  # tested against None
    ],
)
def test_a_number_picks_a_role_by_the_transfers_its_tests_guard(attribute: str, picks: bool) -> None:
    assert _verdict(attribute) is picks


def test_a_peer_one_step_from_the_number_is_enough() -> None:
    body = """
    class Ring:
        def __init__(self, index):
            self.index = index

        def pass_on(self, t):
            dist.isend(t, dst=self.index + 1).wait()
    """
    assert _verdict("index", body)


def test_an_attribute_stored_twice_is_counted_twice() -> None:
    tree = ast.parse(source_of(CLASS + "\n    def reset(self):\n        self.stage = 0\n"))
    owner = next(node for node in tree.body if isinstance(node, ast.ClassDef))
    assert stores(owner, "stage") == 2 and stores(owner, "stages") == 1
