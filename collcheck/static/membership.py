"""Membership predicates: a condition that holds on exactly the members of the group it guards.

In: a path condition (a `symbolic.Expr`) and the key of the group whose channel is compared (a
group of unknown membership). Out: whether the condition is that group's *membership predicate*,
as a verdict on symbolic values that the solver side (`smt.RegionSolver`) checks with z3, once per
condition and group.

Why: code guards a collective on a group with the test "am I one of its members", often written
as a helper that also checks where the group's listed members sit (Megatron's embedding group:
its first member must be on the first pipeline stage, its last on the last one). The ranks that
reach the collective are then exactly the group's members, and two members never part on that
condition. collcheck compares a group's collectives between two of its members, so it may take
such a condition to hold on both - but only a condition that says nothing else about the rank.

A condition `c` is a membership predicate of group `G` when

1. it reads the rank only through `G` itself: `rank in get_process_group_ranks(G)` (or a
   membership test against a collection collcheck cannot see, which is taken to be the group's
   own test, groups.py), and *positional* tests that pick out one listed member
   (`rank == ranks[i]`, `get_rank(G) == i`);
2. under a positional test, anything else it says about the rank is a *layout check* of that
   member (`is_first_stage()` for the first member): the code's statement of where the group's
   listed members sit, granted (true);
3. with the layout checks granted, one setting of the rank-independent values makes `c` true on
   every member: on each listed member the code tests, and on any other member; and `c` is false
   on every rank outside `G` (whatever those values).

A further rank condition (`rank == 0`, `rank % 2 == 0`, another group's stage) outside a
positional test, a predicate true on the listed members alone (`rank == ranks[0] or
rank == ranks[-1]`: the middle members are left out) and a test of another group's ranks are not
membership predicates of `G`: they still split its members.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from collcheck.static.groups import GLOBAL_OF_PREFIX, LOCAL_RANK_PREFIX, own_membership
from collcheck.static.symbolic import (
    FALSE,
    PER_RANK_KINDS,
    TRUE,
    Atom,
    BoolOp,
    Compare,
    Const,
    Expr,
    IfExp,
    Not,
    atoms,
    children,
)

# A listed member, as the code names it: ("listed", i) for `ranks[i]`, ("local", i) for local rank i.
Position = tuple[str, int]
MAX_NODES = 20_000  # nodes walked to specialise one condition for all its roles
# The member a condition is specialised for: a position, OTHER_MEMBER, or OUTSIDE (not a member).
OTHER_MEMBER: Position = ("other", 0)
OUTSIDE: Position = ("outside", 0)


class NotAPredicate(Exception):
    """The condition reads the rank in a way that ties it to no group position."""


@dataclass(frozen=True)
class Roles:
    """A candidate condition specialised for each kind of rank: `members` holds one
    rank-independent condition per kind of member (each listed position the code tests, and any
    other member), `outside` the condition on a rank outside the group."""

    members: tuple[Expr, ...]
    outside: Expr


def position_of(expr: Expr, key: str) -> Position | None:
    """The listed member that `expr` tests the rank for, if it is such a test: `rank == ranks[i]`
    (`global_of:<key>[i]`) or `get_rank(<key>) == i` (`!=` is its negation: see `_specialise`)."""
    if not isinstance(expr, Compare) or expr.op not in ("==", "!="):
        return None
    for one, other in ((expr.left, expr.right), (expr.right, expr.left)):
        if not isinstance(one, Atom):
            continue
        listed = f"{GLOBAL_OF_PREFIX}{key}["
        if one.kind == "rank" and isinstance(other, Atom) and other.name.startswith(listed):
            index = other.name[len(listed) : -1]
            if index.lstrip("-").isdigit():
                return ("listed", int(index))
        if one.name == LOCAL_RANK_PREFIX + key and isinstance(other, Const) and type(other.value) is int:
            return ("local", other.value)
    return None


def candidate_parts(cond: Expr) -> list[Expr]:
    """The parts of a path condition that may be membership predicates: the condition, or its
    negation's operand, split at a top-level `and`."""
    inner = cond.operand if isinstance(cond, Not) else cond
    parts = list(inner.values) if isinstance(inner, BoolOp) and inner.op == "and" else [inner]
    return [part for part in parts if not isinstance(part, Atom)]  # a lone membership atom is asserted


