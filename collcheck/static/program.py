"""The per-function collective program: paths, each a condition and a sequence of events.

This is the interface between extraction (which walks the code) and solving (which asks z3
whether two ranks can take paths whose sequences differ).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

from collcheck.static.conditions import NO_SOURCES, ConditionSources
from collcheck.static.symbolic import Expr, GroupVal, atoms

# The start of the `why` of a per-process value found by where the code sends it (local_data.py):
# a value handed to a combining collective is this process's own (a decision taken on it is told
# apart by this prefix of `Divergence.nondet_why`: `Divergence.per_process`).
OWN_DATA = "this process's own data"
SIZE_METHODS = frozenset({"numel", "size", "nelement"})  # what a tensor's size is read by
# A tensor's kind, set by the code that made it alike on every rank, not by the data it holds.
METADATA_ATTRIBUTES = frozenset(
    {"dtype", "device", "requires_grad", "is_cuda", "layout", "is_nested", "ndim"}
)


def is_own_data(value: Expr) -> bool:
    """`value` is computed from this process's own data (an atom whose `why` says so)."""
    return any(atom.kind == "nondet" and atom.why.startswith(OWN_DATA) for atom in atoms(value))


# The `why` of the flag an `except` handler is entered under (handlers.py): a caught exception.
CAUGHT_EXCEPTION = "an exception"


class EventKind(Enum):
    """What a recorded call is; the catalog's op kinds (`kind = "p2p_send"`, catalog.OP_KINDS) and
    the two kinds of a call into unknown code handed a communicating callable (calls.py)."""

    COLLECTIVE = "collective"
    GROUP_CREATE = "group_create"
    P2P_SEND = "p2p_send"
    P2P_RECV = "p2p_recv"
    P2P_NONBLOCKING = "p2p_nonblocking"
    # A posted transfer (`isend`, `irecv`, a `P2POp` of a batch, the `batch_isend_irecv` that posts
    # them), recorded for the point-to-point schedule only (p2p_schedule): what it is, `Posting`.
    P2P_POSTED = "p2p_posted"
    OPAQUE = "opaque"  # unknown code that may call the callable any number of times
    REMOTE = "remote"  # the callable is sent to run on another process


# The value a reduce leaves in its tensor on a rank: whole on its root only (`rooted:stats@12:4`).
ROOTED_PREFIX = "rooted:"
POINT_TO_POINT = frozenset(
    {EventKind.P2P_SEND, EventKind.P2P_RECV, EventKind.P2P_NONBLOCKING, EventKind.P2P_POSTED}
)


class Posting(Enum):
    """What a posted point-to-point event (`EventKind.P2P_POSTED`) does. A `P2POp` only prepares
    a transfer: the next `batch_isend_irecv` of the rank posts every transfer prepared before it."""

    SEND = "send"  # `isend`: posted at once
    RECV = "recv"  # `irecv`
    PREPARED_SEND = "prepared send"  # `P2POp(dist.isend, ...)`
    PREPARED_RECV = "prepared recv"  # `P2POp(dist.irecv, ...)`
    PREPARED_UNKNOWN = "prepared"  # a `P2POp` whose direction the code does not show
    BATCH = "batch"  # `batch_isend_irecv`
    UNKNOWN = "unknown"  # a non-blocking call of a catalog whose direction is not known


SENDING = frozenset({Posting.SEND, Posting.PREPARED_SEND})
PREPARED = frozenset({Posting.PREPARED_SEND, Posting.PREPARED_RECV, Posting.PREPARED_UNKNOWN})


def direction(event: CommEvent) -> EventKind:
    """The blocking kind a transfer moves data like: P2P_SEND for a send, posted or not;
    P2P_RECV for a receive (and for anything else, which is never asked)."""
    if event.kind is EventKind.P2P_SEND or event.posting in SENDING:
        return EventKind.P2P_SEND
    return EventKind.P2P_RECV


def answering(kind: EventKind) -> EventKind:
    """The blocking call that answers `kind` on the peer: a receive answers a send, and back."""
    return EventKind.P2P_RECV if kind is EventKind.P2P_SEND else EventKind.P2P_SEND


class ExitKind(Enum):
    """The statement (or call) a path leaves by; the value is the word messages show."""

    RETURN = "return"
    RAISE = "raise"
    EXIT = "exit"  # sys.exit() and the like
    BREAK = "break"
    CONTINUE = "continue"


class RegionKind(Enum):
    """What a region's paths run through: a whole function body, or one iteration of a loop."""

    FUNCTION = "function"
    LOOP = "loop"


@dataclass(frozen=True)
class Site:
    """A call through which an event was reached: `callee` called at `path:line` in `caller`."""

    caller: str
    callee: str
    path: str
    line: int
    column: int
    callee_path: str = ""  # where the callee is defined (another file for imported helpers)


