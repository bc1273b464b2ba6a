"""Collectives on two groups issued in opposite orders by two ranks that belong to both.

In: the solver of a region and two of its paths. Out: the divergence, if two ranks can take those
paths, both belong to the two groups, and one issues a collective on the first group where the
other issues one on the second (the same collectives before that point). Each then waits for the
other in a collective the other has not reached: a hang. Per group, the two sequences may well be
the same, which is why the per-channel comparison (`solve`) does not see it.

Only where both ranks are sure to belong to both groups: the world group holds every rank, a
group of known members is checked by the solver, and a group of unknown members is one both
ranks issue collectives on. Two groups that are both of unknown members are left alone: a
pipeline group and a data-parallel group of one grid share a single rank, and issuing their
collectives in either order does not hang (it may compute something else, which is no hang).
"""

from __future__ import annotations

from typing import Any

from collcheck.static.divergence import Divergence, DivergenceKind, PairQuery, found
from collcheck.static.program import CommEvent, Element, EventKind, Path, Region
from collcheck.static.smt import RegionSolver
from collcheck.static.symbolic import GroupVal, Z3Translator

WORLD = "world"


def crossed_groups(
    solver: RegionSolver, region: Region, a: Path, b: Path, channel_of: Any
) -> list[Divergence]:
    """`channel_of(element)` names the channel of an element (`solve._channel_key`): "world",
    "group:<key>", "p2p", or None for a group that differs between ranks."""
    if a is b:
        return []
    seq_a = tuple(e for e in a.events if channel_of(e) != "p2p")
    seq_b = tuple(e for e in b.events if channel_of(e) != "p2p")
    index = _first_difference(seq_a, seq_b, channel_of)
    if index is None:
        return []
    x, y = seq_a[index], seq_b[index]
    if not (_plain(x) and _plain(y)):
        return []
    first, second = channel_of(x), channel_of(y)
    if first is None or second is None or first == second:
        return []
    # Each must still reach the other's group later: then both belong to both, and each waits.
    if not (_later_on(seq_a, index, second, channel_of) and _later_on(seq_b, index, first, channel_of)):
        return []
    groups = [_group(e) for e, channel in ((x, first), (y, second)) if channel != WORLD]
    if len(groups) == 2 and all(group.members is None for group in groups):
        return []  # two groups of unknown members: perhaps two axes of one grid
    membership = groups[0] if groups else None
    others = groups[1:]

    def extra(tr: Z3Translator) -> Any:
        facts = []
        found_atoms = solver.atoms_of(a) | solver.atoms_of(b)
        for other in others:
            facts.extend(solver.both_members(tr, other, found_atoms))
        return tr.z3.And(*facts) if facts else tr.z3.BoolVal(True)

    query = PairQuery(solver, region, first, membership, a, b, seq_a, seq_b)
    return found(query, DivergenceKind.SEQUENCE, index, extra)


def _first_difference(seq_a: tuple[Element, ...], seq_b: tuple[Element, ...], channel_of: Any) -> int | None:
    for index, (x, y) in enumerate(zip(seq_a, seq_b, strict=False)):
        if x.signature() != y.signature() or channel_of(x) != channel_of(y):
            return index
    return None


def _plain(element: Element) -> bool:
    """A collective call (not a loop, a group creation or a callback into unknown code)."""
    return isinstance(element, CommEvent) and element.kind is EventKind.COLLECTIVE


def _later_on(sequence: tuple[Element, ...], index: int, channel: str, channel_of: Any) -> bool:
    return any(_plain(e) and channel_of(e) == channel for e in sequence[index + 1 :])


def _group(event: Element) -> GroupVal:
    assert isinstance(event, CommEvent) and event.group is not None
    return event.group
