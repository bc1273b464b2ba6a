"""Where the conditions of a path come from: the source text and place of each branch test.

In: a symbolic test at the moment the interpreter forks on it (`note`), with the syntax it came
from. Out: for a condition of a `Path` (the test itself or its negation), that source (`lookup`),
so that a counterexample can say which branch split the two ranks and where.

Conditions are looked up by identity: a path holds the very objects the interpreter forked on
(or `Not` of them), and each noted object is kept alive here so that its id stays its own.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from collcheck.findings import ConditionKind
from collcheck.static.names import source_text
from collcheck.static.symbolic import Expr, Not

MAX_TEXT = 72  # a condition longer than this is shortened in messages


@dataclass(frozen=True)
class ConditionSource:
    """A condition's place in the source. Its text is made only when a counterexample shows it:
    the interpreter notes a test each time it forks on it, on every path."""

    node: ast.AST
    path: str
    kind: ConditionKind = ConditionKind.TEST
    written: str = ""  # the text shown when it is not the node's own source (`for x in xs`)

    @property
    def line(self) -> int:
        return int(getattr(self.node, "lineno", 0))

    @property
    def column(self) -> int:
        return int(getattr(self.node, "col_offset", 0))

    @property
    def text(self) -> str:
        return shorten(self.written or source_text(self.node, "<condition>"))


def shorten(text: str, limit: int = MAX_TEXT) -> str:
    """One line, at most `limit` characters (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def source_of(
    node: ast.AST, path: str, kind: ConditionKind = ConditionKind.TEST, text: str = ""
) -> ConditionSource:
    """The source of a condition read at `node` of the file `path` (`text`: shown instead of the
    node's own source)."""
    return ConditionSource(node, path, kind, text)


class ConditionSources:
    """The sources of the tests forked on during one analysis (shared by the runners of helpers)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Expr, ConditionSource]] = {}

    def note(self, test: Expr, source: ConditionSource) -> None:
        """`test` was forked on at `source` (the first place it was seen is kept). The other arm's
        condition is `negate(test)`: `Not(test)`, or the operand of a test that is a `Not`."""
        self._by_id.setdefault(id(test), (test, source))
        if isinstance(test, Not):
            self._by_id.setdefault(id(test.operand), (test, source))

    def lookup(self, condition: Expr) -> tuple[ConditionSource, Expr] | None:
        """The source of a path condition and the test as written there, whichever arm the path
        took; None for a condition of unknown origin."""
        hit = self._by_id.get(id(condition))
        if hit is None and isinstance(condition, Not):
            hit = self._by_id.get(id(condition.operand))
        return None if hit is None else (hit[1], hit[0])


NO_SOURCES = ConditionSources()
