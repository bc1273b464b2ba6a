"""Divergences next to a hand-off: may what unknown code does with a callable absorb them?

A call that hands unknown code a communicating callable (`study.optimize(objective)`,
`apply(dist.all_reduce, xs)`) is a callback event: the callable may run any number of times, zero
included, issuing some of the collectives it names each time (`CommEvent.callback_ops`; None
when those are not all known). A divergence between two ranks' sequences that holds whatever
every callback does is still a hang: rank 0's barrier before a hand-off of an all-gathering
function is matched by nothing on the other ranks. One that some behaviour of the callbacks
could make disappear (rank 0's barrier against a hand-off of a function that issues barriers)
is not reported.

In: a `Divergence` (its kind and the two ranks' sequences). Out: whether it may be absorbed.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from collcheck.static.calls import CALLBACK_OP, REMOTE_OP
from collcheck.static.divergence import Divergence, DivergenceKind
from collcheck.static.program import CommEvent, Element, EventKind, LoopEvent
from collcheck.static.state import Frame

# Kinds whose divergence index is a position in the sequences (elements after it are not reached).
ORDERED_KINDS = frozenset({DivergenceKind.SEQUENCE, DivergenceKind.SWAP, DivergenceKind.LOOP_EXIT})
MAX_CELLS = 40_000  # sequence pairs larger than this are not matched: assume they may be absorbed


def behind_unknown_code(divergence: Divergence) -> bool:
    """A callback takes part in `divergence` and may account for it. For an order divergence, a
    callback at or before the point where the ranks part takes part; the divergence is then kept
    only when no behaviour of the callbacks makes the two sequences equal. For the other kinds (a
    root, a trip count, a group), any callback in either sequence takes part, and it may."""
    seq_a, seq_b = divergence.sequence_a, divergence.sequence_b
    ordered = divergence.kind in ORDERED_KINDS
    involved = any(
        (index <= divergence.index or not ordered) and is_callback(element)
        for sequence in (seq_a, seq_b)
        for index, element in enumerate(sequence)
    ) or any(e is not None and is_callback(e) for e in (divergence.event_a, divergence.event_b))
    if not involved:
        return False
    if not ordered:
        return True
    return may_match(seq_a, seq_b)


def is_callback(element: Element) -> bool:
    if isinstance(element, LoopEvent):
        return CALLBACK_OP in element.body_ops
    return element.op == CALLBACK_OP


def may_match(seq_a: Sequence[Element], seq_b: Sequence[Element]) -> bool:
    """Some behaviour of the callbacks makes the two sequences issue the same collectives: each
    callback stands for any number of calls, each one of its ops (any element at all when they
    are unknown); other elements match elements of the same signature. A loop counts as one
    element, which a callback may stand for when it shares an op with the loop's body."""
    if len(seq_a) * len(seq_b) > MAX_CELLS:
        return True
    if any(_unknown_callback(e) for e in (*seq_a, *seq_b)):
        return True
    # reachable[i][j]: the first i elements of a and the first j of b can be made equal.
    width = len(seq_b) + 1
    reachable = [[False] * width for _ in range(len(seq_a) + 1)]
    reachable[0][0] = True
    for i in range(len(seq_a) + 1):
        for j in range(width):
            if not reachable[i][j]:
                continue
            x = seq_a[i] if i < len(seq_a) else None
            y = seq_b[j] if j < len(seq_b) else None
            if x is not None and is_callback(x):
                reachable[i + 1][j] = True  # the callback stops
                if y is not None and _absorbs(x, y):
                    reachable[i][j + 1] = True  # it stands for the other rank's element
            if y is not None and is_callback(y):
                reachable[i][j + 1] = True
                if x is not None and _absorbs(y, x):
                    reachable[i + 1][j] = True
            if x is None or y is None or is_callback(x) or is_callback(y):
                continue
            if x.signature() == y.signature():
                reachable[i + 1][j + 1] = True
    return reachable[len(seq_a)][len(seq_b)]


def _unknown_callback(element: Element) -> bool:
    """A callback that may issue anything: its ops are unknown."""
    return is_callback(element) and _callback_ops(element) is None


def _callback_ops(element: Element) -> frozenset[str] | None:
    """What a callback element may issue. A loop whose body hands on one callable (a hook
    registered per parameter) is the same as one hand-off, whose ops the loop's other
    collectives join; a loop of several hand-offs, or of one not first in its body: unknown."""
    if isinstance(element, CommEvent):
        return element.callback_ops
    first = element.first
    if element.body_ops.count(CALLBACK_OP) != 1 or first is None or first.op != CALLBACK_OP:
        return None
    if first.callback_ops is None:
        return None
    return first.callback_ops | {op for op in element.body_ops if op != CALLBACK_OP}


def _absorbs(callback: Element, other: Element) -> bool:
    """`callback` may issue what `other` issues (some op of it: a loop may run its ops in part)."""
    ops = _callback_ops(callback)
    assert ops is not None
    if is_callback(other):
        return True
    wanted = set(other.body_ops) if isinstance(other, LoopEvent) else {other.op}
    return bool(wanted & ops)


def callback_event(
    call: ast.Call, path: str, frame: Frame, remote: bool = False, ops: frozenset[str] | None = None
) -> CommEvent:
    """A call into unknown code with a communicating callback: what it issues, and how often,
    is unknown (an `opaque` event: a divergence it may absorb is not reported, see handoff.py).
    `ops`: the collectives the callable may issue (None: not all known). `remote`: the callable
    runs on another process: a `remote` event, on no channel (the sender's own sequence is known;
    see the engine for the destination's)."""
    return CommEvent(
        op=REMOTE_OP if remote else CALLBACK_OP,
        kind=EventKind.REMOTE if remote else EventKind.OPAQUE,
        path=path,
        line=call.lineno,
        column=call.col_offset,
        end_line=call.end_lineno or call.lineno,
        end_column=call.end_col_offset or call.col_offset,
        chain=frame.chain,
        callback_ops=ops,
    )
