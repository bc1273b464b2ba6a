"""Stage `p2p_matching`: concrete schedules of blocking calls and posted transfers run against each
other (`run` -> how far each rank got and the `Wait`), a rank's prepared `P2POp`s placed at the
batch that posts them (`in_posting_order`), and the tests a stuck world passes to be kept."""

from __future__ import annotations

from collcheck.static.p2p_matching import Call, Wait, believable, in_posting_order, run, unanswered_post
from collcheck.static.program import CommEvent, EventKind, Posting


def blocking(kind: EventKind, peer: int, line: int = 1) -> Call:
    return CommEvent("send" if kind is EventKind.P2P_SEND else "recv", kind, "m.py", line, 0, line, 9), peer


def posted(posting: Posting, peer: int, line: int = 1) -> Call:
    return CommEvent("P2POp", EventKind.P2P_POSTED, "m.py", line, 0, line, 9, posting=posting), peer


SEND, RECV = EventKind.P2P_SEND, EventKind.P2P_RECV
BATCH = posted(Posting.BATCH, -1)


def test_a_batch_pairs_whatever_order_its_list_is_in() -> None:
    # Both ranks list their send first: posted, neither blocks (blocking, both would wait).
    first = [posted(Posting.SEND, 1), posted(Posting.RECV, 1)]
    second = [posted(Posting.SEND, 0), posted(Posting.RECV, 0)]
    assert run([first, second]) == ([2, 2], None)
    both_blocking = [[blocking(SEND, 1), blocking(RECV, 1)], [blocking(SEND, 0), blocking(RECV, 0)]]
    assert run(both_blocking)[1] == Wait((0, 1))


def test_a_blocking_receive_meets_a_send_of_the_peers_batch() -> None:
    batch = [posted(Posting.RECV, 1), posted(Posting.SEND, 1)]
    answered = [blocking(RECV, 0), blocking(SEND, 0)]
    assert run([batch, answered]) == ([2, 2], None)


def test_a_posted_transfer_without_partner_is_a_wait_on_the_finished_peer() -> None:
    twice = [posted(Posting.SEND, 1), posted(Posting.SEND, 1, line=2)]
    once = [blocking(RECV, 0)]
    heads, stuck = run([twice, once])
    assert stuck == Wait((0,), finished=1) and heads == [1, 1]  # the second send has no receive
    assert unanswered_post(stuck, [twice, once], heads)
    assert believable(stuck, [twice, once], heads)  # rank 1 does receive from rank 0, once


def test_a_send_nobody_answers_is_not_believable_alone() -> None:
    # Rank 0 sends to rank 1, which exchanges with rank 2 only: half of another function's protocol?
    schedules = [[posted(Posting.SEND, 1)], [posted(Posting.SEND, 2), posted(Posting.RECV, 2)], []]
    schedules[2] = [posted(Posting.RECV, 1), posted(Posting.SEND, 1)]
    heads, stuck = run(schedules)
    assert stuck == Wait((0,), finished=1)
    assert unanswered_post(stuck, schedules, heads) and not believable(stuck, schedules, heads)


def test_prepared_ops_are_posted_at_the_next_batch() -> None:
    made = [posted(Posting.PREPARED_RECV, 1), blocking(SEND, 1), posted(Posting.PREPARED_SEND, 1), BATCH]
    ordered = in_posting_order(made)
    assert ordered == [made[1], made[0], made[2]]
    assert in_posting_order([posted(Posting.PREPARED_SEND, 1)]) is None  # never posted: unknown
