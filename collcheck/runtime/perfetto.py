"""Chrome/Perfetto trace JSON: one track per rank, collectives as slices, divergences marked.

The Trace Event format (`traceEvents` with `ph: "X"` complete slices, `ph: "i"` instants and
`ph: "M"` metadata) opens in ui.perfetto.dev and chrome://tracing.

`write_perfetto` reads each rank's trace again (JSON lines or binary) after the analysis and
writes its slices as they come (a slice waits only for its `done` line), so memory does not grow
with the number of events; a Window keeps only some ranks, groups or a time range. `to_perfetto`
builds the same document in memory from an Analysis that holds its events (analyze.analyze).
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from collcheck.runtime.fr_read import flight_recorder_events
from collcheck.runtime.p2p import base_group
from collcheck.runtime.record import TRACE_PREFIX, TRACE_SUFFIX, CollectiveEvent
from collcheck.runtime.trace_binary import (
    BinaryFormatError,
    BinaryLines,
    BinaryRecords,
    is_binary_trace,
)
from collcheck.runtime.trace_model import Analysis, RankTrace, Timeline
from collcheck.runtime.trace_read import TraceLines, new_trace, numbered_lines

PENDING_LIMIT = 4096  # a rank's slices waiting for their completion; past it the oldest is written as is


@dataclass(frozen=True)
class Window:
    """What to export: some ranks, some groups (a group's sends and recvs included), and a time
    range in seconds from the start of the trace; None is everything."""

    ranks: frozenset[int] | None = None
    groups: frozenset[str] | None = None
    start_s: float | None = None
    end_s: float | None = None

    def rank(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def group(self, group: str) -> bool:
        return self.groups is None or group in self.groups or base_group(group) in self.groups

    def time(self, start: float, stop: float, origin: float) -> bool:
        """Whether [start, stop] (absolute seconds) overlaps the window."""
        if self.start_s is not None and stop - origin < self.start_s:
            return False
        return self.end_s is None or start - origin <= self.end_s


EVERYTHING = Window()


def to_perfetto(analysis: Analysis, window: Window = EVERYTHING) -> dict[str, Any]:
    """The whole document, from the events `analysis` holds."""
    events = analysis.events
    return {
        "traceEvents": list(_items(analysis, window, lambda rank: iter(events.get(rank, ())))),
        "displayTimeUnit": "ms",
    }


def write_perfetto(analysis: Analysis, out: TextIO, window: Window = EVERYTHING) -> None:
    """Write the document to `out`, reading each rank's events again from the trace the analysis
    read them from (Timeline.paths); byte for byte what json.dumps(to_perfetto(...)) gives."""
    out.write('{"traceEvents": [')
    for index, item in enumerate(_items(analysis, window, lambda rank: _reread(analysis.timeline, rank))):
        out.write((", " if index else "") + json.dumps(item))
    out.write('], "displayTimeUnit": "ms"}')


def _items(
    analysis: Analysis, window: Window, events_of: Callable[[int], Iterator[CollectiveEvent]]
) -> Iterator[dict[str, Any]]:
    timeline = analysis.timeline
    for rank in analysis.ranks:
        if not window.rank(rank):
            continue
        yield {"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}}
        yield {"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}}
        for event in events_of(rank):
            stop = event.t_end if event.t_end is not None else timeline.end
            if window.group(event.group) and window.time(event.t_start, stop, timeline.origin):
                yield _slice(event, timeline.origin, timeline.end)
    for group, at, mark in _marks(analysis):
        if window.rank(mark["pid"]) and window.group(group) and window.time(at, at, timeline.origin):
            yield mark


def _us(seconds: float, origin: float) -> float:
    return round((seconds - origin) * 1e6, 3)


def _slice(event: CollectiveEvent, origin: float, end: float) -> dict[str, Any]:
    finished = event.t_end is not None
    stop = event.t_end if event.t_end is not None else end  # never completed: runs to the end of the trace
    return {
        "ph": "X",
        "name": event.describe,
        "cat": "collective" if finished else "collective,incomplete",
        "pid": event.rank,
        "tid": 0,
        "ts": _us(event.t_start, origin),
        "dur": max(_us(stop, origin) - _us(event.t_start, origin), 1.0),
        "args": {
            "group": event.group,
            "seq": event.seq,
            "site": event.site.short,
            "stack": list(event.site.stack),
            "thread": event.thread,
            "completed": finished,
        },
    }


def _marks(analysis: Analysis) -> Iterator[tuple[str, float, dict[str, Any]]]:
    """(group, time, instant) marking each finding, at the start of each event it names."""
    timeline = analysis.timeline
    for divergence in analysis.divergences:
        for ranks in divergence.ranks:
            for rank in ranks:
                start = timeline.starts.get((rank, divergence.group, divergence.seq))
                if start is not None:
                    mark = _instant(rank, start, timeline.origin, divergence.kind, divergence.text)
                    yield divergence.group, start, mark
    for finding in analysis.p2p:
        for rank, seq in finding.events:
            start = timeline.starts.get((rank, finding.group, seq))
            if start is not None:
                mark = _instant(rank, start, timeline.origin, f"p2p {finding.kind}", finding.text)
                yield finding.group, start, mark
    for item in analysis.missing:
        for rank in item.ranks:
            at = timeline.latest.get(rank, timeline.origin)
            yield item.group, at, _instant(rank, at, timeline.origin, "never issued", item.text)


def _instant(rank: int, at: float, origin: float, kind: str, text: str) -> dict[str, Any]:
    return {
        "ph": "i",
        "s": "p",
        "name": f"DIVERGENCE: {kind}",
        "pid": rank,
        "tid": 0,
        "ts": _us(at, origin),
        "args": {"detail": text},
    }


# Reading a rank's events again -----------------------------------------------------------------


class _SliceLines(TraceLines):
    """A trace's collectives in issue order, each let go once its completion is known (its `done`
    or `unobserved` line), or once PENDING_LIMIT others wait behind it."""

    def __init__(self, trace: RankTrace) -> None:
        super().__init__(trace)
        self.waiting: deque[CollectiveEvent] = deque()
        self.ready: list[CollectiveEvent] = []

    def event(self, event: CollectiveEvent) -> None:
        self.by_key[(event.group, event.seq)] = event
        self.waiting.append(event)
        self._release(PENDING_LIMIT)

    def done(self, key: tuple[str, int], row: dict[str, Any]) -> None:
        super().done(key, row)
        self._release(PENDING_LIMIT)

    def unobserved(self, key: tuple[str, int]) -> None:
        super().unobserved(key)
        self._release(PENDING_LIMIT)

    def _release(self, keep: int) -> None:
        while self.waiting and (len(self.waiting) > keep or _settled(self.waiting[0])):
            event = self.waiting.popleft()
            if self.by_key.get((event.group, event.seq)) is event:
                del self.by_key[(event.group, event.seq)]
            self.ready.append(event)

    def drain(self) -> list[CollectiveEvent]:
        ready, self.ready = self.ready, []
        return ready


def _settled(event: CollectiveEvent) -> bool:
    return event.t_end is not None or not event.observable


def _reread(timeline: Timeline, rank: int) -> Iterator[CollectiveEvent]:
    """`rank`'s events from its trace, in order, with their completions; nothing when the file
    cannot be read now (the analysis said what it could read)."""
    path = timeline.paths.get(rank)
    if path is None:
        return
    name = os.path.basename(path)
    if is_binary_trace(name):
        yield from _reread_binary(path)
        return
    if not (name.startswith(TRACE_PREFIX) and name.endswith(TRACE_SUFFIX)):
        yield from flight_recorder_events(path)  # made one at a time from the decoded dump
        return
    lines = _SliceLines(new_trace(path))
    try:
        with open(path, "rb") as handle:
            for number, line in numbered_lines(handle):
                lines.take(number, line)
                yield from lines.drain()
    except OSError:
        pass
    yield from lines.waiting


REREAD_SLOTS = 4096  # a binary trace's slots read at once: its events are made a chunk at a time


def _reread_binary(path: str) -> Iterator[CollectiveEvent]:
    """A binary trace's events (trace_binary.py), as `_reread` gives a JSON trace's."""
    lines = _SliceLines(new_trace(path))
    feeder = BinaryLines(lines)
    try:
        records = BinaryRecords(path, REREAD_SLOTS)
    except (BinaryFormatError, OSError):
        return
    try:
        for chunk in records.chunks():
            for record in chunk:
                feeder.feed(record)
                yield from lines.drain()
    except OSError:
        pass
    finally:
        records.close()
    yield from lines.waiting
