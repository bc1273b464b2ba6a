"""Tensor shapes, apart from tensor contents.

In: a call of a tensor factory (`torch.randn(5 + 4 * rank)`, `torch.zeros(n, 3)`) with its
argument values, or a read of a shape (`x.numel()`, `x.size(0)`, `x.shape`) of such a value.
Out: the tensor as a `Sized` whose `dims` are the factory's shape arguments and whose `content` is
what its entries are (random numbers for `torch.randn`, an unknown value shared by every rank for
`torch.zeros`); a shape read is computed from the dims only. So a tensor whose shape depends on the
rank is blamed on the rank, and one of random entries and a fixed shape has a fixed length.
"""

from __future__ import annotations

import ast

from collcheck.static.symbolic import Atom, BinOp, Const, Expr, Sized, TupleVal

# Factories whose positional arguments (or one tuple/list argument, or `size=`) are the shape.
SHAPED_FACTORIES = frozenset(
    {"torch.randn", "torch.rand", "torch.zeros", "torch.ones", "torch.empty", "torch.Tensor"}
)


def factory_tensor(
    name: str, node: ast.Call, args: list[Expr], keywords: dict[str, Expr], entries: Atom, where: str
) -> Sized | None:
    """The tensor `name(*args)` builds, or None when its shape is not spelled by its arguments.
    `entries`: what its entries are (a random value, or an unknown shared one)."""
    if name not in SHAPED_FACTORIES or any(isinstance(a, ast.Starred) for a in node.args):
        return None
    dims: tuple[Expr, ...]
    if "size" in keywords and not args:
        sized = keywords["size"]
        dims = sized.items if isinstance(sized, TupleVal) else ()
    elif len(args) == 1 and isinstance(args[0], TupleVal):
        dims = args[0].items
    else:
        dims = tuple(args)
    if not dims or any(isinstance(d, Const) and not isinstance(d.value, int) for d in dims):
        return None
    return Sized(f"tensor:{name}@{where}", dims[0], entries, dims)


def shape_read(method: str, receiver: Expr, args: list[Expr]) -> Expr | None:
    """`x.numel()`, `x.nelement()`, `x.size()`, `x.size(i)`, `x.dim()` of a tensor of known dims."""
    if not isinstance(receiver, Sized) or not receiver.dims:
        return None
    dims = receiver.dims
    if method in ("numel", "nelement") and not args:
        total = dims[0]
        for dim in dims[1:]:
            total = BinOp("*", total, dim)
        return total
    if method == "size" and not args:
        return TupleVal(dims)
    if method == "size" and len(args) == 1 and isinstance(args[0], Const) and isinstance(args[0].value, int):
        index = args[0].value
        return dims[index] if -len(dims) <= index < len(dims) else None
    if method in ("dim", "ndimension") and not args:
        return Const(len(dims))
    return None


def shape_attribute(attribute: str, base: Expr) -> Expr | None:
    """`x.shape` (and `x.ndim`) of a tensor of known dims."""
    if not isinstance(base, Sized) or not base.dims:
        return None
    if attribute == "shape":
        return TupleVal(base.dims)
    if attribute == "ndim":
        return Const(len(base.dims))
    return None
