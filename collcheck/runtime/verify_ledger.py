"""Where one rank is: what it has issued per group and send/recv channel, what is still in flight,
its last operation, and the member lists of the groups it used. Published as its Position
(`pos/<rank>`, verify_protocol.py) at the pace of `pacing`, and member lists once per group
(`members/<group>`), for other ranks' stall reports.

In: issued and completed collectives, sends and recvs from the issuing threads, and the native
kernel's snapshots (`sync_collectives`). Out: Positions, in-flight collectives for the stall
watchdog, send/recv slots (the k-th on its channel), and the store writes above.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from collcheck.runtime.p2p import ANY_SOURCE, RECV, Channel, base_group, channel_of, is_p2p
from collcheck.runtime.record import CollectiveEvent
from collcheck.runtime.verify_protocol import (
    P2PSlot,
    Position,
    blocked_fingerprint,
    fingerprint,
    p2p_fingerprint,
)
from collcheck.runtime.verify_store import Pacing
from collcheck.runtime.verify_wire import members_key


class Ledger:
    """This rank's own position, kept by the issuing threads and read by the background thread."""

    def __init__(self, rank: int, pace: Pacing) -> None:
        self.rank = rank
        self.pace = pace
        self._lock = threading.Lock()
        self._inflight: dict[tuple[str, int], CollectiveEvent] = {}
        self._slots: dict[tuple[str, int], P2PSlot] = {}  # the sends and recvs among them
        self._issued: dict[str, int] = {}  # group -> seq; send/recv channel -> k
        self._channels: dict[Channel, int] = {}  # sends (or recvs) this rank issued per channel
        self._any_source: set[str] = set()  # groups in which this rank received from any source
        self._last: CollectiveEvent | None = None
        self._last_slot: P2PSlot | None = None
        self._last_done = False
        self._position_sent = 0.0
        self._position_dirty = True
        self._members: dict[str, tuple[int, ...]] = {}  # base group -> its member list
        self._members_sent: set[str] = set()  # groups whose member list this rank wrote

    # -- the issuing threads -------------------------------------------------------------------

    def issue(self, event: CollectiveEvent) -> None:
        with self._lock:
            self._issued[event.group] = event.seq
            self._inflight[(event.group, event.seq)] = event
            self._last, self._last_slot, self._last_done = event, None, False
            self._position_dirty = True
            if event.group not in self._members:
                self._members[event.group] = event.group_ranks

    def issue_p2p(self, event: CollectiveEvent, check: bool) -> P2PSlot | None:
        """A send or recv, counted on its channel when `check`; its slot, None when unpaired."""
        with self._lock:
            slot = self._slot(event) if check else None
            self._issued[event.group] = event.seq
            self._inflight[(event.group, event.seq)] = event
            self._last, self._last_slot, self._last_done = event, slot, False
            self._position_dirty = True
            group = base_group(event.group)
            if group not in self._members:
                self._members[group] = event.group_ranks
            if slot is not None:
                self._issued[slot.channel.key] = slot.k
                self._slots[(event.group, event.seq)] = slot
        return slot

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

    # -- the background thread and reports -----------------------------------------------------

    def issued_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._issued)

    def in_flight(self) -> list[tuple[CollectiveEvent, P2PSlot | None]]:
        """What is in flight, with each send's or recv's slot."""
        with self._lock:
            return [(event, self._slots.get(key)) for key, event in self._inflight.items()]

    def members_of(self, group: str) -> tuple[int, ...] | None:
        return self._members.get(group)

    def remember_members(self, group: str, ranks: tuple[int, ...]) -> None:
        self._members[group] = ranks

    def position(self, exited: bool = False, members: bool = True) -> Position:
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
            rank=self.rank,
            t=time.time(),
            issued=issued,
            inflight=[
                blocked_fingerprint(event, slot, members) for event, slot in zip(events, slots, strict=True)
            ],
            last=last_fp,
            last_done=last_done,
            exited=exited,
            hb=self.pace.heartbeat_s,
        )

    def publish_position(self, store: Any, exited: bool = False) -> None:
        store.set(f"pos/{self.rank}", self.position(exited, members=False).to_json())
        self._position_sent = time.time()
        self._position_dirty = False

    def maybe_publish_position(self, store: Any) -> None:
        age = time.time() - self._position_sent
        if (self._position_dirty and age > self.pace.position_s) or age > self.pace.heartbeat_s:
            self.publish_position(store)

    def publish_members(self, store: Any) -> None:
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
