"""The pure parts of cross-rank verification: comparisons, stall reports, wait cycles."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import run_job
from fake_store import FakeStore, ReportWriter

from collcheck.runtime.record import CallSite, CollectiveEvent
from collcheck.runtime.tracer import TraceConfig
from collcheck.runtime.verify import ABORT_EXIT_CODE, Monitor, MonitorConfig
from collcheck.runtime.verify_protocol import Position, fingerprint, key_prefix, mismatch_kind, mismatch_text
from collcheck.runtime.verify_stall import find_wait_cycle, stall_text


def _fp(rank: int, numel: int, line: int, group: str = "0", seq: int = 1) -> dict[str, object]:
    return fingerprint(_event(rank, seq, line, numel, group))


def _event(rank: int, seq: int, line: int, numel: int = 4, group: str = "0") -> CollectiveEvent:
    return CollectiveEvent(
        rank=rank,
        group=group,
        group_ranks=(0, 1),
        seq=seq,
        op="all_reduce",
        shapes=((numel,),),
        dtypes=("float32",),
        reduce_op="sum",
        site=CallSite("train.py", line),
    )


def test_mismatch_kinds() -> None:
    assert mismatch_kind(_fp(0, 4, 10), _fp(1, 4, 10)) is None
    assert mismatch_kind(_fp(0, 4, 10), _fp(1, 4, 12)) == "callsite"
    assert mismatch_kind(_fp(0, 4, 10), _fp(1, 8, 10)) == "mismatch"


def test_mismatch_text_names_both_sides_lowest_rank_first() -> None:
    assert mismatch_text(_fp(1, 4096, 16), _fp(0, 1024, 13)) == (
        "rank 0 all_reduce(float32[1024]) at train.py:13 vs rank 1 all_reduce(float32[4096]) at train.py:16 "
        "(group 0, #1)"
    )


def _blocked(rank: int, group: str, line: int) -> dict[str, object]:
    return dict(_fp(rank, 8, line, group=group), since=0.0)


def test_cross_group_cycle() -> None:
    positions: dict[int, Position | None] = {
        0: Position(0, 10.0, issued={"1": 1}, inflight=[_blocked(0, "1", 12)]),
        1: Position(1, 10.0, issued={"2": 1}, inflight=[_blocked(1, "2", 15)]),
    }
    cycle = find_wait_cycle(positions)
    assert [(rank, blocked["g"]) for rank, blocked in cycle] == [(0, "1"), (1, "2")]
    assert "wait cycle:" in stall_text(0, _blocked(0, "1", 12), positions, now=10.0)


def test_stall_names_missing_rank_and_where_it_is() -> None:
    last = _fp(1, 4, 9)
    positions: dict[int, Position | None] = {
        0: Position(0, 10.0, issued={"0": 2}, inflight=[dict(_blocked(0, "0", 12), n=2)]),
        1: Position(1, 10.0, issued={"0": 1}, last=last, last_done=True),
    }
    text = stall_text(0, dict(_blocked(0, "0", 12), n=2), positions, now=10.0)
    assert "not issued by: rank 1" in text
    assert "rank 1: last all_reduce(float32[4]) at train.py:9 (group 0, #1), completed" in text
    assert "wait cycle" not in text


# ---------------------------------------------------------------------------------------------
# Async mode's first-seen checks, on monitors sharing an in-memory store (no threads but the
# ones a test starts; `publisher.publish_and_compare` is one tick of the background thread)


def _monitor(rank: int, store: FakeStore, strict: bool = False) -> tuple[Monitor, ReportWriter]:
    writer = ReportWriter()
    config = MonitorConfig(rank=rank, verify=True, strict=strict, timeout_s=5.0, world_size=2, abort=False)
    monitor = Monitor(config, writer=writer, store_factory=None)  # type: ignore[arg-type]
    monitor.store = monitor.sync_store = store
    return monitor, writer


def test_a_new_call_site_is_published_before_issue_and_later_ones_in_the_background() -> None:
    store = FakeStore()
    leader, _ = _monitor(0, store)
    leader.issued(_event(0, 1, line=10))
    assert store.sets["fp/0/1"] == 1 and store.head("0") == 1  # before the collective runs
    for seq in range(2, 6):  # the same call site with other shapes: a loop, not a new site
        leader.issued(_event(0, seq, line=10, numel=seq))
    assert "fp/0/2" not in store.data and store.head("0") == 1
    leader.publisher.publish_and_compare(store)  # the background thread's tick
    assert store.head("0") == 5
    assert [store.sets[f"fp/0/{seq}"] for seq in range(1, 6)] == [1] * 5  # each published once


def test_a_new_leader_site_publishes_what_was_queued_before_it_in_order() -> None:
    store = FakeStore()
    leader, _ = _monitor(0, store)
    leader.issued(_event(0, 1, line=10))
    leader.issued(_event(0, 2, line=10))  # queued for the background thread
    leader.issued(_event(0, 3, line=11))  # new: #2 must go out first, or head/0 would run ahead
    assert store.head("0") == 3 and [store.sets[f"fp/0/{seq}"] for seq in (1, 2, 3)] == [1, 1, 1]
    leader.publisher.publish_and_compare(store)
    assert store.head("0") == 3 and store.sets["fp/0/2"] == 1


def test_a_follower_at_a_new_site_waits_for_what_the_leader_publishes_in_the_background() -> None:
    store = FakeStore()
    leader, _ = _monitor(0, store)
    follower, reports = _monitor(1, store)
    leader.issued(_event(0, 1, line=10))
    follower.issued(_event(1, 1, line=10))
    leader.issued(_event(0, 2, line=10))  # not new on the leader: left to its background thread
    waiting = threading.Thread(target=follower.issued, args=(_event(1, 2, line=12),))
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive()  # the follower's collective is not issued yet
    leader.publisher.publish_and_compare(store)
    waiting.join(5.0)
    assert not waiting.is_alive()
    assert reports.reports == [
        (
            "callsite",
            "warning",  # async mode: a call-site difference alone stays a warning
            "call-site divergence: rank 0 all_reduce(float32[4]) at train.py:10 vs rank 1 "
            "all_reduce(float32[4]) at train.py:12 (group 0, #2) (same collective issued from "
            "different lines; legitimate for the barrier trick, an error once the operands cross as "
            "in a swapped pair)",
        )
    ]
    follower.publisher.publish_and_compare(store)  # compared once: nothing pending, nothing reported again
    assert len(reports.reports) == 1 and not any(follower.publisher._pending.values())
    assert store.head("0") == 2 and store.sets["fp/0/2"] == 1


def test_a_different_shape_at_a_new_site_is_a_mismatch_before_it_is_issued() -> None:
    store = FakeStore()
    leader, _ = _monitor(0, store)
    follower, reports = _monitor(1, store)
    leader.issued(_event(0, 1, line=13, numel=1024))
    follower.issued(_event(1, 1, line=16, numel=4096))
    assert reports.reports == [
        (
            "mismatch",
            "error",
            "collective mismatch: rank 0 all_reduce(float32[1024]) at train.py:13 vs rank 1 "
            "all_reduce(float32[4096]) at train.py:16 (group 0, #1)",
        )
    ]


def test_first_seen_sites_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from collcheck.runtime import verify_publish

    monkeypatch.setattr(verify_publish, "FIRST_SEEN_LIMIT", 2)
    store = FakeStore()
    leader, _ = _monitor(0, store)
    for seq, line in enumerate((10, 11, 12, 13), start=1):
        leader.issued(_event(0, seq, line=line))
    assert store.head("0") == 2 and len(leader.publisher._new) == 2  # the rest are left asynchronous


def test_head_never_counts_a_fingerprint_queued_out_of_order() -> None:
    # Two threads of the leader: #3 (a new site) is queued and published before #2 is queued.
    store = FakeStore()
    leader, _ = _monitor(0, store)
    leader.issued(_event(0, 1, line=10))
    leader.issued(_event(0, 3, line=11))
    assert "fp/0/3" in store.data and store.head("0") == 1  # #2 is missing: head stays
    leader.issued(_event(0, 2, line=10))
    leader.publisher.publish_and_compare(store)
    assert store.head("0") == 3


def test_a_follower_does_not_wait_for_a_leader_that_degraded_to_recording() -> None:
    store = FakeStore()
    leader, _ = _monitor(0, store)
    follower, reports = _monitor(1, store)
    leader._degrade("checker failed (test)", loud=False)
    assert "degraded/0" in store.data  # said before the leader stopped using the store
    started = time.monotonic()
    follower.issued(_event(1, 1, line=10))  # a new site: would wait for the leader's fingerprint
    assert time.monotonic() - started < 1.0  # not the 5 s stall timeout
    assert reports.reports == []  # no false stall blaming the leader
    started = time.monotonic()
    follower.issued(_event(1, 2, line=11))
    assert time.monotonic() - started < 0.5  # known to be gone: no wait at all
    assert reports.reports == [] and follower.comparer.gone == {0}


def test_a_collective_of_a_group_c10d_does_not_know_is_never_compared() -> None:
    store = FakeStore()
    follower, reports = _monitor(1, store, strict=True)
    started = time.monotonic()
    follower.issued(_event(1, 1, line=10), check=False)  # its guessed leader publishes nothing
    recv = CollectiveEvent(1, "0:p2p", (0, 1), 1, "recv", ((4,),), ("float32",), root=0)
    follower.issued_p2p(recv, check=False)  # nor does its guessed sender
    assert time.monotonic() - started < 1.0 and reports.reports == []
    assert {("0", 1), ("0:p2p", 1)} <= set(follower.ledger._inflight)  # still watched for stalls


def test_native_sync_keeps_what_other_kernels_have_in_flight() -> None:
    store = FakeStore()
    monitor, _ = _monitor(0, store)
    adapter = CollectiveEvent(0, "pynccl:0", (0, 1), 1, "all_reduce", ((4,),), ("float32",), t_start=20.0)
    monitor.issued(adapter, check=False)
    native = _event(0, 7, line=10)
    native.t_start = 10.0
    monitor.sync_collectives({"0": 7}, [native], native, False)
    assert set(monitor.ledger._inflight) == {("pynccl:0", 1), ("0", 7)}
    assert monitor.ledger._last is adapter  # issued after the native kernel's last collective
    monitor.sync_collectives({"0": 7}, [], native, True)  # the native one completed
    assert set(monitor.ledger._inflight) == {("pynccl:0", 1)} and monitor.ledger._issued == {
        "pynccl:0": 1,
        "0": 7,
    }


def test_operands_are_read_from_the_call_expression() -> None:
    from collcheck.runtime.operand import operand_of_source

    assert operand_of_source("dist.all_reduce(a, group=g, async_op=True)") == "a"
    assert operand_of_source("dist.all_gather(out,\n    grads[i])") == "out, grads[i]"
    assert operand_of_source("loss.backward()") == ""
    assert operand_of_source("x + 1") == "" and operand_of_source("(((") == ""


def test_the_second_half_of_a_swapped_pair_is_an_error_naming_all_four_sites() -> None:
    store = FakeStore()
    leader, _ = _monitor(0, store)
    follower, reports = _monitor(1, store)

    def at(rank: int, seq: int, line: int, operand: str) -> CollectiveEvent:
        event = _event(rank, seq, line)
        event.site = CallSite("train.py", line, operand=operand)
        return event

    leader.issued(at(0, 1, 12, "a"))
    follower.issued(at(1, 1, 16, "b"))  # a call-site warning so far: it could be the barrier trick
    assert [kind for kind, _, _ in reports.reports] == ["callsite"]
    assert "on `a` and `b`" in str(reports.reports[0][2])
    leader.issued(at(0, 2, 13, "b"))
    follower.issued(at(1, 2, 17, "a"))  # crosses the first: compared before it is issued
    assert reports.reports[1][:2] == ("swap", "error")
    assert str(reports.reports[1][2]).startswith(
        "swapped collectives in group 0: rank 0 issued all_reduce(float32[4]) on `a` at train.py:12 (#1), "
        "then on `b` at train.py:13 (#2); rank 1 on `b` at train.py:16 (#1), then on `a` at train.py:17 (#2)"
    )


def test_group_creation_requests_are_written_the_same_on_every_rank() -> None:
    from collcheck.runtime.groups import request

    assert request("new_group", {"ranks": (3, 1)}) == (None, None, "ranks=[1, 3]")
    assert request("new_group", {"ranks": [3, 1], "sort_ranks": False}) == (None, None, "ranks=[3, 1]")
    assert request("new_group", {}) == (None, None, "ranks=all")
    assert request("new_group", {"ranks": [0, 1], "use_local_synchronization": True}) == (
        None,
        (0, 1),
        "ranks=[0, 1]",
    )
    assert request("split_group", {"split_ranks": [range(2), [2, 3]]}) == (
        None,
        None,
        "split_ranks=[[0, 1], [2, 3]]",
    )
    long = request("new_subgroups_by_enumeration", {"ranks_per_subgroup_list": [[r] for r in range(500)]})
    assert long[2].startswith("ranks_per_subgroup_list=<500 entries, crc32 ")


# ---------------------------------------------------------------------------------------------
# Traffic that does not grow with the group (issue 16)


def _wide_event(rank: int, seq: int, members: int, line: int = 10, numel: int = 4) -> CollectiveEvent:
    event = _event(rank, seq, line, numel)
    event.group_ranks = tuple(range(members))
    event.t_start = time.time()  # not overdue: ticks would report a stall
    return event


def _leader_traffic(members: int, collectives: int) -> tuple[int, int, int]:
    """(bytes written per collective, largest record, requests) of a leader in async mode,
    not counting the member list it writes once."""
    from collcheck.runtime.verify_store import Pacing

    store = FakeStore()
    leader, _ = _monitor(0, store)
    leader.ledger.pace = Pacing(0.05, 1e9, 1e9)  # one position, the first: not a loaded machine's timing
    for seq in range(1, collectives + 1):
        leader.issued(_wide_event(0, seq, members))
        if seq % 10 == 0:
            leader.tick()
    leader.tick()
    members_bytes = len("members/0") + len(store.data["members/0"])
    records = [len(value) for key, value in store.data.items() if key.startswith("fp/")]
    return (store.written - members_bytes) // collectives, max(records), sum(store.calls.values())


def test_what_a_leader_writes_per_collective_does_not_grow_with_the_group() -> None:
    small = _leader_traffic(members=2, collectives=100)
    large = _leader_traffic(members=1024, collectives=100)
    assert small[0] == large[0] and small[1] == large[1] < 64  # a record is ~50 bytes, whatever W
    assert large[2] <= small[2] + 2  # the same requests (give or take the tick's timing)
    store = FakeStore()
    leader, _ = _monitor(0, store)
    leader.issued(_wide_event(0, 1, 1024))
    leader.tick()
    assert store.sets["members/0"] == 1  # the member list is written once per group
    leader.issued(_wide_event(0, 2, 1024))
    leader.tick()
    assert store.sets["members/0"] == 1
    assert b"ranks" not in store.data["pos/0"] and len(store.data["pos/0"]) < 600


def test_a_member_list_is_written_once_by_whichever_member_uses_the_group_first() -> None:
    store = FakeStore()
    follower, _ = _monitor(1, store)
    leader, _ = _monitor(0, store)
    follower.issued(_event(1, 1, line=10), check=False)  # the lowest rank has not used it yet
    follower.ledger.publish_members(store)
    assert store.data["members/0"] == b"[0,1]"
    leader.issued(_event(0, 1, line=10), check=False)
    leader.ledger.publish_members(store)
    follower.ledger.publish_members(store)
    assert store.sets["members/0"] == 1 and store.calls["add"] == 2  # one claim per rank, once


def test_a_follower_reads_details_only_when_the_hashes_differ() -> None:
    store = FakeStore()
    leader, _ = _monitor(0, store)
    follower, reports = _monitor(1, store)
    for seq in range(1, 21):
        leader.issued(_event(0, seq, line=10))
        follower.issued(_event(1, seq, line=10, numel=8 if seq == 20 else 4))
    leader.publisher.publish_and_compare(store)
    store.reads.clear()
    follower.publisher.publish_and_compare(store)
    details_reads = [key for key in store.reads if key.startswith("dt/")]
    assert details_reads == ["dt/0/0"]  # once, for #20, the only one that differs
    assert reports.reports == [
        (
            "mismatch",
            "error",
            "collective mismatch: rank 0 all_reduce(float32[4]) at train.py:10 vs rank 1 "
            "all_reduce(float32[8]) at train.py:10 (group 0, #20)",
        )
    ]


def test_a_follower_that_falls_behind_the_ring_says_so_and_keeps_comparing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from collcheck.runtime import verify_agree, verify_publish, verify_wire

    monkeypatch.setattr(verify_wire, "RING", 4)
    monkeypatch.setattr(verify_publish, "RING", 4)
    monkeypatch.setattr(verify_agree, "RING", 4)
    store = FakeStore()
    leader, _ = _monitor(0, store)
    follower, reports = _monitor(1, store)
    for seq in range(1, 11):  # the leader publishes 10 before the follower reads any
        leader.issued(_event(0, seq, line=10))
        follower.issued(_event(1, seq, line=10, numel=8 if seq == 10 else 4))
    leader.publisher.publish_and_compare(store)
    follower.publisher.publish_and_compare(store)
    kinds = [(kind, severity) for kind, severity, _ in reports.reports]
    assert kinds == [("behind", "warning"), ("mismatch", "error")]  # #10 is still compared
    assert "5 collective(s) not compared" in str(reports.reports[0][2])  # #2-#6; #1 was first-seen
    assert "verification fell behind on 0" in capsys.readouterr().err  # said, not only recorded
    follower.stop(exited=False)
    assert reports.reports[-1] == ("behind", "warning", "collectives not compared: 5 on 0")


def test_a_queue_too_long_for_memory_is_cut_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    from collcheck.runtime import verify_publish

    monkeypatch.setattr(verify_publish, "PENDING_LIMIT", 4)
    store = FakeStore()
    follower, reports = _monitor(1, store)
    follower.comparer.gone.add(0)  # no first-seen wait for the leader: it publishes nothing here
    for seq in range(1, 8):
        follower.issued(_event(1, seq, line=10))
    with follower.publisher.publish_lock:
        follower.publisher.publish_queued(store)  # the leader never published: 7 queued, 4 kept
    assert [seq for seq, _ in follower.publisher._pending["0"]] == [4, 5, 6, 7]
    assert follower.comparer.missed == {"0": 2} and reports.reports[-1][0] == "behind"


def test_a_stall_report_reads_positions_once_for_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rank of a 32-rank group times out together: one reads the positions, the others
    wait for its abort (the W*W reads of every rank reading every position are gone)."""
    from collcheck.runtime import verify_protocol, verify_report

    class Ended(BaseException):  # like the os._exit it stands for: no handler catches it
        pass

    def finish(self: verify_report.Reporter, kind: str | None, text: str | None, echo: bool) -> None:
        raise Ended(kind)

    monkeypatch.setattr(verify_report, "ABORT_LINGER_S", 0.0)
    monkeypatch.setattr(verify_report.Reporter, "finish", finish)
    store = FakeStore()
    members = 32
    monitors = []
    for rank in range(members):
        writer = ReportWriter()
        config = MonitorConfig(rank=rank, verify=True, strict=False, timeout_s=5.0, world_size=members)
        monitor = Monitor(config, writer=writer, store_factory=None)  # type: ignore[arg-type]
        monitor.store = monitor.sync_store = store
        event = _wide_event(rank, 1, members)
        monitor.issued(event, check=False)
        monitor.ledger.publish_members(store)
        monitor.ledger.publish_position(store)
        monitors.append((monitor, writer, event))
    for monitor, _, event in monitors:
        with pytest.raises(Ended):
            monitor.watchdog.report_stall(verify_protocol.blocked_fingerprint(event), store)
    position_reads = sum(count for key, count in store.reads.items() if key.startswith("pos/"))
    assert position_reads <= 2 * members
    reporter = monitors[0][1].reports
    assert reporter[0][:2] == ("stall", "error") and "rank 31: blocked in" in str(reporter[0][2])
    assert all(not writer.reports for _, writer, _ in monitors[1:])  # they stop on rank 0's abort


