"""Trace events and the per-rank JSON Lines writer.

Every line is one self-describing JSON object with an `ev` field. Lines are written and flushed as
events happen, so a rank that is killed leaves a trace that is intact up to its last collective.
This module is shared by the tracer (which writes) and the offline analyzer (which reads), and it
never imports torch.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import json
import os
import stat
import sys
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

# 2: each member list is written once per trace, in a `group` line, and `coll` lines name it by
# its `gid`; version 1 put `group_ranks` and `group_desc` on every `coll` line. Readers take both.
SCHEMA_VERSION = 2
GROUP_LINE = "group"  # `{"ev":"group","gid":N,"group":"G","ranks":[...],"desc":"..."}`
TRACE_PREFIX = "collcheck-rank"
TRACE_SUFFIX = ".jsonl"


def trace_file_name(rank: int) -> str:
    return f"{TRACE_PREFIX}{rank}{TRACE_SUFFIX}"


class TraceFormat(Enum):
    """What the tracer writes: JSON lines (this module's TraceWriter) or binary records
    (trace_live.BinaryTraceWriter, `collcheck run --trace-format binary`)."""

    JSON = "json"
    BINARY = "binary"


# Traces hold argv, the working directory and the host name: readable by the owner (and group).
FILE_MODE = 0o640
DIR_MODE = 0o750
ENV_ALLOW_SHARED_DIR = "COLLCHECK_ALLOW_SHARED_DIR"


class UnsafeLocation(OSError):
    """A trace or report location another user controls, or one that is not a plain file."""


def shared_dir_allowed(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(ENV_ALLOW_SHARED_DIR, "").strip().lower() in ("1", "true", "yes", "on")


def check_folder(path: str, allow_shared: bool) -> None:
    """Raise UnsafeLocation when `path` is writable by every user and owned by another: anyone
    could plant a link there under the name of the next file written, or replace a trace."""
    info = os.stat(path)
    if allow_shared or not info.st_mode & stat.S_IWOTH or info.st_uid == os.geteuid():
        return
    raise UnsafeLocation(
        f"{path} is writable by every user and owned by uid {info.st_uid}, so another user could "
        f"replace or redirect the files written there; use a folder of your own, or allow it with "
        f"{ENV_ALLOW_SHARED_DIR}=1 (--allow-shared-trace-dir)"
    )


def make_folder(path: str, allow_shared: bool) -> None:
    """Create `path` (owner and group only) if needed, and check it as `check_folder` does."""
    os.makedirs(path, mode=DIR_MODE, exist_ok=True)
    check_folder(path, allow_shared)


def open_output(path: str, allow_shared: bool) -> int:
    """A descriptor for writing `path`, created FILE_MODE in a folder that passes `check_folder`.
    A symbolic link is never followed and anything but a regular file (a FIFO, a device) refused."""
    make_folder(os.path.dirname(path) or ".", allow_shared)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, FILE_MODE)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnsafeLocation(f"{path} is a symbolic link; collcheck never writes through one") from None
        if error.errno == errno.ENXIO:  # a FIFO nobody reads
            raise UnsafeLocation(f"{path} is not a regular file") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeLocation(f"{path} is not a regular file")
    return fd


def write_output(path: str, text: str, allow_shared: bool) -> None:
    """Write a whole report file through `open_output`."""
    with os.fdopen(open_output(path, allow_shared), "w", encoding="utf-8") as handle:
        handle.write(text)


@dataclass(frozen=True)
class CallSite:
    """Where user code issued a collective: the first frame outside torch and collcheck."""

    file: str = ""
    line: int = 0
    func: str = ""
    stack: tuple[str, ...] = ()  # "file:line in func", innermost first
    via: str = ""  # "main-thread" when the collective ran on a thread without user frames (DDP hooks)
    # The argument expressions of the call at `line` (`a`, `out, grads[i]`), read once per call
    # site from the source: what tells a swapped pair from one collective on two lines. "" = unknown.
    operand: str = ""
    # True when no frame was the user's (a script installed in site-packages calling a library):
    # the site is then the innermost library frame outside torch and collcheck (hook.Tier).
    library: bool = False

    @property
    def short(self) -> str:
        if not self.file:
            return "<no python frame>"
        if self.library:
            return f"{library_path(self.file)}:{self.line} (library)"
        return f"{display_path(self.file)}:{self.line}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "file": self.file,
            "line": self.line,
            "func": self.func,
            "stack": self.stack,
            "via": self.via,
        }
        if self.operand:  # written only when known, so lines without one are unchanged
            data["operand"] = self.operand
        if self.library:  # likewise: user sites' lines are unchanged
            data["library"] = True
        return data

    @functools.cached_property
    def encoded(self) -> str:
        """The `site` object of a `coll` line; the hook reuses one CallSite per call stack, so each
        stack is encoded once."""
        return _dumps(self.to_json())


# Folders of installed packages: code there is a library's, not the user's.
PACKAGE_FOLDERS = ("site-packages", "dist-packages")


@functools.lru_cache(maxsize=4096)
def library_path(path: str) -> str:
    """An installed module's path from its package on, `accelerate/data_loader.py`, as it is
    imported; other library files (the standard library's) as `display_path` shows them."""
    parts = path.split(os.sep)
    for index in range(len(parts) - 2, -1, -1):
        if parts[index] in PACKAGE_FOLDERS:
            return "/".join(parts[index + 1 :])
    return display_path(path)


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
    tag: int | None = None  # send/recv only (c10d's `tag`); written only when known
    # Group creation only (groups.py): what the call asked for, `ranks=[0, 1]`; compared like shapes
    args: str | None = None

    @property
    def signature(self) -> str:
        """What must agree across ranks, call site excluded."""
        return "|".join(
            (self.op, repr(self.shapes), ",".join(self.dtypes), str(self.reduce_op), str(self.root))
            + (() if self.args is None else (self.args,))
        )

    @property
    def describe(self) -> str:
        """`all_reduce(float32[1024])`, or `all_reduce(float32[1024], op=max)` when not a sum."""
        if self.args is not None:  # group creation
            return f"{self.op}({self.args})"
        if self.shapes:
            pairs = zip(self.shapes, self.dtypes, strict=False)
            tensors = ", ".join(f"{dtype}[{'x'.join(map(str, shape))}]" for shape, dtype in pairs)
        else:  # ops whose shapes may legitimately differ (all_to_all) record dtypes only
            tensors = ", ".join(self.dtypes)
        extras = []
        if self.reduce_op not in (None, "sum"):
            extras.append(f"op={self.reduce_op}")
        if self.root is not None:
            extras.append(f"{'peer' if self.group.endswith(':p2p') else 'root'}={self.root}")
        if self.tag:
            extras.append(f"tag={self.tag}")
        return f"{self.op}({', '.join(filter(None, [tensors, *extras]))})"

    def to_json(self, gid: int | None = None) -> dict[str, Any]:
        """The `coll` line: naming its `group` line by `gid`, or (schema 1, gid None) holding the
        member list and description itself."""
        # Built by hand: dataclasses.asdict deep-copies and is several times slower on the hot path.
        site = self.site
        data: dict[str, Any] = {"ev": "coll", "rank": self.rank, "group": self.group}
        if gid is None:
            data["group_ranks"] = self.group_ranks
        else:
            data["gid"] = gid
        data.update(
            seq=self.seq,
            op=self.op,
            shapes=self.shapes,
            dtypes=self.dtypes,
            reduce_op=self.reduce_op,
            root=self.root,
        )
        if self.tag is not None:
            data["tag"] = self.tag
        if self.args is not None:
            data["args"] = self.args
        data.update(site=site.to_json(), thread=self.thread, t_start=self.t_start)
        if gid is None:
            data["group_desc"] = self.group_desc
        return data

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
                operand=str(site.get("operand", "")),
                library=site.get("library") is True,
            ),
            thread=str(data.get("thread", "")),
            t_start=float(data.get("t_start", 0.0)),
            group_desc=str(data.get("group_desc", "")),
            tag=None if data.get("tag") is None else int(data["tag"]),
            args=None if data.get("args") is None else str(data["args"]),
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


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True)
class GroupLine:
    """A member list as a trace names it: its `gid` and its `group` line (newline included),
    which a writer puts before the first `coll` line that names the gid."""

    gid: int
    text: str


