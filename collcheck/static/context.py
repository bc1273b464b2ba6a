"""What a module-level check receives: the parsed module and the means to resolve names.

Rules that are not about collective ordering (e.g. the memory rules) define
`check_module(context: ModuleContext) -> list[Finding]` in their rule module; collcheck.classify
calls it for the engine once per parsed file, during the same run, with the same tree.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from collcheck.catalog import Catalog
from collcheck.config import Settings
from collcheck.findings import Location
from collcheck.source import SourceFile
from collcheck.static.names import ImportTable, qualified_name


@dataclass(frozen=True)
class ModuleContext:
    tree: ast.Module
    source: SourceFile
    settings: Settings
    catalog: Catalog
    imports: ImportTable

    def qualified_name(self, node: ast.expr) -> str | None:
        """`dist.all_gather` -> `torch.distributed.all_gather`, from this module's imports."""
        return qualified_name(node, self.imports)

    def location(self, node: ast.AST) -> Location:
        return Location(
            path=self.source.path,
            line=getattr(node, "lineno", 1),
            column=getattr(node, "col_offset", 0),
            end_line=getattr(node, "end_lineno", None),
            end_column=getattr(node, "end_col_offset", None),
        )
