"""Reading collcheck's JSON Lines traces (trace_load.py picks the reader of each file of a folder;
fr_read.py reads PyTorch Flight Recorder dumps with the checks defined here).

In: a file path. Out: its RankTrace (trace_model.py) and the Problems met on the way. Trace
folders are untrusted input: every line is bounded and checked before it becomes a
CollectiveEvent. Never imports torch.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, replace
from typing import Any

from collcheck.runtime.record import (
    GROUP_LINE,
    LOST,
    TRACE_PREFIX,
    CollectiveEvent,
)
from collcheck.runtime.trace_model import (
    RankTrace,
    RuntimeReport,
)

# ---------------------------------------------------------------------------------------------
# Loading


class TraceError(Exception):
    """The directory holds nothing that could be read as a trace."""


class DumpRefused(Exception):
    """A file that looked like a Flight Recorder dump and was not read (unsafe or too big):
    raised by fr_pickle.py and fr_read.py. `skipped`: counted among the unreadable parts."""

    skipped = False


class DumpUnreadable(DumpRefused):
    """A file that starts as a Flight Recorder dump does but could not be decoded: cut short (a
    rank killed while writing it) or damaged. Its rank is missing from the analysis, so the file
    counts as unreadable (`skipped`), as a damaged line of a collcheck trace does."""

    skipped = True


PERFETTO_FILE = "trace.perfetto.json"  # `collcheck trace --format perfetto`'s own output in the folder


MAX_LINE_BYTES = 1 << 20  # a real line is under a few KB; a longer one is skipped unparsed
INT_LIMIT = 1 << 62  # ranks, sequence numbers, sizes: anything past this is corrupt


def load_json(path: str) -> RankTrace:
    """A collcheck trace. Every line that cannot be used is skipped and recorded as a problem of
    the trace (file:line and why); a torn last line (a rank killed mid-write) is expected."""
    trace = new_trace(path)
    loader = TraceLines(trace)
    try:
        with open(path, "rb") as handle:
            for number, line in numbered_lines(handle):
                loader.take(number, line)
    except OSError as error:
        trace.note(0, f"could not be read: {error.strerror or error}")
    end_of_trace(loader)
    return trace


def new_trace(path: str) -> RankTrace:
    """An empty RankTrace for the collcheck trace at `path`, its rank read from the file name."""
    digits = re.search(r"(\d+)", os.path.basename(path)[len(TRACE_PREFIX) :])
    rank = int(digits.group(1)) if digits and len(digits.group(1)) < 10 else -1
    return RankTrace(rank=rank, source="collcheck", path=path, exited=False)


def end_of_trace(loader: TraceLines) -> None:
    """Note what the whole of a trace says is missing: its header, lines its tracer lost."""
    trace = loader.trace
    if not loader.header:
        trace.note(0, "no header line: the trace was not written in full (a full disk?)", skipped=False)
    if trace.lost:
        why = trace.lost_error or "write failed"
        trace.note(0, f"incomplete: {trace.lost} events lost ({why})", skipped=False)


def numbered_lines(handle: Any) -> Any:
    """(line number, bytes) for each line, at most MAX_LINE_BYTES each (longer ones come back as
    None); a last line without a newline is a torn write and comes back as b"" (skipped)."""
    number = 0
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES:
            while line and not line.endswith(b"\n"):  # skip the rest of it
                line = handle.readline(MAX_LINE_BYTES)
            yield number, None
        elif not line.endswith(b"\n"):
            yield number, b""
        else:
            yield number, line


@dataclass(frozen=True)
class DefinedGroup:
    """What a trace's `group` line says about one gid."""

    name: str
    members: tuple[int, ...]
    desc: str
    line: int  # where it is defined


