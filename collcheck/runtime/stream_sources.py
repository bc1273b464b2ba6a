"""The per-rank side of the streaming analysis (stream.py): each input file of a trace folder as
a source of collectives, read a turn at a time.

In: a trace folder. Out: Sources, one per file, that pass each rank's collectives to the groups
(stream.py's `_Groups`, seen here through GroupsSink) and keep what stays per rank (counts, the
last collective, times). A JSON Lines trace is read LINES_PER_TURN lines per turn; a binary trace
(trace_binary.py) counts its agreed prefixes (trace_prefix.py) from columns and feeds the rest
slot by slot; a Flight Recorder dump is decoded whole (fr_read.py; MAX_DUMP_BYTES bounds it), in
a folder of dumps alone its agreed prefixes (fr_prefix.py) counted from columns, and its other
events made LINES_PER_TURN per turn from the decoded columns, none kept.
"""

from __future__ import annotations

import json
import math
import os
import resource
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol

from collcheck.runtime import fr_prefix, trace_prefix
from collcheck.runtime.fr_read import FlightRecorderDump, name_rank
from collcheck.runtime.record import TRACE_PREFIX, TRACE_SUFFIX, CollectiveEvent
from collcheck.runtime.trace_binary import (
    CHUNK_SLOTS,
    DONE,
    SLOT,
    UNOBSERVED,
    BinaryFormatError,
    BinaryLines,
    BinaryRecords,
    CollRun,
    Record,
    TextRecord,
    is_binary_trace,
)
from collcheck.runtime.trace_load import one_form, open_dump_reader
from collcheck.runtime.trace_model import Problem, RankSummary, RankTrace, Side
from collcheck.runtime.trace_read import (
    MAX_LINE_BYTES,
    DumpRefused,
    TraceError,
    TraceLines,
    bounded_int,
    end_of_trace,
    finite_time,
    new_trace,
    numbered_lines,
)

LINES_PER_TURN = 64  # lines read from one rank's trace before the next rank's turn
_INF = math.inf


class GroupSink(Protocol):
    """One group's comparison, as a source feeds it."""

    def add(self, rank: int, event: CollectiveEvent) -> bool: ...

    def ahead(self, seq: int) -> bool: ...

    def skip(self, rank: int, members: tuple[int, ...], top: int) -> None: ...


class GroupsSink(Protocol):
    def get(self, name: str) -> GroupSink: ...


class StreamLines(TraceLines):
    """A collcheck trace's lines passed to the groups instead of kept: only the events something
    still holds (a bucket, a finding, the rank's last) can take a completion."""

    def __init__(
        self, trace: RankTrace, member_lists: dict[bytes, tuple[int, ...]], pieces: dict[Any, Any]
    ) -> None:
        super().__init__(trace)
        self.member_lists = member_lists  # shared by every rank: one tuple per distinct list
        self.pieces = pieces  # and one call site per distinct site
        self.feed: Feed | None = None
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


class Feed:
    """Where one rank's collectives go: its groups."""

    def __init__(self, rank: int, groups: GroupsSink) -> None:
        self.rank, self.groups = rank, groups
        self.last: tuple[GroupSink, int] | None = None  # the group of the last collective, its seq

    def add(self, event: CollectiveEvent) -> bool:
        group = self.groups.get(event.group)
        self.last = (group, event.seq)
        return group.add(self.rank, event)

    def ahead(self) -> bool:
        return self.last is not None and self.last[0].ahead(self.last[1])


@dataclass
class Shared:
    """What every rank's reader shares: parsed member lists by text, call sites and shapes."""

    member_lists: dict[bytes, tuple[int, ...]] = field(default_factory=dict)
    pieces: dict[Any, Any] = field(default_factory=dict)


