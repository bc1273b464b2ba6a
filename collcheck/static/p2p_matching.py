"""Matching concrete point-to-point schedules: every rank's sends and receives, each with its peer
as a number, run against each other until nothing more can match.

In: one schedule per rank of a world (p2p_schedule builds them), each a list of `Call`s: a
blocking `send`/`recv` or a posted transfer (`isend`, `irecv`, or a `P2POp` at the
`batch_isend_irecv` that posts it; `in_posting_order` puts a rank's prepared transfers there).
Out (`run`): how far each rank got and the `Wait` that never ends, if any.

How. Transfers pair in order, as NCCL and gloo pair them: the k-th transfer rank a sends to rank
b (blocking or posted) meets the k-th receive of rank b from rank a. A blocking call returns once
its partner is reached on the peer (rendezvous semantics, the premise of the deadlock rule: a blocking send
may not return before the peer posts its receive): a posted partner is reached when its rank
passed it, a blocking one when its rank stands at it. A posted transfer never blocks its rank
(where its request is waited on is not followed, so a batch's order and its place before the
rank's later calls decide nothing); it must find its partner by the end, else its wait never
returns. So a batch whose sends each have their receive in the peer's batch or sequence is quiet
whatever order its list is in, and a transfer with no partner (a peer that sends or receives
fewer times, or to another rank) is a wait that never ends.
"""

from __future__ import annotations

from dataclasses import dataclass

from collcheck.static.program import PREPARED, CommEvent, EventKind, Posting, answering, direction

Call = tuple[CommEvent, int]  # a send or receive (blocking or posted) and its peer
TRANSFERS = frozenset({Posting.SEND, Posting.RECV, Posting.PREPARED_SEND, Posting.PREPARED_RECV})


def is_posted_transfer(event: CommEvent) -> bool:
    return event.kind is EventKind.P2P_POSTED


def in_posting_order(calls: list[Call]) -> list[Call] | None:
    """A rank's calls as its transfers happen: each prepared transfer (`P2POp`) where the next
    batch posts it, the batches themselves dropped. None when a prepared transfer is never posted
    (its list goes where the run does not follow: what is posted is not known)."""
    ordered: list[Call] = []
    prepared: list[Call] = []
    for call in calls:
        posting = call[0].posting
        if posting in PREPARED:
            prepared.append(call)
        elif posting is Posting.BATCH:
            ordered.extend(prepared)
            prepared = []
        else:
            ordered.append(call)
    return None if prepared else ordered


@dataclass(frozen=True)
class Wait:
    """Ranks that wait forever: each waits on the next, the last on the first (a cycle) or, when
    `finished` is set, the one rank given waits on that rank, which has no calls left (a blocking
    call, or a posted transfer, whose partner the finished rank never issues)."""

    ranks: tuple[int, ...]
    finished: int | None = None

    def edges(self) -> list[tuple[int, int]]:
        if self.finished is not None:
            return [(self.ranks[0], self.finished)]
        return [(rank, self.ranks[(i + 1) % len(self.ranks)]) for i, rank in enumerate(self.ranks)]


class _Partners:
    """The call each call pairs with on its peer: the k-th from a to b with the k-th of b from a."""

    def __init__(self, schedules: list[list[Call]]) -> None:
        self.schedules = schedules
        self.index: dict[tuple[int, EventKind, int, int], int] = {}
        self.ordinal: list[list[int]] = []
        for rank, schedule in enumerate(schedules):
            counts: dict[tuple[EventKind, int], int] = {}
            ordinals = []
            for at, (event, peer) in enumerate(schedule):
                key = (direction(event), peer)
                ordinals.append(counts.get(key, 0))
                counts[key] = ordinals[-1] + 1
                self.index[(rank, key[0], peer, ordinals[-1])] = at
            self.ordinal.append(ordinals)

    def of(self, rank: int, at: int) -> int | None:
        event, peer = self.schedules[rank][at]
        return self.index.get((peer, answering(direction(event)), rank, self.ordinal[rank][at]))


def run(schedules: list[list[Call]]) -> tuple[list[int], Wait | None]:
    """Match the schedules (see the module). Out: how far each rank got, and the wait that never
    ends (None when every rank finishes and every posted transfer found its partner). For a posted
    transfer with no partner, the rank's place is that transfer's index."""
    partners = _Partners(schedules)
    heads = [0] * len(schedules)
    progress = True
    while progress:
        progress = False
        for rank, schedule in enumerate(schedules):
            while heads[rank] < len(schedule):
                event, peer = schedule[heads[rank]]
                if not is_posted_transfer(event):
                    partner = partners.of(rank, heads[rank])
                    if partner is None or heads[peer] < partner:
                        break  # its partner is not reached yet (or never issued)
                heads[rank] += 1
                progress = True
    waiting = [rank for rank in range(len(schedules)) if heads[rank] < len(schedules[rank])]
    if waiting:
        return heads, _wait_chain(waiting[0], schedules, heads)
    for rank, schedule in enumerate(schedules):
        for at, (event, peer) in enumerate(schedule):
            if is_posted_transfer(event) and partners.of(rank, at) is None:
                unmatched = list(heads)
                unmatched[rank] = at
                return unmatched, Wait((rank,), finished=peer)
    return heads, None


def _wait_chain(start: int, schedules: list[list[Call]], heads: list[int]) -> Wait:
    chain: list[int] = []
    rank = start
    while rank not in chain:
        if heads[rank] >= len(schedules[rank]):
            return Wait((chain[-1],), finished=rank)
        chain.append(rank)
        rank = schedules[rank][heads[rank]][1]
    return Wait(tuple(chain[chain.index(rank) :]))


def answers(schedule: list[Call], waiting: int, kind: EventKind) -> bool:
    """The rank waited on issues, somewhere, a call (blocking or posted) that would answer `kind`
    from `waiting`."""
    wanted = answering(kind)
    return any(direction(event) is wanted and peer == waiting for event, peer in schedule)


def believable(stuck: Wait, schedules: list[list[Call]], heads: list[int]) -> bool:
    """Every wait is towards a rank that answers that direction towards the waiting rank
    somewhere: a function that only sends (half of an exchange whose other half is another
    function) is no schedule of its own."""
    for rank, target in stuck.edges():
        event, peer = schedules[rank][heads[rank]]
        if peer != target or not answers(schedules[target], rank, direction(event)):
            return False
    return True


def unanswered_post(stuck: Wait, schedules: list[list[Call]], heads: list[int]) -> bool:
    """The wait is a posted transfer whose peer finished without its partner."""
    if stuck.finished is None:
        return False
    rank = stuck.ranks[0]
    return is_posted_transfer(schedules[rank][heads[rank]][0])


def exchanged(schedules: list[list[Call]]) -> bool:
    """Some rank of the world posted a transfer (the world's schedules are not all blocking)."""
    return any(is_posted_transfer(event) for schedule in schedules for event, _ in schedule)
