"""collcheck's binary trace format (`collcheck-rank<R>.ccbin`): fixed-width records that the offline
analysis compares as columns of bytes instead of parsing one JSON line per collective.

In: JSON Lines traces (`convert_to_binary`) or the tracer's lines. Out: a binary trace, its records
read back (`BinaryRecords`), or JSON Lines again (`convert_to_json`).

The file is an 8-byte magic (MAGIC) followed by 32-byte slots (SLOT), little-endian:

* COLL `<B kind=1, B flags, H 0, I template, Q seq, d t_start, d t_end>`: one collective. Every
  other field of its `coll` line is its template's; `flags` DONE says `t_end` is its completion
  (an `ok` `done` line folded into the record), UNOBSERVED that the backend offers none (an
  `unobserved` line); without DONE, `t_end` holds `t_start`.
* TEXT `<B kind=2, B sub, H 0, I length>` + 24 bytes, then CONT slots `<B kind=3>` + 31 bytes each,
  holding `length` bytes: sub LINE is one JSON line as written (header, group, report, exit,
  lost, and any `coll`, `done` or `unobserved` line that does not fold into a record), read exactly
  as in a JSON trace; sub TEMPLATE is `<I id, I at_seq, I at_time>` + the text of a `coll` line
  with its `seq` and `t_start` values cut out at those offsets (ids numbered 0, 1, ... in the file);
  sub OVERLONG marks a line that was longer than MAX_LINE_BYTES.

Every slot says what it is in its first byte, so the column of first bytes (`data[0::SLOT]`)
finds the collectives of a chunk without reading it record by record. Untrusted input: lengths
and ids are bounded by the file, an unknown or damaged record is a problem of its slot, never a
traceback; a record cut short at the end of the file (a rank killed mid-write: a partial last
slot, or a text record missing its last slots) is a TornTail, noted as such (one record that
could not be read; a JSON reader skips a torn last line silently).
Never imports torch.
"""

from __future__ import annotations

import math
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from collcheck.runtime.record import TRACE_PREFIX, TRACE_SUFFIX, CollectiveEvent, open_output
from collcheck.runtime.trace_model import RankTrace
from collcheck.runtime.trace_read import MAX_LINE_BYTES, TraceLines, end_of_trace, new_trace, numbered_lines

MAGIC = b"CCTRACE\x01"  # version 1
BINARY_SUFFIX = ".ccbin"
SLOT = 32
COLL, TEXT, CONT = 1, 2, 3
LINE, TEMPLATE, OVERLONG = 0, 1, 2
DONE, UNOBSERVED = 1, 2
COLL_SLOT = struct.Struct("<BBHIQdd")
TEXT_HEAD = struct.Struct("<BBHI")
TEXT_FIRST = SLOT - TEXT_HEAD.size  # payload bytes in a TEXT slot
CONT_BYTES = SLOT - 1
TEMPLATE_HEAD = struct.Struct("<III")
MAX_TEMPLATES = 1 << 16  # distinct collectives one trace may define (a job has a few hundred)
CHUNK_SLOTS = 1 << 16  # slots read at once (2 MiB)
_MAX_TEXT_SLOTS = 1 + (MAX_LINE_BYTES + TEMPLATE_HEAD.size + CONT_BYTES - 1) // CONT_BYTES


def binary_name(rank: int) -> str:
    return f"{TRACE_PREFIX}{rank}{BINARY_SUFFIX}"


def is_binary_trace(name: str) -> bool:
    return name.startswith(TRACE_PREFIX) and name.endswith(BINARY_SUFFIX)


class BinaryFormatError(Exception):
    """The file does not start like a collcheck binary trace."""


class UnreadableSource(Exception):
    """A trace to convert could not be opened (nothing was written for it)."""


# ---------------------------------------------------------------------------------------------
# Writing


def text_slots(sub: int, payload: bytes) -> bytes:
    """`payload` as a TEXT slot and its CONT slots."""
    head = TEXT_HEAD.pack(TEXT, sub, 0, len(payload)) + payload[:TEXT_FIRST]
    out = [head.ljust(SLOT, b"\0")]
    for at in range(TEXT_FIRST, len(payload), CONT_BYTES):
        out.append((bytes((CONT,)) + payload[at : at + CONT_BYTES]).ljust(SLOT, b"\0"))
    return b"".join(out)


