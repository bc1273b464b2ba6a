"""Where a finding is shown: the line a rule anchors its divergence to.

In: a `Divergence` and the rule's `Anchor`. Out: the `Location` shown to the user and the origin
(path, line) where the divergence arises, which the engine uses to report it once — in the helper
that holds it, not again at every caller.
"""

from __future__ import annotations

from enum import Enum

from collcheck.findings import Location
from collcheck.static.divergence import Divergence
from collcheck.static.program import Element, LoopEvent, Site


class Anchor(Enum):
    """A rule's choice of place, among the elements and the exit of a divergence."""

    ELEMENT = "element"  # the first diverging collective (inside a loop that some ranks skip)
    EXIT = "exit"  # the exit that made a rank skip collectives, when there is one
    LOOP = "loop"  # the loop itself, when a loop is among the diverging elements
    GUARDING_EXIT = "guarding_exit"  # shown at the exit, arising at the collective it skips
    # Shown at the condition that reads the cause (the rule's `cause()`: the guard that tests a
    # per-process value), so a suppression there covers it; as GUARDING_EXIT when there is none.
    GUARD = "guard"


def _site_location(chain: tuple[Site, ...], path: str, line: int, column: int) -> Location:
    if chain:
        return Location(chain[0].path, chain[0].line, chain[0].column)
    return Location(path, line, column)


def _element_location(element: Element, anchor: Anchor) -> Location:
    if (
        isinstance(element, LoopEvent)
        and anchor is not Anchor.LOOP
        and element.first is not None
        and not element.chain
    ):
        element = element.first  # a loop missing on some ranks: point at the collective inside it
    return _site_location(element.chain, element.path, element.line, element.column)


def element_location(element: Element) -> Location:
    """Where one element of a sequence is shown: the call in the function (a helper's collective
    at the call of the helper), the collective inside a loop some ranks skip."""
    return _element_location(element, Anchor.ELEMENT)


def locate(d: Divergence, anchor: Anchor) -> tuple[Location, tuple[str, int] | None]:
    """The location shown, and the origin of the divergence (None: the region itself)."""
    if anchor is Anchor.EXIT and d.exit is not None:
        exit_ = d.exit
        return _site_location(exit_.chain, exit_.path, exit_.line, exit_.column), (exit_.path, exit_.line)
    candidates: list[Element] = [e for e in (d.event_a, d.event_b) if e is not None]
    if anchor is Anchor.LOOP:
        loops: list[Element] = [e for e in candidates if isinstance(e, LoopEvent)]
        candidates = loops or candidates
    if not candidates and d.exit is not None:  # a loop left early on some ranks: point at the exit
        exit_ = d.exit
        return _site_location(exit_.chain, exit_.path, exit_.line, exit_.column), (exit_.path, exit_.line)
    if not candidates:
        return Location(d.region.path_name, d.region.line, 0), None
    chosen = min(candidates, key=lambda e: (_element_location(e, anchor).line, e.line))
    location = _element_location(chosen, anchor)
    if anchor in (Anchor.GUARDING_EXIT, Anchor.GUARD) and d.exit is not None:
        # Shown at the guarded exit (one finding for the collectives it skips); the divergence
        # still arises at the collective, so callers further up are not told again.
        exit_ = d.exit
        return _site_location(exit_.chain, exit_.path, exit_.line, exit_.column), (chosen.path, chosen.line)
    if (
        isinstance(chosen, LoopEvent)
        and anchor is not Anchor.LOOP
        and chosen.first is not None
        and not chosen.chain
    ):
        return location, (location.path, location.line)
    return location, (chosen.path, chosen.line)
