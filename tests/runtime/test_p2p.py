"""Point-to-point checks without processes: pairing, texts, stalls, and the store protocol run by
monitors sharing an in-memory store (`publisher.publish_and_compare` is one tick of the background thread;
`_check_late` is the part of a tick that compares strict recvs that gave way)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from fake_store import FakeStore, ReportWriter

from collcheck.runtime.p2p import Channel, channel_of, pair_text, pairs, payload
from collcheck.runtime.record import CallSite, CollectiveEvent
from collcheck.runtime.verify import Monitor, MonitorConfig
from collcheck.runtime.verify_protocol import (
    P2PSlot,
    Position,
    blocked_fingerprint,
    fingerprint,
    mismatch_kind,
    mismatch_text,
    p2p_fingerprint,
)
from collcheck.runtime.verify_stall import find_wait_cycle, peer_finished, stall_text


def _p2p(
    rank: int,
    op: str,
    peer: int | None,
    seq: int = 1,
    numel: int = 4,
    line: int = 12,
    dtype: str = "float32",
    tag: int | None = 0,
) -> CollectiveEvent:
    return CollectiveEvent(
        rank=rank,
        group="0:p2p",
        group_ranks=tuple(sorted({rank, peer})) if peer is not None else (0, 1),
        seq=seq,
        op=op,
        shapes=((numel,),),
        dtypes=(dtype,),
        root=peer,
        site=CallSite("train.py", line),
        tag=tag,
    )


# ---------------------------------------------------------------------------------------------
# Pure pairing


def test_a_send_and_the_recv_from_its_sender_share_a_channel() -> None:
    send, recv = _p2p(0, "send", 1), _p2p(1, "recv", 0)
    assert channel_of(send) == channel_of(recv) == Channel("0:p2p", 0, 1)
    assert channel_of(_p2p(1, "send", 0)) == Channel("0:p2p", 1, 0)  # the other direction
    assert channel_of(_p2p(1, "recv_any_source", None)) is None
    assert Channel("0:p2p", 0, 1).key == "0:p2p/0-1"
    assert Channel("0:p2p", 0, 1).where(2) == "group 0, send #2 0->1"


def test_the_payload_ignores_op_peer_and_call_site_but_not_shape_dtype_or_tag() -> None:
    send = _p2p(0, "send", 1, line=12)
    assert payload(send) == payload(_p2p(1, "recv", 0, line=15))
    assert payload(send) != payload(_p2p(1, "recv", 0, numel=8))
    assert payload(send) != payload(_p2p(1, "recv", 0, dtype="float64"))
    assert payload(send) != payload(_p2p(1, "recv", 0, tag=7))


def test_send_and_recv_describe_their_peer_and_tag() -> None:
    assert _p2p(0, "send", 1, tag=7).describe == "send(float32[4], peer=1, tag=7)"
    assert _p2p(1, "recv", 0).describe == "recv(float32[4], peer=0)"  # the default tag is not shown


def test_pairs_follow_issue_order_per_channel_and_leave_any_source_receivers_out() -> None:
    events = [
        _p2p(0, "send", 1, seq=1, numel=4),
        _p2p(0, "recv", 1, seq=2, numel=3),
        _p2p(0, "send", 1, seq=3, numel=5),
        _p2p(1, "recv", 0, seq=1, numel=4),
        _p2p(1, "send", 0, seq=2, numel=3),
    ]
    found = pairs(events)
    there = found[Channel("0:p2p", 0, 1)]
    assert [(p.k, p.send and p.send.seq, p.recv and p.recv.seq) for p in there] == [(1, 1, 1), (2, 3, None)]
    assert all(pair.agrees for pair in there)
    (back,) = found[Channel("0:p2p", 1, 0)]
    assert (back.send, back.recv) == (events[4], events[1])
    # Rank 1 also received from any source: which send each of its recvs took cannot be told.
    assert Channel("0:p2p", 0, 1) not in pairs([*events, _p2p(1, "recv_any_source", None, seq=3)])


def test_pair_text_puts_the_lowest_rank_first() -> None:
    assert pair_text((1, "rank 1 recv(x)"), (0, "rank 0 send(y)"), "group 0, send #1 0->1") == (
        "rank 0 send(y) vs rank 1 recv(x) (group 0, send #1 0->1)"
    )


# ---------------------------------------------------------------------------------------------
# Fingerprints, mismatch texts, stalls


def _fp(event: CollectiveEvent, k: int = 1) -> dict[str, object]:
    channel = channel_of(event)
    assert channel is not None
    return p2p_fingerprint(P2PSlot(event, channel, k))


def test_a_send_and_a_bigger_recv_are_a_mismatch_named_like_a_collective_one() -> None:
    send, recv = _fp(_p2p(0, "send", 1, line=12)), _fp(_p2p(1, "recv", 0, numel=8, line=15))
    assert mismatch_kind(recv, send) == "mismatch"
    assert mismatch_kind(_fp(_p2p(1, "recv", 0, line=15)), send) is None  # the lines always differ
    assert mismatch_text(send, recv) == (
        "rank 0 send(float32[4], peer=1) at train.py:12 vs rank 1 recv(float32[8], peer=0) at train.py:15 "
        "(group 0, send #1 0->1)"
    )


def _blocked(event: CollectiveEvent, k: int = 1) -> dict[str, object]:
    return dict(_fp(event, k), since=0.0)


def test_a_recv_stall_names_the_rank_that_never_sent_and_where_it_is() -> None:
    recv = _blocked(_p2p(1, "recv", 0, line=14))
    reduce = CollectiveEvent(0, "0", (0, 1), 1, "all_reduce", ((4,),), ("float32",), "sum")
    last = fingerprint(replace(reduce, site=CallSite("t.py", 9)))
    positions: dict[int, Position | None] = {
        0: Position(0, 10.0, issued={"0": 1}, last=last, last_done=True),
        1: Position(1, 10.0, issued={"0": 1, "0:p2p": 1, "0:p2p/0-1": 1}, inflight=[recv]),
    }
    assert stall_text(1, recv, positions, now=3.0).splitlines() == [
        "stall: rank 1 has waited 3.0s in recv(float32[4], peer=0) at train.py:14 (group 0, send #1 0->1)",
        "  matching send not issued by: rank 0",
        "  rank 0: last all_reduce(float32[4]) at t.py:9 (group 0, #1), completed",
        "  rank 1: blocked in recv(float32[4], peer=0) at train.py:14 (group 0, send #1 0->1) for 3.0s",
    ]
    assert not find_wait_cycle(positions)


def test_two_ranks_receiving_from_each_other_first_are_a_wait_cycle() -> None:
    positions: dict[int, Position | None] = {
        0: Position(0, 10.0, issued={"0:p2p/1-0": 1}, inflight=[_blocked(_p2p(0, "recv", 1, line=5))]),
        1: Position(1, 10.0, issued={"0:p2p/0-1": 1}, inflight=[_blocked(_p2p(1, "recv", 0, line=7))]),
    }
    cycle = find_wait_cycle(positions)
    assert [rank for rank, _ in cycle] == [0, 1]
    assert "wait cycle: rank 0 (in group 0 send #1 1->0 recv(float32[4], peer=1) at train.py:5)" in (
        stall_text(0, positions[0].inflight[0], positions, now=10.0)  # type: ignore[union-attr]
    )


def test_a_send_whose_recv_has_completed_is_finished_not_stalled() -> None:
    send = _blocked(_p2p(0, "send", 1))
    received = Position(1, 10.0, issued={"0:p2p/0-1": 1})
    still_receiving = Position(1, 10.0, issued={"0:p2p/0-1": 1}, inflight=[_blocked(_p2p(1, "recv", 0))])
    assert peer_finished(0, send, {0: None, 1: received})
    assert not peer_finished(0, send, {1: still_receiving})
    assert not peer_finished(0, send, {1: Position(1, 10.0)})  # not even issued
    assert not peer_finished(0, blocked_fingerprint(_p2p(0, "recv_any_source", None)), {1: received})


# ---------------------------------------------------------------------------------------------
# The protocol, on monitors sharing an in-memory store


def _monitor(rank: int, store: FakeStore, strict: bool = False) -> tuple[Monitor, ReportWriter]:
    writer = ReportWriter()
    config = MonitorConfig(rank=rank, verify=True, strict=strict, timeout_s=10.0, world_size=2, abort=False)
    monitor = Monitor(config, writer=writer, store_factory=None)  # type: ignore[arg-type]
    monitor.store = monitor.sync_store = store
    return monitor, writer


MISMATCH = (
    "mismatch",
    "error",
    "point-to-point mismatch: rank 0 send(float32[4], peer=1) at train.py:12 vs rank 1 "
    "recv(float32[8], peer=0) at train.py:15 (group 0, send #2 0->1)",
)


def test_async_mode_compares_each_recv_with_its_send_in_the_background() -> None:
    store = FakeStore()
    sender, _ = _monitor(0, store)
    receiver, reports = _monitor(1, store)
    sender.issued_p2p(_p2p(0, "send", 1, seq=1))
    sender.issued_p2p(_p2p(0, "send", 1, seq=2, line=12))
    receiver.issued_p2p(_p2p(1, "recv", 0, seq=1))
    receiver.issued_p2p(_p2p(1, "recv", 0, seq=2, numel=8, line=15))
    assert not store.data  # nothing on the issuing thread
    sender.publisher.publish_and_compare(store)
    assert store.head("0:p2p/0-1") == 2 and store.sets["fp/0:p2p/0-1/2"] == 1
    receiver.publisher.publish_and_compare(store)
    assert reports.reports == [MISMATCH]


def test_strict_mode_compares_a_recv_with_its_send_before_the_recv_is_issued() -> None:
    store = FakeStore()
    sender, _ = _monitor(0, store, strict=True)
    receiver, reports = _monitor(1, store, strict=True)
    sender.issued_p2p(_p2p(0, "send", 1, seq=1))
    receiver.issued_p2p(_p2p(1, "recv", 0, seq=1))
    sender.issued_p2p(_p2p(0, "send", 1, seq=2, line=12))
    assert "fp/0:p2p/0-1/2" in store.data  # published before the send is issued
    receiver.issued_p2p(_p2p(1, "recv", 0, seq=2, numel=8, line=15))
    assert reports.reports == [MISMATCH]  # before issued_p2p returned, i.e. before gloo saw it


def _receive_then_send(monitor: Monitor, rank: int, numel: int) -> None:
    """irecv from the other rank, then isend to it (what both ranks of a job do)."""
    monitor.issued_p2p(_p2p(rank, "recv", 1 - rank, seq=1, numel=numel, line=15 if rank else 12))
    monitor.issued_p2p(_p2p(rank, "send", 1 - rank, seq=2, line=12))


@pytest.mark.parametrize("numel", [4, 8], ids=["matching", "mismatched"])
def test_strict_recvs_posted_before_the_sends_on_both_ranks_give_way(numel: int) -> None:
    store = FakeStore()
    rank0, reports0 = _monitor(0, store, strict=True)
    rank1, reports1 = _monitor(1, store, strict=True)
    ranks = [
        threading.Thread(target=_receive_then_send, args=(rank0, 0, 4)),
        threading.Thread(target=_receive_then_send, args=(rank1, 1, numel)),
    ]
    for thread in ranks:
        thread.start()
    for thread in ranks:
        thread.join(3.0)  # the stall timeout is 10 s: a recv saw the other rank wait for it
    assert not any(thread.is_alive() for thread in ranks)
    assert 1 <= len(rank0.agreement._late) + len(rank1.agreement._late) <= 2  # at least one gave way
    assert store.data["pwait/0"] == store.data["pwait/1"] == b""  # nobody is waiting any more
    rank0.agreement.check_late(store)
    rank1.agreement.check_late(store)
    assert not rank0.agreement._late and not rank1.agreement._late and not reports0.reports
    expected = [] if numel == 4 else [(*MISMATCH[:2], MISMATCH[2].replace("#2", "#1"))]
    assert reports1.reports == expected


def test_a_recv_from_any_source_is_tracked_but_not_paired() -> None:
    store = FakeStore()
    receiver, _ = _monitor(1, store)
    receiver.issued_p2p(_p2p(1, "recv_any_source", None, seq=1))
    receiver.issued_p2p(_p2p(1, "recv", 0, seq=2))  # which send it takes cannot be told any more
    assert set(receiver.ledger._inflight) == {("0:p2p", 1), ("0:p2p", 2)} and not receiver.ledger._slots
    assert not receiver.publisher._new


def test_sends_and_recvs_with_different_peers_complete_in_any_order() -> None:
    monitor, _ = _monitor(1, FakeStore())
    monitor.issued_p2p(_p2p(1, "recv", 0, seq=1))
    monitor.issued_p2p(_p2p(1, "send", 2, seq=2))
    monitor.completed("0:p2p", 2)  # unlike a group's collectives, #1 is still in flight
    assert set(monitor.ledger._inflight) == {("0:p2p", 1)} and set(monitor.ledger._slots) == {("0:p2p", 1)}


def test_send_records_take_a_fixed_ring_of_slots_per_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    from collcheck.runtime import verify_agree, verify_publish, verify_wire

    monkeypatch.setattr(verify_wire, "RING", 2)
    monkeypatch.setattr(verify_publish, "RING", 2)
    monkeypatch.setattr(verify_agree, "RING", 2)
    store = FakeStore()
    sender, _ = _monitor(0, store)
    for seq in range(1, 6):
        sender.issued_p2p(_p2p(0, "send", 1, seq=seq))
    sender.publisher.publish_and_compare(store)
    slots = {key: store.data[key].split(b" ")[0] for key in store.data if key.startswith("fp/")}
    assert slots == {"fp/0:p2p/0-1/0": b"4", "fp/0:p2p/0-1/1": b"5"}  # overwritten, never deleted
    assert store.calls["delete_key"] == 0
