"""All-gathers in source whose per-rank footprint is computable, for CC101.

The footprint at a call is what one rank holds there: the gathered output, the input shard, the flat
temporary of list-form `all_gather` (see plan.py), the tensors of the function that are still used
later, and — in a `for ... in range(n)` loop that appends each gathered output to a list defined
outside it — every iteration's output. A `torch.cat` of such a list doubles that again.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from collcheck.catalog import OpSpec
from collcheck.memory.static_sizes import (
    Evaluator,
    TensorSize,
    module_constants,
    own_nodes,
    single_assignments,
)
from collcheck.static.context import ModuleContext

GATHER_OPS = frozenset({"all_gather", "all_gather_into_tensor"})
CAT_CALLS = frozenset({"torch.cat", "torch.concat", "torch.concatenate"})
CAT_OP = "torch.cat"  # the `op` of a concatenation of gathered chunks


@dataclass(frozen=True)
class GatherSite:
    node: ast.Call
    function: str
    op: str  # all_gather | all_gather_into_tensor | torch.cat
    footprint: int  # bytes alive on one rank during this call
    one_iteration: int | None  # the footprint if each loop iteration's output were dropped before the next
    itemsize: int

    @property
    def qualified_op(self) -> str:
        """The call in full: `torch.cat`, `torch.distributed.all_gather`."""
        return self.op if self.op == CAT_OP else f"torch.distributed.{self.op}"


@dataclass(frozen=True)
class _Gather:
    call: ast.Call
    op: str
    output: TensorSize
    shard: int
    temporary: int
    output_name: str | None
    input_name: str | None


@dataclass(frozen=True)
class FunctionBody:
    name: str  # qualified within the module (`Class.method`); "" for the module body
    body: list[ast.stmt]
    params: list[str]
    annotations: dict[str, ast.expr]


def functions(tree: ast.Module) -> Iterator[FunctionBody]:
    """Every function (methods and nested ones included), and the module body itself."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    yield FunctionBody("", [node for node in tree.body if not isinstance(node, nested)], [], {})
    yield from _nested(tree.body, "")


