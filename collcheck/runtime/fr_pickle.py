"""Flight Recorder pickles decoded without unpickling: a restricted reader of pickle opcodes that
builds plain data only and never calls, imports or names anything.

In: the bytes of a pickle (protocol 2-5). Out: its value (dicts, lists, tuples, str, bytes, int,
float, bool, None, sets), where the list under the top-level key `entries` may hold EntryRuns
instead of dicts: consecutive entries each of which, pickled, agrees with one of a few skeletons
except for the bytes of its numbers (torch's pickler writes the same opcodes for every entry of a
loop, strings and shared frames named by their memo slot; only sequence ids and times change). A
run holds each skeleton's entry decoded once as a template, with a Slot for each number, which
skeleton each entry has, and per skeleton one column of values per Slot, sliced out of the bytes:
no Python object per entry. An opcode that could call, import or name something (GLOBAL, REDUCE,
BUILD, persistent ids, ...) raises DumpRefused before anything is built from it; a truncated or
malformed pickle raises CorruptPickle. The values are CPython's unpickler's (but a bytearray,
protocol 5's BYTEARRAY8, is read as bytes); the caller bounds what they expand to
(fr_read.dump_sizes).

How a skeleton is learnt: at an entry (EMPTY_DICT in the entries list), the entry is decoded in a
sandbox that may read the memo but not write it (a MEMOIZE is counted, and a memoized text kept),
may change only containers it made, and pushes a Slot for each number. If it stays inside those
rules, its bytes with the numbers' bytes left open become a compiled pattern; an entry fits it
when the entry ends where the pattern does (see _Machine._fits). The next entries are
matched against the skeleton that followed the previous entry's before, then every skeleton, then
a new one is learnt; an entry that fits none is decoded opcode by opcode. The work spent on
skeletons that do not fit is bounded by the file's size (see _Machine.budget).
Never imports torch.
"""

from __future__ import annotations

import re
import struct
import sys
from array import array
from dataclasses import dataclass, field
from typing import Any

from collcheck.runtime.trace_read import DumpRefused

# Opcodes (pickle.py's names). The ones that call, import or name objects are refused.
_REFUSED = {
    ord("c"): "GLOBAL",
    0x93: "STACK_GLOBAL",
    ord("R"): "REDUCE",
    ord("b"): "BUILD",
    ord("i"): "INST",
    ord("o"): "OBJ",
    0x81: "NEWOBJ",
    0x92: "NEWOBJ_EX",
    0x82: "EXT1",
    0x83: "EXT2",
    0x84: "EXT4",
    0x97: "NEXT_BUFFER",
    0x98: "READONLY_BUFFER",
}
_PERSISTENT = (ord("P"), ord("Q"))
MAX_LONG_BYTES = 1024  # a longer integer is damage (FR's numbers fit in 8 bytes; 1 KiB prints)
MAX_SKELETONS = 256  # distinct entry skeletons learnt per dump (a job has a few dozen call sites)
MAX_SKELETON_BYTES = 8192  # an entry is a few hundred bytes once its texts are memoized
LEARNING_COST = 256  # bytes of the matching budget that compiling one byte of a skeleton costs
MAX_FAILED_LEARNING = 64  # entries in a row that could not be learnt: stop trying (a pickler that memoizes)


class CorruptPickle(Exception):
    """Truncated or malformed: not a pickle this reader decodes."""


class _Abandon(Exception):
    """The sandbox met something a skeleton cannot stand for: decode the entry opcode by opcode."""


class _Unknown(Exception):
    """A memo slot filled inside a run was read later: decode the whole pickle without runs."""


@dataclass(frozen=True)
class Slot:
    """A number of a run's entries: `index` into EntryRun.columns."""

    index: int


@dataclass(frozen=True)
class Shape:
    """What the entries of one skeleton share: `template` (a dict) with Slot i standing for the
    entry's i-th number; `paths[i]` says where Slot i is (keys and list indices from the top)."""

    template: Any
    paths: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class EntryRun:
    """`count` consecutive entries, each of one of `shapes`: entry k is of shape `kinds[k]`, and
    `columns[shape][i]` holds the i-th number (Slot i) of that shape's entries, in order."""

    shapes: tuple[Shape, ...]
    kinds: array[int]
    columns: tuple[tuple[array[int], ...], ...]
    count: int

    def entries(self) -> Any:
        """(shape, numbers) of each entry in order, the numbers as a tuple."""
        at = [0] * len(self.shapes)
        for kind in self.kinds:
            index = at[kind]
            at[kind] = index + 1
            yield self.shapes[kind], tuple(column[index] for column in self.columns[kind])


