"""Symbolic values of Python expressions, and their translation to z3.

A value is an immutable tree over atoms. The atoms say how a value relates to the rank:

* `rank`, `world`: the rank of the process and the world size;
* `shared`: unknown but equal on every rank (a module constant, an argument, the result of a
  collective) — the stated assumption that values not derived from the rank are uniform;
* `perrank`: unknown and possibly different on every rank because it was computed from the rank
  by something collcheck cannot model;
* `nondet`: different on every process without involving the rank (time, random numbers, the
  filesystem): a divergence only these explain is `Divergence.nondet_only`.

The z3 translation instantiates the per-rank atoms once for each of the two ranks compared
(suffixes `@a` and `@b`) and shares the `shared` ones, which is exactly the question "can two
ranks disagree?".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any

PER_RANK_KINDS = frozenset({"rank", "perrank", "nondet"})


@dataclass(frozen=True)
class Const:
    value: int | bool | str | None

    def __str__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True)
class GradSync:
    """A gradient reduction a backward through the value runs: the catalog's op (`ddp_backward`)
    and the wrapper's group (None: the world)."""

    op: str
    group: GroupVal | None = None


@dataclass(frozen=True)
class Maker:
    """The callable whose call, run as a black box, made a value: its qualified name (the plain
    name for one of the file) and the path of the file the call is written in. Whether it makes
    None is asked only where a test needs it (declared_types.made_never_none)."""

    qualified: str
    importer: str


class Nullness(Enum):
    """What the code's declarations say of an unknown value being None (declared_types.py)."""

    UNDECLARED = "undeclared"  # nothing: it may be None
    NEVER = "never"  # a type that excludes None: an `is None` test on it is false
    MAYBE = "maybe"  # an Optional type or a None default: not to be taken for a NEVER later


@dataclass(frozen=True)
class Atom:
    name: str
    kind: str  # rank | world | shared | perrank | nondet
    why: str = ""  # for nondet atoms: what varies ("wall-clock time")
    lower: int | None = None  # known bounds, e.g. 0 <= group_rank < world
    below_world: bool = False
    # computed from what a module wrapped for data parallelism returned (gradient_sync.py)
    synced: frozenset[GradSync] = frozenset()
    # for nondet atoms of per-rank data (own_data.py): the lines of the collectives that combine it
    # across ranks (in the function that combines it, or in the helpers it is handed to)
    combined_by: frozenset[int] = frozenset()
    # what the declarations say of the value being None (declared_types.py)
    nullness: Nullness = Nullness.UNDECLARED
    maker: Maker | None = None  # the black-box call that made it (gradient_sync.call_output)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class BinOp:
    op: str  # + - * // % min max
    left: Expr
    right: Expr

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


@dataclass(frozen=True)
class Compare:
    op: str  # == != < <= > >=
    left: Expr
    right: Expr

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


@dataclass(frozen=True)
class BoolOp:
    op: str  # and | or
    values: tuple[Expr, ...]

    def __str__(self) -> str:
        return "(" + f" {self.op} ".join(str(v) for v in self.values) + ")"


@dataclass(frozen=True)
class Not:
    operand: Expr

    def __str__(self) -> str:
        return f"not {self.operand}"


@dataclass(frozen=True)
class IfExp:
    test: Expr
    then: Expr
    orelse: Expr

    def __str__(self) -> str:
        return f"({self.then} if {self.test} else {self.orelse})"


@dataclass(frozen=True)
class Member:
    """`item in (a, b, c)`."""

    item: Expr
    options: tuple[Expr, ...]

    def __str__(self) -> str:
        return f"({self.item} in {tuple(str(o) for o in self.options)})"


@dataclass(frozen=True)
class InRange:
    """`start <= item < stop` with a stride: `item in range(start, stop, step)`."""

    item: Expr
    start: Expr
    stop: Expr
    step: int = 1


