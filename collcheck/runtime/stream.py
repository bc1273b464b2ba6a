"""The cross-rank analysis of a trace folder in one streaming pass: memory bounded by ranks and
groups, not by the number of events.

Every rank's trace is open at once and read a few lines per rank in turn (a merge of all ranks'
streams). Each collective goes into its group's bucket for its sequence number. A bucket is
complete once every traced member of the group has issued that sequence number or a later one in
the group, or its trace has ended; complete buckets are compared in sequence order, exactly as
analyze.analyze compares them, and dropped. What stays is per rank and per group (members,
counts, the first divergence, the swap search's window), the events findings name, and the
buckets ranks are apart by. Sends and recvs are paired per channel as they arrive.

Findings are those of analyze.analyze on the same folder. Where a trace is corrupt so that a
rank's sequence numbers in a group go backwards past a bucket already compared, that collective
is not compared and is named as a problem of the trace (the in-memory analysis would have placed
it). Flight Recorder dumps are read whole (MAX_DUMP_BYTES bounds them) and fed the same way.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import resource
import weakref
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from collcheck.runtime.analyze import SwapSearch, channel_findings, divergence_of, group_order, split_at
from collcheck.runtime import trace_prefix
from collcheck.runtime.p2p import ANY_SOURCE, SEND, Channel, Pair, channel_of, is_p2p, payload
from collcheck.runtime.record import TRACE_PREFIX, TRACE_SUFFIX, CollectiveEvent
from collcheck.runtime.trace_binary import (
    SLOT,
    BinaryFormatError,
    BinaryLines,
    BinaryRecords,
    CollRun,
    Record,
    TextRecord,
    is_binary_trace,
    json_name_of,
)
from collcheck.runtime.trace_model import (
    Analysis,
    Divergence,
    Missing,
    P2PFinding,
    Problem,
    RankSummary,
    RankTrace,
    Side,
    Swap,
    Timeline,
)
from collcheck.runtime.trace_read import (
    MAX_LINE_BYTES,
    DumpRefused,
    TraceError,
    TraceLines,
    bounded_int,
    end_of_trace,
    finite_time,
    load_file,
    new_trace,
    numbered_lines,
)

LINES_PER_TURN = 64  # lines read from one rank's trace before the next rank's turn
# A bucket is compared once every rank is this many sequence numbers past it: lines a little out
# of order (a corrupt or concatenated trace) are still placed as the in-memory analysis places them.
LAG = 16
AHEAD = 4 * LAG  # sequence numbers a rank may be ahead of a group's slowest member before it waits
KNOWN_LISTS = 1024  # member-list objects a group remembers having learnt
_INF = math.inf


# ---------------------------------------------------------------------------------------------
# Per group


@dataclass
class _Split:
    """A divergence found while streaming; its sides are read at the end, once every `done`
    line (completion) of its events has been."""

    seq: int
    kind: str
    variants: list[tuple[int, ...]]
    events: dict[int, CollectiveEvent]  # the first rank of each variant -> its event


@dataclass
class _Channel:
    """Sends and recvs of one channel not paired yet, and what pairing found."""

    sends: deque[CollectiveEvent] = field(default_factory=deque)
    recvs: deque[CollectiveEvent] = field(default_factory=deque)
    paired: int = 0
    mismatch: Pair | None = None

    def add(self, channel: Channel, event: CollectiveEvent) -> None:
        (self.sends if event.op == SEND else self.recvs).append(event)
        while self.sends and self.recvs:
            send, recv = self.sends.popleft(), self.recvs.popleft()
            self.paired += 1
            if self.mismatch is None and payload(send) != payload(recv):
                self.mismatch = Pair(channel, self.paired, send, recv)

    def lone(self, channel: Channel) -> Pair | None:
        """The first send or recv left without a partner."""
        if self.sends:
            return Pair(channel, self.paired + 1, self.sends[0], None)
        if self.recvs:
            return Pair(channel, self.paired + 1, None, self.recvs[0])
        return None


class _Group:
    """One group's lockstep comparison: buckets of events per sequence number, compared in order
    once complete."""

    def __init__(self, name: str, traced: frozenset[int], ended: set[int]) -> None:
        self.name = name
        self.traced, self.ended = traced, ended
        self.members: set[int] = set()
        self.top: dict[int, int] = {}  # rank -> the highest sequence number it issued here
        self.buckets: dict[int, dict[int, CollectiveEvent]] = {}
        self.waiting: list[int] = []  # heap of the buckets' sequence numbers
        self.compared = -1  # every bucket up to this sequence number has been compared
        self.pos: dict[int, float] = {}  # expected rank -> highest seq issued (inf once ended)
        self.frontier: list[tuple[float, int]] = []  # heap of (pos, rank), stale entries skipped
        self.ended_low = _INF  # the lowest count among members whose traces ended
        self.known_lists: dict[int, tuple[int, ...]] = {}  # id -> member list already learnt
        self.mismatch: _Split | None = None
        self.callsite: _Split | None = None
        self.swaps: SwapSearch | None = SwapSearch(name)
        self.swap: Swap | None = None
        self.missing_at: tuple[int, CollectiveEvent] | None = None
        self.starts: dict[tuple[int, str, int], float] = {}  # of the events a finding names
        self.channels: dict[Channel, _Channel] = {}
        self.any_source: set[int] = set()

    def add(self, rank: int, event: CollectiveEvent) -> bool:
        """Take one collective of `rank`'s trace; False when it came too late to be compared."""
        self._learn(rank, event.group_ranks)
        seq, previous = event.seq, self.top.get(rank, -1)
        self.top[rank] = max(previous, seq)
        if is_p2p(self.name):
            return self._add_p2p(event, previous)
        if seq <= self.compared and seq not in self.buckets:
            return seq == previous  # a repeated line: already compared
        bucket = self.buckets.get(seq)
        if bucket is None:
            bucket = self.buckets[seq] = {}
            heapq.heappush(self.waiting, seq)
        bucket[rank] = event
        if seq > self.pos.get(rank, _INF):
            self.pos[rank] = seq
            heapq.heappush(self.frontier, (seq, rank))
        self._compare_complete()
        return True

    def skip(self, rank: int, members: tuple[int, ...], top: int) -> None:
        """`rank` issued this group's collectives up to `top`, all in its agreed prefix
        (trace_prefix.py): counted, never bucketed."""
        self._learn(rank, members)
        self.top[rank] = max(self.top.get(rank, -1), top)
        if top > self.pos.get(rank, _INF):
            self.pos[rank] = top
            heapq.heappush(self.frontier, (top, rank))

    def end(self, rank: int) -> None:
        """`rank`'s trace ended."""
        if rank in self.members:
            self.ended_low = min(self.ended_low, self.top.get(rank, 0))
        if rank in self.pos:
            self.pos[rank] = _INF
            heapq.heappush(self.frontier, (_INF, rank))
            self._compare_complete()

    def _learn(self, rank: int, members: tuple[int, ...]) -> None:
        """New members of the group; a group whose member list is unknown (an empty list, as in
        dumps without a config) waits for every traced rank."""
        if self.known_lists.get(id(members)) is members and rank in self.members:
            return  # the same list object as before (TraceLines' cache): nothing new
        if len(self.known_lists) < KNOWN_LISTS:
            self.known_lists[id(members)] = members
        new = {rank, *members} - self.members
        self.members |= new
        for member in sorted(new & self.traced):
            self._expect(member)
            if member in self.ended:
                self.ended_low = min(self.ended_low, self.top.get(member, 0))
        if not members:
            for other in sorted(self.traced - self.pos.keys()):
                self._expect(other)

    def _expect(self, rank: int) -> None:
        if rank in self.pos:
            return
        self.pos[rank] = _INF if rank in self.ended else self.top.get(rank, 0)
        heapq.heappush(self.frontier, (self.pos[rank], rank))

    def ahead(self, seq: int) -> bool:
        """Whether a rank that issued `seq` here is so far ahead of the slowest member that it
        should wait for it (its events would pile up in the buckets)."""
        return not is_p2p(self.name) and seq > self._low() + AHEAD

    def _low(self) -> float:
        """The lowest sequence number an expected rank still issuing has reached."""
        while self.frontier and self.frontier[0][0] != self.pos[self.frontier[0][1]]:
            heapq.heappop(self.frontier)
        return self.frontier[0][0] if self.frontier else _INF

    def _compare_complete(self) -> None:
        low = self._low()
        while self.waiting and self.waiting[0] + LAG <= low:
            seq = heapq.heappop(self.waiting)
            self.compared = max(self.compared, seq)
            self._compare(seq, self.buckets.pop(seq))

    def _compare(self, seq: int, present: dict[int, CollectiveEvent]) -> None:
        """One complete bucket, in sequence order (analyze._divergences, _swap and _missing)."""
        if self.missing_at is None and self.ended_low < seq:
            self.missing_at = (seq, present[min(present)])
        if self.mismatch is not None:
            return
        split = split_at(present, sites_too=self.callsite is None)
        if split is not None:
            kind, variants = split
            found = _Split(seq, kind, variants, {ranks[0]: present[ranks[0]] for ranks in variants})
            self.starts.update(
                ((rank, self.name, seq), present[rank].t_start) for ranks in variants for rank in ranks
            )
            if kind == "mismatch":
                self.mismatch, self.swaps = found, None
                return
            self.callsite = found
        if self.swaps is not None:
            self.swap = self.swaps.step(present)
            if self.swap is not None:
                self.swaps = None

    def _add_p2p(self, event: CollectiveEvent, previous: int) -> bool:
        if event.seq <= previous:
            return event.seq == previous
        if event.op == ANY_SOURCE:
            self.any_source.add(event.rank)
        channel = channel_of(event)
        # An untraced peer's sends and recvs are unknown: nothing on such a channel is a finding.
        if channel is not None and channel.src in self.traced and channel.dst in self.traced:
            self.channels.setdefault(channel, _Channel()).add(channel, event)
        return True

    # Results ---------------------------------------------------------------------------------

    def divergences(self) -> list[Divergence]:
        return [
            divergence_of(self.name, split.seq, split.kind, split.variants, split.events)
            for split in (self.callsite, self.mismatch)
            if split is not None
        ]

    def missing(self) -> Missing | None:
        counts = [self.top.get(rank, 0) for rank in self.members & self.traced]
        if not counts or min(counts) == max(counts) or self.missing_at is None:
            return None
        lowest = min(counts)
        seq, issuer = self.missing_at
        if seq <= lowest:
            return None
        behind = tuple(sorted(rank for rank in self.members & self.traced if self.top.get(rank, 0) == lowest))
        return Missing(self.name, seq, behind, Side.of(issuer))

    def p2p(self) -> list[P2PFinding]:
        found: list[P2PFinding] = []
        for channel in sorted(self.channels, key=lambda c: (c.src, c.dst)):
            if channel.dst in self.any_source:  # which of its sends a recv took cannot be told
                continue
            state = self.channels[channel]
            mismatch, lone = state.mismatch, state.lone(channel)
            found.extend(channel_findings(self.name, mismatch, lone, set(self.traced)))
            named = (event for pair in (mismatch, lone) if pair for event in (pair.send, pair.recv))
            self.starts.update(((e.rank, self.name, e.seq), e.t_start) for e in named if e is not None)
        return found


