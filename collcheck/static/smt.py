"""The solver side: z3 contexts and one solver per region, asked about two rank instances.

In: a `Region` and the two paths of a query, with an optional extra fact built from a
`Z3Translator`. Out: a verdict (`sat` / `unsat` / `unknown`), and for `sat` a small `RankWitness`
(world size and the two ranks, smallest first) with the raw z3 model to read values from.
`SolveStats` counts the queries and keeps the notes and the budget cuts (a query over its
`z3-rlimit`) of one file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from collcheck.findings import Budget, BudgetCut
from collcheck.static.budget import bounded_solver, track_context
from collcheck.static.groups import (
    NO_GROUP_FACTS,
    GroupFacts,
    atoms_of,
    is_interpreted,
    local_rank,
    local_rank_bounds,
    member_facts,
    spanning_facts,
)
from collcheck.static.membership import candidate_parts, is_membership_predicate, mentions_group
from collcheck.static.program import CommEvent, Element, LoopEvent, Path, Region
from collcheck.static.symbolic import (
    MEMBER,
    PER_RANK_KINDS,
    Atom,
    Expr,
    GroupVal,
    Z3Translator,
    substitute,
)

# z3's reasons for an "unknown" when a check ran out of its resource units (`rlimit`).
_OUT_OF_UNITS = ("max. resources exceeded", "canceled", "resource limits reached")


@dataclass(frozen=True)
class RankWitness:
    world: int
    rank_a: int
    rank_b: int
    values: tuple[tuple[str, str], ...] = ()


@dataclass
class SolveStats:
    """Per-file solver state: counters, notes, and the file's own z3 context (created on first
    use), so that a file's counterexamples never depend on what was solved before it."""

    queries: int = 0
    settled: int = 0  # pairs of paths (per channel) decided without a z3 query
    unknown: int = 0
    notes: list[str] = field(default_factory=list)
    cuts: list[BudgetCut] = field(default_factory=list)  # regions with a query over `z3-rlimit`
    z3: Any = None

    def z3_in_context(self) -> Any:
        if self.z3 is None:
            import z3  # deferred: most files never need the solver

            context = z3.Context()
            track_context(context)  # never deleted if the file is stopped (budget.py)
            self.z3 = _ContextZ3(z3, context)
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