def group_line(gid: int, name: str, ranks: tuple[int, ...], desc: str) -> str:
    """The `group` line of one member list, as `json.dumps` of its fields would write it."""
    fields = f'"group":{_dumps(name)},"ranks":{_dumps(ranks)},"desc":{_dumps(desc)}'
    return f'{{"ev":"{GROUP_LINE}","gid":{gid},{fields}}}\n'


class CollectiveEncoder:
    """Encodes `coll` and `done` lines exactly as `json.dumps(event.to_json(gid))` would, from pieces
    cached per member list, per (op, shapes, dtypes, reduce op, root), per call site and per thread:
    a training loop repeats the same few collectives, so only seq and t_start are encoded per event.

    Each distinct (group, members, description) gets a `gid`, numbered from 1 per trace, and one
    `group` line (`coll`). The native kernel writes into the same file and takes its gids from
    here too (`group`), so a gid never means two things in one trace. `next(itertools.count)` is
    atomic under the GIL; two threads meeting a new group at once may number it twice, which only
    costs one more `group` line.
    """

    def __init__(self, rank: int) -> None:
        self._rank = _dumps(rank)
        # group name -> (ranks, desc, its GroupLine, head): the fast path compares ranks by identity
        # first, since the tracer passes the same tuple for every collective of a group.
        self._groups: dict[str, tuple[tuple[int, ...], str, GroupLine, str]] = {}
        # (name, ranks, desc) -> GroupLine: every list met (a send's members change with its peer)
        self._lines: dict[tuple[str, tuple[int, ...], str], GroupLine] = {}
        self._members: dict[int, tuple[tuple[int, ...], str]] = {}  # gid -> (ranks, desc)
        self._gids = itertools.count(1)
        self._ops: dict[tuple[Any, ...], str] = {}
        self._threads: dict[str, str] = {}
        self._names: dict[str, str] = {}

    def coll(self, event: CollectiveEvent) -> tuple[GroupLine, str]:
        """The `coll` line of `event`, and the `group` line it names (TraceWriter.write_coll writes
        that first if the trace does not have it yet)."""
        group, head = self._group_pieces(event.group, event.group_ranks, event.group_desc)
        key = (event.op, event.shapes, event.dtypes, event.reduce_op, event.root, event.tag, event.args)
        middle = self._ops.get(key)
        if middle is None:
            middle = self._ops[key] = self._middle(event)
        thread = self._threads.get(event.thread)
        if thread is None:
            thread = self._threads[event.thread] = f',"thread":{_dumps(event.thread)},"t_start":'
        return group, f"{head}{event.seq}{middle}{event.site.encoded}{thread}{event.t_start!r}}}\n"

    def group(self, name: str, ranks: tuple[int, ...], desc: str) -> GroupLine:
        """The GroupLine of a member list, numbered the first time it is met."""
        key = (name, ranks, desc)
        found = self._lines.get(key)
        if found is None:
            gid = next(self._gids)
            found = self._lines[key] = GroupLine(gid, group_line(gid, name, ranks, desc))
            self._members[gid] = (ranks, desc)
        return found

    def members(self, gid: int) -> tuple[tuple[int, ...], str] | None:
        """(ranks, description) of a gid this encoder gave out; None for any other."""
        return self._members.get(gid)

    def done(self, group: str, seq: int, t_end: float, ok: bool) -> str:
        name = self._names.get(group)
        if name is None:
            name = self._names[group] = _dumps(group)
        status = "true" if ok else "false"
        return f'{{"ev":"done","group":{name},"seq":{seq},"t_end":{t_end!r},"ok":{status}}}\n'

    def _group_pieces(self, name: str, ranks: tuple[int, ...], desc: str) -> tuple[GroupLine, str]:
        cached = self._groups.get(name)
        if cached is not None and (cached[0] is ranks or cached[0] == ranks) and cached[1] == desc:
            return cached[2], cached[3]
        group = self.group(name, ranks, desc)
        head = f'{{"ev":"coll","rank":{self._rank},"group":{_dumps(name)},"gid":{group.gid},"seq":'
        self._groups[name] = (ranks, desc, group, head)
        return group, head

    @staticmethod
    def _middle(event: CollectiveEvent) -> str:
        return (
            f',"op":{_dumps(event.op)},"shapes":{_dumps(event.shapes)},"dtypes":{_dumps(event.dtypes)},'
            f'"reduce_op":{_dumps(event.reduce_op)},"root":{_dumps(event.root)},'
            + ("" if event.tag is None else f'"tag":{_dumps(event.tag)},')
            + ("" if event.args is None else f'"args":{_dumps(event.args)},')
            + '"site":'
        )


