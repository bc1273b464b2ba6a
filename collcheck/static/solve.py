"""Solving: can two ranks of one world take paths whose collective sequences differ?

For every pair of paths of a region (a function body or a loop iteration), the sequences are
compared per channel (the world group, and each group whose membership is known). A structural
difference, a reordering of the same operands, or a term that must agree across ranks (root,
reduce op, loop trip count, group-creation ranks) becomes one z3 query over two rank instances
of the path conditions. A satisfying model is the counterexample; `unknown` (timeout) is a note,
never a finding.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

from collcheck.static.budget import bounded_solver
from collcheck.static.groups import (
    LOCAL_RANK_PREFIX,
    NO_GROUP_FACTS,
    GroupFacts,
    atoms_of,
    is_interpreted,
    local_rank_bounds,
    member_facts,
    opaque_rank_atoms,
)
from collcheck.static.program import CommEvent, Element, Exit, LoopEvent, LoopRange, Path, Region
from collcheck.static.symbolic import (
    MEMBER,
    PER_RANK_KINDS,
    RANK,
    Atom,
    BoolOp,
    Compare,
    Const,
    Expr,
    GroupVal,
    IfExp,
    Member,
    Not,
    TupleVal,
    Z3Translator,
    atoms,
    is_rank_dependent,
    substitute,
)

WORLD_CHANNEL = "world"
RESOURCE_LIMIT = (
    2_000_000  # z3 resource units per query (bounds nonlinear arithmetic, which ignores the timeout)
)
LEAVING_EXITS = frozenset({"break", "return", "raise", "exit"})


@dataclass(frozen=True)
class Model:
    world: int
    rank_a: int
    rank_b: int
    values: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Divergence:
    """Two ranks whose programs disagree, and how."""

    kind: str  # sequence | swap | loop_exit | root | reduce_op | group | trip | group_args | p2p | set_order
    region: Region
    path_a: Path
    path_b: Path
    channel: str
    index: int
    event_a: Element | None
    event_b: Element | None
    model: Model
    sequence_a: tuple[Element, ...]
    sequence_b: tuple[Element, ...]
    exit: Exit | None = None
    nondet_only: bool = False
    nondet_why: str = ""


@dataclass
class SolveStats:
    """Per-file solver state: counters, notes, and the file's own z3 context (created on first
    use), so that a file's counterexamples never depend on what was solved before it."""

    queries: int = 0
    unknown: int = 0
    settled: int = 0  # pairs of paths Python ruled out without asking z3
    notes: list[str] = field(default_factory=list)
    z3: Any = None

    def z3_in_context(self) -> Any:
        if self.z3 is None:
            import z3  # deferred: most files never need the solver

            self.z3 = _ContextZ3(z3, z3.Context())
        return self.z3


class _ContextZ3:
    """The z3 module with every constructor bound to one context."""

    def __init__(self, module: Any, ctx: Any) -> None:
        self._module = module
        self.ctx = ctx

    def Int(self, name: str) -> Any:
        return self._module.Int(name, self.ctx)

    def Bool(self, name: str) -> Any:
        return self._module.Bool(name, self.ctx)

    def IntVal(self, value: int) -> Any:
        return self._module.IntVal(value, self.ctx)

    def BoolVal(self, value: bool) -> Any:
        return self._module.BoolVal(value, self.ctx)

    def Solver(self) -> Any:
        return self._module.Solver(ctx=self.ctx)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _channel_key(event: Element) -> str | None:
    """The channel an element belongs to; None when it cannot be compared (unknown membership)."""
    if isinstance(event, LoopEvent):
        return _channel_key(event.first) if event.first is not None else WORLD_CHANNEL
    if event.kind.startswith("p2p"):
        return "p2p"
    group = event.group
    if group is None:
        return WORLD_CHANNEL
    if group.per_rank:
        return None  # each rank may hold another group: which ranks meet is unknown
    return "group:" + group.key


def channel_sequence(events: tuple[Element, ...], channel: str) -> tuple[Element, ...]:
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
            if any(is_rank_dependent(t) for t in _terms(event)):
                return False
    return True


