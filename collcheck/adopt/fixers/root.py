"""CC006, a root (`src=`/`dst=`) computed from the rank: use the root every rank agrees on (unsafe).

Only where that root is evident: the argument is the rank itself (`rank`, `self.rank`,
`dist.get_rank()`, `int(os.environ["LOCAL_RANK"])`), not arithmetic on it. The root is then the
rank the function singles out elsewhere (`if rank == 2:` with the same expression) when it
singles out exactly one, otherwise rank 0, which exists in every job.
"""

from __future__ import annotations

import ast

import libcst as cst

from collcheck.adopt.blocks import innermost_function
from collcheck.adopt.rewrite import Rewrite, Source
from collcheck.checks import cc006_rank_dependent_collective_argument as cc006
from collcheck.findings import Applicability, Finding

RULE = cc006.CODE
VARIANTS = frozenset({cc006.Variant.ROOT})


ROOT_KEYWORDS = ("src", "dst", "group_src", "group_dst")


def _root_argument(source: Source, line: int) -> cst.Arg | None:
    roots = [
        arg
        for call in source.nodes_at(line, cst.Call)
        if isinstance(call, cst.Call)
        for arg in call.args
        if arg.keyword is not None and arg.keyword.value in ROOT_KEYWORDS
    ]
    return roots[0] if len(roots) == 1 else None


def _is_the_rank(expression: ast.expr) -> bool:
    return isinstance(expression, (ast.Name, ast.Attribute, ast.Call))


def _singled_out(function: ast.AST | None, expression: ast.expr) -> int:
    """The one rank the function compares `expression` to with `==`, else 0."""
    if function is None:
        return 0
    wanted = ast.dump(expression)
    found: set[int] = set()
    for node in ast.walk(function):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)):
            continue
        sides = (node.left, node.comparators[0])
        for side, other in (sides, sides[::-1]):
            if ast.dump(side) == wanted and isinstance(other, ast.Constant) and type(other.value) is int:
                found.add(other.value)
    return found.pop() if len(found) == 1 else 0


def fix(source: Source, finding: Finding) -> Rewrite | None:
    argument = _root_argument(source, finding.location.line)
    if argument is None:
        return None
    try:
        expression = ast.parse(source.code(argument.value).strip(), mode="eval").body
    except SyntaxError:
        return None
    if not _is_the_rank(expression):
        return None
    root = _singled_out(innermost_function(source, finding.location.line), expression)
    text = source.replaced(argument.value, cst.Integer(str(root)))
    return Rewrite(text, Applicability.UNSAFE, f"use rank {root}, the same root on every rank, as the root")