class RegionSolver:
    """One z3 solver for a region; queries are pushed and popped on it."""

    def __init__(
        self,
        region: Region,
        world_size: int | None,
        rlimit: int,
        stats: SolveStats,
        group_facts: GroupFacts = NO_GROUP_FACTS,
    ) -> None:
        z3 = stats.z3_in_context()
        self.z3 = z3
        self.region = region
        self.world_size = world_size
        self.rlimit = rlimit
        self.stats = stats
        self.group_facts = group_facts
        self._path_atoms: dict[int, tuple[Path, frozenset[Atom]]] = {}
        self._uniform: dict[int, tuple[Path, bool, bool]] = {}
        self._decisions: dict[int, tuple[Path, frozenset[Expr]]] = {}
        self._predicates: dict[tuple[int, str], tuple[Expr, bool]] = {}
        # Each check is also charged to its function's allowance (budget.py). A resource limit,
        # not a timeout: z3 counts its units the same way on every machine (z3 counts it per check).
        self.solver = bounded_solver(z3.Solver())
        self.solver.set("rlimit", rlimit)
        self.strings: dict[str, int] = {}
        # One translator per region: the same conditions appear in many pair queries.
        self.translator = Z3Translator(z3, self.strings)
        self.shared_translator: Z3Translator = _SharedNondetTranslator(z3, self.strings)

    # ------------------------------------------------------------------ what Python settles

    def uniform_conditions(self, path: Path, among_unknown_members: bool = False) -> bool:
        """Every condition of the path holds alike on all ranks (or, among the members of a group
        of unknown membership, where opaque per-rank values count as alike: groups.member_facts)."""
        hit = self._uniform.get(id(path))
        if hit is None:
            found = atoms_of(path.conds)
            varying = any(atom.kind in PER_RANK_KINDS for atom in found)
            hit = self._uniform[id(path)] = (path, not varying, not _ranked(found))
        return hit[2] if among_unknown_members else hit[1]

    def data_decisions(self, path: Path) -> frozenset[Expr]:
        """The path's conditions that do not involve the rank (as far as collcheck can tell), less
        those on a value that a collective of the path produced (`broadcast(flag, ...)`, then
        `if flag:`): taken after that collective, they cannot be what chose to issue it."""
        hit = self._decisions.get(id(path))
        if hit is None:
            spots = {(e.line, e.column) for e in path.events if isinstance(e, CommEvent)}
            kept = frozenset(
                cond
                for cond in path.conds
                if not _ranked(atoms_of((cond,))) and not _produced_by(atoms_of((cond,)), spots)
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
            values = [*path.conds, *(term for event in path.events for term in event_terms(event))]
            hit = self._path_atoms[id(path)] = (path, atoms_of(values))
        return hit[1]

    def _settled(self, a: Path, b: Path, membership: GroupVal | None) -> bool:
        """Two paths no two ranks can take: parted by conditions that hold alike on every rank
        (every member of a group of unknown membership), or by data decisions of a rank protocol."""
        if a is b:
            return False
        unknown = membership is not None and membership.members is None
        if self.uniform_conditions(a, unknown) and self.uniform_conditions(b, unknown):
            return True
        return unknown and not self.same_data_decisions(a, b)

    # ------------------------------------------------------------------ queries

    def _base(self, tr: Z3Translator, a: Path, b: Path, membership: GroupVal | None) -> list[Any]:
        world = tr.world
        ra, rb = tr.rank("a"), tr.rank("b")
        facts = [ra >= 0, rb >= 0, ra < world, rb < world, ra != rb]
        facts.append(world == self.world_size if self.world_size else world >= 2)
        facts.extend(tr.as_bool(c, "a") for c in a.conds)
        facts.extend(tr.as_bool(c, "b") for c in b.conds)
        # The atoms of both paths' conditions and of the terms a query may compare (trips, roots).
        found = self.atoms_of(a) | self.atoms_of(b)
        facts.extend(local_rank_bounds(tr, found))
        facts.extend(spanning_facts(tr, found))
        if membership is not None:
            facts.extend(self.both_members(tr, membership, found))
        if membership is not None and membership.members is None:
            for predicate in self._membership_predicates((*a.conds, *b.conds), membership.key):
                facts.extend((tr.as_bool(predicate, "a"), tr.as_bool(predicate, "b")))
        return facts

    def both_members(self, tr: Z3Translator, group: GroupVal, found: frozenset[Atom]) -> list[Any]:
        """z3 facts: ranks `a` and `b` both belong to `group` (`found`: the atoms of the query)."""
        facts = []
        if group.members is not None:
            facts.append(tr.as_bool(substitute(group.members, {MEMBER: Atom("rank", "rank")}), "a"))
            facts.append(tr.as_bool(substitute(group.members, {MEMBER: Atom("rank", "rank")}), "b"))
        if group.color is not None:
            # One creation call, a different subgroup per rank: only ranks of one subgroup meet.
            facts.append(tr.as_int(group.color, "a") == tr.as_int(group.color, "b"))
        facts.extend(member_facts(tr, group, found, self.group_facts))
        return facts

    def _membership_predicates(self, conds: tuple[Expr, ...], key: str) -> list[Expr]:
        """The parts of the conditions that are membership predicates of the group `key`
        (membership.py): they hold on both members compared. Decided once per part and group."""
        found = []
        for cond in conds:
            for part in candidate_parts(cond):
                hit = self._predicates.get((id(part), key))
                if hit is None:
                    verdict = mentions_group(part, key) and is_membership_predicate(
                        part, key, self.translator, self._sat
                    )
                    hit = self._predicates[(id(part), key)] = (part, verdict)
                if hit[1]:
                    found.append(part)
        return found

    def _sat(self, facts: list[Any]) -> bool | None:
        """Whether facts over rank-independent values can hold together (None: z3 gave up)."""
        self.solver.push()
        try:
            self.solver.add(*facts, *self.translator.side_constraints)
            self.stats.queries += 1
            verdict = self.solver.check()
            return None if verdict == self.z3.unknown else bool(verdict == self.z3.sat)
        finally:
            self.solver.pop()

    def satisfiable(
        self, a: Path, b: Path, membership: GroupVal | None, extra: Any = None, share_nondet: bool = False
    ) -> tuple[str, RankWitness | None, Any]:
        if self._settled(a, b, membership):
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
                reason = self.solver.reason_unknown()
                self.stats.notes.append(
                    f"{self.region.path_name}:{self.region.line}: solver gave up ({reason}) "
                    f"in {self.region.function}; no finding reported for that query"
                )
                if reason in _OUT_OF_UNITS:
                    self._cut()
                return "unknown", None, None
            if verdict == self.z3.unsat:
                return "unsat", None, None
            small = self._small_model(tr, membership)
            if small is None:
                self.stats.unknown += 1
                self._cut()
                self.stats.notes.append(
                    f"{self.region.path_name}:{self.region.line}: solver gave up while building a "
                    f"counterexample in {self.region.function}; no finding reported for that query"
                )
                return "unknown", None, None
            model, raw = small
            return "sat", model, (tr, raw)
        finally:
            self.solver.pop()

    def _cut(self) -> None:
        """Record that a query of the region went over `z3-rlimit` (once per region)."""
        region = self.region
        cut = BudgetCut(region.path_name, region.line, region.function, Budget.Z3_QUERY, self.rlimit)
        if cut not in self.stats.cuts:
            self.stats.cuts.append(cut)

    def never(self, facts_of: Any) -> bool:
        """The facts (over one rank, side "a") cannot hold together; an "unknown" counts as "may"."""
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

    def _small_model(
        self, tr: Z3Translator, membership: GroupVal | None = None
    ) -> tuple[RankWitness, Any] | None:
        """Prefer the smallest world and rank 0: the counterexample a person believes at once. Among
        the members of a group of unknown membership, prefer global ranks equal to local ranks (the
        global ranks are then free, and a message that names local ranks reads the same numbers)."""
        z3 = self.z3
        world, ra, rb = tr.world, tr.rank("a"), tr.rank("b")
        preferences = [[world <= bound, z3.Or(ra == 0, rb == 0)] for bound in (2, 3, 4, 8)]
        if membership is not None and membership.members is None:
            local = local_rank(membership.key)
            same = [ra == tr.as_int(local, "a"), rb == tr.as_int(local, "b")]
            preferences.insert(0, [world <= 2, *same])
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

    def _model(self, model: Any, tr: Z3Translator) -> RankWitness:
        world = _number(model, tr.world)
        return RankWitness(world, _number(model, tr.rank("a")), _number(model, tr.rank("b")))


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


def event_terms(event: Element) -> list[Expr]:
    """The terms of an element that must agree across ranks (trip count, root, op, peer, ...)."""
    if isinstance(event, LoopEvent):
        return [event.trip]
    assert isinstance(event, CommEvent)
    terms = (event.root, event.reduce_op, event.peer, event.ranks_arg, event.group_term)
    return [t for t in terms if t is not None]


# The value of a collective call, or what it leaves in its output argument (collectives.py):
# named after the call's position, `uniform:<target>@line:column`, `result:<op>@line:column`.
_PRODUCED = re.compile(r"(?:uniform|result):[^@]*@(\d+):(\d+)")


def _produced_by(found: frozenset[Atom], spots: set[tuple[int, int]]) -> bool:
    return bool(produced_at(found) & spots)


def produced_at(found: Iterable[Atom]) -> set[tuple[int, int]]:
    """The (line, column) of the collective calls whose results the atoms read."""
    spots = (match for atom in found for match in _PRODUCED.finditer(atom.name))
    return {(int(match.group(1)), int(match.group(2))) for match in spots}


def _ranked(found: frozenset[Atom]) -> bool:
    """Some atom varies by process or is a rank value collcheck can follow."""
    return any(
        atom.kind == "nondet" or (atom.kind in PER_RANK_KINDS and is_interpreted(atom)) for atom in found
    )