def _terms(event: Element) -> list[Expr]:
    if isinstance(event, LoopEvent):
        return [event.trip]
    terms = (event.root, event.reduce_op, event.peer, event.ranks_arg, event.group_term)
    return [t for t in terms if t is not None]


class RegionSolver:
    """One z3 solver for a region; queries are pushed and popped on it."""

    def __init__(
        self,
        region: Region,
        world_size: int | None,
        timeout_ms: int,
        stats: SolveStats,
        group_facts: GroupFacts = NO_GROUP_FACTS,
    ) -> None:
        z3 = stats.z3_in_context()
        self.z3 = z3
        self.region = region
        self.world_size = world_size
        self.timeout_ms = timeout_ms
        self.stats = stats
        self.group_facts = group_facts
        self._path_atoms: dict[int, tuple[Path, frozenset[Atom]]] = {}
        self._uniform: dict[int, tuple[Path, bool, bool]] = {}
        self._decisions: dict[int, tuple[Path, frozenset[Expr]]] = {}
        # Each check's timeout is also cut to what is left of the file's budget (budget.py).
        self.solver = bounded_solver(z3.Solver(), timeout_ms)
        self.solver.set("timeout", timeout_ms)
        # The timeout is not polled inside some nonlinear arithmetic; a resource limit is.
        self.solver.set("rlimit", RESOURCE_LIMIT)
        self.strings: dict[str, int] = {}
        # One translator per region: the same conditions appear in many pair queries.
        self.translator = Z3Translator(z3, self.strings)
        self.shared_translator: Z3Translator = _SharedNondetTranslator(z3, self.strings)

    def uniform_conditions(self, path: Path, among_unknown_members: bool = False) -> bool:
        """Every condition of the path holds alike on all ranks (or, among the members of a group
        of unknown membership, where opaque per-rank values count as alike: groups.member_facts)."""
        hit = self._uniform.get(id(path))
        if hit is None:
            found = atoms_of(path.conds)
            varying = [atom for atom in found if atom.kind in PER_RANK_KINDS]
            uniform = not varying
            uniform_among_members = not [a for a in varying if a.kind != "perrank" or is_interpreted(a)]
            hit = self._uniform[id(path)] = (path, uniform, uniform_among_members)
        return hit[2] if among_unknown_members else hit[1]

    def data_decisions(self, path: Path) -> frozenset[Expr]:
        """The path's conditions that do not involve the rank (as far as collcheck can tell)."""
        hit = self._decisions.get(id(path))
        if hit is None:
            kept = frozenset(
                cond
                for cond in path.conds
                if not any(
                    atom.kind == "nondet" or (atom.kind in PER_RANK_KINDS and is_interpreted(atom))
                    for atom in atoms_of((cond,))
                )
            )
            hit = self._decisions[id(path)] = (path, kept)
        return hit[1]

    def same_data_decisions(self, a: Path, b: Path) -> bool:
        """Among the members of a group of unknown membership, two paths are compared only when one
        path's data decisions are among the other's: then they part on the rank alone (or one
        stopped earlier). Code that branches on the rank and then tests different data in each arm
        (`if get_rank(g) == 0: if not is_tensor(state): return` / `else: if not is_info(state):
        return`) follows a protocol between the arms that collcheck cannot see."""
        x, y = self.data_decisions(a), self.data_decisions(b)
        return x <= y or y <= x

    def atoms_of(self, path: Path) -> frozenset[Atom]:
        """The atoms of a path's conditions and of its events' terms, once per path."""
        hit = self._path_atoms.get(id(path))
        if hit is None:
            values = [*path.conds, *(term for event in path.events for term in _terms(event))]
            hit = self._path_atoms[id(path)] = (path, atoms_of(values))
        return hit[1]

    # ------------------------------------------------------------------ queries

    def _base(self, tr: Z3Translator, a: Path, b: Path, membership: GroupVal | None) -> list[Any]:
        world = tr.world
        ra, rb = tr.rank("a"), tr.rank("b")
        facts = [ra >= 0, rb >= 0, ra < world, rb < world, ra != rb]
        facts.append(world == self.world_size if self.world_size else world >= 2)
        facts.extend(tr.as_bool(c, "a") for c in a.conds)
        facts.extend(tr.as_bool(c, "b") for c in b.conds)
        if membership is not None and membership.members is not None:
            facts.append(tr.as_bool(substitute(membership.members, {MEMBER: Atom("rank", "rank")}), "a"))
            facts.append(tr.as_bool(substitute(membership.members, {MEMBER: Atom("rank", "rank")}), "b"))
        if membership is not None and membership.color is not None:
            # One creation call, a different subgroup per rank: only ranks of one subgroup meet.
            facts.append(tr.as_int(membership.color, "a") == tr.as_int(membership.color, "b"))
        # The atoms of both paths' conditions and of the terms a query may compare (trips, roots).
        found = self.atoms_of(a) | self.atoms_of(b)
        facts.extend(local_rank_bounds(tr, found))
        if membership is not None:
            facts.extend(member_facts(tr, membership, found, self.group_facts))
        return facts

    def satisfiable(
        self, a: Path, b: Path, membership: GroupVal | None, extra: Any = None, share_nondet: bool = False
    ) -> tuple[str, Model | None, Any]:
        unknown = membership is not None and membership.members is None
        if a is not b and self.uniform_conditions(a, unknown) and self.uniform_conditions(b, unknown):
            # Two paths of one region part at some branch; when every condition is the same on
            # all ranks, no two ranks can take different paths.
            self.stats.settled += 1
            return "unsat", None, None
        if a is not b and unknown and not self.same_data_decisions(a, b):
            self.stats.settled += 1
            return "unsat", None, None
        tr = self.shared_translator if share_nondet else self.translator
        facts = self._base(tr, a, b, membership)
        extra_fact = extra(tr) if extra is not None else None
        facts.extend(tr.side_constraints)  # bounds of the atoms met while translating
        self.solver.push()
        try:
            self.solver.add(*facts)
            if extra_fact is not None:
                self.solver.add(extra_fact)
            self.stats.queries += 1
            verdict = self.solver.check()
            if verdict == self.z3.unknown:
                self.stats.unknown += 1
                self.stats.notes.append(
                    f"{self.region.path_name}:{self.region.line}: solver gave up "
                    f"({self.solver.reason_unknown()}) "
                    f"in {self.region.function}; no finding reported for that query"
                )
                return "unknown", None, None
            if verdict == self.z3.unsat:
                return "unsat", None, None
            small = self._small_model(tr)
            if small is None:
                self.stats.unknown += 1
                self.stats.notes.append(
                    f"{self.region.path_name}:{self.region.line}: solver gave up while building a "
                    f"counterexample in {self.region.function}; no finding reported for that query"
                )
                return "unknown", None, None
            model, raw = small
            return "sat", model, (tr, raw)
        finally:
            self.solver.pop()

    def never(self, facts_of: Any) -> bool:
        """The facts (over one rank, side "a") cannot hold together; a timeout counts as "may"."""
        tr = self.translator
        facts = list(facts_of(tr))
        rank, world = tr.rank("a"), tr.world
        facts += [rank >= 0, rank < world, world == self.world_size if self.world_size else world >= 2]
        facts.extend(tr.side_constraints)
        self.solver.push()
        try:
            self.solver.add(*facts)
            self.stats.queries += 1
            return bool(self.solver.check() == self.z3.unsat)
        finally:
            self.solver.pop()

    def _small_model(self, tr: Z3Translator) -> tuple[Model, Any] | None:
        """Prefer the smallest world and rank 0: the counterexample a person believes at once."""
        z3 = self.z3
        world, ra, rb = tr.world, tr.rank("a"), tr.rank("b")
        preferences = [[world <= bound, z3.Or(ra == 0, rb == 0)] for bound in (2, 3, 4, 8)]
        preferences += [[world <= bound] for bound in (2, 3, 4, 8)]
        for preference in preferences:
            self.solver.push()
            self.solver.add(*preference)
            try:
                if self.solver.check() == z3.sat:
                    model = self.solver.model()
                    return self._model(model, tr), model
            finally:
                self.solver.pop()
        if self.solver.check() != z3.sat:  # gave up while minimising: treat as unknown
            return None
        model = self.solver.model()
        return self._model(model, tr), model

    def _model(self, model: Any, tr: Z3Translator) -> Model:
        return Model(_number(model, tr.world), _number(model, tr.rank("a")), _number(model, tr.rank("b")))