def _function(node: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> FunctionBody:
    args = node.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    every += [a for a in (args.vararg, args.kwarg) if a is not None]
    annotations = {a.arg: a.annotation for a in every if a.annotation is not None}
    return FunctionBody(name, node.body, [a.arg for a in every], annotations)


def _nested(body: list[ast.stmt], prefix: str) -> Iterator[FunctionBody]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield _function(node, f"{prefix}{node.name}")
            yield from _nested(node.body, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _nested(node.body, f"{prefix}{node.name}.")
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    yield from _nested([n for n in inner if isinstance(n, ast.stmt)], prefix)


def argument(call: ast.Call, spec: OpSpec, param: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == param:
            return keyword.value
    index = spec.param_index(param)
    return call.args[index] if index is not None and index < len(call.args) else None


def _name(node: ast.expr | None) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _loops_of(body: list[ast.stmt]) -> dict[int, list[ast.For]]:
    """id(node) -> the `for` loops around it, outermost first (within this function only)."""
    found: dict[int, list[ast.For]] = {}

    def visit(node: ast.AST, loops: list[ast.For]) -> None:
        found[id(node)] = loops
        inner = [*loops, node] if isinstance(node, ast.For) else loops
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                visit(child, inner)

    for statement in body:
        visit(statement, [])
    return found


def _appended_names(loop: ast.For) -> dict[str, set[str]]:
    """Lists filled in a loop: `acc.append(x)`, `acc.append((k, v))`, `acc[i] = x` -> {acc: {x, ...}}."""
    filled: dict[str, set[str]] = {}
    for node in ast.walk(loop):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            and isinstance(node.func.value, ast.Name)
            and node.args
        ):
            items = node.args[0].elts if isinstance(node.args[0], (ast.Tuple, ast.List)) else [node.args[0]]
            filled.setdefault(node.func.value.id, set()).update(n for n in map(_name, items) if n)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    filled.setdefault(target.value.id, set()).add(node.value.id)
    return filled


def _loads_after(nodes: list[ast.AST], line: int) -> set[str]:
    return {
        node.id
        for node in nodes
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.lineno > line
    }


@dataclass
class _FunctionAnalysis:
    context: ModuleContext
    evaluator: Evaluator
    name: str
    body: list[ast.stmt]

    def __post_init__(self) -> None:
        self.nodes = list(own_nodes(self.body))
        self.loops = _loops_of(self.body)
        self.assigned_line = {
            node.id: node.lineno
            for node in self.nodes
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
        }

    def gathers(self) -> list[_Gather]:
        found = []
        for node in self.nodes:
            if not isinstance(node, ast.Call):
                continue
            qualified = self.context.qualified_name(node.func)
            spec = self.context.catalog.functions.get(qualified or "")
            if spec is not None and spec.op in GATHER_OPS:
                gather = self._gather(node, spec)
                if gather is not None:
                    found.append(gather)
        return found

    def _gather(self, call: ast.Call, spec: OpSpec) -> _Gather | None:
        out_expr = argument(call, spec, spec.uniform_after[0]) if spec.uniform_after else None
        in_expr = argument(call, spec, spec.operands[0]) if spec.operands else None
        output = self.evaluator.tensor(out_expr) if out_expr is not None else None
        shard = self.evaluator.tensor(in_expr) if in_expr is not None else None
        world = self.evaluator.world_size()
        if output is None and shard is not None and world:
            output = shard.times(world)
        if output is None:
            return None
        shard_bytes = shard.nbytes if shard is not None else output.nbytes // (world or 1)
        temporary = output.nbytes if spec.op == "all_gather" else 0
        return _Gather(call, spec.op, output, shard_bytes, temporary, _name(out_expr), _name(in_expr))

    def live_tensors(self, node: ast.AST, skip: set[str]) -> int:
        """Bytes of this function's known tensors assigned before `node` and still used after it.

        Inside a loop, what was assigned before the loop and is read in it stays alive for the next trip.
        """
        line = getattr(node, "lineno", 0)
        after = _loads_after(self.nodes, getattr(node, "end_lineno", None) or line)
        loops = self.loops.get(id(node), [])
        loop_start = loops[0].lineno if loops else line
        in_loop = _loads_after(list(ast.walk(loops[0])), 0) if loops else set()
        total = 0
        for name, assigned in self.assigned_line.items():
            if name in skip:
                continue
            before_loop = assigned < loop_start and name in after | in_loop
            if before_loop or (assigned < line and name in after):
                size = self.evaluator.tensor(ast.Name(id=name, ctx=ast.Load()))
                total += size.nbytes if size is not None else 0
        return total

    def accumulation(self, gather: _Gather, gathers: list[_Gather]) -> tuple[ast.For, str, int, int] | None:
        """(loop, list, trips, bytes kept per trip) when the loop keeps every iteration's output alive."""
        for loop in reversed(self.loops.get(id(gather.call), [])):
            trips = self.evaluator.range_length(loop.iter)
            filled = _appended_names(loop)
            for accumulator, names in filled.items():
                if gather.output_name not in names or self.assigned_line.get(accumulator, 0) >= loop.lineno:
                    continue
                if trips is None:
                    return None
                kept = sum(
                    g.output.nbytes for g in gathers if g.output_name in names and self._inside(g, loop)
                )
                return loop, accumulator, trips, kept
        return None

    def _inside(self, gather: _Gather, loop: ast.For) -> bool:
        return loop in self.loops.get(id(gather.call), [])

    def sites(self) -> list[GatherSite]:
        gathers = self.gathers()
        sites: list[GatherSite] = []
        concatenated: set[str] = set()
        for cat in self._cats():
            found = self._cat_site(cat, gathers)
            if found is not None:
                sites.append(found[0])
                concatenated.add(found[1])
        for gather in gathers:
            site, accumulator = self._gather_site(gather, gathers)
            if accumulator not in concatenated:  # the torch.cat after the loop is the peak, reported there
                sites.append(site)
        return sites

    def _gather_site(self, gather: _Gather, gathers: list[_Gather]) -> tuple[GatherSite, str | None]:
        operands = {name for name in (gather.output_name, gather.input_name) if name}
        accumulated = self.accumulation(gather, gathers)
        if accumulated is None:
            footprint = (
                gather.output.nbytes
                + gather.shard
                + gather.temporary
                + self.live_tensors(gather.call, operands)
            )
            return GatherSite(
                gather.call, self.name, gather.op, footprint, None, gather.output.itemsize
            ), None
        loop, accumulator, trips, kept = accumulated
        skip = operands | {g.output_name for g in gathers if g.output_name and self._inside(g, loop)}
        extra = gather.shard + gather.temporary + self.live_tensors(gather.call, skip | {accumulator})
        site = GatherSite(
            gather.call, self.name, gather.op, trips * kept + extra, kept + extra, gather.output.itemsize
        )
        return site, accumulator

    def _cats(self) -> list[ast.Call]:
        return [
            node
            for node in self.nodes
            if isinstance(node, ast.Call)
            and self.context.qualified_name(node.func) in CAT_CALLS
            and node.args
            and isinstance(node.args[0], ast.Name)
        ]

    def _cat_site(self, cat: ast.Call, gathers: list[_Gather]) -> tuple[GatherSite, str] | None:
        listed = _name(cat.args[0])
        for gather in gathers:
            accumulated = self.accumulation(gather, gathers)
            if accumulated is None or accumulated[1] != listed or cat.lineno <= accumulated[0].lineno:
                continue
            loop, accumulator, trips, kept = accumulated
            skip = {g.output_name for g in gathers if g.output_name and self._inside(g, loop)}
            others = self.live_tensors(cat, skip | {accumulator})
            footprint = 2 * trips * kept + others
            one = kept + gather.shard + gather.temporary + others
            return GatherSite(cat, self.name, CAT_OP, footprint, one, gather.output.itemsize), accumulator
        return None


def gather_sites(context: ModuleContext, symbols: Mapping[str, int | str]) -> list[GatherSite]:
    constants = module_constants(context.tree)
    sites: list[GatherSite] = []
    for function in functions(context.tree):
        local = single_assignments(function.body, function.params)
        evaluator = Evaluator(context, symbols, constants, local)
        sites.extend(_FunctionAnalysis(context, evaluator, function.name, function.body).sites())
    return sites
