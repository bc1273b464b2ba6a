"""Stage `anchor`: where a divergence is shown (`locate` -> `Location` and its origin), for each
`Anchor` a rule may choose."""

from __future__ import annotations

from collcheck.findings import Location
from collcheck.static.anchor import Anchor, locate
from collcheck.static.divergence import Divergence, DivergenceKind
from collcheck.static.program import Element, Exit, ExitKind, LoopEvent, Path, Site
from collcheck.static.smt import RankWitness
from collcheck.static.symbolic import RANK

from .solve_support import event, region

LEAVE = Exit(ExitKind.RETURN, "m.py", 5, 8)
BARRIER = event("barrier", 9)


def divergence(a: Element | None, b: Element | None = None, exit_: Exit | None = None) -> Divergence:
    return Divergence(
        kind=DivergenceKind.SEQUENCE,
        region=region(Path((), ())),
        path_a=Path((), ()),
        path_b=Path((), ()),
        channel="world",
        index=0,
        event_a=a,
        event_b=b,
        model=RankWitness(2, 0, 1),
        sequence_a=(),
        sequence_b=(),
        exit=exit_,
    )


def test_the_element_or_the_exit() -> None:
    found = divergence(BARRIER, None, LEAVE)
    assert locate(found, Anchor.ELEMENT) == (Location("m.py", 9, 4), ("m.py", 9))
    assert locate(found, Anchor.EXIT) == (Location("m.py", 5, 8), ("m.py", 5))
    # shown at the exit, arising at the collective it skips
    assert locate(found, Anchor.GUARDING_EXIT) == (Location("m.py", 5, 8), ("m.py", 9))


def test_an_element_reached_through_a_helper_is_shown_at_the_call() -> None:
    call = Site("f", "sync", "m.py", 20, 4, "comm.py")
    inside = event("barrier", 3, chain=(call,))
    assert locate(divergence(inside), Anchor.ELEMENT) == (Location("m.py", 20, 4), ("m.py", 3))


def test_a_loop_missing_on_some_ranks_points_at_its_collective_unless_the_loop_is_asked_for() -> None:
    loop = LoopEvent("m.py", 7, 4, RANK, ("barrier",), "xs", BARRIER)
    assert locate(divergence(loop), Anchor.ELEMENT)[0] == Location("m.py", 9, 4)
    assert locate(divergence(loop), Anchor.LOOP)[0] == Location("m.py", 7, 4)


def test_nothing_to_point_at_is_the_region() -> None:
    assert locate(divergence(None), Anchor.ELEMENT) == (Location("m.py", 1, 0), None)