# ---------------------------------------------------------------------------------------------
# Per rank


class _StreamLines(TraceLines):
    """A collcheck trace's lines passed to the groups instead of kept: only the events something
    still holds (a bucket, a finding, the rank's last) can take a completion."""

    def __init__(
        self, trace: RankTrace, member_lists: dict[bytes, tuple[int, ...]], pieces: dict[Any, Any]
    ) -> None:
        super().__init__(trace)
        self.member_lists = member_lists  # shared by every rank: one tuple per distinct list
        self.pieces = pieces  # and one call site per distinct site
        self.feed: _Feed | None = None
        self.live: weakref.WeakValueDictionary[tuple[str, int], CollectiveEvent] = (
            weakref.WeakValueDictionary()
        )
        self.tops: dict[str, int] = {}
        self.count = 0
        self.last: CollectiveEvent | None = None
        self.origin = _INF
        self.latest = -_INF

    def event(self, event: CollectiveEvent) -> None:
        self.count += 1
        self.live[(event.group, event.seq)] = event
        self.tops[event.group] = max(self.tops.get(event.group, 0), event.seq)
        if self.last is None or event.t_start > self.last.t_start:
            self.last = event
        self.origin = min(self.origin, event.t_start)
        self.latest = max(self.latest, event.t_start)
        if self.feed is not None and not self.feed.add(event):
            why = f"collective #{event.seq} of group {event.group} comes after that number was compared"
            self.trace.note(self.number, f"{why} (sequence numbers out of order); not compared")

    def done(self, key: tuple[str, int], row: dict[str, Any]) -> None:
        if not row.get("ok", True):
            return
        event = self.live.get(key)
        if event is not None:
            event.t_end = finite_time(row.get("t_end", event.t_start))
            self.latest = max(self.latest, event.t_end or event.t_start)
        elif "t_end" in row and 0 < key[1] <= self.tops.get(key[0], 0):  # an event already let go
            self.latest = max(self.latest, finite_time(row["t_end"]))

    def unobserved(self, key: tuple[str, int]) -> None:
        event = self.live.get(key)
        if event is not None:
            event.observable = False