class Source:
    """One input file: a collcheck trace read LINES_PER_TURN lines per turn, or a dump's events."""

    def __init__(
        self, trace: RankTrace, dump: bool, shared: Shared, events: Iterator[CollectiveEvent] | None = None
    ) -> None:
        self.trace, self.dump = trace, dump
        self.key = trace.rank  # the rank its events are aligned as (header's, else file name's)
        self.lines = StreamLines(trace, shared.member_lists, shared.pieces)
        self.closed = False
        self.handle: Any = None
        self.reader: Any = None
        self.events = events if events is not None else iter(())  # a dump's, made as taken (fr_read.py)
        self.pending: deque[CollectiveEvent] = deque()

    def start(self, groups: GroupsSink | None) -> None:
        self.lines.feed = Feed(self.key, groups) if groups is not None else None
        if self.dump:
            self._pend()
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
            self._pend()
            return bool(self.pending)
        return self._read(self._take_lines)

    def _pend(self) -> None:
        """Make the next turn's events of a dump, and one more: a turn that takes its last event
        says so, as with a list of them."""
        self.pending.extend(islice(self.events, LINES_PER_TURN + 1 - len(self.pending)))

    def _take_lines(self) -> None:
        for _ in range(LINES_PER_TURN):
            number, line = next(self.reader)
            self.lines.take(number, line)

    def _read(self, step: Callable[[], None]) -> bool:
        """Run one turn's `step` over the input; False (and the trace ended) once it is used up or
        cannot be read."""
        if self.reader is None:
            self._close()
            return False
        try:
            step()
        except StopIteration:
            self._close()
            return False
        except OSError as error:
            self.trace.note(0, f"could not be read: {error.strerror or error}")
            self._close()
            return False
        return True

    def stop(self) -> None:
        """Close the input, unread past this point (`trace --first` found what was asked, or the
        input is used up)."""
        self.reader = None
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.stop()
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


class DumpSource(Source):
    """A Flight Recorder dump (fr_read.py): its entries before the first one outside every agreed
    prefix (fr_prefix.py) counted from columns, the rest made into events LINES_PER_TURN per turn,
    each counted if its group's agreed prefix covers it, else fed."""

    def __init__(self, dump: FlightRecorderDump, shared: Shared) -> None:
        super().__init__(dump.trace, True, shared)
        self.opened = dump
        self.prefixes: fr_prefix.DumpPrefixes | None = None
        self.resume: int | None = None  # where events start, if before the agreed prefixes end
        self.indexed: Iterator[tuple[int, CollectiveEvent]] = iter(())
        self.pending_indexed: deque[tuple[int, CollectiveEvent]] = deque()

    def start(self, groups: GroupsSink | None) -> None:
        self.lines.feed = Feed(self.key, groups) if groups is not None else None
        first = 0
        if self.prefixes is not None and self.lines.feed is not None:
            first = self.prefixes.start(self.key)
            first = first if self.resume is None else min(first, self.resume)
            self._count_prefix(self.prefixes.columns[self.key], first)
        self.indexed = self.opened.events(first)
        self._pend()

    def _pend(self) -> None:
        self.pending_indexed.extend(islice(self.indexed, LINES_PER_TURN + 1 - len(self.pending_indexed)))

    def turn(self) -> bool:
        prefixes = self.prefixes if self.lines.feed is not None else None
        for _ in range(min(LINES_PER_TURN, len(self.pending_indexed))):
            index, event = self.pending_indexed.popleft()
            if prefixes is not None and prefixes.covered(self.key, event.group, index):
                self._count(event)
            else:
                self.lines.event(event)
        self._pend()
        return bool(self.pending_indexed)

    def _count(self, event: CollectiveEvent) -> None:
        """An agreed event past the first open entry: counted as StreamLines.event counts it."""
        lines = self.lines
        lines.count += 1
        lines.tops[event.group] = max(lines.tops.get(event.group, 0), event.seq)
        if lines.last is None or event.t_start > lines.last.t_start:
            lines.last = event
        lines.origin = min(lines.origin, event.t_start)
        lines.latest = max(lines.latest, event.t_start)
        self._skip(event.group, event.group_ranks, event.seq)

    def _skip(self, group: str, members: tuple[int, ...], top: int) -> None:
        feed = self.lines.feed
        if feed is not None:
            sink = feed.groups.get(group)
            sink.skip(self.key, members, top)
            feed.last = (sink, top)

    def _count_prefix(self, columns: fr_prefix.DumpColumns, first: int) -> None:
        """Count the dump's entries before `first`, all agreed, from their columns."""
        if first <= 0:
            return
        lines = self.lines
        starts = columns.starts[:first]
        latest = max(starts)
        lines.count += first
        lines.origin = min(lines.origin, min(starts))
        lines.latest = max(lines.latest, latest)
        last = columns.event_at(starts.index(latest))
        if last is not None and (lines.last is None or last.t_start > lines.last.t_start):
            lines.last = last
        issued = columns.group[:first]
        for index, name in enumerate(columns.groups):
            taken = issued.count(index)
            if taken:
                top = columns.seqs[issued.rindex(index)]
                lines.tops[name] = max(lines.tops.get(name, 0), top)
                self._skip(name, columns.members[index], top)
        final = columns.groups[issued[-1]]
        if self.lines.feed is not None:
            self.lines.feed.last = (self.lines.feed.groups.get(final), columns.seqs[first - 1])


