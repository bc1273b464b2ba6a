"""The agreed prefix of every group across binary traces, found by comparing columns of bytes.

In: the binary traces of a folder (trace_binary.py), by rank, and which ranks are traced at all.
Out: Prefixes: per group, how many collectives every traced member issued alike (same op, shapes,
dtypes, reduce op, root, call site; sequence numbers 1, 2, 3, ... in order); per rank and group,
the first slot past that prefix. The streaming analysis (stream.py) then counts the agreed slots
without making an event of each and compares the rest as it compares JSON lines.

Each rank's trace is read a chunk at a time, all ranks in turn. A chunk's COLL slots become
columns with no Python object per collective kept: the template ids' low bytes go through
`bytes.translate` into a group column and a key column (a key is a template's group, signature and
call site, interned across ranks; `map` over the ids where there are more than 256), and
`itertools.compress` splits them, with the sequence numbers, into one array per group. A group's
arrays are compared across its members as wholes (array equality is a memcmp) and checked to
count 1, 2, 3, ...; at the first difference the group stops: that collective and everything after
it is the streaming analysis's. A group stops too when a member's trace is not binary, when a
member's trace has ended, when a member's buffered slots pass the scanner's cap (a member far
behind), at a `coll` line kept as text, and from the start for sends and recvs (paired by channel,
not by sequence number). A member met only after part of a group was agreed, or a rank issuing in
a group whose member lists leave it out, makes the prefixes unsafe: `scan` returns None and every
collective is compared event by event.

With `early` (`collcheck trace --first`), the scan stops at the first difference it finds in any
group: what each rank's trace had read by then bounds what is counted (`read`), and the streaming
analysis compares everything past it.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

from collcheck.runtime.p2p import is_p2p
from collcheck.runtime.record import CollectiveEvent
from collcheck.runtime.trace_binary import (
    LINE,
    TEMPLATE,
    BadRecord,
    BinaryFormatError,
    BinaryLines,
    BinaryRecords,
    CollRun,
    Record,
    TextRecord,
)
from collcheck.runtime.trace_model import RankTrace
from collcheck.runtime.trace_read import TraceLines

NEVER = 1 << 62  # a slot number past every file
UNUSABLE = 255  # a template's group index when the template cannot be used (or too many groups)
_SELECT = [bytes(1 if value == index else 0 for value in range(256)) for index in range(256)]
BUFFERED = 1 << 22  # slots a group may buffer, shared among the ranks (a member far behind)


@dataclass
class Prefixes:
    """What `scan` found."""

    agreed: dict[str, int] = field(default_factory=dict)  # group -> its agreed collectives
    uncovered: dict[int, dict[str, int]] = field(default_factory=dict)  # rank -> group -> first slot past
    other: dict[int, int] = field(default_factory=dict)  # rank -> first slot the scan did not take
    moved: bool = False  # a trace's header lines name another rank than the one it was read as
    read: dict[int, int] = field(default_factory=dict)  # rank -> first slot not read (an early stop)

    def start(self, rank: int) -> int:
        """The first slot of `rank`'s trace that is not part of an agreed prefix."""
        return min(
            [self.other.get(rank, NEVER), self.read.get(rank, NEVER), *self.uncovered.get(rank, {}).values()]
        )

    def covered(self, rank: int, group: str, slot: int) -> bool:
        # Past what an early stop read, no group (not even one the scan never met) is agreed.
        return slot < min(self.uncovered.get(rank, {}).get(group, NEVER), self.read.get(rank, NEVER))


@dataclass
class _Span:
    """Where buffered slots came from: a run's slots from `first`, those `chosen` marks (all when
    None), `used` of them compared already."""

    first: int
    chosen: bytes | None
    size: int
    used: int = 0

    def head(self) -> int:
        """The slot number of the first one not compared."""
        if self.chosen is None:
            return self.first + self.used
        at = -1
        for _ in range(self.used + 1):
            at = self.chosen.index(1, at + 1)
        return self.first + at


