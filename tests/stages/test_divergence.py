"""Stage `divergence`: a `PairQuery` and a kind -> a `Divergence` (`found`), when z3 finds two
ranks for it; the `Blocked` ranks of a point-to-point deadlock; group terms of events."""

from __future__ import annotations

from collcheck.static.divergence import (
    Blocked,
    DivergenceKind,
    PairQuery,
    found,
    group_leaves,
    group_term,
    is_world,
)
from collcheck.static.program import EventKind, Path
from collcheck.static.smt import RegionSolver, SolveStats
from collcheck.static.symbolic import RANK, Compare, Const, GroupVal, IfExp

from .solve_support import NOT_RANK_ZERO, RANK_ZERO, event, region


def query(a: Path, b: Path) -> PairQuery:
    where = region(a, b)
    solver = RegionSolver(where, None, 2_000_000, SolveStats())
    return PairQuery(solver, where, "world", None, a, b, a.events, b.events)


def test_found_builds_the_divergence_at_the_index_asked() -> None:
    first, second = event("barrier", 3), event("all_reduce", 4)
    a, b = Path((RANK_ZERO,), (first, second)), Path((NOT_RANK_ZERO,), (first,))
    (divergence,) = found(query(a, b), DivergenceKind.SEQUENCE, 1)
    assert divergence.kind is DivergenceKind.SEQUENCE and divergence.index == 1
    assert divergence.event_a == second and divergence.event_b is None  # past the end of b
    assert (divergence.path_a, divergence.path_b) == (a, b)
    assert divergence.model.world == 2 and {divergence.model.rank_a, divergence.model.rank_b} == {0, 1}
    assert divergence.group == "" and divergence.blocked == ()


def test_nothing_is_found_where_no_two_ranks_take_the_paths() -> None:
    a = Path((RANK_ZERO,), (event("barrier", 3),))
    assert found(query(a, a), DivergenceKind.SEQUENCE, 0) == []


def test_the_values_of_a_root_divergence_are_each_ranks_root() -> None:
    a = Path((), (event("broadcast", 3, root=RANK),))
    (divergence,) = found(query(a, a), DivergenceKind.ROOT, 0)
    witness = divergence.model
    assert divergence.argument is not None
    assert (divergence.argument.on_a, divergence.argument.on_b) == (str(witness.rank_a), str(witness.rank_b))


def test_blocked_ranks_say_where_they_wait() -> None:
    send = event("send", 3, kind=EventKind.P2P_SEND)
    waiting = Blocked(rank=0, calls=((send, 1),), at=0)
    assert not waiting.finished and waiting.event == send and waiting.peer == 1
    assert Blocked(rank=1, calls=((send, 0),), at=1).finished


def test_group_terms_of_events() -> None:
    world = event("barrier", 3)
    assert is_world(group_term(world))
    group = GroupVal("g", None, created=True)
    chosen = IfExp(Compare("==", RANK, Const(0)), Const(None), group)
    grouped = event("barrier", 4, group=GroupVal("chosen", None, per_rank=True), group_term=chosen)
    assert group_term(grouped) == chosen
    assert group_leaves(chosen) == [Const(None), group]
    assert group_term(event("barrier", 5, group=group)) == group
    assert {kind.value for kind in DivergenceKind} >= {"sequence", "swap", "root", "trip", "p2p"}