@dataclass(frozen=True)
class TupleVal:
    """A tuple/list whose elements are known (for unpacking and `in` tests)."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Sized:
    """A sequence whose contents are unknown but whose length is known (`items[rank::world]`).
    `content`: what its entries are computed from, apart from the length (`[torch.randn(3) for _ in
    range(4)]` has random entries and four of them)."""

    name: str
    length: Expr
    content: Expr = Const(None)
    dims: tuple[Expr, ...] = ()  # a tensor's shape, when a factory's arguments say it


@dataclass(frozen=True)
class GroupVal:
    """A process group. `members` is a predicate over the placeholder atom MEMBER, or None when the
    membership cannot be computed (then collcheck stays quiet about it).

    `color` is set for a creation call that hands each rank a different group of one partition
    (`new_subgroups`): a term over RANK, equal on two ranks exactly when they hold the same group;
    and for a group of unknown membership looked up by a per-rank key (`groups[f"local_{i}"]`):
    the key, equal on two ranks that hold the same group.
    `created` marks a group made by a group-creation call of the analysed code, which is never the
    default (world) group object."""

    key: str
    members: Expr | None
    per_rank: bool = False
    color: Expr | None = None
    created: bool = False
    type_name: str = ""  # the catalogued type of the object, when it is one (vLLM's GroupCoordinator)


Expr = Const | Atom | BinOp | Compare | BoolOp | Not | IfExp | Member | InRange | TupleVal | Sized | GroupVal

RANK = Atom("rank", "rank")
WORLD = Atom("world", "world")
LOCAL_WORLD = Atom("local_world", "shared", lower=1)
MEMBER = Atom("member", "shared")
TRUE = Const(True)
FALSE = Const(False)


def children(expr: Expr) -> tuple[Expr, ...]:
    if isinstance(expr, (BinOp, Compare)):
        return (expr.left, expr.right)
    if isinstance(expr, BoolOp):
        return expr.values
    if isinstance(expr, Not):
        return (expr.operand,)
    if isinstance(expr, IfExp):
        return (expr.test, expr.then, expr.orelse)
    if isinstance(expr, Member):
        return (expr.item, *expr.options)
    if isinstance(expr, InRange):
        return (expr.item, expr.start, expr.stop)
    if isinstance(expr, TupleVal):
        return expr.items
    if isinstance(expr, Sized):
        return (expr.length, expr.content, *expr.dims)
    return ()


def atoms(expr: Expr) -> Iterator[Atom]:
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Atom):
            yield node
        else:
            stack.extend(children(node))


def atom_kinds(expr: Expr) -> frozenset[str]:
    return frozenset(atom.kind for atom in atoms(expr))


def is_rank_dependent(expr: Expr) -> bool:
    """Some atom of `expr` is of a per-rank kind (rank, perrank, nondet)."""
    summary = _per_rank_summary(expr)
    return summary.rank or summary.nondet_why is not None


DELIVERED_PREFIX = "uniform:"  # the name of what a collective's `uniform_after` delivered


def opaque(name: str, inputs: tuple[Expr, ...] = ()) -> Atom:
    """An unknown value computed from `inputs`: it varies per rank exactly when they do, and
    carries the gradient reductions of all of them."""
    ranked = False
    why: str | None = None
    combined_by: frozenset[int] = frozenset()
    synced: frozenset[GradSync] = frozenset()
    # The same value object often comes several times (a loop's carried value is asked with the
    # value of every body path, most of them shared, and the tests those paths share): each is
    # summarised once. Its first time decides `why`, so skipping the repeats changes nothing.
    met: set[int] = set()
    for item in inputs:
        if id(item) in met:
            continue
        met.add(id(item))
        summary = _per_rank_summary(item)
        synced |= summary.synced
        ranked = ranked or summary.rank  # the rank wins over a nondet input
        if why is None:
            why, combined_by = summary.nondet_why, summary.nondet_combined_by
    if ranked:
        return Atom(name, "perrank", synced=synced)
    if why is not None:
        return Atom(name, "nondet", why=why, synced=synced, combined_by=combined_by)
    return Atom(name, "shared", synced=synced)


def read_of(text: str, receiver: Expr, inputs: tuple[Expr, ...]) -> Atom:
    """What a method reads off `receiver` (`size.item()`, `text` its source), computed from
    `inputs`. Read off what a collective delivered (`uniform:size@23:4`, collectives.py), it is
    named after that collective's place too (`uniform:size.item()@23:4`): every rank that reads
    the same delivery reads the same value, and a test on it is known to test a delivered value
    (delivered.py); a rank that reads its own copy elsewhere reads another value."""
    if isinstance(receiver, Atom) and receiver.name.startswith(DELIVERED_PREFIX) and "@" in receiver.name:
        return opaque(f"{DELIVERED_PREFIX}{text}@{receiver.name.rsplit('@', 1)[1]}", inputs)
    return opaque(f"call:{text}", inputs)


def synced_in(values: tuple[Expr, ...]) -> frozenset[GradSync]:
    """The gradient reductions a backward through a value computed from `values` runs."""
    return frozenset().union(*(_per_rank_summary(value).synced for value in values))


@dataclass(frozen=True)
class _Summary:
    """What `opaque` asks of one input: whether an atom of kind rank or perrank is in it, the
    `why` of its first nondet atom in `atoms` order (None when it holds none), and the gradient
    reductions its atoms carry."""

    rank: bool
    nondet_why: str | None
    synced: frozenset[GradSync] = frozenset()
    nondet_combined_by: frozenset[int] = frozenset()  # the `combined_by` of that first nondet atom


_NO_ATOM = _Summary(False, None)
_RANK_ATOM = _Summary(True, None)
# Summaries of composite values, by identity (an expression's hash walks its whole tree), each
# with the value itself so that its id is not reused while the entry lives. Values are built by
# wrapping earlier ones (a loop's carried value holds the previous one), so the same subtrees are
# asked about again and again; the bound keeps the memory small, and emptying it only costs time.
_SUMMARIES: dict[int, tuple[Expr, _Summary]] = {}
_MAX_SUMMARIES = 1 << 16


def _atom_summary(atom: Atom) -> _Summary:
    if atom.synced:
        rank = atom.kind in ("rank", "perrank")
        if atom.kind != "nondet":
            return _Summary(rank, None, atom.synced)
        return _Summary(rank, atom.why, atom.synced, atom.combined_by)
    if atom.kind in ("rank", "perrank"):
        return _RANK_ATOM
    if atom.kind == "nondet":
        return _Summary(False, atom.why, nondet_combined_by=atom.combined_by)
    return _NO_ATOM


def _per_rank_summary(expr: Expr) -> _Summary:
    """`_Summary` of `expr`, from its children's (iteratively: deep values do not recurse).
    `atoms` yields the atoms of the last child first, so the first nondet atom of `expr` is the
    first of its children's in reverse order."""
    if isinstance(expr, Atom):
        return _atom_summary(expr)
    known = _SUMMARIES.get(id(expr))
    if known is not None and known[0] is expr:
        return known[1]
    if len(_SUMMARIES) >= _MAX_SUMMARIES:
        _SUMMARIES.clear()
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in _SUMMARIES and _SUMMARIES[id(node)][0] is node:
            continue
        parts = children(node)
        if not expanded:
            stack.append((node, True))
            stack.extend((part, False) for part in parts if not isinstance(part, Atom))
            continue
        rank = False
        why: str | None = None
        combined_by: frozenset[int] = frozenset()
        synced: frozenset[GradSync] = frozenset()
        for part in reversed(parts):
            summary = _atom_summary(part) if isinstance(part, Atom) else _SUMMARIES[id(part)][1]
            rank = rank or summary.rank
            synced |= summary.synced
            if why is None:
                why, combined_by = summary.nondet_why, summary.nondet_combined_by
        found = _Summary(rank, why, synced, combined_by) if rank or why is not None or synced else _NO_ATOM
        _SUMMARIES[id(node)] = (node, found)
    return _SUMMARIES[id(expr)][1]


