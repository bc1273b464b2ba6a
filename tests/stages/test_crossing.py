"""Stage `crossing`: collectives on two groups issued in opposite orders by two ranks that belong
to both (`crossed_groups` -> `[Divergence]`), on hand-made paths."""

from __future__ import annotations

from collcheck.static.crossing import crossed_groups
from collcheck.static.divergence import DivergenceKind
from collcheck.static.program import CommEvent, Element, Path
from collcheck.static.smt import RegionSolver, SolveStats
from collcheck.static.symbolic import MEMBER, Compare, Const, GroupVal

from .solve_support import NOT_RANK_ZERO, RANK_ZERO, event, region

PAIR = GroupVal("pair", Compare("<", MEMBER, Const(2)), created=True)  # ranks 0 and 1
GRID_ROW = GroupVal("row", None)
GRID_COLUMN = GroupVal("column", None)


def channel(element: Element) -> str | None:
    group = element.group if isinstance(element, CommEvent) else None
    return "world" if group is None else f"group:{group.key}"


def crossed(first: tuple[Element, ...], second: tuple[Element, ...]) -> list[DivergenceKind]:
    a, b = Path((RANK_ZERO,), first), Path((NOT_RANK_ZERO,), second)
    where = region(a, b)
    solver = RegionSolver(where, None, 2_000_000, SolveStats())
    return [d.kind for d in crossed_groups(solver, where, a, b, channel)]


def test_the_world_and_a_group_in_opposite_orders_hang_two_members() -> None:
    on_world, on_pair = event("all_reduce", 3), event("all_reduce", 4, group=PAIR)
    assert crossed((on_world, on_pair), (on_pair, on_world)) == [DivergenceKind.SEQUENCE]
    assert crossed((on_world, on_pair), (on_world, on_pair)) == []  # the same order


def test_two_groups_of_unknown_members_are_left_alone() -> None:
    row, column = event("all_reduce", 3, group=GRID_ROW), event("all_reduce", 4, group=GRID_COLUMN)
    assert crossed((row, column), (column, row)) == []  # perhaps two axes of one grid


def test_a_rank_that_never_reaches_the_other_group_is_no_crossing() -> None:
    on_world, on_pair = event("all_reduce", 3), event("all_reduce", 4, group=PAIR)
    assert crossed((on_world,), (on_pair,)) == []