class _Feed:
    """Where one rank's collectives go: its groups."""

    def __init__(self, rank: int, groups: _Groups) -> None:
        self.rank, self.groups = rank, groups
        self.last: tuple[_Group, int] | None = None  # the group of the last collective, its seq

    def add(self, event: CollectiveEvent) -> bool:
        group = self.groups.get(event.group)
        self.last = (group, event.seq)
        return group.add(self.rank, event)

    def ahead(self) -> bool:
        return self.last is not None and self.last[0].ahead(self.last[1])


class _Groups:
    def __init__(self, traced: frozenset[int]) -> None:
        self.traced = traced
        self.ended: set[int] = set()
        self.by_name: dict[str, _Group] = {}
        self.agreed: dict[str, int] = {}  # group -> sequence numbers compared by trace_prefix.py

    def get(self, name: str) -> _Group:
        group = self.by_name.get(name)
        if group is None:
            group = self.by_name[name] = _Group(name, self.traced, self.ended)
            if self.agreed.get(name, 0) > 0:
                group.compared = self.agreed[name]
        return group

    def end(self, rank: int) -> None:
        self.ended.add(rank)
        for group in self.by_name.values():
            group.end(rank)


@dataclass
class _Shared:
    """What every rank's reader shares: parsed member lists by text, call sites and shapes."""

    member_lists: dict[bytes, tuple[int, ...]] = field(default_factory=dict)
    pieces: dict[Any, Any] = field(default_factory=dict)


