"""Async mode's background work: the queue of collectives (and sends and recvs) this rank issued,
published where this rank publishes them (a group's leader, a send's sender: records, details,
and the channel's rolling hash `rh/`) and compared where another rank does, one read of the
publisher's `rh/` per channel and tick (through the node's relay where there is one), reading
records only when the chains differ, there is a gap, or this rank is behind.

In: events and send/recv slots queued by the issuing threads (`queue`, `queue_slot`: a lock and a
deque append each; fingerprints are built here, off the collective's path). Out: records and
chains in the job's store (verify_wire.py), comparisons through the Comparer.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from collcheck.runtime.p2p import is_p2p
from collcheck.runtime.record import CollectiveEvent
from collcheck.runtime.relay import NodeRelay
from collcheck.runtime.verify_compare import Comparer
from collcheck.runtime.verify_protocol import P2PSlot, fingerprint, p2p_fingerprint
from collcheck.runtime.verify_store import Pacing, relayed_compare_s
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
    parse_chain,
    peek,
    record_link,
    slot_key,
)

PENDING_LIMIT = 2 * RING  # fingerprints queued per channel for comparison, at most (memory)
FIRST_SEEN_LIMIT = 4_096  # (group, op, call site) agreed synchronously in async mode, at most
AHEAD_LIMIT = 1_024  # fingerprints published past a missing number before head/ skips it
YIELD_EVERY = 64  # queued items fingerprinted between two releases of the GIL (a wait for it can
# last the interpreter's switch interval, 5 ms)


class Publisher:
    """The queue between the issuing threads and the background thread, and what the background
    thread does with it. Also the publishing side of strict mode and first-seen checks
    (`add_record` under `publish_lock`): one publisher at a time, taking the queue in issue
    order, so every fingerprint is published once, and always before the head that counts it."""

    def __init__(self, rank: int, comparer: Comparer, pace: Pacing, relay: NodeRelay | None) -> None:
        self.rank = rank
        self.comparer = comparer
        self.pace = pace
        # Async mode: the node's relay, through which this rank reads its publishers' `rh/`
        # keys (the job store sees one read per node and tick, not one per rank)
        self.relay = relay
        self.flushing = False  # the final flush reads the job store itself: no tick is left
        self._counted_publisher = False  # this rank is counted in `publishers` (relays' pace)
        self._lock = threading.Lock()
        self.publish_lock = threading.Lock()
        # Events (and send/recv slots), not fingerprints: building those (strings, relative paths)
        # is left to the background thread, off the collective's path.
        self._new: deque[CollectiveEvent | P2PSlot] = deque()
        self._pending: dict[str, deque[tuple[int, dict[str, Any]]]] = {}  # channel -> (seq, fp)
        self._seen: set[tuple[str, str, str, int]] = set()  # (group, op, file, line) agreed
        self._agreed: set[tuple[str, int]] = set()  # first-seen, compared before issue: queued too
        self._head_mark: dict[str, int] = {}  # channel -> what rh/<channel> covers (published)
        self._links: dict[str, dict[int, str]] = {}  # channel -> links published past the mark
        self._chain: dict[str, str] = {}  # channel -> the publisher's chain at the mark
        # channel -> (n, chain) where this follower's chain is known equal to its publisher's;
        # None: unknown (a difference or a gap was found), until it adopts the publisher's next
        self._base: dict[str, tuple[int, str] | None] = {}
        self._waiting_since: dict[str, float] = {}  # channel -> since when nothing new came
        self._published_ahead: dict[str, set[int]] = {}  # published beyond a missing number
        self._details: dict[str, DetailIndex] = {}  # channel -> the details this rank published
        self._publisher_of: dict[str, int] = {}  # channel -> who publishes what this rank compares

    # -- the issuing threads -------------------------------------------------------------------

    def queue(self, event: CollectiveEvent, first_seen: bool = True) -> bool:
        """Queue a collective; whether its (group, op, call site) is new here, to be agreed on
        before it is issued. The steady state costs a set lookup; a new site is remembered
        (bounded). A first-seen one is queued too: a leader publishes it with what precedes it;
        a follower compares it before issue, and folds it into its chain. `first_seen=False`:
        the native kernel has seen its site before (it asks about new ones), so it is not new."""
        site = event.site
        key = (event.group, event.op, site.file, site.line)
        with self._lock:
            first = first_seen and key not in self._seen and self._remember_site(key)
            if first and event.rank != self.comparer.leader(event):
                self._agreed.add((event.group, event.seq))
            self._new.append(event)
        return first

    def queue_slot(self, slot: P2PSlot) -> None:
        with self._lock:
            self._new.append(slot)

    def _remember_site(self, key: tuple[str, str, str, int]) -> bool:
        """Note a new (group, op, file, line) (holding the lock); False once FIRST_SEEN_LIMIT are
        known. Keyed on the call site, not the shapes, so a loop whose shapes vary stays
        asynchronous; bounded, so generated call sites cannot turn async mode into strict mode."""
        if len(self._seen) >= FIRST_SEEN_LIMIT:
            return False
        self._seen.add(key)
        return True

    # -- publishing ----------------------------------------------------------------------------

    def add_record(
        self, keys: list[str], values: list[str], channel: str, n: int, fp: dict[str, Any]
    ) -> None:
        """Append what publishes #n of `channel`: its details when they are new, then its record
        (holding `publish_lock`: the details index is the publisher's)."""
        index, details = self._details.setdefault(channel, DetailIndex()).place(fp)
        if details is not None:
            keys.append(detail_key(channel, index))
            values.append(details)
        sig, site = hashes(fp)
        keys.append(slot_key(channel, n))
        values.append(Record(n, sig, site, index).text())

    def publish_and_compare(self, store: Any) -> None:
        with self.publish_lock:
            self.publish_queued(store)
        # The issuing thread may add channels meanwhile (first-seen publication): iterate a copy.
        for channel, pending in list(self._pending.items()):
            self._compare_channel(store, channel, pending)

    def waiting(self) -> bool:
        """Whether collectives are still queued for comparison."""
        return any(self._pending.values())

    def publish_queued(self, store: Any) -> None:
        """Publish the queued fingerprints this rank publishes and queue the others for comparison
        (holding `publish_lock`)."""
        with self._lock:
            new = list(self._new)
            self._new.clear()
        keys: list[str] = []
        values: list[str] = []
        published: dict[str, list[int]] = {}
        for count, item in enumerate(new, start=1):
            if count % YIELD_EVERY == 0:
                time.sleep(0)  # release the GIL: the issuing thread needs it for every collective
            channel, seq, fp, publisher = self._outgoing(item)
            if publisher == self.rank:
                self.add_record(keys, values, channel, seq, fp)
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
                        self.comparer.not_compared(channel, 1, "too many waiting for the publisher")
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
            if self.relay is not None and not self._counted_publisher:
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
        return item.group, item.seq, fingerprint(item, members=False), self.comparer.leader(item)

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

    # -- comparing -----------------------------------------------------------------------------

    def compare_every(self) -> float:
        """Seconds between async publications and comparisons: `pacing` of the world, or, when
        this rank reads through a node relay, of the job store's clients the relay counted."""
        requesters = self.relay.requesters() if self.relay is not None else None
        return relayed_compare_s(requesters) if requesters is not None else self.pace.compare_s

    def say_relay(self) -> None:
        """Report what the relay noted (it fell back to the job store): once, as a warning."""
        assert self.relay is not None
        while self.relay.notes:
            self.comparer.reporter.report("relay", "warning", self.relay.notes.pop(0), echo=True)

    def _chain_of(self, store: Any, channel: str) -> bytes | None:
        """The publisher's `rh/<channel>`: through the node's relay in the ticks, from the job
        store itself in the final flush (the relay may have stopped) or without a relay."""
        if self.relay is None or self.flushing:
            return peek(store, chain_key(channel))
        return self.relay.chain(store, channel)

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
            self.comparer.not_compared(channel, missed, "overwritten before they were read")
        same = True
        for (seq, fp), record, done in zip(ready, records, agreed, strict=False):
            if record is None or record.n != seq or record.skipped or differs(fp, record):
                same = False
            if record is not None and record.n == seq and not done:
                self.comparer.check_record(store, channel, fp, record, publisher, strict=False)
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
        if publisher is not None and self.comparer.leader_gone(store, publisher):
            count = len(pending)
            pending.clear()
            self.comparer.not_compared(channel, count, f"rank {publisher} stopped verifying")
