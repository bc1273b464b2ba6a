"""The tracer's binary trace writer (`collcheck run --trace-format binary`): the records of
trace_binary.py written live, as the run goes, instead of converted from JSON lines afterwards.

In: the lines the tracer would write to a JSON trace (TraceWriter's interface: `write_line`,
`write_coll`, `defer_line`, ...). Out: `collcheck-rank<R>.ccbin`, byte for byte the format that
`collcheck convert-trace --to binary` writes, so every reader takes it as it takes a converted one.

Each `coll` line becomes a COLL slot naming its template (a TEMPLATE record written before the
first slot that names it, in the same `os.write`); every other line becomes a LINE record, in
one `os.write` per call as TraceWriter writes its lines.

Completions. A COLL slot holds its collective's completion, which is known only after the slot
was written: an `ok` `done` line (or an `unobserved` one) is folded into the slot written earlier
by patching it in place, in two `pwrite`s: first its 8-byte `t_end`, then its one-byte `flags`.
A rank killed at any point leaves each slot either without the DONE flag (read as not completed,
its `t_end` ignored: what a JSON trace says when the deferred `done` line never went out) or
complete; a one-byte write cannot be torn. No write ever changes a slot's kind, template, seq or
t_start, so the records after it are never at risk. Completions are deferred as TraceWriter
defers `done` lines: patched before the next write, or at the monitor's next flush. (The native
encoder writes the completion of the file's last slot and the next records in one positioned
write, when the slot's patched bytes lie in one page: a killed process stops a write between
pages, so they land all or none. The bytes in the file are the same.)

A failed or short write (a full disk) is counted as TraceWriter counts it, in a status LINE
record of fixed size rewritten in place; the next write first pads the file to a whole slot, so a
torn record costs only its own slots (read as a damaged record, a problem of the trace).

With the native kernel (native_recorder.py), the writer hands the file over after its header
(`use_native`): from then on every line, the kernel's and this side's, is encoded by the C++
twin of this encoder (native/binary_trace.h) in one object, which numbers the templates and knows
every slot; this side splits its lines into Items (`item_of`) as the C++ kernel splits its own.
`open_collectives` and `header_line` read such a trace while the job runs (the launcher's
backstop, the run's verdict), as launch.py and verdict.py read a JSON one. Never imports torch.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import struct
import sys
import threading
from types import ModuleType
from typing import Any, NamedTuple

from collcheck.runtime.record import GroupLine, TraceFormat, TraceWriter, status_line
from collcheck.runtime.trace_binary import (
    COLL,
    DONE,
    LINE,
    MAGIC,
    MAX_TEMPLATES,
    OVERLONG,
    PENDING_COMPLETIONS,
    SLOT,
    TEMPLATE,
    TEMPLATE_HEAD,
    TEXT,
    TEXT_HEAD,
    UNOBSERVED,
    BinaryFormatError,
    BinaryRecords,
    CollRun,
    TextRecord,
    coll_slot,
    template_line,
    template_parts,
    text_slots,
)
from collcheck.runtime.trace_read import MAX_LINE_BYTES

# The lines that fold into a slot, as record.CollectiveEncoder.done and the tracer write them.
_GROUP = rb'("(?:[^"\\]|\\.){0,4096}")'
_DONE_LINE = re.compile(
    rb'^\{"ev":"done","group":' + _GROUP + rb',"seq":(\d{1,19}),"t_end":([-+0-9.eE]{1,40}),"ok":true\}$'
)
_UNOBSERVED_LINE = re.compile(rb'^\{"ev":"unobserved","group":' + _GROUP + rb',"seq":(\d{1,19})\}$')
_COLL_GROUP = re.compile(rb',"group":' + _GROUP)
_FLAGS_AT, _END_AT = 1, 24  # byte offsets in a COLL slot (trace_binary.COLL_SLOT)
_END = struct.Struct("<d")


ENV_FORMAT = "COLLCHECK_TRACE_FORMAT"  # json (the default) or binary
ITEM_LINE, ITEM_COLL, ITEM_FOLD = 0, 1, 2  # binary_trace.h's Kind


class Item(NamedTuple):
    """One line to encode, split: a LINE as it is; a COLL line around its seq and t_start (its
    `group` as JSON, found in `before`); a FOLD, an `ok` `done` (flag DONE, `time` its t_end) or
    `unobserved` line (flag UNOBSERVED) of the collective `seq` of `group`. `text` is the line,
    written as a LINE record where it cannot be a record. The fields are binary_trace.h's Item."""

    kind: int
    text: bytes
    before: bytes = b""
    middle: bytes = b""
    after: bytes = b""
    group: bytes = b""
    seq: int = 0
    time: float = 0.0
    flag: int = 0