MAX_CHOICE_DEPTH = 16  # nested `x if c else y` levels a tuple element is looked up through


def tuple_item(value: Expr, index: int, length: int | None = None, depth: int = 0) -> Expr | None:
    """Element `index` of a tuple value, also of a tuple chosen by a test: a helper with two
    `return (a, b)` statements returns `(a, b) if c else (1, 0)`, whose first element is
    `a if c else 1`, not an unknown computed from `b` too. None when `value` is no such tuple, or
    one of another `length` than the unpacking asks for."""
    if isinstance(value, TupleVal):
        size = len(value.items)
        if (length is not None and size != length) or not -size <= index < size:
            return None
        return value.items[index]
    if isinstance(value, IfExp) and depth < MAX_CHOICE_DEPTH:
        then = tuple_item(value.then, index, length, depth + 1)
        orelse = tuple_item(value.orelse, index, length, depth + 1) if then is not None else None
        if then is None or orelse is None:
            return None
        return then if then == orelse else IfExp(value.test, then, orelse)
    return None


def substitute(expr: Expr, mapping: dict[Atom, Expr]) -> Expr:
    if isinstance(expr, Atom):
        return mapping.get(expr, expr)
    if isinstance(expr, BinOp):
        return BinOp(expr.op, substitute(expr.left, mapping), substitute(expr.right, mapping))
    if isinstance(expr, Compare):
        return Compare(expr.op, substitute(expr.left, mapping), substitute(expr.right, mapping))
    if isinstance(expr, BoolOp):
        return BoolOp(expr.op, tuple(substitute(v, mapping) for v in expr.values))
    if isinstance(expr, Not):
        return Not(substitute(expr.operand, mapping))
    if isinstance(expr, IfExp):
        return IfExp(*(substitute(part, mapping) for part in (expr.test, expr.then, expr.orelse)))
    if isinstance(expr, Member):
        return Member(substitute(expr.item, mapping), tuple(substitute(o, mapping) for o in expr.options))
    if isinstance(expr, InRange):
        return InRange(
            substitute(expr.item, mapping),
            substitute(expr.start, mapping),
            substitute(expr.stop, mapping),
            expr.step,
        )
    if isinstance(expr, TupleVal):
        return TupleVal(tuple(substitute(item, mapping) for item in expr.items))
    if isinstance(expr, Sized):
        return Sized(
            expr.name,
            substitute(expr.length, mapping),
            substitute(expr.content, mapping),
            tuple(substitute(d, mapping) for d in expr.dims),
        )
    return expr


