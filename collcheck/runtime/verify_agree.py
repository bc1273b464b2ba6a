"""Agreeing on an operation before it is issued, on the issuing thread: every collective in strict
mode, the first one from each (group, op, call site) in async mode, and sends and recvs in strict
mode. The publisher (a group's leader, a send's sender) writes its record; every other rank waits
for it (the store's blocking wait on its slot, or polls where that is not possible) and compares.
A publisher that degraded to recording says so in the slots its followers wait on.

In: events and send/recv slots from the issuing threads; the job's store through the rank's own
`sync` connection. Out: records in the store (Publisher.add_record), comparisons (Comparer), a
stall report when a wait times out (StallWatchdog), and recvs that gave way, compared later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from collcheck.runtime.record import CollectiveEvent
from collcheck.runtime.relay import short_error
from collcheck.runtime.verify_compare import Comparer
from collcheck.runtime.verify_ledger import Ledger
from collcheck.runtime.verify_protocol import P2PSlot, blocked_fingerprint, sender_of
from collcheck.runtime.verify_publish import Publisher
from collcheck.runtime.verify_report import MonitorConfig
from collcheck.runtime.verify_store import Connections, blocking_ok
from collcheck.runtime.verify_watchdog import StallWatchdog
from collcheck.runtime.verify_wire import RING, SKIPPED, Record, slot_key

P2P_POLL_S = 0.1  # how often a strict recv waiting for its send looks for a wait cycle
# Before a collective, a follower polls for the leader's fingerprint (an expired store wait would
# print c10d warnings, and a blocking one could not notice a leader that degraded), starting
# this often: the leader usually publishes within a millisecond of the follower's first look.
LEADER_POLL_S = 0.0002
LEADER_CHECK_S = 1.0  # a strict follower looks for `degraded/<leader>` before a wait this often


class Agreement:
    """The checks made before an operation is issued, and the strict recvs compared after it."""

    def __init__(
        self,
        config: MonitorConfig,
        links: Connections,
        ledger: Ledger,
        publisher: Publisher,
        watchdog: StallWatchdog,
        degrade: Callable[[str, bool], None],
    ) -> None:
        self.config = config
        self.links = links
        self.ledger = ledger
        self.publisher = publisher
        self.comparer: Comparer = publisher.comparer
        self.watchdog = watchdog
        self._degrade = degrade
        self._strict = config.verify and config.strict
        self._lock = threading.Lock()
        self._late: list[tuple[str, int, dict[str, Any]]] = []  # strict recvs compared after issue
        self._gone_checked: dict[int, float] = {}  # leader -> when `degraded/` was last looked at
        self._skip_store: Any = None  # a degraded strict leader's job store client; False: failed

    def agree(self, event: CollectiveEvent) -> None:
        """Publish (leader) or wait for the leader's fingerprint and compare, before issuing."""
        store = self.links.sync
        if store is None:
            self.skip_degraded(event)
            return
        fp = blocked_fingerprint(event, members=False)
        leader = self.comparer.leader(event)
        publisher = self.publisher
        try:
            if event.rank == leader:
                with publisher.publish_lock:
                    if self._strict:
                        keys: list[str] = []
                        values: list[str] = []
                        publisher.add_record(keys, values, event.group, event.seq, fp)
                        if event.seq + 1 > RING:  # the next slot must be empty for its waiters
                            store.delete_key(slot_key(event.group, event.seq + 1))
                        store.multi_set(keys, values)
                    else:  # async: ours is queued in issue order; publish the queue, ours included
                        publisher.publish_queued(store)
                return
            # Async mode: a leader for whom this collective is not new publishes it from its
            # background thread within a tick; the wait is the same. A leader that degraded to
            # recording publishes nothing more: waiting for it would end in a false stall.
            if leader in self.comparer.gone:
                return
            if blocking_ok(store):  # strict mode, and async mode's first-seen checks
                record = self._wait_for_leader(store, event.group, event.seq, fp, leader)
            else:
                record = self._wait_for(
                    store,
                    event.group,
                    event.seq,
                    fp,
                    lambda: self.comparer.leader_gone(store, leader),
                    LEADER_POLL_S,
                )
            if record is not None:
                self.comparer.check_record(store, event.group, fp, record, leader, strict=self._strict)
                if record.skipped:  # a leader that degraded says so in its slots: stop waiting
                    self.comparer.leader_gone(store, leader)
        except Exception as error:
            what = "strict" if self._strict else "first-seen"
            self._degrade(f"{what} check failed ({short_error(error)})", True)

    def _wait_for_leader(
        self, store: Any, group: str, n: int, fp: dict[str, Any], leader: int
    ) -> Record | None:
        """Strict mode, and async mode's first-seen checks: the leader's record #n, learned through
        the store's blocking wait on its slot (one request, answered the moment the leader
        writes it) instead of polls. The slot is empty until then: a strict leader empties the
        next slot before publishing (after the ring's first lap), and a leader that degrades
        fills the slots its followers may be waiting on with a record saying so
        (`release_followers`, `skip_degraded`). None after a stall report, or when the leader
        degraded. A slot still holding an older lap's record (an async leader empties none)
        falls back to polling."""
        record = self.comparer.read_record(store, group, n)
        if record is not None:  # the usual case: the leader is ahead
            return record
        now = time.monotonic()
        if now - self._gone_checked.get(leader, -LEADER_CHECK_S) >= LEADER_CHECK_S:
            self._gone_checked[leader] = now  # a leader that degrades also fills the slots
            if self.comparer.leader_gone(store, leader):
                return None
        try:
            store.wait([slot_key(group, n)], timedelta(seconds=max(self.config.timeout_s, 0.001)))
        except Exception as error:
            if "timeout" not in str(error).lower():
                raise
            if self.watchdog.claim_stall(str(fp["g"]), int(fp["n"])):  # the watchdog may have timed out too
                self.watchdog.report_stall(fp, store)
            return None
        record = self.comparer.read_record(store, group, n)
        if record is not None:
            return record
        return self._wait_for(
            store, group, n, fp, lambda: self.comparer.leader_gone(store, leader), LEADER_POLL_S
        )

    def skip_degraded(self, event: CollectiveEvent) -> None:
        """A leader that degraded to recording (either verify mode): mark each collective it
        issues as never published, through the job's own store client, so that its followers
        blocked on the slot wake (and stop waiting for it) instead of waiting for a stall. Given
        up after one failure (a dead store)."""
        links = self.links
        if not (self.config.verify and links.degraded and links.fallback is not None and not links.ended):
            return
        if self._skip_store is False or event.rank != self.comparer.leader(event):
            return
        try:
            if self._skip_store is None:
                self._skip_store = links.fallback()
            record = Record(event.seq, SKIPPED, SKIPPED, -1).text()
            self._skip_store.compare_set(slot_key(event.group, event.seq), "", record)
        except Exception:
            self._skip_store = False

    def release_followers(self, store: Any) -> None:
        """A leader that degraded (either verify mode): fill the slots of the groups it leads
        that followers may be blocked on (its current number and the next), if empty, with a
        record saying that it was never published; they stop waiting for this rank
        (`degraded/<rank>`)."""
        rank = self.config.rank
        current = {
            group: seq
            for group, seq in self.ledger.issued_counts().items()
            if self.comparer.leads(group, rank)
        }
        for group, seq in current.items():
            for n in (seq, seq + 1):
                store.compare_set(slot_key(group, n), "", Record(n, SKIPPED, SKIPPED, -1).text())

    def agree_p2p(self, slot: P2PSlot) -> None:
        """Strict mode: a send publishes its fingerprint before it is issued; a recv waits for its
        send's and compares. A recv gives way, and is compared once the send is published, when
        its sender is itself waiting in a strict recv for this rank (directly or around a cycle):
        irecv-before-isend on every rank is legal and must not wait for the timeout."""
        store = self.links.sync
        if store is None:
            return
        fp = blocked_fingerprint(slot.event, slot, members=False)
        channel, k, sender = slot.channel.key, slot.k, slot.channel.src
        try:
            if slot.sender:
                keys: list[str] = []
                values: list[str] = []
                with self.publisher.publish_lock:
                    self.publisher.add_record(keys, values, channel, k, fp)
                store.multi_set(keys, values)
                return
            record = self._wait_for_send(store, channel, k, fp, sender)
            if record is None:
                with self._lock:
                    self._late.append((channel, k, fp))
                return
            self.comparer.check_record(store, channel, fp, record, sender, strict=True)
        except Exception as error:
            self._degrade(f"strict check failed ({short_error(error)})", True)

    def _wait_for_send(
        self, store: Any, channel: str, k: int, fp: dict[str, Any], sender: int
    ) -> Record | None:
        record = self.comparer.read_record(store, channel, k)
        if record is not None:  # the usual case: the sender is ahead
            return record
        marker = f"pwait/{self.config.rank}"
        store.set(marker, str(sender))
        try:
            return self._wait_for(store, channel, k, fp, lambda: self._in_wait_cycle(store, sender))
        finally:
            store.set(marker, "")

    def _in_wait_cycle(self, store: Any, sender: int) -> bool:
        """Whether `sender` waits, through strict recvs' `pwait/` markers, for this rank."""
        rank, seen = sender, set()
        while rank not in seen:
            seen.add(rank)
            key = f"pwait/{rank}"
            value = store.get(key) if store.check([key]) else b""  # never a blocking get
            if not value:
                return False
            rank = int(value)
            if rank == self.config.rank:
                return True
        return False

    def _wait_for(
        self,
        store: Any,
        channel: str,
        n: int,
        fp: dict[str, Any],
        give_way: Callable[[], bool],
        first_pause_s: float = 0.001,
    ) -> Record | None:
        """The publisher's record #n of `channel`, waited for up to the stall timeout; None after a
        stall report, or as soon as `give_way` says so. Polled (an expired store `wait` prints a
        c10d warning, and a blocking one could not ask `give_way`), first every `first_pause_s`,
        then less often (up to every 20 ms); `give_way` is asked every P2P_POLL_S. Another rank's
        abort ends this process from the background thread meanwhile."""
        deadline = time.time() + self.config.timeout_s
        pause, asked = first_pause_s, time.time()
        while time.time() < deadline:
            record = self.comparer.read_record(store, channel, n)
            if record is not None:
                return record
            if time.time() - asked > P2P_POLL_S:
                if give_way():
                    return None
                asked = time.time()
            time.sleep(pause)
            pause = min(2 * pause, 0.02)
        if self.watchdog.claim_stall(str(fp["g"]), int(fp["n"])):  # the watchdog may have timed out too
            self.watchdog.report_stall(fp, store)
        return None

    def has_late(self) -> bool:
        return bool(self._late)

    def check_late(self, store: Any) -> None:
        """Strict recvs that gave way: compare each once its send's fingerprint is published."""
        with self._lock:
            late = list(self._late)
        for item in late:
            channel, k, fp = item
            record = self.comparer.read_record(store, channel, k)
            if record is None:
                continue
            with self._lock:
                self._late.remove(item)
            self.comparer.check_record(store, channel, fp, record, sender_of(channel), strict=True)
