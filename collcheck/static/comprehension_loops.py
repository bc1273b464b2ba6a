"""List comprehensions that prepare or post transfers (`[P2POp(dist.isend, t, p) for p in peers]`),
run as the loops they are.

The interpreter evaluates a comprehension without running the calls inside it (its value is all
it reads of one). A comprehension whose element makes a posted transfer is where a batch's list
is built, one transfer per item: it is run as a `for` loop over the same iterable whose body
evaluates the element (under the comprehension's filters), so that each transfer is recorded
with the peer of its iteration (p2p_schedule runs `for i in range(n)` with `i` bound), before the
statement that holds the comprehension goes on.

In: an expression. Out: `comprehensions` (its comprehensions, outside lambdas and other
comprehensions) and, for one of them, `ComprehensionLoops.loop`: a synthetic `for` statement at
the comprehension's place, built once per node (the interpreter keys loop regions on the node),
or None for one it does not follow (several generators, `async`). The comprehension's variables
are its own: `target_names` are the names the loop binds, which the caller restores after it.
"""

from __future__ import annotations

import ast
from functools import lru_cache


@lru_cache(maxsize=65536)
def comprehensions(node: ast.expr) -> tuple[ast.ListComp, ...]:
    """The list comprehensions of `node`, outside lambdas and other comprehensions."""
    found: list[ast.ListComp] = []
    stack: list[ast.AST] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.ListComp):
            found.append(current)
            continue
        if isinstance(current, (ast.Lambda, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        stack.extend(ast.iter_child_nodes(current))
    return tuple(found)


def target_names(loop: ast.For) -> tuple[str, ...]:
    return tuple(node.id for node in ast.walk(loop.target) if isinstance(node, ast.Name))


class ComprehensionLoops:
    """The synthetic loop of each comprehension, kept with its node (ids are never reused)."""

    def __init__(self) -> None:
        self._loops: dict[int, tuple[ast.ListComp, ast.For | None]] = {}

    def loop(self, comprehension: ast.ListComp) -> ast.For | None:
        held = self._loops.get(id(comprehension))
        if held is None:
            held = self._loops[id(comprehension)] = (comprehension, _as_loop(comprehension))
        return held[1]


def _as_loop(comprehension: ast.ListComp) -> ast.For | None:
    if len(comprehension.generators) != 1 or comprehension.generators[0].is_async:
        return None
    generator = comprehension.generators[0]
    body: ast.stmt = ast.copy_location(ast.Expr(comprehension.elt), comprehension.elt)
    if generator.ifs:
        test = generator.ifs[0] if len(generator.ifs) == 1 else ast.BoolOp(ast.And(), list(generator.ifs))
        body = ast.copy_location(ast.If(test, [body], []), generator.ifs[0])
    loop = ast.For(generator.target, generator.iter, [body], [], None)
    ast.copy_location(loop, comprehension)
    return ast.fix_missing_locations(loop)
