"""Point-to-point schedules: every rank's blocking sends and receives, run against each other in
small worlds, to find a wait that never ends.

The pairwise search of `solve` finds two ranks whose first calls towards each other go the same
way. A wait can also close through three or more ranks (rank 0 sends to the last rank first, the
last rank receives from rank 1 first, rank 1 receives from rank 0), open only after some
exchanges have matched (a 1F1B pipeline whose adjacent stages both send first in the steady
phase), or come from counts that differ (a sender and a receiver that filter one list with
different predicates). This module finds those.

In: a function `Region`, the loop regions of the same run (to expand its loops), the world size of
the settings (None: each world from 2 to MAX_WORLD) and whether a file names a non-blocking call
that the run did not record.
Out (`schedule_deadlock`, no z3): a `Verdict` — the worlds where a wait never ends, and whether
every rank of every world ran to its end (`clean`: the engine then skips the pairwise search,
which compares loop iterations as if every rank ran the same one). `confirm` turns the first stuck
world z3 agrees with into a `Divergence` of kind P2P whose `blocked` lists the waiting ranks.

How. For a world size and a rank, the rank's path is the path of the region whose conditions hold
once the rank, the world size and the loop counts are numbers; when values collcheck cannot
compute leave several paths open, they must all give the same schedule, else the world is
skipped. The schedule is the path's blocking sends and receives with their peers as numbers,
loops expanded (each iteration takes the loop region's one path that holds; a `for i in range(n)`
whose body tests `i` is run iteration by iteration with `i` bound). The schedules are run with
rendezvous semantics, the rule's premise (a blocking send may not return before the peer posts
its receive, as NCCL and gloo do with large messages): a send at the head of one rank meets the
receive from that rank at the head of its peer, until nothing matches. A rank with calls left then
waits on the peer of its head call; following those waits ends in a cycle, or at a rank that has
finished (it sent or received fewer messages than the waiting rank expects).

Posted transfers are in the schedules too (`Path.schedule`): `isend`/`irecv` where they are
called, each `P2POp` where the next `batch_isend_irecv` of the rank posts it (a list built by
appends in a loop, by a helper or per branch: the ops are recorded where they are made). They
never block their rank and must find their partner by the end (p2p_matching); a prepared op never
posted, or a non-blocking call whose direction or peer the numbers do not give, leaves the world
undecided.

Collectives are left out of the schedules: leaving them out only lets more calls match, so a wait
found without them is also there with them (if a real run cannot pass a collective, it hangs
there instead). A wait is kept only when each rank waited on issues calls in the matching
direction towards the waiting rank somewhere in its schedule, or, for a posted transfer that
nobody answers, when another world of the same function ran clean with transfers exchanged (the
function is an exchange of its own, not one half of it); and only when every non-blocking call
(`isend`, `irecv`, `batch_isend_irecv`, `P2POp`, by name) of the files of the function and of its
calls lies in a transfer the run recorded (one that was not recorded may be what answers a
wait). It is reported when z3 confirms that the two ranks named first take their paths in that
world (which also gives the conditions that split them).

Rings over a group. Pipeline code names its peers inside a group: `get_global_rank(g, (me + 1)
% n)`, `send(t, group_dst=...)`, `get_process_group_ranks(g)[i]`, a coordinator's `ranks[(r + 1)
% n]` with `r` its `rank_in_group` (`groups.MemberAt`: a member at a computed local rank). Each
group whose local rank, size or listed members the function reads (`group_axes`) is simulated in
turn as an axis that spans the world: its local rank is the rank, its size the world, its member
at local rank i is rank i. That is one configuration the code must run in (one pipeline stage per
rank, other axes of size 1), so a wait found there is a real one; the counterexample says it
assumed it. Values of other groups stay undecided in that run.

Loop counts built from values the same on every rank (`num_microbatches`, `len(items)`) get one
number per world: world + 1, and the lengths of one list filtered by different predicates
(`[t for t in items if t.requires_grad]`, see `comprehensions`) a distinct number per predicate,
since the predicates can select different counts; the counterexample shows them as `assumed`.
Limits: loops whose iterations take different paths on one rank other than through `i` of
`range(n)`, loops inside helpers of other files (their regions belong to that file's run),
per-rank predicates, peers looked up in tables or computed by unknown code, waits that need two
groups of different sizes (a ring inside a group smaller than the world), and worlds above
MAX_WORLD (or, given by the settings, above MAX_SIMULATED_WORLD) are not simulated; a loop of
more than MAX_TRIPS iterations or a schedule of more than MAX_CALLS calls gives up. A schedule
found clean in worlds 2..MAX_WORLD says nothing of larger worlds.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from collcheck.static.comprehensions import FILTERED
from collcheck.static.divergence import Blocked, Divergence, DivergenceKind, PairQuery, found
from collcheck.static.groups import (
    GLOBAL_OF_PREFIX,
    LOCAL_RANK_PREFIX,
    SIZE_PREFIX,
    MemberAt,
    group_size,
    is_listed_member,
    local_rank,
)
from collcheck.static.p2p_matching import (
    TRANSFERS,
    Call,
    Wait,
    believable,
    exchanged,
    in_posting_order,
    run,
    unanswered_post,
)
from collcheck.static.program import (
    CommEvent,
    Element,
    EventKind,
    ExitKind,
    LoopEvent,
    Path,
    Posting,
    Region,
    RegionKind,
    Site,
    answering,
    direction,
)
from collcheck.static.smt import RegionSolver, SolveStats
from collcheck.static.symbolic import (
    TRUE,
    Atom,
    BinOp,
    BoolOp,
    Compare,
    Const,
    Expr,
    IfExp,
    InRange,
    Member,
    Not,
    TupleVal,
    Z3Translator,
    atoms,
    integer_arithmetic,
)

MAX_WORLD = 6  # worlds 2..MAX_WORLD are simulated when the settings give none
# The largest world size the settings can ask to simulate: every rank of it is simulated (about
# 0.5 ms a rank on the 1F1B fixtures), and `world-size` comes from the repository's configuration.
# A larger world is left to the pairwise search (solve.py), as an undecided schedule is.
MAX_SIMULATED_WORLD = 1024
MAX_TRIPS = 32  # iterations of one loop
MAX_CALLS = 256  # blocking calls in one rank's schedule
MAX_DEPTH = 4  # loops inside loops
MAX_AXES = 3  # groups simulated in turn as spanning the world
BLOCKING = (EventKind.P2P_SEND, EventKind.P2P_RECV)

Value = int | bool | str | None
Span = tuple[int, int, int, int]  # a call's place in its file: line, column, end line, end column
LoopKey = tuple[str, int, tuple[Site, ...]]


class _Undecided(Exception):
    """A value, path or loop count that the numbers given do not decide."""


_UNDECIDED = _Undecided()  # memoised undecided values (never raised)


def loop_table(regions: Iterable[Region]) -> dict[LoopKey, Region]:
    """The loop regions of one run, by the place and call chain of their loop."""
    return {(r.path_name, r.line, r.chain): r for r in regions if r.kind is RegionKind.LOOP}


def has_transfers(region: Region, loops: dict[LoopKey, Region]) -> bool:
    """Some path of the region, or of a loop it reaches, issues a blocking send or receive or
    posts (or prepares) a transfer."""
    return any(_transfers_in(path.schedule, loops, 0) for path in region.paths)


def _transfers_in(events: tuple[Element, ...], loops: dict[LoopKey, Region], depth: int) -> bool:
    for event in events:
        if isinstance(event, CommEvent) and (event.kind in BLOCKING or event.posting in TRANSFERS):
            return True
        if isinstance(event, LoopEvent) and depth < MAX_DEPTH:
            inner = loops.get((event.path, event.line, event.chain))
            if inner is not None and any(_transfers_in(p.schedule, loops, depth + 1) for p in inner.paths):
                return True
    return False


def posted_spans(region: Region, loops: dict[LoopKey, Region]) -> dict[str, frozenset[Span]]:
    """Where the region's posted transfers and batches were recorded, by file: a non-blocking call
    of a file that lies in none of them was not recorded (`schedule_deadlock`)."""
    found: dict[str, set[Span]] = {}
    for path in _paths_within(region, loops):
        for event in path.schedule:
            if isinstance(event, CommEvent) and event.kind is EventKind.P2P_POSTED:
                span = (event.line, event.column, event.end_line, event.end_column)
                found.setdefault(event.path, set()).add(span)
    return {path: frozenset(spans) for path, spans in found.items()}


# ----------------------------------------------------------------------------- values


class _Numbers:
    """Symbolic values as numbers for one rank of one world (the shared values fixed per world)."""

    def __init__(
        self,
        rank: int,
        world: int,
        shared: dict[Atom, int],
        items: dict[str, int] | None = None,
        axis: str | None = None,
    ) -> None:
        self.rank, self.world, self.shared = rank, world, shared
        self.items = items or {}  # loop variables of `for i in range(n)` by atom name: the iteration
        # The group simulated as spanning the world: its local rank is the rank, its size the
        # world, its member at local rank i is rank i (see `group_axes`).
        self.axis = axis
        self._memo: dict[int, tuple[Expr, Value | _Undecided]] = {}

    def at_iteration(self, name: str, index: int) -> _Numbers:
        return _Numbers(self.rank, self.world, self.shared, {**self.items, name: index}, self.axis)

    def value(self, expr: Expr) -> Value:
        hit = self._memo.get(id(expr))
        if hit is None:
            try:
                result: Value | _Undecided = self._value(expr)
            except _Undecided:
                # A mark, not the caught exception: its traceback's frames hold this memo, a cycle
                # (and raising it again grows the traceback) freed only by a full collection.
                result = _UNDECIDED
            hit = self._memo[id(expr)] = (expr, result)
        if isinstance(hit[1], _Undecided):
            raise _Undecided
        return hit[1]

    def truth(self, expr: Expr) -> bool | None:
        """The condition's truth, None when it is undecided."""
        try:
            return bool(self.value(expr))
        except _Undecided:
            return None

    def integer(self, expr: Expr) -> int:
        value = self.value(expr)
        if not isinstance(value, int):
            raise _Undecided
        return int(value)

    def _value(self, expr: Expr) -> Value:
        if isinstance(expr, Const):
            return expr.value
        if isinstance(expr, Atom):
            return self._atom(expr)
        if isinstance(expr, BinOp):
            return _arithmetic(expr.op, self.integer(expr.left), self.integer(expr.right))
        if isinstance(expr, Compare):
            return _compare(expr.op, self.value(expr.left), self.value(expr.right))
        if isinstance(expr, BoolOp):
            return self._boolean(expr)
        if isinstance(expr, Not):
            return not self.value(expr.operand)
        if isinstance(expr, IfExp):
            return self.value(expr.then) if self.value(expr.test) else self.value(expr.orelse)
        if isinstance(expr, Member):
            item = self.value(expr.item)
            return any(item == self.value(option) for option in expr.options)
        if isinstance(expr, InRange):
            item, start, stop = self.integer(expr.item), self.integer(expr.start), self.integer(expr.stop)
            return start <= item < stop and (item - start) % expr.step == 0
        if isinstance(expr, TupleVal):
            return bool(expr.items)  # only its truth is ever asked of a tuple here
        raise _Undecided  # groups, sized sequences

    def _atom(self, atom: Atom) -> Value:
        if atom.kind == "rank":
            return self.rank
        if atom.kind == "world":
            return self.world
        if self.axis is not None and _group_of(atom) == self.axis:
            return self._on_axis(atom)
        if atom in self.shared:
            return self.shared[atom]
        if atom.name in self.items:
            return self.items[atom.name]
        raise _Undecided

    def _on_axis(self, atom: Atom) -> Value:
        """A value about the group simulated as the world: local rank, size, a listed member."""
        if atom.name.startswith(LOCAL_RANK_PREFIX):
            return self.rank
        if atom.name.startswith(SIZE_PREFIX):
            return self.world
        if isinstance(atom, MemberAt):
            index = self.integer(atom.index)
        else:  # `global_of:<key>[i]`
            index = int(atom.name.rpartition("[")[2][:-1])
        if not -self.world <= index < self.world:
            raise _Undecided  # an IndexError on the member list
        return index % self.world

    def _boolean(self, expr: BoolOp) -> bool:
        """Three-valued `and`/`or`: one decided operand can settle it while others are undecided."""
        settling = expr.op == "or"
        undecided = False
        for operand in expr.values:
            truth = self.truth(operand)
            if truth is None:
                undecided = True
            elif truth is settling:
                return settling
        if undecided:
            raise _Undecided
        return not settling


