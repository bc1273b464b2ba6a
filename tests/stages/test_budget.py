"""Stage `budget`: one function's z3 allowance (`solver_allowance`, charged by every query a
`RegionSolver` asks: z3's own count plus `QUERY_UNITS`) and the file's safety clock (`Deadline`).
The clock's backstop, workers and configuration are in tests/test_file_budget.py and
tests/test_work_budget.py."""

from __future__ import annotations

import time

import pytest

from collcheck.static.budget import (
    QUERY_UNITS,
    BudgetExceeded,
    Deadline,
    SolverBudgetSpent,
    check_active,
    solver_allowance,
)
from collcheck.static.program import Path
from collcheck.static.smt import RegionSolver, SolveStats

from .solve_support import NOT_RANK_ZERO, RANK_ZERO, event, region

ON_ZERO = Path((RANK_ZERO,), (event("barrier", 3),))
ELSEWHERE = Path((NOT_RANK_ZERO,), ())


def solver() -> RegionSolver:
    return RegionSolver(region(ON_ZERO, ELSEWHERE), None, 2_000_000, SolveStats())


def test_every_query_is_charged_to_the_functions_allowance() -> None:
    with solver_allowance(10_000_000) as allowance:
        assert solver().satisfiable(ON_ZERO, ELSEWHERE, None)[0] == "sat"
    assert allowance.spent >= QUERY_UNITS  # the query and the minimising checks after it


def test_a_spent_allowance_stops_the_functions_queries() -> None:
    with pytest.raises(SolverBudgetSpent) as raised, solver_allowance(1):
        solver().satisfiable(ON_ZERO, ELSEWHERE, None)
    assert raised.value.units == 1


def test_no_allowance_means_no_charge() -> None:
    assert solver().satisfiable(ON_ZERO, ELSEWHERE, None)[0] == "sat"


def test_the_deadline_counts_from_its_start() -> None:
    assert not Deadline(60.0, time.monotonic()).expired()
    spent = Deadline(1.0, time.monotonic() - 2.0)
    assert spent.expired() and spent.remaining() < 0
    with pytest.raises(BudgetExceeded):
        spent.check()
    check_active()  # outside a file's budget: nothing to check