def test_a_rank_that_lost_the_claim_reports_itself_if_no_abort_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    from collcheck.runtime import verify_watchdog

    monkeypatch.setattr(verify_watchdog, "STALL_CLAIM_GRACE_S", 0.2)
    store = FakeStore()
    store.add("stall_claim", 1)  # a reporter that died before it could write
    config = MonitorConfig(rank=1, verify=True, strict=False, timeout_s=5.0, world_size=2)
    monitor = Monitor(config, writer=ReportWriter(), store_factory=None)  # type: ignore[arg-type]
    assert monitor.watchdog.claim_report(store)  # after the grace: nobody else will say it


# ---------------------------------------------------------------------------------------------
# Connecting (issue 16: a leader whose extra connection timed out left its followers waiting)


def test_connecting_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    from collcheck.runtime import verify

    monkeypatch.setattr(verify, "CONNECT_FIRST_PAUSE_S", 0.01)
    store = FakeStore()
    tries: list[int] = []

    def factory() -> FakeStore:
        tries.append(1)
        if len(tries) < 3:
            raise RuntimeError("connect timeout (injected)")
        return store

    writer = ReportWriter()
    config = MonitorConfig(rank=0, verify=True, strict=False, timeout_s=5.0, world_size=2, abort=False)
    monitor = Monitor(config, writer=writer, store_factory=factory)  # type: ignore[arg-type]
    monitor.start()
    monitor.stop(exited=False)
    assert len(tries) == 4 and monitor.store is store and monitor.sync_store is store
    assert writer.reports == []


