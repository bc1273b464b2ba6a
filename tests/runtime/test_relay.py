"""Node relays for async verification's rolling hashes (issue 16: two-level reads).

In-process: monitors of 4 ranks on 2 simulated nodes share one in-memory job store, and each node
an in-memory node store; the background work is driven tick by tick. The real jobs (4 gloo ranks,
2 simulated nodes) are in test_relay_jobs.py.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fake_store import FakeStore, ReportWriter

from collcheck.runtime.record import CallSite, CollectiveEvent
from collcheck.runtime.relay import NodeRelay, RelaySettings, RelayState, node_relay, relay_settings
from collcheck.runtime.verify import Monitor, MonitorConfig
from collcheck.runtime.verify_store import relayed_compare_s

RANKS = (0, 1, 2, 3)
NODE_OF = {0: "a", 1: "a", 2: "b", 3: "b"}


def _event(rank: int, seq: int, line: int = 10, numel: int = 4) -> CollectiveEvent:
    return CollectiveEvent(
        rank=rank,
        group="0",
        group_ranks=RANKS,
        seq=seq,
        op="all_reduce",
        shapes=((numel,),),
        dtypes=("float32",),
        reduce_op="sum",
        site=CallSite("train.py", line),
    )


class Job:
    """4 monitors (ranks 0-3, nodes a and b) on one job store; with relays unless `relays=False`."""

    def __init__(self, relays: bool = True, serve_fails: bool = False, stale_s: float = 10.0) -> None:
        self.store = FakeStore()
        self.nodes = {"a": FakeStore(), "b": FakeStore()}
        self.writers = {rank: ReportWriter() for rank in RANKS}
        self.monitors: dict[int, Monitor] = {}
        for rank in RANKS:
            config = MonitorConfig(rank, verify=True, strict=False, timeout_s=5.0, world_size=4, abort=False)
            relay = self._relay(rank, serve_fails, stale_s) if relays else None
            monitor = Monitor(config, self.writers[rank], store_factory=None, relay=relay)  # type: ignore[arg-type]
            monitor.store = monitor.sync_store = self.store
            if relay is not None:
                relay.start(self.store)
                monitor.publisher.say_relay()
            self.monitors[rank] = monitor

    def _relay(self, rank: int, serve_fails: bool, stale_s: float) -> NodeRelay:
        node = self.nodes[NODE_OF[rank]]

        def serve(port: int) -> Any:
            if serve_fails:
                raise OSError("Address already in use")
            return node

        return NodeRelay(rank, RelaySettings(NODE_OF[rank], stale_s=stale_s), serve, lambda port: node)

    def issue(self, seqs: range, odd: tuple[int, int] | None = None) -> None:
        """Every rank issues `seqs` at train.py:10 (#1 at line 20: both sites are known to all, no
        first-seen check later); `odd` = (rank, seq) issues that one at line 20."""
        for seq in seqs:
            for rank, monitor in self.monitors.items():
                line = 20 if odd == (rank, seq) or seq == 1 else 10
                monitor.issued(_event(rank, seq, line))
                monitor.completed("0", seq)

    def tick(self, rounds: int = 1, ranks: tuple[int, ...] = RANKS) -> None:
        for _ in range(rounds):
            for rank in ranks:
                self.monitors[rank].tick()
                self.settle()

    def settle(self) -> None:
        """Until every reader's thread has read what its monitor asked for."""
        for monitor in self.monitors.values():
            reader = monitor.publisher.relay._reader if monitor.publisher.relay is not None else None
            deadline = time.monotonic() + 10.0
            while reader is not None and time.monotonic() < deadline:
                if reader.idle.is_set() and not reader._wake.is_set():
                    break
                time.sleep(0.001)

    def reports(self, rank: int) -> list[tuple[object, object, object]]:
        return self.writers[rank].reports

    def rh_reads(self) -> int:
        return self.store.reads["rh/0"]


def _relay(job: Job, rank: int) -> NodeRelay:
    relay = job.monitors[rank].publisher.relay
    assert relay is not None
    return relay


def _state(job: Job, rank: int) -> RelayState:
    return _relay(job, rank).state


def _all_compared(job: Job) -> bool:
    return all(not any(job.monitors[rank].publisher._pending.values()) for rank in (1, 2, 3))


def test_followers_read_the_rolling_hash_through_one_relay_per_node() -> None:
    direct = Job(relays=False)
    relayed = Job()
    assert [_state(relayed, r) for r in RANKS] == [
        RelayState.HOST,
        RelayState.PENDING,
        RelayState.HOST,
        RelayState.PENDING,
    ]
    for job in (direct, relayed):
        job.issue(range(1, 3))
        job.tick(2)  # the readers find their relay; the first collectives are compared
        job.store.reads.clear()
        for step in range(10):
            job.issue(range(3 + 5 * step, 8 + 5 * step))
            job.tick()
        job.tick(2)  # a relayed chain arrives a tick later
        assert _all_compared(job)
        assert all(job.reports(rank) == [] for rank in RANKS)
    # Three followers read rh/0 at every tick; with relays, one read per node (and tick with demand).
    assert direct.rh_reads() == 3 * 10  # the ticks with something to compare
    assert 2 * 10 <= relayed.rh_reads() <= 2 * 12
    assert "rh/0" in relayed.nodes["a"].data and "rh/0" in relayed.nodes["b"].data


def test_a_divergence_read_through_the_relay_names_both_call_sites() -> None:
    job = Job()
    job.issue(range(1, 3))
    job.tick(2)
    job.issue(range(3, 40), odd=(3, 25))  # a site rank 3 has used before: no first-seen check
    job.tick(3)
    (kind, severity, text), *_ = job.reports(3)
    assert (kind, severity) == ("callsite", "warning")
    both = "rank 0 all_reduce(float32[4]) at train.py:10 vs rank 3 all_reduce(float32[4]) at train.py:20"
    assert both in str(text)
    assert "(group 0, #25)" in str(text)
    assert _state(job, 3) is RelayState.CLIENT


