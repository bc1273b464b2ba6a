"""BoundedSolver.add and resource_count give z3py's answers on their fast paths and off them."""

from __future__ import annotations

import z3

from collcheck.static.budget import BoundedSolver, bounded_solver, resource_count


def _solver() -> tuple[z3.Context, BoundedSolver]:
    context = z3.Context()
    return context, bounded_solver(z3.Solver(ctx=context))


def test_plain_facts_of_the_solver_context_are_asserted_in_order() -> None:
    context, solver = _solver()
    x = z3.Int("x", context)
    solver.add(x > 1, x < 3)
    assert solver.check() == z3.sat
    assert solver.model()[x].as_long() == 2
    assert [str(fact) for fact in solver.assertions()] == ["x > 1", "x < 3"]


def test_what_z3py_converts_still_goes_through_z3py() -> None:
    context, solver = _solver()
    x = z3.Int("x", context)
    solver.add([x > 0, x < 5])  # a list is flattened by z3py
    solver.push()
    solver.add(False)  # a Python bool becomes a z3 term
    assert solver.check() == z3.unsat
    solver.pop()
    solver.add(z3.ForAll([z3.Int("y", context)], x <= x + 0))  # a quantifier
    assert solver.check() == z3.sat


def _z3py_count(solver: BoundedSolver) -> int:
    statistics = solver.statistics()
    keys = list(statistics.keys())
    return int(statistics.get_key_value("rlimit count")) if "rlimit count" in keys else 0


def test_resource_count_reads_z3s_counter() -> None:
    context, solver = _solver()
    assert resource_count(solver) == _z3py_count(solver)
    x = z3.Int("x", context)
    solver.add(x * x == 49, x > 0)
    solver.check()
    assert resource_count(solver) == _z3py_count(solver) > 0
