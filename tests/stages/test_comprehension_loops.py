"""Stage `comprehension_loops`: a list comprehension that prepares transfers run as its loop
(the interpreter records one transfer per item, with the item's peer)."""

from __future__ import annotations

import ast

from collcheck.static.comprehension_loops import ComprehensionLoops, comprehensions, target_names
from collcheck.static.program import CommEvent, LoopEvent, Posting
from collcheck.static.symbolic import Const

from .conftest import expr, regions_of


def test_the_loop_of_a_comprehension_is_built_once_at_its_place() -> None:
    node = expr("batch([P2POp(isend, t, p) for p in peers if p != me], key=lambda: [y for y in z])")
    (found,) = comprehensions(node)  # not the one inside the lambda
    loops = ComprehensionLoops()
    loop = loops.loop(found)
    assert loop is not None and loops.loop(found) is loop
    assert isinstance(loop.body[0], ast.If) and target_names(loop) == ("p",)
    assert (loop.lineno, loop.col_offset) == (found.lineno, found.col_offset)
    nested = expr("[a for a in b for c in a]")
    assert isinstance(nested, ast.ListComp) and loops.loop(nested) is None  # two generators: not followed


def test_a_comprehension_of_p2p_ops_records_a_loop_of_prepared_transfers() -> None:
    body = """
    def f(chunks):
        rank, world = dist.get_rank(), dist.get_world_size()
        peer = 7
        ops = [dist.P2POp(dist.isend, chunks[peer], (rank + 1) % world) for peer in range(3)]
        dist.batch_isend_irecv(ops)
        dist.send(chunks[0], peer)
    """
    function, *loops = regions_of(body)
    (path,) = function.paths
    kinds = [type(e).__name__ if isinstance(e, LoopEvent) else e.posting or e.kind for e in path.schedule]
    assert kinds[0] == "LoopEvent" and kinds[1] is Posting.BATCH
    assert [e.op for e in path.events] == ["send"]  # posted transfers are no element of the sequence
    (send,) = path.events
    assert isinstance(send, CommEvent) and send.peer == Const(7)  # the comprehension's `peer` is its own
    (loop,) = loops
    assert [e.posting for e in loop.paths[0].schedule if isinstance(e, CommEvent)] == [Posting.PREPARED_SEND]