@dataclass
class _Buffer:
    """One member's slots of one group not compared yet: keys and seqs as arrays."""

    keys: array[int] = field(default_factory=lambda: array("I"))
    seqs: array[int] = field(default_factory=lambda: array("Q"))
    spans: deque[_Span] = field(default_factory=deque)

    def add(self, keys: array[int], seqs: array[int], span: _Span) -> None:
        self.keys.extend(keys)
        self.seqs.extend(seqs)
        self.spans.append(span)

    def drop(self, count: int) -> None:
        del self.keys[:count], self.seqs[:count]
        while count:
            span = self.spans[0]
            taken = min(count, span.size - span.used)
            span.used += taken
            count -= taken
            if span.used == span.size:
                self.spans.popleft()

    def head(self) -> int | None:
        return self.spans[0].head() if self.spans else None


_EMPTY = _Buffer()


class _Group:
    def __init__(self, name: str) -> None:
        self.name = name
        self.members: set[int] = set()
        self.agreed = 0
        self.stopped = is_p2p(name)
        self.buffers: dict[int, _Buffer] = {}


class _Lines(TraceLines):
    """A rank's LINE records, read for their group definitions; a `coll` line among them is noted."""

    def __init__(self, trace: RankTrace) -> None:
        super().__init__(trace)
        self.colls: list[CollectiveEvent] = []

    def event(self, event: CollectiveEvent) -> None:
        self.colls.append(event)

    def done(self, key: tuple[str, int], row: dict[str, Any]) -> None:
        return

    def unobserved(self, key: tuple[str, int]) -> None:
        return


class _Scan:
    """One rank's trace being scanned."""

    def __init__(self, rank: int, path: str, chunk_slots: int) -> None:
        self.rank = rank
        self.records = BinaryRecords(path, chunk_slots)
        self.chunks: Iterator[list[Record]] = self.records.chunks(chunk_slots)
        self.lines = _Lines(RankTrace(rank=rank, source="collcheck", path=path))
        self.feeder = BinaryLines(self.lines)
        self.group_of: bytearray = bytearray()  # template -> index into `groups`
        self.key_of: array[int] = array("I")  # template -> global key
        # The same for templates 0-255, for bytes.translate on a column of template ids' low bytes.
        self.group_table = bytearray([UNUSABLE]) * 256
        self.key_table = bytearray(256)
        self.groups: list[str] = []
        self.ended = False