class _Source:
    """One input file: a collcheck trace read LINES_PER_TURN lines per turn, or a dump's events."""

    def __init__(self, trace: RankTrace, dump: bool, shared: _Shared) -> None:
        self.trace, self.dump = trace, dump
        self.key = trace.rank  # the rank its events are aligned as (header's, else file name's)
        self.lines = _StreamLines(trace, shared.member_lists, shared.pieces)
        self.closed = False
        self.handle: Any = None
        self.reader: Any = None
        self.pending: deque[CollectiveEvent] = deque(trace.events) if dump else deque()

    def start(self, groups: _Groups | None) -> None:
        self.lines.feed = _Feed(self.key, groups) if groups is not None else None
        if self.dump:
            self.trace.events = []  # fed from `pending`, one turn at a time
            return
        try:
            self.handle = open(self.trace.path, "rb")  # noqa: SIM115 - held across turns, closed at its end
        except OSError as error:
            self.trace.note(0, f"could not be read: {error.strerror or error}")
            return
        self.reader = numbered_lines(self.handle)

    def turn(self) -> bool:
        """Read up to LINES_PER_TURN lines; False once the input is used up (closed)."""
        if self.dump:
            for _ in range(min(LINES_PER_TURN, len(self.pending))):
                self.lines.event(self.pending.popleft())
            return bool(self.pending)
        if self.reader is None:
            self._close()
            return False
        try:
            for _ in range(LINES_PER_TURN):
                number, line = next(self.reader)
                self.lines.take(number, line)
        except StopIteration:
            self._close()
            return False
        except OSError as error:
            self.trace.note(0, f"could not be read: {error.strerror or error}")
            self._close()
            return False
        return True

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.reader = None
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        end_of_trace(self.lines)

    def ahead(self) -> bool:
        feed = self.lines.feed
        return feed is not None and feed.ahead()

    def summary(self) -> RankSummary:
        last = self.lines.last
        side = Side.of(last) if last is not None else None
        return RankSummary(
            self.trace.rank, self.trace.source, self.lines.count, side, self.trace.exited, self.trace.path
        )


