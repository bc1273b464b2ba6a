"""The cheaper analysis of a function that went over the work budget (`max_steps`, `max_paths`).

In: the states the interpreter carries after a statement (`join_paths`; `join_raised`, which the
full analysis uses too), or a statement and the names the resolver says communicate (`inert`).
Out: fewer states, or whether a statement may be stepped over without counting it against the
budget.

Why: the full analysis follows every path separately, so a long trainer method with many
independent `if`s multiplies its paths, and every statement (helpers included) counts against
the budget; a function over it used to be skipped whole, and a hang in it went unseen. The
engine now runs such a function a second time in the *reduced* mode, which differs in two ways:

* **path joining**: after each statement, the live paths (not ended by a return, a raise or an
  exit) that issued the same sequence so far and took the same rank-dependent decisions become
  one path: its condition is theirs, with the data decisions they differ in (alike on every rank)
  replaced by their disjunction, and its variables are `v1 if d1 else v2 ...`. This is exact, not
  an approximation: the ranks that take the joined path are those that took one of its parts,
  with the values they had there. Paths that part on the rank are never joined: the checks that
  read a path's conditions one by one (why two ranks part, which rule owns a divergence, the
  protocols of groups of unknown membership) see those conditions as the full analysis does.
* **inert statements are cheap**: a simple statement (an assignment, an expression, `pass`,
  `assert`, `del`) that calls nothing that may communicate or exit is still evaluated (the values
  a later test reads stay exact) but costs `1 / INERT_PER_STEP` of a step, so a long method made
  of bookkeeping fits; control flow and calls into communicating code cost a full step, as before.

The full analysis's second try (over_budget.py, `Mode.JOINED`), run before the reduced mode, uses
the first of these only (`join_after`, once a block holds many paths), with full step costs.

Both keep the findings of the full analysis for the functions that fit in it (the engine runs the
reduced mode only after the full one gave up). The budget stays a budget: the reduced mode has the
same `max_steps` and `max_paths` as the full one, and a function over them there too is skipped.
"""

from __future__ import annotations

import ast

from collcheck.static.program import ExitKind
from collcheck.static.state import State, common_prefix
from collcheck.static.symbolic import TRUE, BoolOp, Expr, IfExp, conjoin, is_rank_dependent, negate, opaque

INERT_PER_STEP = 16  # inert statements executed per step of the budget, in the reduced mode

# Statements without control flow of their own; inert when no call in them needs running.
SIMPLE_STATEMENTS = (
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.Expr,
    ast.Pass,
    ast.Assert,
    ast.Delete,
)


def is_simple(stmt: ast.stmt) -> bool:
    """A statement with no control flow and no definition (`def`, `class`, `import`) of its own."""
    return isinstance(stmt, SIMPLE_STATEMENTS)