def _number(model: Any, term: Any) -> int:
    value = model.eval(term, model_completion=True)
    try:
        return int(value.as_long())
    except AttributeError:
        return 0


class _SharedNondetTranslator(Z3Translator):
    """The same query with every nondeterministic value forced equal on both ranks."""

    def _var(self, atom: Atom, side: str, sort: str) -> Any:
        if atom.kind == "nondet":
            atom = Atom(atom.name, "shared", lower=atom.lower, below_world=atom.below_world)
        return super()._var(atom, side, sort)


# ----------------------------------------------------------------------------- comparisons


def _first_structural_difference(seq_a: tuple[Element, ...], seq_b: tuple[Element, ...]) -> int | None:
    for index, (x, y) in enumerate(zip(seq_a, seq_b, strict=False)):
        if x.signature() != y.signature():
            return index
    if len(seq_a) != len(seq_b):
        return min(len(seq_a), len(seq_b))
    return None


def _operand_permutation(seq_a: tuple[Element, ...], seq_b: tuple[Element, ...]) -> int | None:
    """Index of the first operand that differs when both sequences reduce the same operands in another
    order (the seed's swapped all_reduce pair); None when they do not."""
    ops_a = [(e.op, e.operands) for e in seq_a if isinstance(e, CommEvent)]
    ops_b = [(e.op, e.operands) for e in seq_b if isinstance(e, CommEvent)]
    if ops_a == ops_b or sorted(ops_a) != sorted(ops_b):
        return _reordered_loop(seq_a, seq_b)
    if any(not operands for _, operands in ops_a):
        return None
    for index, (x, y) in enumerate(zip(seq_a, seq_b, strict=False)):
        if isinstance(x, CommEvent) and isinstance(y, CommEvent) and x.operands != y.operands:
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


