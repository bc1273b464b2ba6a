"""Reading collcheck's JSON Lines traces and PyTorch Flight Recorder dumps (trace_load.py picks the
reader of each file of a folder).

In: a file path. Out: its RankTrace (trace_model.py) and the Problems met on
the way. Trace folders are untrusted input: every line is bounded and checked before it becomes a
CollectiveEvent, and a Flight Recorder dump is unpickled only when it starts like one and names no
global (plain dicts, lists, tuples, strings, numbers, booleans, None); anything else is refused.
Never imports torch.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import re
from dataclasses import dataclass, replace
from typing import Any

from collcheck.runtime.record import (
    GROUP_LINE,
    LOST,
    TRACE_PREFIX,
    CallSite,
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
    """A file that looked like a Flight Recorder dump and was not read (unsafe or too big)."""


PERFETTO_FILE = "trace.perfetto.json"  # `collcheck trace --format perfetto`'s own output in the folder


MAX_LINE_BYTES = 1 << 20  # a real line is under a few KB; a longer one is skipped unparsed
_INT_LIMIT = 1 << 62  # ranks, sequence numbers, sizes: anything past this is corrupt


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
            event = self._shared(_checked(event, members_checked=members is not None))
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
        if not plain or (ranks and (min(ranks) <= -_INT_LIMIT or max(ranks) >= _INT_LIMIT)):
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


def load_flight_recorder(path: str) -> RankTrace | None:
    """A Flight Recorder dump, or None for a file that is none. Raises DumpRefused for a pickle
    that is not plain data, or a dump over MAX_DUMP_BYTES."""
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
