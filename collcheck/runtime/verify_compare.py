"""Comparing this rank's collectives with what their publishers wrote: who publishes what this rank
compares (a group's leader, a send's sender) and whether it stopped publishing (degraded to
recording), reading one record, comparing it, and turning a difference into a finding (a
mismatch, a swapped pair, a call-site warning) or a collective that could not be compared into a
`behind` warning.

In: this rank's fingerprints (verify_protocol.py), the publishers' records and details
(verify_wire.py) read from the job's store. Out: findings through the Reporter (an error ends
the job); counts of what was not compared, said at the end.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from collcheck.runtime.groups import is_creation
from collcheck.runtime.operand import Use, crosses, swap_text
from collcheck.runtime.record import CollectiveEvent
from collcheck.runtime.verify_protocol import mismatch_kind, mismatch_text
from collcheck.runtime.verify_report import Reporter
from collcheck.runtime.verify_wire import Record, detail_key, differs, peek, slot_key, theirs

SWAP_WINDOW = 64  # call-site divergences per group remembered to find a swapped pair's second half


class Comparer:
    """Compares and reports, from the issuing threads (before issue) and the background thread."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self._lock = threading.Lock()
        self._callsite_warnings = 0
        # group -> recent call-site divergences with differing operands, (leader's, own), to
        # find the second half of a swapped pair (compared from two threads: under `_lock`)
        self._operand_splits: dict[str, deque[tuple[dict[str, Any], dict[str, Any]]]] = {}
        self._leaders: dict[str, int] = {}  # group -> its lowest rank (computed once, not per op)
        self.gone: set[int] = set()  # ranks that degraded to recording: they publish nothing more
        self.missed: dict[str, int] = {}  # channel -> collectives that could not be compared

    def leader(self, event: CollectiveEvent) -> int:
        """The group's lowest rank, which publishes its records; found once per group, not per
        collective (the member list can be thousands long)."""
        leader = self._leaders.get(event.group)
        if leader is None:
            leader = self._leaders[event.group] = min(event.group_ranks)
        return leader

    def leads(self, group: str, rank: int) -> bool:
        """Whether `rank` is known to lead `group` (it issued a collective of it)."""
        return self._leaders.get(group) == rank

    def leader_gone(self, store: Any, rank: int) -> bool:
        """Whether `rank` said it degraded to recording only (`degraded/<rank>`), remembered."""
        if rank in self.gone:
            return True
        if store.check([f"degraded/{rank}"]):
            self.gone.add(rank)
            return True
        return False

    def read_record(self, store: Any, channel: str, n: int) -> Record | None:
        """The record in #n's slot once it is #n's or a later one's (then #n was overwritten
        before it was read); None while the publisher has not written #n. One request."""
        raw = peek(store, slot_key(channel, n))
        record = Record.parse(raw) if raw is not None else None
        return record if record is not None and record.n >= n else None

    def check_record(
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
            self.not_compared(channel, 1, why)
            return
        if not differs(mine, record):
            return
        raw = peek(store, detail_key(channel, record.detail)) if record.detail >= 0 else None
        who = publisher if publisher is not None else -1
        self.compare(mine, theirs(mine, who, raw, record), strict)

    def not_compared(self, channel: str, count: int, why: str) -> None:
        """Collectives that could not be compared: said at once the first time for a channel, and
        counted for the summary at the end; verification never stops comparing silently."""
        with self._lock:
            first = channel not in self.missed
            self.missed[channel] = self.missed.get(channel, 0) + count
        if first:
            self.reporter.report(
                "behind",
                "warning",
                f"verification fell behind on {channel}: {count} collective(s) not compared ({why}); "
                "later ones still are",
                echo=True,
            )

    def say_missed(self) -> None:
        with self._lock:
            missed = dict(self.missed)
        if missed:
            counts = ", ".join(f"{count} on {channel}" for channel, count in sorted(missed.items()))
            self.reporter.report("behind", "warning", f"collectives not compared: {counts}", echo=True)

    def compare(self, mine: dict[str, Any], theirs: dict[str, Any], strict: bool) -> None:
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
            self.reporter.fail("mismatch", f"{what} mismatch: {text}")
        elif strict:
            self.reporter.fail("callsite", f"call-site divergence (strict): {text}")
        else:
            swap = self._swap_with(theirs, mine)
            if swap is not None:
                self.reporter.fail("swap", swap)
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
            self.reporter.report(
                "callsite",
                "warning",
                f"call-site divergence: {text}{operands} (same collective "
                "issued from different lines; legitimate for the barrier trick, an error once the "
                "operands cross as in a swapped pair)",
                echo=True,
            )


def _operands(pair: tuple[dict[str, Any], dict[str, Any]]) -> tuple[str, str]:
    return str(pair[0].get("x") or ""), str(pair[1].get("x") or "")


def _use(fp: dict[str, Any]) -> Use:
    return Use(int(fp["r"]), int(fp["n"]), str(fp["d"]), str(fp.get("x") or ""), str(fp["site"]))