def _term_pairs(seq_a: tuple[Element, ...], seq_b: tuple[Element, ...]) -> list[tuple[str, int, Expr, Expr]]:
    pairs: list[tuple[str, int, Expr, Expr]] = []
    for index, (x, y) in enumerate(zip(seq_a, seq_b, strict=False)):
        if isinstance(x, LoopEvent) and isinstance(y, LoopEvent):
            pairs.append(("trip", index, x.trip, y.trip))
            continue
        if not (isinstance(x, CommEvent) and isinstance(y, CommEvent)):
            continue
        if x.root is not None and y.root is not None:
            pairs.append(("root", index, x.root, y.root))
        if x.reduce_op is not None and y.reduce_op is not None:
            pairs.append(("reduce_op", index, x.reduce_op, y.reduce_op))
        creates = x.kind == "group_create" and x.ranks_arg is not None and y.ranks_arg is not None
        if creates and not (_singleton(x.ranks_arg) and _singleton(y.ranks_arg)):  # type: ignore[arg-type]
            pairs.append(("group_args", index, x.ranks_arg, y.ranks_arg))  # type: ignore[arg-type]
    return [p for p in pairs if p[2] != p[3] or is_rank_dependent(p[2])]


def _own_rank_root_behind_opaque_guard(x: Expr, y: Expr, a: Path, b: Path) -> bool:
    """`if self.is_last_stage(): broadcast(t, src=self.global_rank)`: the rank that takes the branch
    names itself the root. Two ranks disagree only if both take it, and when the guard is a value
    collcheck cannot follow (a stage id, a helper's answer), the code's intent is that one rank
    does: not reported. Unguarded, every rank names itself and that is reported."""
    if x != y or not _own_rank(x):
        return False
    return _behind_unknown_guard(a.conds) and _behind_unknown_guard(b.conds)


