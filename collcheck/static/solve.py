"""Solving: can two ranks of one world take paths whose collective sequences differ?

For every pair of paths of a region (a function body or a loop iteration), the sequences are
compared per channel (the world group, and each group whose membership is known). A structural
difference, a reordering of the same operands, or a term that must agree across ranks (root,
reduce op, loop trip count, group-creation ranks) becomes one z3 query over two rank instances
of the path conditions. A satisfying model is the counterexample; `unknown` (out of `z3-rlimit`) is a note,
never a finding.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from collcheck.static.alignment import Parting, first_parting, positional_parting
from collcheck.static.crossing import crossed_groups
from collcheck.static.delivered import counted_from_source, follows_source
from collcheck.static.divergence import (
    Divergence,
    DivergenceKind,
    PairQuery,
    found,
    group_leaves,
    group_term,
    is_world,
    terms,
)
from collcheck.static.groups import NO_GROUP_FACTS, GroupFacts, is_listed_member
from collcheck.static.handoff import is_callback
from collcheck.static.program import (
    POINT_TO_POINT,
    CommEvent,
    Element,
    EventKind,
    Exit,
    ExitKind,
    LoopEvent,
    LoopRange,
    Path,
    Region,
    RegionKind,
)
from collcheck.static.roots import raises_on_named_ranks, unreported_root
from collcheck.static.smt import RegionSolver, SolveStats
from collcheck.static.symbolic import (
    MEMBER,
    RANK,
    Atom,
    BoolOp,
    Compare,
    Const,
    Expr,
    GroupVal,
    IfExp,
    Not,
    TupleVal,
    Z3Translator,
    atoms,
    is_rank_dependent,
    substitute,
)

WORLD_CHANNEL = "world"
LEAVING_EXITS = frozenset({ExitKind.BREAK, ExitKind.RETURN, ExitKind.RAISE, ExitKind.EXIT})


def _channel_key(event: Element) -> str | None:
    """The channel an element belongs to; None when it cannot be compared (unknown membership)."""
    if isinstance(event, LoopEvent):
        return _channel_key(event.first) if event.first is not None else WORLD_CHANNEL
    if event.kind is EventKind.P2P_POSTED:
        return None  # a posted transfer: the point-to-point schedule's (p2p_schedule), never compared
    if event.kind in POINT_TO_POINT:
        return "p2p"
    if event.kind is EventKind.REMOTE:
        return None  # a callable sent to run on another process: not the sender's collective
    group = event.group
    if group is None:
        return WORLD_CHANNEL
    if group.per_rank:
        return None  # each rank may hold another group: which ranks meet is unknown
    return "group:" + group.key


def channel_sequence(events: tuple[Element, ...], channel: str) -> tuple[Element, ...]:
    """The elements of `events` on `channel`. A hand-off of a communicating callable to unknown
    code is on the world channel and on every group channel: which groups the callable issues
    its collectives on is not known (handoff.py decides what it may absorb)."""
    if channel.startswith("group:"):
        return tuple(e for e in events if _channel_key(e) == channel or is_callback(e))
    return tuple(e for e in events if _channel_key(e) == channel)


def _channels(paths: list[Path]) -> list[str]:
    keys: dict[str, None] = {}
    for path in paths:
        for event in path.events:
            key = _channel_key(event)
            if key is not None:
                keys[key] = None
    return list(keys)


def _group_of(channel: str, paths: list[Path]) -> GroupVal | None:
    for path in paths:
        for event in path.events:
            if _channel_key(event) == channel:
                first = event.first if isinstance(event, LoopEvent) else event
                return first.group if first is not None else None
    return None


def _region_is_uniform(region: Region) -> bool:
    """No rank-dependent condition or term anywhere: every rank takes the same path."""
    for path in region.paths:
        if any(is_rank_dependent(c) for c in path.conds):
            return False
        for event in path.events:
            if any(is_rank_dependent(t) for t in terms(event)):
                return False
    return True


# ----------------------------------------------------------------------------- comparisons


def _agree(seq_a: tuple[Element, ...], seq_b: tuple[Element, ...]) -> bool:
    return positional_parting(seq_a, seq_b) is None


def _operand_permutation(seq_a: tuple[Element, ...], seq_b: tuple[Element, ...]) -> int | None:
    """Index of the first operand that differs when both sequences reduce the same operands in another
    order (the seed's swapped all_reduce pair); None when they do not. A rooted collective (a
    broadcast from `src`) is left out: the source's buffer sends and the others' receive, whatever
    each rank calls them (`broadcast(mine, src=r0); broadcast(theirs, src=r1)` on rank 0 against
    `broadcast(theirs, src=r0); broadcast(mine, src=r1)` on rank 1 is an exchange); its roots
    are compared on their own."""
    ops_a = [(e.op, e.operands) for e in seq_a if isinstance(e, CommEvent) and e.root is None]
    ops_b = [(e.op, e.operands) for e in seq_b if isinstance(e, CommEvent) and e.root is None]
    if ops_a == ops_b or sorted(ops_a) != sorted(ops_b):
        return _reordered_loop(seq_a, seq_b)
    if any(not operands for _, operands in ops_a):
        return None
    for index, (x, y) in enumerate(zip(seq_a, seq_b, strict=False)):
        if not (isinstance(x, CommEvent) and isinstance(y, CommEvent)) or x.root is not None:
            continue
        if x.operands != y.operands:
            return index
    return None


def _reordered_loop(seq_a: tuple[Element, ...], seq_b: tuple[Element, ...]) -> int | None:
    for index, (x, y) in enumerate(zip(seq_a, seq_b, strict=False)):
        reordered = isinstance(x, LoopEvent) and isinstance(y, LoopEvent) and x.order != y.order
        if reordered and _unreversed(x.order) == _unreversed(y.order):  # type: ignore[union-attr]
            return index
    return None


def _unreversed(text: str) -> str:
    if text.startswith("reversed(") and text.endswith(")"):
        return text[len("reversed(") : -1]
    if text.endswith("[::-1]"):
        return text[: -len("[::-1]")]
    return text


def _term_pairs(
    seq_a: tuple[Element, ...], seq_b: tuple[Element, ...]
) -> list[tuple[DivergenceKind, int, Expr, Expr]]:
    pairs: list[tuple[DivergenceKind, int, Expr, Expr]] = []
    for index, (x, y) in enumerate(zip(seq_a, seq_b, strict=False)):
        if isinstance(x, LoopEvent) and isinstance(y, LoopEvent):
            pairs.append((DivergenceKind.TRIP, index, x.trip, y.trip))
            continue
        if not (isinstance(x, CommEvent) and isinstance(y, CommEvent)):
            continue
        if x.root is not None and y.root is not None:
            pairs.append((DivergenceKind.ROOT, index, x.root, y.root))
        if x.reduce_op is not None and y.reduce_op is not None:
            pairs.append((DivergenceKind.REDUCE_OP, index, x.reduce_op, y.reduce_op))
        creates = x.kind is EventKind.GROUP_CREATE and x.ranks_arg is not None and y.ranks_arg is not None
        if creates and not (_singleton(x.ranks_arg) and _singleton(y.ranks_arg)):  # type: ignore[arg-type]
            pairs.append((DivergenceKind.GROUP_ARGS, index, x.ranks_arg, y.ranks_arg))  # type: ignore[arg-type]
    return [p for p in pairs if p[2] != p[3] or is_rank_dependent(p[2])]


def _singleton(ranks: Expr) -> bool:
    """`new_group([rank])` on every rank: each builds a group of itself, a common working idiom."""
    return isinstance(ranks, TupleVal) and len(ranks.items) == 1


def _differs(tr: Z3Translator, x: Expr, y: Expr) -> Any:
    z3 = tr.z3
    # A rank list chosen by a test (`[first] if len(ranks) == 1 else [first, last]`): compared
    # item by item in the branch each rank takes, not as one opaque value per list.
    if _chooses_lists(x):
        assert isinstance(x, IfExp)
        return z3.If(tr.as_bool(x.test, "a"), _differs(tr, x.then, y), _differs(tr, x.orelse, y))
    if _chooses_lists(y):
        assert isinstance(y, IfExp)
        return z3.If(tr.as_bool(y.test, "b"), _differs(tr, x, y.then), _differs(tr, x, y.orelse))
    if isinstance(x, TupleVal) and isinstance(y, TupleVal):
        if len(x.items) != len(y.items):
            return z3.BoolVal(True)
        parts = [_differs(tr, i, j) for i, j in zip(x.items, y.items, strict=False)]
        return z3.Or(*parts) if parts else z3.BoolVal(False)
    if isinstance(x, TupleVal) or isinstance(y, TupleVal):
        return z3.BoolVal(False)
    return tr.value(x, "a") != tr.value(y, "b")


def _chooses_lists(value: Expr) -> bool:
    return isinstance(value, IfExp) and any(
        isinstance(v, (TupleVal, IfExp)) for v in (value.then, value.orelse)
    )


def _communicates(tr: Z3Translator, loop: LoopEvent, side: str, channel: str) -> Any:
    """Some iteration of the loop issues a collective on `channel` on this rank (else extra trips
    are harmless there)."""
    z3 = tr.z3
    alternatives = list(loop.body_conds)
    if len(loop.body_comms) == len(alternatives):
        on_channel = [
            conds
            for conds, comms in zip(alternatives, loop.body_comms, strict=True)
            if channel_sequence(comms, channel)
        ]
        alternatives = on_channel or alternatives  # none: the channel came from elsewhere, keep all
    if not alternatives:
        return z3.BoolVal(True)
    options = [
        z3.And(*[tr.as_bool(c, side) for c in conds]) if conds else z3.BoolVal(True) for conds in alternatives
    ]
    return z3.Or(*options)


def _leaves(path: Path) -> bool:
    return path.exit is not None and path.exit.kind in LEAVING_EXITS


def _exit_responsible(shorter: Path, longer: Path, skipped: Element, region: Region) -> Exit | None:
    """The exit that made `shorter` miss `skipped`: it must come before it (or end an iteration)."""
    exit_ = shorter.exit
    if exit_ is None or exit_.kind not in (
        ExitKind.RETURN,
        ExitKind.RAISE,
        ExitKind.EXIT,
        ExitKind.BREAK,
        ExitKind.CONTINUE,
    ):
        return None
    if longer.exit is not None and (longer.exit.line, longer.exit.path) == (exit_.line, exit_.path):
        return None
    anchor = skipped.chain[0].line if skipped.chain and not exit_.chain else skipped.line
    if (
        region.kind is RegionKind.FUNCTION
        and skipped.path == exit_.path
        and anchor < exit_.line
        and not exit_.chain
    ):
        return None
    return exit_


def _pairs(paths: list[Path]) -> Iterator[tuple[Path, Path]]:
    # A path that ends in an uncaught `raise` crashes its rank while the others wait in the
    # collectives it skipped: torchrun and mp.spawn tear such a job down, srun and most schedulers
    # leave it hanging until the collective times out. A raise on ranks the code names
    # (`if rank == 1: raise`) is compared; a consistency check between two values
    # (`if rank != group.rank(): raise`) is how code says "cannot happen" and is not.
    paths = [p for p in paths if _compared(p)]
    for i, a in enumerate(paths):
        for b in paths[i:]:
            yield a, b


def _compared(path: Path) -> bool:
    # A raise after a `finally` that chose its collectives by the failure the handler recorded is
    # compared: that `finally` is where the failed rank parts from the others (handlers.py).
    return (
        path.exit is None
        or path.exit.kind is not ExitKind.RAISE
        or path.exit.after_recorded_failure
        or raises_on_named_ranks(path)
    )


def solve_region(
    region: Region,
    world_size: int | None,
    rlimit: int,
    stats: SolveStats,
    wanted: frozenset[DivergenceKind] = frozenset(DivergenceKind),
    max_findings: int = 8,
    group_facts: GroupFacts = NO_GROUP_FACTS,
) -> list[Divergence]:
    """Divergences between two ranks of `region`, at most `max_findings`. Point-to-point deadlocks
    are searched only when `wanted` holds their kind (no other kind depends on that search)."""
    if not region.paths or _region_is_uniform(region):
        live = sum(1 for p in region.paths if _compared(p))
        stats.settled += live * (live + 1) // 2  # every rank takes the same path (as `_pairs` pairs them)
        return []
    solver = RegionSolver(region, world_size, rlimit, stats, group_facts)
    found: list[Divergence] = []
    seen: set[tuple[DivergenceKind, int, int]] = set()
    # Two ranks that issue the same collectives but one of them on the default group: that pair is
    # reported once, as the group mismatch, not again as a collective missing from each channel.
    grouped: set[tuple[int, int]] = set()
    counted = region.kind is RegionKind.LOOP and _skips_one_iteration(solver, region)
    if counted:  # an iteration skipped against one that communicates is not a divergence here
        grouped.update((id(a), id(b)) for a, b in _pairs(region.paths) if bool(a.events) != bool(b.events))
    for a, b in _pairs(region.paths):
        if (id(a), id(b)) in grouped:
            continue
        crossed = crossed_groups(solver, region, a, b, _channel_key)
        for divergence in crossed or _compare_groups(solver, region, a, b):
            if a is not b:  # on one path the group term has no channel: nothing to report twice
                grouped.add((id(a), id(b)))
            first = divergence.event_a or divergence.event_b
            key = (divergence.kind, first.line if first else 0, 0)
            if key not in seen:
                seen.add(key)
                found.append(divergence)
                if len(found) >= max_findings:
                    return found
    for channel in _channels(region.paths):
        if channel == "p2p" and DivergenceKind.P2P not in wanted:
            continue
        membership = _group_of(channel, region.paths) if channel.startswith("group:") else None
        for a, b in _pairs(region.paths):
            if (id(a), id(b)) in grouped:
                continue
            asked = stats.queries
            divergences = _compare(solver, region, channel, membership, a, b)
            if stats.queries == asked:
                stats.settled += 1
            for divergence in divergences:
                first = divergence.event_a or divergence.event_b
                key = (
                    divergence.kind,
                    first.line if first else 0,
                    divergence.exit.line if divergence.exit else 0,
                )
                if key in seen:
                    continue
                seen.add(key)
                found.append(divergence)
                if len(found) >= max_findings:
                    return found
    return found


def _compare(
    solver: RegionSolver, region: Region, channel: str, membership: GroupVal | None, a: Path, b: Path
) -> list[Divergence]:
    if channel == "p2p":
        return _compare_p2p(solver, region, a, b)
    seq_a, seq_b = channel_sequence(a.events, channel), channel_sequence(b.events, channel)
    same_path = a is b
    if not same_path:
        for _ in range(len(seq_a) + len(seq_b) + 1):
            parting = first_parting(seq_a, seq_b)
            if parting is None:
                break
            index = parting.index
            # A receiver's test on what the source sent it: settled when a receivers' arm matches.
            alternatives = ((p, channel_sequence(p.events, channel)) for p in region.paths if _compared(p))
            if follows_source(alternatives, a, b, seq_a, seq_b, index, _agree):
                return []
            side, loop = _loop_at(seq_a, seq_b, parting)
            query = PairQuery(solver, region, channel, membership, a, b, seq_a, seq_b)
            if loop is None:
                return _structural(query, parting)

            def runs(tr: Z3Translator, loop: LoopEvent = loop, side: str = side) -> Any:
                return tr.z3.And(tr.as_int(loop.trip, side) >= 1, _communicates(tr, loop, side, channel))

            divergences = _structural(query, parting, runs)
            if divergences:
                return divergences
            # That loop issues nothing for these ranks: compare what remains without it.
            if side == "a":
                seq_a = seq_a[:index] + seq_a[index + 1 :]
            else:
                seq_b = seq_b[:index] + seq_b[index + 1 :]
        else:
            return []
        if not _agree(seq_a, seq_b):
            return []
        if (
            region.kind is RegionKind.LOOP
            and _leaves(a) != _leaves(b)
            and any(p.events for p in region.paths)
        ):
            query = PairQuery(solver, region, channel, membership, a, b, seq_a, seq_b)
            return found(query, DivergenceKind.LOOP_EXIT, len(seq_a), None, (a if _leaves(a) else b).exit)
        swapped = _operand_permutation(seq_a, seq_b)
        if swapped is not None:
            query = PairQuery(solver, region, channel, membership, a, b, seq_a, seq_b)
            return found(query, DivergenceKind.SWAP, swapped)
    pairs = _term_pairs(seq_a, seq_b)
    if not pairs:
        return []
    results: list[Divergence] = []
    for kind, index, x, y in pairs:
        if not (is_rank_dependent(x) or is_rank_dependent(y) or not same_path):
            continue
        if kind is DivergenceKind.TRIP and (
            counted_from_source(seq_a, seq_b, index, x, y) or counted_from_source(seq_b, seq_a, index, y, x)
        ):
            continue
        if kind is DivergenceKind.ROOT and unreported_root(x, y, a, b, membership):
            continue

        def extra(
            tr: Z3Translator, x: Expr = x, y: Expr = y, index: int = index, kind: DivergenceKind = kind
        ) -> Any:
            differs = _differs(tr, x, y)
            if kind is not DivergenceKind.TRIP:
                return differs
            loop_a, loop_b = seq_a[index], seq_b[index]
            assert isinstance(loop_a, LoopEvent) and isinstance(loop_b, LoopEvent)
            return tr.z3.And(
                differs,
                tr.z3.Or(_communicates(tr, loop_a, "a", channel), _communicates(tr, loop_b, "b", channel)),
            )

        query = PairQuery(solver, region, channel, membership, a, b, seq_a, seq_b)
        results.extend(found(query, kind, index, extra))
        if results:
            break
    return results


# ----------------------------------------------------------------------------- skip-one loops


def _skips_one_iteration(solver: RegionSolver, region: Region) -> bool:
    """`for peer in range(world): if peer == rank: continue; all_reduce(t)`: compared iteration by
    iteration, rank 0 skips where rank 1 reduces. Counted, every rank issues the same sequence D
    exactly `len(range) - 1` times, and collectives match by order, not by iteration: no hang.

    That holds when (1) every iteration that communicates issues the same D, with arguments that do
    not change between iterations (checked on the source: `region.loop_range` is set only then;
    `broadcast(t, src=peer)` is not such a loop: rank `peer` skips the one broadcast it roots);
    (2) an iteration issues D or nothing, and never leaves the loop; (3) for some g over the rank,
    a rank skips exactly when the loop variable equals g(rank), and g(rank) lies in the range for
    every rank that runs the loop. (2) and (3) are proved for one symbolic rank and iteration."""
    loop = region.loop_range
    if loop is None:
        return False
    paths = [
        p for p in region.paths if p.exit is None or p.exit.kind is not ExitKind.RAISE
    ]  # a raise crashes
    if any(p.exit is not None and p.exit.kind is not ExitKind.CONTINUE for p in paths):
        return False
    issuing = [p for p in paths if p.events]
    skipping = [p for p in paths if not p.events]
    if not issuing or not skipping:
        return False
    for owner in _owner_candidates(paths, loop.var):
        if all(solver.never(query) for query in _skip_one_queries(loop, owner, skipping, issuing)):
            return True
    return False


def _skip_one_queries(loop: LoopRange, owner: Expr, skipping: list[Path], issuing: list[Path]) -> list[Any]:
    """Each must be unsatisfiable: a skip at another iteration than the rank's own, an issue at its
    own, and an own iteration outside the range on a rank that runs the loop."""

    def skips_elsewhere(tr: Z3Translator) -> list[Any]:
        var = tr.as_int(loop.var, "a")
        return [_in_range(tr, loop, var), _taken(tr, skipping), var != tr.as_int(owner, "a")]

    def issues_on_own(tr: Z3Translator) -> list[Any]:
        var = tr.as_int(loop.var, "a")
        return [_in_range(tr, loop, var), _taken(tr, issuing), var == tr.as_int(owner, "a")]

    def owner_outside(tr: Z3Translator) -> list[Any]:
        var = tr.as_int(loop.var, "a")
        runs = tr.z3.Or(_taken(tr, skipping), _taken(tr, issuing))
        return [_in_range(tr, loop, var), runs, tr.z3.Not(_in_range(tr, loop, tr.as_int(owner, "a")))]

    return [skips_elsewhere, issues_on_own, owner_outside]


def _in_range(tr: Z3Translator, loop: LoopRange, value: Any) -> Any:
    start, stop = tr.as_int(loop.start, "a"), tr.as_int(loop.stop, "a")
    facts = [value >= start, value < stop]
    if loop.step != 1:
        facts.append((value - start) % loop.step == 0)
    return tr.z3.And(*facts)


def _taken(tr: Z3Translator, paths: list[Path]) -> Any:
    """One of the paths is taken by the rank (side "a")."""
    z3 = tr.z3
    options = [z3.And(*[tr.as_bool(c, "a") for c in p.conds]) if p.conds else z3.BoolVal(True) for p in paths]
    return z3.Or(*options)


def _owner_candidates(paths: list[Path], var: Expr) -> list[Expr]:
    """g in the tests `var == g` / `var != g` of the paths, with g computed from the rank."""
    found: dict[Expr, None] = {}
    stack: list[Expr] = [c for p in paths for c in p.conds]
    while stack:
        node = stack.pop()
        if isinstance(node, Not):
            stack.append(node.operand)
        elif isinstance(node, BoolOp):
            stack.extend(node.values)
        elif isinstance(node, Compare) and node.op in ("==", "!="):
            for mine, other in ((node.left, node.right), (node.right, node.left)):
                if mine == var and is_rank_dependent(other) and var not in set(atoms(other)):
                    found[other] = None
    return list(found)


# ----------------------------------------------------------------------------- group mismatch


def _known_subgroup(term: Expr) -> bool:
    """A group made by a creation call of the analysed code whose members are known. A group of
    unknown origin (a parameter, `self.group`) may well be the default group: never one of these."""
    return isinstance(term, GroupVal) and term.created and not term.per_rank and term.members is not None


def _strict_subgroup(tr: Z3Translator, group: GroupVal, side: str) -> Any:
    """Some rank of the world is not in the group that this rank holds."""
    assert group.members is not None
    outsider = Atom(f"outsider:{group.key}", "shared")
    inside = substitute(group.members, {MEMBER: outsider})
    facts = [tr.as_int(outsider, side) >= 0, tr.as_int(outsider, side) < tr.world]
    if group.color is not None:
        # One subgroup of a partition: the rank holds it (the partition is valid), the outsider not.
        facts.append(tr.as_bool(substitute(group.members, {MEMBER: RANK}), side))
        same = tr.as_int(substitute(group.color, {RANK: outsider}), side) == tr.as_int(group.color, side)
        facts.append(tr.z3.Not(tr.z3.And(tr.as_bool(inside, side), same)))
    else:
        facts.append(tr.z3.Not(tr.as_bool(inside, side)))
    return tr.z3.And(*facts)


def _world_against_subgroup(tr: Z3Translator, x: Expr, y: Expr, side_x: str, side_y: str) -> Any:
    z3 = tr.z3
    if not any(is_world(leaf) for leaf in group_leaves(x)):
        return z3.BoolVal(False)
    subgroups = [leaf for leaf in dict.fromkeys(group_leaves(y)) if _known_subgroup(leaf)]
    if not subgroups:
        return z3.BoolVal(False)
    on_world = tr.as_int(x, side_x) == tr.as_int(Const(None), side_x)
    on_subgroup = z3.Or(
        *[
            z3.And(tr.as_int(y, side_y) == tr.as_int(g, side_y), _strict_subgroup(tr, g, side_y))  # type: ignore[arg-type]
            for g in subgroups
        ]
    )
    return z3.And(on_world, on_subgroup)


def _may_mismatch(x: Expr, y: Expr) -> bool:
    return any(is_world(leaf) for leaf in group_leaves(x)) and any(
        _known_subgroup(leaf) for leaf in group_leaves(y)
    )


def _group_blind(events: tuple[Element, ...]) -> tuple[Element, ...]:
    return tuple(e for e in events if not (isinstance(e, CommEvent) and e.kind in POINT_TO_POINT))


def _compare_groups(solver: RegionSolver, region: Region, a: Path, b: Path) -> list[Divergence]:
    """The same collectives in the same order, but one rank issues one of them on the default
    (world) group and the other on a group known to hold only some of the ranks: the two never
    match, and the rank on the world group waits for a rank that is not coming."""
    seq_a, seq_b = _group_blind(a.events), _group_blind(b.events)
    if not _agree(seq_a, seq_b):
        return []
    for index, (x, y) in enumerate(zip(seq_a, seq_b, strict=True)):
        if not (isinstance(x, CommEvent) and isinstance(y, CommEvent)):
            continue
        if x.group_term is None and y.group_term is None and (a is b or x.group == y.group):
            continue  # the same group on both ranks
        gx, gy = group_term(x), group_term(y)
        if not (_may_mismatch(gx, gy) or _may_mismatch(gy, gx)):
            continue

        def extra(tr: Z3Translator, gx: Expr = gx, gy: Expr = gy) -> Any:
            return tr.z3.Or(
                _world_against_subgroup(tr, gx, gy, "a", "b"), _world_against_subgroup(tr, gy, gx, "b", "a")
            )

        query = PairQuery(solver, region, "group", None, a, b, seq_a, seq_b)
        divergences = found(query, DivergenceKind.GROUP, index, extra)
        if divergences:
            return divergences
    return []


def _loop_at(
    seq_a: tuple[Element, ...], seq_b: tuple[Element, ...], parting: Parting
) -> tuple[str, LoopEvent | None]:
    """A loop among the elements where the sequences part, and whose it is."""
    index = parting.index
    if parting.shows_a() and index < len(seq_a) and isinstance(seq_a[index], LoopEvent):
        return "a", seq_a[index]  # type: ignore[return-value]
    if parting.shows_b() and index < len(seq_b) and isinstance(seq_b[index], LoopEvent):
        return "b", seq_b[index]  # type: ignore[return-value]
    return "", None


def _structural(query: PairQuery, parting: Parting, extra: Any = None) -> list[Divergence]:
    a, b, seq_a, seq_b, region = query.a, query.b, query.seq_a, query.seq_b, query.region
    index = parting.index
    exit_ = None
    if index >= len(seq_a):
        exit_ = _exit_responsible(a, b, seq_b[index], region)
    elif index >= len(seq_b):
        exit_ = _exit_responsible(b, a, seq_a[index], region)
    return found(query, DivergenceKind.SEQUENCE, index, extra, exit_, parting.unmatched)


# ----------------------------------------------------------------------------- point-to-point


def _modelled_peer(peer: Expr | None) -> bool:
    """A peer whose relation to the rank is known (`rank + 1`, `1 - rank`, a constant), not one
    looked up in a table or computed by a black box: only those can prove a deadlock. A group's
    member at a local rank (`get_global_rank(g, 1)`) is tied to the ranks' local ranks."""
    return peer is not None and not any(
        atom.kind in ("perrank", "nondet") and not is_listed_member(atom) for atom in atoms(peer)
    )


