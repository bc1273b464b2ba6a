"""Whether a parameter named like a rank is a rank the code chose rather than this process's rank.

In: a function, one of its parameter names, the module model and the catalog. Out: whether the
code compares that parameter with this process's own rank (`pg.rank() == rank`), in the function
(its nested functions too) or in a function of the file it hands the parameter to. Such a
parameter names a chosen rank (a leader, a root): comparing one's own rank with itself would
decide nothing. The interpreter then does not take the parameter for the process's rank where
the function is analysed on its own (`interpret.Interpreter._parameter_value`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from collcheck.catalog import Catalog
from collcheck.static.loader import FunctionNode, ModuleInfo
from collcheck.static.names import ImportTable, qualified_name
from collcheck.static.syntax import receiving_parameters

# Catalog values that are a process's own rank in some numbering (not a size, not a predicate).
OWN_RANK_SPECS = frozenset({"rank", "local_rank", "node_rank", "group_rank"})
MAX_RANK_HANDOFFS = 2  # functions of the file a rank-named parameter is followed into


class OwnRankComparisons:
    """Asks a file's functions whether they compare a parameter with the process's own rank."""

    def __init__(
        self, module: ModuleInfo, catalog: Catalog, imports_of: Callable[[FunctionNode], ImportTable]
    ) -> None:
        self.module = module
        self.catalog = catalog
        self.imports_of = imports_of

    def compared(self, name: str, node: FunctionNode, handoffs: int) -> bool:
        """Parameter `name` of `node` is tested against this process's own rank, in `node` or,
        up to `handoffs` calls away, in a function of the file that receives it."""
        imports = self.imports_of(node)
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.Compare)
                and len(sub.ops) == 1
                and isinstance(sub.ops[0], (ast.Eq, ast.NotEq))
            ):
                sides = (sub.left, sub.comparators[0])
                named = any(isinstance(side, ast.Name) and side.id == name for side in sides)
                if named and any(self._reads_own_rank(side, imports) for side in sides):
                    return True
            elif handoffs > 0 and isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
                callee = self.module.functions.get(sub.func.id)
                if callee is None or callee is node or imports.lookup(sub.func.id) is not None:
                    continue
                for parameter in receiving_parameters(sub, callee, name):
                    if self.compared(parameter, callee, handoffs - 1):
                        return True
        return False

    def _reads_own_rank(self, node: ast.expr, imports: ImportTable) -> bool:
        """`dist.get_rank()`, `pg.rank()`: a catalogued read of this process's rank."""
        if not isinstance(node, ast.Call):
            return False
        spec = self.catalog.rank_functions.get(qualified_name(node.func, imports) or "")
        if spec is None and isinstance(node.func, ast.Attribute):
            spec = self.catalog.rank_methods.get(node.func.attr)
        return spec in OWN_RANK_SPECS
