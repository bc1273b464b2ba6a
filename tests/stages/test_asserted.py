"""Stage `asserted`: which assertions are facts about a group's structure, the paths that go on
past them, and the facts of a check made once (a memo flag) on its early return."""

from __future__ import annotations

from collcheck.static import groups
from collcheck.static.asserted import is_structure_fact
from collcheck.static.symbolic import RANK, WORLD, Compare, Const, atoms

from .conftest import regions_of

SIZE = groups.group_size("g")
LISTED = groups.member_ranks("g")


def _conditions(body: str, qualname: str = "f") -> set[str]:
    """The names of the atoms in the conditions of the function's paths."""
    (region, *_) = regions_of(body, qualname)
    return {atom.name for path in region.paths for cond in path.conds for atom in atoms(cond)}


def test_size_and_list_tests_are_structure_facts_rank_tests_are_not() -> None:
    assert is_structure_fact(Compare("==", SIZE, WORLD))
    assert is_structure_fact(Compare("==", LISTED, Const((0, 1))))
    assert not is_structure_fact(Compare("==", groups.local_rank("g"), Const(0)))  # fails on some ranks
    assert not is_structure_fact(Compare("==", SIZE, RANK))
    assert not is_structure_fact(groups.membership("ranks"))
    assert not is_structure_fact(Compare("==", WORLD, Const(8)))  # about no group


def test_an_asserted_span_joins_the_path_conditions() -> None:
    body = """
    def f(group):
        assert group.size() == dist.get_world_size(), "whole world"
        dist.new_group(dist.get_process_group_ranks(group))
    """
    assert any(name.startswith(groups.SIZE_PREFIX) for name in _conditions(body))


def test_an_assertion_after_the_collective_that_read_the_list_is_not_taken() -> None:
    body = """
    def f(group):
        dist.new_group(dist.get_process_group_ranks(group))
        assert group.size() == dist.get_world_size()
    """
    assert not any(name.startswith(groups.SIZE_PREFIX) for name in _conditions(body))


def test_a_check_made_once_holds_on_its_early_return() -> None:
    body = """
    class Registry:
        def __init__(self):
            self._checked = False

        def check(self, group):
            if self._checked:
                return
            assert group.size() == dist.get_world_size()
            self._checked = True

        def f(self, group):
            self.check(group)
            dist.new_group(dist.get_process_group_ranks(group))
    """
    (region, *_) = regions_of(body, "Registry.f")
    for path in region.paths:
        assert any(a.name.startswith(groups.SIZE_PREFIX) for cond in path.conds for a in atoms(cond))


def test_a_flag_set_elsewhere_is_no_record_of_the_check() -> None:
    body = """
    class Registry:
        def __init__(self):
            self._checked = False

        def check(self, group):
            if self._checked:
                return
            assert group.size() == dist.get_world_size()
            self._checked = True

        def trust(self):
            self._checked = True

        def f(self, group):
            self.check(group)
            dist.new_group(dist.get_process_group_ranks(group))
    """
    (region, *_) = regions_of(body, "Registry.f")
    assert not all(
        any(a.name.startswith(groups.SIZE_PREFIX) for cond in path.conds for a in atoms(cond))
        for path in region.paths
    )
