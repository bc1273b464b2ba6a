"""Which rank-dependent exits and roots are worth a query: the judgement calls, in one place.

In: the two paths of a query (their conditions), a pair of root terms and the group compared on.
Out: whether a `raise` path takes part in the comparison at all, and whether a root difference
is left unreported. Each rule keeps collcheck quiet on a shape that real code uses correctly and
says which shape, so that a reader can check it against the code in front of them.
"""

from __future__ import annotations

from collcheck.static.groups import LOCAL_RANK_PREFIX, atoms_of, opaque_rank_atoms
from collcheck.static.program import Path
from collcheck.static.symbolic import (
    RANK,
    Atom,
    BoolOp,
    Compare,
    Const,
    Expr,
    GroupVal,
    Member,
    Not,
    fold,
    is_rank_dependent,
)


def raises_on_named_ranks(path: Path) -> bool:
    """The raise's own guard (the path's last condition) compares a rank with literal ranks
    (`if rank == 1: raise`); a raise guarded by a data check (`if not os.path.exists(p): raise`)
    inside a rank-0 block is an error report, not a choice of ranks, and a consistency check
    between two values (`if rank != group.rank(): raise`) says "cannot happen". Neither is the
    `else: raise` of a dispatch on rank constants that names every rank from 0 up
    (`unknown_rank_raise`)."""
    return bool(path.conds) and _names_ranks(path.conds[-1]) and not unknown_rank_raise(path)


def unknown_rank_raise(path: Path) -> bool:
    """`if rank == MASTER: ... elif rank == WORKER: ... elif rank in TRAINERS: ... else: raise`:
    every condition of the path excludes literal ranks, and together they exclude each rank from
    0 to the highest one named (at least 0 and 1). Only a rank above every role takes it: the
    code's statement of the world size it runs with ("unknown rank"), not a rank that fails in a
    job of that size. With a gap (ranks 0, 1, 3 named) rank 2 raises in a world of 4: compared."""
    excluded: set[int] = set()
    for cond in path.conds:
        named = _excluded_ranks(cond)
        if named is None:
            return False
        excluded |= named
    return len(excluded) >= 2 and excluded == set(range(max(excluded) + 1))


def _excluded_ranks(cond: Expr) -> set[int] | None:
    """The literal ranks that `cond` excludes when it says only "the rank is none of these"."""
    if isinstance(cond, Compare) and cond.op == "!=":
        return _named_ranks(Compare("==", cond.left, cond.right))
    return _named_ranks(cond.operand) if isinstance(cond, Not) else None


def _named_ranks(test: Expr) -> set[int] | None:
    """The literal ranks of `rank == k` or `rank in (k1, k2, ...)`; None for any other test."""
    if isinstance(test, Compare) and test.op == "==":
        for one, other in ((test.left, test.right), (test.right, test.left)):
            rank = _literal_rank(fold(other))
            if one == RANK and rank is not None:
                return {rank}
        return None
    if isinstance(test, Member) and test.item == RANK and test.options:
        ranks = {_literal_rank(fold(option)) for option in test.options}
        return None if None in ranks else {rank for rank in ranks if rank is not None}
    return None


def _literal_rank(term: Expr) -> int | None:
    if isinstance(term, Const) and type(term.value) is int and term.value >= 0:
        return term.value
    return None


def _names_ranks(cond: Expr) -> bool:
    if isinstance(cond, Not):
        return _names_ranks(cond.operand)
    if isinstance(cond, BoolOp):  # `a or (b and rank == 0)` can raise on every rank through `a`
        parts = [_names_ranks(value) for value in cond.values]
        return any(parts) if cond.op == "and" else all(parts)
    if isinstance(cond, Compare) and cond.op in ("==", "!="):
        sides = (cond.left, cond.right)
        # a literal that can be a rank: `rank != -1` compares with a sentinel no rank has
        return any(_possible_rank(side) for side in sides) and any(is_rank_dependent(side) for side in sides)
    if isinstance(cond, Member):
        return all(isinstance(option, Const) for option in cond.options) and is_rank_dependent(cond.item)
    return False


def _possible_rank(term: Expr) -> bool:
    return isinstance(term, Const) and type(term.value) is int and term.value >= 0


def unreported_root(x: Expr, y: Expr, a: Path, b: Path, membership: GroupVal | None) -> bool:
    """A root difference that is the code's intent rather than a bug:

    * `if self.is_last_stage(): broadcast(t, src=self.global_rank)`: the rank that takes the
      branch names itself the root. Two ranks disagree only if both take it, and when the guard
      is a value collcheck cannot follow (a stage id, a helper's answer), the intent is that one
      rank does. Unguarded, every rank names itself, and that is reported.
    * `broadcast(t, src=get_tensor_model_parallel_src_rank(), group=tp)`: a root computed from the
      rank (the group's first member) is the same for every member of a group laid out as the
      formula assumes; on a group of unknown members collcheck reports only every member naming
      itself, or two different literal roots.
    """
    if x == y and _own_rank(x) and _behind_unknown_guard(a.conds) and _behind_unknown_guard(b.conds):
        return True
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