def negate(expr: Expr) -> Expr:
    if isinstance(expr, Const) and isinstance(expr.value, bool):
        return Const(not expr.value)
    if isinstance(expr, Not):
        return expr.operand
    return Not(expr)


def conjoin(values: tuple[Expr, ...]) -> Expr:
    kept = tuple(v for v in values if v != TRUE)
    if any(v == FALSE for v in kept):
        return FALSE
    if not kept:
        return TRUE
    return kept[0] if len(kept) == 1 else BoolOp("and", kept)


def constant_truth(expr: Expr) -> bool | None:
    """True/False when the value is a literal, None when it depends on anything."""
    if isinstance(expr, Const) and (isinstance(expr.value, (bool, int, str)) or expr.value is None):
        return bool(expr.value)
    if isinstance(expr, Not):
        inner = constant_truth(expr.operand)
        return None if inner is None else not inner
    return None


def fold(expr: Expr) -> Expr:
    """Constant folding for integer arithmetic on literals (enough to count short loops)."""
    if not isinstance(expr, BinOp):
        return expr
    left, right = fold(expr.left), fold(expr.right)
    if not (isinstance(left, Const) and isinstance(right, Const)):
        return BinOp(expr.op, left, right)
    x, y = left.value, right.value
    if not (isinstance(x, int) and isinstance(y, int)) or isinstance(x, bool) or isinstance(y, bool):
        return BinOp(expr.op, left, right)
    value = integer_arithmetic(expr.op, x, y)
    return BinOp(expr.op, left, right) if value is None else Const(value)


_INTEGER_OPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
    "//": lambda x, y: x // y,
    "%": lambda x, y: x % y,
    "min": min,
    "max": max,
    "ceildiv": lambda x, y: -(-x // y),
}


