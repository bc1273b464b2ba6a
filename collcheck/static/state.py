"""Path states: what the interpreter carries along one path, and how paths are joined.

In: nothing of its own (plain data). Out: `State` (a path's variables, condition, events, exit),
`Frame` (the function being executed and the calls that led to it), `PathLimitExceeded`, and the
joins that keep paths few: `merge_branches`, `merge_envs`, `common_prefix`, `collapse_returns`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from collcheck.findings import Budget
from collcheck.static.loader import FunctionNode
from collcheck.static.program import (
    Element,
    Exit,
    ExitKind,
    Site,
)
from collcheck.static.symbolic import (
    TRUE,
    Const,
    Expr,
    IfExp,
    conjoin,
    is_rank_dependent,
    opaque,
)


class PathLimitExceeded(Exception):
    """Over a work budget (too many paths, or statements): the function is analysed in the reduced
    mode, or skipped (and noted), rather than slowly. `budget` says which."""

    def __init__(self, message: str, budget: Budget = Budget.STEPS) -> None:
        super().__init__(message)
        self.budget = budget


@dataclass
class State:
    env: dict[str, Expr]
    conds: tuple[Expr, ...] = ()
    events: tuple[Element, ...] = ()
    exit: Exit | None = None
    returned: Expr | None = None

    def fork(self, cond: Expr | None = None) -> State:
        conds = self.conds if cond is None or cond == TRUE else (*self.conds, cond)
        return State(dict(self.env), conds, self.events, self.exit, self.returned)


class Enclosing(Enum):
    """The loops around the statements being run, in this function and its callers."""

    NO_LOOP = "no loop"
    EVEN_LOOPS = "loops that run alike on every rank"  # trip counts the same on every rank
    UNEVEN_LOOP = "a loop whose trip count may depend on the rank"

    @property
    def even(self) -> bool:
        return self is Enclosing.EVEN_LOOPS

    def inside(self, trip: Expr | None) -> Enclosing:
        """The loops around the body of a loop of `trip` iterations (None: a `while`) inside these."""
        if self is Enclosing.UNEVEN_LOOP or trip is None or is_rank_dependent(trip):
            return Enclosing.UNEVEN_LOOP
        return Enclosing.EVEN_LOOPS


@dataclass(frozen=True)
class Frame:
    function: str
    class_name: str | None
    chain: tuple[Site, ...]
    depth: int
    stack: tuple[FunctionNode, ...]
    # Inside the body of a loop (of this function or of a caller): a value cached on the first
    # call (`interpret._lazy_initialisation`) is then made in some iteration of every rank's loop.
    loop: Enclosing = Enclosing.NO_LOOP


# The key prefix of a value one joined arm set and the other left as it was (`maybe:self._group`
# after `if self._group is None: self._group = WORLD`).
SET_IN_ONE_ARM = "maybe:"


def merge_envs(states: list[State]) -> dict[str, Expr]:
    merged = dict(states[0].env)
    for state in states[1:]:
        for key, value in state.env.items():
            if merged.get(key) != value:
                merged[key] = opaque(f"merged:{key}", (merged.get(key, Const(None)), value))
    return merged


def merge_branches(
    state: State, test: Expr, then_states: list[State], else_states: list[State]
) -> list[State] | None:
    """Join two arms that did not communicate or exit: variables become `a if test else b`."""
    if len(then_states) != 1 or len(else_states) != 1:
        return None
    then, orelse = then_states[0], else_states[0]
    if then.exit is not None or orelse.exit is not None:
        return None
    if then.events != state.events or orelse.events != state.events:
        return None
    merged = State(dict(state.env), state.conds, state.events)
    for key in set(then.env) | set(orelse.env):
        a, b = then.env.get(key), orelse.env.get(key)
        if a == b and a is not None:
            merged.env[key] = a
        elif a is not None and b is not None:
            merged.env[key] = IfExp(test, a, b)
        else:
            merged.env[key] = opaque(f"{SET_IN_ONE_ARM}{key}", (test, a or b or Const(None)))
    return [merged]


def common_prefix(conds: list[tuple[Expr, ...]]) -> tuple[Expr, ...]:
    """The conditions every one of `conds` starts with (their conjunction is implied by each)."""
    first = conds[0]
    length = len(first)
    for other in conds[1:]:
        length = min(length, len(other))
        for index in range(length):
            if other[index] != first[index]:
                length = index
                break
    return first[:length]


def collapse_returns(caller: State, results: list[tuple[State, Expr]]) -> list[tuple[State, Expr]]:
    """A helper whose paths did not communicate differently is one result: `r1 if c1 else r2`."""
    if len(results) <= 1:
        return results
    if any(state.events != caller.events or state.exit is not None for state, _ in results):
        return results
    # What held on every path out of the helper holds after it (`assert g.size() == world` in a
    # helper that checks its argument: asserted.py); the conditions that told its paths apart go.
    start = len(caller.conds)
    common = [
        cond for cond in results[0][0].conds[start:] if all(cond in s.conds[start:] for s, _ in results[1:])
    ]
    value = results[-1][1]
    for state, returned in reversed(results[:-1]):
        extra = tuple(cond for cond in state.conds[start:] if cond not in common)
        value = IfExp(conjoin(extra), returned, value) if extra else returned
    merged = caller.fork()
    merged.conds = (*merged.conds, *common)
    return [(merged, value)]


def kept_sequences(states: list[State]) -> set[tuple[Element, ...]]:
    """The event sequences of the states that do not end in a `raise` (a crash, not a choice)."""
    return {after.events for after in states if after.exit is None or after.exit.kind is not ExitKind.RAISE}


def attributes_changed(start: State, body: list[State]) -> set[str]:
    """Attributes a loop body changed through the methods it ran (`stopper.update()` storing
    `stopper.should_stop`): read by the loop test, or after the loop, they are not what they were."""
    before = start.env
    changed: set[str] = set()
    for state in body:
        if state.env is before:
            continue
        for key, value in state.env.items():
            if before.get(key) is not value and "." in key and before.get(key) != value:
                changed.add(key)
    return changed
