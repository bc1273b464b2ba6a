"""Offline cross-rank analysis of collcheck traces and PyTorch Flight Recorder dumps.

Collectives are aligned per (group, sequence number). Nothing trusts a particular rank: at the
first sequence number where ranks disagree the majority is the reference (ties go to the class
holding the lowest rank), and every side is shown with its own call site. Sends and recvs are
paired per channel instead (the k-th send from s to d with the k-th recv on d from s; p2p.py).
Never imports torch, and never unpickles anything but plain data: Flight Recorder dumps hold only
dicts, lists, tuples, strings, numbers, booleans and None, so a pickle that names any global (a
class, `os.system`, ...) is refused, and only files that start like a dump are unpickled at all.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import re
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any

from collcheck.runtime.groups import CREATE_SUFFIX, numbered
from collcheck.runtime.operand import Use, crosses, swap_text
from collcheck.runtime.p2p import Pair, base_group, pair_text, pairs
from collcheck.runtime.record import (
    GROUP_LINE,
    LOST,
    TRACE_PREFIX,
    TRACE_SUFFIX,
    CallSite,
    CollectiveEvent,
)


@dataclass(frozen=True)
class Side:
    """One rank's view of one collective."""

    rank: int
    describe: str
    site: str
    stack: tuple[str, ...] = ()
    completed: bool | None = None
    library: bool = False  # no frame was the user's: `site` and `stack` are a library's (CallSite)

    @property
    def text(self) -> str:
        return f"rank {self.rank} {self.describe} at {self.site}"

    @property
    def stack_text(self) -> str:
        """The innermost frames, `train.py:13 in step <- train.py:40 in main`, else the site."""
        stack = " <- ".join(_short_frame(frame) for frame in self.stack[:3])
        if not stack:
            return self.site
        return f"{stack} (library)" if self.library else stack

    @classmethod
    def of(cls, event: CollectiveEvent) -> Side:
        completed = event.t_end is not None if event.observable else None
        site = event.site
        return cls(event.rank, event.describe, site.short, site.stack, completed, site.library)


@dataclass(frozen=True)
class Divergence:
    """The first sequence number of a group where ranks disagree.

    kind "mismatch": different collectives (op, shapes, dtypes, reduce op, root);
    kind "callsite": the same collective issued from different lines (a warning).
    `sides` is the reference first, then one side per other variant; `ranks` lists every rank per
    variant in the same order.
    """

    group: str
    seq: int
    kind: str
    sides: tuple[Side, ...]
    ranks: tuple[tuple[int, ...], ...]

    @property
    def text(self) -> str:
        ordered = sorted(self.sides[:2], key=lambda side: side.rank)
        return f"{ordered[0].text} vs {ordered[1].text} ({numbered(self.group, self.seq)})"


@dataclass(frozen=True)
class Missing:
    """Ranks of a group that never issued a collective that another member issued."""

    group: str
    seq: int
    ranks: tuple[int, ...]
    issued_by: Side

    @property
    def text(self) -> str:
        who = ", ".join(f"rank {rank}" for rank in self.ranks)
        return (
            f"{who} never issued {self.issued_by.describe} ({numbered(self.group, self.seq)}); "
            f"rank {self.issued_by.rank} issued it at {self.issued_by.site}"
        )


@dataclass(frozen=True)
class P2PFinding:
    """The first send/recv pair of a channel whose tensors or tags differ (kind "mismatch"), or
    its first send never received or recv never sent (kind "unmatched": `sides` holds the side
    that was issued; rank `absent` never issued its `absent_op`)."""

    group: str  # the trace's group, `<name>:p2p`
    kind: str
    where: str  # `group 0, send #1 0->1`
    sides: tuple[Side, ...]
    events: tuple[tuple[int, int], ...]  # (rank, seq) of each side's event
    absent: int | None = None
    absent_op: str = ""

    @property
    def text(self) -> str:
        if self.kind == "mismatch":
            send, recv = self.sides
            return pair_text((send.rank, send.text), (recv.rank, recv.text), self.where)
        return f"rank {self.absent} never issued the {self.absent_op} for {self.sides[0].text} ({self.where})"


SWAP_WINDOW = 64  # divergences per pair of ranks searched for a swapped pair's other half


@dataclass(frozen=True)
class Swap:
    """Two collectives that two ranks issued in opposite orders: each rank's pair of call sites,
    whose operands cross (`a` then `b` on one rank, `b` then `a` on the other)."""

    group: str
    uses: tuple[Use, Use, Use, Use]  # the two ranks' sides of the first half, then of the second

    @property
    def text(self) -> str:
        return swap_text(self.group, self.uses)


RUNTIME_ERROR_KINDS = ("mismatch", "callsite", "stall", "swap")  # errors the tracer raised while the job ran

