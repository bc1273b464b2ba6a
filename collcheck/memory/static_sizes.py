"""Sizes computable from source alone, for the memory rules (CC101, CC102). Nothing is imported or run.

Integers come from literals, module constants, single assignments in the function, and the symbols
bound in `[tool.collcheck.memory]` (a name or `self.<name>` whose value is not in the code takes the
setting of that name; `dist.get_world_size()` takes `world_size`). A tensor's size comes from
`torch.zeros/empty/ones/full/rand/randn(shape, dtype=...)`, the `*_like` forms, and list comprehensions
of those over `range(n)`. Anything else is unknown, and the rules stay quiet about it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from collcheck.memory.formulas import DTYPE_BYTES
from collcheck.memory.units import SizeError, parse_size
from collcheck.static.context import ModuleContext

TORCH_DTYPE_BYTES: dict[str, int] = {
    "torch.float32": 4, "torch.float": 4, "torch.float64": 8, "torch.double": 8,
    "torch.float16": 2, "torch.half": 2, "torch.bfloat16": 2,
    "torch.float8_e4m3fn": 1, "torch.float8_e5m2": 1, "torch.int8": 1, "torch.uint8": 1,
    "torch.int16": 2, "torch.int32": 4, "torch.int": 4, "torch.int64": 8, "torch.long": 8, "torch.bool": 1,
}  # fmt: skip
FACTORIES = frozenset({"torch.zeros", "torch.empty", "torch.ones", "torch.rand", "torch.randn", "torch.full"})
LIKE_FACTORIES = frozenset(f"{name}_like" for name in FACTORIES)
WORLD_SIZE_CALLS = frozenset(
    {"torch.distributed.get_world_size", "torch.distributed.distributed_c10d.get_world_size"}
)
DEFAULT_ITEMSIZE = 4  # torch's default dtype is float32 unless the code says otherwise
MAX_VALUE = 1 << 62  # a guard against `2 ** 10 ** 9` in analysed code


@dataclass(frozen=True)
class TensorSize:
    """Elements (of every tensor, for a list) and bytes per element."""

    elements: int
    itemsize: int

    @property
    def nbytes(self) -> int:
        return self.elements * self.itemsize

    def times(self, count: int) -> TensorSize:
        return TensorSize(self.elements * count, self.itemsize)


def memory_symbols(settings: Mapping[str, Any]) -> dict[str, int | str]:
    """The usable values of `[tool.collcheck.memory]`: integers and strings (dtype, budget)."""
    return {
        key: value
        for key, value in settings.items()
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    }


def budget_bytes(settings: Mapping[str, Any]) -> int | None:
    raw = settings.get("budget")
    if raw is None:
        return None
    try:
        return parse_size(raw)
    except SizeError:
        return None  # the configuration loader reports bad settings; a rule only stays quiet


def own_nodes(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node of a body, without descending into nested functions, lambdas or classes."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        for child in reversed(list(ast.iter_child_nodes(node))):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                stack.append(child)


def single_assignments(body: list[ast.stmt], params: list[str]) -> dict[str, ast.expr]:
    """Names bound exactly once in a body by `name = expr`; names bound more than once are unknown."""
    counts: dict[str, int] = dict.fromkeys(params, 1)
    values: dict[str, ast.expr] = {}
    for node in own_nodes(body):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            counts[node.id] = counts.get(node.id, 0) + 1
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            values[node.target.id] = node.value
    return {name: value for name, value in values.items() if counts.get(name) == 1}


def module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    return single_assignments(
        [node for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))], []
    )


def _arithmetic(op: ast.operator, left: int, right: int) -> int | None:
    if isinstance(op, ast.Add):
        return left + right
    if isinstance(op, ast.Sub):
        return left - right
    if isinstance(op, ast.Mult):
        return left * right
    if isinstance(op, ast.FloorDiv) and right:
        return left // right
    if isinstance(op, ast.Div) and right and left % right == 0:
        return left // right  # only exact divisions stay integers
    if isinstance(op, ast.Mod) and right:
        return left % right
    if isinstance(op, ast.Pow) and 0 <= right <= 64:
        return int(left**right)
    return None


@dataclass
class Evaluator:
    """Values in one function: its single assignments first, then module constants, then settings."""

    context: ModuleContext
    symbols: Mapping[str, int | str]
    constants: Mapping[str, ast.expr]
    local: Mapping[str, ast.expr]

    def __post_init__(self) -> None:
        self._resolving: set[str] = set()

    # -- integers and strings -------------------------------------------------------------------
    def integer(self, node: ast.expr) -> int | None:
        value = self.value(node)
        if isinstance(value, int) and abs(value) < MAX_VALUE:
            return value
        return None

    def value(self, node: ast.expr) -> int | str | None:
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, (int, str))
            and not isinstance(node.value, bool)
        ):
            return node.value
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            return self.symbols.get(node.attr)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            operand = self.integer(node.operand)
            return None if operand is None else -operand
        if isinstance(node, ast.BinOp):
            left, right = self.integer(node.left), self.integer(node.right)
            if left is None or right is None:
                return None
            return _arithmetic(node.op, left, right)
        if isinstance(node, ast.Call) and self.context.qualified_name(node.func) in WORLD_SIZE_CALLS:
            return self.world_size()
        return None

    def name(self, name: str) -> int | str | None:
        if name in self._resolving:
            return None  # `x = x + 1` style cycles
        self._resolving.add(name)
        try:
            for table in (self.local, self.constants):
                if name in table:
                    found = self.value(table[name])
                    if found is not None:
                        return found
            return self.symbols.get(name)
        finally:
            self._resolving.discard(name)

    def world_size(self) -> int | None:
        value = self.symbols.get("world_size")
        return value if isinstance(value, int) else None

    # -- tensors ------------------------------------------------------------------------------------
    def itemsize(self, call: ast.Call, default: int | None) -> int | None:
        dtype = next((kw.value for kw in call.keywords if kw.arg == "dtype"), None)
        if dtype is None:
            return default
        qualified = self.context.qualified_name(dtype)
        if qualified in TORCH_DTYPE_BYTES:
            return TORCH_DTYPE_BYTES[qualified]
        # `dtype=local_k.dtype`: the cache's dtype, which the settings may name
        configured = self.symbols.get("dtype")
        return DTYPE_BYTES.get(configured) if isinstance(configured, str) else None

    def shape_elements(self, dims: list[ast.expr]) -> int | None:
        if len(dims) == 1 and isinstance(dims[0], (ast.Tuple, ast.List)):
            dims = list(dims[0].elts)
        total = 1
        for dim in dims:
            size = self.integer(dim)
            if size is None or size < 0:
                return None
            total *= size
        return total

    def tensor(self, node: ast.expr) -> TensorSize | None:
        """The size of a tensor (or of a list of tensors) that `node` evaluates to, if computable."""
        if isinstance(node, ast.Name):
            return self._named_tensor(node.id)
        if isinstance(node, ast.ListComp):
            return self._comprehension(node)
        if not isinstance(node, ast.Call):
            return None
        qualified = self.context.qualified_name(node.func)
        if qualified in FACTORIES:
            dims = node.args[:1] if qualified == "torch.full" else node.args
            elements = self.shape_elements(list(dims))
            itemsize = self.itemsize(node, DEFAULT_ITEMSIZE)
            return None if elements is None or itemsize is None else TensorSize(elements, itemsize)
        if qualified in LIKE_FACTORIES and node.args:
            like = self.tensor(node.args[0])
            itemsize = self.itemsize(node, like.itemsize if like else None)
            return None if like is None or itemsize is None else TensorSize(like.elements, itemsize)
        return None

    def _named_tensor(self, name: str) -> TensorSize | None:
        if name not in self.local or name in self._resolving:
            return None
        self._resolving.add(name)
        try:
            return self.tensor(self.local[name])
        finally:
            self._resolving.discard(name)

    def _comprehension(self, node: ast.ListComp) -> TensorSize | None:
        if len(node.generators) != 1:
            return None
        loop = node.generators[0]
        count = self.range_length(loop.iter)
        item = self.tensor(node.elt)
        return None if count is None or item is None or loop.ifs else item.times(count)

    def range_length(self, node: ast.expr) -> int | None:
        """Trips of `range(n)` / `range(a, b)`; None for any other iterable."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"):
            return None
        if len(node.args) == 1:
            stop = self.integer(node.args[0])
            return None if stop is None else max(stop, 0)
        if len(node.args) == 2:
            start, stop = self.integer(node.args[0]), self.integer(node.args[1])
            return None if start is None or stop is None else max(stop - start, 0)
        return None