@dataclass(frozen=True)
class _Number:
    """A number's bytes in an entry: `offset` from the entry's start, `width`, and how to read them."""

    offset: int
    width: int
    kind: str  # a key of _CODES


@dataclass
class _Skeleton:
    shape: Shape
    match: Any  # the compiled pattern's `match`: the entry's bytes, any bytes where its numbers are
    numbers: tuple[_Number, ...]
    memoized: tuple[Any, ...]  # what each MEMOIZE of an entry memoizes: a text, or _OPAQUE
    size: int  # the entry's bytes (every entry of a skeleton has as many)
    kind: int = -1  # its index in the shapes of the run being read
    starts: list[int] = field(default_factory=list)  # where its entries of the run start
    memo_at: list[int] = field(default_factory=list)  # the first memo slot each of them fills
    next: list[_Skeleton] = field(default_factory=list)  # skeletons seen after it, latest first

    def columns(self, data: bytes) -> tuple[array[int], ...]:
        """One array per number of its entries in the run: the entries' bytes gathered into one
        block, each number's bytes sliced out of it as a column (no object per entry)."""
        width = self.size
        block = b"".join([data[start : start + width] for start in self.starts])
        count = len(self.starts)
        columns = []
        for number in self.numbers:
            size = number.width
            column = bytearray(count * size)
            for byte in range(size):
                column[byte::size] = block[number.offset + byte :: width]
            values = array(_CODES[number.kind])
            values.frombytes(bytes(column))
            if sys.byteorder != "little":  # a pickle's integers are little-endian
                values.byteswap()
            columns.append(values)
        return tuple(columns)


def decode(data: bytes, runs: bool = True) -> Any:
    """The value of the pickle `data` (see the module's docstring)."""
    if not runs:
        return _Machine(data, False).run()
    try:
        return _Machine(data, True).run()
    except (_Unknown, CorruptPickle):
        # A run not put in the entries list as it is (_Machine.placed), or an error a run may have
        # caused: opcode by opcode, which gives CPython's value or the error again.
        return _Machine(data, False).run()


# What a malformed pickle makes the loop raise (a short read, a wrong type on the stack): corrupt.
_BROKEN = (LookupError, ValueError, AttributeError, struct.error, TypeError, RecursionError, OverflowError)