# `collcheck trace` exit statuses.
EXIT_OK = 0  # everything read, ranks consistent
EXIT_DIVERGED = 1  # ranks diverged (or, with --strict, call sites did)
EXIT_UNREADABLE = 2  # nothing could be read (or a usage error)
EXIT_INCOMPLETE = 3  # no divergence in what could be read, but lines, files or events are missing


@dataclass(frozen=True)
class RuntimeReport:
    rank: int
    kind: str
    severity: str
    text: str


@dataclass(frozen=True)
class RankSummary:
    rank: int
    source: str  # "collcheck" or "flight-recorder"
    collectives: int
    last: Side | None
    exited: bool | None  # None when the source cannot tell (Flight Recorder)
    path: str = ""

    @property
    def text(self) -> str:
        if self.last is None:
            head = "no collective recorded"
        else:
            state = {True: "completed", False: "not completed", None: "completion not observable"}[
                self.last.completed
            ]
            count = f"{self.collectives} collective{'' if self.collectives == 1 else 's'}"
            head = f"{count}; last {self.last.describe} at {self.last.site}, {state}"
        if self.exited is False:
            head += "; trace ends without an exit record (killed, crashed or aborted)"
        return head


@dataclass(frozen=True)
class Problem:
    """Something in the trace folder that could not be read: a whole file (`line` 0) or one line."""

    path: str
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


@dataclass
class RankTrace:
    rank: int
    source: str
    path: str
    events: list[CollectiveEvent] = field(default_factory=list)
    reports: list[RuntimeReport] = field(default_factory=list)
    exited: bool | None = None
    problems: list[Problem] = field(default_factory=list)  # the first PROBLEMS_SHOWN
    unreadable: int = 0  # lines (or dump entries) skipped, all of them
    lost: int = 0  # lines the tracer could not write (its `lost` line)
    lost_error: str = ""

    def note(self, line: int, text: str, skipped: bool = True) -> None:
        """Something that could not be used: a line (`line` 0: the file), skipped or not."""
        if skipped:
            self.unreadable += 1
        if len(self.problems) < PROBLEMS_SHOWN:
            self.problems.append(Problem(self.path, line, text))


@dataclass(frozen=True)
class Timeline:
    """When the traced collectives ran, for the Perfetto export and the run verdict: what is left
    of the events once a streaming analysis has passed them."""

    origin: float = 0.0  # the earliest t_start
    end: float = 0.0  # the latest t_end (or t_start where none)
    latest: dict[int, float] = field(default_factory=dict)  # rank -> its latest t_end or t_start
    last: dict[int, CollectiveEvent] = field(default_factory=dict)  # rank -> its latest-starting event
    starts: dict[tuple[int, str, int], float] = field(default_factory=dict)  # (rank, group, seq) of
    # each event a finding names -> its t_start
    paths: dict[int, str] = field(default_factory=dict)  # rank -> the trace its events were read from


@dataclass(frozen=True)
class Analysis:
    ranks: tuple[int, ...]
    groups: tuple[tuple[str, tuple[int, ...], int], ...]  # name, members, collectives issued (max)
    divergences: tuple[Divergence, ...]
    missing: tuple[Missing, ...]
    summaries: tuple[RankSummary, ...]
    reports: tuple[RuntimeReport, ...]
    events: dict[int, list[CollectiveEvent]] = field(default_factory=dict, compare=False)
    p2p: tuple[P2PFinding, ...] = ()
    problems: tuple[Problem, ...] = ()  # what could not be read (files, the first lines of each)
    unreadable: int = 0  # lines and dump entries skipped in all
    lost: int = 0  # events the tracers could not write

    @property
    def incomplete(self) -> bool:
        """Some input could not be read: "consistent" cannot be claimed."""
        return bool(self.problems or self.unreadable or self.lost)

    swaps: tuple[Swap, ...] = ()
    timeline: Timeline = field(default_factory=Timeline, compare=False)

    @property
    def mismatches(self) -> tuple[Divergence, ...]:
        return tuple(d for d in self.divergences if d.kind == "mismatch")

    @property
    def warnings(self) -> tuple[Divergence, ...]:
        return tuple(d for d in self.divergences if d.kind == "callsite")

    @property
    def runtime_errors(self) -> tuple[RuntimeReport, ...]:
        return tuple(r for r in self.reports if r.severity == "error" and r.kind in RUNTIME_ERROR_KINDS)

    @property
    def diverged(self) -> bool:
        return bool(self.mismatches or self.missing or self.runtime_errors or self.p2p or self.swaps)

    def exit_code(self, strict: bool = False) -> int:
        """EXIT_DIVERGED, else EXIT_INCOMPLETE when some input could not be read, else EXIT_OK."""
        if self.diverged or (strict and self.warnings):
            return EXIT_DIVERGED
        return EXIT_INCOMPLETE if self.incomplete else EXIT_OK


# ---------------------------------------------------------------------------------------------
# Loading