class BinarySource(Source):
    """A binary trace (trace_binary.py): its agreed prefix (trace_prefix.py) counted from columns,
    the rest fed event by event, LINES_PER_TURN slots per turn, as the JSON lines would be."""

    def __init__(self, trace: RankTrace, shared: Shared) -> None:
        super().__init__(trace, False, shared)
        self.feeder = BinaryLines(self.lines)
        self.queue: deque[Record] = deque()
        self.prefixes: trace_prefix.Prefixes | None = None
        self.records: BinaryRecords | None = None
        self.chunk_slots = CHUNK_SLOTS  # fewer where many ranks are read at once
        self.first_open = 0  # the first slot outside every agreed prefix (trace_prefix.Prefixes.start)

    def exact_rank(self) -> None:
        """Take the rank from every header line of the trace (see binary_header_rank)."""
        self.trace.rank = self.key = binary_header_rank(self.trace.path, new_trace(self.trace.path).rank)

    def start(self, groups: GroupsSink | None) -> None:
        self.lines.feed = Feed(self.key, groups) if groups is not None else None
        try:
            self.records = BinaryRecords(self.trace.path, self.chunk_slots)
        except BinaryFormatError as error:
            self.trace.note(0, str(error))
            return
        except OSError as error:
            self.trace.note(0, f"could not be read: {error.strerror or error}")
            return
        self.reader = self.records.chunks()
        self.first_open = self.prefixes.start(self.key) if self.prefixes is not None else 0

    def turn(self) -> bool:
        return self._read(self._take_slots)

    def _take_slots(self) -> None:
        budget = LINES_PER_TURN
        while budget > 0:
            if not self.queue:
                self.queue.extend(next(self.reader))
            budget -= self._take(self.queue.popleft(), budget)

    def stop(self) -> None:
        if self.records is not None:
            self.records.close()
        super().stop()

    def _take(self, record: Record, budget: int) -> int:
        """Feed (part of) `record`; how much of the turn's budget it used."""
        if not isinstance(record, CollRun):
            self.feeder.feed(record)
            return 1
        covered = min(self.first_open - record.first, record.count)
        if covered > 0:  # slots of agreed prefixes only: from the columns
            if covered < record.count:
                self.queue.appendleft(CollRun(record.first + covered, record.data[covered * SLOT :]))
            run = CollRun(record.first, record.data[: covered * SLOT])
            if self._covered(run):
                return 1
            record = run  # a template the scan took and this reading did not: slot by slot
        # As many slots as the JSON lines they stand for (a folded completion was a `done` line), so
        # ranks take turns as they would over their JSON traces.
        used = count = 0
        flags = bytes(record.data[1 : budget * SLOT : SLOT])  # at most `budget` slots are fed
        while used < budget and count < record.count:
            self._slot(record, count)
            used += 1 + bin(flags[count] & (DONE | UNOBSERVED)).count("1")
            count += 1
        if count < record.count:
            self.queue.appendleft(CollRun(record.first + count, record.data[count * SLOT :]))
        return used

    def _covered(self, run: CollRun) -> bool:
        """Count a run of agreed slots from its columns; False (nothing counted) if one of its
        templates is unusable here."""
        totals = trace_prefix.totals(run)
        models = self.feeder.templates
        used = [models[t] if t < len(models) else None for t in totals.per_template]
        if None in used:
            return False
        lines = self.lines
        lines.count += totals.count
        lines.origin = min(lines.origin, totals.earliest)
        lines.latest = max(lines.latest, totals.latest)
        if lines.last is None or totals.last_start > lines.last.t_start:
            self._hold_last(run, totals.last_at)
        for model, count in zip(used, totals.per_template.values(), strict=True):
            assert model is not None  # checked above
            lines.tops[model.group] = lines.tops.get(model.group, 0) + count
        for model in used:
            assert model is not None
            self._skip(model, lines.tops[model.group])
        final = models[run.templates()[-1]]
        if lines.feed is not None and final is not None:
            lines.feed.last = (lines.feed.groups.get(final.group), lines.tops[final.group])
        return True

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
        prefixes = self.prefixes
        if model is not None and finite and prefixes and prefixes.covered(self.key, model.group, slot):
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