class _Machine:
    """A pickle's opcodes run over a stack of plain values. `sandbox`: one entry decoded to learn
    its skeleton (see the module's docstring); `memo` is then the main decoding's, read only."""

    def __init__(
        self,
        data: bytes,
        runs: bool,
        sandbox: bool = False,
        memo: dict[int, Any] | None = None,
        filled: int = 0,
        opaque: list[tuple[int, int]] | None = None,
    ) -> None:
        self.data = data
        self.runs = runs
        self.sandbox = sandbox
        self.memo: dict[int, Any] = memo if memo is not None else {}
        self.filled = filled  # memo slots filled: the next MEMOIZE's index, as in CPython's unpickler
        self.max_key = -1  # the highest slot an explicit PUT filled
        self.opaque = opaque if opaque is not None else []  # memo ranges filled inside runs
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.skeletons: list[_Skeleton] = []
        self.last: _Skeleton | None = None
        self.failed = 0
        self.entry_stack: list[Any] | None = None  # where the last entry started (see _at_entry)
        self.entry_base = 0
        self.run_list: list[Any] | None = None  # the entries list the runs are in (see placed)
        self.runs_made = self.runs_placed = 0
        # Bytes that skeletons that did not fit may be compared with, and learning may cost, in all:
        # entries crafted to share long beginnings with many skeletons cannot make it quadratic.
        self.budget = 4 * len(data) + (4 << 20)
        # sandbox only
        self.own: set[int] = set()  # ids of the containers this entry made
        self.numbers: list[_Number] = []
        self.slot_values: list[Any] = []
        self.memoized: list[Any] = []
        self.start = 0

    # ------------------------------------------------------------------ the opcode loop
    def run(self, pos: int = 0, end: int | None = None) -> Any:
        data = self.data
        size = len(data)
        stack = self.stack
        try:
            while True:
                if pos >= size:
                    raise CorruptPickle("pickle ends without STOP")
                op = data[pos]
                pos += 1
                if op == 0x68:  # BINGET
                    stack.append(self._get(data[pos]))
                    pos += 1
                elif op == 0x58:  # BINUNICODE
                    (length,) = struct.unpack_from("<I", data, pos)
                    pos += 4
                    stack.append(self._text(pos, length))
                    pos += length
                elif op == 0x8C:  # SHORT_BINUNICODE
                    length = data[pos]
                    pos += 1
                    stack.append(self._text(pos, length))
                    pos += length
                elif op == 0x4B:  # BININT1
                    stack.append(self._number(pos, 1, "u1", data[pos]))
                    pos += 1
                elif op == 0x4D:  # BININT2
                    stack.append(self._number(pos, 2, "u2", data[pos] | data[pos + 1] << 8))
                    pos += 2
                elif op == 0x4A:  # BININT
                    stack.append(self._number(pos, 4, "i4", struct.unpack_from("<i", data, pos)[0]))
                    pos += 4
                elif op == 0x8A:  # LONG1
                    length = data[pos]
                    pos += 1
                    stack.append(self._long(pos, length))
                    pos += length
                elif op == 0x8B:  # LONG4
                    (length,) = struct.unpack_from("<I", data, pos)
                    pos += 4
                    if self.sandbox:
                        raise _Abandon
                    stack.append(self._long(pos, length))
                    pos += length
                elif op == 0x47:  # BINFLOAT
                    if self.sandbox:
                        raise _Abandon  # FR's numbers are integers; a float keeps the entry slow
                    stack.append(struct.unpack_from(">d", data, pos)[0])
                    pos += 8
                elif op == 0x28:  # MARK
                    self.marks.append(stack)
                    stack = self.stack = []
                elif op == 0x7D:  # EMPTY_DICT
                    if self.runs and self._at_entry(stack):
                        found = self._entries(pos - 1)
                        if found is not None:
                            pos = found
                            continue
                    stack.append(self._made({}))
                elif op == 0x5D:  # EMPTY_LIST
                    stack.append(self._made([]))
                elif op == 0x29:  # EMPTY_TUPLE
                    stack.append(())
                elif op == 0x75:  # SETITEMS
                    items = stack
                    stack = self._pop_mark()
                    target = self._target(stack)
                    if items and (not isinstance(target, dict) or len(items) % 2):
                        raise CorruptPickle("SETITEMS")  # with no items: nothing to do, as CPython
                    for at in range(0, len(items), 2):
                        target[_key(items[at])] = items[at + 1]
                elif op == 0x73:  # SETITEM
                    value, key = stack.pop(), stack.pop()
                    target = self._target(stack)
                    if not isinstance(target, dict):
                        raise CorruptPickle("SETITEM")
                    target[_key(key)] = value
                elif op == 0x65:  # APPENDS
                    items = stack
                    stack = self._pop_mark()
                    target = self._target(stack)
                    if items and not isinstance(target, list):
                        raise CorruptPickle("APPENDS")
                    if items:
                        target.extend(items)
                        if target is self.run_list:
                            self.runs_placed += sum(type(item) is EntryRun for item in items)
                elif op == 0x61:  # APPEND
                    value = stack.pop()
                    target = self._target(stack)
                    if not isinstance(target, list):
                        raise CorruptPickle("APPEND")
                    target.append(value)
                    if target is self.run_list and type(value) is EntryRun:
                        self.runs_placed += 1
                elif op == 0x71:  # BINPUT
                    self._put(data[pos], stack)
                    pos += 1
                elif op == 0x72:  # LONG_BINPUT
                    self._put(struct.unpack_from("<I", data, pos)[0], stack)
                    pos += 4
                elif op == 0x94:  # MEMOIZE
                    if not stack:
                        raise CorruptPickle("MEMOIZE on an empty stack")
                    if self.sandbox:
                        # A text is the same in every entry of a skeleton; a container is not.
                        self.memoized.append(stack[-1] if type(stack[-1]) in (str, bytes) else _OPAQUE)
                    else:
                        self._put(self.filled, stack, explicit=False)
                elif op == 0x6A:  # LONG_BINGET
                    stack.append(self._get(struct.unpack_from("<I", data, pos)[0]))
                    pos += 4
                elif op == 0x4E:  # NONE
                    stack.append(None)
                elif op == 0x88:  # NEWTRUE
                    stack.append(True)
                elif op == 0x89:  # NEWFALSE
                    stack.append(False)
                elif op in (0x85, 0x86, 0x87):  # TUPLE1..3
                    count = op - 0x84
                    if len(stack) < count:
                        raise CorruptPickle("TUPLE")
                    items = stack[-count:]
                    del stack[-count:]
                    stack.append(self._made(tuple(items)))
                elif op == 0x74:  # TUPLE
                    items = stack
                    stack = self._pop_mark()
                    stack.append(self._made(tuple(items)))
                elif op == 0x6C:  # LIST
                    items = stack
                    stack = self._pop_mark()
                    stack.append(self._made(items))
                elif op == 0x64:  # DICT
                    items = stack
                    stack = self._pop_mark()
                    if len(items) % 2:
                        raise CorruptPickle("DICT")
                    stack.append(self._made({_key(items[a]): items[a + 1] for a in range(0, len(items), 2)}))
                elif op == 0x95:  # FRAME: a grouping of the opcodes that follow, nothing to build
                    if self.sandbox:
                        raise _Abandon
                    pos += 8
                elif op == 0x80:  # PROTO
                    pos += 1
                elif op == 0x2E:  # STOP
                    if self.sandbox or len(stack) != 1 or self.marks:
                        raise CorruptPickle("STOP")
                    if self.runs_made and not self.placed(stack[0]):
                        raise _Unknown
                    return stack[0]
                elif op == 0x30:  # POP
                    if stack:
                        stack.pop()
                    else:
                        stack = self._pop_mark()
                elif op == 0x31:  # POP_MARK
                    stack = self._pop_mark()
                elif op == 0x32:  # DUP
                    if self.sandbox or not stack:
                        raise _Abandon if self.sandbox else CorruptPickle("DUP")
                    if type(stack[-1]) is EntryRun:
                        raise _Unknown  # one entry twice, not the run
                    stack.append(stack[-1])
                elif op in (0x42, 0x43, 0x8E, 0x96):  # BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
                    width = {0x42: 4, 0x43: 1, 0x8E: 8, 0x96: 8}[op]
                    length = int.from_bytes(data[pos : pos + width], "little")
                    pos += width
                    if pos + length > size:
                        raise CorruptPickle("bytes past the end")
                    stack.append(bytes(data[pos : pos + length]))
                    pos += length
                elif op == 0x8D:  # BINUNICODE8
                    length = int.from_bytes(data[pos : pos + 8], "little")
                    pos += 8
                    stack.append(self._text(pos, length))
                    pos += length
                elif op == 0x8F:  # EMPTY_SET
                    stack.append(self._made(set()))
                elif op == 0x90:  # ADDITEMS
                    items = stack
                    stack = self._pop_mark()
                    target = self._target(stack)
                    if items and not isinstance(target, set):
                        raise CorruptPickle("ADDITEMS")
                    if items:
                        target.update(_key(item) for item in items)
                elif op == 0x91:  # FROZENSET
                    items = stack
                    stack = self._pop_mark()
                    stack.append(frozenset(_key(item) for item in items))
                elif op in _REFUSED:
                    raise DumpRefused(_refusal(op, data, pos, stack))
                elif op in _PERSISTENT:
                    raise DumpRefused("pickle uses persistent ids; not a Flight Recorder dump, not unpickled")
                else:
                    raise CorruptPickle(f"opcode {op:#x}")
                if end is not None and not self.marks and len(stack) == 1 and _entry_ends(data, pos):
                    return pos  # the sandbox's entry is whole
        except _BROKEN as error:
            if self.sandbox:
                raise _Abandon from error
            raise CorruptPickle(type(error).__name__) from error

    # ------------------------------------------------------------------ helpers
    def _pop_mark(self) -> list[Any]:
        if not self.marks:
            raise _Abandon if self.sandbox else CorruptPickle("no MARK")
        self.stack = self.marks.pop()
        return self.stack

    def _target(self, stack: list[Any]) -> Any:
        if not stack:
            raise _Abandon if self.sandbox else CorruptPickle("nothing to add to")
        target = stack[-1]
        if self.sandbox and id(target) not in self.own:
            raise _Abandon  # changes a container made before this entry: runs would skip that
        return target

    def _made(self, value: Any) -> Any:
        if self.sandbox:
            self.own.add(id(value))
        return value

    def _text(self, pos: int, length: int) -> str:
        if pos + length > len(self.data):
            raise CorruptPickle("text past the end")
        return self.data[pos : pos + length].decode("utf-8", "surrogatepass")

    def _number(self, pos: int, width: int, kind: str, value: Any) -> Any:
        if not self.sandbox:
            return value
        self.numbers.append(_Number(pos - self.start, width, kind))
        self.slot_values.append(value)
        return Slot(len(self.numbers) - 1)

    def _long(self, pos: int, length: int) -> Any:
        if length > MAX_LONG_BYTES or pos + length > len(self.data):
            raise CorruptPickle("integer too long")
        value = int.from_bytes(self.data[pos : pos + length], "little", signed=True)
        if self.sandbox:
            if length not in (1, 2, 4, 8):
                raise _Abandon
            return self._number(pos, length, f"long{length}", value)
        return value

    def _put(self, index: int, stack: list[Any], explicit: bool = True) -> None:
        if self.sandbox:
            raise _Abandon  # an entry's memo slot: a later entry may read it
        if not stack:
            raise CorruptPickle("PUT on an empty stack")
        if type(stack[-1]) is EntryRun:
            raise _Unknown  # its last entry memoized: a GET would read the run
        if index in self.memo or self._opaque(index):
            # Written again (CPython overwrites): skeletons may have read the old value.
            self.skeletons, self.last = [], None
        else:
            self.filled += 1
        if explicit:
            self.max_key = max(self.max_key, index)
        self.memo[index] = stack[-1]

    def _opaque(self, index: int) -> bool:
        return any(low <= index < high for low, high in self.opaque)

    def _get(self, index: int) -> Any:
        try:
            value = self.memo[index]
        except KeyError:
            if self.opaque:  # filled inside a run, or numbered otherwise by CPython: decode again
                raise _Unknown from None
            if self.sandbox:
                raise _Abandon from None
            raise CorruptPickle("memo slot never written") from None
        if value is self.run_list and value is not None:
            raise _Unknown  # the entries list named elsewhere too, where its runs would stay
        return value

    # ------------------------------------------------------------------ entries
    def _at_entry(self, stack: list[Any]) -> bool:
        """At the start of an item of the list under the top-level key `entries`. An empty dict in
        a one-key dict (SETITEM) or a 3-tuple (TUPLE3) of an entry has no MARK of its own: an entry
        starts after the list's MARK or where the last one is one value (a dict is no key)."""
        if len(self.marks) != 2:
            return False
        outer = self.marks[-1]
        if not (len(outer) >= 2 and type(outer[-1]) is list and outer[-2] == "entries"):
            return False
        if stack and (stack is not self.entry_stack or len(stack) != self.entry_base + 1):
            return False
        self.entry_stack, self.entry_base = stack, len(stack)
        return True

    def placed(self, value: Any) -> bool:
        """Whether every run made was appended as it is to the list under `value`'s key `entries`
        (else the pickle built something else from its entries, dropped or repeated one)."""
        top_level = type(value) is dict and value.get("entries") is self.run_list
        return top_level and self.runs_placed == self.runs_made

    def _entries(self, pos: int) -> int | None:
        """Push a run of entries from `pos` (an entry's EMPTY_DICT); where it ends, or None when
        the entry there fits no skeleton (it is then decoded opcode by opcode)."""
        data, start, size = self.data, pos, len(self.data)
        kinds: array[int] = array("H")
        used: list[_Skeleton] = []
        memo_start = self.filled
        previous = self.last
        while pos < size and data[pos] == 0x7D:
            found = None
            # A loop's entries come in the same order: try what followed the previous entry's
            # skeleton before, then every skeleton, then learn one.
            for skeleton in previous.next if previous is not None else ():
                found = self._fits(skeleton, pos)
                if found is not None:
                    break
            else:
                skeleton, found = self._other(pos)
                if found is None:
                    break
                if previous is not None:
                    previous.next.insert(0, skeleton)
                    del previous.next[_SUCCESSORS:]
            if skeleton.kind < 0:
                skeleton.kind = len(used)
                used.append(skeleton)
            kinds.append(skeleton.kind)
            skeleton.starts.append(pos)
            if skeleton.memoized:
                skeleton.memo_at.append(self.filled)
                self.filled += len(skeleton.memoized)
            pos += skeleton.size
            previous = skeleton
        self.last = previous
        if pos == start:
            return None
        if self.run_list is None:
            self.run_list = self.marks[-1][-1]
        elif self.marks[-1][-1] is not self.run_list:
            raise _Unknown  # runs in two lists: at most one is the top-level entries list
        self.runs_made += 1
        shapes = tuple(one.shape for one in used)
        columns = tuple(one.columns(data) for one in used)
        for one in used:
            one.kind, one.starts = -1, []
            self._memoize(one)
            one.memo_at = []
        self.stack.append(EntryRun(shapes, kinds, columns, len(kinds)))
        if self.filled > memo_start:
            if self.max_key >= memo_start:  # a slot PUT there before: CPython would number them otherwise
                raise _Unknown
            self.opaque.append((memo_start, self.filled))
        return pos

    def _other(self, pos: int) -> tuple[_Skeleton, re.Match[bytes] | None]:
        """A known skeleton that the entry at `pos` fits, else one learnt from it, and its match."""
        for skeleton in self.skeletons:
            found = self._fits(skeleton, pos)
            if found is not None:
                return skeleton, found
            self.budget -= skeleton.size
        if self.budget < 0:
            self.runs = False  # the rest opcode by opcode
            return _NO_SKELETON, None
        learnt = self._learn(pos)
        if learnt is None:
            return self.skeletons[0] if self.skeletons else _NO_SKELETON, None
        self.skeletons.append(learnt)
        return learnt, self._fits(learnt, pos)

    def _fits(self, skeleton: _Skeleton, pos: int) -> re.Match[bytes] | None:
        """The match of `skeleton` at `pos` when the entry there is one of its entries: its bytes
        and then the entry's end, where the sandbox that learnt it saw one. A pattern matches a
        beginning only: without the end, a short entry's skeleton (an empty dict) would swallow the
        first bytes of a longer entry, and the rest of that entry would be read as the list's."""
        found = skeleton.match(self.data, pos)
        return found if found is not None and _entry_ends(self.data, pos + skeleton.size) else None

    def _memoize(self, skeleton: _Skeleton) -> None:
        """The texts that the entries of `skeleton` memoized, in their slots (a later entry may name
        one: Python's pickler memoizes a text where it first appears); the rest stay opaque."""
        texts = [(offset, value) for offset, value in enumerate(skeleton.memoized) if value is not _OPAQUE]
        for first in skeleton.memo_at if texts else ():
            for offset, value in texts:
                self.memo[first + offset] = value

    def _learn(self, pos: int) -> _Skeleton | None:
        if len(self.skeletons) >= MAX_SKELETONS or self.failed >= MAX_FAILED_LEARNING:
            return None
        box = _Machine(self.data, False, True, self.memo, self.filled, self.opaque)
        box.start = pos
        try:
            end = box.run(pos, end=pos)
            template = box.stack[0]
            paths = _slot_paths(template, box.own, len(box.numbers))
        except (_Abandon, CorruptPickle, DumpRefused):
            paths = None
        if paths is None or end - pos > MAX_SKELETON_BYTES:
            self.failed += 1
            return None
        self.failed = 0
        self.budget -= LEARNING_COST * (end - pos)  # compiling a pattern costs more than matching it
        pattern, at = [], pos
        for number in box.numbers:
            pattern.append(re.escape(self.data[at : pos + number.offset]))
            pattern.append(b".{%d}" % number.width)
            at = pos + number.offset + number.width
        pattern.append(re.escape(self.data[at:end]))
        regex = re.compile(b"".join(pattern), re.DOTALL)
        memoized = tuple(box.memoized)
        return _Skeleton(Shape(template, paths), regex.match, tuple(box.numbers), memoized, end - pos)