class _BinarySource(_Source):
    """A binary trace (trace_binary.py): its agreed prefix (trace_prefix.py) counted from columns,
    the rest fed event by event, LINES_PER_TURN slots per turn, as the JSON lines would be."""

    def __init__(self, trace: RankTrace, shared: _Shared) -> None:
        super().__init__(trace, False, shared)
        self.feeder = BinaryLines(self.lines)
        self.queue: deque[Record] = deque()
        self.prefixes: trace_prefix.Prefixes | None = None
        self.records: BinaryRecords | None = None

    def start(self, groups: _Groups | None) -> None:
        self.lines.feed = _Feed(self.key, groups) if groups is not None else None
        try:
            self.records = BinaryRecords(self.trace.path)
        except BinaryFormatError as error:
            self.trace.note(0, str(error))
            return
        except OSError as error:
            self.trace.note(0, f"could not be read: {error.strerror or error}")
            return
        self.reader = self.records.chunks()
        self.first_open = self.prefixes.start(self.key) if self.prefixes is not None else 0

    def turn(self) -> bool:
        if self.reader is None:
            self._close()
            return False
        budget = LINES_PER_TURN
        try:
            while budget > 0:
                if not self.queue:
                    self.queue.extend(next(self.reader))
                budget -= self._take(self.queue.popleft(), budget)
        except StopIteration:
            self._close()
            return False
        except OSError as error:
            self.trace.note(0, f"could not be read: {error.strerror or error}")
            self._close()
            return False
        return True

    def _close(self) -> None:
        if self.records is not None:
            self.records.close()
        super()._close()

    def _take(self, record: Record, budget: int) -> int:
        """Feed (part of) `record`; how much of the turn's budget it used."""
        if not isinstance(record, CollRun):
            self.feeder.feed(record)
            return 1
        covered = min(self.first_open - record.first, record.count)
        if covered > 0:  # slots of agreed prefixes only: from the columns
            if covered < record.count:
                self.queue.appendleft(CollRun(record.first + covered, record.data[covered * SLOT :]))
            self._covered(CollRun(record.first, record.data[: covered * SLOT]))
            return 1
        count = min(budget, record.count)
        for index in range(count):
            self._slot(record, index)
        if count < record.count:
            self.queue.appendleft(CollRun(record.first + count, record.data[count * SLOT :]))
        return count

    def _covered(self, run: CollRun) -> None:
        totals = trace_prefix.totals(run)
        lines = self.lines
        lines.count += totals.count
        lines.origin = min(lines.origin, totals.earliest)
        lines.latest = max(lines.latest, totals.latest)
        if lines.last is None or totals.last_start > lines.last.t_start:
            self._hold_last(run, totals.last_at)
        models = self.feeder.templates
        for template, count in totals.per_template.items():
            model = models[template]
            assert model is not None  # the scan covers no slot of an unusable template
            lines.tops[model.group] = lines.tops.get(model.group, 0) + count
        for template in totals.per_template:
            model = models[template]
            assert model is not None
            self._skip(model, lines.tops[model.group])
        final = models[run.templates()[-1]]
        if lines.feed is not None and final is not None:
            lines.feed.last = (lines.feed.groups.get(final.group), lines.tops[final.group])

    def _skip(self, model: CollectiveEvent, top: int) -> None:
        feed = self.lines.feed
        if feed is not None:
            feed.groups.get(model.group).skip(self.key, model.group_ranks, top)

    def _hold_last(self, run: CollRun, index: int) -> None:
        event = self.feeder.event(run, index)
        if event is not None:
            self.lines.last = event
            self.lines.live[(event.group, event.seq)] = event

    def _slot(self, run: CollRun, index: int) -> None:
        """One slot past the start of the first open prefix: counted if its group's agreed prefix
        covers it, else fed as its event."""
        _, _, _, template, seq, t_start, t_end = run.slot(index)
        models = self.feeder.templates
        model = models[template] if template < len(models) else None
        slot = run.first + index
        finite = math.isfinite(t_start) and math.isfinite(t_end)
        lines = self.lines
        if model is not None and finite and self.prefixes and self.prefixes.covered(self.key, model.group, slot):
            lines.count += 1
            lines.tops[model.group] = max(lines.tops.get(model.group, 0), seq)
            if lines.last is None or t_start > lines.last.t_start:
                self._hold_last(run, index)
            lines.origin = min(lines.origin, t_start)
            lines.latest = max(lines.latest, t_start, t_end)
            self._skip(model, seq)
            if lines.feed is not None:
                lines.feed.last = (lines.feed.groups.get(model.group), seq)
            return
        lines.number = slot + 1
        event = self.feeder.event(run, index)
        if event is not None:
            lines.event(event)
            if event.t_end is not None:  # its `done` line, folded into the record
                lines.latest = max(lines.latest, event.t_end or event.t_start)


