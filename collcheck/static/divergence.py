"""Divergences: what the solver found, named by kind, and the pair query that finds one.

In: a `PairQuery` (two paths of a region, the channel compared, the sequences) and a satisfiable
extra fact. Out: a `Divergence` — its `DivergenceKind`, the two ranks' sequences and the element
where they part, the exit responsible, the model, the values the ranks part on (a loop's trip
counts, an argument: `RankValues`), the ranks' local ranks in a group, and whether only
per-process values (not the rank) make the ranks differ. Nothing here knows which rule reports a
divergence: collcheck.classify asks the rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path as FsPath
from typing import Any

from collcheck.catalog import FILESYSTEM_STATE
from collcheck.findings import Reason
from collcheck.static.alignment import Unmatched
from collcheck.static.program import (
    CAUGHT_EXCEPTION,
    OWN_DATA,
    CommEvent,
    Element,
    Exit,
    LoopEvent,
    Path,
    Region,
)
from collcheck.static.smt import RankWitness, RegionSolver, event_terms
from collcheck.static.symbolic import Atom, Const, Expr, GroupVal, IfExp, Not, Z3Translator, atoms
from collcheck.static.why import GLOBAL_RANK, ReadsByRank, group_label, local_ranks, reasons


class DivergenceKind(Enum):
    """How two ranks' programs disagree (the value is the word shown in counterexample values)."""

    SEQUENCE = "sequence"  # a different, missing or extra element where the sequences part
    SWAP = "swap"  # the same collectives on the same operands, in another order
    LOOP_EXIT = "loop_exit"  # one rank leaves a communicating loop, the other goes on
    ROOT = "root"  # a root / source argument that differs
    REDUCE_OP = "reduce_op"  # a reduce op that differs
    GROUP = "group"  # the default group on one rank, a known subgroup on the other
    TRIP = "trip"  # a communicating loop with different trip counts
    GROUP_ARGS = "group_args"  # a group created from different rank lists
    P2P = "p2p"  # both ranks block first on a send (or a recv) to each other


@dataclass(frozen=True)
class Blocked:
    """One rank of a simulated point-to-point schedule (`p2p_schedule`) that never finishes.

    `calls` is the rank's whole schedule of blocking sends and receives, each with its concrete
    peer; `at` is the index of the call it blocks in (`len(calls)`: a rank that finished, which
    another rank waits on)."""

    rank: int
    calls: tuple[tuple[CommEvent, int], ...]
    at: int

    @property
    def finished(self) -> bool:
        return self.at >= len(self.calls)

    @property
    def event(self) -> CommEvent:
        return self.calls[self.at][0]

    @property
    def peer(self) -> int:
        return self.calls[self.at][1]


class PerProcess(Enum):
    """What the per-process value a divergence depends on is (`Divergence.per_process`)."""

    EXCEPTION = "exception"  # a caught exception: the flag of the handler a rank entered
    OWN_DATA = "own data"  # this process's own data, which the code combines across ranks
    FILESYSTEM = "filesystem"  # what the filesystem holds (the catalog's FILESYSTEM_STATE)
    OTHER = "other"  # clocks, random numbers, host names, the rest of [nondeterministic]


@dataclass(frozen=True)
class RankValues:
    """A value the model gives each rank of a divergence's pair, in words: a loop's trip count, a
    root, a reduce op or a group."""

    on_a: str  # on the model's `rank_a`
    on_b: str  # on the model's `rank_b`


