"""The stall watchdog of one rank: finds a collective (or send, recv, group creation) in flight past
the timeout, gathers where every rank is (their published positions, brought up to date from the
tails of their traces where this rank can read them), and reports the stall once for the job.

In: this rank's Ledger, the job's store (`pos/`, `members/`, `stall_claim`). Out: a stall report
(verify_stall.stall_text) through the Reporter, which ends the job; or, without a store, a warning.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from collcheck.runtime.p2p import base_group
from collcheck.runtime.record import trace_file_name
from collcheck.runtime.relay import short_error
from collcheck.runtime.trace_binary import binary_name, is_binary_trace
from collcheck.runtime.verify_ledger import Ledger
from collcheck.runtime.verify_protocol import (
    Position,
    blocked_fingerprint,
    rank_list,
    receiver_of,
    sender_of,
)
from collcheck.runtime.verify_report import MonitorConfig, Reporter
from collcheck.runtime.verify_stall import caught_up, peer_finished, stall_text
from collcheck.runtime.verify_store import Connections
from collcheck.runtime.verify_wire import members_key, peek

STALL_CLAIM_GRACE_S = 10.0  # a rank that lost the stall claim waits this long for the abort


class StallWatchdog:
    """Reports each overdue operation of this rank once (see `claim_stall`)."""

    def __init__(
        self,
        config: MonitorConfig,
        ledger: Ledger,
        reporter: Reporter,
        links: Connections,
        degrade: Callable[[str, bool], None],
    ) -> None:
        self.config = config
        self.ledger = ledger
        self.reporter = reporter
        self.links = links
        self._degrade = degrade
        self._lock = threading.Lock()
        self._stalled: set[tuple[str, int]] = set()

    def check_stalls(self) -> None:
        now = time.time()
        with self._lock:
            overdue = [
                (event, slot)
                for event, slot in self.ledger.in_flight()
                if now - event.t_start > self.config.timeout_s
                and (event.group, event.seq) not in self._stalled
            ]
            if not overdue:
                return
            oldest, slot = min(overdue, key=lambda entry: entry[0].t_start)
            self._stalled.add((oldest.group, oldest.seq))
        self.report_stall(blocked_fingerprint(oldest, slot), self.links.store)

    def claim_stall(self, group: str, seq: int) -> bool:
        """Whether this caller reports the stall of (group, seq): each is reported once."""
        with self._lock:
            if (group, seq) in self._stalled:
                return False
            self._stalled.add((group, seq))
            return True

    def report_stall(self, blocked: dict[str, Any], store: Any) -> None:
        now = time.time()
        rank = self.config.rank
        blocked = self.with_members(blocked, None)
        positions: dict[int, Position | None] = {rank: self.ledger.position()}
        if store is not None:
            try:
                if "c" in blocked:  # a send or recv: is its peer done? (one position, no claim)
                    positions.update(self._caught_up(self._peer_positions(store, blocked)))
                    if peer_finished(rank, blocked, positions):
                        self.ledger.completed(str(blocked["g"]), int(blocked["n"]))  # a Work nobody waits for
                        return
                if not self.claim_report(store):
                    return
                positions.update(self._read_positions(store, blocked))
                positions[rank] = self.ledger.position()
            except Exception as error:
                positions = {rank: self.ledger.position()}
                self._degrade(f"could not read positions ({short_error(error)})", False)
        try:
            positions = self._caught_up(positions)
        except Exception as error:  # other ranks' traces: report with what the store said
            note = f"could not bring positions up to date from other ranks' traces ({short_error(error)})"
            self.reporter.report("note", "warning", note, echo=False)
        if peer_finished(rank, blocked, positions):
            self.ledger.completed(str(blocked["g"]), int(blocked["n"]))  # a Work nobody waits for
            return
        text = stall_text(rank, blocked, positions, now)
        if store is None:
            # Recording only: without the other ranks' positions a slow peer and a hang look the
            # same, so report and let the job's own timeout decide rather than kill it.
            text += "\n  (other ranks unknown: no store; see `collcheck trace` on the trace directory)"
            self.reporter.report("stall", "warning", text, echo=True)
            return
        self.reporter.fail("stall", text)

    def _caught_up(self, positions: dict[int, Position | None]) -> dict[int, Position | None]:
        """Other ranks' positions brought up to date from their traces where this rank can read
        them (one node, or a shared file system). A rank publishes its position a few times a
        second, so a rank that stopped (SIGSTOP, a debugger, a kernel hang holding the GIL) can be
        hundreds of collectives past what it last published; its trace line is written before each
        collective is issued."""
        path = getattr(self.reporter.writer, "path", None)
        if not path:
            return positions
        folder = os.path.dirname(str(path))
        # Every rank writes the format this one writes (`--trace-format` reaches them all).
        name_of = binary_name if is_binary_trace(os.path.basename(str(path))) else trace_file_name
        stale = time.time() - 2 * self.ledger.pace.position_s  # a changing rank's position is fresher
        return {
            rank: position
            if rank == self.config.rank or (position is not None and position.t > stale)
            else caught_up(rank, position, os.path.join(folder, name_of(rank)))
            for rank, position in positions.items()
        }

    def claim_report(self, store: Any) -> bool:
        """Whether this rank writes the job's stall report. When every rank times out together,
        one reads the positions (W requests) instead of each reading all (W*W); the others wait
        for its abort, and report themselves only if none comes (the reporter died meanwhile)."""
        if not self.config.abort or int(store.add("stall_claim", 1)) == 1:
            return True
        self.reporter.sleep_for_abort(store, STALL_CLAIM_GRACE_S)  # ends this process once it is there
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
        position.inflight = [self.with_members(fp, store) for fp in position.inflight]
        if position.last is not None:
            position.last = self.with_members(position.last, store)
        return position

    def with_members(self, fp: dict[str, Any], store: Any) -> dict[str, Any]:
        """`fp` with its group's member list under "ranks" (known here, or read from
        `members/<group>` once); for a send or recv whose group is unknown, its two ends."""
        if "ranks" in fp:
            return fp
        group = base_group(str(fp["g"]))
        ranks = self.ledger.members_of(group)
        if ranks is None and store is not None:
            raw = peek(store, members_key(group))
            ranks = rank_list(raw) if raw is not None else None
            if ranks is not None:
                self.ledger.remember_members(group, ranks)
        if ranks is None and "c" in fp:
            ends = (sender_of(str(fp["c"])), receiver_of(str(fp["c"])))
            ranks = tuple(rank for rank in ends if rank is not None)
        return dict(fp, ranks=list(ranks or ()))

    def _read_positions(self, store: Any, blocked: dict[str, Any]) -> dict[int, Position | None]:
        # Every rank we know of: the blocked group's members plus the groups we are in.
        ranks = set(blocked.get("ranks", ()))
        for event, _ in self.ledger.in_flight():
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