# ---------------------------------------------------------------------------------------------
# The pass


def analyze_dir(path: str, problems: list[Problem] | None = None) -> Analysis:
    """The cross-rank analysis of every trace and dump in `path`, read in one streaming pass.
    Files refused as unsafe are added to `problems`; TraceError when nothing could be read."""
    problems = [] if problems is None else problems
    sources = _sources(path, problems)
    full = {source.key: source for source in sources}  # a rank traced twice: its last file, as analyze does
    groups = _Groups(frozenset(full))
    _raise_file_limit(len(sources))
    binary = {key: source for key, source in full.items() if isinstance(source, _BinarySource)}
    if binary:
        prefixes = trace_prefix.scan(frozenset(full), {key: s.trace.path for key, s in binary.items()})
        for source in binary.values():
            source.prefixes = prefixes
        groups.agreed = prefixes.agreed if prefixes is not None else {}
    for source in sources:
        source.start(groups if full[source.key] is source else None)
    active = list(sources)
    while active:
        # A rank far ahead in a group waits for the others; when every rank waits (each ahead in
        # a different group) they all read on.
        waits = [source.ahead() for source in active]
        if all(waits):
            waits = [False] * len(active)
        still = []
        for source, wait in zip(active, waits, strict=True):
            if wait or source.turn():
                still.append(source)
            elif full[source.key] is source:
                groups.end(source.key)
        active = still
    return _analysis(sources, full, groups, problems)


def _sources(path: str, problems: list[Problem]) -> list[_Source]:
    if not os.path.isdir(path):
        raise TraceError(f"{path}: not a directory")
    sources: list[_Source] = []
    shared = _Shared()
    names = sorted(os.listdir(path))
    for name in _one_form(path, names):
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            continue
        if is_binary_trace(name):
            trace = new_trace(full)
            trace.rank = _binary_header_rank(full, trace.rank)
            sources.append(_BinarySource(trace, shared))
            continue
        if name.startswith(TRACE_PREFIX) and name.endswith(TRACE_SUFFIX):
            trace = new_trace(full)
            trace.rank = _header_rank(full, trace.rank)
            sources.append(_Source(trace, False, shared))
            continue
        try:
            dump = load_file(full)
        except DumpRefused as refused:
            problems.append(Problem(full, 0, str(refused)))
            continue
        if dump is not None:
            sources.append(_Source(dump, True, shared))
    if not sources:
        raise TraceError(f"{path}: no collcheck traces or Flight Recorder dumps found")
    return sources


def _one_form(path: str, names: list[str]) -> list[str]:
    """`names` with one file per trace: where a binary trace and its JSON lines are both there,
    the binary one when it is as new as the JSON lines (converted after their last write)."""
    present = set(names)
    chosen = []
    for name in names:
        json_name = json_name_of(name) if is_binary_trace(name) else None
        if json_name in present:
            assert json_name is not None
            newer = _mtime(os.path.join(path, name)) >= _mtime(os.path.join(path, json_name))
            present.discard(json_name if newer else name)
    chosen = [name for name in names if name in present]
    return chosen


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return -_INF


def _binary_header_rank(path: str, rank: int) -> int:
    """The rank of a binary trace's header lines, the last one winning (`_header_rank`)."""
    try:
        records = BinaryRecords(path)
    except (BinaryFormatError, OSError):
        return rank
    try:
        for chunk in records.chunks():
            for record in chunk:
                if isinstance(record, TextRecord) and record.sub == 0 and b"header" in record.payload:
                    rank = _rank_in(record.payload, rank)
    except OSError:
        pass
    finally:
        records.close()
    return rank