def test_a_leader_that_cannot_connect_tells_its_followers_through_the_job_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from collcheck.runtime import verify, verify_store

    monkeypatch.setattr(verify, "CONNECT_FIRST_PAUSE_S", 0.01)
    monkeypatch.setattr(verify_store, "CONNECT_BUDGET_S", 0.1)
    job = FakeStore()  # the job's own store client, which the leader still has

    def factory() -> FakeStore:
        raise RuntimeError("connect timeout (injected)")

    writer = ReportWriter()
    config = MonitorConfig(rank=0, verify=True, strict=True, timeout_s=30.0, world_size=2, abort=False)
    leader = Monitor(config, writer=writer, store_factory=factory, fallback_store=lambda: job)  # type: ignore[arg-type]
    leader.start()
    leader.stop(exited=False)
    assert "degraded/0" in job.data and writer.reports[0][:2] == ("degraded", "warning")
    follower, reports = _monitor(1, job, strict=True)
    started = time.monotonic()
    follower.issued(_event(1, 1, line=10))  # strict: would wait for the leader's record
    assert time.monotonic() - started < 1.0 and reports.reports == []  # not the 30 s stall


def test_the_connect_budget_grows_with_the_world_within_the_stall_timeout() -> None:
    from collcheck.runtime.verify_store import connect_budget

    assert connect_budget(16, 300.0) < connect_budget(1024, 300.0) < connect_budget(10_000, 300.0)
    assert connect_budget(10_000, 60.0) == 30.0