class TraceError(Exception):
    """The directory holds nothing that could be read as a trace."""


class DumpRefused(Exception):
    """A file that looked like a Flight Recorder dump and was not read (unsafe or too big)."""


def load_dir(path: str, problems: list[Problem] | None = None) -> list[RankTrace]:
    """Every trace and dump in `path`; files refused as unsafe are added to `problems`."""
    if not os.path.isdir(path):
        raise TraceError(f"{path}: not a directory")
    traces: list[RankTrace] = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            continue
        try:
            trace = load_file(full)
        except DumpRefused as refused:
            if problems is not None:
                problems.append(Problem(full, 0, str(refused)))
            continue
        if trace is not None:
            traces.append(trace)
    if not traces:
        raise TraceError(f"{path}: no collcheck traces or Flight Recorder dumps found")
    return traces


PERFETTO_FILE = "trace.perfetto.json"  # `collcheck trace --format perfetto`'s own output in the folder


def load_file(path: str) -> RankTrace | None:
    """A collcheck trace, a Flight Recorder dump, or None for any other file. Raises DumpRefused
    for a pickle that is not plain data, or a dump over MAX_DUMP_BYTES."""
    name = os.path.basename(path)
    if name.startswith(TRACE_PREFIX) and name.endswith(TRACE_SUFFIX):
        return _load_collcheck(path)
    if name == PERFETTO_FILE:  # gigabytes for a big job: never read as a possible JSON dump
        return None
    return _load_flight_recorder(path)


MAX_LINE_BYTES = 1 << 20  # a real line is under a few KB; a longer one is skipped unparsed
PROBLEMS_SHOWN = 10  # per file; the rest are counted
_INT_LIMIT = 1 << 62  # ranks, sequence numbers, sizes: anything past this is corrupt


def _load_collcheck(path: str) -> RankTrace:
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
            self.trace.note(number, f"not a JSON line ({_short_error(error)})")
            return
        if not isinstance(row, dict):
            self.trace.note(number, f"not a JSON object ({type(row).__name__})")
            return
        try:
            self._row(row, members)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError) as error:
            self.trace.note(number, f"malformed {str(row.get('ev'))[:20]!r} line ({_short_error(error)})")

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
            self.event(self._shared(_checked(event, members_checked=members is not None)))
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
        if not all(type(rank) is int and -_INT_LIMIT < rank < _INT_LIMIT for rank in ranks):
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
PIECES_SHARED = 4096  # distinct call sites and shapes shared per trace


def bounded_int(value: Any) -> int:
    """An int (or a string of one) within +-_INT_LIMIT; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"not an integer: {str(value)[:40]}")
    number = int(value)
    if not -_INT_LIMIT < number < _INT_LIMIT:
        raise ValueError(f"out of range: {str(value)[:40]}")
    return number


def finite_time(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"not a finite time: {number}")
    return number


def _checked(event: CollectiveEvent, members_checked: bool = False) -> CollectiveEvent:
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


def _short_error(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text[:120]


# Flight Recorder ------------------------------------------------------------------------------

_FR_DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Int": "int32",
    "Long": "int64",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
}
# Not user frames: torch itself, and collcheck's hook when the job was traced by both.
_TORCH_FILE = re.compile(r"[/\\]torch[/\\]|[/\\]collcheck[/\\]runtime[/\\]")


def _load_flight_recorder(path: str) -> RankTrace | None:
    dump = _read_dump(path)
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        return None
    rank = _dump_rank(dump, path)
    if rank is None:
        return None
    configs = _pg_ranks(dump.get("pg_config"))
    trace = RankTrace(rank=rank, source="flight-recorder", path=path, exited=None)
    for index, entry in enumerate(dump["entries"][:MAX_DUMP_ENTRIES]):
        try:
            event = _fr_event(entry, rank, configs) if isinstance(entry, dict) else None
            if event is not None:
                trace.events.append(_checked(event))
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError) as error:
            trace.note(0, f"entry {index}: unusable ({_short_error(error)})")
    if len(dump["entries"]) > MAX_DUMP_ENTRIES:
        trace.note(0, f"only the first {MAX_DUMP_ENTRIES} entries read", skipped=False)
    return trace


# Bounds on what one dump may cost: FR's ring buffer holds 2,000 entries by default (a few MB).
MAX_DUMP_BYTES = 256 * 1024 * 1024
MAX_DUMP_ENTRIES = 1_000_000
_PICKLE_DICT = b"}"  # EMPTY_DICT: a dump's top level
_PICKLE_FRAME = b"\x95"  # FRAME (protocol 4+), 8 bytes of length, then the first opcode


def _read_dump(path: str) -> Any:
    """The decoded dump, or None when the file is not one: JSON (starts with `{`) or a pickle whose
    first opcodes are a protocol 2-5 header and an empty dict, as torch writes them. Any other file
    is never unpickled."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(16)
            kind = _dump_kind(head)
            if kind is None:
                return None
            if size > MAX_DUMP_BYTES:
                raise DumpRefused(f"{size} bytes, more than the {MAX_DUMP_BYTES} a dump may have; not read")
            data = head + handle.read(MAX_DUMP_BYTES + 1 - len(head))
    except OSError:
        return None
    if len(data) > MAX_DUMP_BYTES:  # grew while being read
        raise DumpRefused(f"more than {MAX_DUMP_BYTES} bytes; not read")
    if kind == "json":
        try:
            loaded = json.loads(data)
        except (ValueError, RecursionError):
            return None
        check_dump_shape(loaded)
        return loaded
    return _plain_unpickle(data)