def _computed_root_of_unknown_group(x: Expr, y: Expr, membership: GroupVal | None) -> bool:
    """`broadcast(t, src=get_tensor_model_parallel_src_rank(), group=tp)`: a root computed from the
    rank (the group's first member, the global rank of a loop's member) is the same for every member
    of a group laid out as the formula assumes; collcheck cannot see the layout of a group of unknown
    members, so there it reports only every member naming itself, or two different literal roots."""
    if membership is None or membership.members is not None:
        return False
    if x == y and _own_rank(x):
        return False
    return not (isinstance(x, Const) and isinstance(y, Const))


def _own_rank(term: Expr) -> bool:
    return term == RANK or (isinstance(term, Atom) and term.name.startswith(LOCAL_RANK_PREFIX))


def _behind_unknown_guard(conds: tuple[Expr, ...]) -> bool:
    found = atoms_of(conds)
    return bool(opaque_rank_atoms(found)) or any(atom.name.startswith("call:") for atom in found)


def _singleton(ranks: Expr) -> bool:
    """`new_group([rank])` on every rank: each builds a group of itself, a common working idiom."""
    return isinstance(ranks, TupleVal) and len(ranks.items) == 1


def _differs(tr: Z3Translator, x: Expr, y: Expr) -> Any:
    z3 = tr.z3
    if isinstance(x, TupleVal) and isinstance(y, TupleVal):
        if len(x.items) != len(y.items):
            return z3.BoolVal(True)
        parts = [_differs(tr, i, j) for i, j in zip(x.items, y.items, strict=False)]
        return z3.Or(*parts) if parts else z3.BoolVal(False)
    if isinstance(x, TupleVal) or isinstance(y, TupleVal):
        return z3.BoolVal(False)
    return tr.value(x, "a") != tr.value(y, "b")


def _communicates(tr: Z3Translator, loop: LoopEvent, side: str) -> Any:
    """Some iteration of the loop issues a collective on this rank (else extra trips are harmless)."""
    z3 = tr.z3
    if not loop.body_conds:
        return z3.BoolVal(True)
    options = [
        z3.And(*[tr.as_bool(c, side) for c in conds]) if conds else z3.BoolVal(True)
        for conds in loop.body_conds
    ]
    return z3.Or(*options)


def _leaves(path: Path) -> bool:
    return path.exit is not None and path.exit.kind in LEAVING_EXITS


def _exit_responsible(shorter: Path, longer: Path, skipped: Element, region: Region) -> Exit | None:
    """The exit that made `shorter` miss `skipped`: it must come before it (or end an iteration)."""
    exit_ = shorter.exit
    if exit_ is None or exit_.kind not in ("return", "raise", "exit", "break", "continue"):
        return None
    if longer.exit is not None and (longer.exit.line, longer.exit.path) == (exit_.line, exit_.path):
        return None
    anchor = skipped.chain[0].line if skipped.chain and not exit_.chain else skipped.line
    if region.kind == "function" and skipped.path == exit_.path and anchor < exit_.line and not exit_.chain:
        return None
    return exit_


def _nondet_why(a: Path, b: Path) -> str:
    for path in (a, b):
        for cond in path.conds:
            for atom in atoms(cond):
                if atom.kind == "nondet":
                    return atom.why
        for event in path.events:
            for term in _terms(event):
                for atom in atoms(term):
                    if atom.kind == "nondet":
                        return atom.why
    return ""


def _pairs(paths: list[Path]) -> Iterator[tuple[Path, Path]]:
    # A path that ends in an uncaught `raise` crashes its rank while the others wait in the
    # collectives it skipped: torchrun and mp.spawn tear such a job down, srun and most schedulers
    # leave it hanging until the collective times out. A raise on ranks the code names
    # (`if rank == 1: raise`) is compared; a consistency check between two values
    # (`if rank != group.rank(): raise`) is how code says "cannot happen" and is not.
    paths = [p for p in paths if p.exit is None or p.exit.kind != "raise" or _raises_on_named_ranks(p)]
    for i, a in enumerate(paths):
        for b in paths[i:]:
            yield a, b


