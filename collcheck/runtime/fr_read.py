"""PyTorch Flight Recorder dumps as collcheck events, read without unpickling them.

In: a file path. Out: its RankTrace (trace_model.py) whole (`load_flight_recorder`), or its events
one at a time (`flight_recorder_events`, for the Perfetto export), with the Problems met on the way.
A dump is a pickle (`_dump_fr_trace`, or a file written through `TORCH_FR_DUMP_TEMP_FILE`) or JSON
(`_dump_fr_trace_json`). A trace folder is untrusted input: a pickle is read only when its first
bytes are a protocol 2-5 header and an empty dict (how torch writes a dump), at most MAX_DUMP_BYTES,
by fr_pickle.py's decoder, which builds plain data only and refuses every opcode that could call,
import or name something; what it builds is bounded as if every shared container were copied
where it stands (MAX_DUMP_NODES, MAX_DUMP_DEPTH). Entries that fr_pickle.py read as a run (the same
bytes but for their numbers) become events from one event per distinct shape: only the sequence
number and the times are taken per entry.
Never imports torch.
"""

from __future__ import annotations

import json
import os
import re
from array import array
from collections import Counter
from collections.abc import Iterator
from typing import Any

from collcheck.runtime.fr_pickle import CorruptPickle, EntryRun, Shape, decode
from collcheck.runtime.record import CallSite, CollectiveEvent
from collcheck.runtime.trace_model import RankTrace
from collcheck.runtime.trace_read import INT_LIMIT, DumpRefused, DumpUnreadable, checked_event, short_error

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

# Bounds on what one dump may cost: FR's ring buffer holds 2,000 entries by default (a few MB).
MAX_DUMP_BYTES = 256 * 1024 * 1024
MAX_DUMP_ENTRIES = 1_000_000
_PICKLE_DICT = b"}"  # EMPTY_DICT: a dump's top level
_PICKLE_FRAME = b"\x95"  # FRAME (protocol 4+), 8 bytes of length, then the first opcode
_PROTO = 0x80


def load_flight_recorder(path: str) -> RankTrace | None:
    """A Flight Recorder dump, or None for a file that is none. Raises DumpRefused for a pickle
    that is not plain data, or a dump over MAX_DUMP_BYTES."""
    read = read_flight_recorder(path)
    if read is None:
        return None
    trace, events = read
    trace.events.extend(events)
    return trace


def open_flight_recorder(path: str) -> FlightRecorderDump | None:
    """A Flight Recorder dump opened (decoded, no event made yet), or None for a file that is
    none. Raises DumpRefused as load_flight_recorder."""
    read = _open_dump(path)
    return FlightRecorderDump(*read) if read is not None else None


def read_flight_recorder(path: str) -> tuple[RankTrace, Iterator[CollectiveEvent]] | None:
    """A Flight Recorder dump as its trace (no events in it) and its events, made one at a time
    from the decoded dump as they are taken (an unusable entry is noted in the trace when its
    turn comes); None for a file that is none. Raises DumpRefused as load_flight_recorder."""
    read = _open_dump(path)
    if read is None:
        return None
    trace, entries, configs = read
    return trace, _noted(trace, entries, configs)


def flight_recorder_events(path: str) -> Iterator[CollectiveEvent]:
    """The events of the dump at `path` in order, made one at a time (none kept); nothing when
    the file is not a dump or is refused."""
    try:
        read = read_flight_recorder(path)
    except DumpRefused:
        return
    if read is not None:
        yield from read[1]


def _noted(
    trace: RankTrace, entries: list[Any], configs: dict[str, tuple[int, ...]]
) -> Iterator[CollectiveEvent]:
    for _, event in _indexed(trace, entries, configs, 0):
        yield event


def _indexed(
    trace: RankTrace, entries: list[Any], configs: dict[str, tuple[int, ...]], start: int
) -> Iterator[tuple[int, CollectiveEvent]]:
    """(entry index, event) from entry `start` on; unusable entries are noted in the trace."""
    for index, event, error in _events(entries, trace.rank, configs, start):
        if event is not None:
            yield index, event
        elif error is not None:
            trace.note(0, f"entry {index}: unusable ({error})")
    if _entry_count(entries) > MAX_DUMP_ENTRIES:
        trace.note(0, f"only the first {MAX_DUMP_ENTRIES} entries read", skipped=False)


