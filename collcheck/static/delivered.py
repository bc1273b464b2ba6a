"""Receivers that act on what a rooted collective delivered to them.

In: two paths of a region (two ranks' executions) and their collective sequences on one channel,
up to the first place they differ. Out: whether that difference is one the protocol between a
rooted collective's source and its receivers settles, so that the solver does not compare it.

A broadcast's source describes what it sends (a length, a list of tensor descriptions) and the
receivers act on the description they received. The source and the receivers are two arms of
the code (`if rank == src: ... else: ...`), each calling the broadcast at its own place. A value
received from a root is the root's value, so what the receivers decide from it is what the source
decided when it built it; collcheck does not model the value itself (a size packed in a tensor,
`pickle.dumps` never empty), so it takes the two to agree when the protocol could agree:

* a loop of the receivers that counts what it received runs as often as the source's loop in the
  other arm, unless the source's own count depends on the rank (`counted_from_source`);
* a test of the receivers on what they received (`if size == 0: return`) chose the receivers' arm
  that matches the source's when such an arm exists: another path of the receivers, with the same
  decisions on everything else, that issues what the source issues (`follows_source`).

A receiver that decides on a value of its own (its local list, a length it computed before the
broadcast) is still compared with the source, and so is a source whose arms no receivers' arm
matches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from collcheck.static.program import CommEvent, Element, Path
from collcheck.static.smt import produced_at
from collcheck.static.symbolic import Expr, atoms, is_rank_dependent

Sequence = tuple[Element, ...]
Spot = tuple[int, int]


def _site(event: CommEvent) -> tuple[object, ...]:
    return (event.path, event.line, event.column, event.chain)


def _deliveries(received: Sequence, sent: Sequence, index: int) -> set[Spot]:
    """The (line, column) of the rooted collectives of `received` before `index` whose partner
    in `sent` is the same collective called at another place: the other arm of a protocol. The
    same call on both sides is no protocol (both ranks receive, or both send)."""
    spots = set()
    for event, partner in zip(received[:index], sent[:index], strict=False):
        if not (isinstance(event, CommEvent) and isinstance(partner, CommEvent)):
            continue
        if event.root is None or partner.root is None or event.op != partner.op:
            continue
        if _site(event) != _site(partner):
            spots.add((event.line, event.column))
    return spots


def counted_from_source(received: Sequence, sent: Sequence, index: int, trip_x: Expr, trip_y: Expr) -> bool:
    """The loop at `index` of `received` (trip `trip_x`) counts what a rooted collective delivered
    before it, and the other rank, in the other arm of the code, issued the matching call (the
    `broadcast_tensor_dict` protocol): the counts are taken to agree, unless the source's own
    count `trip_y` depends on the rank. A receiver that loops over a list of its own is compared."""
    if is_rank_dependent(trip_y):
        return False
    tested = produced_at(atoms(trip_x)) - produced_at(atoms(trip_y))
    return bool(tested & _deliveries(received, sent, index))


def _decisions(conds: Iterable[Expr], spots: set[Spot]) -> tuple[object, ...] | None:
    """What a receiver decided besides the delivered values: its tests before the first test of
    a delivered value, and the later tests that involve the rank. The tests after it on the
    same data are left out (what the receiver does with the received object: the source decided
    them when it built it). None when no test reads a delivered value."""
    conds = tuple(conds)
    for position, cond in enumerate(conds):
        if produced_at(atoms(cond)) & spots:
            later = frozenset(
                c for c in conds[position + 1 :] if is_rank_dependent(c) and not produced_at(atoms(c)) & spots
            )
            return (conds[:position], later)
    return None


def follows_source(
    paths: Iterable[tuple[Path, Sequence]],
    a: Path,
    b: Path,
    seq_a: Sequence,
    seq_b: Sequence,
    index: int,
    agree: Callable[[Sequence, Sequence], bool],
) -> bool:
    """`a` and `b` part at `index` after a rooted collective that one of them (the receiver)
    received from the other's arm, and the receiver's path tests what it received: the pair is
    settled when another path of the region (`paths`, each with its sequence) takes the
    receiver's decisions on everything but the delivered values and issues what the source
    issues (`agree`): the receiver takes that path, as the source's description chooses it."""
    candidates: list[tuple[Path, Sequence]] | None = None  # read only when a receiver tests a delivery
    for receiver, received, sent in ((b, seq_b, seq_a), (a, seq_a, seq_b)):
        spots = _deliveries(received, sent, index)
        if not spots:
            continue
        decided = _decisions(receiver.conds, spots)
        if decided is None:
            continue
        candidates = list(paths) if candidates is None else candidates
        for other, issued in candidates:
            if other is receiver or other is a or other is b:
                continue
            if _decisions(other.conds, spots) == decided and agree(issued, sent):
                return True
    return False