def coll_slot(template: int, seq: int, t_start: float, t_end: float | None, flags: int = 0) -> bytes:
    done = t_end is not None
    end = t_end if t_end is not None else t_start
    return COLL_SLOT.pack(COLL, flags | (DONE if done else 0), 0, template, seq, t_start, end)


class BinaryWriter:
    """Writes a binary trace through a descriptor (record.open_output: never through a link),
    buffering whole slots; a record already written can still be given its completion (`done`)."""

    FLUSH_BYTES = 1 << 20

    def __init__(self, path: str, allow_shared: bool = False) -> None:
        self.path = path
        self._fd = open_output(path, allow_shared)
        self._buffer = bytearray(MAGIC)
        self._flushed = 0  # bytes of the file before `_buffer`
        self.templates: dict[tuple[bytes, bytes, bytes], int] = {}

    def line(self, line: bytes | None) -> None:
        """One JSON line (its newline left out) to be read as in a JSON trace; None for one that
        was longer than MAX_LINE_BYTES."""
        if line is None or len(line) > MAX_LINE_BYTES:
            self._append(text_slots(OVERLONG, b""))
        else:
            self._append(text_slots(LINE, line))

    def template(self, parts: tuple[bytes, bytes, bytes]) -> int:
        """The id of a `coll` line's text around its `seq` and `t_start` values, defined here the
        first time."""
        known = self.templates.get(parts)
        if known is None:
            known = self.templates[parts] = len(self.templates)
            before, middle, after = parts
            head = TEMPLATE_HEAD.pack(known, len(before), len(before) + len(middle))
            self._append(text_slots(TEMPLATE, head + before + middle + after))
        return known

    def coll(self, template: int, seq: int, t_start: float) -> int:
        """A collective; returns its offset in the file, for `done` and `unobserved`."""
        offset = self._flushed + len(self._buffer)
        self._append(coll_slot(template, seq, t_start, None))
        return offset

    def mark(self, offset: int, flags: int, t_end: float | None = None) -> None:
        """Give the record at `offset` these flags (DONE, UNOBSERVED) and its completion time; the
        caller keeps each record's flags (the file may be open for writing only)."""
        self._patch(offset, 1, struct.pack("<B", flags))
        if t_end is not None:
            self._patch(offset, 24, struct.pack("<d", t_end))

    def _patch(self, offset: int, at: int, data: bytes) -> None:
        if offset + at >= self._flushed:
            start = offset + at - self._flushed
            self._buffer[start : start + len(data)] = data
        else:
            os.pwrite(self._fd, data, offset + at)

    def _append(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) >= self.FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        view = memoryview(self._buffer)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._flushed += len(self._buffer)
        self._buffer = bytearray()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            os.close(self._fd)


# ---------------------------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class CollRun:
    """COLL slots `first` (the slot number of the file, from 0) onward, as one view of bytes."""

    first: int
    data: memoryview

    @property
    def count(self) -> int:
        return len(self.data) // SLOT

    def templates(self) -> memoryview:
        return self.data.cast("I")[1::8]

    def seqs(self) -> memoryview:
        return self.data.cast("Q")[1::4]

    def starts(self) -> memoryview[float]:
        return self.data.cast("d")[2::4]

    def ends(self) -> memoryview[float]:
        return self.data.cast("d")[3::4]

    def flags(self) -> bytes:
        return bytes(self.data[1::SLOT])

    def slot(self, index: int) -> tuple[int, int, int, int, int, float, float]:
        """(kind, flags, 0, template, seq, t_start, t_end) of slot `index` of the run."""
        return COLL_SLOT.unpack_from(self.data, index * SLOT)  # type: ignore[return-value]


@dataclass(frozen=True)
class TextRecord:
    """A TEXT record starting at slot `first`: a LINE, TEMPLATE or OVERLONG."""

    first: int
    sub: int
    payload: bytes


@dataclass(frozen=True)
class BadRecord:
    """Slots `first` onward (`count` of them) that are no record: why."""

    first: int
    count: int
    why: str


@dataclass(frozen=True)
class TornTail:
    """The end of the file from slot `first`: `size` bytes of a record cut short there."""

    first: int
    size: int


