"""The state the background-session walker (`async_sessions`) carries along a function, and how
two paths' states join.

In: the states two or more paths reach one program point with. Out: one `PathState` that holds
what either may hold: the sessions open on some path (each with the branch conditions every path
that left it open had passed), the `Value` of each variable and attribute, the conditions all the
paths passed. A place two paths fill differently holds, after the join, a group of its own
(`place#joinN`): two reads of it see the same object, whatever it is.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from collcheck.static.session_values import GroupKey, GroupKind, Value


@dataclass(frozen=True)
class Fact:
    """A branch condition a path passed: `place` (a variable or attribute) compared by `test`
    (`""`: its truth; `"== X"`: equal to `X`) came out `holds`."""

    place: str
    test: str
    holds: bool


class PathState:
    def __init__(self, open_: frozenset[int] = frozenset(), slots: dict[str, Value] | None = None) -> None:
        self.open = open_
        self.slots = dict(slots or {})
        self.dead = False
        self.assumed: frozenset[Fact] = frozenset()  # the conditions every path here passed
        self.started_under: dict[int, frozenset[Fact]] = {}  # an open session: what its start assumed

    def copy(self) -> PathState:
        copied = PathState(self.open, self.slots)
        copied.assumed, copied.started_under = self.assumed, dict(self.started_under)
        return copied

    def assume(self, place: str, test: str, holds: bool) -> None:
        """This path passed `test` on `place`: a session started only where it failed is not open."""
        self.open = frozenset(
            n for n in self.open if Fact(place, test, not holds) not in self.started_under.get(n, ())
        )
        self.assumed = self.assumed | {Fact(place, test, holds)}

    def forget(self, place: str) -> None:
        """`place` was stored: what was assumed about it (or what it holds) no longer holds."""

        def kept(fact: Fact) -> bool:
            return fact.place != place and not fact.place.startswith(f"{place}.")

        self.assumed = frozenset(f for f in self.assumed if kept(f))
        self.started_under = {n: frozenset(f for f in c if kept(f)) for n, c in self.started_under.items()}


def join_states(states: list[PathState]) -> PathState:
    live = [s for s in states if not s.dead]
    if not live:
        dead = PathState()
        dead.dead = True
        return dead
    joined = live[0].copy()
    for other in live[1:]:
        for number in other.open:  # open on both paths: started under what both assumed
            kept = joined.started_under.get(number) if number in joined.open else None
            also = other.started_under.get(number, frozenset())
            joined.started_under[number] = also if kept is None else kept & also
        joined.assumed = joined.assumed & other.assumed
        joined.open = joined.open | other.open
        for place in set(joined.slots) | set(other.slots):
            mine, theirs = joined.slots.get(place), other.slots.get(place)
            if mine != theirs:
                joined.slots[place] = join_values(mine, theirs, place)
    return joined


_JOINS = itertools.count()  # names the values two paths leave in one place (identity only)


def join_values(a: Value | None, b: Value | None, place: str) -> Value:
    sessions = (a.sessions if a else frozenset()) | (b.sessions if b else frozenset())
    obj = a.obj if a is not None and b is not None and a.obj == b.obj else None
    if a is not None and b is not None and a.group == b.group:
        group = a.group
    else:  # whatever the place holds after the join, two reads of it see the same object
        group = GroupKey(GroupKind.PLACE, f"{place}#join{next(_JOINS)}")
    present = a is not None and b is not None and a.present and b.present
    return Value(group=group, sessions=sessions, obj=obj, present=present)