class FlightRecorderDump:
    """An opened dump: its trace (no events in it), its decoded entries and its group configs,
    for a reader that takes its events from an entry on (`events`) and counts the entries before
    it from their columns (`columns`, fr_columns.py)."""

    def __init__(self, trace: RankTrace, entries: list[Any], configs: dict[str, tuple[int, ...]]) -> None:
        self.trace, self.entries, self.configs = trace, entries, configs

    def events(self, start: int = 0) -> Iterator[tuple[int, CollectiveEvent]]:
        """(entry index, event) of the entries from `start` on, made one at a time; an unusable
        entry is noted in the trace when its turn comes."""
        return _indexed(self.trace, self.entries, self.configs, start)

    def entry_count(self) -> int:
        """The entries read (at most MAX_DUMP_ENTRIES)."""
        return min(_entry_count(self.entries), MAX_DUMP_ENTRIES)

    def items(self) -> Iterator[tuple[int, Any]]:
        """Each top-level item of the entries list (a dict, another value, or an EntryRun) with
        the index of its first entry, up to MAX_DUMP_ENTRIES entries."""
        index = 0
        for item in self.entries:
            if index >= MAX_DUMP_ENTRIES:
                return
            yield index, item
            index += item.count if isinstance(item, EntryRun) else 1

    def entry_event(self, entry: Any) -> tuple[CollectiveEvent | None, str | None]:
        """The event of a plain entry, or None and why it is unusable (None: no collective)."""
        try:
            event = _fr_event(entry, self.trace.rank, self.configs) if isinstance(entry, dict) else None
            return (checked_event(event) if event is not None else None), None
        except _UNUSABLE as error:
            return None, short_error(error)

    def run_models(self, run: EntryRun) -> RunModels:
        return RunModels(run, self.trace.rank, self.configs)


class RunModels:
    """The models of a run's shapes (one event per distinct value of the numbers an event depends
    on besides seq and times), for reading a run's events as columns."""

    def __init__(self, run: EntryRun, rank: int, configs: dict[str, tuple[int, ...]]) -> None:
        self.shapes = [
            _ShapeModels(shape, columns, rank, configs)
            for shape, columns in zip(run.shapes, run.columns, strict=True)
        ]

    def keyed(self, kind: int) -> list[array[int]]:
        """The columns of shape `kind` whose values pick its model."""
        return self.shapes[kind].keyed

    def model(self, kind: int, key: tuple[int, ...], row: int) -> ModelView:
        """The model of shape `kind`'s entries with numbers `key` (first met at `row`)."""
        models = self.shapes[kind]
        made = models.models.get(key)
        if made is None:
            made = models.model(key, row)
        return ModelView(made)


class ModelView:
    """What a reader of columns needs of a _Model: its event (None: unusable or no collective),
    and per row its sequence number and start time."""

    def __init__(self, model: _Model) -> None:
        self.model = model
        self.event = model.event
        self.seq_column = model.seq
        self.created_column = model.created

    def event_at(self, row: int) -> CollectiveEvent | None:
        """The event of the model's entry at `row` of its shape, as _run_events makes it."""
        model = self.model
        if model.event is None:
            return None
        seq = model.event.seq if model.seq is None else int(model.seq[row] or 0)
        return _event_of(model, row, seq)


def _open_dump(path: str) -> tuple[RankTrace, list[Any], dict[str, tuple[int, ...]]] | None:
    dump = _read_dump(path)
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        return None
    rank = _dump_rank(dump, path)
    if rank is None:
        return None
    trace = RankTrace(rank=rank, source="flight-recorder", path=path, exited=None)
    configs = _pg_ranks(dump.get("pg_config"))
    named = {member for members in configs.values() for member in members if 0 <= member < INT_LIMIT}
    trace.members = tuple(sorted(named))  # every one must have left a dump (analyze.absent_ranks)
    return trace, dump["entries"], configs


def _entry_count(entries: list[Any]) -> int:
    return sum(item.count if isinstance(item, EntryRun) else 1 for item in entries)


_Read = tuple[int, CollectiveEvent | None, str | None]
_UNUSABLE = (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError)