def _group_of(atom: Atom) -> str | None:
    """The group whose local rank, size or listed member the atom is; None for other atoms."""
    if isinstance(atom, MemberAt):
        return atom.key
    for prefix in (LOCAL_RANK_PREFIX, SIZE_PREFIX):
        if atom.name.startswith(prefix):
            return atom.name[len(prefix) :]
    if is_listed_member(atom):
        return atom.name[len(GLOBAL_OF_PREFIX) :].rpartition("[")[0]
    return None


def group_axes(region: Region, loops: dict[LoopKey, Region]) -> list[str]:
    """The groups whose local ranks, sizes or listed members the region's conditions, peers and
    loop counts read, other than the world: each is simulated in turn as an axis that spans the
    world (a pipeline group of every rank: the configuration with one stage per rank), so that a
    ring built on the group's local ranks (`ranks[(me + 1) % n]`) is run like one on the rank."""
    found: set[str] = set()
    listed: set[str] = set()  # groups whose members the code lists: they need not span the world
    for path in _paths_within(region, loops):
        values: list[Expr] = list(path.conds)
        for event in path.schedule:
            if isinstance(event, CommEvent):
                values.extend(v for v in (event.peer,) if v is not None)
                if event.group is not None and event.group.members not in (None, TRUE):
                    listed.add(event.group.key)
            else:
                values.append(event.trip)
        for value in values:
            for atom in atoms(value):
                key = _group_of(atom)
                if key is not None and key != "world":
                    found.add(key)
    return sorted(found - listed)[:MAX_AXES]


