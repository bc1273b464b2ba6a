"""Hand-made regions for the solver stages (`smt`, `solve`, `divergence`, `crossing`)."""

from __future__ import annotations

from collcheck.static.program import CommEvent, EventKind, Path, Region, RegionKind
from collcheck.static.symbolic import RANK, Compare, Const, Not

RANK_ZERO = Compare("==", RANK, Const(0))
NOT_RANK_ZERO = Not(RANK_ZERO)


def event(op: str, line: int, kind: EventKind = EventKind.COLLECTIVE, **fields: object) -> CommEvent:
    return CommEvent(op, kind, "m.py", line, 4, line, 20, **fields)  # type: ignore[arg-type]


def region(*paths: Path, kind: RegionKind = RegionKind.FUNCTION) -> Region:
    return Region("f", kind, list(paths), 1, path_name="m.py")
