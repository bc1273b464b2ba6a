"""Which reader takes which file of a trace folder, for the readers that load traces whole.

In: a folder (or one file) path. Out: one RankTrace per trace (trace_model.py): collcheck's JSON
Lines traces read by trace_read.load_json, its binary traces (`.ccbin`, converted or written live
by `collcheck run --trace-format binary`) by trace_binary.load_binary, anything else tried as a
PyTorch Flight Recorder dump (fr_read.load_flight_recorder), and the Problems met on the way.
Where a rank has both a binary trace and its JSON lines, one of them is read (`one_form`), as
`collcheck trace` does. A binary trace cut short at its end (a rank killed mid-write) is a note
of that trace, never an error. Never imports torch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

from collcheck.runtime.fr_read import (
    FlightRecorderDump,
    load_flight_recorder,
    name_rank,
    open_flight_recorder,
    read_flight_recorder,
)
from collcheck.runtime.record import TRACE_PREFIX, TRACE_SUFFIX, CollectiveEvent
from collcheck.runtime.trace_binary import is_binary_trace, json_name_of, load_binary
from collcheck.runtime.trace_model import Problem, RankTrace
from collcheck.runtime.trace_read import (
    PERFETTO_FILE,
    DumpRefused,
    TraceError,
    load_json,
)


def load_dir(path: str, problems: list[Problem] | None = None) -> list[RankTrace]:
    """Every trace and dump in `path`; files refused as unsafe are added to `problems`."""
    if not os.path.isdir(path):
        raise TraceError(f"{path}: not a directory")
    traces: list[RankTrace] = []
    for name in one_form(path, sorted(os.listdir(path))):
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            continue
        try:
            trace = load_file(full)
        except DumpRefused as refused:
            if problems is not None:
                problems.append(Problem(full, 0, str(refused), refused.skipped, name_rank(full)))
            continue
        if trace is not None:
            traces.append(trace)
    if not traces:
        raise TraceError(f"{path}: no collcheck traces or Flight Recorder dumps found")
    return traces


def load_file(path: str) -> RankTrace | None:
    """A collcheck trace (JSON or binary), a Flight Recorder dump, or None for any other file.
    Raises DumpRefused for a pickle that is not plain data, or a dump over MAX_DUMP_BYTES."""
    name = os.path.basename(path)
    if is_binary_trace(name):
        return load_binary(path)
    if name.startswith(TRACE_PREFIX) and name.endswith(TRACE_SUFFIX):
        return load_json(path)
    if name == PERFETTO_FILE:  # gigabytes for a big job: never read as a possible JSON dump
        return None
    return load_flight_recorder(path)


def open_dump(path: str) -> tuple[RankTrace, Iterator[CollectiveEvent]] | None:
    """A file that is not a collcheck trace as a Flight Recorder dump whose events are made as
    they are taken (fr_read.read_flight_recorder), or None. Raises DumpRefused."""
    if os.path.basename(path) == PERFETTO_FILE:
        return None
    return read_flight_recorder(path)


def open_dump_reader(path: str) -> FlightRecorderDump | None:
    """open_dump's dump opened, for a reader that counts entries from columns (fr_prefix.py)."""
    if os.path.basename(path) == PERFETTO_FILE:
        return None
    return open_flight_recorder(path)


def one_form(path: str, names: list[str]) -> list[str]:
    """`names` with one file per trace: where a binary trace and its JSON lines are both there,
    the binary one when it is as new as the JSON lines (converted after their last write)."""
    present = set(names)
    for name in names:
        json_name = json_name_of(name) if is_binary_trace(name) else None
        # Only a regular file competes: a folder or FIFO is skipped later, and must not take the
        # JSON lines' place.
        if json_name is not None and json_name in present and os.path.isfile(os.path.join(path, name)):
            newer = _mtime(os.path.join(path, name)) >= _mtime(os.path.join(path, json_name))
            present.discard(json_name if newer else name)
    return [name for name in names if name in present]


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return -math.inf