class _Scanner:
    """The groups being compared, and what was found, over every rank's scan."""

    def __init__(self, traced: frozenset[int], binary: dict[int, str], chunk_slots: int) -> None:
        self.traced, self.binary = traced, binary
        self.chunk = chunk_slots
        self.groups: dict[str, _Group] = {}
        self.keys: dict[tuple[str, str, str], int] = {}
        self.lists: dict[tuple[int, ...], frozenset[int]] = {}
        self.found = Prefixes()
        self.unsafe = False
        self.differed = False  # a group stopped at a difference (not at an end or its cap)
        self.cap = max(4 * chunk_slots, BUFFERED // max(len(binary), 1))

    # Reading -----------------------------------------------------------------------------------

    def step(self, scan: _Scan) -> None:
        try:
            chunk = next(scan.chunks)
        except StopIteration:
            scan.ended = True
            scan.records.close()
            return
        for record in chunk:
            if isinstance(record, CollRun):
                self._run(scan, record)
            elif isinstance(record, BadRecord):
                self._other(scan, record.first)
            elif isinstance(record, TextRecord):
                self._text(scan, record)

    def _other(self, scan: _Scan, slot: int) -> None:
        self.found.other[scan.rank] = min(self.found.other.get(scan.rank, NEVER), slot)

    def _text(self, scan: _Scan, record: TextRecord) -> None:
        if record.sub == TEMPLATE:
            before = len(scan.feeder.templates)
            scan.feeder.text(record)
            if len(scan.feeder.templates) > before:
                self._template(scan, scan.feeder.templates[-1])
        elif record.sub == LINE:
            scan.lines.take(record.first + 1, record.payload + b"\n")
            for event in scan.lines.colls:  # a collective kept as a line: compared event by event
                group = self._group(event.group)
                self._stop(group)
                self._uncover(scan.rank, group.name, record.first)
            scan.lines.colls.clear()

    def _template(self, scan: _Scan, event: CollectiveEvent | None) -> None:
        if event is None:
            scan.group_of.append(UNUSABLE)
            scan.key_of.append(0)
            return
        if event.group not in scan.groups and len(scan.groups) < UNUSABLE:
            scan.groups.append(event.group)
        index = scan.groups.index(event.group) if event.group in scan.groups else UNUSABLE
        scan.group_of.append(index)
        key = (event.group, event.signature, event.site.short)
        scan.key_of.append(self.keys.setdefault(key, len(self.keys)))
        template = len(scan.group_of) - 1
        if template < 256:
            scan.group_table[template] = index
            scan.key_table[template] = scan.key_of[-1] & 255
        group = self._group(event.group)
        if event.group_ranks and scan.rank not in event.group_ranks:
            # A rank issuing in a group its member lists leave out: what is compared then depends
            # on the order lines are read in (stream.py), so every collective is read in that order.
            self.unsafe = True
        listed = self._listed(event.group_ranks)
        new = (listed - group.members) | ({scan.rank} & self.traced - group.members)
        if not new:
            return
        if new - self.binary.keys():  # a member read from JSON lines or a dump
            self._stop(group)
        if group.agreed and not group.stopped:
            self.unsafe = True
        group.members |= new

    def _listed(self, members: tuple[int, ...]) -> frozenset[int]:
        """The traced ranks of a member list (every traced rank for an empty one), once per list."""
        found = self.lists.get(members)
        if found is None:
            found = frozenset(members) & self.traced if members else self.traced
            if len(self.lists) < 4096:
                self.lists[members] = found
        return found

    def _group(self, name: str) -> _Group:
        group = self.groups.get(name)
        if group is None:
            group = self.groups[name] = _Group(name)
        return group

    def _run(self, scan: _Scan, run: CollRun) -> None:
        templates = run.templates()
        bad, top = _first_bad(templates, run.starts(), run.ends(), len(scan.group_of))
        if bad >= 0:
            if bad:
                self._run(scan, CollRun(run.first, run.data[: bad * 32]))
            self._other(scan, run.first + bad)
            if bad + 1 < run.count:
                self._run(scan, CollRun(run.first + bad + 1, run.data[(bad + 1) * 32 :]))
            return
        keys: bytes | array[int]
        if top < 256 and len(self.keys) <= 256:  # one byte a slot: C's translate, no Python ints
            low = bytes(run.data[4::32])
            column, keys = low.translate(scan.group_table), low.translate(scan.key_table)
        else:
            column = bytes(map(scan.group_of.__getitem__, templates))
            keys = array("I", map(scan.key_of.__getitem__, templates))
        present = set(column)
        for index in present:
            if index == UNUSABLE:
                self._other(scan, run.first + column.index(index))
                continue
            name = scan.groups[index]
            group = self.groups[name]
            if group.stopped:
                self._uncover(scan.rank, name, run.first + column.index(index))
                continue
            buffer = group.buffers.setdefault(scan.rank, _Buffer())
            if len(present) == 1:
                buffer.add(array("I", iter(keys)), array("Q", run.seqs()), _Span(run.first, None, run.count))
            else:
                chosen = column.translate(_SELECT[index])
                size = chosen.count(1)
                span = _Span(run.first, chosen, size)
                buffer.add(array("I", compress(keys, chosen)), array("Q", compress(run.seqs(), chosen)), span)

    # Comparing ---------------------------------------------------------------------------------

    def compare(self, ended: set[int]) -> None:
        for group in self.groups.values():
            if not group.stopped:
                self._compare(group, ended)

    def _compare(self, group: _Group, ended: set[int]) -> None:
        buffers = [group.buffers.get(member) for member in sorted(group.members)]
        if not buffers:
            return
        length = min(len(buffer.keys) if buffer is not None else 0 for buffer in buffers)
        if length:
            expected = array("Q", range(group.agreed + 1, group.agreed + length + 1))
            reference = buffers[0].keys[:length]  # type: ignore[union-attr]
            first = length
            for buffer in buffers:
                assert buffer is not None
                if buffer.seqs[:length] != expected:
                    first = min(first, first_difference(buffer.seqs, expected, first))
                if buffer.keys[:length] != reference:
                    first = min(first, first_difference(buffer.keys, reference, first))
            group.agreed += first
            for buffer in buffers:
                buffer.drop(first)  # type: ignore[union-attr]
            if first < length:
                self.differed = True
                self._stop(group)
                return
        done = any(
            member in ended and not len(group.buffers.get(member, _EMPTY).keys) for member in group.members
        )
        full = max(len(buffer.keys) if buffer is not None else 0 for buffer in buffers) > self.cap
        if done or full:
            self._stop(group)

    def _stop(self, group: _Group) -> None:
        if group.stopped and not group.buffers:
            return
        group.stopped = True
        for rank, buffer in group.buffers.items():
            head = buffer.head()
            if head is not None:
                self._uncover(rank, group.name, head)
        group.buffers.clear()

    def _uncover(self, rank: int, name: str, slot: int) -> None:
        known = self.found.uncovered.setdefault(rank, {})
        known[name] = min(known.get(name, NEVER), slot)


def chunk_slots(readers: int) -> int:
    """Slots read from one trace at a time when `readers` traces are read in turn: about 16 MiB
    in all, 32 KiB to 1 MiB each."""
    return min(1 << 15, max(1 << 10, (1 << 19) // max(readers, 1)))


def scan(
    traced: frozenset[int], binary: dict[int, str], slots: int = 0, early: bool = False
) -> Prefixes | None:
    """The agreed prefixes of the binary traces `binary` (rank -> path) among the `traced` ranks;
    None when they cannot be trusted (a member met late), and the analysis compares every event.
    With `early`, reading stops at the first difference (see the module's docstring)."""
    chunk = slots or chunk_slots(len(binary))
    scanner = _Scanner(traced, binary, chunk)
    scans: list[_Scan] = []
    try:
        for rank, path in sorted(binary.items()):
            try:
                scans.append(_Scan(rank, path, chunk))
            except (BinaryFormatError, OSError):
                scanner.found.other[rank] = 0
        ended: set[int] = set(binary) - {one.rank for one in scans}
        active = list(scans)
        while active and not scanner.unsafe:
            for one in active:
                try:
                    scanner.step(one)
                except OSError:
                    one.ended = True
                    scanner.found.other[one.rank] = 0
                if one.ended:
                    ended.add(one.rank)
            active = [one for one in active if not one.ended]
            scanner.compare(ended)
            if early and scanner.differed:
                scanner.found.read = {one.rank: one.records.next_slot for one in active}
                break
        if scanner.unsafe:
            return None
        scanner.compare(ended | set(binary))
        for group in scanner.groups.values():
            scanner._stop(group)
            scanner.found.agreed[group.name] = group.agreed
        scanner.found.moved = any(one.lines.trace.rank != one.rank for one in scans)
    finally:
        for one in scans:
            one.records.close()
    return scanner.found


def _first_bad(
    templates: memoryview, starts: memoryview[float], ends: memoryview[float], known: int
) -> tuple[int, int]:
    """The first slot naming a template not defined before it or holding a time that is not
    finite, -1 when there is none (checked on whole columns first); and the highest template."""
    if not len(templates):
        return -1, 0
    top = max(templates)
    if top < known and math.isfinite(sum(starts)) and math.isfinite(sum(ends)):
        return -1, top
    for index in range(len(templates)):
        if templates[index] >= known or not (math.isfinite(starts[index]) and math.isfinite(ends[index])):
            return index, top
    return -1, top


def first_difference(one: array[int], two: array[int], length: int) -> int:
    """The first index below `length` where the arrays differ (`length` when none does)."""
    low, high = 0, min(length, len(one), len(two))
    while high - low > 64:
        middle = (low + high) // 2
        if one[low:middle] == two[low:middle]:
            low = middle
        else:
            high = middle
    for index in range(low, high):
        if one[index] != two[index]:
            return index
    return high


@dataclass(frozen=True)
class RunTotals:
    """What the streaming analysis keeps of a run of agreed slots, from its columns."""

    count: int
    earliest: float  # the earliest t_start
    latest: float  # the latest t_start or completion
    last_at: int  # the first slot (index in the run) with the latest t_start
    last_start: float
    per_template: dict[int, int]  # template -> its slots in the run


def totals(run: CollRun) -> RunTotals:
    starts = array("d", run.starts())
    latest = max(starts)
    return RunTotals(
        count=run.count,
        earliest=min(starts),
        latest=max(latest, max(run.ends())),
        last_at=starts.index(latest),
        last_start=latest,
        per_template=Counter(run.templates()),
    )