def _raises_on_named_ranks(path: Path) -> bool:
    """The raise's own guard (the path's last condition) compares a rank with literal ranks; a
    raise guarded by a data check (`if not os.path.exists(p): raise`) inside a rank-0 block is an
    error report, not a choice of ranks."""
    return bool(path.conds) and _names_ranks(path.conds[-1])


def _names_ranks(cond: Expr) -> bool:
    if isinstance(cond, Not):
        return _names_ranks(cond.operand)
    if isinstance(cond, BoolOp):
        return any(_names_ranks(value) for value in cond.values)
    if isinstance(cond, Compare) and cond.op in ("==", "!="):
        sides = (cond.left, cond.right)
        literal = any(isinstance(side, Const) and type(side.value) is int for side in sides)
        return literal and any(is_rank_dependent(side) for side in sides)
    if isinstance(cond, Member):
        literal = all(isinstance(option, Const) for option in cond.options)
        return literal and is_rank_dependent(cond.item)
    return False


def solve_region(
    region: Region,
    world_size: int | None,
    timeout_ms: int,
    stats: SolveStats,
    max_findings: int = 8,
    group_facts: GroupFacts = NO_GROUP_FACTS,
) -> list[Divergence]:
    if not region.paths or _region_is_uniform(region):
        return []
    solver = RegionSolver(region, world_size, timeout_ms, stats, group_facts)
    found: list[Divergence] = []
    seen: set[tuple[str, int, int]] = set()
    # Two ranks that issue the same collectives but one of them on the default group: that pair is
    # reported once, as the group mismatch, not again as a collective missing from each channel.
    grouped: set[tuple[int, int]] = set()
    counted = region.kind == "loop" and _skips_one_iteration(solver, region)
    if counted:  # an iteration skipped against one that communicates is not a divergence here
        grouped.update((id(a), id(b)) for a, b in _pairs(region.paths) if bool(a.events) != bool(b.events))
    for a, b in _pairs(region.paths):
        if (id(a), id(b)) in grouped:
            continue
        for divergence in _compare_groups(solver, region, a, b):
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
        membership = _group_of(channel, region.paths) if channel.startswith("group:") else None
        for a, b in _pairs(region.paths):
            if (id(a), id(b)) in grouped:
                continue
            for divergence in _compare(solver, region, channel, membership, a, b):
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
            index = _first_structural_difference(seq_a, seq_b)
            if index is None:
                break
            side, loop = _loop_at(seq_a, seq_b, index)
            if loop is None:
                return _structural(solver, region, channel, membership, a, b, seq_a, seq_b, index)

            def runs(tr: Z3Translator, loop: LoopEvent = loop, side: str = side) -> Any:
                return tr.z3.And(tr.as_int(loop.trip, side) >= 1, _communicates(tr, loop, side))

            found = _structural(solver, region, channel, membership, a, b, seq_a, seq_b, index, runs)
            if found:
                return found
            # That loop issues nothing for these ranks: compare what remains without it.
            if side == "a":
                seq_a = seq_a[:index] + seq_a[index + 1 :]
            else:
                seq_b = seq_b[:index] + seq_b[index + 1 :]
        else:
            return []
        if _first_structural_difference(seq_a, seq_b) is not None:
            return []
        if region.kind == "loop" and _leaves(a) != _leaves(b) and any(p.events for p in region.paths):
            return _found(
                solver,
                region,
                channel,
                membership,
                a,
                b,
                seq_a,
                seq_b,
                "loop_exit",
                len(seq_a),
                None,
                (a if _leaves(a) else b).exit,
            )
        swapped = _operand_permutation(seq_a, seq_b)
        if swapped is not None:
            return _found(
                solver, region, channel, membership, a, b, seq_a, seq_b, "swap", swapped, None, None
            )
    pairs = _term_pairs(seq_a, seq_b)
    if not pairs:
        return []
    results: list[Divergence] = []
    for kind, index, x, y in pairs:
        if not (is_rank_dependent(x) or is_rank_dependent(y) or not same_path):
            continue
        if kind == "root" and _own_rank_root_behind_opaque_guard(x, y, a, b):
            continue
        if kind == "root" and _computed_root_of_unknown_group(x, y, membership):
            continue

        def extra(tr: Z3Translator, x: Expr = x, y: Expr = y, index: int = index, kind: str = kind) -> Any:
            differs = _differs(tr, x, y)
            if kind != "trip":
                return differs
            loop_a, loop_b = seq_a[index], seq_b[index]
            assert isinstance(loop_a, LoopEvent) and isinstance(loop_b, LoopEvent)
            return tr.z3.And(
                differs, tr.z3.Or(_communicates(tr, loop_a, "a"), _communicates(tr, loop_b, "b"))
            )

        results.extend(
            _found(solver, region, channel, membership, a, b, seq_a, seq_b, kind, index, extra, None)
        )
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
    paths = [p for p in region.paths if p.exit is None or p.exit.kind != "raise"]  # a raise crashes
    if any(p.exit is not None and p.exit.kind != "continue" for p in paths):
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


