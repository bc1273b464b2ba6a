"""Stage `membership`: the parts of a condition that may be a group's membership predicate and
the listed member a test picks (`candidate_parts`, `mentions_group`, `position_of`). Whether a
condition IS the predicate (`is_membership_predicate`, `roles`) is in tests/test_membership.py."""

from __future__ import annotations

from collcheck.static import groups
from collcheck.static.membership import candidate_parts, mentions_group, position_of
from collcheck.static.symbolic import RANK, Atom, BoolOp, Compare, Const, Not

KEY = "tp"
MEMBER = groups.membership(groups.RANKS_PREFIX + KEY)


def test_the_listed_member_a_test_picks() -> None:
    assert position_of(Compare("==", RANK, groups.global_rank_of(KEY, 0)), KEY) == ("listed", 0)
    assert position_of(Compare("!=", groups.global_rank_of(KEY, -1), RANK), KEY) == ("listed", -1)
    assert position_of(Compare("==", groups.local_rank(KEY), Const(2)), KEY) == ("local", 2)
    # another group, another comparison, or a plain rank test: no position
    assert position_of(Compare("==", RANK, groups.global_rank_of("pp", 0)), KEY) is None
    assert position_of(Compare("<", groups.local_rank(KEY), Const(2)), KEY) is None
    assert position_of(Compare("==", RANK, Const(0)), KEY) is None


def test_candidate_parts_split_a_conjunction_and_look_through_a_negation() -> None:
    first = Compare("==", RANK, groups.global_rank_of(KEY, 0))
    flag = Atom("flag", "shared")
    assert candidate_parts(BoolOp("and", (first, flag))) == [first]  # a lone atom is asserted as it is
    assert candidate_parts(Not(first)) == [first]
    either = BoolOp("or", (first, flag))
    assert candidate_parts(either) == [either]


def test_only_conditions_that_mention_the_group_are_asked_about() -> None:
    assert mentions_group(BoolOp("and", (MEMBER, Atom("flag", "shared"))), KEY)
    assert mentions_group(Compare("==", RANK, groups.global_rank_of(KEY, 1)), KEY)
    assert not mentions_group(Compare("==", RANK, Const(0)), KEY)
    assert not mentions_group(groups.membership(groups.RANKS_PREFIX + "pp"), KEY)