def _compare_p2p(solver: RegionSolver, region: Region, a: Path, b: Path) -> list[Divergence]:
    """Both ranks block first on the same direction towards each other: send/send or recv/recv."""
    seq_a = tuple(e for e in channel_sequence(a.events, "p2p") if isinstance(e, CommEvent))
    seq_b = tuple(e for e in channel_sequence(b.events, "p2p") if isinstance(e, CommEvent))
    for i, x in enumerate(seq_a):
        for j, y in enumerate(seq_b):
            if x.kind != y.kind or not _modelled_peer(x.peer) or not _modelled_peer(y.peer):
                continue

            def extra(tr: Z3Translator, i: int = i, j: int = j) -> Any:
                z3 = tr.z3
                ra, rb = tr.rank("a"), tr.rank("b")
                facts = [tr.as_int(seq_a[i].peer, "a") == rb, tr.as_int(seq_b[j].peer, "b") == ra]  # type: ignore[arg-type]
                facts += [tr.as_int(e.peer, "a") != rb for e in seq_a[:i] if e.peer is not None]
                facts += [tr.as_int(e.peer, "b") != ra for e in seq_b[:j] if e.peer is not None]
                return z3.And(*facts)

            verdict, model, _ = solver.satisfiable(a, b, None, extra)
            if verdict == "sat" and model is not None:
                return [Divergence(DivergenceKind.P2P, region, a, b, "p2p", i, x, y, model, seq_a, seq_b)]
    return []