# ---------------------------------------------------------------------------------------------
# Aborts through a blocking wait (issue 16: an idle rank polled the store 20 times a second)


def _started(rank: int, store: FakeStore, world: int = 2) -> tuple[Monitor, ReportWriter]:
    writer = ReportWriter()
    config = MonitorConfig(rank=rank, verify=True, strict=False, timeout_s=30.0, world_size=world)
    monitor = Monitor(config, writer=writer, store_factory=lambda: store, fallback_store=None)  # type: ignore[arg-type]
    monitor.start()
    return monitor, writer


def test_an_idle_rank_asks_the_store_almost_nothing_and_stops_its_waiter() -> None:
    store = FakeStore()
    monitor, writer = _started(1, store)
    deadline = time.monotonic() + 30.0
    while not (store.calls["wait"] and "pos/1" in store.data) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the waiter is blocked and the first position is out
    time.sleep(0.1)
    before = sum(store.calls.values())
    time.sleep(2.0)  # 40 ticks: 40 polls of `abort` before
    assert sum(store.calls.values()) - before == 0
    monitor.stop(exited=False)
    assert (
        monitor.reporter.waiter is not None and not monitor.reporter.waiter.is_alive()
    )  # woken by its own key
    assert not any(thread.name == "collcheck-abort" for thread in threading.enumerate())
    assert writer.reports == []


