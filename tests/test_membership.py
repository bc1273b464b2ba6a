"""Membership predicates (collcheck/static/membership.py): which conditions are taken to hold on
every member of the group they guard, and which still split its members."""

from __future__ import annotations

from typing import Any

import z3

from collcheck.static import groups
from collcheck.static.membership import MAX_NODES, is_membership_predicate, roles
from collcheck.static.symbolic import (
    FALSE,
    RANK,
    TRUE,
    Atom,
    BinOp,
    BoolOp,
    Compare,
    Const,
    Expr,
    IfExp,
    Not,
    Z3Translator,
)

KEY = "self.tie"
MEMBER = groups.membership(groups.RANKS_PREFIX + KEY)
FIRST = Compare("==", RANK, groups.global_rank_of(KEY, 0))
LAST = Compare("==", RANK, groups.global_rank_of(KEY, -1))
ON_FIRST_STAGE = Compare("==", groups.local_rank("self.stage"), Const(0))
ON_LAST_STAGE = Compare(
    "==", groups.local_rank("self.stage"), BinOp("-", groups.group_size("self.stage"), Const(1))
)
CONFIGURED = Atom("self.configured", "shared")


def _decide(expr: Expr, key: str = KEY) -> bool:
    tr = Z3Translator(z3)
    solver = z3.Solver()

    def sat(facts: list[Any]) -> bool | None:
        solver.push()
        solver.add(*facts, *tr.side_constraints)
        verdict = solver.check()
        solver.pop()
        return None if verdict == z3.unknown else verdict == z3.sat

    return is_membership_predicate(expr, key, tr, sat)


def _ends_checked(middle: Expr) -> Expr:
    """`if not member: False elif rank == ranks[0]: first stage elif rank == ranks[-1]: last
    stage else: middle`, as the evaluator writes an inlined helper's returns."""
    return IfExp(
        Not(MEMBER),
        FALSE,
        IfExp(FIRST, ON_FIRST_STAGE, IfExp(LAST, ON_LAST_STAGE, middle)),
    )


def test_a_membership_test_with_layout_checks_of_the_listed_members_is_the_groups_predicate() -> None:
    assert _decide(_ends_checked(TRUE))
    assert _decide(IfExp(CONFIGURED, _ends_checked(TRUE), FALSE))  # a configuration may switch it off


def test_the_listed_members_alone_are_not_every_member() -> None:
    assert not _decide(_ends_checked(FALSE))
    assert not _decide(BoolOp("or", (FIRST, LAST)))


def test_a_further_rank_condition_outside_a_positional_test_splits_the_members() -> None:
    assert roles(BoolOp("and", (MEMBER, Compare("==", RANK, Const(0)))), KEY) is None
    assert roles(_ends_checked(ON_FIRST_STAGE), KEY) is None  # another group's stage, for any member
    assert not _decide(BoolOp("and", (MEMBER, Compare("==", BinOp("%", RANK, Const(2)), Const(0)))))


def test_a_test_of_another_groups_ranks_is_not_this_groups_predicate() -> None:
    assert not _decide(_ends_checked(TRUE), key="self.stage")
    other = groups.membership(groups.RANKS_PREFIX + "self.stage")
    assert not _decide(IfExp(other, TRUE, FALSE))


def test_a_condition_true_outside_the_group_is_not_its_predicate() -> None:
    assert not _decide(BoolOp("or", (MEMBER, CONFIGURED)))


def test_specialised_roles_name_each_listed_member_and_the_others() -> None:
    found = roles(_ends_checked(TRUE), KEY)
    assert found is not None
    assert len(found.members) == 3  # ranks[0], ranks[-1], any other member


def test_a_condition_too_large_to_walk_is_not_taken_for_a_predicate() -> None:
    def tested(times: int) -> Expr:  # `rank in ranks and rank in ranks and ...`, rank read each time
        return IfExp(FIRST, TRUE, BoolOp("and", (MEMBER,) * times))

    assert roles(tested(10), KEY) is not None
    assert roles(tested(MAX_NODES), KEY) is None