class TraceLines:
    """Turns a collcheck trace's lines into its RankTrace, one line at a time.

    The in-memory loader keeps every event in `trace.events`; the streaming analysis (stream.py)
    overrides `event`, `done` and `unobserved` to pass each one on instead.

    Member lists: a schema-2 trace defines each once, in a `group` line (`{"ev":"group","gid":N,
    "group":"G","ranks":[...],"desc":"..."}`), and its `coll` lines name it by `gid`; a coll line
    naming a gid no earlier line defines, a gid defined again differently, or more definitions than
    MAX_GROUP_LINES (MAX_GROUP_MEMBERS members in all) are problems of their lines. A schema-1 line
    holds its list (`group_ranks`), parsed once per distinct text (`member_lists`): a 1,024-rank
    group's list is most of such a line. Both kinds may be mixed in one trace."""

    def __init__(self, trace: RankTrace) -> None:
        self.trace = trace
        self.header = False
        self.by_key: dict[tuple[str, int], CollectiveEvent] = {}
        self.member_lists: dict[bytes, tuple[int, ...]] = {}
        self.groups: dict[int, DefinedGroup] = {}  # gid -> its `group` line
        self.defined_members = 0  # members of all of `groups` together
        self.number = 0  # the line being read
        # Call sites, shapes and member lists, each kept once (`_shared`, `_define`).
        self.pieces: dict[Any, Any] = {}
        self._captured: list[CollectiveEvent] | None = None  # `parse` in progress

    def parse(self, number: int, line: bytes) -> CollectiveEvent | None:
        """The event of one `coll` line, checked (and its problems noted) as `take` does, returned
        instead of passed on; None when it is not a usable `coll` line."""
        captured: list[CollectiveEvent] = []
        self._captured = captured
        try:
            self.take(number, line)
        finally:
            self._captured = None
        return captured[0] if captured else None

    def take(self, number: int, line: bytes | None) -> None:
        self.number = number
        if line is None:
            self.trace.note(number, f"line longer than {MAX_LINE_BYTES} bytes")
            return
        if not line.strip():
            return
        members, line = self._members(line)
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as error:  # not UTF-8, not JSON, nested too deep
            self.trace.note(number, f"not a JSON line ({short_error(error)})")
            return
        if not isinstance(row, dict):
            self.trace.note(number, f"not a JSON object ({type(row).__name__})")
            return
        try:
            self._row(row, members)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError) as error:
            self.trace.note(number, f"malformed {str(row.get('ev'))[:20]!r} line ({short_error(error)})")

    def _members(self, line: bytes) -> tuple[tuple[int, ...] | None, bytes]:
        """A schema-1 `coll` line as the tracer wrote it starts `{"ev":"coll","rank":R,"group":"G",
        "group_ranks":[...]`: that list is taken from `member_lists` by its text (parsed and
        checked the first time) and the line is returned with a 0 in its place. Any other line,
        or a list that is not plain integers, comes back unchanged (None: parse it whole)."""
        found = _COLL_PREFIX.match(line)
        if found is None:
            return None, line
        text = found.group(1)
        members = self.member_lists.get(text)
        if members is None:
            try:
                members = tuple(bounded_int(int(r)) for r in text[1:-1].split(b",")) if text != b"[]" else ()
            except ValueError:
                return None, line
            if len(self.member_lists) < MEMBER_LISTS_CACHED:
                self.member_lists[text] = members
        return members, line[: found.start(1)] + b"0" + line[found.end(1) :]

    def _row(self, row: dict[str, Any], members: tuple[int, ...] | None) -> None:
        trace, kind = self.trace, row.get("ev")
        if kind == "header":
            self.header = True
            trace.rank = bounded_int(row.get("rank", trace.rank))
            self._header_world(row.get("world_size"))
        elif kind == "coll":
            defined = None
            if "gid" in row:
                defined = self._named(row)
            elif members is not None and row.get("group_ranks") != 0:
                members = None  # a second `group_ranks` key, which JSON readers take: read it whole
            elif members is not None:
                del row["group_ranks"]
            event = CollectiveEvent.from_json(row)
            if defined is not None:
                members, event.group_desc = defined.members, defined.desc
            if members is not None:
                event.group_ranks = members
            event = self._shared(checked_event(event, members_checked=members is not None))
            if self._captured is not None:
                self._captured.append(event)
            else:
                self.event(event)
        elif kind == GROUP_LINE:
            self._define(row)
        elif kind == "done":
            self.done((str(row.get("group")), bounded_int(row.get("seq", 0))), row)
        elif kind == "unobserved":
            self.unobserved((str(row.get("group")), bounded_int(row.get("seq", 0))))
        elif kind == "report":
            rank = bounded_int(row.get("rank", trace.rank))
            fields = (str(row.get(name)) for name in ("kind", "severity", "text"))
            trace.reports.append(RuntimeReport(rank, *fields))
        elif kind == "exit":
            trace.exited = True
        elif kind == LOST:
            trace.lost = max(trace.lost, bounded_int(row.get("n", 0)))
            trace.lost_error = str(row.get("error", ""))[:200]

    def _header_world(self, size: Any) -> None:
        """A header's world size: every rank below it must have left a trace (analyze.absent_ranks).
        One that is no plain count up to MAX_WORLD is a problem of the line and is not used."""
        if size is None:
            return
        if isinstance(size, int) and not isinstance(size, bool) and 0 < size <= MAX_WORLD:
            self.trace.world_size = size
            return
        self.trace.note(self.number, f"world_size {str(size)[:40]!r} is not a count of ranks; not used")

    def _named(self, row: dict[str, Any]) -> DefinedGroup:
        """The group a schema-2 `coll` line names by its `gid`; ValueError if none is defined."""
        if "group_ranks" in row:
            raise ValueError("both gid and group_ranks")
        gid = bounded_int(row["gid"])
        defined = self.groups.get(gid)
        if defined is None:
            raise ValueError(f"group id {gid} is not defined by an earlier group line")
        if row.get("group") != defined.name:
            raise ValueError(
                f"group {str(row.get('group'))[:40]!r} named with the id of group {defined.name[:40]!r} "
                f"(line {defined.line})"
            )
        return defined

    def _define(self, row: dict[str, Any]) -> None:
        """A `group` line: the member list of one gid. Repeated unchanged (a writer that failed to
        write a line writes its group line again) it is nothing new; changed, it is a problem and
        the first definition stays."""
        gid, name, desc, ranks = bounded_int(row["gid"]), row["group"], row.get("desc", ""), row["ranks"]
        if gid < 0:
            raise ValueError(f"negative group id {gid}")
        if not isinstance(name, str) or not isinstance(desc, str) or not isinstance(ranks, list):
            raise ValueError("group, desc or ranks of the wrong type")
        # Checked on the whole list at once (a 10,000-rank list is read once per trace).
        plain = not ranks or set(map(type, ranks)) == {int}
        if not plain or (ranks and (min(ranks) <= -INT_LIMIT or max(ranks) >= INT_LIMIT)):
            raise ValueError("ranks are not all integers in range")
        known = self.groups.get(gid)
        if known is not None:
            if (known.name, known.members, known.desc) != (name, tuple(ranks), desc):
                self.trace.note(
                    self.number,
                    f"group id {gid} defined again differently (first defined at line {known.line}); "
                    "this definition is ignored",
                )
            return
        if len(self.groups) >= MAX_GROUP_LINES or self.defined_members + len(ranks) > MAX_GROUP_MEMBERS:
            self.trace.note(
                self.number,
                f"more group definitions than a trace may hold ({MAX_GROUP_LINES} groups, "
                f"{MAX_GROUP_MEMBERS} members in all); ignored",
            )
            return
        members = tuple(ranks)
        if len(self.pieces) < PIECES_SHARED:  # one tuple per distinct list, across ranks too
            members = self.pieces.setdefault(members, members)
        self.defined_members += len(members)
        self.groups[gid] = DefinedGroup(name, members, desc, self.number)

    def _shared(self, event: CollectiveEvent) -> CollectiveEvent:
        """`event` holding the same call site and shapes objects as earlier events with equal
        ones: a job repeats a few, and a streaming analysis holds many events of many ranks."""
        if len(self.pieces) < PIECES_SHARED:
            event.site = self.pieces.setdefault(event.site, event.site)
            event.shapes = self.pieces.setdefault(event.shapes, event.shapes)
        return event

    def event(self, event: CollectiveEvent) -> None:
        """A `coll` line, checked."""
        self.by_key[(event.group, event.seq)] = event
        self.trace.events.append(event)

    def done(self, key: tuple[str, int], row: dict[str, Any]) -> None:
        """A `done` line for the collective `key` (group, seq)."""
        done = self.by_key.get(key)
        if done is not None and row.get("ok", True):
            done.t_end = finite_time(row.get("t_end", done.t_start))

    def unobserved(self, key: tuple[str, int]) -> None:
        unknown = self.by_key.get(key)
        if unknown is not None:
            unknown.observable = False


