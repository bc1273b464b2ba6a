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
it). The files are read by stream_sources.py; where traces are binary, trace_prefix.py first finds
each group's agreed prefix, which is counted, not compared again.

`Until.FIRST_MISMATCH` (`collcheck trace --first`) ends the pass at the first mismatch found (with
`FIRST_DIVERGENCE`, a call-site difference too), and the prefix scan at its first difference:
nothing past what that needs is read, and the analysis holds that one divergence alone (findings
that need whole traces, a missing collective or a swapped pair, are not looked for then).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field, replace
from enum import Enum

from collcheck.runtime import fr_prefix, trace_prefix
from collcheck.runtime.analyze import (
    SwapSearch,
    absent_ranks,
    channel_findings,
    divergence_of,
    group_order,
    split_at,
)
from collcheck.runtime.p2p import ANY_SOURCE, SEND, Channel, Pair, channel_of, is_p2p, payload
from collcheck.runtime.record import CollectiveEvent
from collcheck.runtime.stream_sources import (
    LINES_PER_TURN,
    BinarySource,
    DumpSource,
    Source,
    find_sources,
    raise_file_limit,
)
from collcheck.runtime.trace_model import (
    Analysis,
    Divergence,
    Missing,
    P2PFinding,
    Problem,
    Side,
    Swap,
    Timeline,
)

# A bucket is compared once every rank is this many sequence numbers past it: lines a little out
# of order (a corrupt or concatenated trace) are still placed as the in-memory analysis places them.
LAG = 16
AHEAD = 4 * LAG  # sequence numbers a rank may be ahead of a group's slowest member before it waits
KNOWN_LISTS = 1024  # member-list objects a group remembers having learnt
_INF = math.inf


class Until(Enum):
    """How far the pass reads."""

    END = "end"  # every trace to its end: every finding
    FIRST_MISMATCH = "first-mismatch"  # the first collective mismatch, then stop
    FIRST_DIVERGENCE = "first-divergence"  # the first mismatch or call-site difference (--strict)


# ---------------------------------------------------------------------------------------------
# Per group


@dataclass
class _Split:
    """A divergence found while streaming; its sides are read at the end, once every `done`
    line (completion) of its events has been."""

    group: str
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

    def __init__(self, name: str, traced: frozenset[int], ended: set[int], found: list[_Split]) -> None:
        self.name = name
        self.traced, self.ended = traced, ended
        self.found = found  # every group's divergences, in the order they were found
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
            found = _Split(
                self.name, seq, kind, variants, {ranks[0]: present[ranks[0]] for ranks in variants}
            )
            self.found.append(found)
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


class _Groups:
    def __init__(self, traced: frozenset[int]) -> None:
        self.traced = traced
        self.ended: set[int] = set()
        self.by_name: dict[str, _Group] = {}
        self.agreed: dict[str, int] = {}  # group -> sequence numbers compared by trace_prefix.py
        self.found: list[_Split] = []  # every group's divergences, in the order they were found

    def first(self, until: Until) -> _Split | None:
        """The first divergence `until` stops at, once one is found: a group's first of its kind,
        as the whole pass reports it (of several groups', whichever was compared first)."""
        if until is Until.END:
            return None
        kinds = ("mismatch", "callsite") if until is Until.FIRST_DIVERGENCE else ("mismatch",)
        return next((split for split in self.found if split.kind in kinds), None)

    def get(self, name: str) -> _Group:
        group = self.by_name.get(name)
        if group is None:
            group = self.by_name[name] = _Group(name, self.traced, self.ended, self.found)
            if self.agreed.get(name, 0) > 0:
                group.compared = self.agreed[name]
        return group

    def end(self, rank: int) -> None:
        self.ended.add(rank)
        for group in self.by_name.values():
            group.end(rank)


# ---------------------------------------------------------------------------------------------
# The pass