def _arithmetic(op: str, x: int, y: int) -> int:
    value = integer_arithmetic(op, x, y)
    if value is None:
        raise _Undecided
    return value


def _compare(op: str, x: Value, y: Value) -> bool:
    if op == "==":
        return x == y
    if op == "!=":
        return x != y
    if not (isinstance(x, int) and isinstance(y, int)):
        raise _Undecided
    return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]


def shared_counts(region: Region, loops: dict[LoopKey, Region], world: int) -> dict[Atom, int]:
    """Numbers for the shared values that loop counts read: world + 1 each, and a distinct number
    for each filtered length (one list filtered by two predicates may give two counts)."""
    found: dict[Atom, None] = {}
    for trip in _trips(region, loops):
        for atom in atoms(trip):
            if atom.kind == "shared":
                found[atom] = None
    filtered = sorted((a for a in found if a.name.startswith(FILTERED)), key=lambda a: a.name)
    numbers = {atom: world + 1 for atom in found}
    numbers.update({atom: world + 1 + index for index, atom in enumerate(filtered)})
    return numbers


# A parameter's or a global's value as the evaluator names it: `param:items@12:0` is `items`.
_PARAMETER = re.compile(r"\b(?:param|global):([A-Za-z_][\w.]*)(?:@\d+:\d+)?")


def shown_counts(shared: dict[Atom, int]) -> tuple[tuple[str, str], ...]:
    """The numbers given to shared loop counts, as the counterexample shows them."""
    shown = []
    for atom, number in sorted(shared.items(), key=lambda item: item[0].name):
        name = atom.name
        if name.startswith(FILTERED):
            source, _, predicate = name[len(FILTERED) : -1].partition("|")
            name = f"len([... for _ in {source} if {predicate}])"
        shown.append(("assumed " + _PARAMETER.sub(r"\1", name), str(number)))
    return tuple(shown)


def shown_axis(axis: str | None) -> tuple[tuple[str, str], ...]:
    """The group the simulation took to span the world, as the counterexample shows it."""
    if axis is None:
        return ()
    group = _PARAMETER.sub(r"\1", axis)
    return ((f"assumed members of {group}", "every rank, local rank = rank"),)


def _trips(region: Region, loops: dict[LoopKey, Region]) -> list[Expr]:
    return [
        event.trip
        for path in _paths_within(region, loops)
        for event in path.schedule
        if isinstance(event, LoopEvent)
    ]


def _paths_within(region: Region, loops: dict[LoopKey, Region]) -> Iterator[Path]:
    """Every path of `region` and of the loop regions nested in it, each region once, in the
    order they are met (a region's inner loops after the path that holds them)."""
    stack, seen = [region], {id(region)}
    while stack:
        for path in stack.pop().paths:
            yield path
            for event in path.schedule:
                inner = (
                    loops.get((event.path, event.line, event.chain)) if isinstance(event, LoopEvent) else None
                )
                if inner is not None and id(inner) not in seen:
                    seen.add(id(inner))
                    stack.append(inner)