Record = CollRun | TextRecord | BadRecord | TornTail
_NOT_COLL = re.compile(rb"[^\x01]+")


class BinaryRecords:
    """The records of a binary trace in order, a chunk at a time: runs of COLL slots as views (no
    object per collective), TEXT records whole, and what is neither as BadRecords."""

    def __init__(self, path: str, chunk_slots: int = CHUNK_SLOTS) -> None:
        self.path = path
        self.chunk = chunk_slots
        self.handle: Any = open(path, "rb")  # noqa: SIM115 - held across chunks, closed by close()
        try:
            if self.handle.read(len(MAGIC)) != MAGIC:
                raise BinaryFormatError(f"not a collcheck binary trace (no {MAGIC[:7].decode()} header)")
        except BaseException:
            self.handle.close()
            raise
        self.next_slot = 0  # the slot number of the start of `pending`
        self.pending = b""
        self.ended = False

    def close(self) -> None:
        self.handle.close()

    def chunks(self, slots: int | None = None) -> Iterator[list[Record]]:
        """Lists of records, about `slots` slots each, until the file ends."""
        want = size = (slots or self.chunk) * SLOT
        while not self.ended:
            data = self.pending + self.handle.read(max(size - len(self.pending), SLOT))
            if len(data) < size:
                self.ended = True
            usable = len(data) - len(data) % SLOT  # a partial last slot: a torn write
            records, used = self._records(data[:usable], self.next_slot, self.ended)
            if self.ended and usable < len(data):
                first, size = self.next_slot + usable // SLOT, len(data) - usable
                last = records[-1] if records else None
                if isinstance(last, TornTail):  # one torn record: its whole slots and the partial one
                    records.pop()
                    first, size = last.first, last.size + size
                records.append(TornTail(first, size))
            self.pending = data[used * SLOT : usable] if not self.ended else b""
            self.next_slot += used
            # A text record longer than the chunk: read on in bigger pieces until it is whole.
            size = want if used else min(2 * size, _MAX_TEXT_SLOTS * SLOT * 2)
            if records:
                yield records

    def _records(self, data: bytes, base: int, final: bool) -> tuple[list[Record], int]:
        """The records of `data` (whole slots from slot `base`), and how many slots they used: a
        TEXT record cut by the chunk's end waits for the next chunk (or, at the end, is torn)."""
        kinds = data[0::SLOT]
        records: list[Record] = []
        at = 0
        view = memoryview(data)
        for found in _NOT_COLL.finditer(kinds):
            start, end = found.span()
            if start > at:
                records.append(CollRun(base + at, view[at * SLOT : start * SLOT]))
            at = start
            while at < end:
                record, width = self._text(data, kinds, at, base)
                if record is None:  # cut by the end of the chunk
                    if final:  # torn at the end of the file
                        records.append(TornTail(base + at, (len(kinds) - at) * SLOT))
                        return records, len(kinds)
                    return records, at
                records.append(record)
                at += width
        if at < len(kinds):
            records.append(CollRun(base + at, view[at * SLOT :]))
        return records, len(kinds)

    @staticmethod
    def _text(data: bytes, kinds: bytes, at: int, base: int) -> tuple[Record | None, int]:
        kind = kinds[at]
        if kind == CONT:
            run = len(kinds[at:]) - len(kinds[at:].lstrip(b"\x03"))
            return BadRecord(base + at, run, "continuation slots without a text record"), run
        if kind != TEXT:
            return BadRecord(base + at, 1, f"unknown record kind {kind}"), 1
        _, sub, _, length = TEXT_HEAD.unpack_from(data, at * SLOT)
        if length > MAX_LINE_BYTES + TEMPLATE_HEAD.size or sub not in (LINE, TEMPLATE, OVERLONG):
            return BadRecord(base + at, 1, f"text record of kind {sub} and {length} bytes"), 1
        extra = max(0, -(-(length - TEXT_FIRST) // CONT_BYTES))
        if at + 1 + extra > len(kinds):
            # Cut by the chunk (or a torn last write) only if every slot that follows continues it:
            # a damaged length must not hide the records after it.
            if kinds[at + 1 :].count(CONT) != len(kinds) - at - 1:
                return BadRecord(base + at, 1, "text record cut short"), 1
            return None, 0
        if kinds[at + 1 : at + 1 + extra].count(CONT) != extra:
            return BadRecord(base + at, 1, "text record cut short"), 1
        start = at * SLOT
        parts = [data[start + TEXT_HEAD.size : start + SLOT]]
        parts += [data[(at + k) * SLOT + 1 : (at + k + 1) * SLOT] for k in range(1, extra + 1)]
        return TextRecord(base + at, sub, b"".join(parts)[:length]), 1 + extra


def template_parts(payload: bytes) -> tuple[int, bytes, bytes, bytes] | None:
    """(id, text before the seq, between seq and t_start, after) of a TEMPLATE payload."""
    if len(payload) < TEMPLATE_HEAD.size:
        return None
    ident, at_seq, at_time = TEMPLATE_HEAD.unpack_from(payload)
    text = payload[TEMPLATE_HEAD.size :]
    if not at_seq <= at_time <= len(text):
        return None
    return ident, text[:at_seq], text[at_seq:at_time], text[at_time:]


def template_line(parts: tuple[bytes, bytes, bytes], seq: int, t_start: float) -> bytes:
    before, middle, after = parts
    return b"%s%d%s%s%s" % (before, seq, middle, repr(t_start).encode(), after)


class BinaryLines:
    """Feeds a binary trace's records to a TraceLines as its JSON lines would: LINE records as
    they are, each COLL slot as its template's event with the slot's seq, times and completion.
    Record numbers (the `line` of a problem) are slot numbers from 1."""

    def __init__(self, lines: TraceLines) -> None:
        self.lines = lines
        self.templates: list[CollectiveEvent | None] = []
        self.texts: list[tuple[bytes, bytes, bytes]] = []

    def text(self, record: TextRecord) -> None:
        number = record.first + 1
        if record.sub == LINE:
            self.lines.take(number, record.payload + b"\n")
        elif record.sub == OVERLONG:
            self.lines.take(number, None)
        else:
            self.template(number, record.payload)

    def template(self, number: int, payload: bytes) -> None:
        parts = template_parts(payload)
        trace = self.lines.trace
        if parts is None or parts[0] != len(self.templates) or len(self.templates) >= MAX_TEMPLATES:
            trace.note(number, "malformed template record")
            return
        texts = parts[1:]
        self.texts.append(texts)
        self.templates.append(self.lines.parse(number, template_line(texts, 1, 0.0)))

    def bad(self, record: BadRecord) -> None:
        self.lines.trace.note(record.first + 1, f"{record.why} ({record.count} slots)")

    def torn(self, record: TornTail) -> None:
        text = f"the last record is cut short ({record.size} bytes): the rank stopped while writing it"
        self.lines.trace.note(record.first + 1, text)

    def event(self, run: CollRun, index: int) -> CollectiveEvent | None:
        """The collective of slot `index` of `run`; None (noted as a problem) when unusable."""
        _, flags, _, template, seq, t_start, t_end = run.slot(index)
        number = run.first + index + 1
        event = self.templates[template] if template < len(self.templates) else None
        if event is None:
            self.lines.trace.note(number, f"collective record naming template {template}, which is unusable")
            return None
        if not (math.isfinite(t_start) and math.isfinite(t_end)) or seq >= 1 << 62:
            self.lines.trace.note(number, "collective record with a time or sequence number out of range")
            return None
        copy = CollectiveEvent(**{**event.__dict__, "seq": seq, "t_start": t_start})
        if flags & DONE:
            copy.t_end = t_end
        if flags & UNOBSERVED:
            copy.observable = False
        return copy

    def feed(self, record: Record) -> None:
        """Every event of `record` to the TraceLines, in order."""
        if isinstance(record, TextRecord):
            self.text(record)
        elif isinstance(record, BadRecord):
            self.bad(record)
        elif isinstance(record, TornTail):
            self.torn(record)
        else:
            for index in range(record.count):
                self.lines.number = record.first + index + 1
                event = self.event(record, index)
                if event is not None:
                    self.lines.event(event)


def load_binary(path: str) -> RankTrace:
    """A binary trace read whole, as trace_read.load_json reads a JSON one."""
    trace = new_trace(path)
    lines = TraceLines(trace)
    feeder = BinaryLines(lines)
    try:
        records = BinaryRecords(path)
    except BinaryFormatError as error:
        trace.note(0, str(error))
        return trace
    except OSError as error:
        trace.note(0, f"could not be read: {error.strerror or error}")
        return trace
    try:
        for chunk in records.chunks():
            for record in chunk:
                feeder.feed(record)
    except OSError as error:
        trace.note(0, f"could not be read: {error.strerror or error}")
    finally:
        records.close()
    end_of_trace(lines)
    return trace


# ---------------------------------------------------------------------------------------------
# Converting

# `..."seq":N,...,"t_start":T}` as the tracer writes a `coll` line: N and T are cut out.
COLL_LINE = re.compile(rb'^(\{"ev":"coll",.*?,"seq":)(\d{1,19})(,.*,"t_start":)([-+0-9.eE]{1,40})(\})$')
_DONE_LINE = re.compile(
    rb'^\{"ev":"done","group":.{1,4096}?,"seq":\d{1,19},"t_end":[-+0-9.eE]{1,40},"ok":true\}$'
)
PENDING_COMPLETIONS = 1 << 16  # collectives a `done` line may still fold into


class _Converting(TraceLines):
    """A JSON trace's lines, checked as the analysis reads them, to be written as records."""

    def __init__(self, trace: RankTrace, writer: BinaryWriter) -> None:
        super().__init__(trace)
        self.writer = writer
        self.parsed: CollectiveEvent | None = None
        self.folded = False
        self.lines_only = False  # the line being read cannot fold into a record
        self.expected: dict[int, CollectiveEvent] = {}  # template -> its event (seq 1, t_start 0.0)
        # (group, seq) -> [offset, flags] of its latest record
        self.offsets: dict[tuple[str, int], list[int]] = {}

    def event(self, event: CollectiveEvent) -> None:
        self.parsed = event

    def done(self, key: tuple[str, int], row: dict[str, Any]) -> None:
        record = None if self.lines_only else self.offsets.get(key)
        t_end = row.get("t_end")
        if record is None or type(t_end) is not float or not math.isfinite(t_end):
            return
        if record[1] & DONE:  # a second completion: kept as a line
            return
        record[1] |= DONE
        self.writer.mark(record[0], record[1], t_end)
        self.folded = True

    def unobserved(self, key: tuple[str, int]) -> None:
        record = None if self.lines_only else self.offsets.get(key)
        if record is not None:
            record[1] |= UNOBSERVED
            self.writer.mark(record[0], record[1])
            self.folded = True

    def convert(self, number: int, line: bytes | None) -> None:
        if line is None:
            self.take(number, None)
            self.writer.line(None)
            return
        if line == b"":  # a torn last line: skipped by readers, left out
            return
        text = line.rstrip(b"\n")
        if not text.strip():
            return
        self.folded, self.lines_only = False, True
        if text.startswith(b'{"ev":"coll"'):
            if self._record(number, text):
                return
            if self.parsed is not None:  # a `coll` line kept as a line: its completion is a line too
                self.offsets.pop((self.parsed.group, self.parsed.seq), None)
        else:
            folds = text.startswith(b'{"ev":"unobserved"') or _DONE_LINE.match(text) is not None
            self.lines_only = not folds
            self.take(number, line)
        if not self.folded:
            self.writer.line(text)

    def _record(self, number: int, text: bytes) -> bool:
        """Write a `coll` line as a record when it parses to its template's event with its own seq
        and t_start; False to write it as a line."""
        self.parsed, unreadable = None, self.trace.unreadable
        self.take(number, text + b"\n")
        event = self.parsed
        found = COLL_LINE.match(text)
        if event is None or self.trace.unreadable != unreadable or found is None:
            return False
        before, seq_text, middle, time_text, after = found.groups()
        try:
            t_start = float(time_text)
        except ValueError:
            return False
        seq = int(seq_text)
        if repr(t_start).encode() != time_text or b"%d" % seq != seq_text or seq >= 1 << 62:
            return False
        parts = (before, middle, after)
        template = self.writer.templates.get(parts)
        if template is None:
            model = self.parse(number, template_line(parts, 1, 0.0))
            if model is None or len(self.writer.templates) >= MAX_TEMPLATES:
                return False
            template = self.writer.template(parts)
            self.expected[template] = model
        expected = self.expected[template]
        if CollectiveEvent(**{**expected.__dict__, "seq": seq, "t_start": t_start}) != event:
            return False
        self.offsets.pop((event.group, seq), None)
        self.offsets[(event.group, seq)] = [self.writer.coll(template, seq, t_start), 0]
        if len(self.offsets) > PENDING_COMPLETIONS:
            del self.offsets[next(iter(self.offsets))]
        return True


def convert_to_binary(source: str, target: str, allow_shared: bool = False) -> RankTrace:
    """Write the JSON trace `source` as the binary trace `target`; returns the source as read
    (its problems: the lines written as they were, for the analysis to report again)."""
    trace = new_trace(source)
    try:  # before the target is truncated: an unreadable source leaves it as it was
        handle = open(source, "rb")  # noqa: SIM115 - closed below
    except OSError as error:
        raise UnreadableSource(f"could not be read: {error.strerror or error}") from error
    with handle:
        writer = BinaryWriter(target, allow_shared)
        try:
            converting = _Converting(trace, writer)
            for number, line in numbered_lines(handle):
                converting.convert(number, line)
        finally:
            writer.close()
    return trace


# Written back where a record could not be (an overlong line, a damaged record): a line the JSON
# reader counts as unreadable too, so the converted trace still reads as incomplete.
UNREADABLE_LINE = b"(collcheck convert-trace: a record that could not be read was here)\n"


def convert_to_json(source: str, target: str, allow_shared: bool = False) -> int:
    """Write the binary trace `source` as JSON lines (each completion as a `done` line after its
    collective); returns the number of records that could not be written back."""
    try:
        records = BinaryRecords(source)
    except OSError as error:
        raise UnreadableSource(f"could not be read: {error.strerror or error}") from error
    texts: list[tuple[bytes, bytes, bytes] | None] = []
    skipped = 0
    with os.fdopen(open_output(target, allow_shared), "wb") as out:
        try:
            for chunk in records.chunks():
                for record in chunk:
                    if isinstance(record, TextRecord):
                        # A raw newline is in no line the tracer writes (JSON escapes it): read as
                        # one unreadable line here, written back it would be two that may parse.
                        if record.sub == TEMPLATE:
                            parts = template_parts(record.payload)
                            text = record.payload[TEMPLATE_HEAD.size :]  # its binary head may hold a 10
                            usable = parts is not None and parts[0] == len(texts) and b"\n" not in text
                            texts.append(parts[1:] if parts is not None and usable else None)
                            if not usable:
                                out.write(UNREADABLE_LINE)
                                skipped += 1
                        elif record.sub == LINE and b"\n" not in record.payload:
                            out.write(record.payload + b"\n")
                        else:
                            out.write(UNREADABLE_LINE)
                            skipped += 1
                    elif isinstance(record, BadRecord):
                        out.write(UNREADABLE_LINE)
                        skipped += record.count
                    elif isinstance(record, CollRun):
                        skipped += _write_colls(out, record, texts)
        finally:
            records.close()
    return skipped


def _write_colls(out: Any, run: CollRun, texts: list[tuple[bytes, bytes, bytes] | None]) -> int:
    skipped = 0
    for index in range(run.count):
        _, flags, _, template, seq, t_start, t_end = run.slot(index)
        parts = texts[template] if template < len(texts) else None
        if parts is None or not math.isfinite(t_start):
            out.write(UNREADABLE_LINE)
            skipped += 1
            continue
        out.write(template_line(parts, seq, t_start) + b"\n")
        group = _group_text(parts[0])
        if flags & UNOBSERVED and group is not None:
            out.write(b'{"ev":"unobserved","group":%s,"seq":%d}\n' % (group, seq))
        if flags & DONE and group is not None and math.isfinite(t_end):
            end = repr(t_end).encode()
            out.write(b'{"ev":"done","group":%s,"seq":%d,"t_end":%s,"ok":true}\n' % (group, seq, end))
    return skipped


_GROUP_FIELD = re.compile(rb',"group":("(?:[^"\\]|\\.)*")')


def _group_text(before: bytes) -> bytes | None:
    found = _GROUP_FIELD.search(before)
    return found.group(1) if found else None


def json_name_of(binary: str) -> str:
    return binary[: -len(BINARY_SUFFIX)] + TRACE_SUFFIX