@dataclass(frozen=True)
class Divergence:
    """Two ranks whose programs disagree, and how."""

    kind: DivergenceKind
    region: Region
    path_a: Path
    path_b: Path
    channel: str
    index: int  # the first `index` elements of both sequences pair up, in order
    # Each rank's element at `index` that is part of the difference; None where the rank's
    # sequence has ended, or where its element there pairs with a later one of the other rank
    # (the other's element is then one it issues in addition).
    event_a: Element | None
    event_b: Element | None
    model: RankWitness
    sequence_a: tuple[Element, ...]
    sequence_b: tuple[Element, ...]
    exit: Exit | None = None
    nondet_only: bool = False
    nondet_why: str = ""
    why: tuple[Reason, ...] = ()  # the conditions that split the two ranks (why.py)
    process_reads: tuple[ReadsByRank, ...] = ()  # beside each of `why`: its per-process values read
    group: str = ""  # the group both ranks are members of, on a group channel, as written
    local_ranks: tuple[tuple[int, int], ...] = ()  # (rank, its local rank in `group`)
    trips: RankValues | None = None  # TRIP: the loop's trip count on each rank
    argument: RankValues | None = None  # ROOT, REDUCE_OP, GROUP: the argument on each rank
    # A deadlock found by simulating the ranks' point-to-point schedules: the ranks that wait, in
    # wait-for order (each waits on the next; the last on the first in a cycle, else on a rank
    # that has finished).
    blocked: tuple[Blocked, ...] = ()

    @property
    def per_process(self) -> PerProcess | None:
        """What the per-process value in the two ranks' paths is (`nondet_why` in words); None
        when there is none."""
        why = self.nondet_why
        if not why:
            return None
        if why == CAUGHT_EXCEPTION:
            return PerProcess.EXCEPTION
        if why.startswith(OWN_DATA):
            return PerProcess.OWN_DATA
        return PerProcess.FILESYSTEM if why == FILESYSTEM_STATE else PerProcess.OTHER

    @property
    def exit_after_failure(self) -> bool:
        """The exit is taken by the rank that caught an exception (the handler's way out), not by
        the ranks whose calls went through the body of the `try` (its `break` or `return`)."""
        path = self.path_a if self.exit is self.path_a.exit else self.path_b
        return all(not (isinstance(cond, Not) and _caught(cond.operand)) for cond in path.conds)

    @property
    def reads_global_rank(self) -> bool:
        """Some condition that splits the two ranks reads the global rank (not only local ranks)."""
        return any(name == GLOBAL_RANK for r in self.why for item in r.ranks for name, _ in item.reads)

    def on_rank(self, values: RankValues | None, rank: int) -> str:
        """`values` on `rank` (one of the model's two ranks), "?" when unknown."""
        if values is None:
            return "?"
        if rank == self.model.rank_a:
            return values.on_a
        return values.on_b if rank == self.model.rank_b else "?"

    def shown_values(self) -> tuple[tuple[str, str], ...]:
        """The values a counterexample shows: what the ranks part on, then the model's own."""
        parted = [(self.trips, "trips"), (self.argument, self.kind.value)]
        shown = [
            (f"{word} on rank {rank}", value)
            for values, word in parted
            if values is not None
            for rank, value in ((self.model.rank_a, values.on_a), (self.model.rank_b, values.on_b))
        ]
        return (*shown, *self.model.values)


@dataclass(frozen=True)
class PairQuery:
    """Two paths of a region compared on one channel: the sequences the comparison works on."""

    solver: RegionSolver
    region: Region
    channel: str
    membership: GroupVal | None  # the group whose members both ranks must be (a group channel)
    a: Path
    b: Path
    seq_a: tuple[Element, ...]
    seq_b: tuple[Element, ...]


def found(
    query: PairQuery,
    kind: DivergenceKind,
    index: int,
    extra: Any = None,
    exit_: Exit | None = None,
    unmatched: Unmatched = Unmatched.BOTH,
) -> list[Divergence]:
    """The divergence of `kind` at `index` of the query's sequences, when z3 finds two ranks for it.
    `unmatched` says whose element at `index` is part of the difference (alignment.py): a rank
    whose element there pairs with a later one of the other rank shows none (`event_a`/`event_b`
    None), the other's being a call it makes in addition."""
    solver, region, channel, membership = query.solver, query.region, query.channel, query.membership
    a, b, seq_a, seq_b = query.a, query.b, query.seq_a, query.seq_b
    verdict, model, solved = solver.satisfiable(a, b, membership, extra)
    if verdict != "sat" or model is None or solved is None:
        return []
    tr, raw = solved

    def value_of(term: Expr, side: str) -> str:
        return _pretty(str(raw.eval(tr.value(term, side), model_completion=True)), solver)

    nondet_only = False
    why, combined_by = _nondet_why(a, b)
    if why:
        shared_verdict, _, _ = solver.satisfiable(a, b, membership, extra, share_nondet=True)
        nondet_only = shared_verdict == "unsat"
    if nondet_only and why.startswith(OWN_DATA) and not _combined_on_a_path(seq_a + seq_b, combined_by):
        return []
    trips = argument = None
    if kind is DivergenceKind.TRIP:
        x, y = seq_a[index], seq_b[index]
        assert isinstance(x, LoopEvent) and isinstance(y, LoopEvent)
        trips = RankValues(value_of(x.trip, "a"), value_of(y.trip, "b"))
    elif kind is DivergenceKind.GROUP:
        x, y = seq_a[index], seq_b[index]
        assert isinstance(x, CommEvent) and isinstance(y, CommEvent)
        argument = RankValues(
            _group_label(group_term(x), "a", raw, tr), _group_label(group_term(y), "b", raw, tr)
        )
    elif kind in (DivergenceKind.ROOT, DivergenceKind.REDUCE_OP):
        x, y = seq_a[index], seq_b[index]
        assert isinstance(x, CommEvent) and isinstance(y, CommEvent)
        term_x, term_y = (x.root, y.root) if kind is DivergenceKind.ROOT else (x.reduce_op, y.reduce_op)
        assert term_x is not None and term_y is not None
        argument = RankValues(value_of(term_x, "a"), value_of(term_y, "b"))
    sides = (model.rank_a, model.rank_b)

    def pretty(value: str) -> str:
        return _pretty(value, solver)

    split, process_reads = reasons(a, b, sides, region.conditions, tr, raw, pretty)
    return [
        Divergence(
            kind=kind,
            region=region,
            path_a=a,
            path_b=b,
            channel=channel,
            index=index,
            event_a=seq_a[index] if index < len(seq_a) and unmatched is not Unmatched.B else None,
            event_b=seq_b[index] if index < len(seq_b) and unmatched is not Unmatched.A else None,
            model=model,
            sequence_a=seq_a,
            sequence_b=seq_b,
            exit=exit_,
            nondet_only=nondet_only,
            nondet_why=why,
            why=split,
            process_reads=process_reads,
            group=_group_name(membership, seq_a + seq_b) if membership is not None else "",
            local_ranks=local_ranks(membership, solver.atoms_of(a) | solver.atoms_of(b), sides, tr, raw),
            trips=trips,
            argument=argument,
        )
    ]