def item_of(text: bytes) -> Item:
    """A line (without its newline) as the encoder takes it."""
    if text.startswith(b'{"ev":"coll"'):
        split = _split_coll(text)
        if split is not None:
            before, seq, middle, t_start, after = split
            group = _COLL_GROUP.search(before)
            if group is not None:
                return Item(ITEM_COLL, text, before, middle, after, group.group(1), seq, t_start)
    elif text.startswith(b'{"ev":"done"'):
        found = _DONE_LINE.match(text)
        if found is not None:
            t_end = _exact_float(found.group(3))
            if t_end is not None:
                return Item(
                    ITEM_FOLD, text, group=found.group(1), seq=int(found.group(2)), time=t_end, flag=DONE
                )
    elif text.startswith(b'{"ev":"unobserved"'):
        found = _UNOBSERVED_LINE.match(text)
        if found is not None:
            return Item(ITEM_FOLD, text, group=found.group(1), seq=int(found.group(2)), flag=UNOBSERVED)
    return Item(ITEM_LINE, text)


def _exact_float(text: bytes) -> float | None:
    """`text` as a finite float that reads back as `text` (so conversion writes it again)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and repr(value).encode() == text else None


def trace_format_of(value: str | None) -> TraceFormat:
    """COLLCHECK_TRACE_FORMAT's value: anything but `binary` keeps the JSON lines."""
    binary = (value or "").strip().lower() == TraceFormat.BINARY.value
    return TraceFormat.BINARY if binary else TraceFormat.JSON