def _events(
    entries: list[Any], rank: int, configs: dict[str, tuple[int, ...]], start: int = 0
) -> Iterator[_Read]:
    """(index, event, None), (index, None, why it is unusable), or (index, None, None) for an
    entry that is no collective, for the first MAX_DUMP_ENTRIES entries from entry `start` on."""
    index = 0
    for item in entries:
        if index >= MAX_DUMP_ENTRIES:
            return
        if isinstance(item, EntryRun):
            if index + item.count > start:
                yield from _run_events(item, rank, configs, index, max(0, start - index))
            index += item.count
            continue
        if index < start:
            index += 1
            continue
        try:
            event = _fr_event(item, rank, configs) if isinstance(item, dict) else None
            yield index, checked_event(event) if event is not None else None, None
        except _UNUSABLE as error:
            yield index, None, short_error(error)
        index += 1


def _run_events(
    run: EntryRun, rank: int, configs: dict[str, tuple[int, ...]], first: int, skipped: int = 0
) -> Iterator[_Read]:
    """The events of a run's entries past its first `skipped`: each a copy of its _Model's event
    with the entry's sequence number and times, read from the run's columns."""
    shapes = [
        _ShapeModels(shape, columns, rank, configs)
        for shape, columns in zip(run.shapes, run.columns, strict=True)
    ]
    before = Counter(run.kinds[:skipped])  # rows of each shape skipped
    at = [before.get(kind, 0) for kind in range(len(shapes))]
    kinds = run.kinds[skipped : max(skipped, MAX_DUMP_ENTRIES - first)]
    for index, kind in enumerate(kinds, first + skipped):
        row = at[kind]
        at[kind] = row + 1
        models = shapes[kind]
        keyed = models.keyed
        key = tuple([column[row] for column in keyed]) if keyed else ()
        model = models.models.get(key)
        if model is None:
            model = models.model(key, row)
        event = model.event
        if event is None:
            yield index, None, model.error
            continue
        seq = event.seq if model.seq is None else int(model.seq[row] or 0)
        if seq <= 0:
            yield index, None, None
            continue
        if seq >= INT_LIMIT:
            yield index, None, f"out of range: {str(seq)[:40]}"
            continue
        yield index, _event_of(model, row, seq), None


# The entry's fields that an event is made of; a number elsewhere in an entry changes nothing.
_SEQ_FIELDS = ("collective_seq_id", "p2p_seq_id")
_CREATED, _COMPLETED = "time_created_ns", "time_discovered_completed_ns"
_FIELDS_READ = frozenset(
    (*_SEQ_FIELDS, _CREATED, _COMPLETED, "is_p2p", "process_group", "profiling_name", "state",
     "retired", "input_sizes", "input_dtypes", "frames", "thread_name")
)  # fmt: skip


class _Model:
    """The event of entries of one shape whose numbers outside seq and times agree, and the columns
    their seq and times come from (None: the value in the model, the same in every entry)."""

    def __init__(
        self, shape: Shape, columns: tuple[Any, ...], row: int, rank: int, configs: dict[str, tuple[int, ...]]
    ) -> None:
        direct = {path[0]: index for index, path in enumerate(shape.paths) if len(path) == 1}
        entry = fill(shape.template, shape.paths, tuple(column[row] for column in columns))
        self.error: str | None = None
        self.event: CollectiveEvent | None = None
        field = _SEQ_FIELDS[1] if isinstance(entry, dict) and entry.get("is_p2p") else _SEQ_FIELDS[0]
        slots = (direct.get(field), direct.get(_CREATED), direct.get(_COMPLETED))
        self.seq, self.created, self.completed = (columns[i] if i is not None else None for i in slots)
        self.completed_ns = entry.get(_COMPLETED) if isinstance(entry, dict) else None
        if self.seq is not None:  # a stand-in: the model must not be dropped for this entry's number
            entry[field] = 1
        try:
            event = _fr_event(entry, rank, configs) if isinstance(entry, dict) else None
            self.event = checked_event(event) if event is not None else None
        except _UNUSABLE as error:
            self.error = short_error(error)
        self.done = self.event is not None and self.event.t_end is not None
        self.state = dict(self.event.__dict__) if self.event is not None else {}