def test_an_abort_is_learned_through_the_wait_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from collcheck.runtime import verify_report

    ended: list[tuple[float, str | None]] = []

    def finish(self: verify_report.Reporter, kind: str | None, text: str | None, echo: bool) -> None:
        ended.append((time.monotonic(), text))

    monkeypatch.setattr(verify_report.Reporter, "finish", finish)
    monkeypatch.setattr(verify_report, "ABORT_LINGER_S", 0.0)
    store = FakeStore()
    follower, _ = _started(2, store, world=3)
    time.sleep(0.2)
    reporter, _ = _monitor(1, store)
    reporter.config.world_size, reporter.config.abort = 3, True
    reported = time.monotonic()
    reporter.reporter.fail("mismatch", "collective mismatch: rank 0 ... vs rank 1 ...")
    deadline = time.monotonic() + 5.0
    while len(ended) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    stopping = "stopping: rank 1: collective mismatch: rank 0 ... vs rank 1 ..."
    assert [text for _, text in ended] == [None, stopping]  # the reporter's, then the follower's
    assert ended[1][0] - reported < 1.0  # no tick to wait for
    assert store.data["wake/0"] == store.data["wake/2"] and "wake/1" not in store.data
    follower.stop(exited=False)


# ---------------------------------------------------------------------------------------------
# Strict followers blocked in the store's wait for their leader's record (issue 16)


def _pair(strict: bool = False) -> tuple[FakeStore, Monitor, Monitor, ReportWriter]:
    """A store, a leader (rank 0), a follower (rank 1) and the follower's reports."""
    store = FakeStore()
    leader, _ = _monitor(0, store, strict=strict)
    follower, reports = _monitor(1, store, strict=strict)
    return store, leader, follower, reports


def _issue_later(monitor: Monitor, event: CollectiveEvent) -> threading.Thread:
    thread = threading.Thread(target=monitor.issued, args=(event,), daemon=True)
    thread.start()
    return thread


def test_a_strict_follower_learns_a_late_leader_record_through_one_wait() -> None:
    store, leader, follower, reports = _pair(strict=True)
    waiting = _issue_later(follower, _event(1, 1, line=10, numel=8))
    time.sleep(0.5)  # polling every 20 ms would have asked ~25 times by now
    assert waiting.is_alive()
    before = dict(store.calls)
    leader.issued(_event(0, 1, line=10))
    waiting.join(5.0)
    assert not waiting.is_alive()
    assert before["wait"] == 1 and before["compare_set"] == 1 and sum(before.values()) <= 3
    assert reports.reports[0][0] == "mismatch" and "float32[8]" in str(reports.reports[0][2])


