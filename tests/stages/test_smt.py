"""Stage `smt`: one `RegionSolver` per region, asked whether two ranks can take two paths ->
a verdict ("sat" / "unsat" / "unknown") and, for "sat", the smallest `RankWitness`."""

from __future__ import annotations

from typing import Any

from collcheck.findings import Budget
from collcheck.static.program import CommEvent, EventKind, Path, Region, RegionKind
from collcheck.static.smt import RankWitness, RegionSolver, SolveStats
from collcheck.static.symbolic import RANK, Atom, Compare, Const, GroupVal, Not, Z3Translator

BARRIER = CommEvent("barrier", EventKind.COLLECTIVE, "m.py", 3, 4, 3, 18)
RANK_ZERO = Compare("==", RANK, Const(0))
ON_ZERO = Path((RANK_ZERO,), (BARRIER,))
ELSEWHERE = Path((Not(RANK_ZERO),), ())


def solver_for(
    *paths: Path, world: int | None = None, rlimit: int = 2_000_000
) -> tuple[RegionSolver, SolveStats]:
    stats = SolveStats()
    region = Region("f", RegionKind.FUNCTION, list(paths), 1, path_name="m.py")
    return RegionSolver(region, world, rlimit, stats), stats


def test_two_ranks_parted_by_a_rank_test_are_found_with_the_smallest_world() -> None:
    solver, stats = solver_for(ON_ZERO, ELSEWHERE)
    verdict, witness, raw = solver.satisfiable(ON_ZERO, ELSEWHERE, None)
    assert verdict == "sat" and witness == RankWitness(world=2, rank_a=0, rank_b=1)
    assert raw is not None and stats.queries >= 1


def test_a_fixed_world_size_bounds_the_witness() -> None:
    on_three = Path((Compare("==", RANK, Const(3)),), (BARRIER,))
    solver, _ = solver_for(on_three, ELSEWHERE, world=4)
    verdict, witness, _ = solver.satisfiable(on_three, ELSEWHERE, None)
    assert verdict == "sat" and witness is not None
    assert witness.world == 4 and witness.rank_a == 3 and witness.rank_b != 0
    # rank 7 does not exist in a world of 4
    on_seven = Path((Compare("==", RANK, Const(7)),), (BARRIER,))
    solver, _ = solver_for(on_seven, ELSEWHERE, world=4)
    assert solver.satisfiable(on_seven, ELSEWHERE, None)[0] == "unsat"


def test_one_rank_test_cannot_hold_on_two_ranks() -> None:
    solver, stats = solver_for(ON_ZERO)
    assert solver.satisfiable(ON_ZERO, ON_ZERO, None)[:2] == ("unsat", None)
    assert stats.queries == 1 and stats.settled == 0  # asked, not settled


def test_paths_parted_by_values_alike_on_every_rank_are_settled_without_z3() -> None:
    flag = Atom("flag", "shared")
    taken, skipped = Path((flag,), (BARRIER,)), Path((Not(flag),), ())
    solver, stats = solver_for(taken, skipped)
    assert solver.satisfiable(taken, skipped, None)[:2] == ("unsat", None)
    assert stats.queries == 0 and stats.settled == 1
    assert solver.uniform_conditions(taken) and not solver.uniform_conditions(ON_ZERO)


def test_an_extra_fact_narrows_the_query() -> None:
    solver, _ = solver_for(ON_ZERO, ELSEWHERE)

    def rank_b_is_five(tr: Z3Translator) -> Any:
        return tr.rank("b") == 5

    verdict, witness, _ = solver.satisfiable(ON_ZERO, ELSEWHERE, None, extra=rank_b_is_five)
    assert verdict == "sat" and witness is not None and witness.rank_b == 5 and witness.world >= 6


def test_both_ranks_must_be_members_of_the_group_compared() -> None:
    # a group of ranks 0 and 1 only: rank 0 against a rank that is not 0 means rank 1
    pair = GroupVal("g", Compare("<", Atom("member", "shared"), Const(2)))
    solver, _ = solver_for(ON_ZERO, ELSEWHERE)
    verdict, witness, _ = solver.satisfiable(ON_ZERO, ELSEWHERE, pair)
    assert verdict == "sat" and witness is not None and {witness.rank_a, witness.rank_b} == {0, 1}
    nobody_else = GroupVal("solo", Compare("==", Atom("member", "shared"), Const(0)))
    assert solver.satisfiable(ON_ZERO, ELSEWHERE, nobody_else)[0] == "unsat"


def test_never_asks_about_one_rank() -> None:
    solver, _ = solver_for(ON_ZERO)
    assert solver.never(lambda tr: [tr.rank("a") < 0])
    assert not solver.never(lambda tr: [tr.rank("a") == 1])


def test_a_query_out_of_units_is_unknown_and_a_budget_cut() -> None:
    solver, stats = solver_for(ON_ZERO, ELSEWHERE, rlimit=1)
    assert solver.satisfiable(ON_ZERO, ELSEWHERE, None)[:2] == ("unknown", None)
    assert stats.unknown == 1 and len(stats.notes) == 1
    (cut,) = stats.cuts
    assert (cut.function, cut.budget, cut.limit) == ("f", Budget.Z3_QUERY, 1)
