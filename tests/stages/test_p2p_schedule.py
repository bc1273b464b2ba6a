"""Stage `p2p_schedule`: a function region's blocking sends and receives simulated rank by rank
(`schedule_deadlock` -> `Verdict`), and the first stuck world z3 agrees with turned into a
`Divergence` with its `blocked` ranks (`confirm`). The matcher alone (`run`) and whole files are in
tests/test_p2p_schedule.py; here the stage's entry points on hand-made regions."""

from __future__ import annotations

from collcheck.static.divergence import DivergenceKind
from collcheck.static.p2p_schedule import confirm, has_transfers, schedule_deadlock
from collcheck.static.program import CommEvent, EventKind, Path, Posting, path_of
from collcheck.static.smt import SolveStats
from collcheck.static.symbolic import RANK, WORLD, BinOp, Compare, Const, Expr, Not

from .solve_support import region

FIRST = Compare("==", RANK, Const(0))
OTHER = BinOp("-", Const(1), RANK)  # the other rank of two


def send(line: int) -> CommEvent:
    return CommEvent("send", EventKind.P2P_SEND, "m.py", line, 4, line, 20, peer=OTHER)


def recv(line: int) -> CommEvent:
    return CommEvent("recv", EventKind.P2P_RECV, "m.py", line, 4, line, 20, peer=OTHER)


def never_nonblocking(path: str, recorded: frozenset[tuple[int, int, int, int]]) -> bool:
    return False


def test_both_ranks_sending_first_is_a_stuck_world_that_z3_confirms() -> None:
    both_send = region(Path((FIRST,), (send(3), recv(4))), Path((Not(FIRST),), (send(6), recv(7))))
    verdict = schedule_deadlock(both_send, {}, 2, never_nonblocking)
    assert verdict.region is both_send and not verdict.clean
    (stuck,) = verdict.stuck
    assert stuck.world == 2 and stuck.heads == (0, 0) and set(stuck.wait.ranks) == {0, 1}
    (divergence,) = confirm(verdict, 2, 2_000_000, SolveStats())
    assert divergence.kind is DivergenceKind.P2P
    assert {blocked.rank for blocked in divergence.blocked} == {0, 1}
    assert all(not blocked.finished and blocked.event.op == "send" for blocked in divergence.blocked)


def test_a_matched_exchange_runs_to_its_end_on_every_rank() -> None:
    matched = region(Path((FIRST,), (send(3), recv(4))), Path((Not(FIRST),), (recv(6), send(7))))
    verdict = schedule_deadlock(matched, {}, 2, never_nonblocking)
    assert verdict.stuck == () and verdict.clean
    assert confirm(verdict, 2, 2_000_000, SolveStats()) == []


def test_a_region_without_blocking_point_to_point_calls_is_not_simulated() -> None:
    barrier = CommEvent("barrier", EventKind.COLLECTIVE, "m.py", 3, 4, 3, 20)
    quiet = region(Path((), (barrier,)))
    assert not has_transfers(quiet, {})
    assert schedule_deadlock(quiet, {}, 2, never_nonblocking).region is None


def test_a_file_with_non_blocking_calls_keeps_no_wait() -> None:
    both_send = region(Path((FIRST,), (send(3), recv(4))), Path((Not(FIRST),), (send(6), recv(7))))
    assert schedule_deadlock(both_send, {}, 2, lambda path, recorded: True).stuck == ()


NEXT = BinOp("%", BinOp("+", RANK, Const(1)), WORLD)


def posted(line: int, posting: Posting, peer: Expr | None = NEXT) -> CommEvent:
    return CommEvent("P2POp", EventKind.P2P_POSTED, "m.py", line, 8, line, 40, peer=peer, posting=posting)


def both_to_next() -> Path:
    """A batch that sends to the next rank and receives from the next rank too (a ring's mistake)."""
    sending, receiving = posted(3, Posting.PREPARED_SEND), posted(4, Posting.PREPARED_RECV)
    made = (sending, receiving, posted(6, Posting.BATCH, None))
    return path_of((), made, None)


def test_a_posted_transfer_nobody_answers_is_kept_when_another_world_ran_clean() -> None:
    ring = region(both_to_next())
    assert has_transfers(ring, {}) and ring.paths[0].events == ()  # nothing the sequences compare
    verdict = schedule_deadlock(ring, {}, None, never_nonblocking)
    assert [stuck.world for stuck in verdict.stuck] == [3, 4, 5, 6]  # two ranks pair up
    first = verdict.stuck[0]
    assert first.wait.finished == 1 and first.chosen[0][1][first.heads[0]][0].posting is Posting.PREPARED_SEND


def test_half_of_an_exchange_is_no_wait() -> None:
    # Every rank only sends to the next rank: the receives are another function's.
    sends = region(path_of((), (posted(3, Posting.SEND),), None))
    verdict = schedule_deadlock(sends, {}, None, never_nonblocking)
    assert verdict.stuck == () and not verdict.clean


def test_a_non_blocking_call_outside_the_recorded_transfers_keeps_no_wait() -> None:
    ring = region(both_to_next())
    seen: list[frozenset[tuple[int, int, int, int]]] = []

    def elsewhere(path: str, recorded: frozenset[tuple[int, int, int, int]]) -> bool:
        seen.append(recorded)
        return True  # the file names one more, somewhere the run did not record

    assert schedule_deadlock(ring, {}, None, elsewhere).stuck == ()
    assert seen and seen[0] == frozenset({(3, 8, 3, 40), (4, 8, 4, 40), (6, 8, 6, 40)})