def test_a_strict_leader_empties_the_next_slot_of_the_ring_for_its_waiters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from collcheck.runtime import verify_agree, verify_publish, verify_wire

    monkeypatch.setattr(verify_wire, "RING", 4)
    monkeypatch.setattr(verify_publish, "RING", 4)
    monkeypatch.setattr(verify_agree, "RING", 4)
    store, leader, follower, reports = _pair(strict=True)
    for seq in range(1, 6):
        leader.issued(_event(0, seq, line=10))
        follower.issued(_event(1, seq, line=10))
    assert "fp/0/2" not in store.data  # #2's slot, #6's next: emptied when #5 was published
    waiting = _issue_later(follower, _event(1, 6, line=10, numel=8))
    time.sleep(0.3)
    assert waiting.is_alive()  # blocked, not reading #2's old record
    leader.issued(_event(0, 6, line=10))
    waiting.join(5.0)
    assert [kind for kind, _, _ in reports.reports] == ["mismatch"]


def test_a_strict_leader_that_degrades_releases_its_blocked_followers() -> None:
    _, leader, follower, reports = _pair(strict=True)
    leader.issued(_event(0, 1, line=10))
    follower.issued(_event(1, 1, line=10))
    leader.ledger._issued["0"] = 2  # it issued #2, and its publication failed
    waiting = _issue_later(follower, _event(1, 2, line=10))
    time.sleep(0.3)
    started = time.monotonic()
    leader._degrade("strict check failed (injected)", loud=False)
    waiting.join(5.0)
    assert not waiting.is_alive() and time.monotonic() - started < 2.0  # not the 5 s stall
    assert [kind for kind, _, _ in reports.reports] == ["behind"]
    follower.issued(_event(1, 3, line=10))  # no wait at all for a leader that said it degraded
    assert [kind for kind, _, _ in reports.reports] == ["behind"]


# ---------------------------------------------------------------------------------------------
# One rolling hash per channel and tick instead of one record per collective (issue 16)


def _lockstep(leader: Monitor, follower: Monitor, seqs: range, follower_numel: int = 4) -> None:
    for seq in seqs:
        leader.issued(_event(0, seq, line=10))
        follower.issued(_event(1, seq, line=10, numel=follower_numel))


def test_a_follower_compares_a_ticks_collectives_with_one_read_of_the_chain() -> None:
    store, leader, follower, reports = _pair()
    _lockstep(leader, follower, range(1, 101))
    leader.publisher.publish_and_compare(store)
    store.calls.clear()
    store.reads.clear()
    follower.publisher.publish_and_compare(store)
    assert dict(store.calls) == {"compare_set": 1}  # rh/0; no record read
    assert list(store.reads) == ["rh/0"] and reports.reports == []
    assert not follower.publisher._pending["0"] and follower.publisher._base["0"] == (
        100,
        leader.publisher._chain["0"],
    )


def test_a_missing_collective_in_the_middle_of_a_tick_is_named_with_both_call_sites() -> None:
    store, leader, follower, reports = _pair()
    _lockstep(leader, follower, range(1, 30))
    leader.issued(_event(0, 30, line=20, numel=8))  # one the follower never issues
    for seq in range(31, 61):
        leader.issued(_event(0, seq, line=10))
        follower.issued(_event(1, seq - 1, line=10))
    leader.publisher.publish_and_compare(store)
    follower.publisher.publish_and_compare(store)
    assert reports.reports[0] == (
        "mismatch",
        "error",
        "collective mismatch: rank 0 all_reduce(float32[8]) at train.py:20 vs rank 1 "
        "all_reduce(float32[4]) at train.py:10 (group 0, #30)",
    )


def test_a_follower_behind_the_publisher_still_compares_and_resumes_the_chain() -> None:
    store, leader, follower, reports = _pair()
    for seq in range(1, 21):
        leader.issued(_event(0, seq, line=10))
    leader.publisher.publish_and_compare(store)  # the chain covers 1..20
    for seq in range(1, 11):  # the follower is at #10: it cannot fold to #20 yet
        follower.issued(_event(1, seq, line=10, numel=8 if seq == 10 else 4))
    follower.publisher.publish_and_compare(store)
    assert [kind for kind, _, _ in reports.reports] == ["mismatch"]  # #10, from its record
    assert "(group 0, #10)" in str(reports.reports[0][2]) and follower.publisher._base["0"] is None
    for seq in range(11, 21):
        follower.issued(_event(1, seq, line=10))
    follower.publisher.publish_and_compare(store)  # records again (no known base), then the leader's chain
    assert follower.publisher._base["0"] == (20, leader.publisher._chain["0"])
    _lockstep(leader, follower, range(21, 41))
    leader.publisher.publish_and_compare(store)
    store.calls.clear()
    follower.publisher.publish_and_compare(store)
    assert dict(store.calls) == {"compare_set": 1} and len(reports.reports) == 1


# ---------------------------------------------------------------------------------------------
# Pacing for large worlds (issue 16: 10,000 ranks ticking every 50 ms overwhelm one store)


def test_the_background_pace_keeps_one_stores_request_rate_bounded() -> None:
    from collcheck.runtime.relay import STORE_REQUESTS_PER_S
    from collcheck.runtime.verify_store import pacing

    assert pacing(8).compare_s == 0.05 and pacing(8).position_s == 0.25 and pacing(8).heartbeat_s == 5.0
    for world in (1_024, 10_000, 100_000):
        pace = pacing(world)
        assert world / pace.compare_s <= STORE_REQUESTS_PER_S * 1.03  # one request per rank and tick
        assert world / pace.position_s <= 5_000 and pace.heartbeat_s >= 4 * pace.position_s
    assert pacing(10_000).compare_s == 0.5 and pacing(10_000).position_s == 2.0