class BinaryTraceWriter(TraceWriter):
    """TraceWriter's interface, writing binary records. One encoder per file, which knows the
    offset of every record written: this one, or after `use_native` the native kernel's."""

    def __init__(self, path: str, allow_shared: bool = False) -> None:
        super().__init__(path, allow_shared)  # opens the file (never through a link)
        self._guard = threading.Lock()
        self._waiting: list[bytes] = []  # deferred lines, encoded at the next write
        self._offset = 0  # bytes written so far (this writer is the file's only one)
        self._templates: dict[tuple[bytes, bytes, bytes], tuple[int, bytes]] = {}  # -> (id, group)
        # (group as JSON, seq) -> [offset of its COLL slot, its flags], the newest PENDING_COMPLETIONS
        self._slots: dict[tuple[bytes, int], list[int]] = {}
        self._defined_gids: set[int] = set()
        self._status_offset = -1
        self._status_size = 0
        self._native: Any = None  # the native kernel's BinaryTrace, once the file is handed over
        self._native_lost = 0  # its count of lost records, as last taken into `lost`

    def use_native(self, module: ModuleType) -> object:
        """Hand the file to the native kernel's encoder (`module.BinaryTrace`), for the kernel and
        this writer's later lines alike; returns it, for NativeRecorder.start. Only before any
        collective was written (the tracer does it after the header): the kernel numbers the
        templates and keeps the slots from then on."""
        with self._guard:
            if self.fileno() < 0 or self._templates or self._slots or self._native is not None:
                raise RuntimeError("a binary trace is handed to the native kernel only after its header")
            if self._waiting:
                self._send([])
            status = self._status(0, "")
            self._native = module.BinaryTrace(self.fileno(), self._offset, self._status_offset, status)
            return self._native

    # -- TraceWriter's interface -----------------------------------------------------------------

    def write_line(self, line: str) -> None:
        with self._guard:
            self._send([line.encode("utf-8")])

    def write_coll(self, group: GroupLine, line: str) -> None:
        with self._guard:
            known = group.gid in self._defined_gids
            lines = [line.encode("utf-8")] if known else [group.text.encode("utf-8"), line.encode("utf-8")]
            if self._send(lines) and not known:
                self._defined_gids.add(group.gid)

    def defer_line(self, line: str) -> None:
        with self._guard:
            self._waiting.append(line.encode("utf-8"))

    def flush(self) -> None:
        with self._guard:
            if self._waiting:
                self._send([])

    def lost_elsewhere(self, total: int) -> None:
        """The native kernel counts what its encoder lost (`total` is its JSON count: none)."""
        with self._guard:
            if self._native is not None:
                self._sync_lost()

    def close(self) -> None:
        self.flush()
        with self._guard:
            if self._native is not None:
                self._sync_lost()
                self._native.close()
        super().close()

    def _sync_lost(self) -> None:
        """The native encoder's lost records into `lost` and the status record (holding the guard)."""
        total = int(self._native.lost())
        if total > self._native_lost:
            count, self._native_lost = total - self._native_lost, total
            self._status_offset = int(self._native.status_offset())
            code = int(self._native.last_error())
            error = OSError(errno.EIO, "short write") if code < 0 else OSError(code, os.strerror(code))
            self._count_lost(count, error)

    # -- encoding ----------------------------------------------------------------------------------

    def _send(self, lines: list[bytes]) -> bool:
        """The deferred lines and `lines` (holding the guard): completions patched into their
        slots, everything else written at once. Whether all of it was written."""
        if self.fileno() < 0:  # closed
            return False
        if self._waiting:
            lines = self._waiting + lines
            self._waiting = []
        if self._native is not None:
            written = bool(self._native.write([item_of(text.rstrip(b"\n")) for text in lines]))
            self._sync_lost()
            return written
        batch = _Batch(self._offset, len(self._templates))
        if self._offset == 0:
            batch.add(MAGIC, 0)
        elif (self._offset - len(MAGIC)) % SLOT:  # a torn write before: pad to a whole slot
            batch.add(bytes(SLOT - (self._offset - len(MAGIC)) % SLOT), 0)
        for text in lines:
            self._encode(item_of(text.rstrip(b"\n")), batch)
        started = self._status_offset >= 0
        if not started:
            batch.status_at = batch.end
            batch.add(self._status(0, ""), 0)
        self._patch(batch.patches)
        return self._put(batch, started)

    def _encode(self, item: Item, batch: _Batch) -> None:
        if item.kind == ITEM_COLL and self._coll(item, batch):
            return
        if item.kind == ITEM_FOLD and self._fold(item, batch):
            return
        text = item.text
        if len(text) > MAX_LINE_BYTES:
            batch.add(text_slots(OVERLONG, b""), 1)  # read as a JSON reader reads it
        else:
            batch.add(text_slots(LINE, text), 1)

    def _coll(self, item: Item, batch: _Batch) -> bool:
        """A COLL item as a COLL slot (and its template, when new); False to write it as a line."""
        before, middle, after = parts = (item.before, item.middle, item.after)
        known = self._templates.get(parts) or batch.templates.get(parts)
        if known is None:
            ident = batch.first_template + len(batch.templates)
            if ident >= MAX_TEMPLATES:
                return False
            known = (ident, item.group)
            head = TEMPLATE_HEAD.pack(ident, len(before), len(before) + len(middle))
            batch.defined.append((batch.end, parts, known))
            batch.add(text_slots(TEMPLATE, head + before + middle + after), 0)
            batch.templates[parts] = known
        batch.slots.append((batch.end, (known[1], item.seq)))
        batch.add(coll_slot(known[0], item.seq, item.time, None), 1)
        return True

    def _fold(self, item: Item, batch: _Batch) -> bool:
        """A completion (DONE, with its t_end) or UNOBSERVED into the slot of its collective, when
        this writer wrote that slot and it has no such mark yet; False to write it as a line."""
        flag = item.flag
        slot = self._slots.get((item.group, item.seq))
        if slot is None or slot[1] & flag:
            return False
        t_end = item.time if flag == DONE else None
        slot[1] |= flag
        batch.patches.append((slot[0], slot[1], t_end))
        return True

    # -- writing -----------------------------------------------------------------------------------

    def _patch(self, patches: list[tuple[int, int, float | None]]) -> None:
        """t_end first, the flags last: a slot is never marked done before its time is there."""
        fd = self.fileno()
        for offset, flags, t_end in patches:
            try:
                if t_end is not None:
                    os.pwrite(fd, _END.pack(t_end), offset + _END_AT)
                os.pwrite(fd, bytes((flags,)), offset + _FLAGS_AT)
            except OSError as error:
                self._count_lost(1, error)

    def _put(self, batch: _Batch, started: bool) -> bool:
        data = b"".join(batch.pieces)
        sent = 0
        fd = self.fileno()
        error: OSError | None = None
        try:
            while sent < len(data):
                written = os.write(fd, data[sent:])
                if written <= 0:
                    raise OSError(errno.EIO, "short write")
                sent += written
        except OSError as failed:
            error = failed
        start = self._offset
        self._offset += sent
        written_to = start + sent
        for at, parts, known in batch.defined:  # templates whose record is whole in the file
            if batch.record_end(at) <= written_to:
                self._templates[parts] = known
        for at, key in batch.slots:
            if at + SLOT <= written_to:
                self._slots.pop(key, None)
                self._slots[key] = [at, 0]
                if len(self._slots) > PENDING_COMPLETIONS:
                    del self._slots[next(iter(self._slots))]
        if not started and batch.status_at + self._status_size <= written_to:
            self._status_offset = batch.status_at
        if error is not None:
            self._count_lost(batch.records_after(written_to), error)
            return False
        return True

    def _status(self, lost: int, error: str) -> bytes:
        record = text_slots(LINE, status_line(lost, error).rstrip(b"\n"))
        self._status_size = len(record)
        return record

    def _count_lost(self, count: int, error: OSError) -> None:
        """As TraceWriter counts lost lines: once on stderr, and in the status record."""
        if self.lost == 0 and count:
            reason = error.strerror or str(error)
            with contextlib.suppress(Exception):
                sys.stderr.write(
                    f"collcheck: cannot write the trace {self.path} ({reason}); its lines are being lost\n"
                )
        self.lost += count
        if self._status_offset >= 0:
            status = self._status(self.lost, error.strerror or str(error))
            with contextlib.suppress(OSError):
                os.pwrite(self.fileno(), status, self._status_offset)