def test_a_relay_that_fails_to_start_is_said_and_every_rank_still_compares() -> None:
    job = Job(serve_fails=True)
    job.issue(range(1, 3))
    job.tick(2)
    job.issue(range(3, 20), odd=(1, 12))
    job.tick(2)
    for rank in RANKS:
        assert _state(job, rank) is RelayState.DIRECT
        relay = [text for kind, _, text in job.reports(rank) if kind == "relay"]
        assert len(relay) == 1 and "node relay unavailable" in str(relay[0])
        assert "still comparing" in str(relay[0])
    assert "Address already in use" in str(job.reports(0)[0][2])
    assert [kind for kind, _, _ in job.reports(1)] == ["relay", "callsite"]
    assert "rank 1 all_reduce(float32[4]) at train.py:20" in str(job.reports(1)[1][2])


def test_a_relay_that_stops_refreshing_is_said_and_its_readers_read_the_job_store() -> None:
    job = Job(stale_s=0.3)
    job.issue(range(1, 3))
    job.tick(2)
    assert _state(job, 3) is RelayState.CLIENT
    time.sleep(0.5)  # node b's relay (rank 2) stops: its beat goes stale
    job.issue(range(3, 20), odd=(3, 12))
    job.tick(2, ranks=(0, 1, 3))
    assert _state(job, 3) is RelayState.DIRECT
    kinds = [kind for kind, _, _ in job.reports(3)]
    assert kinds == ["relay", "callsite"], job.reports(3)
    assert "has not refreshed" in str(job.reports(3)[0][2])


def test_a_relay_whose_rank_ended_is_left_without_a_warning() -> None:
    job = Job()
    job.issue(range(1, 3))
    job.tick(2)
    _relay(job, 2).close(job.store)
    job.nodes["b"].data.clear()  # its server went with its process

    def gone(*args: object) -> None:
        raise ConnectionResetError("Connection reset by peer")

    job.nodes["b"].add = gone  # type: ignore[method-assign,assignment]
    job.issue(range(3, 10))
    job.tick(2, ranks=(0, 1, 3))
    assert _state(job, 3) is RelayState.DIRECT
    assert job.reports(3) == [] and not job.monitors[3].publisher._pending["0"]


def test_an_idle_node_asks_the_job_store_nothing() -> None:
    job = Job()
    job.issue(range(1, 3))
    job.tick(3)
    host = _relay(job, 0)
    host.tick(job.store)  # what the readers asked for at the last tick
    before = sum(job.store.calls.values())
    for _ in range(20):
        host.tick(job.store)
    assert sum(job.store.calls.values()) == before
    assert job.nodes["a"].data["beat"]  # still beating for its readers


def test_the_pace_counts_relays_and_publishers_not_ranks() -> None:
    job = Job()
    job.issue(range(1, 3))
    job.tick(3)
    # Two relays and one publisher (rank 0, the group's leader): 3 job-store clients per tick.
    assert [_relay(job, rank).requesters() for rank in RANKS] == [3, 3, 3, 3]
    assert job.monitors[1].publisher.compare_every() == 0.05
    assert relayed_compare_s(1_000) == 0.05
    assert relayed_compare_s(10_000 // 8 + 1) == pytest.approx(0.06255)  # 10,000 ranks, 8 a node


def test_relay_settings_come_from_the_environment() -> None:
    assert relay_settings(5, {"COLLCHECK_RANKS_PER_NODE": "2"}) == RelaySettings("simulated-2")
    named = {"COLLCHECK_NODE": "n7", "COLLCHECK_RELAY_PORT": "4242"}
    assert relay_settings(5, named) == RelaySettings("n7", 4242)
    assert relay_settings(5, {"COLLCHECK_RELAY": "0"}) is None


def test_relays_are_used_in_large_worlds_or_when_asked_for() -> None:
    def relayed(world: int, environ: dict[str, str], async_verify: bool = True) -> bool:
        return node_relay(1, world, async_verify, environ) is not None

    assert not relayed(8, {}) and relayed(256, {}) and relayed(10_000, {})
    assert relayed(8, {"COLLCHECK_RELAY": "1"}) and relayed(4, {"COLLCHECK_RANKS_PER_NODE": "2"})
    assert relayed(4, {"COLLCHECK_NODE": "n1"})
    assert not relayed(10_000, {"COLLCHECK_RELAY": "0"}) and not relayed(10_000, {}, async_verify=False)


def test_a_stopped_relay_never_blocks_a_readers_monitor_thread() -> None:
    # A relay's process stopped (SIGSTOP): requests to its store are never answered. The reader's
    # thread waits for it; the monitor's thread (stall watchdog) goes on and falls back.
    job = Job(stale_s=0.3)
    job.issue(range(1, 3))
    job.tick(2)
    stopped = threading.Event()

    def unanswered(*args: object) -> bytes:
        stopped.wait(30.0)
        return b""

    job.nodes["b"].compare_set = unanswered  # type: ignore[method-assign,assignment]
    job.issue(range(3, 20), odd=(3, 12))
    started = time.monotonic()
    for _ in range(15):
        job.monitors[0].tick()  # the leader publishes
        job.monitors[3].tick()
        time.sleep(0.1)
    assert time.monotonic() - started < 5.0
    assert _state(job, 3) is RelayState.DIRECT
    assert [kind for kind, _, _ in job.reports(3)] == ["relay", "callsite"], job.reports(3)
    assert "node b" in str(job.reports(3)[0][2])
    stopped.set()