_SUCCESSORS = 4  # skeletons remembered after each one (a step's collectives in a few orders)
_NO_SKELETON = _Skeleton(Shape({}, ()), None, (), (), 0)
_OPAQUE = object()  # a memo slot filled inside a run with a container (not kept)
_CODES = {"u1": "B", "u2": "H", "i4": "i", "long1": "b", "long2": "h", "long4": "i", "long8": "q"}
_ENDS = frozenset((0x7D, 0x65))  # after an entry: the next one, APPENDS
_FRAME_BYTES = 9  # FRAME and its 8 bytes of length


def _entry_ends(data: bytes, pos: int) -> bool:
    """An entry whose opcodes left one value and no MARK ends at `pos`: the next entry or APPENDS
    follows, maybe after a FRAME (a FRAME may come between any two objects, also between a
    one-key entry's empty dict and its key, where the entry has not ended)."""
    if pos < len(data) and data[pos] == 0x95:
        pos += _FRAME_BYTES
    return pos >= len(data) or data[pos] in _ENDS


_KEY_TYPES = (str, int, bytes, float, bool, type(None))
MAX_KEY_VALUES = 4096  # values in one tuple key (hashing walks them all)


def _key(value: Any) -> Any:
    """A dict key or set member: a plain scalar, or a tuple of them nested at most a few levels (a
    deep tuple would recurse when hashed)."""
    if type(value) in _KEY_TYPES:
        return value
    if type(value) is not tuple:
        raise CorruptPickle("a key that is not a plain scalar or tuple")
    work: list[tuple[Any, int]] = [(value, 0)]
    seen = 0
    while work:
        item, depth = work.pop()
        seen += 1
        if seen > MAX_KEY_VALUES or depth > 16:
            raise CorruptPickle("a key too big to hash")
        if type(item) is tuple:
            work.extend((child, depth + 1) for child in item)
        elif type(item) not in _KEY_TYPES:
            raise CorruptPickle("a key that is not a plain scalar or tuple")
    return value


def _refusal(op: int, data: bytes, pos: int, stack: list[Any]) -> str:
    """Why an opcode that calls, imports or names something was refused (nothing was built)."""
    named: tuple[Any, ...] = ()
    if op == ord("c"):  # GLOBAL: `module\nname\n` follows
        named = tuple(bytes(data[pos : pos + 512]).split(b"\n")[:2])
        named = tuple(part.decode("utf-8", "replace") for part in named) if len(named) == 2 else ()
    elif op == 0x93 and len(stack) >= 2:  # STACK_GLOBAL: module and name on the stack
        named = (stack[-2], stack[-1])
    if len(named) == 2 and all(isinstance(part, str) for part in named):
        what = f"refers to {named[0][:100]}.{named[1][:100]}"
    else:
        what = f"uses {_REFUSED[op]}, which builds objects"
    return f"pickle {what}; Flight Recorder dumps hold only plain data, so it was not unpickled"


def _slot_paths(template: Any, own: set[int], slots: int) -> tuple[tuple[Any, ...], ...] | None:
    """Where each Slot stands in `template` (walking only the containers the entry made); None
    when a Slot stands twice, nowhere, or in a key."""
    found: dict[int, tuple[Any, ...]] = {}
    work: list[tuple[Any, tuple[Any, ...]]] = [(template, ())]
    while work:
        value, path = work.pop()
        if isinstance(value, Slot):
            if value.index in found:
                return None
            found[value.index] = path
        elif id(value) in own:
            if len(path) > 16:
                return None
            if isinstance(value, dict):
                if any(isinstance(key, Slot) for key in value):
                    return None
                work.extend((child, (*path, key)) for key, child in value.items())
            elif isinstance(value, (list, tuple)):
                work.extend((child, (*path, at)) for at, child in enumerate(value))
            elif isinstance(value, set) and any(isinstance(item, Slot) for item in value):
                return None
    if len(found) != slots:
        return None
    return tuple(found[index] for index in range(slots))