@dataclass(frozen=True)
class CommEvent:
    op: str
    kind: EventKind
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    chain: tuple[Site, ...] = ()
    group: GroupVal | None = None  # None: the default (world) group
    root: Expr | None = None
    reduce_op: Expr | None = None
    peer: Expr | None = None
    ranks_arg: Expr | None = None
    operands: tuple[str, ...] = ()
    # The group argument when it is chosen per rank among known values (`None if rank == 0 else
    # g`): `group` is then an unknown per-rank group, and this term says which group each rank uses.
    group_term: Expr | None = None
    group_text: str = ""  # the group argument as written (`tp_mesh.get_group()`), for messages
    # A callback event (unknown code handed a communicating callable): the collectives the
    # callable may issue; None when they are not all known (see handoff.py).
    callback_ops: frozenset[str] | None = None
    # A conditional summary's configuration that the call site leaves undecided (`self.sharded`):
    # the collective is counted, and the finding says under which configuration it is one.
    condition: str = ""
    # The receiver's class when it was inferred from the names used on it (inferred_types.py).
    inferred: str = ""
    # A posted transfer (kind P2P_POSTED): what it does.
    posting: Posting | None = None

    def signature(self) -> tuple[str, ...]:
        return (self.op,)


@dataclass(frozen=True)
class LoopEvent:
    """A loop whose body communicates; its trip count is a symbolic term."""

    path: str
    line: int
    column: int
    trip: Expr
    body_ops: tuple[str, ...]
    order: str  # the iterable's text, to notice a reversed iteration order
    first: CommEvent | None
    chain: tuple[Site, ...] = ()
    over_set: bool = False
    # Conditions under which one iteration communicates: an extra iteration matters only then.
    body_conds: tuple[tuple[Expr, ...], ...] = ()
    # The collectives each of `body_conds` issues (read for their channels: a loop that meets
    # on two groups communicates on one of them only under that one's conditions); () when unknown.
    body_comms: tuple[tuple[CommEvent, ...], ...] = ()
    # The body only posts or prepares transfers (`ops.append(P2POp(...))`): the loop is part of
    # the point-to-point schedule and of nothing the sequences compare (`Path.transfers`).
    posted_only: bool = False

    @property
    def op(self) -> str:
        return "loop[" + ",".join(self.body_ops) + "]"

    def signature(self) -> tuple[str, ...]:
        return ("loop", *self.body_ops)


Element = CommEvent | LoopEvent

# More alternatives than this in one loop's "when an iteration communicates" and the loop keeps
# its body paths' own conditions (it may then be taken to communicate where it does not).
MAX_COMMUNICATING_CONDS = 64


def communicating_conds(
    body: Sequence[tuple[tuple[Expr, ...], tuple[Element, ...]]],
) -> tuple[tuple[tuple[Expr, ...], ...], tuple[tuple[CommEvent, ...], ...]]:
    """When one iteration of a loop communicates, and what it then issues (`LoopEvent.body_conds`,
    `body_comms`): in: each body path's conditions and events; out: alternatives, each a
    conjunction, with the collectives issued under it. A path that issues a collective itself
    communicates under its own conditions; a path whose only events are inner loops communicates
    only when one of them does (`for s in states: for v in s: if sharded: all_reduce(v)`
    communicates only when `sharded`; an inner loop's conditions begin with the outer path's)."""
    conds_found: list[tuple[Expr, ...]] = []
    comms_found: list[tuple[CommEvent, ...]] = []
    for conds, events in body:
        if not events:
            continue
        inner = [e for e in events if isinstance(e, LoopEvent)]
        if len(inner) < len(events) or any(len(loop.body_comms) != len(loop.body_conds) for loop in inner):
            conds_found.append(conds)
            comms_found.append(tuple(_issued(events)))
            continue
        for loop in inner:
            for alternative, comms in zip(loop.body_conds, loop.body_comms, strict=True):
                conds_found.append(tuple(dict.fromkeys((*conds, *alternative))))
                comms_found.append(comms)
    if len(conds_found) > MAX_COMMUNICATING_CONDS:
        kept = [(conds, events) for conds, events in body if events]
        return tuple(c for c, _ in kept), tuple(tuple(_issued(e)) for _, e in kept)
    return tuple(conds_found), tuple(comms_found)


def _issued(events: tuple[Element, ...]) -> list[CommEvent]:
    """The collectives among `events`, an inner loop's as each of its iterations may issue them."""
    found: list[CommEvent] = []
    for event in events:
        if isinstance(event, CommEvent):
            found.append(event)
        elif event.body_comms:
            found.extend(e for comms in event.body_comms for e in comms)
        elif event.first is not None:
            found.append(event.first)
    return found