def _group_name(membership: GroupVal, elements: tuple[Element, ...]) -> str:
    """The group of a group channel as the code writes it at its collectives (else its key)."""
    for element in elements:
        first = element.first if isinstance(element, LoopEvent) else element
        if first is not None and first.group == membership and first.group_text:
            return first.group_text
    return group_label(membership.key)


def _group_label(term: Expr, side: str, raw: Any, tr: Z3Translator) -> str:
    """Which group the rank uses in the model, in words."""
    chosen = raw.eval(tr.as_int(term, side), model_completion=True)
    for leaf in group_leaves(term):
        if str(raw.eval(tr.as_int(leaf, side), model_completion=True)) != str(chosen):
            continue
        if is_world(leaf):
            return "the default (world) group"
        if isinstance(leaf, GroupVal) and leaf.created and "@" in leaf.key:
            op, place = leaf.key.split("@", 1)
            file, line = place.rsplit(":", 2)[:2]
            return f"the {op} group of {FsPath(file).name}:{line}"
        if isinstance(leaf, GroupVal):
            return f"group `{leaf.key}`"
    return "another group"


def _pretty(value: str, solver: RegionSolver) -> str:
    try:
        number = int(value)
    except ValueError:
        return value
    for text, code in solver.strings.items():
        if code == number:
            return "None" if text == "\0none" else text
    return value


def terms(event: Element) -> list[Expr]:
    return event_terms(event)


def _caught(term: Expr) -> bool:
    return isinstance(term, Atom) and term.why == CAUGHT_EXCEPTION


def _nondet_why(a: Path, b: Path) -> tuple[str, frozenset[int]]:
    """The `why` of the per-process value the two paths part on, with its `combined_by`."""
    # A condition both paths share does not part them: a per-process value read there (a check
    # every rank passed) is not what differs.
    for path, other in ((a, b), (b, a)):
        for cond in path.conds:
            if cond in other.conds:
                continue
            for atom in atoms(cond):
                if atom.kind == "nondet":
                    return atom.why, atom.combined_by
    for path in (a, b):
        for cond in path.conds:
            for atom in atoms(cond):
                if atom.kind == "nondet":
                    return atom.why, atom.combined_by
        for event in path.events:
            for term in terms(event):
                for atom in atoms(term):
                    if atom.kind == "nondet":
                        return atom.why, atom.combined_by
    return "", frozenset()


def _combined_on_a_path(elements: tuple[Element, ...], lines: frozenset[int]) -> bool:
    """Per-rank data (`Atom.combined_by`: the lines of the collectives that combine it) is
    combined on one of two ranks' paths: one of them issues one of those collectives. Where
    neither does (`if tp_size > 1: all_reduce(n)`, a helper that skips it without peers), the code
    itself says that the value needs no agreeing on these paths, and a divergence on it alone is
    none. True when no line is known, and beside a loop (its body's lines are not kept)."""
    if not lines:
        return True
    return any(isinstance(element, LoopEvent) or element.line in lines for element in elements)


def group_term(event: CommEvent) -> Expr:
    if event.group_term is not None:
        return event.group_term
    return Const(None) if event.group is None else event.group


def group_leaves(term: Expr) -> list[Expr]:
    if isinstance(term, IfExp):
        return group_leaves(term.then) + group_leaves(term.orelse)
    return [term]


def is_world(term: Expr) -> bool:
    return isinstance(term, Const) and term.value is None