# ----------------------------------------------------------------------------- schedules


def _schedule(
    paths: list[Path], numbers: _Numbers, loops: dict[LoopKey, Region], depth: int = 0
) -> tuple[Path, list[Call]]:
    """The rank's path among `paths` and its schedule; _Undecided when the numbers leave it open."""
    open_paths = [p for p in paths if _may_take(p, numbers)]
    chosen: tuple[Path, list[Call]] | None = None
    for path in open_paths:
        calls = _calls(path.schedule, numbers, loops, depth)
        if chosen is None:
            chosen = (path, calls)
        elif [(id(e), peer) for e, peer in calls] != [(id(e), peer) for e, peer in chosen[1]]:
            raise _Undecided  # data the numbers do not fix chooses between two schedules
    if chosen is None:
        raise _Undecided
    return chosen


def _may_take(path: Path, numbers: _Numbers) -> bool:
    if path.exit is not None and path.exit.kind is ExitKind.RAISE:
        return False  # a rank that raises crashes: another rule's matter
    return all(numbers.truth(cond) is not False for cond in path.conds)


def _calls(
    events: tuple[Element, ...], numbers: _Numbers, loops: dict[LoopKey, Region], depth: int
) -> list[Call]:
    calls: list[Call] = []
    for event in events:
        if isinstance(event, CommEvent):
            if event.posting is Posting.BATCH:
                calls.append((event, -1))  # posts the transfers prepared before it (in_posting_order)
            elif event.kind in BLOCKING or event.posting in TRANSFERS:
                if event.peer is None:
                    raise _Undecided
                calls.append((event, numbers.integer(event.peer)))
            elif event.kind is EventKind.P2P_POSTED:
                raise _Undecided  # a non-blocking call whose direction is not known
        else:
            calls.extend(_loop_calls(event, numbers, loops, depth))
        if len(calls) > MAX_CALLS:
            raise _Undecided
    return calls


def _loop_calls(loop: LoopEvent, numbers: _Numbers, loops: dict[LoopKey, Region], depth: int) -> list[Call]:
    region = loops.get((loop.path, loop.line, loop.chain))
    if region is None or depth >= MAX_DEPTH:
        raise _Undecided
    trips = numbers.integer(loop.trip)
    if trips <= 0:
        return []
    if trips > MAX_TRIPS:
        raise _Undecided
    try:
        return _iteration(region, numbers, loops, depth) * trips
    except _Undecided:
        if not _counts_from_zero(loop):
            raise
    # `for i in range(n)` whose iterations differ (`if i == n - 1:`): each with its own `i`.
    name = f"item@{loop.line}:{loop.column}"
    calls: list[Call] = []
    for index in range(trips):
        calls.extend(_iteration(region, numbers.at_iteration(name, index), loops, depth))
        if len(calls) > MAX_CALLS:
            raise _Undecided
    return calls


def _iteration(region: Region, numbers: _Numbers, loops: dict[LoopKey, Region], depth: int) -> list[Call]:
    path, calls = _schedule(region.paths, numbers, loops, depth + 1)
    if path.exit is not None and path.exit.kind is not ExitKind.CONTINUE:
        raise _Undecided  # an iteration that leaves the loop or the function
    return calls


def _counts_from_zero(loop: LoopEvent) -> bool:
    """`for i in range(n)`: the loop variable (interpret's `item@line:column`) is the iteration."""
    try:
        node = ast.parse(loop.order, mode="eval").body
    except SyntaxError:
        return False
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "range"
        and len(node.args) == 1
        and not node.keywords
    )


# ----------------------------------------------------------------------------- the search


@dataclass(frozen=True)
class StuckWorld:
    """A world whose simulation did not finish: each rank's path and schedule, how far each got,
    the wait found and the numbers the shared loop counts were given."""

    world: int
    chosen: tuple[tuple[Path, list[Call]], ...]
    heads: tuple[int, ...]
    wait: Wait
    shared: dict[Atom, int]
    axis: str | None = None  # the group simulated as spanning the world (`group_axes`)


@dataclass(frozen=True)
class Verdict:
    """What the simulation says about one function: the worlds where a wait never ends (the
    smallest first; `confirm` turns the first that z3 agrees with into a divergence), and whether
    every rank of every world simulated ran to its end (then the pairwise search of `solve`,
    which compares loop iterations as if every rank ran the same one, is not needed)."""

    region: Region | None = None
    stuck: tuple[StuckWorld, ...] = ()
    clean: bool = False


NonblockingSites = Callable[[str, frozenset[Span]], bool]


def schedule_deadlock(
    region: Region,
    loops: dict[LoopKey, Region],
    world_size: int | None,
    nonblocking: NonblockingSites,
) -> Verdict:
    """Simulate each world (see the module); asks z3 nothing. `nonblocking(path, recorded)`: the
    file names a non-blocking point-to-point call outside the `recorded` spans of the transfers
    the run recorded there (then no wait is kept: that call may be what answers a wait)."""
    paths = [p for p in region.paths if p.schedule]
    if region.kind is not RegionKind.FUNCTION or not paths or not has_transfers(region, loops):
        return Verdict()
    clean = True
    found: list[tuple[StuckWorld, bool]] = []  # each with: kept only if a world of its axis ran clean
    ran_clean: set[str | None] = set()  # axes with a world whose transfers all met their partners
    recorded = posted_spans(region, loops)
    configurations = [
        (axis, world)
        for axis in (None, *group_axes(region, loops))
        for world in ((world_size,) if world_size else range(2, MAX_WORLD + 1))
    ]
    for axis, world in configurations:
        if world > MAX_SIMULATED_WORLD:
            clean = False
            continue
        shared = shared_counts(region, loops, world)
        try:
            chosen = [
                _posted(_schedule(region.paths, _Numbers(rank, world, shared, axis=axis), loops))
                for rank in range(world)
            ]
        except _Undecided:
            clean = False
            continue
        schedules = [calls for _, calls in chosen]
        if any(not 0 <= peer < world or peer == rank for rank, s in enumerate(schedules) for _, peer in s):
            clean = False
            continue  # a peer outside the world: not a schedule collcheck can run
        heads, stuck = run(schedules)
        if stuck is None:
            if exchanged(schedules):
                ran_clean.add(axis)
            continue
        clean = False
        # A posted transfer whose peer never answers it is kept when the function is an exchange
        # of its own: in another world every rank's transfers met their partners (a function that
        # only posts its half, the other half being another function, never runs clean).
        unanswered = unanswered_post(stuck, schedules, heads)
        if not (unanswered or believable(stuck, schedules, heads)):
            continue
        events = (e for s in schedules for e, _ in s)
        if any(nonblocking(path, recorded.get(path, frozenset())) for path in files_of(region, events)):
            return Verdict()
        stuck_world = StuckWorld(world, tuple(chosen), tuple(heads), stuck, shared, axis)
        found.append((stuck_world, unanswered and not believable(stuck, schedules, heads)))
    kept = tuple(world for world, needs_clean in found if not needs_clean or world.axis in ran_clean)
    return Verdict(region, kept, clean)


def _posted(chosen: tuple[Path, list[Call]]) -> tuple[Path, list[Call]]:
    """The rank's path and its calls in the order its transfers happen (`in_posting_order`)."""
    ordered = in_posting_order(chosen[1])
    if ordered is None:
        raise _Undecided
    return chosen[0], ordered


def confirm(verdict: Verdict, world_size: int | None, rlimit: int, stats: SolveStats) -> list[Divergence]:
    """The divergence of the first stuck world z3 agrees with (the two ranks named first take their
    paths there). Asked in a z3 context of its own, so that other queries of the file get the
    counterexamples they would get without it; its queries and notes still count for the file."""
    if verdict.region is None or not verdict.stuck:
        return []
    own = SolveStats()
    try:
        solver = RegionSolver(verdict.region, world_size, rlimit, own)
        for candidate in verdict.stuck:
            divergence = _confirmed(verdict.region, solver, candidate)
            if divergence is not None:
                values = divergence.model.values + shown_counts(candidate.shared) + shown_axis(candidate.axis)
                return [replace(divergence, model=replace(divergence.model, values=values))]
        return []
    finally:
        stats.queries += own.queries
        stats.unknown += own.unknown
        stats.notes.extend(own.notes)
        stats.cuts.extend(cut for cut in own.cuts if cut not in stats.cuts)


def files_of(region: Region, events: Iterable[Element]) -> set[str]:
    """The analysed file and the files of the events and of their call sites."""
    files = {region.path_name}
    for event in events:
        files.add(event.path)
        files.update(site.path for site in event.chain)
    return files


def _confirmed(region: Region, solver: RegionSolver, candidate: StuckWorld) -> Divergence | None:
    """The divergence for a stuck world, when z3 agrees that the first two ranks named take their paths."""
    stuck, chosen, heads, world = candidate.wait, candidate.chosen, candidate.heads, candidate.world
    x, y = stuck.edges()[0]
    blocked = tuple(Blocked(rank, tuple(chosen[rank][1]), heads[rank]) for rank in stuck.ranks)
    if stuck.finished is not None:
        blocked += (Blocked(y, tuple(chosen[y][1]), len(chosen[y][1])),)

    def pinned(tr: Z3Translator) -> Any:
        facts = [tr.world == world, tr.rank("a") == x, tr.rank("b") == y]
        if candidate.axis is not None:  # the group spans the world, in rank order
            facts.append(tr.as_int(group_size(candidate.axis), "a") == world)
            facts.append(tr.as_int(local_rank(candidate.axis), "a") == x)
            facts.append(tr.as_int(local_rank(candidate.axis), "b") == y)
        return tr.z3.And(*facts)

    seq_x = tuple(e for e, _ in chosen[x][1])
    seq_y = tuple(e for e, _ in chosen[y][1])
    query = PairQuery(solver, region, "p2p", None, chosen[x][0], chosen[y][0], seq_x, seq_y)
    results = found(query, DivergenceKind.P2P, 0, pinned)
    if not results:
        return None
    first, second = blocked[0], blocked[1]
    return replace(
        results[0],
        index=first.at,
        event_a=first.event,
        event_b=second.event if not second.finished else _answering(second, first),
        blocked=blocked,
    )


def _answering(finished: Blocked, waiting: Blocked) -> CommEvent | None:
    """The finished rank's last call in the direction that would have answered the waiting one."""
    wanted = answering(direction(waiting.event))
    matching = [e for e, peer in finished.calls if direction(e) is wanted and peer == waiting.rank]
    return matching[-1] if matching else None
