"""Trace events and the per-rank JSON Lines writer.

Every line is one self-describing JSON object with an `ev` field. Lines are written and flushed as
events happen, so a rank that is killed leaves a trace that is intact up to its last collective.
This module is shared by the tracer (which writes) and the offline analyzer (which reads), and it
never imports torch.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

SCHEMA_VERSION = 1
TRACE_PREFIX = "collcheck-rank"
TRACE_SUFFIX = ".jsonl"


def trace_file_name(rank: int) -> str:
    return f"{TRACE_PREFIX}{rank}{TRACE_SUFFIX}"


@dataclass(frozen=True)
class CallSite:
    """Where user code issued a collective: the first frame outside torch and collcheck."""

    file: str = ""
    line: int = 0
    func: str = ""
    stack: tuple[str, ...] = ()  # "file:line in func", innermost first
    via: str = ""  # "main-thread" when the collective ran on a thread without user frames (DDP hooks)

    @property
    def short(self) -> str:
        if not self.file:
            return "<no python frame>"
        return f"{display_path(self.file)}:{self.line}"


@functools.lru_cache(maxsize=4096)
def display_path(path: str) -> str:
    """Relative to the working directory when inside it, so reports read `train.py:13`."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # a different drive on Windows
        return path
    return path if relative.startswith("..") else relative


@dataclass
class CollectiveEvent:
    """One collective as issued by one rank (`ev: "coll"`)."""

    rank: int
    group: str
    group_ranks: tuple[int, ...]
    seq: int  # 1-based, per group, counted by collcheck on this rank
    op: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    reduce_op: str | None = None
    root: int | None = None  # global rank of the root / peer, where the op has one
    site: CallSite = field(default_factory=CallSite)
    thread: str = ""
    t_start: float = 0.0
    t_end: float | None = None  # filled from the matching `done` line when completion was observed
    group_desc: str = ""
    observable: bool = True  # False after an `unobserved` line: the backend offers no completion

    @property
    def signature(self) -> str:
        """What must agree across ranks, call site excluded."""
        return "|".join(
            (self.op, repr(self.shapes), ",".join(self.dtypes), str(self.reduce_op), str(self.root))
        )

    @property
    def describe(self) -> str:
        """`all_reduce(float32[1024])`, or `all_reduce(float32[1024], op=max)` when not a sum."""
        if self.shapes:
            pairs = zip(self.shapes, self.dtypes, strict=False)
            tensors = ", ".join(f"{dtype}[{'x'.join(map(str, shape))}]" for shape, dtype in pairs)
        else:  # ops whose shapes may legitimately differ (all_to_all) record dtypes only
            tensors = ", ".join(self.dtypes)
        extras = []
        if self.reduce_op not in (None, "sum"):
            extras.append(f"op={self.reduce_op}")
        if self.root is not None:
            extras.append(f"root={self.root}")
        return f"{self.op}({', '.join(filter(None, [tensors, *extras]))})"

    def to_json(self) -> dict[str, Any]:
        # Built by hand: dataclasses.asdict deep-copies and is several times slower on the hot path.
        site = self.site
        return {
            "ev": "coll",
            "rank": self.rank,
            "group": self.group,
            "group_ranks": self.group_ranks,
            "seq": self.seq,
            "op": self.op,
            "shapes": self.shapes,
            "dtypes": self.dtypes,
            "reduce_op": self.reduce_op,
            "root": self.root,
            "site": {
                "file": site.file,
                "line": site.line,
                "func": site.func,
                "stack": site.stack,
                "via": site.via,
            },
            "thread": self.thread,
            "t_start": self.t_start,
            "group_desc": self.group_desc,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CollectiveEvent:
        site = data.get("site") or {}
        return cls(
            rank=int(data["rank"]),
            group=str(data["group"]),
            group_ranks=tuple(int(r) for r in data.get("group_ranks", ())),
            seq=int(data["seq"]),
            op=str(data["op"]),
            shapes=tuple(tuple(int(d) for d in shape) for shape in data.get("shapes", ())),
            dtypes=tuple(str(d) for d in data.get("dtypes", ())),
            reduce_op=data.get("reduce_op"),
            root=data.get("root"),
            site=CallSite(
                file=str(site.get("file", "")),
                line=int(site.get("line", 0)),
                func=str(site.get("func", "")),
                stack=tuple(site.get("stack", ())),
                via=str(site.get("via", "")),
            ),
            thread=str(data.get("thread", "")),
            t_start=float(data.get("t_start", 0.0)),
            group_desc=str(data.get("group_desc", "")),
        )


@dataclass(frozen=True)
class DoneEvent:
    """Completion of a collective, where the backend's future reported it (`ev: "done"`)."""

    group: str
    seq: int
    t_end: float
    ok: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"ev": "done", "group": self.group, "seq": self.seq, "t_end": self.t_end, "ok": self.ok}


@dataclass(frozen=True)
class ReportEvent:
    """A finding the tracer made at run time (`ev: "report"`): mismatch, call-site warning, stall."""

    kind: str  # "mismatch", "callsite", "stall", "degraded"
    severity: str  # "error" or "warning"
    text: str
    t: float
    rank: int

    def to_json(self) -> dict[str, Any]:
        return {"ev": "report", **asdict(self)}


class TraceWriter:
    """Appends one JSON line per event and flushes it at once (a killed rank keeps its trace)."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        # Line buffering: every write() of a complete line reaches the OS immediately.
        self._file: TextIO = open(path, "w", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._lock = threading.Lock()

    def write(self, data: dict[str, Any]) -> None:
        line = json.dumps(data, separators=(",", ":")) + "\n"
        with self._lock:
            if not self._file.closed:
                self._file.write(line)

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_trace(path: str) -> list[dict[str, Any]]:
    """Every complete JSON line of a trace; a torn last line (the rank died mid-write) is skipped."""
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows
