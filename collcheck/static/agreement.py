"""Agreement tests on gathered values: `all(f == mine for f in gathered)` after
`all_gather_object(gathered, mine)` is the same on every rank.

In: a test expression, the function it is in, and the catalogued op of a call (`SpecOf`). Out:
whether the test is such an agreement test (values.py asks it of every `all(...)` it evaluates).
"""

from __future__ import annotations

import ast

from collcheck.static.local_data import FunctionNode, SpecOf, operand_argument
from collcheck.static.names import nodes_under

GATHERING_OPS = frozenset({"all_gather_object"})  # every rank receives every rank's object, in a list


def agreement_test(node: ast.expr, function: FunctionNode, spec_of: SpecOf) -> bool:
    """`all(f == mine for f in gathered)` after `all_gather_object(gathered, mine)` in `function`,
    alone or in a conjunction whose other tests read only `mine` (`mine is not None and all(...)`):
    the same on every rank. `gathered` holds every rank's `mine`, so either all are equal (and so is
    any test of `mine`) or the `all(...)` is false everywhere. `spec_of`: a call's catalogued op."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        found = [_agreed_value(value, function, spec_of) for value in node.values]
        agreed = {name for name in found if name is not None}
        if len(agreed) != 1:
            return False
        mine = next(iter(agreed))
        return all(
            name is not None or _reads_only(value, mine)
            for value, name in zip(node.values, found, strict=True)
        )
    return _agreed_value(node, function, spec_of) is not None


def _reads_only(node: ast.expr, name: str) -> bool:
    return all(not isinstance(part, ast.Name) or part.id == name for part in ast.walk(node)) and not any(
        isinstance(part, (ast.Call, ast.Attribute, ast.Subscript)) for part in ast.walk(node)
    )


def _agreed_value(node: ast.expr, function: FunctionNode, spec_of: SpecOf) -> str | None:
    """The name `mine` of `all(f == mine for f in gathered)`, gathered from it in `function`."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "all"):
        return None
    if len(node.args) != 1 or not isinstance(node.args[0], ast.GeneratorExp):
        return None
    generator = node.args[0]
    loop = generator.generators[0]
    test = generator.elt
    if len(generator.generators) != 1 or loop.ifs or not isinstance(loop.target, ast.Name):
        return None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return None
    sides = [side.id for side in (test.left, test.comparators[0]) if isinstance(side, ast.Name)]
    if len(sides) != 2 or loop.target.id not in sides or sides[0] == sides[1]:
        return None
    mine = sides[0] if sides[1] == loop.target.id else sides[1]
    for call in nodes_under(function):
        if not isinstance(call, ast.Call) or call.lineno > node.lineno:
            continue
        spec = spec_of(call)
        if spec is None or spec.op not in GATHERING_OPS or not spec.uniform_after or not spec.operands:
            continue
        received = operand_argument(call, spec, spec.uniform_after[0])
        sent = operand_argument(call, spec, spec.operands[0])
        if _named(received, ast.unparse(loop.iter)) and _named(sent, mine):
            return mine
    return None


def _named(node: ast.expr | None, text: str) -> bool:
    return node is not None and ast.unparse(node) == text