def _group_term(event: CommEvent) -> Expr:
    if event.group_term is not None:
        return event.group_term
    return Const(None) if event.group is None else event.group


def _group_leaves(term: Expr) -> list[Expr]:
    if isinstance(term, IfExp):
        return _group_leaves(term.then) + _group_leaves(term.orelse)
    return [term]


def _is_world(term: Expr) -> bool:
    return isinstance(term, Const) and term.value is None


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
    if not any(_is_world(leaf) for leaf in _group_leaves(x)):
        return z3.BoolVal(False)
    subgroups = [leaf for leaf in dict.fromkeys(_group_leaves(y)) if _known_subgroup(leaf)]
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
    return any(_is_world(leaf) for leaf in _group_leaves(x)) and any(
        _known_subgroup(leaf) for leaf in _group_leaves(y)
    )


def _group_blind(events: tuple[Element, ...]) -> tuple[Element, ...]:
    return tuple(e for e in events if not (isinstance(e, CommEvent) and e.kind.startswith("p2p")))


def _compare_groups(solver: RegionSolver, region: Region, a: Path, b: Path) -> list[Divergence]:
    """The same collectives in the same order, but one rank issues one of them on the default
    (world) group and the other on a group known to hold only some of the ranks: the two never
    match, and the rank on the world group waits for a rank that is not coming."""
    seq_a, seq_b = _group_blind(a.events), _group_blind(b.events)
    if _first_structural_difference(seq_a, seq_b) is not None:
        return []
    for index, (x, y) in enumerate(zip(seq_a, seq_b, strict=True)):
        if not (isinstance(x, CommEvent) and isinstance(y, CommEvent)):
            continue
        if x.group_term is None and y.group_term is None and (a is b or x.group == y.group):
            continue  # the same group on both ranks
        gx, gy = _group_term(x), _group_term(y)
        if not (_may_mismatch(gx, gy) or _may_mismatch(gy, gx)):
            continue

        def extra(tr: Z3Translator, gx: Expr = gx, gy: Expr = gy) -> Any:
            return tr.z3.Or(
                _world_against_subgroup(tr, gx, gy, "a", "b"), _world_against_subgroup(tr, gy, gx, "b", "a")
            )

        found = _found(solver, region, "group", None, a, b, seq_a, seq_b, "group", index, extra, None)
        if found:
            return found
    return []


def _loop_at(
    seq_a: tuple[Element, ...], seq_b: tuple[Element, ...], index: int
) -> tuple[str, LoopEvent | None]:
    if index < len(seq_a) and isinstance(seq_a[index], LoopEvent):
        return "a", seq_a[index]  # type: ignore[return-value]
    if index < len(seq_b) and isinstance(seq_b[index], LoopEvent):
        return "b", seq_b[index]  # type: ignore[return-value]
    return "", None