def find_sources(path: str, problems: list[Problem]) -> list[Source]:
    if not os.path.isdir(path):
        raise TraceError(f"{path}: not a directory")
    sources: list[Source] = []
    shared = Shared()
    names = sorted(os.listdir(path))
    for name in one_form(path, names):
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            continue
        if is_binary_trace(name):
            trace = new_trace(full)
            trace.rank = binary_header_rank(full, trace.rank, whole=False)
            sources.append(BinarySource(trace, shared))
            continue
        if name.startswith(TRACE_PREFIX) and name.endswith(TRACE_SUFFIX):
            trace = new_trace(full)
            trace.rank = _header_rank(full, trace.rank)
            sources.append(Source(trace, False, shared))
            continue
        try:
            dump = open_dump_reader(full)
        except DumpRefused as refused:
            problems.append(Problem(full, 0, str(refused), refused.skipped, name_rank(full)))
            continue
        if dump is not None:
            sources.append(DumpSource(dump, shared))
    if not sources:
        raise TraceError(f"{path}: no collcheck traces or Flight Recorder dumps found")
    return sources


def binary_header_rank(path: str, rank: int, whole: bool = True) -> int:
    """The rank of a binary trace's header lines, the last one winning (`_header_rank`); not
    `whole`: of the first header line, when it is among the first HEAD_SLOTS slots (the writer
    puts it first; trace_prefix.scan reads every header and says where the last one differs)."""
    try:
        records = BinaryRecords(path, CHUNK_SLOTS if whole else HEAD_SLOTS)
    except (BinaryFormatError, OSError):
        return rank
    try:
        for chunk in records.chunks():
            for record in chunk:
                if isinstance(record, TextRecord) and record.sub == 0 and b"header" in record.payload:
                    rank = _rank_in(record.payload, rank)
                    if not whole:
                        return rank
            if not whole:  # no header first: read them all
                return binary_header_rank(path, rank)
    except OSError:
        pass
    finally:
        records.close()
    return rank


HEAD_SLOTS = 64


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


def raise_file_limit(files: int) -> None:
    """Every rank's trace is open at once: raise the soft limit on open files where it is short."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = files + 64
    if soft != resource.RLIM_INFINITY and soft < wanted:
        ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        except (ValueError, OSError):
            return
