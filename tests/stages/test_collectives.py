"""Stage `collectives`: a resolved collective call -> the `CommEvent` appended to the path (its
group, root, reduce op, peer, the ranks of a group creation) and the call's value
(`CollectiveEvents.communicate`)."""

from __future__ import annotations

import pytest

from collcheck.static.collectives import CollectiveEvents
from collcheck.static.program import CommEvent, EventKind, Posting
from collcheck.static.state import State
from collcheck.static.symbolic import (
    MEMBER,
    RANK,
    WORLD,
    BinOp,
    Compare,
    Const,
    Expr,
    GroupVal,
    InRange,
    Member,
    TupleVal,
    is_rank_dependent,
)

from .conftest import call, frame, module_of

CREATED = GroupVal("g", None, created=True)


@pytest.fixture(scope="module")
def events() -> CollectiveEvents:
    return CollectiveEvents(module_of("def f(t):\n    pass\n", complete=True))


def communicate(
    events: CollectiveEvents, text: str, env: dict[str, Expr] | None = None
) -> tuple[State, Expr]:
    here = frame("f", None, events.module.functions["f"])
    state = State(dict(env or {}))
    node = call(text)
    spec = events.resolve(node, here, state).spec
    assert spec is not None, text
    return events.communicate(node, spec, state, here, {})


def last(state: State) -> CommEvent:
    event = state.events[-1]
    assert isinstance(event, CommEvent)
    return event


def test_the_terms_that_must_agree_across_ranks_are_recorded(events: CollectiveEvents) -> None:
    reduced, _ = communicate(events, "dist.all_reduce(t, op=dist.ReduceOp.MAX)")
    assert last(reduced).reduce_op == Const("MAX") and last(reduced).operands == ("t",)
    rooted, _ = communicate(events, "dist.broadcast(t, src=dist.get_rank())")
    assert last(rooted).root == RANK
    sent, _ = communicate(events, "dist.send(t, dst=dist.get_rank() + 1)")
    assert (last(sent).kind, last(sent).peer) == (EventKind.P2P_SEND, BinOp("+", RANK, Const(1)))


def test_a_group_argument_is_the_events_group(events: CollectiveEvents) -> None:
    state, _ = communicate(events, "dist.barrier(group=g)", {"g": CREATED})
    assert last(state).group == CREATED and last(state).group_text == "g"
    world, _ = communicate(events, "dist.barrier()")
    assert last(world).group is None


def test_a_created_group_is_the_calls_value_with_its_members(events: CollectiveEvents) -> None:
    state, value = communicate(events, "dist.new_group([0, 1])")
    assert last(state).kind is EventKind.GROUP_CREATE and last(state).ranks_arg == TupleVal(
        (Const(0), Const(1))
    )
    assert (
        isinstance(value, GroupVal)
        and value.created
        and value.members == Member(MEMBER, (Const(0), Const(1)))
    )
    _, ranged = communicate(events, "dist.new_group(ranks=list(range(2, 4)))")
    assert isinstance(ranged, GroupVal) and ranged.members == InRange(MEMBER, Const(2), Const(4))


def test_subgroups_hand_each_rank_its_own_group_by_colour(events: CollectiveEvents) -> None:
    _, value = communicate(events, "dist.new_subgroups(2)")
    assert isinstance(value, TupleVal)
    mine = value.items[0]
    assert isinstance(mine, GroupVal) and mine.color == BinOp("//", RANK, Const(2))
    # every rank is a member when the world splits evenly: a test on the world size alone
    assert mine.members == Compare("==", BinOp("%", WORLD, Const(2)), Const(0))


def test_a_rooted_collective_makes_what_it_fills_the_same_on_every_rank(events: CollectiveEvents) -> None:
    state, _ = communicate(events, "dist.broadcast_object_list(objs, src=0)", {"objs": RANK})
    assert not is_rank_dependent(state.env["objs"])


def test_no_event_is_recorded_while_only_values_are_modelled(events: CollectiveEvents) -> None:
    events.record_events = False
    try:
        state, value = communicate(events, "dist.barrier()")
    finally:
        events.record_events = True
    assert state.events == () and value is not None


def test_non_blocking_calls_are_posted_transfers_with_their_direction(events: CollectiveEvents) -> None:
    posted, _ = communicate(events, "dist.isend(t, dst=dist.get_rank() + 1)")
    assert (last(posted).kind, last(posted).posting) == (EventKind.P2P_POSTED, Posting.SEND)
    assert last(posted).peer == BinOp("+", RANK, Const(1))
    received, _ = communicate(events, "dist.irecv(t, 0)")
    assert (last(received).posting, last(received).peer) == (Posting.RECV, Const(0))
    batch, _ = communicate(events, "dist.batch_isend_irecv(ops)")
    assert last(batch).posting is Posting.BATCH


def test_a_p2p_op_prepares_a_transfer_in_the_direction_of_the_op_handed_to_it(
    events: CollectiveEvents,
) -> None:
    sending, _ = communicate(events, "dist.P2POp(dist.isend, t, 3)")
    assert (last(sending).posting, last(sending).peer) == (Posting.PREPARED_SEND, Const(3))
    receiving, _ = communicate(events, "dist.P2POp(dist.irecv, t, peer=dist.get_rank() - 1)")
    assert last(receiving).posting is Posting.PREPARED_RECV
    unknown, _ = communicate(events, "dist.P2POp(chosen_op, t, 3)")
    assert last(unknown).posting is Posting.PREPARED_UNKNOWN
    in_group, _ = communicate(events, "dist.P2POp(dist.isend, t, group=g, group_peer=1)", {"g": CREATED})
    assert last(in_group).group == CREATED and last(in_group).peer is not None