class RankedConditions:
    """Whether each path condition depends on the rank, judged once per condition for one run
    (conditions are shared between paths; the condition is kept so that its id stays its own)."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Expr, bool]] = {}

    def __call__(self, cond: Expr) -> bool:
        hit = self._seen.get(id(cond))
        if hit is None:
            hit = self._seen[id(cond)] = (cond, is_rank_dependent(cond))
        return hit[1]


def join_paths(states: list[State], ranked: RankedConditions) -> list[State]:
    """The live states that issued the same elements so far and took the same rank-dependent
    decisions, joined into one each (in the order of their first member); ended states are kept
    as they are, in place."""
    groups: dict[tuple[object, ...], list[State]] = {}
    order: list[State | tuple[object, ...]] = []
    live = 0
    for state in states:
        if state.exit is not None:
            order.append(state)
            continue
        live += 1
        key = (state.events, tuple(c for c in state.conds if ranked(c)))
        group = groups.get(key)
        if group is None:
            groups[key] = [state]
            order.append(key)
        else:
            group.append(state)
    if len(groups) == live:
        return states  # nothing to join
    return [item if isinstance(item, State) else join(groups[item], ranked) for item in order]


# The full analysis joins paths (those ended by one raise; in its second try, live ones too) once a
# block holds more than this share of `max_paths`: a small function keeps its paths one by one, and
# pays nothing for the grouping.
JOIN_SHARE = 8


def ended_by_raise(state: State) -> bool:
    return state.exit is not None and state.exit.kind is ExitKind.RAISE


def join_after(
    states: list[State], produced: list[State], ranked: RankedConditions, max_paths: int, joining: bool
) -> list[State]:
    """`states` after a statement that `produced` some of them: with `joining` (the reduced mode,
    or the full analysis's second try), the live ones joined when the statement forked them (in the
    full analysis only once they are more than a `JOIN_SHARE` of `max_paths`); then, once they are
    that many, those ended by one raise (`join_raised`) when the statement ended one."""
    share = max_paths // JOIN_SHARE
    if joining and len(produced) > 1 and len(states) > share:
        states = join_paths(states, ranked)
    if len(states) > share and any(map(ended_by_raise, produced)):
        return join_raised(states, ranked)
    return states


def join_raised(states: list[State], ranked: RankedConditions) -> list[State]:
    """The states ended by the same `raise` (the same exit, with the same data tests) after the same
    elements and the same rank-dependent decisions, joined into one each, in place of the first;
    the other states are kept as they are. Used by the full analysis too: a `raise` guarded by a
    setting (`if cfg is None: raise ValueError(...)`) ends one path for every live path that reaches
    it, and a method of many such guards between the branches that matter multiplied its ended
    paths past `max_paths`, while the ranks that raise there are simply those of any of them
    (the join is exact, as `join` is: the conditions that part the ranks are kept one by one)."""
    groups: dict[tuple[object, ...], list[State]] = {}
    for state in states:
        if state.exit is not None and ended_by_raise(state):
            key = (state.exit, state.events, tuple(c for c in state.conds if ranked(c)))
            groups.setdefault(key, []).append(state)
    if all(len(group) == 1 for group in groups.values()):
        return states
    first = {id(group[0]): group for group in groups.values()}
    joined = []
    for state in states:
        group = first.get(id(state))
        if group is not None:
            merged = join(group, ranked)
            merged.exit = state.exit
            joined.append(merged)
        elif not ended_by_raise(state):
            joined.append(state)
    return joined


def join(states: list[State], ranked: RankedConditions) -> State:
    """One state taken by the ranks that take any of `states` (live, with the same events and the
    same rank-dependent conditions): the conditions they share, then the rank-dependent ones, then
    the disjunction of the rest (data decisions alike on every rank)."""
    if len(states) == 1:
        return states[0]
    prefix = common_prefix([state.conds for state in states])
    rests = [state.conds[len(prefix) :] for state in states]
    decided = tuple(c for c in rests[0] if ranked(c))
    guards = [conjoin(tuple(c for c in rest if not ranked(c))) for rest in rests]
    conds = (*prefix, *decided)
    if not _exhaustive(guards):
        conds = (*conds, BoolOp("or", tuple(guards)))
    env: dict[str, Expr] = {}
    for key in dict.fromkeys(name for state in states for name in state.env):
        values = [state.env.get(key) for state in states]
        first = values[0]
        if first is not None and all(value == first for value in values):
            env[key] = first
            continue
        env[key] = _select(key, guards, values)
    return State(env, conds, states[0].events)


def _exhaustive(guards: list[Expr]) -> bool:
    """The disjunction of `guards` is plainly true: one of them is, or they are `d` and `not d`
    (the two arms of one test)."""
    if any(guard == TRUE for guard in guards):
        return True
    return any(negate(guard) in guards for guard in guards)


def _select(key: str, guards: list[Expr], values: list[Expr | None]) -> Expr:
    """`v1 if g1 else v2 if g2 else ... vn`; a name bound on some paths only is unknown elsewhere."""
    present = next(value for value in values if value is not None)
    chosen = [value if value is not None else opaque(f"maybe:{key}", (present,)) for value in values]
    result = chosen[-1]
    for guard, value in zip(reversed(guards[:-1]), reversed(chosen[:-1]), strict=True):
        result = value if value == result else IfExp(guard, value, result)
    return result