def _split_coll(text: bytes) -> tuple[bytes, int, bytes, float, bytes] | None:
    """(text before the seq, seq, text between seq and t_start, t_start, text after) of a `coll`
    line, as trace_binary.COLL_LINE splits it (the first `,"seq":`, the last `,"t_start":`; a JSON
    string holds neither unescaped) with plain searches, which cost a fraction of the pattern's
    backtracking on the issuing thread; None unless seq and t_start read back exactly."""
    at_seq = text.find(b',"seq":') + 7
    end_seq = text.find(b",", at_seq)
    at_time = text.rfind(b',"t_start":') + 11
    if at_seq < 7 or end_seq < 0 or at_time <= end_seq or text[-1:] != b"}" or not 0 < end_seq - at_seq < 19:
        return None
    seq_text, time_text = text[at_seq:end_seq], text[at_time:-1]
    if not seq_text.isdigit() or len(time_text) > 40:
        return None
    seq = int(seq_text)
    try:
        t_start = float(time_text)
    except ValueError:
        return None
    if not math.isfinite(t_start) or repr(t_start).encode() != time_text or b"%d" % seq != seq_text:
        return None
    return text[:at_seq], seq, text[end_seq:at_time], t_start, b"}"


class _Batch:
    """What one `_send` writes: its pieces with the offset each starts at, the templates and COLL
    slots it defines, and the completions to patch into slots already in the file."""

    def __init__(self, offset: int, first_template: int) -> None:
        self.end = offset
        self.first_template = first_template
        self.pieces: list[bytes] = []
        self.ends: dict[int, int] = {}  # start offset of a record -> its end
        self.records: list[tuple[int, int]] = []  # (end offset, lines it stands for)
        self.templates: dict[tuple[bytes, bytes, bytes], tuple[int, bytes]] = {}
        self.defined: list[tuple[int, tuple[bytes, bytes, bytes], tuple[int, bytes]]] = []
        self.slots: list[tuple[int, tuple[bytes, int]]] = []
        self.patches: list[tuple[int, int, float | None]] = []
        self.status_at = -1

    def add(self, data: bytes, lines: int) -> None:
        self.ends[self.end] = self.end + len(data)
        self.pieces.append(data)
        self.end += len(data)
        if lines:
            self.records.append((self.end, lines))

    def record_end(self, start: int) -> int:
        return self.ends.get(start, self.end)

    def records_after(self, written_to: int) -> int:
        """Lines of this batch not whole in the file."""
        return sum(lines for end, lines in self.records if end > written_to)


# ---------------------------------------------------------------------------------------------
# Reading a live binary trace while the job runs (the launcher's backstop, the run's verdict)