# `{"ev":"coll","rank":R,"group":"G","group_ranks":[...]`: a group name without quotes or
# backslashes ends at its first quote, so the list found here is the object's own.
_JSON_INT = rb"-?(?:0|[1-9]\d{0,18})"
_COLL_PREFIX = re.compile(
    rb'\{"ev":"coll","rank":-?\d{1,19},"group":"[^"\\]{0,200}","group_ranks":(\[(?:%s(?:,%s)*)?\])'
    % (_JSON_INT, _JSON_INT)
)
MEMBER_LISTS_CACHED = 4096  # distinct member lists kept per trace (a job has a few groups)
MAX_GROUP_LINES = 1 << 16  # gids one trace may define (its groups, and a send's peers)
MAX_GROUP_MEMBERS = 1 << 20  # members of one trace's group lines together (at most ~40 MiB)
MAX_WORLD = 1 << 24  # a header's world size past this is corrupt
PIECES_SHARED = 4096  # distinct call sites and shapes shared per trace


def bounded_int(value: Any) -> int:
    """An int (or a string of one) within +-INT_LIMIT; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"not an integer: {str(value)[:40]}")
    number = int(value)
    if not -INT_LIMIT < number < INT_LIMIT:
        raise ValueError(f"out of range: {str(value)[:40]}")
    return number


def finite_time(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"not a finite time: {number}")
    return number


def checked_event(event: CollectiveEvent, members_checked: bool = False) -> CollectiveEvent:
    """`event` if every number in it is sane (the analysis sorts, counts and prints them);
    `members_checked`: its member list came from TraceLines' checked cache."""
    bounded_int(event.rank)
    if bounded_int(event.seq) < 0:
        raise ValueError("negative sequence number")
    members = () if members_checked else event.group_ranks
    for number in (*members, *(d for shape in event.shapes for d in shape)):
        bounded_int(number)
    for optional in (event.root, event.tag):
        if optional is not None:
            bounded_int(optional)
    if event.reduce_op is not None and not isinstance(event.reduce_op, str):
        raise ValueError("reduce_op is not a string")
    finite_time(event.t_start)
    site = event.site
    if type(site.line) is not int or not all(type(frame) is str for frame in site.stack):
        event.site = replace(site, line=bounded_int(site.line), stack=tuple(map(str, site.stack)))
    else:
        bounded_int(site.line)
    return event


def short_error(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text[:120]