LOST = "lost"  # `{"ev":"lost","n":N,"error":...}`: N lines this writer could not write
STATUS_BYTES = 160  # the fixed size of that line, rewritten in place as the count grows


def status_line(lost: int, error: str) -> bytes:
    """The `lost` line padded to STATUS_BYTES (JSON allows the trailing spaces)."""
    for text in (error, error[:60], ""):
        line = _dumps({"ev": LOST, "n": lost, "error": text}).encode("utf-8")
        if len(line) < STATUS_BYTES:
            return line + b" " * (STATUS_BYTES - 1 - len(line)) + b"\n"
    raise ValueError(lost)  # unreachable: an int fits


class TraceWriter:
    """Appends each event as one line with a single unbuffered `os.write`: nothing waits in a user-space
    buffer, so a rank killed with SIGKILL leaves a trace intact up to its last collective.

    The one exception is `defer_line`, for record mode's `done` lines: they go out with the next line
    written (the next collective's, in the same `os.write`) or at the next `flush` (the monitor's
    tick), which saves a system call per collective. A rank killed in between loses only those
    completions, never a collective it issued.

    A failed write (a full disk, a quota) never raises: the tracer must go on verifying and
    reporting (on stderr) whatever the disk does. The lines are counted as lost, once on stderr,
    and in the trace itself: the first write also writes a `lost` line with a count of 0, the
    space it reserves, which each failure rewrites in place (no new space needed) with the count
    so far, so the analysis can say the trace is incomplete. (A count of 0 is no event: readers
    skip it.)"""

    def __init__(self, path: str, allow_shared: bool = False) -> None:
        self.path = path
        # No O_APPEND: the status line is rewritten with pwrite, which O_APPEND would append.
        self._fd = open_output(path, allow_shared)
        self._lock = threading.Lock()  # lines from the issuing, monitor and backend threads never interleave
        self._deferred: list[str] = []
        self._defined: set[int] = set()  # gids whose `group` line this writer has written
        self._status_at = -1  # file offset of the `lost` line; -1 until written whole
        self._started = False
        self._torn = False  # a failed write left half a line at the end of the file
        self.lost = 0
        self._lost_elsewhere = 0

    def write(self, data: dict[str, Any]) -> None:
        self.write_line(_dumps(data) + "\n")

    def write_line(self, line: str) -> None:
        with self._lock:
            self._after_deferred(line)

    def write_coll(self, group: GroupLine, line: str) -> None:
        """A `coll` line, preceded in the same `os.write` by the `group` line it names when this
        file does not have that yet: a rank killed at any point leaves no `coll` line naming a
        gid its trace does not define. After a failed write the `group` line goes out again with
        the next `coll` line of its group (readers accept a definition repeated unchanged)."""
        with self._lock:
            known = group.gid in self._defined
            if self._after_deferred(line if known else group.text + line) and not known:
                self._defined.add(group.gid)

    def _after_deferred(self, line: str) -> bool:
        """Write the deferred lines and `line` at once (holding the lock); whether all went out."""
        if self._deferred:
            line = "".join(self._deferred) + line
            self._deferred.clear()
        return self._write(line)

    def fileno(self) -> int:
        return self._fd

    def defer_line(self, line: str) -> None:
        with self._lock:
            self._deferred.append(line)

    def flush(self) -> None:
        if not self._deferred:
            return
        with self._lock:
            line = "".join(self._deferred)
            self._deferred.clear()
            self._write(line)

    def _write(self, line: str) -> bool:
        """Holding the lock; whether all of `line` was written."""
        if self._fd < 0:  # closed: the tracer stopped or the monitor is ending the process
            return False
        lines = line.encode("utf-8")
        prefix = b"\n" if self._torn else b""  # end a half-written line first: only it is unreadable
        status = b""
        if not self._started:  # the file is empty: the status line goes after the first line
            self._started = True
            status = status_line(0, "")
        data = prefix + lines + status
        sent = 0
        try:
            while sent < len(data):
                written = os.write(self._fd, data[sent:])
                if written <= 0:
                    raise OSError(errno.EIO, "short write")
                sent += written
        except OSError as error:
            if sent:
                self._torn = data[sent - 1 : sent] != b"\n"
            start = max(sent - len(prefix), 0)
            self._lost_lines(lines[start:].count(b"\n"), error)
            return False
        self._torn = False
        if status:
            self._status_at = len(prefix) + len(lines)
        return True

    def lost_elsewhere(self, total: int) -> None:
        """`total` lines lost so far by another writer of this file (the native kernel's)."""
        with self._lock:
            if total > self._lost_elsewhere and self._fd >= 0:
                count, self._lost_elsewhere = total - self._lost_elsewhere, total
                self._lost_lines(count, OSError(errno.ENOSPC, "write failed (native kernel)"))

    def _lost_lines(self, count: int, error: OSError) -> None:
        """Say once on stderr that lines are lost, and keep the count in the trace's status line
        (holding the lock)."""
        if self.lost == 0:
            reason = error.strerror or str(error)
            _stderr(f"collcheck: cannot write the trace {self.path} ({reason}); its lines are being lost")
        self.lost += count
        if self._status_at >= 0:
            with contextlib.suppress(OSError):
                os.pwrite(self._fd, status_line(self.lost, error.strerror or str(error)), self._status_at)

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = -1
            if self.lost:
                _stderr(f"collcheck: the trace {self.path} is incomplete: {self.lost} lines lost")


def _stderr(text: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def read_trace(path: str) -> list[dict[str, Any]]:
    """Every complete JSON line of a trace; a torn last line (the rank died mid-write) is skipped,
    and so is the writer's reserved `lost` line while its count is 0."""
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not (isinstance(row, dict) and row.get("ev") == LOST and row.get("n") == 0):
                rows.append(row)
    return rows