class _ShapeModels:
    """The _Models of one shape of a run, by the values of the numbers an event depends on
    besides seq and times (a frame's line number, a size)."""

    def __init__(
        self, shape: Shape, columns: tuple[Any, ...], rank: int, configs: dict[str, tuple[int, ...]]
    ) -> None:
        self.shape, self.columns, self.rank, self.configs = shape, columns, rank, configs
        # A number the same in every entry of the run (a size, a line) needs no key.
        varying = [columns[index] for index in _depends_on(shape)]
        self.keyed = [column for column in varying if column.count(column[0]) != len(column)]
        self.models: dict[tuple[int, ...], _Model] = {}

    def model(self, key: tuple[int, ...], row: int) -> _Model:
        made = self.models[key] = _Model(self.shape, self.columns, row, self.rank, self.configs)
        return made


def _event_of(model: _Model, row: int, seq: int) -> CollectiveEvent:
    """The event of the model's entry at `row` of its shape, its numbers cut from the columns:
    a copy of the model's state, no constructor run (one per entry on the fast path)."""
    state = model.state.copy()
    state["seq"] = seq
    if model.created is not None:
        state["t_start"] = float(model.created[row] or 0) / 1e9
    if model.done:
        completed = model.completed[row] if model.completed is not None else model.completed_ns
        state["t_end"] = float(completed) / 1e9 if completed else state["t_start"]
    event: CollectiveEvent = object.__new__(CollectiveEvent)
    event.__dict__ = state
    return event


def _depends_on(shape: Shape) -> tuple[int, ...]:
    """The Slots of `shape` other than seq and times that an event reads."""
    plain = {_SEQ_FIELDS[0], _SEQ_FIELDS[1], _CREATED, _COMPLETED}
    return tuple(
        index
        for index, path in enumerate(shape.paths)
        if path[0] in _FIELDS_READ and not (len(path) == 1 and path[0] in plain)
    )


def plain_dump(path: str) -> Any:
    """The dump at `path` as plain values (every entry a dict: no EntryRun), as `_read_dump`
    bounds and checks it; None when the file is not one (for tools that rewrite dumps). Raises
    DumpRefused (DumpUnreadable for a dump cut short or damaged)."""
    return _read_dump(path, runs=False)


def _read_dump(path: str, runs: bool = True) -> Any:
    """The decoded dump, or None when the file is not one: JSON (starts with `{`) or a pickle whose
    first opcodes are a protocol 2-5 header and an empty dict, as torch writes them. Any other file
    is never decoded. `runs`: entries alike but for their numbers may be EntryRuns. Such a pickle
    that cannot be decoded, or a JSON dump cut short, raises DumpUnreadable: a rank is missing."""
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
        except RecursionError:
            return None
        except ValueError as error:
            if _cut_json_dump(data, error):
                raise DumpUnreadable(_unreadable(path, str(error))) from None
            return None  # another JSON file (a config, JSON lines): not a dump
        check_dump_shape(loaded)
        return loaded
    try:
        loaded = decode(data, runs)
    except CorruptPickle as error:  # begins as torch writes a dump: a dump cut short or damaged
        raise DumpUnreadable(_unreadable(path, str(error))) from None
    _check_decoded(loaded)
    return loaded


def _cut_json_dump(data: bytes, error: ValueError) -> bool:
    """A JSON dump cut short or damaged: it names the entries list, and is not a whole value
    followed by more (JSON lines, which are no dump and stay unread, as before)."""
    return getattr(error, "msg", "") != "Extra data" and b'"entries"' in data


def _unreadable(path: str, why: str) -> str:
    """What is said of a dump that could not be decoded, naming its rank where its file's name
    does (the rank inside the dump is lost with it). A dump is written whole at the end, so its
    entries up to the damage do not say where the rank stopped: none of them is used."""
    rank = name_rank(path)
    whose = f"rank {rank}'s" if rank is not None else "a"
    return (
        f"{whose} Flight Recorder dump could not be read ({why[:200]}): cut short (a rank killed "
        "while writing it) or damaged; its rank is not analysed"
    )


def _dump_kind(head: bytes) -> str | None:
    """ "json", "pickle" or None, from a file's first bytes."""
    if head.lstrip()[:1] == b"{":
        return "json"
    if len(head) < 3 or head[0] != _PROTO or not 2 <= head[1] <= 5:
        return None
    opcode = head[2:3]
    if opcode == _PICKLE_FRAME and len(head) >= 12:
        opcode = head[11:12]
    return "pickle" if opcode == _PICKLE_DICT else None