def _header_rank(path: str, rank: int) -> int:
    """The rank the trace's header lines give, the last one winning as when the whole trace is
    read (`rank`, from the file name, where none does). Found by searching the bytes for
    `header`, so only those lines are parsed."""
    try:
        with open(path, "rb") as handle:
            for line in _lines_with(handle, b"header"):
                rank = _rank_in(line, rank)
    except OSError:
        pass
    return rank


def _lines_with(handle: Any, needle: bytes) -> Iterator[bytes]:
    """The complete lines of `handle` (at most MAX_LINE_BYTES) that contain `needle`."""
    carry, skipping = b"", False
    while chunk := handle.read(1 << 16):
        if skipping:  # the rest of a line too long to be read
            end = chunk.find(b"\n")
            if end < 0:
                continue
            chunk, skipping = chunk[end + 1 :], False
        data = carry + chunk
        cut = data.rfind(b"\n") + 1
        block, carry = data[:cut], data[cut:]
        if len(carry) > MAX_LINE_BYTES:
            carry, skipping = b"", True
        at = block.find(needle)
        while at >= 0:
            start, end = block.rfind(b"\n", 0, at) + 1, block.find(b"\n", at) + 1
            if end - start <= MAX_LINE_BYTES:
                yield block[start:end]
            at = block.find(needle, end)


def _rank_in(line: bytes, rank: int) -> int:
    """The rank of a header line, as TraceLines reads it; `rank` for any other line."""
    try:
        row = json.loads(line)
        if isinstance(row, dict) and row.get("ev") == "header":
            return bounded_int(row.get("rank", rank))
    except (ValueError, TypeError, RecursionError):
        pass
    return rank


def _raise_file_limit(files: int) -> None:
    """Every rank's trace is open at once: raise the soft limit on open files where it is short."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = files + 64
    if soft != resource.RLIM_INFINITY and soft < wanted:
        ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        except (ValueError, OSError):
            return


def _analysis(
    sources: list[_Source], full: dict[int, _Source], groups: _Groups, problems: list[Problem]
) -> Analysis:
    divergences: list[Divergence] = []
    missing: list[Missing] = []
    p2p: list[P2PFinding] = []
    swaps: list[Swap] = []
    listed = []
    starts: dict[tuple[int, str, int], float] = {}
    for name in sorted(groups.by_name, key=group_order):
        group = groups.by_name[name]
        listed.append((name, tuple(sorted(group.members)), max(group.top.values())))
        if is_p2p(name):
            p2p.extend(group.p2p())
        else:
            divergences.extend(group.divergences())
            swaps.extend([group.swap] if group.swap is not None else [])
            found = group.missing()
            missing.extend([found] if found is not None else [])
        starts.update(group.starts)
    traces = [source.trace for source in sources]
    return Analysis(
        ranks=tuple(sorted(full)),
        groups=tuple(listed),
        divergences=tuple(divergences),
        missing=tuple(missing),
        summaries=tuple(source.summary() for source in sorted(sources, key=lambda s: s.trace.rank)),
        reports=tuple(report for trace in traces for report in trace.reports),
        p2p=tuple(p2p),
        problems=(*problems, *(problem for trace in traces for problem in trace.problems)),
        unreadable=sum(trace.unreadable for trace in traces),
        lost=sum(trace.lost for trace in traces),
        swaps=tuple(swaps),
        timeline=_timeline(full, starts),
    )


def _timeline(full: dict[int, _Source], starts: dict[tuple[int, str, int], float]) -> Timeline:
    lines = {rank: source.lines for rank, source in full.items()}
    counted = [line for line in lines.values() if line.count]
    origin = min((line.origin for line in counted), default=0.0)
    return Timeline(
        origin=origin,
        end=max((line.latest for line in counted), default=origin),
        latest={rank: line.latest if line.count else origin for rank, line in lines.items()},
        last={rank: line.last for rank, line in lines.items() if line.last is not None},
        starts=starts,
        paths={rank: source.trace.path for rank, source in full.items()},
    )
