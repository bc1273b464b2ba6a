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
from typing import Any

from collcheck.static.program import CommEvent, Element, Exit, LoopEvent, Path, Region
from collcheck.static.symbolic import (
    MEMBER,
    Atom,
    Expr,
    GroupVal,
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

    kind: str  # sequence | swap | loop_exit | root | reduce_op | trip | group_args | p2p | set_order
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
    if group.per_rank or group.members is None:
        return None
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
    return [t for t in (event.root, event.reduce_op, event.peer, event.ranks_arg) if t is not None]


class RegionSolver:
    """One z3 solver for a region; queries are pushed and popped on it."""

    def __init__(self, region: Region, world_size: int | None, timeout_ms: int, stats: SolveStats) -> None:
        z3 = stats.z3_in_context()
        self.z3 = z3
        self.region = region
        self.world_size = world_size
        self.timeout_ms = timeout_ms
        self.stats = stats
        self.solver = z3.Solver()
        self.solver.set("timeout", timeout_ms)
        # The timeout is not polled inside some nonlinear arithmetic; a resource limit is.
        self.solver.set("rlimit", RESOURCE_LIMIT)
        self.strings: dict[str, int] = {}
        # One translator per region: the same conditions appear in many pair queries.
        self.translator = Z3Translator(z3, self.strings)
        self.shared_translator: Z3Translator = _SharedNondetTranslator(z3, self.strings)

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
        return facts

    def satisfiable(
        self, a: Path, b: Path, membership: GroupVal | None, extra: Any = None, share_nondet: bool = False
    ) -> tuple[str, Model | None, Any]:
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
    # A path that ends in an uncaught `raise` crashes its rank; torchrun and mp.spawn then tear the
    # job down, so it cannot hang it. (A raise caught by a handler has become another path.)
    paths = [p for p in paths if p.exit is None or p.exit.kind != "raise"]
    for i, a in enumerate(paths):
        for b in paths[i:]:
            yield a, b


def solve_region(
    region: Region, world_size: int | None, timeout_ms: int, stats: SolveStats, max_findings: int = 8
) -> list[Divergence]:
    if not region.paths or _region_is_uniform(region):
        return []
    solver = RegionSolver(region, world_size, timeout_ms, stats)
    found: list[Divergence] = []
    seen: set[tuple[str, int, int]] = set()
    for channel in _channels(region.paths):
        membership = _group_of(channel, region.paths) if channel.startswith("group:") else None
        for a, b in _pairs(region.paths):
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
