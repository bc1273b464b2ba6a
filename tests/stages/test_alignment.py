"""Stage `alignment`: two ranks' sequences -> the `Parting` where they part (how many elements
pair up before it, and whose element there pairs with nothing), on hand-made events."""

from __future__ import annotations

import pytest

from collcheck.static import alignment
from collcheck.static.alignment import Parting, Unmatched, first_parting, positional_parting
from collcheck.static.program import LoopEvent
from collcheck.static.symbolic import RANK

from .solve_support import event

FORWARD_GUARDED, FORWARD, BACKWARD = event("forward", 14), event("forward", 18), event("backward", 19)


def test_sequences_that_agree_position_by_position_do_not_part() -> None:
    # The same signatures at other places still pair at run time: no parting.
    assert first_parting((event("all_reduce", 3), BACKWARD), (event("all_reduce", 7), BACKWARD)) is None
    assert positional_parting((), ()) is None


def test_an_extra_call_before_the_same_call_is_the_one_reported() -> None:
    """Rank 0's guarded forward, then the training forward both ranks run: position by position the
    ranks part at the training forward against the backward; aligned, at the guarded one."""
    rank0, rank1 = (FORWARD_GUARDED, FORWARD, BACKWARD), (FORWARD, BACKWARD)
    assert positional_parting(rank0, rank1) == 1
    assert first_parting(rank0, rank1) == Parting(0, Unmatched.A)
    assert first_parting(rank1, rank0) == Parting(0, Unmatched.B)


def test_a_call_missing_in_the_middle_of_a_loop_body() -> None:
    skipped, kept = event("all_reduce", 5), event("all_reduce", 6)
    before = event("barrier", 3)
    assert first_parting((before, kept), (before, skipped, kept)) == Parting(1, Unmatched.B)


def test_two_extra_calls_are_reported_at_the_first() -> None:
    extra = (event("all_reduce", 3), event("barrier", 4))
    shared = (event("all_reduce", 6), event("barrier", 7))
    assert positional_parting(extra + shared, shared) == 2
    assert first_parting(extra + shared, shared) == Parting(0, Unmatched.A)


def test_a_different_call_at_one_position_shows_both_ranks_elements() -> None:
    after = event("barrier", 9)
    parting = first_parting((event("all_reduce", 3), after), (event("broadcast", 5), after))
    assert parting == Parting(0, Unmatched.BOTH)
    assert parting is not None and parting.shows_a() and parting.shows_b()


def test_a_swap_of_different_calls_is_shown_at_both_sites() -> None:
    """The same calls in another order: not an insertion and a deletion, whichever the alignment
    would pick."""
    rank0 = (event("all_reduce", 3), event("barrier", 4))
    rank1 = (event("barrier", 6), event("all_reduce", 7))
    assert first_parting(rank0, rank1) == Parting(0, Unmatched.BOTH)


def test_a_sequence_that_ends_early_parts_where_it_ends() -> None:
    assert first_parting((event("barrier", 3),), (event("barrier", 3), BACKWARD)) == Parting(1, Unmatched.B)
    assert first_parting((), (BACKWARD,)) == Parting(0, Unmatched.B)


def test_loops_align_by_their_signature() -> None:
    loop = LoopEvent("m.py", 8, 4, RANK, ("all_reduce",), "xs", event("all_reduce", 9))
    assert first_parting((event("barrier", 3), loop), (loop,)) == Parting(0, Unmatched.A)


def test_a_middle_over_the_bound_is_compared_position_by_position(monkeypatch: pytest.MonkeyPatch) -> None:
    # The backward made at another place on rank 1: no common suffix to take off.
    rank0, rank1 = (FORWARD_GUARDED, FORWARD, BACKWARD), (FORWARD, event("backward", 30))
    assert first_parting(rank0, rank1) == Parting(0, Unmatched.A)
    monkeypatch.setattr(alignment, "MAX_CELLS", 5)
    assert first_parting(rank0, rank1) == Parting(1, Unmatched.BOTH)
