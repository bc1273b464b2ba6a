"""Names that hold a whole sequence of entries, read from a function's syntax.

In: a function. Out (`whole_sequences`): the names of its parameters annotated as a sequence
(`flags: List[int]`, an `Optional` of one) or read as one (`len(p)`, `for x in p`, `p[i]`), and
of the names it binds to a list comprehension. local_data.py asks this of the host values a
tensor is built from: a collective of tensors takes the same shape from every rank, so a whole
sequence made into such a tensor is as long on every rank (only its entries differ).
"""

from __future__ import annotations

import ast

from collcheck.static.loader import FunctionNode
from collcheck.static.names import nodes_under

SEQUENCE_TYPES = frozenset({"list", "List", "tuple", "Tuple", "Sequence", "MutableSequence", "Iterable"})


def whole_sequences(function: FunctionNode) -> frozenset[str]:
    """See the module."""
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    parameters = {a.arg: a.annotation for a in every}
    found = {name for name, annotation in parameters.items() if sequence_annotation(annotation)}
    for node in nodes_under(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.ListComp):
            found.update(target.id for target in node.targets if isinstance(target, ast.Name))
            continue
        read = _read_as_sequence(node)
        if isinstance(read, ast.Name) and read.id in parameters:
            found.add(read.id)
    return frozenset(found)


def _read_as_sequence(node: ast.AST) -> ast.expr | None:
    """What `node` reads as a sequence: the argument of `len(...)`, what a loop or a
    comprehension iterates over, what a subscript reads an entry of."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len":
        return node.args[0] if node.args else None
    if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        return node.iter
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return node.value
    return None


def sequence_annotation(annotation: ast.expr | None) -> bool:
    """`List[int]`, `list[int]`, `Sequence[int]`, `Optional[List[int]]`, `list`."""
    while isinstance(annotation, ast.Subscript):
        name = _type_name(annotation.value)
        if name != "Optional":
            return name in SEQUENCE_TYPES
        annotation = annotation.slice
    return annotation is not None and _type_name(annotation) in SEQUENCE_TYPES


def _type_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""