@dataclass(frozen=True)
class Exit:
    kind: ExitKind
    path: str
    line: int
    column: int
    chain: tuple[Site, ...] = ()
    raised: str = ""  # a `raise`: the class it names ("" when the statement does not say)
    data_tests: tuple[Expr, ...] = ()  # a `raise`: the tests of its path that read data (raises.py)
    # A `raise` of an exception this rank alone caught, after a `finally` that read what the
    # handler recorded (`failed = True`): that cleanup chose its collectives by the failure.
    after_recorded_failure: bool = False


def is_posted(element: Element) -> bool:
    """A posted transfer, or a loop that only posts or prepares them."""
    if isinstance(element, LoopEvent):
        return element.posted_only
    return element.kind is EventKind.P2P_POSTED


def unposted(events: tuple[Element, ...]) -> tuple[Element, ...]:
    """`events` without the posted transfers (what the sequences compare)."""
    return tuple(e for e in events if not is_posted(e))


@dataclass(frozen=True)
class Path:
    """A path's conditions, the calls it issues (`events`, what the sequences compare) and how it
    ends. `transfers`: the same calls with the transfers it posts among them, in order, for the
    point-to-point schedule (p2p_schedule); () when it posts none."""

    conds: tuple[Expr, ...]
    events: tuple[Element, ...]
    exit: Exit | None = None
    transfers: tuple[Element, ...] = ()

    @property
    def schedule(self) -> tuple[Element, ...]:
        """The calls the point-to-point schedule reads: `transfers` when there are any."""
        return self.transfers or self.events


def path_of(conds: tuple[Expr, ...], recorded: tuple[Element, ...], exit: Exit | None) -> Path:
    """The path of a state that recorded `recorded`: posted transfers (and loops of them only)
    are kept apart from the compared events, in `transfers`."""
    if not any(is_posted(e) for e in recorded):
        return Path(conds, recorded, exit)
    return Path(conds, unposted(recorded), exit, recorded)


@dataclass(frozen=True)
class LoopRange:
    """`for var in range(start, stop, step)` whose iterations, whenever they communicate, issue the
    same collectives with arguments that do not change from one iteration to the next (checked on
    the source). Lets the solver count iterations instead of comparing them one by one."""

    var: Expr  # the loop variable's value: the same atom in every path of the loop's region
    start: Expr
    stop: Expr
    step: int


@dataclass
class Region:
    """Paths to compare across ranks: a whole function body, or one iteration of a loop."""

    function: str
    kind: RegionKind
    paths: list[Path] = field(default_factory=list)
    line: int = 0
    over_set: bool = False
    path_name: str = ""
    loop_range: LoopRange | None = None
    chain: tuple[Site, ...] = ()  # a loop region: the call sites through which its loop was reached
    # Where the tests of the paths' conditions came from (set by the engine; shown in counterexamples).
    conditions: ConditionSources = NO_SOURCES


# --------------------------------------------------------------------------- rebasing
# A helper's summary is recorded at one call site and applied at others: what it produced carries
# the call chain and the path condition of the site where it was recorded. These functions move a
# recorded element onto another site: `old` chain/condition prefix replaced by `new`.


@dataclass(frozen=True)
class Rebase:
    old_chain: tuple[Site, ...]
    new_chain: tuple[Site, ...]
    old_conds: tuple[Expr, ...]
    new_conds: tuple[Expr, ...]

    @property
    def identity(self) -> bool:
        return self.old_chain == self.new_chain and self.old_conds == self.new_conds

    def chain(self, chain: tuple[Site, ...]) -> tuple[Site, ...]:
        return self.new_chain + chain[len(self.old_chain) :]

    def conds(self, conds: tuple[Expr, ...]) -> tuple[Expr, ...]:
        return self.new_conds + conds[len(self.old_conds) :]

    def element(self, element: Element) -> Element:
        if isinstance(element, CommEvent):
            return replace(element, chain=self.chain(element.chain))
        first = element.first
        return replace(
            element,
            chain=self.chain(element.chain),
            first=None if first is None else replace(first, chain=self.chain(first.chain)),
            # A loop's body conditions start with the conditions of the path that reached it.
            body_conds=tuple(self.conds(conds) for conds in element.body_conds),
            body_comms=tuple(
                tuple(replace(event, chain=self.chain(event.chain)) for event in comms)
                for comms in element.body_comms
            ),
        )

    def exit(self, exit: Exit | None) -> Exit | None:
        return None if exit is None else replace(exit, chain=self.chain(exit.chain))

    def path(self, path: Path) -> Path:
        if self.identity:
            return path
        return Path(
            self.conds(path.conds),
            tuple(self.element(e) for e in path.events),
            self.exit(path.exit),
            tuple(self.element(e) for e in path.transfers),
        )