def analyze_dir(path: str, problems: list[Problem] | None = None, until: Until = Until.END) -> Analysis:
    """The cross-rank analysis of every trace and dump in `path`, read in one streaming pass.
    Files refused as unsafe are added to `problems`; TraceError when nothing could be read.
    With `until` other than END, the pass stops at the first divergence of its kind, and the
    analysis names it alone (see the module's docstring)."""
    problems = [] if problems is None else problems
    sources = find_sources(path, problems)
    full = {source.key: source for source in sources}  # a rank traced twice: its last file, as analyze does
    groups = _Groups(frozenset(full))
    raise_file_limit(len(sources))
    readers = [one for one in sources if isinstance(one, BinarySource)]
    if readers:  # each group's agreed prefix, compared as columns, is only counted below
        early = until is not Until.END
        prefixes = _prefixes(full, early)
        if prefixes is None or prefixes.moved:  # rare: read every header line, and scan again
            for reader in readers:
                reader.exact_rank()
            full = {source.key: source for source in sources}
            groups = _Groups(frozenset(full))
            prefixes = _prefixes(full, early)
        for reader in readers:
            reader.prefixes = prefixes
            reader.chunk_slots = trace_prefix.chunk_slots(len(readers))
        groups.agreed = prefixes.agreed if prefixes is not None else {}
    dumps = {key: one for key, one in full.items() if isinstance(one, DumpSource)}
    if dumps and len(dumps) == len(full):  # a folder of dumps alone
        found = fr_prefix.scan(frozenset(full), {key: one.opened for key, one in dumps.items()})
        for one in dumps.values():
            one.prefixes = found
        groups.agreed = found.agreed if found is not None else {}
        if found is not None and until is not Until.END:
            # Every rank resumes at the same whole turn below every agreed prefix's end: ranks
            # that read in step meet the first divergence on the turn the event-by-event pass
            # met it, so what `--first` says was read (counts, last collectives) is the same.
            resume = min(found.start(key) for key in dumps) // LINES_PER_TURN * LINES_PER_TURN
            for one in dumps.values():
                one.resume = resume
    for source in sources:
        source.start(groups if full[source.key] is source else None)
    active = list(sources)
    while active and groups.first(until) is None:
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
    first = groups.first(until)
    analysis = _analysis(sources, full, groups, problems)
    if first is None:  # no divergence of that kind: every trace was read to its end
        return analysis
    for source in active:
        source.stop()
    divergence = divergence_of(first.group, first.seq, first.kind, first.variants, first.events)
    return replace(analysis, divergences=(divergence,), missing=(), p2p=(), swaps=(), stopped=True)


def _prefixes(full: dict[int, Source], early: bool) -> trace_prefix.Prefixes | None:
    binary = {key: one.trace.path for key, one in full.items() if isinstance(one, BinarySource)}
    return trace_prefix.scan(frozenset(full), binary, early=early)


def _analysis(
    sources: list[Source], full: dict[int, Source], groups: _Groups, problems: list[Problem]
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
    named = (rank for group in groups.by_name.values() for rank in group.members)
    absent = absent_ranks((source.trace for source in full.values()), named, problems)
    return Analysis(
        ranks=tuple(sorted(full)),
        groups=tuple(listed),
        divergences=tuple(divergences),
        missing=tuple(missing),
        summaries=tuple(source.summary() for source in sorted(sources, key=lambda s: s.trace.rank)),
        reports=tuple(report for trace in traces for report in trace.reports),
        p2p=tuple(p2p),
        problems=(*problems, *(problem for trace in traces for problem in trace.problems)),
        unreadable=sum(trace.unreadable for trace in traces)
        + sum(p.skipped for p in problems)
        + sum(last - first + 1 for first, last in absent),
        lost=sum(trace.lost for trace in traces),
        swaps=tuple(swaps),
        timeline=_timeline(full, starts),
        absent=absent,
    )


def _timeline(full: dict[int, Source], starts: dict[tuple[int, str, int], float]) -> Timeline:
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
