"""Stage `solve`: which pairs of paths and channels of a region to compare (`solve_region`) ->
`[Divergence]` of each `DivergenceKind`, on hand-made regions (no interpreter)."""

from __future__ import annotations

from collcheck.static.divergence import Divergence, DivergenceKind
from collcheck.static.program import Exit, ExitKind, LoopEvent, Path
from collcheck.static.smt import RankWitness, SolveStats
from collcheck.static.solve import solve_region
from collcheck.static.symbolic import RANK, Atom, BinOp, Compare, Const, Not

from .solve_support import NOT_RANK_ZERO, RANK_ZERO, event, region


def solve(*paths: Path, **options: object) -> tuple[list[Divergence], SolveStats]:
    stats = SolveStats()
    found = solve_region(region(*paths), None, 2_000_000, stats, **options)  # type: ignore[arg-type]
    return found, stats


def test_a_collective_on_some_ranks_only_is_a_sequence_divergence() -> None:
    barrier = event("barrier", 3)
    (divergence,), _ = solve(Path((RANK_ZERO,), (barrier,)), Path((NOT_RANK_ZERO,), ()))
    assert divergence.kind is DivergenceKind.SEQUENCE and divergence.channel == "world"
    assert (divergence.index, divergence.event_a, divergence.event_b) == (0, barrier, None)
    assert divergence.model == RankWitness(2, 0, 1)
    assert divergence.sequence_a == (barrier,) and divergence.sequence_b == ()


def test_a_call_one_rank_makes_in_addition_is_the_element_reported() -> None:
    """Rank 0 runs a forward under its guard, then the forward every rank runs (alignment.py): the
    divergence names the guarded one, and rank 1 shows no element of its own there."""
    guarded, forward, backward = event("forward", 4), event("forward", 6), event("backward", 7)
    (divergence,), _ = solve(
        Path((RANK_ZERO,), (guarded, forward, backward)), Path((NOT_RANK_ZERO,), (forward, backward))
    )
    assert divergence.kind is DivergenceKind.SEQUENCE and divergence.exit is None
    assert (divergence.index, divergence.event_a, divergence.event_b) == (0, guarded, None)


def test_the_exit_that_left_the_shorter_path_is_named() -> None:
    leave = Exit(ExitKind.RETURN, "m.py", 3, 8)
    (divergence,), _ = solve(Path((RANK_ZERO,), (), leave), Path((NOT_RANK_ZERO,), (event("barrier", 5),)))
    assert divergence.kind is DivergenceKind.SEQUENCE and divergence.exit == leave


def test_the_same_collectives_on_swapped_operands_are_a_swap() -> None:
    first = (event("all_reduce", 3, operands=("a",)), event("all_reduce", 4, operands=("b",)))
    second = (event("all_reduce", 6, operands=("b",)), event("all_reduce", 7, operands=("a",)))
    (divergence,), _ = solve(Path((RANK_ZERO,), first), Path((NOT_RANK_ZERO,), second))
    assert divergence.kind is DivergenceKind.SWAP


def test_a_root_or_reduce_op_that_differs_between_ranks() -> None:
    (root,), _ = solve(Path((), (event("broadcast", 3, root=RANK),)))  # one path: every rank its own root
    assert root.kind is DivergenceKind.ROOT and root.path_a is root.path_b
    witness = root.model
    assert root.on_rank(root.argument, witness.rank_a) == str(witness.rank_a)
    assert root.on_rank(root.argument, witness.rank_b) == str(witness.rank_b)
    summed = Path((RANK_ZERO,), (event("all_reduce", 3, reduce_op=Const("sum")),))
    maxed = Path((NOT_RANK_ZERO,), (event("all_reduce", 5, reduce_op=Const("max")),))
    (op,), _ = solve(summed, maxed)
    assert op.kind is DivergenceKind.REDUCE_OP
    assert op.on_rank(op.argument, 0) == "sum"


def test_a_communicating_loop_with_a_per_rank_trip_count() -> None:
    loop = LoopEvent(
        "m.py", 3, 4, BinOp("max", Const(0), RANK), ("all_reduce",), "range(rank)", event("all_reduce", 4)
    )
    (divergence,), _ = solve(Path((), (loop,)))
    assert divergence.kind is DivergenceKind.TRIP
    witness = divergence.model
    assert divergence.trips is not None
    assert divergence.on_rank(divergence.trips, witness.rank_a) != divergence.on_rank(
        divergence.trips, witness.rank_b
    )


def test_uniform_regions_and_alike_decisions_are_settled_without_a_query() -> None:
    flag = Atom("flag", "shared")
    found, stats = solve(Path((flag,), (event("barrier", 3),)), Path((Not(flag),), ()))
    assert found == [] and stats.queries == 0 and stats.settled > 0
    found, stats = solve(Path((), (event("barrier", 3),)))
    assert found == [] and stats.queries == 0


def test_a_divergence_on_per_process_values_only_is_marked() -> None:
    clock = Atom("clock", "nondet", why="wall-clock time")
    late = BinOp("-", clock, Const(0))
    (divergence,), _ = solve(Path((late,), (event("barrier", 3),)), Path((Not(late),), ()))
    assert divergence.nondet_only and divergence.nondet_why == "wall-clock time"
    (ranked,), _ = solve(Path((RANK_ZERO,), (event("barrier", 3),)), Path((NOT_RANK_ZERO,), ()))
    assert not ranked.nondet_only and ranked.nondet_why == ""


def test_at_most_max_findings_are_returned() -> None:
    # rank k issues k barriers: every pair of ranks parts somewhere else
    paths = [
        Path((Compare("==", RANK, Const(k)),), tuple(event("barrier", 10 * k + i) for i in range(k)))
        for k in range(4)
    ]
    assert len(solve(*paths)[0]) > 2
    found, _ = solve(*paths, max_findings=2)
    assert len(found) == 2