def integer_arithmetic(op: str, x: int, y: int) -> int | None:
    """`x op y` for the integer operators of `BinOp`; None for a division by zero or another op."""
    if op in ("//", "%", "ceildiv") and y == 0:
        return None
    compute = _INTEGER_OPS.get(op)
    return None if compute is None else compute(x, y)


# --------------------------------------------------------------------------- z3 translation


class Z3Translator:
    """Translate values for one pair of ranks. Strings and None become distinct integers."""

    def __init__(self, z3: Any, strings: dict[str, int] | None = None) -> None:
        self.z3 = z3
        self.strings = strings if strings is not None else {}
        self.side_constraints: list[Any] = []
        self._vars: dict[tuple[str, str, str], Any] = {}
        # Values are DAGs (merged branches share subtrees): translate each node once. The value is
        # kept beside its translation so that its id cannot be reused while the memo lives.
        self._memo: dict[tuple[int, str, str], tuple[Any, Expr]] = {}
        self.world = z3.Int("world")

    def _var(self, atom: Atom, side: str, sort: str) -> Any:
        name = atom.name
        if atom.kind == "world":
            return self.world if sort == "int" else self.world != 0
        suffix = f"@{side}" if atom.kind in PER_RANK_KINDS else ""
        key = (name + suffix, sort, atom.kind)
        if key not in self._vars:
            var = self.z3.Int(name + suffix) if sort == "int" else self.z3.Bool(name + suffix + ":b")
            self._vars[key] = var
            if sort == "int":
                if atom.lower is not None:
                    self.side_constraints.append(var >= atom.lower)
                if atom.below_world:
                    self.side_constraints.append(var < self.world)
                if atom is LOCAL_WORLD or atom.name == "local_world":
                    self.side_constraints.append(var <= self.world)
        return self._vars[key]

    def translated(self, atom: Atom, side: str) -> list[tuple[str, Any]]:
        """The z3 variables made so far for `atom` on `side`, each with its sort (int / bool)."""
        if atom.kind == "world":
            return [("int", self.world)]
        name = atom.name + (f"@{side}" if atom.kind in PER_RANK_KINDS else "")
        return [
            (sort, var) for (key, sort, kind), var in self._vars.items() if key == name and kind == atom.kind
        ]

    def rank(self, side: str) -> Any:
        return self._var(RANK, side, "int")

    def _string(self, value: str | None) -> int:
        key = "\0none" if value is None else value
        if key not in self.strings:
            self.strings[key] = -1_000_000 - len(self.strings)
        return self.strings[key]

    def sort_of(self, expr: Expr) -> str:
        if isinstance(expr, (Compare, BoolOp, Not, Member, InRange)):
            return "bool"
        if isinstance(expr, Const) and isinstance(expr.value, bool):
            return "bool"
        if isinstance(expr, IfExp):
            sorts = {self.sort_of(expr.then), self.sort_of(expr.orelse)}
            return "bool" if sorts == {"bool"} else "int"
        return "int"

    def as_bool(self, expr: Expr, side: str) -> Any:
        return self._memoised(expr, side, "b", self._as_bool)

    def _memoised(self, expr: Expr, side: str, sort: str, translate: Callable[[Expr, str], Any]) -> Any:
        key = (id(expr), side, sort)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = (translate(expr, side), expr)
        return hit[0]

    def _as_bool(self, expr: Expr, side: str) -> Any:
        z3 = self.z3
        if isinstance(expr, Const):
            if isinstance(expr.value, bool):
                return z3.BoolVal(expr.value)
            return z3.BoolVal(bool(expr.value))
        if isinstance(expr, Atom):
            if expr.kind in ("rank", "world") or expr.lower is not None or expr.below_world:
                return self.as_int(expr, side) != 0
            return self._var(expr, side, "bool")
        if isinstance(expr, Compare):
            return self._compare(expr, side)
        if isinstance(expr, BoolOp):
            parts = [self.as_bool(v, side) for v in expr.values]
            return z3.And(*parts) if expr.op == "and" else z3.Or(*parts)
        if isinstance(expr, Not):
            return z3.Not(self.as_bool(expr.operand, side))
        if isinstance(expr, IfExp):
            return z3.If(
                self.as_bool(expr.test, side), self.as_bool(expr.then, side), self.as_bool(expr.orelse, side)
            )
        if isinstance(expr, Member):
            item = self.as_int(expr.item, side)
            return (
                z3.Or(*[item == self.as_int(o, side) for o in expr.options])
                if expr.options
                else z3.BoolVal(False)
            )
        if isinstance(expr, InRange):
            item = self.as_int(expr.item, side)
            start, stop = self.as_int(expr.start, side), self.as_int(expr.stop, side)
            inside = z3.And(item >= start, item < stop)
            return inside if expr.step == 1 else z3.And(inside, (item - start) % expr.step == 0)
        if isinstance(expr, TupleVal):
            return z3.BoolVal(bool(expr.items))
        if isinstance(expr, (BinOp, Sized)):
            return self.as_int(expr, side) != 0  # Python truthiness: non-zero, non-empty
        return z3.BoolVal(True)  # GroupVal: a group object is truthy

    def as_int(self, expr: Expr, side: str) -> Any:
        return self._memoised(expr, side, "i", self._as_int)

    def _as_int(self, expr: Expr, side: str) -> Any:
        z3 = self.z3
        if isinstance(expr, Const):
            if isinstance(expr.value, bool):
                return z3.IntVal(int(expr.value))
            if isinstance(expr.value, int):
                return z3.IntVal(expr.value)
            return z3.IntVal(self._string(expr.value))
        if isinstance(expr, Atom):
            return self._var(expr, side, "int")
        if isinstance(expr, BinOp):
            return self._binop(expr, side)
        if isinstance(expr, IfExp):
            return z3.If(
                self.as_bool(expr.test, side), self.as_int(expr.then, side), self.as_int(expr.orelse, side)
            )
        if isinstance(expr, (Compare, BoolOp, Not, Member, InRange)):
            return z3.If(self.as_bool(expr, side), z3.IntVal(1), z3.IntVal(0))
        if isinstance(expr, GroupVal):
            return z3.IntVal(self._string("group:" + expr.key))
        if isinstance(expr, Sized):
            kind = "perrank" if is_rank_dependent(expr.length) else "shared"
            return self._var(Atom(expr.name, kind), side, "int")
        return z3.IntVal(self._string(f"tuple:{expr}"))

    def value(self, expr: Expr, side: str) -> Any:
        return self.as_bool(expr, side) if self.sort_of(expr) == "bool" else self.as_int(expr, side)

    def _compare(self, expr: Compare, side: str) -> Any:
        left_sort, right_sort = self.sort_of(expr.left), self.sort_of(expr.right)
        if left_sort == right_sort == "bool" and expr.op in ("==", "!="):
            left, right = self.as_bool(expr.left, side), self.as_bool(expr.right, side)
        else:
            left, right = self.as_int(expr.left, side), self.as_int(expr.right, side)
        operators: dict[str, Callable[[Any, Any], Any]] = {
            "==": lambda a, b: a == b,
            "!=": lambda a, b: a != b,
            "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b,
            ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b,
        }
        return operators[expr.op](left, right)

    def _binop(self, expr: BinOp, side: str) -> Any:
        z3 = self.z3
        left, right = self.as_int(expr.left, side), self.as_int(expr.right, side)
        if expr.op == "+":
            return left + right
        if expr.op == "-":
            return left - right
        if expr.op == "*":
            return left * right
        if expr.op in ("//", "%"):
            # Python floors; z3's div/mod agree with it for positive divisors, which is all ranks use.
            return left / right if expr.op == "//" else left % right
        if expr.op == "min":
            return z3.If(left <= right, left, right)
        if expr.op == "max":
            return z3.If(left >= right, left, right)
        if expr.op == "ceildiv":
            return (left + right - 1) / right
        raise ValueError(f"unsupported operator {expr.op}")
