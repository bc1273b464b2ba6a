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
    is_rank_dependent,
)


def raises_on_named_ranks(path: Path) -> bool:
    """The raise's own guard (the path's last condition) compares a rank with literal ranks
    (`if rank == 1: raise`); a raise guarded by a data check (`if not os.path.exists(p): raise`)
    inside a rank-0 block is an error report, not a choice of ranks, and a consistency check
    between two values (`if rank != group.rank(): raise`) says "cannot happen"."""
    return bool(path.conds) and _names_ranks(path.conds[-1])


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