def _structural(
    solver: RegionSolver,
    region: Region,
    channel: str,
    membership: GroupVal | None,
    a: Path,
    b: Path,
    seq_a: tuple[Element, ...],
    seq_b: tuple[Element, ...],
    index: int,
    extra: Any = None,
) -> list[Divergence]:
    exit_ = None
    if index >= len(seq_a):
        exit_ = _exit_responsible(a, b, seq_b[index], region)
    elif index >= len(seq_b):
        exit_ = _exit_responsible(b, a, seq_a[index], region)
    return _found(solver, region, channel, membership, a, b, seq_a, seq_b, "sequence", index, extra, exit_)


def _found(
    solver: RegionSolver,
    region: Region,
    channel: str,
    membership: GroupVal | None,
    a: Path,
    b: Path,
    seq_a: tuple[Element, ...],
    seq_b: tuple[Element, ...],
    kind: str,
    index: int,
    extra: Any,
    exit_: Exit | None,
) -> list[Divergence]:
    verdict, model, solved = solver.satisfiable(a, b, membership, extra)
    if verdict != "sat" or model is None or solved is None:
        return []
    tr, raw = solved

    def value_of(term: Expr, side: str) -> str:
        return _pretty(str(raw.eval(tr.value(term, side), model_completion=True)), solver)

    nondet_only = False
    why = _nondet_why(a, b)
    if why:
        shared_verdict, _, _ = solver.satisfiable(a, b, membership, extra, share_nondet=True)
        nondet_only = shared_verdict == "unsat"
    values: list[tuple[str, str]] = []
    if kind == "trip":
        x, y = seq_a[index], seq_b[index]
        assert isinstance(x, LoopEvent) and isinstance(y, LoopEvent)
        values.append((f"trips on rank {model.rank_a}", value_of(x.trip, "a")))
        values.append((f"trips on rank {model.rank_b}", value_of(y.trip, "b")))
    elif kind == "group":
        x, y = seq_a[index], seq_b[index]
        assert isinstance(x, CommEvent) and isinstance(y, CommEvent)
        values.append((f"group on rank {model.rank_a}", _group_label(_group_term(x), "a", raw, tr)))
        values.append((f"group on rank {model.rank_b}", _group_label(_group_term(y), "b", raw, tr)))
    elif kind in ("root", "reduce_op"):
        x, y = seq_a[index], seq_b[index]
        assert isinstance(x, CommEvent) and isinstance(y, CommEvent)
        term_x, term_y = (x.root, y.root) if kind == "root" else (x.reduce_op, y.reduce_op)
        assert term_x is not None and term_y is not None
        values.append((f"{kind} on rank {model.rank_a}", value_of(term_x, "a")))
        values.append((f"{kind} on rank {model.rank_b}", value_of(term_y, "b")))
    model = Model(model.world, model.rank_a, model.rank_b, tuple(values))
    return [
        Divergence(
            kind=kind,
            region=region,
            path_a=a,
            path_b=b,
            channel=channel,
            index=index,
            event_a=seq_a[index] if index < len(seq_a) else None,
            event_b=seq_b[index] if index < len(seq_b) else None,
            model=model,
            sequence_a=seq_a,
            sequence_b=seq_b,
            exit=exit_,
            nondet_only=nondet_only,
            nondet_why=why,
        )
    ]


def _group_label(term: Expr, side: str, raw: Any, tr: Z3Translator) -> str:
    """Which group the rank uses in the model, in words."""
    chosen = raw.eval(tr.as_int(term, side), model_completion=True)
    for leaf in _group_leaves(term):
        if str(raw.eval(tr.as_int(leaf, side), model_completion=True)) != str(chosen):
            continue
        if _is_world(leaf):
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


# ----------------------------------------------------------------------------- point-to-point


def _modelled_peer(peer: Expr | None) -> bool:
    """A peer whose relation to the rank is known (`rank + 1`, `1 - rank`, a constant), not one
    looked up in a table or computed by a black box: only those can prove a deadlock."""
    return peer is not None and not any(atom.kind in ("perrank", "nondet") for atom in atoms(peer))


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
                return [Divergence("p2p", region, a, b, "p2p", i, x, y, model, seq_a, seq_b)]
    return []