# A pickle's memo lets one container stand in many places: 600 bytes of lists that share one inner
# list spell out 2**60 leaves once anything formats them. What a dump may hold is bounded as if
# every shared container were copied where it stands (FR's ring holds 2,000 entries of a few dozen
# values each by default; MAX_DUMP_ENTRIES of them would still fit), and its nesting too.
MAX_DUMP_NODES = 50_000_000
MAX_DUMP_DEPTH = 64


def _check_decoded(dump: Any) -> None:
    """check_dump_shape of a decoded pickle whose entries list holds EntryRuns: each of a run's
    entries counts as its shape's template spelled out."""
    entries = dump.get("entries") if isinstance(dump, dict) else None
    runs = [item for item in entries if isinstance(item, EntryRun)] if isinstance(entries, list) else []
    shapes = [(shape, run.kinds.count(kind)) for run in runs for kind, shape in enumerate(run.shapes)]
    sizes = dump_sizes([dump, *(shape.template for shape, _ in shapes)])
    total = sizes[0] + sum(size * count for size, (_, count) in zip(sizes[1:], shapes, strict=True))
    if total > MAX_DUMP_NODES:
        raise DumpRefused(f"holds more than {MAX_DUMP_NODES} values with its shared parts spelled out")


def check_dump_shape(data: Any) -> None:
    """DumpRefused when `data`, with shared containers counted at each place they stand, has more
    than MAX_DUMP_NODES values, nests deeper than MAX_DUMP_DEPTH, or contains itself."""
    dump_sizes([data])


def dump_sizes(roots: list[Any]) -> list[int]:
    """How many values each root holds with shared containers counted at each place they stand;
    DumpRefused past MAX_DUMP_NODES for one container, MAX_DUMP_DEPTH, or a container that holds
    itself. Linear in the distinct containers: each one's expanded size is computed once."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    for root in roots:
        work: list[tuple[Any, int, bool]] = [(root, 0, False)]
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
    return [sizes.get(id(root), 1) for root in roots]


def _children(value: list[Any] | tuple[Any, ...] | dict[Any, Any]) -> list[Any]:
    return [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)


def _dump_rank(dump: dict[str, Any], path: str) -> int | None:
    rank = dump.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < INT_LIMIT:
        return rank
    return name_rank(path)


def name_rank(path: str) -> int | None:
    """The rank a dump's file name gives (its trailing digits), or None."""
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
    seq = int(entry.get(_SEQ_FIELDS[1] if p2p else _SEQ_FIELDS[0]) or 0)
    if seq <= 0:
        return None
    # Raw gloo dumps key pg_config by "" while entries name the group "0": fall back to the only one.
    ranks = configs.get(group) or (next(iter(configs.values())) if len(configs) == 1 else ())
    created = float(entry.get(_CREATED) or 0) / 1e9
    completed_ns = entry.get(_COMPLETED)
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


def materialise(shape: Shape, numbers: tuple[int, ...]) -> Any:
    """An entry of `shape` as plain values: the template with its Slots filled, copied along the
    Slots' paths only (the rest is shared with the template)."""
    return fill(shape.template, shape.paths, numbers)


def fill(template: Any, paths: tuple[tuple[Any, ...], ...], values: tuple[Any, ...]) -> Any:
    """`template` with Slot i replaced by values[i] (see materialise)."""
    copies: dict[tuple[Any, ...], Any] = {}

    def copied(path: tuple[Any, ...]) -> Any:
        if path in copies:
            return copies[path]
        if not path:
            value = template
        else:
            parent = copied(path[:-1])
            value = parent[path[-1]]
        if isinstance(value, (dict, list)):
            value = value.copy()
        elif isinstance(value, tuple):
            value = list(value)  # made a tuple again below
        copies[path] = value
        if path:
            copies[path[:-1]][path[-1]] = value
        return value

    for index, path in enumerate(paths):
        copied(path[:-1])[path[-1]] = values[index]
    # tuples copied as lists become tuples again, innermost first
    for path in sorted((p for p in copies if p), key=len, reverse=True):
        original = _at(template, path)
        if isinstance(original, tuple):
            copies[path[:-1]][path[-1]] = tuple(copies[path])
    root = copies.get((), template)
    return tuple(root) if isinstance(template, tuple) else root


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value
