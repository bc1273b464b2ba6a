"""Catalog value expressions to symbolic values; the tables of operators, builtins and methods
the value evaluator reads.

In: the text of a catalog value (`rank`, `local_rank == 0`, `group_rank[tp]`, `world`) and where it
is used. Out: a `symbolic.Expr` over the rank, the world size and the catalog's groups; text that
does not parse is one per-rank unknown. Also the operator tables the value evaluator shares.
"""

from __future__ import annotations

import ast

from collcheck.static import groups
from collcheck.static.symbolic import LOCAL_WORLD, RANK, WORLD, Atom, BinOp, BoolOp, Compare, Const, Expr, Not


def value_from_spec(spec: str, where: str) -> Expr:
    """Turn a catalog value (`rank`, `local_rank == 0`, `world`) into a symbolic value."""
    names: dict[str, Expr] = {
        "rank": RANK,
        "world": WORLD,
        "local_world": LOCAL_WORLD,
        "local_rank": BinOp("%", RANK, LOCAL_WORLD),
        "node_rank": BinOp("//", RANK, LOCAL_WORLD),
        "group_rank": Atom(f"group_rank@{where}", "perrank", lower=0, below_world=True),
        "group_world": Atom(f"group_world@{where}", "shared", lower=1),
    }
    try:
        tree = ast.parse(spec, mode="eval").body
    except SyntaxError:
        return Atom(f"{spec}@{where}", "perrank")
    return _spec_expr(tree, names, where)


def _spec_expr(node: ast.expr, names: dict[str, Expr], where: str) -> Expr:
    if isinstance(node, ast.Name):
        return names.get(node.id, Atom(node.id, "shared"))
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("group_rank", "group_world")
        and isinstance(node.slice, ast.Name)
    ):  # `group_rank[tp]`: the rank inside the catalog group `tp`, tied to collectives on `tp`
        size = node.value.id == "group_world"
        return groups.group_size(node.slice.id) if size else groups.local_rank(node.slice.id)
    listed = _listed_member(node)
    if listed is not None:  # `group_ranks[pp][-1]`: the global rank of the group's last member
        return groups.global_rank_of(*listed)
    if isinstance(node, ast.BoolOp):
        parts = tuple(_spec_expr(value, names, where) for value in node.values)
        return BoolOp("and" if isinstance(node.op, ast.And) else "or", parts)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, str, bool)):
        return Const(node.value)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        op = COMPARE_OPS.get(type(node.ops[0]))
        if op is not None:
            return Compare(
                op, _spec_expr(node.left, names, where), _spec_expr(node.comparators[0], names, where)
            )
    if isinstance(node, ast.BinOp) and type(node.op) in BIN_OPS:
        return BinOp(
            BIN_OPS[type(node.op)], _spec_expr(node.left, names, where), _spec_expr(node.right, names, where)
        )
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return Not(_spec_expr(node.operand, names, where))
    return Atom(f"spec@{where}", "perrank")


def _listed_member(node: ast.expr) -> tuple[str, int] | None:
    """`group_ranks[g][i]` (i a literal, negative from the end): the group and the index."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Subscript)):
        return None
    inner, index = node.value, node.slice
    sign = 1
    if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
        index, sign = index.operand, -1
    named = isinstance(inner.value, ast.Name) and inner.value.id == "group_ranks"
    if not (named and isinstance(inner.slice, ast.Name) and isinstance(index, ast.Constant)):
        return None
    value = index.value
    return (inner.slice.id, sign * value) if type(value) is int else None


COMPARE_OPS: dict[type, str] = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Is: "==",
    ast.IsNot: "!=",
}


BIN_OPS: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}


# `math.ceil(a / b)` and `math.floor(a / b)`: integer division, rounded up or down; of anything
# else, the value itself (the solver's values are integers).
ROUNDING = {"math.ceil": "ceildiv", "math.floor": "//", "math.trunc": "//"}


# Functions of `math` that compute a value from their arguments: it varies exactly when they do.
MATH_FUNCTIONS = frozenset(
    {
        "math.sqrt", "math.isqrt", "math.log", "math.log2", "math.log10", "math.exp", "math.pow",
        "math.prod", "math.gcd", "math.lcm", "math.comb", "math.perm", "math.fsum", "math.fabs",
    }
)  # fmt: skip


PASS_THROUGH = frozenset({"int", "float", "bool", "round", "abs"})


# Builtins that compute a value from their arguments: the result varies exactly when they do.
VALUE_BUILTINS = frozenset(
    {
        "list",
        "tuple",
        "set",
        "frozenset",
        "sorted",
        "reversed",
        "range",
        "enumerate",
        "zip",
        "sum",
        "str",
        "repr",
        "format",
        "dict",
        "map",
        "filter",
        "divmod",
        "pow",
        "hash",
        "any",
        "all",
    }
)


# Methods whose result carries the receiver's per-rank nature (reading a value out of it).
VALUE_METHODS = frozenset(
    {
        "item",
        "tolist",
        "numpy",
        "read",
        "readline",
        "readlines",
        "read_text",
        "read_bytes",
        "strip",
        "lower",
        "upper",
        "split",
        "get",
        "keys",
        "values",
        "items",
        "copy",
        "clone",
        "detach",
        "cpu",
        "cuda",
        "float",
        "int",
        "long",
        "bool",
        "sum",
        "mean",
        "all",
        "any",
        "numel",
        "startswith",
        "endswith",
        "is_file",
        "exists",
        "is_dir",
    }
)
