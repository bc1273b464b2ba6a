"""Why two ranks part: the conditions that split them, read from the solver's model.

In: the two paths of a satisfiable pair query, the translator and the raw z3 model it was solved
with, and the region's `ConditionSources`. Out: one `Reason` per source condition that holds on
one rank and not on the other — its text, place and value on each rank, with the rank-derived
values it reads (global rank, local rank in a group, world size, per-process values) as the
model chose them — and, beside each, the per-process values it reads on each rank as
`ProcessRead`s (typed: the rules read these, not the words); and, for a divergence among the
members of a group, each rank's local rank.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from collcheck.findings import ConditionKind, RankValue, Reason
from collcheck.static.conditions import ConditionSources
from collcheck.static.groups import (
    ANONYMOUS_LOCAL_RANK_PREFIX,
    GLOBAL_OF_PREFIX,
    LOCAL_RANK_PREFIX,
    MEMBERSHIP_PREFIX,
    RANKS_PREFIX,
    SIZE_PREFIX,
    local_rank,
)
from collcheck.static.program import ROOTED_PREFIX, Path
from collcheck.static.roles import ROLE_PREFIX
from collcheck.static.symbolic import (
    LOCAL_WORLD,
    PER_RANK_KINDS,
    Atom,
    Expr,
    GroupVal,
    Not,
    Z3Translator,
    atoms,
)

MAX_REASONS = 4  # more splitting conditions than this are not listed (the first ones explain most)
GLOBAL_RANK = "rank"  # how a condition's read of the global rank is named (`quantity`)

Pretty = Callable[[str], str]  # a model value in words (strings and None decoded)


@dataclass(frozen=True)
class ProcessRead:
    """A per-process value a condition reads: the call that gave it (`time.time()`), the line it
    is read at (None when unknown) and what varies (the catalog's words, `wall-clock time`)."""

    call: str
    line: int | None
    why: str

    @property
    def shown(self) -> str:
        """How a counterexample names it: `time.time() at line 14 (wall-clock time)`."""
        read = f"{self.call} at line {self.line}" if self.line is not None else self.call
        return f"{read} ({self.why})" if self.why else read


# The per-process values one splitting condition reads, on each of its ranks (`Reason.ranks` order).
ReadsByRank = tuple[tuple[ProcessRead, ...], ...]


def reasons(
    a: Path,
    b: Path,
    sides: tuple[int, int],
    sources: ConditionSources,
    tr: Z3Translator,
    raw: Any,
    pretty: Pretty,
) -> tuple[tuple[Reason, ...], tuple[ReadsByRank, ...]]:
    """The source conditions of `a` and `b` that hold on one rank (`sides`: the ranks of side a and
    side b) and not on the other, in path order, each once; beside them, the per-process values
    each reads on each rank."""
    found: list[Reason] = []
    process: list[ReadsByRank] = []
    seen: set[tuple[str, int, int, str]] = set()
    read = (_varying(a.conds), _varying(b.conds))
    for condition in _conditions(a, b):
        hit = sources.lookup(condition)
        if hit is None:
            continue
        source, test = hit
        key = (source.path, source.line, source.column, source.text)
        if key in seen:
            continue
        if source.kind is ConditionKind.EXCEPTION:
            # Only the rank that raised holds the handler's flag; the other went on without one
            # (the paths through the body carry it negated, which is the same source).
            flag = condition.operand if isinstance(condition, Not) else condition
            holds: list[bool | None] = [flag in a.conds, flag in b.conds]
        elif _varying((test,)) <= read[0] and _varying((test,)) <= read[1]:
            holds = [_holds(tr, raw, test, side) for side in ("a", "b")]
        else:
            continue  # a test only one rank reaches (nested under the split): the other's value is free
        if None in holds or holds[0] == holds[1]:
            continue
        seen.add(key)
        on_ranks = sorted(
            (
                (rank, bool(value), _reads(test, side, source.kind, tr, raw, pretty))
                for rank, value, side in zip(sides, holds, ("a", "b"), strict=True)
            ),
            key=lambda item: item[0],
        )
        ranks = tuple(RankValue(rank, value, shown) for rank, value, (shown, _) in on_ranks)
        found.append(Reason(source.text, source.path, source.line, source.kind, ranks, source.column))
        process.append(tuple(reads for _, _, (_, reads) in on_ranks))
        if len(found) >= MAX_REASONS:
            break
    return tuple(found), tuple(process)


def local_ranks(
    membership: GroupVal | None,
    read: frozenset[Atom],
    sides: tuple[int, int],
    tr: Z3Translator,
    raw: Any,
) -> tuple[tuple[int, int], ...]:
    """Each rank's local rank in the group whose members both ranks are, when it means something:
    the group's membership is unknown (else the local rank is not tied to the global one) and the
    paths read that local rank (`read`: the atoms of their conditions and terms)."""
    if membership is None or membership.members is not None or local_rank(membership.key) not in read:
        return ()
    shown = []
    for rank, side in zip(sides, ("a", "b"), strict=True):
        value = _int(tr, raw, local_rank(membership.key), side)
        if value is None:
            return ()
        shown.append((rank, value))
    return tuple(shown)


def group_label(key: str) -> str:
    """A group key in words: `item:param:mesh@6:0['tp']` -> `mesh['tp']`, places dropped; a group
    one branch set (`maybe:self._group`) is named as the source names it."""
    return source_label(key).replace("maybe:", "")


def source_label(name: str) -> str:
    """A value's name as the source spells it: the evaluator's marks of where it came from
    (`call:picked.numel()`, `item:`, `attr:`, `param:`, `global:`, `slice:`, one a collective made alike
    `uniform:`) and places dropped."""
    text = _PLACE.sub("", name)
    for prefix in ("item:", "attr:", "param:", "global:", "call:", "uniform:", "slice:"):
        text = text.replace(prefix, "")
    return text


# `@line:col` or `@path:line:col`: where the evaluator made a value; `@entry:line`: a root's
# parameter as it was at the function's entry (own_data.py). Neither is shown.
_PLACE = re.compile(r"@(?:entry:\d+|(?:[^@\[\]'\"]*:)?\d+:\d+)")
# The marks the evaluator puts after a value's text: a place (`_PLACE`), a root's parameter at
# the function's entry (`batch@entry:40.shape`), the class of an object's attribute at the end
# of a name (`self.last@ThroughputMeter`).
_MARK = re.compile(r"@(?:entry:\d+|(?:[^@\[\]'\"]*:)?\d+:\d+|[A-Za-z_]\w*(?![\w.]))")
# The place mark that ends a value's name, with its line.
_MADE_AT = re.compile(r"@(?:[^@\[\]'\"]*:)?(\d+):\d+$")
# Names the evaluator gives values it cannot follow (values.py, interpret.py): no source text.
_INTERNAL = frozenset(
    {"in", "merged", "maybe", "item", "trips", "aug", "with", "spec", "match", "unpack", "exc", "result"}
)


def _varying(conditions: tuple[Expr, ...]) -> frozenset[Atom]:
    """The atoms that may differ between ranks, read by some conditions."""
    return frozenset(
        atom for condition in conditions for atom in atoms(condition) if atom.kind in PER_RANK_KINDS
    )


def _conditions(a: Path, b: Path) -> list[Expr]:
    ordered: dict[int, Expr] = {}
    for path in (a, b):
        for condition in path.conds:
            ordered.setdefault(id(condition), condition)
    return list(ordered.values())


def _holds(tr: Z3Translator, raw: Any, test: Expr, side: str) -> bool | None:
    value = str(raw.eval(tr.as_bool(test, side), model_completion=True))
    return True if value == "True" else False if value == "False" else None


def _int(tr: Z3Translator, raw: Any, atom: Atom, side: str) -> int | None:
    for sort, var in tr.translated(atom, side):
        if sort == "int":
            try:
                return int(raw.eval(var, model_completion=True).as_long())
            except (AttributeError, ValueError):
                return None
    return None


def _reads(
    test: Expr, side: str, kind: ConditionKind, tr: Z3Translator, raw: Any, pretty: Pretty
) -> tuple[tuple[tuple[str, str], ...], tuple[ProcessRead, ...]]:
    """The rank-derived values `test` reads on one side, named and valued as the model chose them,
    and those of them that are per-process values."""
    if kind is ConditionKind.EXCEPTION:
        return (), ()  # the exception itself is the per-process value: nothing more to show
    shown: dict[str, str] = {}
    process: list[ProcessRead] = []
    for atom in sorted(set(atoms(test)), key=_reading_order):
        name = quantity(atom)
        if name is None or name in shown:
            continue
        values = tr.translated(atom, side)
        if not values:
            continue
        sort, var = values[0]
        value = str(raw.eval(var, model_completion=True))
        shown[name] = value.lower() if sort == "bool" else pretty(value)
        read = process_read(atom)
        if read is not None and read.shown == name:  # named as a per-process value (`quantity`)
            process.append(read)
    return tuple(shown.items()), tuple(process)


def process_read(atom: Atom) -> ProcessRead | None:
    """A per-process atom (`time.time()@14:11`) as the call, and the line it is read at."""
    if atom.kind != "nondet":
        return None
    # The line is that of the place mark that ends the name (where the value was made); every mark
    # is dropped from the text, which is kept whole (`len(batch@entry:40)`: a root's parameter
    # read from its entry, shown `len(batch)`, not cut at its first mark).
    made = _MADE_AT.search(atom.name)
    return ProcessRead(source_label(_MARK.sub("", atom.name)), int(made.group(1)) if made else None, atom.why)


def _reading_order(atom: Atom) -> tuple[int, str, int]:
    """The rank first, then the world size, then the rest by name and the line they are read at."""
    name, _, where = atom.name.partition("@")
    line = where.split(":", 1)[0]
    return ({"rank": 0, "world": 1}.get(atom.kind, 2), name, int(line) if line.isdigit() else 0)


def quantity(atom: Atom) -> str | None:
    """What a rank-derived atom stands for, in words; None for values equal on every rank that a
    reader does not need (arguments, constants)."""
    name = atom.name
    if atom.kind == "rank":
        return GLOBAL_RANK
    if atom.kind == "world":
        return "world size"
    if atom == LOCAL_WORLD or name == "local_world":
        return "processes per node"
    if name.startswith(LOCAL_RANK_PREFIX):
        return f"local rank in `{group_label(name[len(LOCAL_RANK_PREFIX) :])}`"
    if name.startswith(ANONYMOUS_LOCAL_RANK_PREFIX):
        return "local rank in its group"
    if name.startswith(SIZE_PREFIX):
        return f"size of `{group_label(name[len(SIZE_PREFIX) :])}`"
    if name.startswith(GLOBAL_OF_PREFIX):  # `global_of:<key>[i]`
        key, _, index = name[len(GLOBAL_OF_PREFIX) : -1].rpartition("[")
        member = "the last member" if index == "-1" else f"member {index}"
        return f"global rank of {member} of `{group_label(key)}`"
    if name.startswith(RANKS_PREFIX):
        return f"ranks of `{group_label(name[len(RANKS_PREFIX) :])}`"
    if name.startswith(MEMBERSHIP_PREFIX):  # `rank in ranks` (groups.membership)
        container = name[len(MEMBERSHIP_PREFIX) :]
        if container.startswith(RANKS_PREFIX):
            return f"member of `{group_label(container[len(RANKS_PREFIX) :])}`"
        return f"rank in `{source_label(container)}`"
    if source_label(name).startswith(ROOTED_PREFIX):  # what a reduce leaves whole on its root only
        return f"`{source_label(name)[len(ROOTED_PREFIX) :]}` (whole on the reduce's root only)"
    if name.startswith("env:"):
        return f"${name[4:]}"
    read = process_read(atom)
    if read is not None:
        return read.shown
    if name.startswith(ROLE_PREFIX):  # roles.py: `role:self.stage@Scheduler`
        return f"`{name[len(ROLE_PREFIX) :].partition('@')[0]}`, this process's place in its transfers"
    if name.startswith("match@"):
        return "case index"  # which case of the `match` the subject selects (interpret.py)
    if atom.kind in PER_RANK_KINDS:
        label = source_label(name)
        internal = not label or label.split(":", 1)[0].split("@", 1)[0] in _INTERNAL
        return "a value computed from the rank" if internal else f"`{label}`"
    return None
