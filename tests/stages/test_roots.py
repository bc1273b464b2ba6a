"""Stage `roots`: which rank-dependent raises and root differences are worth a query — a `raise`
under a test naming literal ranks (`raises_on_named_ranks`), the `else: raise` of a dispatch on
every rank from 0 (`unknown_rank_raise`), a root the code means to differ (`unreported_root`)."""

from __future__ import annotations

from collcheck.static import groups
from collcheck.static.program import Exit, ExitKind, Path
from collcheck.static.roots import raises_on_named_ranks, unknown_rank_raise, unreported_root
from collcheck.static.symbolic import RANK, Atom, Compare, Const, Expr, GroupVal, Member, Not

RAISE = Exit(ExitKind.RAISE, "m.py", 3, 8)


def raising(*conds: Expr) -> Path:
    return Path(conds, (), RAISE)


def test_a_raise_guarded_by_a_literal_rank_takes_part() -> None:
    assert raises_on_named_ranks(raising(Compare("==", RANK, Const(1))))
    assert raises_on_named_ranks(raising(Member(RANK, (Const(0), Const(2)))))
    # a sentinel no rank has, a data check, and no guard at all do not
    assert not raises_on_named_ranks(raising(Compare("!=", RANK, Const(-1))))
    assert not raises_on_named_ranks(raising(Atom("missing", "shared")))
    assert not raises_on_named_ranks(raising())


def test_the_else_raise_of_a_dispatch_naming_every_rank_from_zero() -> None:
    dispatch = raising(Not(Compare("==", RANK, Const(0))), Not(Compare("==", RANK, Const(1))))
    assert unknown_rank_raise(dispatch) and not raises_on_named_ranks(dispatch)
    with_a_gap = raising(Not(Compare("==", RANK, Const(0))), Not(Compare("==", RANK, Const(2))))
    assert not unknown_rank_raise(with_a_gap)  # rank 1 raises in a world of 3


def test_a_root_each_rank_names_itself_behind_a_guard_it_cannot_follow() -> None:
    guard = Atom("call:self.is_last_stage()", "shared")
    guarded = Path((guard,), ())
    assert unreported_root(RANK, RANK, guarded, guarded, None)
    unguarded = Path((), ())
    assert not unreported_root(RANK, RANK, unguarded, unguarded, None)  # every rank its own root


def test_a_root_computed_from_the_rank_on_a_group_of_unknown_members() -> None:
    unknown = GroupVal("tp", None)
    plain = Path((), ())
    first_member = groups.global_rank_of("tp", 0)
    assert unreported_root(first_member, first_member, plain, plain, unknown)
    assert not unreported_root(Const(0), Const(1), plain, plain, unknown)  # two literal roots
    assert not unreported_root(RANK, RANK, plain, plain, unknown)