def mentions_group(expr: Expr, key: str) -> bool:
    """Cheap filter: the value contains a membership test or a positional test of `key`."""
    listed = f"{GLOBAL_OF_PREFIX}{key}["
    return any(own_membership(atom, key) or atom.name.startswith(listed) for atom in atoms(expr))


def roles(expr: Expr, key: str) -> Roles | None:
    """`expr` specialised for each kind of rank (see the module docstring); None when it is not
    a membership predicate of `key` by its form (rule 1)."""
    try:
        positions = sorted(_positions(expr, key))
        budget = [MAX_NODES]
        members = tuple(_specialise(expr, key, role, False, budget) for role in [*positions, OTHER_MEMBER])
        return Roles(members, _specialise(expr, key, OUTSIDE, False, budget))
    except NotAPredicate:
        return None


def _positions(expr: Expr, key: str) -> set[Position]:
    found: set[Position] = set()
    stack, seen = [expr], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue  # merged branches share subtrees: visit each once
        seen.add(id(node))
        position = position_of(node, key)
        if position is not None:
            found.add(position)
        else:
            stack.extend(children(node))
    return found


def _picks_member(test: Expr, key: str) -> bool:
    """A test that holds on one listed member only: a positional `==` test, or an `and` holding one."""
    return isinstance(test, Compare) and test.op == "==" and position_of(test, key) is not None


def _picks_in_and(test: Expr, key: str) -> bool:
    values = test.values if isinstance(test, BoolOp) and test.op == "and" else (test,)
    return any(_picks_member(value, key) for value in values)


def _ties_to_group(expr: Expr, key: str) -> bool:
    """The value tests the rank through the group itself (membership or position)."""
    if position_of(expr, key) is not None:
        return True
    if isinstance(expr, Atom):
        return own_membership(expr, key)
    return any(_ties_to_group(child, key) for child in children(expr))


def _specialise(expr: Expr, key: str, role: Position, layout: bool, budget: list[int]) -> Expr:
    """`expr` on a rank of the given role: membership and positional tests become constants, a
    layout check (`layout`: under a positional test) is granted; any other per-rank value raises,
    as does a value too large to walk (`budget`: nodes left, shared by the roles)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise NotAPredicate(expr)
    position = position_of(expr, key)
    if position is not None:
        assert isinstance(expr, Compare)
        return TRUE if (position == role) == (expr.op == "==") else FALSE
    if isinstance(expr, Atom) and own_membership(expr, key):
        return FALSE if role == OUTSIDE else TRUE
    kinds = {atom.kind for atom in atoms(expr)}
    if "nondet" in kinds:
        raise NotAPredicate(expr)
    if not kinds & PER_RANK_KINDS:
        return expr
    if layout and not _ties_to_group(expr, key):
        return TRUE  # where the listed member sits: the code's own statement of the layout
    if isinstance(expr, IfExp):
        test = _specialise(expr.test, key, role, layout, budget)
        then = _specialise(expr.then, key, role, layout or _picks_in_and(expr.test, key), budget)
        return IfExp(test, then, _specialise(expr.orelse, key, role, layout, budget))
    if isinstance(expr, BoolOp) and expr.op == "and":
        picked = layout or _picks_in_and(expr, key)
        return BoolOp("and", tuple(_specialise(value, key, role, picked, budget) for value in expr.values))
    if isinstance(expr, BoolOp):
        return BoolOp(expr.op, tuple(_specialise(value, key, role, layout, budget) for value in expr.values))
    if isinstance(expr, Not):
        return Not(_specialise(expr.operand, key, role, layout, budget))
    raise NotAPredicate(expr)  # the rank read in some other way: a further rank condition


def is_membership_predicate(expr: Expr, key: str, tr: Any, sat: Callable[[list[Any]], bool | None]) -> bool:
    """Rules 1-3 of the module docstring. `tr` is a `Z3Translator`, `sat(facts)` the solver's
    verdict on facts over rank-independent values (True, False, or None when it gave up)."""
    found = roles(expr, key)
    if found is None:
        return False
    if sat([tr.as_bool(member, "a") for member in found.members]) is not True:
        return False  # no setting makes it hold on every member: it splits them
    return sat([tr.as_bool(found.outside, "a")]) is False