def test_a_rank_of_a_large_world_publishes_at_its_pace() -> None:
    store = FakeStore()
    leader, _ = _started(0, store, world=10_000)  # a tick every 0.5 s
    seq = 0
    started = time.monotonic()
    while time.monotonic() - started < 1.6:
        seq += 1
        event = _wide_event(0, seq, 4)
        leader.issued(event)
        leader.completed("0", seq)
        time.sleep(0.005)
    leader.stop(exited=False)
    # About 3 ticks' publications plus the first-seen one and the flush at stop; 32 at 50 ms.
    assert 3 <= store.calls["multi_set"] <= 7, store.calls
    assert store.head("0") == seq


def test_blocking_waits_only_on_a_tcp_store_connection_of_our_own() -> None:
    import torch.distributed as dist

    from collcheck.runtime.verify_store import blocking_ok

    c10d: Any = dist
    server = c10d.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    assert blocking_ok(c10d.PrefixStore("collcheck", server))
    assert not blocking_ok(c10d.PrefixStore("collcheck", c10d.HashStore()))  # the job's own client
    assert blocking_ok(FakeStore())


def test_what_the_job_store_client_writes_is_seen_by_our_own_connections() -> None:
    # `degraded/<rank>` goes through the job's own client when a rank's connections failed; the
    # default store is a PrefixStore of the default group, which hid it from every follower.
    import subprocess
    import sys

    program = (
        "import torch.distributed as dist\n"
        "from collcheck.runtime.verify_store import connect_store, job_store\n"
        "dist.init_process_group('gloo')\n"
        "job_store().set('degraded/0', 'why')\n"
        "print(connect_store(None, 10.0).check(['degraded/0']))\n"
        "dist.destroy_process_group()\n"
    )
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", WORLD_SIZE="1")
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "True", done.stderr[-2000:]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_strict_leader_degraded_before_its_first_collective_still_wakes_its_followers() -> None:
    store = FakeStore()
    follower, reports = _monitor(1, store, strict=True)
    waiting = _issue_later(follower, _event(1, 1, line=10))
    time.sleep(0.3)  # blocked: it looked for degraded/0 before the leader said so
    config = MonitorConfig(rank=0, verify=True, strict=True, timeout_s=5.0, world_size=2, abort=False)
    leader = Monitor(config, writer=ReportWriter(), store_factory=None, fallback_store=lambda: store)  # type: ignore[arg-type]
    leader._degrade("store unreachable (injected)", loud=False)  # no group yet: no slot to fill
    assert waiting.is_alive()
    started = time.monotonic()
    leader.issued(_event(0, 1, line=10))  # through the job's client: #1 was never published
    waiting.join(5.0)
    assert not waiting.is_alive() and time.monotonic() - started < 2.0  # not the 5 s stall
    assert [kind for kind, _, _ in reports.reports] == ["behind"] and follower.comparer.gone == {0}


# ---------------------------------------------------------------------------------------------
# Async mode's first-seen checks through one blocking wait (issue 16: they polled the store)


def test_an_async_follower_at_a_new_site_learns_a_late_leader_record_through_one_wait() -> None:
    store, leader, follower, reports = _pair()
    leader.issued(_event(0, 1, line=10))
    follower.issued(_event(1, 1, line=10))
    leader.issued(_event(0, 2, line=10))  # not new on the leader: published by its next tick
    store.calls.clear()
    waiting = _issue_later(follower, _event(1, 2, line=12, numel=8))  # new on the follower
    time.sleep(0.5)  # polling from 0.2 ms up to every 20 ms would have asked ~30 times by now
    assert waiting.is_alive()
    before = dict(store.calls)
    leader.publisher.publish_and_compare(store)
    waiting.join(5.0)
    assert not waiting.is_alive()
    # The slot (empty), `degraded/0`, then the wait: no poll.
    assert before == {"compare_set": 1, "check": 1, "wait": 1}, before
    assert [kind for kind, _, _ in reports.reports] == ["mismatch"]


def test_an_async_leader_that_degrades_releases_a_follower_blocked_at_a_new_site() -> None:
    store = FakeStore()
    config = MonitorConfig(rank=0, verify=True, strict=False, timeout_s=5.0, world_size=2, abort=False)
    leader = Monitor(config, writer=ReportWriter(), store_factory=None, fallback_store=lambda: store)  # type: ignore[arg-type]
    leader.store = leader.sync_store = store
    follower, reports = _monitor(1, store)
    leader.issued(_event(0, 1, line=10))
    follower.issued(_event(1, 1, line=10))
    leader.issued(_event(0, 2, line=10))  # queued for its background thread, never published
    waiting = _issue_later(follower, _event(1, 2, line=12))
    time.sleep(0.3)  # blocked: it looked for degraded/0 before the leader said so
    started = time.monotonic()
    leader._degrade("checker failed (injected)", loud=False)
    waiting.join(5.0)
    assert not waiting.is_alive() and time.monotonic() - started < 2.0  # not the 5 s stall
    assert [kind for kind, _, _ in reports.reports] == ["behind"]  # said, not a stall
    # A follower that looked a moment before the leader degraded, blocked on a collective the
    # degraded leader issues later (not new to it): that collective's slot wakes it.
    other, said = _monitor(1, store)
    other.agreement._gone_checked[0] = time.monotonic()
    waiting = _issue_later(other, _event(1, 4, line=14))
    time.sleep(0.3)
    assert waiting.is_alive()
    started = time.monotonic()
    leader.issued(_event(0, 3, line=10))
    leader.issued(_event(0, 4, line=10))
    waiting.join(5.0)
    assert not waiting.is_alive() and time.monotonic() - started < 2.0
    assert [kind for kind, _, _ in said.reports] == ["behind"]