def _dump_kind(head: bytes) -> str | None:
    """ "json", "pickle" or None, from a file's first bytes."""
    if head.lstrip()[:1] == b"{":
        return "json"
    if len(head) < 3 or head[0] != pickle.PROTO[0] or not 2 <= head[1] <= 5:
        return None
    opcode = head[2:3]
    if opcode == _PICKLE_FRAME and len(head) >= 12:
        opcode = head[11:12]
    return "pickle" if opcode == _PICKLE_DICT else None


class _PlainDataUnpickler(pickle.Unpickler):
    """Builds only what needs no global: dicts, lists, tuples, str, bytes, numbers, bool, None.
    Every opcode that could call something gets its callable from `find_class`, refused here."""

    def find_class(self, module: str, name: str) -> Any:
        raise DumpRefused(
            f"pickle refers to {module}.{name}; Flight Recorder dumps hold only plain data, "
            "so it was not unpickled"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise DumpRefused("pickle uses persistent ids; not a Flight Recorder dump, not unpickled")


def _plain_unpickle(data: bytes) -> Any:
    try:
        loaded = _PlainDataUnpickler(io.BytesIO(data)).load()
    except DumpRefused:
        raise
    except Exception:  # truncated or corrupt: not a dump we can read
        return None
    check_dump_shape(loaded)
    return loaded


# A pickle's memo lets one container stand in many places: 600 bytes of lists that share one inner
# list spell out 2**60 leaves once anything formats them. What a dump may hold is bounded as if
# every shared container were copied where it stands (FR's ring holds 2,000 entries of a few dozen
# values each by default; MAX_DUMP_ENTRIES of them would still fit), and its nesting too.
MAX_DUMP_NODES = 50_000_000
MAX_DUMP_DEPTH = 64


def check_dump_shape(data: Any) -> None:
    """DumpRefused when `data`, with shared containers counted at each place they stand, has more
    than MAX_DUMP_NODES values, nests deeper than MAX_DUMP_DEPTH, or contains itself. Linear in
    the distinct containers: each one's expanded size is computed once."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    work: list[tuple[Any, int, bool]] = [(data, 0, False)]
    while work:
        value, depth, children_done = work.pop()
        if not isinstance(value, (list, tuple, dict)):
            continue
        key = id(value)
        if children_done:
            on_path.discard(key)
            size = 1 + sum(sizes.get(id(child), 1) for child in _children(value))
            if size > MAX_DUMP_NODES:
                raise DumpRefused(
                    f"holds more than {MAX_DUMP_NODES} values with its shared parts spelled out"
                )
            sizes[key] = size
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise DumpRefused("contains itself; not a Flight Recorder dump")
        if depth >= MAX_DUMP_DEPTH:
            raise DumpRefused(f"nests deeper than {MAX_DUMP_DEPTH} levels; not a Flight Recorder dump")
        on_path.add(key)
        work.append((value, depth, True))
        work.extend((child, depth + 1, False) for child in _children(value))


def _children(value: list[Any] | tuple[Any, ...] | dict[Any, Any]) -> list[Any]:
    return [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)


def _dump_rank(dump: dict[str, Any], path: str) -> int | None:
    rank = dump.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < _INT_LIMIT:
        return rank
    digits = re.search(r"(\d{1,9})(?:\.\w+)?$", os.path.basename(path))  # FR names files <prefix><rank>
    return int(digits.group(1)) if digits else None


def _pg_ranks(config: Any) -> dict[str, tuple[int, ...]]:
    found: dict[str, tuple[int, ...]] = {}
    if not isinstance(config, dict):
        return found
    for name, value in config.items():
        ranks = value.get("ranks") if isinstance(value, dict) else None
        try:
            parsed = json.loads(ranks) if isinstance(ranks, str) else ranks
            found[str(name)] = tuple(int(r) for r in parsed or ())
        except Exception:  # unparseable: members are inferred from the entries instead
            continue
    return found


def _fr_event(
    entry: dict[str, Any], rank: int, configs: dict[str, tuple[int, ...]]
) -> CollectiveEvent | None:
    group_field = entry.get("process_group") or ("", "")
    group = _text(group_field[0] if isinstance(group_field, (list, tuple)) and group_field else group_field)
    p2p = bool(entry.get("is_p2p"))
    seq = int(entry.get("p2p_seq_id" if p2p else "collective_seq_id") or 0)
    if seq <= 0:
        return None
    # Raw gloo dumps key pg_config by "" while entries name the group "0": fall back to the only one.
    ranks = configs.get(group) or (next(iter(configs.values())) if len(configs) == 1 else ())
    created = float(entry.get("time_created_ns") or 0) / 1e9
    completed_ns = entry.get("time_discovered_completed_ns")
    done = entry.get("state") == "completed" or bool(entry.get("retired"))
    return CollectiveEvent(
        rank=rank,
        group=f"{group}:p2p" if p2p else group,
        group_ranks=ranks,
        seq=seq,
        op=_text(entry.get("profiling_name"), "?").split(":")[-1],
        shapes=tuple(tuple(int(d) for d in size) for size in entry.get("input_sizes") or ()),
        dtypes=tuple(_FR_DTYPES.get(_text(d), _text(d)) for d in entry.get("input_dtypes") or ()),
        site=_fr_site(entry.get("frames") or ()),
        thread=_text(entry.get("thread_name")),
        t_start=created,
        t_end=(float(completed_ns) / 1e9 if completed_ns else created) if done else None,
        group_desc=_text(
            group_field[1] if isinstance(group_field, (list, tuple)) and len(group_field) > 1 else ""
        ),
    )


def _fr_site(frames: Any) -> CallSite:
    """The first frame outside torch (FR frames are innermost first)."""
    if not isinstance(frames, (list, tuple)):
        return CallSite()
    user = [f for f in frames if isinstance(f, dict) and not _TORCH_FILE.search(_text(f.get("filename")))]
    if not user:
        return CallSite()
    first = user[0]
    stack = tuple(
        f"{_text(f.get('filename'))}:{_text(f.get('line'))} in {_text(f.get('name'))}" for f in user[:4]
    )
    return CallSite(_text(first.get("filename")), int(first.get("line", 0)), _text(first.get("name")), stack)


FIELD_CHARS = 4096  # a name, file or description longer than this is cut: it is damage, not a name


def _text(value: Any, default: str = "") -> str:
    """A dump's text field: a string or a number as text; anything else (a nest of lists) is the
    default, never formatted."""
    if isinstance(value, str):
        return value[:FIELD_CHARS]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)[:FIELD_CHARS]
    return default


# ---------------------------------------------------------------------------------------------
# Analysis


def analyze(traces: list[RankTrace], problems: list[Problem] | tuple[Problem, ...] = ()) -> Analysis:
    """The cross-rank findings; `problems` (from load_dir) are carried into the report."""
    events = {trace.rank: trace.events for trace in traces}
    by_group: dict[str, dict[int, dict[int, CollectiveEvent]]] = {}
    members: dict[str, set[int]] = {}
    for rank, rank_events in events.items():
        for event in rank_events:
            by_group.setdefault(event.group, {}).setdefault(rank, {})[event.seq] = event
            members.setdefault(event.group, set()).update(event.group_ranks or (rank,))
            members[event.group].add(rank)
    divergences: list[Divergence] = []
    missing: list[Missing] = []
    p2p: list[P2PFinding] = []
    swaps: list[Swap] = []
    groups = []
    for group in sorted(by_group, key=group_order):
        ranks_events = by_group[group]
        groups.append(
            (group, tuple(sorted(members[group])), max(max(seqs) for seqs in ranks_events.values()))
        )
        if group.endswith(":p2p"):  # sends and receives pair up across ranks, not by sequence
            p2p.extend(_p2p_findings(group, ranks_events, set(events)))
            continue
        found_divergences = _divergences(group, ranks_events)
        divergences.extend(found_divergences)
        mismatch_at = next((d.seq for d in found_divergences if d.kind == "mismatch"), None)
        swap = _swap(group, ranks_events, mismatch_at)
        if swap is not None:
            swaps.append(swap)
        found = _missing(group, ranks_events, members[group] & set(events))
        if found is not None:
            missing.append(found)
    return Analysis(
        ranks=tuple(sorted(events)),
        groups=tuple(groups),
        divergences=tuple(divergences),
        missing=tuple(missing),
        summaries=tuple(_summary(trace) for trace in sorted(traces, key=lambda t: t.rank)),
        reports=tuple(report for trace in traces for report in trace.reports),
        events=events,
        p2p=tuple(p2p),
        problems=(*problems, *(problem for trace in traces for problem in trace.problems)),
        unreadable=sum(trace.unreadable for trace in traces),
        lost=sum(trace.lost for trace in traces),
        swaps=tuple(swaps),
        timeline=_timeline(traces, by_group, divergences, p2p),
    )


def _timeline(
    traces: list[RankTrace],
    by_group: dict[str, dict[int, dict[int, CollectiveEvent]]],
    divergences: list[Divergence],
    p2p: list[P2PFinding],
) -> Timeline:
    """The Timeline of events held in memory."""
    events = {trace.rank: trace.events for trace in traces}
    starts = [event.t_start for rank_events in events.values() for event in rank_events]
    origin = min(starts) if starts else 0.0
    latest = {
        rank: max((e.t_end or e.t_start for e in rank_events), default=origin)
        for rank, rank_events in events.items()
    }
    last = {
        rank: max(rank_events, key=lambda event: event.t_start)
        for rank, rank_events in events.items()
        if rank_events
    }
    named = [(rank, d.group, d.seq) for d in divergences for ranks in d.ranks for rank in ranks]
    named += [(rank, f.group, seq) for f in p2p for rank, seq in f.events]
    found = ((key, by_group.get(key[1], {}).get(key[0], {}).get(key[2])) for key in named)
    return Timeline(
        origin=origin,
        end=max([e.t_end or e.t_start for es in events.values() for e in es], default=origin),
        latest=latest,
        last=last,
        starts={key: event.t_start for key, event in found if event is not None},
        paths={trace.rank: trace.path for trace in traces},
    )


def group_order(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isascii() and name.isdigit() and len(name) < 12 else (1 << 40, name)


def _divergences(group: str, ranks_events: dict[int, dict[int, CollectiveEvent]]) -> list[Divergence]:
    """The first mismatch of the group, and the first call-site divergence before it."""
    found: list[Divergence] = []
    all_seqs = sorted({seq for seqs in ranks_events.values() for seq in seqs})
    for seq in all_seqs:
        present = {rank: seqs[seq] for rank, seqs in ranks_events.items() if seq in seqs}
        split = split_at(present, sites_too=not found)
        if split is not None:
            found.append(divergence_of(group, seq, *split, present))
            if split[0] == "mismatch":
                return found  # later sequence numbers are misaligned: the first one is the answer
    return found


def split_at(
    present: dict[int, CollectiveEvent], sites_too: bool
) -> tuple[str, list[tuple[int, ...]]] | None:
    """How the ranks' events at one sequence number (rank -> event) split: ("mismatch", variants)
    when they are different collectives, else ("callsite", variants) when `sites_too` and they come
    from different lines, else None."""
    if len(present) < 2:
        return None
    variants = _variants(present, lambda event: event.signature)
    if len(variants) > 1:
        return "mismatch", variants
    if sites_too:
        sites = _variants(present, lambda event: event.site.short)
        if len(sites) > 1:
            return "callsite", sites
    return None


def _swap(group: str, ranks_events: dict[int, dict[int, CollectiveEvent]], before: int | None) -> Swap | None:
    """The first swapped pair of the group before its first mismatch."""
    search = SwapSearch(group)
    for seq in sorted({seq for seqs in ranks_events.values() for seq in seqs}):
        if before is not None and seq >= before:
            break
        found = search.step({rank: seqs[seq] for rank, seqs in ranks_events.items() if seq in seqs})
        if found is not None:
            return found
    return None


class SwapSearch:
    """Looks for a swapped pair one sequence number at a time, in order: per pair of ranks, the
    last SWAP_WINDOW sequence numbers where their call sites and operands differ are searched for
    two that cross."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.splits: dict[tuple[int, int], deque[tuple[CollectiveEvent, CollectiveEvent]]] = {}

    def step(self, present: dict[int, CollectiveEvent]) -> Swap | None:
        """The swap completed by this sequence number's events (rank -> event), if any."""
        if len({event.site.short for event in present.values()}) < 2:
            return None
        ranks = sorted(present)
        for index, low in enumerate(ranks):
            for high in ranks[index + 1 :]:
                one, two = present[low], present[high]
                if one.site.short == two.site.short or one.site.operand == two.site.operand:
                    continue
                recent = self.splits.setdefault((low, high), deque(maxlen=SWAP_WINDOW))
                for old_one, old_two in recent:
                    if crosses(
                        (old_one.site.operand, old_two.site.operand), (one.site.operand, two.site.operand)
                    ):
                        return Swap(self.group, (_use(old_one), _use(old_two), _use(one), _use(two)))
                recent.append((one, two))
        return None


def _use(event: CollectiveEvent) -> Use:
    return Use(event.rank, event.seq, event.describe, event.site.operand, event.site.short)


def _variants(present: dict[int, CollectiveEvent], key: Any) -> list[tuple[int, ...]]:
    """Ranks grouped by `key`, largest group first, ties broken by lowest rank (no trusted rank)."""
    classes: dict[str, list[int]] = {}
    for rank in sorted(present):
        classes.setdefault(key(present[rank]), []).append(rank)
    return sorted((tuple(ranks) for ranks in classes.values()), key=lambda ranks: (-len(ranks), ranks[0]))


def divergence_of(
    group: str, seq: int, kind: str, variants: list[tuple[int, ...]], present: dict[int, CollectiveEvent]
) -> Divergence:
    sides = tuple(Side.of(present[ranks[0]]) for ranks in variants)
    return Divergence(group, seq, kind, sides, tuple(variants))


def _missing(
    group: str, ranks_events: dict[int, dict[int, CollectiveEvent]], members: set[int]
) -> Missing | None:
    """The earliest collective of the group that some traced member never issued."""
    counts = {rank: max(ranks_events[rank]) if rank in ranks_events else 0 for rank in members}
    if not counts:
        return None
    lowest = min(counts.values())
    if lowest == max(counts.values()):
        return None
    # lowest + 1 in a whole trace; the next one present where lines were lost or are malformed.
    seq = min(number for seqs in ranks_events.values() for number in seqs if number > lowest)
    behind = tuple(sorted(rank for rank, count in counts.items() if count == lowest))
    issuer = min(rank for rank, seqs in ranks_events.items() if seq in seqs)
    return Missing(group, seq, behind, Side.of(ranks_events[issuer][seq]))


def _p2p_findings(
    group: str, ranks_events: dict[int, dict[int, CollectiveEvent]], traced: set[int]
) -> list[P2PFinding]:
    """Per channel, the first pair that disagrees and the first send or recv left unmatched."""
    found: list[P2PFinding] = []
    channels = pairs(event for seqs in ranks_events.values() for event in seqs.values())
    for channel_pairs in channels.values():
        mismatch = next((pair for pair in channel_pairs if not pair.agrees), None)
        lone = next((pair for pair in channel_pairs if pair.send is None or pair.recv is None), None)
        found.extend(channel_findings(group, mismatch, lone, traced))
    return found


def channel_findings(
    group: str, mismatch: Pair | None, lone: Pair | None, traced: set[int]
) -> list[P2PFinding]:
    """The findings of one channel: its first pair that disagrees (`mismatch`), and its first send
    or recv left unmatched (`lone`)."""
    found: list[P2PFinding] = []
    if mismatch is not None and mismatch.send is not None and mismatch.recv is not None:
        sides = (Side.of(mismatch.send), Side.of(mismatch.recv))
        found.append(P2PFinding(group, "mismatch", _where(mismatch), sides, _ranks_seqs(mismatch)))
    if lone is not None:
        found.extend(_unmatched(group, lone, traced))
    return found


def _unmatched(group: str, pair: Pair, traced: set[int]) -> list[P2PFinding]:
    """A send never received or a recv never sent; only when the peer was traced (an untraced
    rank's sends and recvs are unknown, not missing)."""
    if pair.recv is None and pair.send is not None:
        issued, absent, absent_op = pair.send, pair.channel.dst, "recv"
    elif pair.send is None and pair.recv is not None:
        issued, absent, absent_op = pair.recv, pair.channel.src, "send"
    else:
        return []
    if absent not in traced:
        return []
    sides = (Side.of(issued),)
    return [P2PFinding(group, "unmatched", _where(pair), sides, _ranks_seqs(pair), absent, absent_op)]


def _where(pair: Pair) -> str:
    return pair.channel.where(pair.k)


def _ranks_seqs(pair: Pair) -> tuple[tuple[int, int], ...]:
    return tuple((event.rank, event.seq) for event in (pair.send, pair.recv) if event is not None)


def _summary(trace: RankTrace) -> RankSummary:
    last = max(trace.events, key=lambda event: event.t_start) if trace.events else None
    return RankSummary(
        trace.rank, trace.source, len(trace.events), Side.of(last) if last else None, trace.exited, trace.path
    )


# ---------------------------------------------------------------------------------------------
# Rendering


def render_text(analysis: Analysis) -> str:
    lines = [
        f"collcheck trace: {_plural(len(analysis.ranks), 'rank')}, {_plural(len(analysis.groups), 'group')}"
    ]
    for group, members, count in analysis.groups:
        parent, creation, _ = group.partition(CREATE_SUFFIX)
        listed = _ranks_text(members)
        if creation:
            lines.append(f"groups created from group {parent} (ranks {listed}): {_plural(count, 'group')}")
        else:
            lines.append(f"group {group} (ranks {listed}): {_plural(count, 'collective')}")
        for divergence in (d for d in analysis.divergences if d.group == group):
            label = "first divergence" if divergence.kind == "mismatch" else "warning: call sites differ"
            lines.append(f"  {label}: {divergence.text}")
            for side, ranks in zip(divergence.sides, divergence.ranks, strict=False):
                lines.append(f"    {_plural_label(ranks)}: {side.describe} at {side.stack_text}")
        for swap in (s for s in analysis.swaps if s.group == group):
            lines.append(f"  {swap.text}")
        for item in (m for m in analysis.missing if m.group == group):
            lines.append(f"  never issued: {item.text}")
        for finding in (f for f in analysis.p2p if f.group == group):
            label = "first mismatch" if finding.kind == "mismatch" else "never matched"
            lines.append(f"  {label}: {finding.text}")
            for side in finding.sides:
                lines.append(f"    rank {side.rank}: {side.describe} at {side.stack_text}")
    lines.append("per rank:")
    for summary in analysis.summaries:
        lines.append(f"  rank {summary.rank}: {summary.text}")
    if analysis.problems:
        lines.append("could not read:")
        lines.extend(f"  {problem.where}: {problem.text}" for problem in analysis.problems)
        shown = sum(1 for problem in analysis.problems if problem.line)
        if analysis.unreadable > shown:
            lines.append(f"  ({_plural(analysis.unreadable, 'line')} or entries skipped in all)")
    if analysis.reports:
        lines.append("reported at run time:")
        for report in analysis.reports:
            body = report.text.replace("\n", "\n    ")
            lines.append(f"  rank {report.rank} {report.severity} ({report.kind}): {body}")
    verdict = "ranks diverged" if analysis.diverged else undiverged_verdict(analysis)
    if not analysis.diverged and analysis.warnings:
        verdict += " (with call-site warnings)"
    lines.append(f"result: {verdict}")
    return "\n".join(lines)


def undiverged_verdict(analysis: Analysis) -> str:
    """ "consistent" only when everything was read."""
    if not analysis.incomplete:
        return "consistent"
    gaps = []
    if analysis.lost:
        gaps.append(f"{analysis.lost} events lost")
    if analysis.unreadable:
        gaps.append(f"{_plural(analysis.unreadable, 'unreadable line')} skipped")
    files = sum(1 for problem in analysis.problems if not problem.line and "events lost" not in problem.text)
    if files:
        gaps.append(f"{_plural(files, 'file problem')}")
    return f"incomplete: {', '.join(gaps)}; no divergence in what could be read"


def _short_frame(frame: str) -> str:
    path, _, rest = frame.partition(":")
    from collcheck.runtime.record import display_path, library_path

    return f"{library_path(path) if _in_package(path) else display_path(path)}:{rest}"


def _in_package(path: str) -> bool:
    from collcheck.runtime.record import PACKAGE_FOLDERS

    return any(folder in PACKAGE_FOLDERS for folder in path.split(os.sep)[:-1])


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _ranks_text(ranks: tuple[int, ...]) -> str:
    return ",".join(map(str, ranks))


def to_json(analysis: Analysis) -> dict[str, Any]:
    def side(s: Side) -> dict[str, Any]:
        return {
            "rank": s.rank,
            "collective": s.describe,
            "site": s.site,
            "stack": list(s.stack),
            "completed": s.completed,
        }

    return {
        "ranks": list(analysis.ranks),
        "diverged": analysis.diverged,
        "groups": [{"name": g, "ranks": list(m), "collectives": c} for g, m, c in analysis.groups],
        "divergences": [
            {
                "group": d.group,
                "seq": d.seq,
                "kind": d.kind,
                "text": d.text,
                "sides": [side(s) for s in d.sides],
                "ranks": [list(r) for r in d.ranks],
            }
            for d in analysis.divergences
        ],
        "missing": [
            {
                "group": m.group,
                "seq": m.seq,
                "ranks": list(m.ranks),
                "issued_by": side(m.issued_by),
                "text": m.text,
            }
            for m in analysis.missing
        ],
        "p2p": [
            {
                "group": base_group(f.group),
                "kind": f.kind,
                "where": f.where,
                "text": f.text,
                "sides": [side(s) for s in f.sides],
                "absent": f.absent,
            }
            for f in analysis.p2p
        ],
        "swaps": [
            {"group": s.group, "text": s.text, "seqs": [u.seq for u in s.uses[::2]]} for s in analysis.swaps
        ],
        "summaries": [
            {
                "rank": s.rank,
                "source": s.source,
                "collectives": s.collectives,
                "last": side(s.last) if s.last else None,
                "exited": s.exited,
                "text": s.text,
            }
            for s in analysis.summaries
        ],
        "reports": [
            {"rank": r.rank, "kind": r.kind, "severity": r.severity, "text": r.text} for r in analysis.reports
        ],
        "problems": [{"path": p.path, "line": p.line, "text": p.text} for p in analysis.problems],
        "unreadable": analysis.unreadable,
        "lost": analysis.lost,
        "incomplete": analysis.incomplete,
    }


def kinds(analysis: Analysis) -> Counter[str]:
    """How many findings of each kind (for one-line summaries)."""
    p2p = [f"p2p {finding.kind}" for finding in analysis.p2p]
    found = [d.kind for d in analysis.divergences] + ["missing"] * len(analysis.missing)
    return Counter(found + ["swap"] * len(analysis.swaps) + p2p)


def _plural_label(ranks: tuple[int, ...]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_ranks_text(ranks)}"