TAIL_BYTES = 1 << 18  # the end of a trace that the backstop reads on each look
_EXIT_TEXT = b'{"ev":"exit"'


def open_collectives(path: str) -> list[tuple[int, float]]:
    """(offset, t_start) of each collective among the last TAIL_BYTES of a binary trace that is
    neither completed nor unobserved; [] once the trace has its exit record or when unreadable.
    A completion is patched into its slot, so the window is read again on every look (a follower
    that kept its offset would never see one); a rank that hangs has its open collectives at the
    end of its trace."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(len(MAGIC), size - TAIL_BYTES)
            start -= (start - len(MAGIC)) % SLOT  # slots are counted from the end of the magic
            handle.seek(start)
            data = handle.read(size - start)
    except OSError:
        return []
    data = data[: len(data) - len(data) % SLOT]
    found: list[tuple[int, float]] = []
    for at in range(0, len(data), SLOT):
        kind, flags = data[at], data[at + _FLAGS_AT]
        if kind == COLL and not flags & (DONE | UNOBSERVED):
            t_start = _END.unpack_from(data, at + 16)[0]
            if math.isfinite(t_start):
                found.append((start + at, t_start))
        elif kind == TEXT and data[at + TEXT_HEAD.size : at + TEXT_HEAD.size + len(_EXIT_TEXT)] == _EXIT_TEXT:
            found.clear()  # an exit record: nothing of this trace is still running
    return found


def header_line(path: str) -> bytes | None:
    """The first record of a binary trace when it is its header line (the writer puts it first)."""
    try:
        records = BinaryRecords(path, HEAD_SLOTS)
    except (BinaryFormatError, OSError):
        return None
    try:
        for chunk in records.chunks():
            for record in chunk:
                if isinstance(record, TextRecord) and record.sub == LINE:
                    return record.payload if record.payload.startswith(b'{"ev":"header"') else None
                return None
    except OSError:
        return None
    finally:
        records.close()
    return None


HEAD_SLOTS = 64


def tail_rows(path: str, tail_bytes: int) -> list[dict[str, Any]]:
    """The rows of the records among the last `tail_bytes` of a binary trace, as a JSON trace's
    last lines read (verify_stall.caught_up, the stall watchdog bringing a peer's position up to
    date): a LINE record as its JSON object, a collective as its `coll` line and, once completed,
    a `done` row after it; a torn or damaged record is left out, as a torn JSON line is; [] when
    unreadable. The templates the window names were defined before their first collective,
    anywhere in the file: the whole file is scanned for them, a column of first bytes at a time
    (collectives are skipped as views, never decoded, outside the window)."""
    try:
        records = BinaryRecords(path)
    except (BinaryFormatError, OSError):
        return []
    rows: list[dict[str, Any]] = []
    try:
        size = os.fstat(records.handle.fileno()).st_size
        window = max(0, (size - len(MAGIC)) // SLOT - tail_bytes // SLOT)  # the first slot read
        texts: list[tuple[bytes, bytes, bytes] | None] = []
        for chunk in records.chunks():
            for record in chunk:
                if isinstance(record, TextRecord) and record.sub == TEMPLATE:
                    parts = template_parts(record.payload)
                    texts.append(parts[1:] if parts is not None and parts[0] == len(texts) else None)
                elif isinstance(record, TextRecord) and record.sub == LINE and record.first >= window:
                    _add_row(rows, record.payload)
                elif isinstance(record, CollRun) and record.first + record.count > window:
                    _add_colls(rows, record, max(0, window - record.first), texts)
    except OSError:
        pass
    finally:
        records.close()
    return rows


def _add_colls(
    rows: list[dict[str, Any]], run: CollRun, start: int, texts: list[tuple[bytes, bytes, bytes] | None]
) -> None:
    for index in range(start, run.count):
        _, flags, _, template, seq, t_start, _ = run.slot(index)
        parts = texts[template] if template < len(texts) else None
        if parts is None or not math.isfinite(t_start):
            continue
        row = _add_row(rows, template_line(parts, seq, t_start))
        if row is not None and flags & DONE:
            rows.append({"ev": "done", "group": row.get("group"), "seq": seq})


def _add_row(rows: list[dict[str, Any]], text: bytes) -> dict[str, Any] | None:
    try:
        row = json.loads(text)
    except ValueError:
        return None
    if not isinstance(row, dict):
        return None
    rows.append(row)
    return row