# ---------------------------------------------------------------------------------------------
# Async mode on the native kernel (issue 28): the kernel records, the monitor only queues


def test_the_native_kernels_collectives_are_compared_in_the_background_and_new_sites_first() -> None:
    store, leader, follower, reports = _pair()
    first = [_event(0, 1, line=10), _event(1, 1, line=10)]
    for monitor, event in zip((leader, follower), first, strict=True):
        assert monitor.queue_issued(event, gated=True)  # a site new to the kernel and here: agree
        monitor.agree(event)
    assert store.head("0") == 1 and reports.reports == []
    for seq in range(2, 6):
        assert not leader.queue_issued(_event(0, seq, line=10), gated=False)
        assert not follower.queue_issued(_event(1, seq, line=10, numel=8 if seq == 5 else 4), gated=False)
    assert store.head("0") == 1  # nothing on the issuing thread: the background thread publishes
    assert not follower.ledger._inflight  # positions come from the kernel (sync_collectives)
    assert not follower.queue_issued(_event(1, 6, line=10), gated=True)  # another chain, same line
    leader.queue_issued(_event(0, 6, line=10), gated=False)
    leader.publisher.publish_and_compare(store)
    follower.publisher.publish_and_compare(store)
    assert reports.reports == [
        (
            "mismatch",
            "error",
            "collective mismatch: rank 0 all_reduce(float32[4]) at train.py:10 vs rank 1 "
            "all_reduce(float32[8]) at train.py:10 (group 0, #5)",
        )
    ]


def test_collectives_the_native_kernel_could_not_keep_are_said_to_be_not_compared() -> None:
    _, _, follower, reports = _pair()
    follower.not_queued(3)
    assert reports.reports[0][:2] == ("behind", "warning") and "3 collective(s)" in str(reports.reports[0][2])


def test_the_native_feed_parses_each_distinct_line_once_and_keeps_number_and_clock() -> None:
    import json

    from collcheck.runtime.native_feed import NativeFeed

    class Encoder:
        def members(self, gid: int) -> tuple[tuple[int, ...], str]:
            return (0, 1), "default_pg"

    feed = NativeFeed(None, None, Encoder(), None, verify=True)  # type: ignore[arg-type]
    site = {"file": "/x/t.py", "line": 11, "func": "f", "stack": [], "via": "", "operand": 'g["seq":1]'}
    row = {"ev": "coll", "rank": 0, "group": "0", "gid": 1, "seq": 12, "op": "all_reduce", "shapes": [[4]]}
    row.update(dtypes=["float32"], reduce_op="sum", root=None, site=site, thread='a "t_start":', t_start=5.25)
    line = json.dumps(row, separators=(",", ":")) + "\n"
    full = CollectiveEvent.from_json(row)
    full.group_ranks, full.group_desc = (0, 1), "default_pg"
    assert feed._event_of(line) == full
    later = line.replace('"seq":12,', '"seq":13,').replace("5.25}", "6.5}")
    assert feed._event_of(later) == CollectiveEvent.from_json(
        dict(row, seq=13, t_start=6.5, group_ranks=[0, 1], group_desc="default_pg")
    )
    assert len(feed._templates) == 1 and feed._event_of(line) == full


# ---------------------------------------------------------------------------------------------
# One store, several attempts: torchrun's `--max-restarts` rendezvouses the restarted workers on
# the store the failed attempt wrote into.


def test_each_restart_attempt_has_its_own_key_prefix() -> None:
    assert key_prefix({}) == "collcheck/attempt0"
    assert key_prefix({"TORCHELASTIC_RESTART_COUNT": "0"}) == "collcheck/attempt0"
    assert key_prefix({"TORCHELASTIC_RESTART_COUNT": "3"}) == "collcheck/attempt3"
    # Unreadable counts fall back to 0 alike on every rank (they share the environment).
    assert key_prefix({"TORCHELASTIC_RESTART_COUNT": "x/../y"}) == "collcheck/attempt0"
    assert key_prefix({"TORCHELASTIC_RESTART_COUNT": "١"}) == "collcheck/attempt0"  # a non-ASCII digit


def test_a_restarted_attempt_on_the_same_store_ignores_the_failed_attempts_keys(tmp_path: Path) -> None:
    # Attempt 0 ends with a mismatch, leaving its records, `abort` and `wake/` keys in the store;
    # attempt 1, the same job restarted on that store with agreeing ranks, must finish cleanly.
    import torch.distributed as dist

    c10d: Any = dist
    server = c10d.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    mode = TraceConfig(verify=True, store_address=f"127.0.0.1:{server.port}", timeout_s=5.0)
    first = run_job(
        "restart_attempt.py",
        tmp_path / "0",
        trace=mode,
        args=("differ",),
        extra_env={"TORCHELASTIC_RESTART_COUNT": "0"},
    )
    assert first.returncodes == [ABORT_EXIT_CODE] * 2, first.stderr
    assert "mismatch" in first.stderr
    assert server.check(["collcheck/attempt0/abort"])
    second = run_job(
        "restart_attempt.py", tmp_path / "1", trace=mode, extra_env={"TORCHELASTIC_RESTART_COUNT": "1"}
    )
    assert second.returncodes == [0, 0], second.stderr
    assert "mismatch" not in second.stderr and "collcheck: rank" not in second.stderr
    assert all("finished" in rank.stdout for rank in second.ranks)
