"""What a fixer gets and what it returns: the parsed file (`Source`) and the new text (`Rewrite`).

In: one file's path and text. Out: its stdlib and libcst trees, parsed on first use, node
positions and parents, and the text with one node replaced (every other byte kept). A fixer
(collcheck.adopt.fixers) is a `Fixer`: `(Source, Finding) -> Rewrite | None`; collcheck.adopt.fixes
verifies what it returns.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, ParentNodeProvider, PositionProvider

from collcheck.findings import Applicability, Finding


@dataclass(frozen=True)
class Rewrite:
    """What a fixer returns: the whole new text."""

    text: str
    applicability: Applicability
    description: str


@dataclass
class Source:
    """One file's text with its syntax trees, parsed on first use and shared by the fixers."""

    path: str
    text: str

    @cached_property
    def tree(self) -> ast.Module:
        return ast.parse(self.text)

    @cached_property
    def wrapper(self) -> MetadataWrapper:
        return MetadataWrapper(cst.parse_module(self.text))

    @property
    def module(self) -> cst.Module:
        return self.wrapper.module

    @cached_property
    def positions(self) -> dict[cst.CSTNode, CodeRange]:
        return dict(self.wrapper.resolve(PositionProvider))

    @cached_property
    def parents(self) -> dict[cst.CSTNode, cst.CSTNode]:
        return dict(self.wrapper.resolve(ParentNodeProvider))

    def nodes_at(self, line: int, kind: type[cst.CSTNode]) -> list[cst.CSTNode]:
        """libcst nodes of `kind` starting on `line`, outermost first."""
        found = [
            (where.start.column, -where.end.line, -where.end.column, node)
            for node, where in self.positions.items()
            if isinstance(node, kind) and where.start.line == line
        ]
        return [node for *_, node in sorted(found, key=lambda item: item[:3])]

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def replaced(self, old: cst.CSTNode, new: cst.CSTNode) -> str:
        """The file's text with `old` replaced by `new`; every other byte is kept."""
        module = self.module.deep_replace(old, new)
        if not isinstance(module, cst.Module):
            return self.text
        return module.code + self._lost_tail

    @cached_property
    def _lost_tail(self) -> str:
        """What libcst's own round trip drops from the end of the text: the last line break of a
        file of "\\r" line endings. Put back, so that every byte outside the edit is kept."""
        kept = self.module.code
        return self.text[len(kept) :] if self.text.startswith(kept) else ""


Fixer = Callable[[Source, Finding], Rewrite | None]
