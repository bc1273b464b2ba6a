"""Cross-rank verification through the job's own c10d store, and the stall watchdog: the Monitor
that drives the protocol (verify_protocol.py: what is written where; verify_wire.py: records and
hashes), the store client (verify_store.py) and the stall reasoning (verify_stall.py). In: the
tracer's issued and completed collectives. Out: report lines in the trace, and the end of the job
(ABORT_EXIT_CODE) on a mismatch or stall when it is configured to abort.

Asynchronous mode does the store traffic on a background thread (every 50 ms, less often in a
world of more than 1,000 ranks: `pacing`), except the first time a
(group, op, call site) is issued on a rank: that collective is agreed on the calling thread before
it is issued, as in strict mode, so a divergence at a new call site (the usual kind) is caught
before the backend sees it. Strict mode publishes and compares on the calling thread before every
collective, send and recv. Every store wait has a timeout;
any store failure degrades the tracer to recording only (with a warning), never to a hang. The
extra store connections are retried for a time that grows with the world; a rank that cannot
make them says so through the job's own store connection, so that nobody waits for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from collcheck.runtime import liveline
from collcheck.runtime.groups import is_creation
from collcheck.runtime.operand import Use, crosses, swap_text
from collcheck.runtime.p2p import (
    ANY_SOURCE,
    RECV,
    Channel,
    base_group,
    channel_of,
    is_p2p,
)
from collcheck.runtime.record import CollectiveEvent, ReportEvent, TraceWriter, trace_file_name
from collcheck.runtime.relay import NodeRelay, short_error
from collcheck.runtime.verify_protocol import (
    P2PSlot,
    Position,
    blocked_fingerprint,
    fingerprint,
    mismatch_kind,
    mismatch_text,
    p2p_fingerprint,
    rank_list,
    receiver_of,
    sender_of,
)
from collcheck.runtime.verify_stall import caught_up, peer_finished, stall_text
from collcheck.runtime.verify_store import (
    TICK_S,
    blocking_ok,
    connect_budget,
    job_store,
    pacing,
    relayed_compare_s,
)
from collcheck.runtime.verify_wire import (
    CHAIN_START,
    RING,
    SKIPPED,
    DetailIndex,
    Record,
    chain_key,
    detail_key,
    differs,
    fold,
    hashes,
    link,
    members_key,
    parse_chain,
    peek,
    record_link,
    slot_key,
    theirs,
)

ABORT_EXIT_CODE = 86
ABORT_WAIT = timedelta(days=365)  # a blocked wait for an abort never expires in a job's life
WAKE_STOP = "\x00collcheck:stop"  # what a rank writes to its own wake key to end its abort waiter
FLUSH_S = 2.0
ABORT_GRACE_S = 0.5
ABORT_LINGER_S = 3.0
CONNECT_FIRST_PAUSE_S = 0.1  # the first pause between tries; doubled up to 2 s
PENDING_LIMIT = 2 * RING  # fingerprints queued per channel for comparison, at most (memory)
STALL_CLAIM_GRACE_S = 10.0  # a rank that lost the stall claim waits this long for the abort
FIRST_SEEN_LIMIT = 4_096  # (group, op, call site) agreed synchronously in async mode, at most
P2P_POLL_S = 0.1  # how often a strict recv waiting for its send looks for a wait cycle
# Before a collective, a follower polls for the leader's fingerprint (an expired store wait would
# print c10d warnings, and a blocking one could not notice a leader that degraded), starting
# this often: the leader usually publishes within a millisecond of the follower's first look.
LEADER_POLL_S = 0.0002
LEADER_CHECK_S = 1.0  # a strict follower looks for `degraded/<leader>` before a wait this often
SWAP_WINDOW = 64  # call-site divergences per group remembered to find a swapped pair's second half
AHEAD_LIMIT = 1_024  # fingerprints published past a missing number before head/ skips it


# ---------------------------------------------------------------------------------------------
# The monitor: background thread for async checks, positions, abort polling and stalls


@dataclass
class MonitorConfig:
    rank: int
    verify: bool
    strict: bool
    timeout_s: float
    world_size: int = 1
    abort: bool = True
    report_socket: str | None = None  # `collcheck run`'s listener (liveline.py), if any


class Monitor:
    """Owns all cross-rank traffic of one rank. Errors end the job (when configured to abort);
    store failures degrade to recording only."""

    def __init__(
        self,
        config: MonitorConfig,
        writer: TraceWriter,
        store_factory: Callable[[], Any] | None,
        on_tick: Callable[[], None] | None = None,
        before_exit: Callable[[], None] | None = None,
        fallback_store: Callable[[], Any] | None = job_store,
        relay: NodeRelay | None = None,
    ) -> None:
        self.config = config
        # Async mode: the node's relay, through which this rank reads its publishers' `rh/`
        # keys (the job store sees one read per node and tick, not one per rank)
        self._relay = relay if config.verify and not config.strict else None
        self._flushing = False  # the final flush reads the job store itself: no tick is left
        self._counted_publisher = False  # this rank is counted in `publishers` (relays' pace)
        self._fallback = fallback_store  # says `degraded/<rank>` when no connection of ours works
        self.writer = writer
        self._factory = store_factory
        self._on_tick = on_tick  # record mode: notes completions before stalls are checked
        self._before_exit = before_exit  # the native kernel's deferred lines, before os._exit
        self._background = config.verify and not config.strict  # async: the thread compares
        self._strict = config.verify and config.strict
        self.store: Any = None
        # The issuing threads' own connection (strict mode; async mode's first-seen checks), so a
        # wait there never delays the background thread's abort polling.
        self.sync_store: Any = None
        self._lock = threading.Lock()
        # One publisher at a time, taking `_new` in issue order: every fingerprint is published
        # once, and always before the head that counts it.
        self._publish_lock = threading.Lock()
        # Events (and send/recv slots), not fingerprints: building those (strings, relative paths)
        # is left to the background thread, off the collective's path.
        self._new: deque[CollectiveEvent | P2PSlot] = deque()
        self._pending: dict[str, deque[tuple[int, dict[str, Any]]]] = {}  # channel -> (seq, fp)
        self._inflight: dict[tuple[str, int], CollectiveEvent] = {}
        self._slots: dict[tuple[str, int], P2PSlot] = {}  # the sends and recvs among them
        self._issued: dict[str, int] = {}  # group -> seq; send/recv channel -> k
        self._channels: dict[Channel, int] = {}  # sends (or recvs) this rank issued per channel
        self._any_source: set[str] = set()  # groups in which this rank received from any source
        self._late: list[tuple[str, int, dict[str, Any]]] = []  # strict recvs compared after issue
        self._seen: set[tuple[str, str, str, int]] = set()  # async: (group, op, file, line) agreed
        self._last: CollectiveEvent | None = None
        self._last_slot: P2PSlot | None = None
        self._last_done = False
        self._stalled: set[tuple[str, int]] = set()
        self._callsite_warnings = 0
        # group -> recent call-site divergences with differing operands, (leader's, own), to
        # find the second half of a swapped pair (compared from two threads: under `_lock`)
        self._operand_splits: dict[str, deque[tuple[dict[str, Any], dict[str, Any]]]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pace = pacing(config.world_size)
        self._compared = 0.0  # when async mode last published and compared
        # The abort waiter: its own connection, blocked in a wait for `wake/<rank>` (see
        # `_await_abort`), so that an abort is learned at once and an idle rank asks nothing.
        self.abort_store: Any = None
        self._waiter: threading.Thread | None = None
        self._position_sent = 0.0
        self._position_dirty = True
        self._degraded = False
        self._reporting = False  # this rank set the abort: it must linger, not stop on its own key
        self.ended = False  # the process group is being destroyed: store errors are expected
        self._head_mark: dict[str, int] = {}  # channel -> what rh/<channel> covers (published)
        self._links: dict[str, dict[int, str]] = {}  # channel -> links published past the mark
        self._chain: dict[str, str] = {}  # channel -> the publisher's chain at the mark
        # channel -> (n, chain) where this follower's chain is known equal to its publisher's;
        # None: unknown (a difference or a gap was found), until it adopts the publisher's next
        self._base: dict[str, tuple[int, str] | None] = {}
        self._agreed: set[tuple[str, int]] = set()  # first-seen, compared before issue: queued too
        self._gone_checked: dict[int, float] = {}  # leader -> when `degraded/` was last looked at
        self._skip_store: Any = None  # a degraded strict leader's job store client; False: failed
        self._gone: set[int] = set()  # ranks that degraded to recording: they publish nothing more
        self._waiting_since: dict[str, float] = {}  # channel -> since when nothing new came
        self._published_ahead: dict[str, set[int]] = {}  # published beyond a missing number
        self._leaders: dict[str, int] = {}  # group -> its lowest rank (computed once, not per op)
        self._members: dict[str, tuple[int, ...]] = {}  # base group -> its member list
        self._members_sent: set[str] = set()  # groups whose member list this rank wrote
        self._details: dict[str, DetailIndex] = {}  # channel -> the details this rank published
        self._publisher_of: dict[str, int] = {}  # channel -> who publishes what this rank compares
        self._missed: dict[str, int] = {}  # channel -> collectives that could not be compared

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._factory is not None:
            try:
                self.store = self._connect()
                if self.config.verify:
                    self.sync_store = self._connect()
            except Exception as error:
                self._degrade(f"store unreachable ({short_error(error)})", loud=True)
            if self.store is not None and self._relay is not None:
                self._relay.start(self.store)
                self._say_relay()
            if self.store is not None and self.config.abort and blocking_ok(self.store):
                with contextlib.suppress(Exception):  # without it, the tick polls for an abort
                    self.abort_store = self._factory()
        if self.abort_store is not None:
            self._waiter = threading.Thread(target=self._await_abort, name="collcheck-abort", daemon=True)
            self._waiter.start()
        self._thread = threading.Thread(target=self._run, name="collcheck-monitor", daemon=True)
        self._thread.start()

    def _connect(self) -> Any:
        """A store client from the factory, retried with growing pauses for `connect_budget`: the
        job's store was just reachable, so a failure is load (many ranks connecting at once, a
        slow machine), not a wrong address."""
        deadline = time.monotonic() + connect_budget(self.config.world_size, self.config.timeout_s)
        pause = CONNECT_FIRST_PAUSE_S
        assert self._factory is not None
        while True:
            try:
                return self._factory()
            except Exception:
                if time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(2 * pause, 2.0)

    def stop(self, exited: bool = True) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        self._stop_waiter()
        if self.store is not None:
            try:
                self._flush()
                if self._relay is not None:
                    self._relay.close(self.store)
                if exited:
                    self._publish_position(exited=True)
            except Exception:  # the store may already be gone at exit; the trace has everything
                pass
        self._say_missed()

    def _flush(self, wait_s: float = FLUSH_S) -> None:
        """Compare what is still pending, so a short job's last collectives are checked too."""
        if not self.config.verify:
            return
        deadline = time.time() + wait_s
        self._flushing = True
        while True:
            if self._background:
                self._publish_and_compare(self.store)
            if self._late:
                self._check_late(self.store)
            done = not self._late and not any(self._pending.values())
            if done or time.time() > deadline:
                return
            time.sleep(TICK_S)

    # -- called by the tracer on the issuing thread --------------------------------------------

    def issued(self, event: CollectiveEvent, check: bool = True) -> None:
        """`check=False`: watched for stalls, never compared (a group whose members c10d does not
        know: its guessed leader may not be in it, and nobody would publish)."""
        first = False
        with self._lock:
            self._issued[event.group] = event.seq
            self._inflight[(event.group, event.seq)] = event
            self._last, self._last_slot, self._last_done = event, None, False
            self._position_dirty = True
            if event.group not in self._members:
                self._members[event.group] = event.group_ranks
            if not check:
                return
            if self._background:
                # The steady state costs this set lookup; a new site is remembered (bounded).
                site = event.site
                key = (event.group, event.op, site.file, site.line)
                first = key not in self._seen and self._remember_site(key)
                # A first-seen one is queued too: a leader publishes it below with what precedes
                # it; a follower compares it before issue, and folds it into its chain.
                if first and event.rank != self._leader(event):
                    self._agreed.add((event.group, event.seq))
                self._new.append(event)
        if first or (self._strict and check):
            self._agree(event)
        elif self._degraded and check:  # its followers may be blocked on this one's slot
            self._skip_degraded(event)

    def issued_p2p(self, event: CollectiveEvent, check: bool = True) -> None:
        """A send or recv: in flight and in positions like a collective, and paired on its channel
        (strict mode: before it is issued; async mode: on the background thread). `check=False`
        (a group whose members c10d does not know): the peer's rank is a guess, never paired."""
        with self._lock:
            slot = self._slot(event) if check else None
            self._issued[event.group] = event.seq
            self._inflight[(event.group, event.seq)] = event
            self._last, self._last_slot, self._last_done = event, slot, False
            self._position_dirty = True
            group = base_group(event.group)
            if group not in self._members:
                self._members[group] = event.group_ranks
            if slot is None:
                return
            self._issued[slot.channel.key] = slot.k
            self._slots[(event.group, event.seq)] = slot
            if self._background:
                self._new.append(slot)
        if self._strict:
            self._agree_p2p(slot)

    def completed(self, group: str, seq: int) -> None:
        with self._lock:
            inflight = self._inflight
            inflight.pop((group, seq), None)
            if self._slots:
                self._slots.pop((group, seq), None)
            # A group runs its collectives in order: a later one done means earlier ones are too
            # (covers works whose completion cannot be observed). Usually nothing is left in flight.
            # Not so for sends and recvs: those with different peers complete in any order.
            if inflight and not is_p2p(group):
                for key in [key for key in inflight if key[0] == group and key[1] < seq]:
                    del inflight[key]
            if self._last is not None and self._last.group == group and self._last.seq == seq:
                self._last_done = True
            self._position_dirty = True

    def sync_collectives(
        self,
        issued: dict[str, int],
        inflight: list[CollectiveEvent],
        last: CollectiveEvent | None,
        last_done: bool,
    ) -> None:
        """Record mode with the native kernel: the collectives it has issued (per group) and has
        in flight, read back on each tick instead of `issued`/`completed` calls per collective.
        Entries of other sequences (sends and recvs, adapters' communicators) still come through
        those calls and are kept; "last" is whichever was issued last."""
        with self._lock:
            kept = {key: event for key, event in self._inflight.items() if key[0] not in issued}
            kept.update(((event.group, event.seq), event) for event in inflight)
            for event in inflight if last is None else [*inflight, last]:
                if event.group not in self._members:  # for `members/<group>` (stall reports)
                    self._members[event.group] = event.group_ranks
            changed = bool(issued.items() - self._issued.items()) or kept.keys() != self._inflight.keys()
            self._issued.update(issued)
            self._inflight = kept
            current = self._last
            newer = last is not None and (
                current is None or current.group in issued or last.t_start >= current.t_start
            )
            if newer and (last is not current or last_done != self._last_done):
                self._last, self._last_slot, self._last_done = last, None, last_done
                changed = True
            if changed:
                self._position_dirty = True

    def collective_failed(self) -> None:
        """A collective failed in the backend: if another rank reported why, stop with that."""
        store = self.store
        if store is None:
            return
        with contextlib.suppress(Exception):  # the reporter sets the key just before it exits
            self._sleep_for_abort(store, ABORT_GRACE_S)

    def _leader(self, event: CollectiveEvent) -> int:
        """The group's lowest rank, which publishes its records; found once per group, not per
        collective (the member list can be thousands long)."""
        leader = self._leaders.get(event.group)
        if leader is None:
            leader = self._leaders[event.group] = min(event.group_ranks)
        return leader

    def _remember_site(self, key: tuple[str, str, str, int]) -> bool:
        """Note a new (group, op, file, line) (holding the lock); False once FIRST_SEEN_LIMIT are
        known. Keyed on the call site, not the shapes, so a loop whose shapes vary stays
        asynchronous; bounded, so generated call sites cannot turn async mode into strict mode."""
        if len(self._seen) >= FIRST_SEEN_LIMIT:
            return False
        self._seen.add(key)
        return True

    def _slot(self, event: CollectiveEvent) -> P2PSlot | None:
        """Count a send or recv on its channel (holding the lock); None when it cannot be paired."""
        if event.op == ANY_SOURCE:
            self._any_source.add(event.group)
        channel = channel_of(event)
        if channel is None or (event.op == RECV and event.group in self._any_source):
            return None
        k = self._channels.get(channel, 0) + 1
        self._channels[channel] = k
        return P2PSlot(event, channel, k)

    # -- agreeing before the op is issued (strict mode, async first-seen) ----------------------

    def _agree(self, event: CollectiveEvent) -> None:
        """Publish (leader) or wait for the leader's fingerprint and compare, before issuing."""
        store = self.sync_store
        if store is None:
            self._skip_degraded(event)
            return
        fp = blocked_fingerprint(event, members=False)
        leader = self._leader(event)
        try:
            if event.rank == leader:
                with self._publish_lock:
                    if self._strict:
                        keys: list[str] = []
                        values: list[str] = []
                        self._add_record(keys, values, event.group, event.seq, fp)
                        if event.seq + 1 > RING:  # the next slot must be empty for its waiters
                            store.delete_key(slot_key(event.group, event.seq + 1))
                        store.multi_set(keys, values)
                    else:  # async: ours is queued in issue order; publish the queue, ours included
                        self._publish_queued(store)
                return
            # Async mode: a leader for whom this collective is not new publishes it from its
            # background thread within a tick; the wait is the same. A leader that degraded to
            # recording publishes nothing more: waiting for it would end in a false stall.
            if leader in self._gone:
                return
            if blocking_ok(store):  # strict mode, and async mode's first-seen checks
                record = self._wait_for_leader(store, event.group, event.seq, fp, leader)
            else:
                record = self._wait_for(
                    store, event.group, event.seq, fp, lambda: self._leader_gone(store, leader), LEADER_POLL_S
                )
            if record is not None:
                self._check_record(store, event.group, fp, record, leader, strict=self._strict)
                if record.skipped:  # a leader that degraded says so in its slots: stop waiting
                    self._leader_gone(store, leader)
        except Exception as error:
            what = "strict" if self._strict else "first-seen"
            self._degrade(f"{what} check failed ({short_error(error)})", loud=True)

    def _wait_for_leader(
        self, store: Any, group: str, n: int, fp: dict[str, Any], leader: int
    ) -> Record | None:
        """Strict mode, and async mode's first-seen checks: the leader's record #n, learned through
        the store's blocking wait on its slot (one request, answered the moment the leader
        writes it) instead of polls. The slot is empty until then: a strict leader empties the
        next slot before publishing (after the ring's first lap), and a leader that degrades
        fills the slots its followers may be waiting on with a record saying so
        (`_release_followers`, `_skip_degraded`). None after a stall report, or when the leader
        degraded. A slot still holding an older lap's record (an async leader empties none)
        falls back to polling."""
        record = self._read_record(store, group, n)
        if record is not None:  # the usual case: the leader is ahead
            return record
        now = time.monotonic()
        if now - self._gone_checked.get(leader, -LEADER_CHECK_S) >= LEADER_CHECK_S:
            self._gone_checked[leader] = now  # a leader that degrades also fills the slots
            if self._leader_gone(store, leader):
                return None
        try:
            store.wait([slot_key(group, n)], timedelta(seconds=max(self.config.timeout_s, 0.001)))
        except Exception as error:
            if "timeout" not in str(error).lower():
                raise
            if self._claim_stall(str(fp["g"]), int(fp["n"])):  # the watchdog may have timed out too
                self._report_stall(fp, store)
            return None
        record = self._read_record(store, group, n)
        if record is not None:
            return record
        return self._wait_for(store, group, n, fp, lambda: self._leader_gone(store, leader), LEADER_POLL_S)

    def _skip_degraded(self, event: CollectiveEvent) -> None:
        """A leader that degraded to recording (either verify mode): mark each collective it
        issues as never published, through the job's own store client, so that its followers
        blocked on the slot wake (and stop waiting for it) instead of waiting for a stall. Given
        up after one failure (a dead store)."""
        if not (self.config.verify and self._degraded and self._fallback is not None and not self.ended):
            return
        if self._skip_store is False or event.rank != self._leader(event):
            return
        try:
            if self._skip_store is None:
                self._skip_store = self._fallback()
            record = Record(event.seq, SKIPPED, SKIPPED, -1).text()
            self._skip_store.compare_set(slot_key(event.group, event.seq), "", record)
        except Exception:
            self._skip_store = False

    def _release_followers(self, store: Any) -> None:
        """A leader that degraded (either verify mode): fill the slots of the groups it leads
        that followers may be blocked on (its current number and the next), if empty, with a
        record saying that it was never published; they stop waiting for this rank
        (`degraded/<rank>`)."""
        with self._lock:
            rank = self.config.rank
            current = {group: seq for group, seq in self._issued.items() if self._leaders.get(group) == rank}
        for group, seq in current.items():
            for n in (seq, seq + 1):
                store.compare_set(slot_key(group, n), "", Record(n, SKIPPED, SKIPPED, -1).text())

    def _leader_gone(self, store: Any, rank: int) -> bool:
        """Whether `rank` said it degraded to recording only (`degraded/<rank>`), remembered."""
        if rank in self._gone:
            return True
        if store.check([f"degraded/{rank}"]):
            self._gone.add(rank)
            return True
        return False

    def _agree_p2p(self, slot: P2PSlot) -> None:
        """Strict mode: a send publishes its fingerprint before it is issued; a recv waits for its
        send's and compares. A recv gives way, and is compared once the send is published, when
        its sender is itself waiting in a strict recv for this rank (directly or around a cycle):
        irecv-before-isend on every rank is legal and must not wait for the timeout."""
        store = self.sync_store
        if store is None:
            return
        fp = blocked_fingerprint(slot.event, slot, members=False)
        channel, k, sender = slot.channel.key, slot.k, slot.channel.src
        try:
            if slot.sender:
                keys: list[str] = []
                values: list[str] = []
                with self._publish_lock:
                    self._add_record(keys, values, channel, k, fp)
                store.multi_set(keys, values)
                return
            record = self._wait_for_send(store, channel, k, fp, sender)
            if record is None:
                with self._lock:
                    self._late.append((channel, k, fp))
                return
            self._check_record(store, channel, fp, record, sender, strict=True)
        except Exception as error:
            self._degrade(f"strict check failed ({short_error(error)})", loud=True)

    def _wait_for_send(
        self, store: Any, channel: str, k: int, fp: dict[str, Any], sender: int
    ) -> Record | None:
        record = self._read_record(store, channel, k)
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

    def _read_record(self, store: Any, channel: str, n: int) -> Record | None:
        """The record in #n's slot once it is #n's or a later one's (then #n was overwritten
        before it was read); None while the publisher has not written #n. One request."""
        raw = peek(store, slot_key(channel, n))
        record = Record.parse(raw) if raw is not None else None
        return record if record is not None and record.n >= n else None

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
            record = self._read_record(store, channel, n)
            if record is not None:
                return record
            if time.time() - asked > P2P_POLL_S:
                if give_way():
                    return None
                asked = time.time()
            time.sleep(pause)
            pause = min(2 * pause, 0.02)
        if self._claim_stall(str(fp["g"]), int(fp["n"])):  # the watchdog may have timed out too
            self._report_stall(fp, store)
        return None

    def _check_record(
        self,
        store: Any,
        channel: str,
        mine: dict[str, Any],
        record: Record,
        publisher: int | None,
        strict: bool,
    ) -> None:
        """Compare this rank's fingerprint with the publisher's record of the same collective;
        the details are read only when the hashes differ."""
        expected = int(mine["k"]) if "c" in mine else int(mine["n"])
        if record.n != expected or record.skipped:
            why = "overwritten before it was read" if record.n > expected else "never published"
            self._not_compared(channel, 1, why)
            return
        if not differs(mine, record):
            return
        raw = peek(store, detail_key(channel, record.detail)) if record.detail >= 0 else None
        who = publisher if publisher is not None else -1
        self._compare(mine, theirs(mine, who, raw, record), strict)

    def _add_record(
        self, keys: list[str], values: list[str], channel: str, n: int, fp: dict[str, Any]
    ) -> None:
        """Append what publishes #n of `channel`: its details when they are new, then its record
        (holding `_publish_lock`: the details index is the publisher's)."""
        index, details = self._details.setdefault(channel, DetailIndex()).place(fp)
        if details is not None:
            keys.append(detail_key(channel, index))
            values.append(details)
        sig, site = hashes(fp)
        keys.append(slot_key(channel, n))
        values.append(Record(n, sig, site, index).text())

    def _not_compared(self, channel: str, count: int, why: str) -> None:
        """Collectives that could not be compared: said at once the first time for a channel, and
        counted for the summary at the end; verification never stops comparing silently."""
        with self._lock:
            first = channel not in self._missed
            self._missed[channel] = self._missed.get(channel, 0) + count
        if first:
            self._report(
                "behind",
                "warning",
                f"verification fell behind on {channel}: {count} collective(s) not compared ({why}); "
                "later ones still are",
                echo=True,
            )

    def _say_missed(self) -> None:
        with self._lock:
            missed = dict(self._missed)
        if missed:
            counts = ", ".join(f"{count} on {channel}" for channel, count in sorted(missed.items()))
            self._report("behind", "warning", f"collectives not compared: {counts}", echo=True)

    # -- background thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            now = time.time()
            compare = now - self._compared >= self._compare_every()  # paced for a large world
            if compare:
                self._compared = now
            try:
                self._tick(compare)
            except Exception as error:  # the checker itself failed: keep recording
                if self.ended:
                    return
                self._degrade(f"checker failed ({short_error(error)})", loud=True)

    def _tick(self, compare: bool = True) -> None:
        """One tick of the background thread: local work every TICK_S; async publication and
        comparison when `compare` (every `pacing(world).compare_s`)."""
        if self._on_tick is not None:
            self._on_tick()
        store = self.store
        if store is not None:
            if not self._waiting_for_abort():
                self._check_abort(store)
            if self._background and compare:
                if self._relay is not None:
                    self._relay.tick(store)
                    self._say_relay()
                self._publish_and_compare(store)
            if self._late:
                self._check_late(store)
            self._publish_members(store)
            self._maybe_publish_position()
        self._check_stalls()

    def _compare_every(self) -> float:
        """Seconds between async publications and comparisons: `pacing` of the world, or, when
        this rank reads through a node relay, of the job store's clients the relay counted."""
        requesters = self._relay.requesters() if self._relay is not None else None
        return relayed_compare_s(requesters) if requesters is not None else self._pace.compare_s

    def _say_relay(self) -> None:
        """Report what the relay noted (it fell back to the job store): once, as a warning."""
        assert self._relay is not None
        while self._relay.notes:
            self._report("relay", "warning", self._relay.notes.pop(0), echo=True)

    def _chain_of(self, store: Any, channel: str) -> bytes | None:
        """The publisher's `rh/<channel>`: through the node's relay in the ticks, from the job
        store itself in the final flush (the relay may have stopped) or without a relay."""
        if self._relay is None or self._flushing:
            return peek(store, chain_key(channel))
        return self._relay.chain(store, channel)

    def _check_abort(self, store: Any) -> None:
        """Poll for an abort (the fallback when the abort waiter is not running)."""
        if self._reporting or not store.check(["abort"]):
            return
        self._aborted(store, store.get("abort").decode("utf-8", "replace"))

    def _aborted(self, store: Any, text: str) -> None:
        """Another rank reported an error: acknowledge it and end this process."""
        first = text.splitlines()[0] if text else "an error"
        try:  # tell the reporter we saw it: it may host the store and waits before exiting
            store.add("abort_ack", 1)
            if self.config.rank == 0:  # the usual host of the store: stay until all have seen it
                self._linger(store)
            else:
                time.sleep(3 * TICK_S)  # give the reporter time to read the ack
        except Exception:
            pass
        self._finish("aborted", f"stopping: {first}", echo=True)

    def _waiting_for_abort(self) -> bool:
        """Whether the abort waiter is blocked in its wait (else the tick polls)."""
        return self._waiter is not None and self._waiter.is_alive()

    def _await_abort(self) -> None:
        """The abort waiter's thread. Blocked in the store's wait for `wake/<rank>`, which the
        first rank to report an error sets for every rank (to its report's first line) and this
        rank sets itself when it stops: one request per abort, where polling asked the store 20
        times a second, and the abort is learned the moment it is set, even if the store's host
        exits right after (the wait's answer is already here). If the connection breaks, the
        thread ends and the tick polls instead (and finds the store gone, as before)."""
        store, key = self.abort_store, f"wake/{self.config.rank}"
        try:
            if peek(store, key) == WAKE_STOP.encode():  # left by an earlier tracer in this process
                store.delete_key(key)
            store.wait([key], ABORT_WAIT)
        except Exception:
            return
        if self._stop.is_set():
            return
        try:
            raw = peek(store, key)
        except Exception:  # woken, but the store went away before the text could be read
            raw = b"another rank reported an error (the store closed before its report was read)"
        text = (raw or b"").decode("utf-8", "replace")
        if self._stop.is_set() or text == WAKE_STOP or self._reporting:
            return
        self._aborted(store, text)

    def _wake_all(self, store: Any, text: str) -> None:
        """Set every other rank's `wake/<rank>` to the report's first line (one request)."""
        first = (text.splitlines() or ["an error"])[0][:500]
        keys = [f"wake/{rank}" for rank in range(self.config.world_size) if rank != self.config.rank]
        if keys:
            store.multi_set(keys, [first] * len(keys))

    def _stop_waiter(self) -> None:
        """Wake this rank's own abort waiter so that its thread ends (it is a daemon thread: a
        waiter that cannot be woken, its store gone, never keeps the process alive)."""
        waiter = self._waiter
        if waiter is None or not waiter.is_alive():
            return
        fallback = self._fallback
        for get in (lambda: self.store, lambda: self.sync_store, fallback):  # the job's own, last
            try:
                store = get() if get is not None else None
                if store is not None:
                    store.set(f"wake/{self.config.rank}", WAKE_STOP)
                    break
            except Exception:
                continue
        waiter.join(timeout=2.0)

    def _sleep_for_abort(self, store: Any, seconds: float) -> None:
        """Give another rank's abort `seconds` to arrive: the waiter ends this process when it
        does; without a waiter, poll for it."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            if not self._waiting_for_abort():
                self._check_abort(store)
            time.sleep(TICK_S)

    def _publish_and_compare(self, store: Any) -> None:
        with self._publish_lock:
            self._publish_queued(store)
        # The issuing thread may add channels meanwhile (first-seen publication): iterate a copy.
        for channel, pending in list(self._pending.items()):
            self._compare_channel(store, channel, pending)

    def _publish_queued(self, store: Any) -> None:
        """Publish the queued fingerprints this rank publishes and queue the others for comparison
        (holding `_publish_lock`)."""
        with self._lock:
            new = list(self._new)
            self._new.clear()
        keys: list[str] = []
        values: list[str] = []
        published: dict[str, list[int]] = {}
        for item in new:
            channel, seq, fp, publisher = self._outgoing(item)
            if publisher == self.config.rank:
                self._add_record(keys, values, channel, seq, fp)
                published.setdefault(channel, []).append(seq)
                self._links.setdefault(channel, {})[seq] = link(seq, fp)
            else:
                self._publisher_of[channel] = publisher
                pending = self._pending.setdefault(channel, deque())
                pending.append((seq, fp))
                if len(pending) > PENDING_LIMIT:  # the publisher is far behind: bound memory, say so
                    dropped, _ = pending.popleft()
                    self._base[channel] = None  # a gap: the chain cannot be compared across it
                    if (channel, dropped) in self._agreed:  # compared before issue already
                        self._agreed.discard((channel, dropped))
                    else:
                        self._not_compared(channel, 1, "too many waiting for the publisher")
        if keys:
            advances, skipped = self._head_advances(published)
            for channel, number in skipped:  # what rh/ covers must exist: mark it, never compared
                keys.append(slot_key(channel, number))
                values.append(Record(number, SKIPPED, SKIPPED, -1).text())
            # Records first, then the chain, in one request: a reader never sees a chain ahead of
            # its records (the store applies a multi_set whole, before the next request).
            for channel, count in advances.items():
                keys.append(chain_key(channel))
                values.append(f"{self._head_mark[channel]} {self._advance_chain(channel, count)}")
            store.multi_set(keys, values)
            if self._relay is not None and not self._counted_publisher:
                self._counted_publisher = True  # one more writer per tick: the relays' pace counts it
                store.add("publishers", 1)

    def _advance_chain(self, channel: str, count: int) -> str:
        """Fold the links of the `count` numbers up to the new mark into the channel's chain (a
        number given up on folds the skipped marker, as its record says)."""
        mark = self._head_mark[channel]
        links = self._links.get(channel, {})
        chain = self._chain.get(channel, CHAIN_START)
        p2p = is_p2p(channel)
        for number in range(mark - count + 1, mark + 1):
            text = links.pop(number, None)
            if text is None:
                text = record_link(Record(number, SKIPPED, SKIPPED, -1), p2p)
            chain = fold(chain, text)
        for number in [number for number in links if number <= mark]:  # late ones, given up on
            del links[number]
        self._chain[channel] = chain
        return chain

    def _outgoing(self, item: CollectiveEvent | P2PSlot) -> tuple[str, int, dict[str, Any], int]:
        """A queued item's channel, number, fingerprint (without the member list), and the rank
        that publishes it (the group's leader; the sender of a send/recv pair)."""
        if isinstance(item, P2PSlot):
            return item.channel.key, item.k, p2p_fingerprint(item, members=False), item.channel.src
        return item.group, item.seq, fingerprint(item, members=False), self._leader(item)

    def _head_advances(self, published: dict[str, list[int]]) -> tuple[dict[str, int], list[tuple[str, int]]]:
        """How far each `head/` may move: to the highest number below which every fingerprint is
        published. Two threads of the leader can queue #3 before #2 (each numbers its collective,
        then queues it); counting #3 at once would let a follower read the missing #2. Also the
        numbers given up on (AHEAD_LIMIT published past one that never came), whose slots get a
        record saying so, at most RING of them (the ring holds no more)."""
        advances: dict[str, int] = {}
        skipped: list[tuple[str, int]] = []
        for channel, numbers in published.items():
            ahead = self._published_ahead.setdefault(channel, set())
            start = mark = self._head_mark.get(channel, 0)
            ahead.update(number for number in numbers if number > mark)  # not one skipped earlier
            if len(ahead) > AHEAD_LIMIT:  # a number that will never come (its event was lost)
                lowest = min(ahead)
                skipped.extend((channel, number) for number in range(max(mark + 1, lowest - RING), lowest))
                mark = lowest - 1
            while mark + 1 in ahead:
                mark += 1
                ahead.remove(mark)
            if mark > start:
                self._head_mark[channel] = mark
                advances[channel] = mark - start
        return advances, skipped

    def _publish_members(self, store: Any) -> None:
        """Write the member list of each group this rank has used, once per group for the whole
        job: the first member to claim it writes it (its lowest rank may not have used the group
        yet when a stall is reported). Stall reports read it, instead of every position and
        record carrying it. One small request per rank and group."""
        if len(self._members_sent) == len(self._members):
            return
        for group, ranks in list(self._members.items()):
            if group in self._members_sent:
                continue
            self._members_sent.add(group)
            if ranks and int(store.add(f"members_claim/{group}", 1)) == 1:
                store.set(members_key(group), json.dumps(list(ranks), separators=(",", ":")))

    def _compare_channel(self, store: Any, channel: str, pending: deque[tuple[int, dict[str, Any]]]) -> None:
        """One tick's comparison of a channel: one read of the publisher's chain `(n, chain)`.
        When this rank has all of 1..n and its own chain at n is the same, all are compared.
        Otherwise (a difference, a gap, or this rank behind the publisher) the records are read
        and compared one by one, as they always were: a difference is never skipped."""
        if not pending:
            return
        published = parse_chain(self._chain_of(store, channel))
        head = published[0] if published is not None else 0
        ready = []
        while pending and pending[0][0] <= head:
            ready.append(pending.popleft())
        if not ready:
            self._drop_if_publisher_gone(store, channel, pending)
            return
        self._waiting_since.pop(channel, None)
        assert published is not None
        base = self._base.get(channel, (0, CHAIN_START))
        ready.sort(key=lambda item: item[0])
        numbers = [seq for seq, _ in ready]
        behind = not pending and numbers[-1] < head  # the publisher's chain is past this rank's
        if base is not None and not behind and numbers == list(range(base[0] + 1, head + 1)):
            chain = base[1]
            for seq, fp in ready:
                chain = fold(chain, link(seq, fp))
            if chain == published[1]:  # all of them compared, in one request
                for seq, _ in ready:
                    self._agreed.discard((channel, seq))
                self._base[channel] = published
                return
        same = self._compare_records(store, channel, ready)
        if not behind:
            self._base[channel] = published  # adopt the publisher's chain: compare from here on
        elif base is not None and same and numbers == list(range(base[0] + 1, numbers[-1] + 1)):
            chain = base[1]  # every record equal: the publisher's chain there is this rank's
            for seq, fp in ready:
                chain = fold(chain, link(seq, fp))
            self._base[channel] = (numbers[-1], chain)
        else:
            self._base[channel] = None

    def _compare_records(self, store: Any, channel: str, ready: list[tuple[int, dict[str, Any]]]) -> bool:
        """Read the records of `ready` and compare each (reports as they are found); whether all
        were there and equal. First-seen ones were compared before issue: not reported again."""
        values = store.multi_get([slot_key(channel, seq) for seq, _ in ready])
        publisher = self._publisher_of.get(channel)
        records = [Record.parse(raw) for raw in values]
        agreed = [(channel, seq) in self._agreed for seq, _ in ready]
        for seq, _ in ready:
            self._agreed.discard((channel, seq))
        # A slot holding a later number was overwritten before this rank read it: fell behind.
        missed = sum(
            1
            for (seq, _), record, done in zip(ready, records, agreed, strict=False)
            if not done and (not record or record.n != seq)
        )
        if missed:
            self._not_compared(channel, missed, "overwritten before they were read")
        same = True
        for (seq, fp), record, done in zip(ready, records, agreed, strict=False):
            if record is None or record.n != seq or record.skipped or differs(fp, record):
                same = False
            if record is not None and record.n == seq and not done:
                self._check_record(store, channel, fp, record, publisher, strict=False)
        return same

    def _drop_if_publisher_gone(
        self, store: Any, channel: str, pending: deque[tuple[int, dict[str, Any]]]
    ) -> None:
        """Nothing new from this channel's publisher for a second: if it degraded to recording,
        stop queueing what it will never publish (a long run would otherwise grow the queue),
        and say so."""
        now = time.time()
        since = self._waiting_since.setdefault(channel, now)
        if now - since < 1.0:
            return
        self._waiting_since[channel] = now
        publisher = self._publisher_of.get(channel)
        if publisher is not None and self._leader_gone(store, publisher):
            count = len(pending)
            pending.clear()
            self._not_compared(channel, count, f"rank {publisher} stopped verifying")

    def _check_late(self, store: Any) -> None:
        """Strict recvs that gave way: compare each once its send's fingerprint is published."""
        with self._lock:
            late = list(self._late)
        for item in late:
            channel, k, fp = item
            record = self._read_record(store, channel, k)
            if record is None:
                continue
            with self._lock:
                self._late.remove(item)
            self._check_record(store, channel, fp, record, sender_of(channel), strict=True)

    def _compare(self, mine: dict[str, Any], theirs: dict[str, Any], strict: bool) -> None:
        kind = mismatch_kind(mine, theirs)
        if kind is None:
            return
        text = mismatch_text(theirs, mine)
        if kind == "mismatch":
            what = (
                "point-to-point"
                if "c" in mine
                else "group creation"
                if is_creation(mine["g"])
                else "collective"
            )
            self._fail("mismatch", f"{what} mismatch: {text}")
        elif strict:
            self._fail("callsite", f"call-site divergence (strict): {text}")
        else:
            swap = self._swap_with(theirs, mine)
            if swap is not None:
                self._fail("swap", swap)
            else:
                self._warn_callsite(text, theirs, mine)

    def _swap_with(self, theirs: dict[str, Any], mine: dict[str, Any]) -> str | None:
        """The report of a swapped pair, if this call-site divergence crosses an earlier one of the
        same group (either may be compared first: first-seen checks run before the background's)."""
        if not theirs.get("x") or not mine.get("x") or theirs["x"] == mine["x"]:
            return None
        pair = (theirs, mine)
        with self._lock:
            recent = self._operand_splits.setdefault(str(mine["g"]), deque(maxlen=SWAP_WINDOW))
            earlier = next((old for old in recent if crosses(_operands(old), _operands(pair))), None)
            recent.append(pair)
        if earlier is None:
            return None
        uses = (_use(earlier[0]), _use(earlier[1]), _use(theirs), _use(mine))
        return swap_text(str(mine["g"]), uses)

    def _warn_callsite(self, text: str, theirs: dict[str, Any], mine: dict[str, Any]) -> None:
        self._callsite_warnings += 1
        if self._callsite_warnings <= 3:
            low, high = sorted((theirs, mine), key=lambda fp: int(fp["r"]))
            operands = ""
            if low.get("x") and high.get("x") and low["x"] != high["x"]:
                operands = f" on `{low['x']}` and `{high['x']}`"
            self._report(
                "callsite",
                "warning",
                f"call-site divergence: {text}{operands} (same collective "
                "issued from different lines; legitimate for the barrier trick, an error once the "
                "operands cross as in a swapped pair)",
                echo=True,
            )

    # -- positions and stalls ------------------------------------------------------------------

    def _position(self, exited: bool = False, members: bool = True) -> Position:
        """Where this rank is; `members=False` (what is published) leaves out member lists."""
        with self._lock:
            events = sorted(self._inflight.values(), key=lambda event: event.t_start)
            slots = [self._slots.get((event.group, event.seq)) for event in events]
            issued, last, last_slot = dict(self._issued), self._last, self._last_slot
            last_done = self._last_done
        if last is None:
            last_fp = None
        else:
            last_fp = (
                p2p_fingerprint(last_slot, members) if last_slot is not None else fingerprint(last, members)
            )
        return Position(
            rank=self.config.rank,
            t=time.time(),
            issued=issued,
            inflight=[
                blocked_fingerprint(event, slot, members) for event, slot in zip(events, slots, strict=True)
            ],
            last=last_fp,
            last_done=last_done,
            exited=exited,
            hb=self._pace.heartbeat_s,
        )

    def _publish_position(self, exited: bool = False) -> None:
        self.store.set(f"pos/{self.config.rank}", self._position(exited, members=False).to_json())
        self._position_sent = time.time()
        self._position_dirty = False

    def _maybe_publish_position(self) -> None:
        age = time.time() - self._position_sent
        if (self._position_dirty and age > self._pace.position_s) or age > self._pace.heartbeat_s:
            self._publish_position()

    def _check_stalls(self) -> None:
        now = time.time()
        with self._lock:
            overdue = [
                event
                for key, event in self._inflight.items()
                if now - event.t_start > self.config.timeout_s and key not in self._stalled
            ]
            if not overdue:
                return
            oldest = min(overdue, key=lambda event: event.t_start)
            slot = self._slots.get((oldest.group, oldest.seq))
            self._stalled.add((oldest.group, oldest.seq))
        self._report_stall(blocked_fingerprint(oldest, slot), self.store)

    def _claim_stall(self, group: str, seq: int) -> bool:
        """Whether this caller reports the stall of (group, seq): each is reported once."""
        with self._lock:
            if (group, seq) in self._stalled:
                return False
            self._stalled.add((group, seq))
            return True

    def _report_stall(self, blocked: dict[str, Any], store: Any) -> None:
        now = time.time()
        blocked = self._with_members(blocked, None)
        positions: dict[int, Position | None] = {self.config.rank: self._position()}
        if store is not None:
            try:
                if "c" in blocked:  # a send or recv: is its peer done? (one position, no claim)
                    positions.update(self._caught_up(self._peer_positions(store, blocked)))
                    if peer_finished(self.config.rank, blocked, positions):
                        self.completed(str(blocked["g"]), int(blocked["n"]))  # a Work nobody waits for
                        return
                if not self._claim_report(store):
                    return
                positions.update(self._read_positions(store, blocked))
                positions[self.config.rank] = self._position()
            except Exception as error:
                positions = {self.config.rank: self._position()}
                self._degrade(f"could not read positions ({short_error(error)})", loud=False)
        try:
            positions = self._caught_up(positions)
        except Exception as error:  # other ranks' traces: report with what the store said
            note = f"could not bring positions up to date from other ranks' traces ({short_error(error)})"
            self._report("note", "warning", note, echo=False)
        if peer_finished(self.config.rank, blocked, positions):
            self.completed(str(blocked["g"]), int(blocked["n"]))  # a Work nobody waits for
            return
        text = stall_text(self.config.rank, blocked, positions, now)
        if store is None:
            # Recording only: without the other ranks' positions a slow peer and a hang look the
            # same, so report and let the job's own timeout decide rather than kill it.
            text += "\n  (other ranks unknown: no store; see `collcheck trace` on the trace directory)"
            self._report("stall", "warning", text, echo=True)
            return
        self._fail("stall", text)

    def _caught_up(self, positions: dict[int, Position | None]) -> dict[int, Position | None]:
        """Other ranks' positions brought up to date from their traces where this rank can read
        them (one node, or a shared file system). A rank publishes its position a few times a
        second, so a rank that stopped (SIGSTOP, a debugger, a kernel hang holding the GIL) can be
        hundreds of collectives past what it last published; its trace line is written before each
        collective is issued."""
        path = getattr(self.writer, "path", None)
        if not path:
            return positions
        folder = os.path.dirname(str(path))
        stale = time.time() - 2 * self._pace.position_s  # a changing rank's position is fresher
        return {
            rank: position
            if rank == self.config.rank or (position is not None and position.t > stale)
            else caught_up(rank, position, os.path.join(folder, trace_file_name(rank)))
            for rank, position in positions.items()
        }

    def _claim_report(self, store: Any) -> bool:
        """Whether this rank writes the job's stall report. When every rank times out together,
        one reads the positions (W requests) instead of each reading all (W*W); the others wait
        for its abort, and report themselves only if none comes (the reporter died meanwhile)."""
        if not self.config.abort or int(store.add("stall_claim", 1)) == 1:
            return True
        self._sleep_for_abort(store, STALL_CLAIM_GRACE_S)  # ends this process once it is there
        return True

    def _peer_positions(self, store: Any, blocked: dict[str, Any]) -> dict[int, Position | None]:
        """The positions of a send's or recv's two ends (the channel's src and dst)."""
        ends = [sender_of(str(blocked["c"])), receiver_of(str(blocked["c"]))]
        return {
            rank: self._read_position(store, rank)
            for rank in ends
            if rank is not None and rank != self.config.rank
        }

    def _read_position(self, store: Any, rank: int) -> Position | None:
        """A rank's published position with its member lists restored; None if it has none."""
        raw = peek(store, f"pos/{rank}")
        if raw is None:
            return None
        try:
            position = Position.from_json(raw)
        except ValueError:  # damaged or foreign: as if the rank had published nothing
            return None
        position.inflight = [self._with_members(fp, store) for fp in position.inflight]
        if position.last is not None:
            position.last = self._with_members(position.last, store)
        return position

    def _with_members(self, fp: dict[str, Any], store: Any) -> dict[str, Any]:
        """`fp` with its group's member list under "ranks" (known here, or read from
        `members/<group>` once); for a send or recv whose group is unknown, its two ends."""
        if "ranks" in fp:
            return fp
        group = base_group(str(fp["g"]))
        ranks = self._members.get(group)
        if ranks is None and store is not None:
            raw = peek(store, members_key(group))
            ranks = rank_list(raw) if raw is not None else None
            if ranks is not None:
                self._members[group] = ranks
        if ranks is None and "c" in fp:
            ends = (sender_of(str(fp["c"])), receiver_of(str(fp["c"])))
            ranks = tuple(rank for rank in ends if rank is not None)
        return dict(fp, ranks=list(ranks or ()))

    def _read_positions(self, store: Any, blocked: dict[str, Any]) -> dict[int, Position | None]:
        # Every rank we know of: the blocked group's members plus the groups we are in.
        ranks = set(blocked.get("ranks", ()))
        with self._lock:
            for event in self._inflight.values():
                ranks.update(event.group_ranks)
        found = {rank: self._read_position(store, rank) for rank in sorted(ranks)}
        # Ranks named by another rank's blocked collective (in another group) are needed for cycles.
        named = {
            peer
            for position in found.values()
            if position is not None
            for blocked in position.inflight
            for peer in blocked.get("ranks", ())
        }
        for rank in sorted(named - set(found)):
            found[rank] = self._read_position(store, rank)
        return found

    # -- reporting -----------------------------------------------------------------------------

    def _report(self, kind: str, severity: str, text: str, echo: bool) -> None:
        self.writer.write(ReportEvent(kind, severity, text, time.time(), self.config.rank).to_json())
        if severity == "error":  # a copy that a full trace folder cannot lose
            liveline.send(self.config.report_socket, self.config.rank, kind, text)
        if echo:
            _echo(f"collcheck: rank {self.config.rank}: {text}")

    def _fail(self, kind: str, text: str) -> None:
        self._report(kind, "error", text, echo=True)
        if not self.config.abort:
            return
        self._reporting = True
        if self.store is not None or self.sync_store is not None:
            store = (
                self.sync_store
                if threading.current_thread() is threading.main_thread() and self.sync_store is not None
                else self.store
            )
            report = f"rank {self.config.rank}: {text}"
            try:
                # The other ranks' wake keys first: a host that exits the moment `abort` appears
                # (it saw it by polling) has then woken every waiter already.
                self._wake_all(store, report)
                store.compare_set("abort", "", report)
                self._linger(store)
            except Exception:
                pass
        self._finish(None, None, echo=False)

    def _linger(self, store: Any) -> None:
        """Stay up until the other ranks have seen the abort: this rank may be hosting the store."""
        deadline = time.time() + ABORT_LINGER_S
        while time.time() < deadline and int(store.add("abort_ack", 0)) < self.config.world_size - 1:
            time.sleep(TICK_S)

    def _finish(self, kind: str | None, text: str | None, echo: bool) -> None:
        """End this process: a finding was made here or on another rank."""
        if kind is not None and text is not None:
            self._report(kind, "error", text, echo=echo)
        if self._before_exit is not None:
            with contextlib.suppress(Exception):
                self._before_exit()
        self.writer.close()
        sys.stderr.flush()
        os._exit(ABORT_EXIT_CODE)

    def _tell_degraded(self, why: str) -> None:
        """Set `degraded/<rank>` so that followers stop waiting for this rank: through our own
        connection (one try each: it may hang until its timeout), else through the job's own store
        client (a rank whose connections were never made, or broke). A strict leader also wakes
        the followers blocked on its next record."""
        told = None
        for store in (self.store, self.sync_store):
            if store is None:
                continue
            try:
                store.set(f"degraded/{self.config.rank}", why)
                told = store
                break
            except Exception:
                continue
        if told is None and self._fallback is not None and self.config.verify and not self.ended:
            with contextlib.suppress(Exception):
                job = self._fallback()
                job.set(f"degraded/{self.config.rank}", why)
                told = job
        if told is not None and self.config.verify:
            with contextlib.suppress(Exception):
                self._release_followers(told)

    def _degrade(self, why: str, loud: bool) -> None:
        if self._degraded:
            return
        self._degraded = True
        self._tell_degraded(why)
        self.store = None
        self.sync_store = None
        quiet = self.ended or not loud
        self._report("degraded", "warning", f"{why}; recording only", echo=not quiet)


def _operands(pair: tuple[dict[str, Any], dict[str, Any]]) -> tuple[str, str]:
    return str(pair[0].get("x") or ""), str(pair[1].get("x") or "")


def _use(fp: dict[str, Any]) -> Use:
    return Use(int(fp["r"]), int(fp["n"]), str(fp["d"]), str(fp.get("x") or ""), str(fp["site"]))


def _echo(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except Exception:
        pass
