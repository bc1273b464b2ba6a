"""Extraction: walk a function's code symbolically and produce its collective program.

Every path that matters is followed with its condition (a conjunction of symbolic values) and its
sequence of collectives. Branches that issue no collective and do not exit are merged right away
(their variables become `x if cond else y`), so only branches that matter multiply paths. Loops
are not unrolled: a loop whose body communicates becomes one element with a symbolic trip count,
and its body becomes a region of its own, compared iteration against iteration.

Nothing here imports or runs the analysed code.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from collcheck.catalog import Catalog, OpSpec
from collcheck.static import groups
from collcheck.static.budget import check_active
from collcheck.static.names import ImportTable, add_import, dotted, qualified_name
from collcheck.static.program import (
    CommEvent,
    Element,
    Exit,
    LoopEvent,
    LoopRange,
    Path,
    Rebase,
    Region,
    Site,
)
from collcheck.static.symbolic import (
    LOCAL_WORLD,
    MEMBER,
    PER_RANK_KINDS,
    RANK,
    TRUE,
    WORLD,
    Atom,
    BinOp,
    BoolOp,
    Compare,
    Const,
    Expr,
    GroupVal,
    IfExp,
    InRange,
    Member,
    Not,
    Sized,
    TupleVal,
    atoms,
    children,
    conjoin,
    constant_truth,
    fold,
    is_rank_dependent,
    negate,
    opaque,
    substitute,
)

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
EXIT_CALLS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort"})
ENV_READERS = frozenset({"os.getenv", "os.environ.get"})
PASS_THROUGH = frozenset({"int", "float", "bool", "round", "abs"})
# Builtins that compute a value from their arguments: the result varies exactly when they do.
VALUE_BUILTINS = frozenset(
    {
        "list",
        "tuple",
        "set",
        "frozenset",
        "sorted",
        "reversed",
        "range",
        "enumerate",
        "zip",
        "sum",
        "str",
        "repr",
        "format",
        "dict",
        "map",
        "filter",
        "divmod",
        "pow",
        "hash",
        "any",
        "all",
    }
)
# Methods whose result carries the receiver's per-rank nature (reading a value out of it).
VALUE_METHODS = frozenset(
    {
        "item",
        "tolist",
        "numpy",
        "read",
        "readline",
        "readlines",
        "read_text",
        "read_bytes",
        "strip",
        "lower",
        "upper",
        "split",
        "get",
        "keys",
        "values",
        "items",
        "copy",
        "clone",
        "detach",
        "cpu",
        "cuda",
        "float",
        "int",
        "long",
        "bool",
        "sum",
        "mean",
        "all",
        "any",
        "numel",
        "startswith",
        "endswith",
        "is_file",
        "exists",
        "is_dir",
    }
)


class PathLimitExceeded(Exception):
    """Too many paths: the function is skipped (and noted) rather than analysed slowly."""


@dataclass
class ClassInfo:
    node: ast.ClassDef
    methods: dict[str, FunctionNode]
    bases: list[str]
    attributes: dict[str, Expr] = field(default_factory=dict)


@dataclass
class ModuleInfo:
    path: str
    tree: ast.Module
    imports: ImportTable
    catalog: Catalog
    functions: dict[str, FunctionNode] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    globals: dict[str, Expr] = field(default_factory=dict)
    communicating: set[FunctionNode] = field(default_factory=set)
    decorators: dict[FunctionNode, list[str]] = field(default_factory=dict)
    project: Any = None  # collcheck.static.project.Project: other files of the run
    loader: Any = None  # loads another file of the run as a ModuleInfo
    settings: Any = None
    mutable_globals: set[str] = field(default_factory=set)  # names some function declares `global`


@dataclass
class State:
    env: dict[str, Expr]
    conds: tuple[Expr, ...] = ()
    events: tuple[Element, ...] = ()
    exit: Exit | None = None
    returned: Expr | None = None

    def fork(self, cond: Expr | None = None) -> State:
        conds = self.conds if cond is None or cond == TRUE else (*self.conds, cond)
        return State(dict(self.env), conds, self.events, self.exit, self.returned)


@dataclass(frozen=True)
class Frame:
    function: str
    class_name: str | None
    chain: tuple[Site, ...]
    depth: int
    stack: tuple[FunctionNode, ...]


# ----------------------------------------------------------------------------- helper summaries
#
# A helper is executed once per distinct call context and its result reused at every other call
# (issue 6): inlining re-ran it at every call site and on every path that reached one. The result
# of a run is exact for the call that recorded it; it is reused only where it would come out the
# same, which the summary checks against what the run read from outside the helper:
#
# * the arguments and inherited state (`self.*`, declared globals): part of the key;
# * the inlining depth and the receiver class: part of the key;
# * the caller's path condition: a branch of the helper is not forked when the caller already
#   decided its test (`if rank == 0:` twice) — each such lookup is recorded with its answer;
# * the call stack, for recursion: how often each function it re-entered was on the caller's
#   stack is recorded (recursion is followed MAX_RECURSION levels deep);
# * executor state that outlives a call (nested functions, names bound to sets): snapshots.
#
# What the run produced keeps the chain and path condition of the recording call site; `Rebase`
# moves it onto the next one. Loop regions the helper added are replayed too, so the regions, the
# findings and their counterexample chains are those of plain inlining.

Snapshot = tuple[frozenset[tuple[str, FunctionNode]], frozenset[str]]


@dataclass(frozen=True)
class LoopOp:
    """One loop region update (`Extractor._loop_region`), kept to replay it from a summary."""

    runner: Extractor
    stmt: ast.stmt
    chain: tuple[Site, ...]
    function: str
    over_set: bool
    loop_range: LoopRange | None
    paths: tuple[Path, ...]

    def rebased(self, rebase: Rebase) -> LoopOp:
        if rebase.identity:
            return self
        return LoopOp(
            self.runner,
            self.stmt,
            rebase.chain(self.chain),
            self.function,
            self.over_set,
            self.loop_range,
            tuple(rebase.path(p) for p in self.paths),
        )


@dataclass
class Recording:
    """What one helper run read from outside the helper, and the loop regions it touched."""

    prefix: int  # length of the caller's path condition: the helper's own conditions follow it
    outer_stack: int  # length of the caller's call stack
    # (test, its negation among the helper's own conditions, the answer the branch got)
    queries: list[tuple[Expr, bool, bool | None]] = field(default_factory=list)
    recursion: list[tuple[FunctionNode, int]] = field(default_factory=list)
    touched: dict[int, tuple[Extractor, Snapshot]] = field(default_factory=dict)
    loops: list[LoopOp] = field(default_factory=list)


@dataclass(frozen=True)
class HelperResult:
    """One final state of a helper run, relative to the call: its own conditions and events."""

    conds: tuple[Expr, ...]
    events: tuple[Element, ...]
    exit: Exit | None
    returned: Expr | None
    env: tuple[tuple[str, Expr], ...]  # only what outlives the call (`self.*`, globals)


@dataclass(frozen=True)
class Summary:
    conds: tuple[Expr, ...]  # the recording caller's path condition
    chain: tuple[Site, ...]  # the helper frame's chain at the recording call site
    results: tuple[HelperResult, ...]
    steps: int
    queries: tuple[tuple[Expr, bool, bool | None], ...]
    recursion: tuple[tuple[FunctionNode, int], ...]
    touched: tuple[tuple[Extractor, Snapshot, Snapshot], ...]  # runner, state before, after
    loops: tuple[LoopOp, ...]


@dataclass
class Summaries:
    """Helper summaries of one analysed file, shared by its extractor and those of other files."""

    enabled: bool = True
    entries: dict[tuple[Any, ...], list[Summary]] = field(default_factory=dict)
    recordings: list[Recording] = field(default_factory=list)
    executions: Counter[FunctionNode] = field(default_factory=Counter)  # helper bodies run
    reused: int = 0


MAX_RECURSION = 3  # levels of one function on a call stack: recursion is unrolled this far
MAX_SUMMARIES_PER_KEY = 4  # contexts differing only in the caller's condition or stack
MAX_KEY_NODES = 64  # argument values beyond this are not hashed into a key (they are DAGs)


# ----------------------------------------------------------------------------- catalog values


def value_from_spec(spec: str, where: str) -> Expr:
    """Turn a catalog value (`rank`, `local_rank == 0`, `world`) into a symbolic value."""
    names: dict[str, Expr] = {
        "rank": RANK,
        "world": WORLD,
        "local_world": LOCAL_WORLD,
        "local_rank": BinOp("%", RANK, LOCAL_WORLD),
        "node_rank": BinOp("//", RANK, LOCAL_WORLD),
        "group_rank": Atom(f"group_rank@{where}", "perrank", lower=0, below_world=True),
        "group_world": Atom(f"group_world@{where}", "shared", lower=1),
    }
    try:
        tree = ast.parse(spec, mode="eval").body
    except SyntaxError:
        return Atom(f"{spec}@{where}", "perrank")
    return _spec_expr(tree, names, where)


def _spec_expr(node: ast.expr, names: dict[str, Expr], where: str) -> Expr:
    if isinstance(node, ast.Name):
        return names.get(node.id, Atom(node.id, "shared"))
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("group_rank", "group_world")
        and isinstance(node.slice, ast.Name)
    ):
        # `group_rank[tp]`: the rank inside the catalog group `tp`, tied to collectives on `tp`.
        key = node.slice.id
        return groups.local_rank(key) if node.value.id == "group_rank" else groups.group_size(key)
    if isinstance(node, ast.BoolOp):
        parts = tuple(_spec_expr(value, names, where) for value in node.values)
        return BoolOp("and" if isinstance(node.op, ast.And) else "or", parts)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, str, bool)):
        return Const(node.value)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        op = _COMPARE_OPS.get(type(node.ops[0]))
        if op is not None:
            return Compare(
                op, _spec_expr(node.left, names, where), _spec_expr(node.comparators[0], names, where)
            )
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN_OPS:
        return BinOp(
            _BIN_OPS[type(node.op)], _spec_expr(node.left, names, where), _spec_expr(node.right, names, where)
        )
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return Not(_spec_expr(node.operand, names, where))
    return Atom(f"spec@{where}", "perrank")


_COMPARE_OPS: dict[type, str] = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Is: "==",
    ast.IsNot: "!=",
}
_BIN_OPS: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}


_GROUP_FACTS: dict[str, groups.GroupFacts] = {}


def catalog_group_facts(catalog: Catalog) -> groups.GroupFacts:
    """The catalogs' group facts as symbolic values, built once per catalog."""
    facts = _GROUP_FACTS.get(catalog.fingerprint)
    if facts is None:
        members = {
            name: value_from_spec(spec, f"members:{name}") for name, spec in catalog.group_members.items()
        }
        facts = _GROUP_FACTS[catalog.fingerprint] = groups.GroupFacts(members, catalog.group_grids)
    return facts


# Functions that translate a given global rank into a rank inside a group.
GROUP_RANK_TRANSLATORS = frozenset(
    {"torch.distributed.get_group_rank", "torch.distributed.distributed_c10d.get_group_rank"}
)
GROUP_RANK_LISTS = frozenset(
    {
        "torch.distributed.get_process_group_ranks",
        "torch.distributed.distributed_c10d.get_process_group_ranks",
    }
)
GROUP_METHODS = frozenset({"rank", "get_rank", "size", "get_world_size", "get_local_rank", "get_group"})


def _mesh_dimension(node: ast.Call) -> tuple[bool, str | None]:
    """The mesh dimension named by `get_group(dim)` / `get_local_rank(mesh_dim=dim)`: (True, its
    name), (True, None) when none is given (a one-dimensional mesh, or a group), (False, None) when
    it is computed or not a name."""
    arguments = [*node.args, *(k.value for k in node.keywords if k.arg == "mesh_dim")]
    if len(arguments) != len(node.args) + len(node.keywords) or len(arguments) > 1:
        return False, None
    if not arguments:
        return True, None
    argument = arguments[0]
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return True, argument.value
    return False, None


def _parameters_with_literal_defaults(args: ast.arguments) -> set[str]:
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
    pairs += [
        (arg, default) for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True) if default
    ]
    return {
        arg.arg for arg, default in pairs if isinstance(default, ast.Constant) and type(default.value) is int
    }


def _catalog_group(name: str, type_name: str) -> GroupVal:
    if name == "world":  # a coordinator over every rank (vLLM's get_world_group())
        return GroupVal("world", TRUE, type_name=type_name)
    return GroupVal(name, None, type_name=type_name)


def _group_key(value: Expr, node: ast.expr) -> str:
    """One name for a group however it is reached: the group's own key, the name of the value
    (the same object read in two places), or the expression's text."""
    if isinstance(value, GroupVal):
        return value.key
    if isinstance(value, Atom):
        return value.name
    return _text(node)


def _where(node: ast.AST) -> str:
    return f"{getattr(node, 'lineno', 0)}:{getattr(node, 'col_offset', 0)}"


@lru_cache(maxsize=65536)
def _text(node: ast.AST) -> str:
    """Source text of a node (cached: the same nodes are named again on every path)."""
    try:
        return ast.unparse(node)
    except (ValueError, RecursionError):  # pragma: no cover - malformed synthetic trees
        return "<expr>"


SET_METHODS = frozenset({"union", "intersection", "difference", "symmetric_difference"})


def _is_set_expr(node: ast.expr, set_names: frozenset[str] | set[str] = frozenset()) -> bool:
    """A set built here: literal, comprehension, set()/frozenset(), set operators and methods."""
    if isinstance(node, (ast.Set, ast.SetComp)):
        return True
    if isinstance(node, ast.Name):
        return node.id in set_names
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitOr, ast.BitAnd, ast.Sub, ast.BitXor)):
        return _is_set_expr(node.left, set_names) or _is_set_expr(node.right, set_names)
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Name):
        return node.func.id in ("set", "frozenset")
    return (
        isinstance(node.func, ast.Attribute)
        and node.func.attr in SET_METHODS
        and _is_set_expr(node.func.value, set_names)
    )


def assigned_names(nodes: Iterable[ast.AST]) -> set[str]:
    names: set[str] = set()
    for root in nodes:
        for node in ast.walk(root):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                parts = dotted(node)
                if parts:
                    names.add(".".join(parts))
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return names


# ----------------------------------------------------------------------------- the executor


class Extractor:
    """Symbolic execution of one module's functions against the catalog."""

    def __init__(
        self, module: ModuleInfo, max_paths: int = 256, max_depth: int = 4, max_steps: int = 20000
    ) -> None:
        self.module = module
        self.catalog = module.catalog
        self.max_paths = max_paths
        self.max_depth = max_depth
        self.regions: list[Region] = []
        self.record_events = True
        self.nested: dict[str, FunctionNode] = {}
        self._callback_communicates: dict[FunctionNode, bool] = {}
        self.set_names: set[str] = set()
        self.local_imports: ImportTable = module.imports
        self.remote_modules: dict[FunctionNode, ModuleInfo] = {}
        self._imported_values: dict[str, Expr | None] = {}
        self.steps = 0
        self.max_steps = max_steps
        self._returns: dict[FunctionNode, bool] = {}
        self._owners: dict[FunctionNode, str] | None = None
        self._import_tables: dict[FunctionNode, ImportTable] = {}
        self.loop_regions: dict[tuple[int, tuple[Site, ...]], Region] = {}
        self.children: dict[str, Extractor] = {}
        self.summaries = Summaries()

    # ------------------------------------------------------------------ entry points

    def run_function(self, node: FunctionNode, class_name: str | None, qualname: str) -> list[Region]:
        self.regions = []
        self.loop_regions = {}
        self.nested = {}
        self.set_names = set()
        self.steps = 0
        self.local_imports = self._function_imports(node)
        env = self._bind_entry_parameters(node)
        frame = Frame(qualname, class_name, (), 0, (node,))
        start = State(env)
        condition = self._decorator_condition(node, self.module)
        if condition is not None:
            # `@rank_zero_only`: the body runs on some ranks; the others skip it whole.
            start = State(env, (condition,))
        states = self.exec_block(node.body, [start], frame)
        if condition is not None:
            states.append(State(env, (negate(condition),)))
        paths = [Path(s.conds, s.events, s.exit) for s in states if s.exit is None or s.exit.kind != "break"]
        region = Region(qualname, "function", paths, node.lineno, path_name=self.module.path)
        return [region, *self.regions]

    def run_module(self, body: list[ast.stmt]) -> list[Region]:
        self.regions = []
        self.loop_regions = {}
        self.steps = 0
        frame = Frame("<module>", None, (), 0, ())
        states = self.exec_block(body, [State(dict(self.module.globals))], frame)
        paths = [Path(s.conds, s.events, s.exit) for s in states]
        return [Region("<module>", "function", paths, 1, path_name=self.module.path), *self.regions]

    def module_environment(self, body: list[ast.stmt]) -> dict[str, Expr]:
        """Module-level constants and groups, without recording events."""
        self.record_events = False
        frame = Frame("<module>", None, (), self.max_depth, ())
        try:
            states = self.exec_block(body, [State({})], frame)
        except PathLimitExceeded:
            states = []
        finally:
            self.record_events = True
        return _merge_envs(states) if states else {}

    def _function_imports(self, node: FunctionNode) -> ImportTable:
        table = self._import_tables.get(node)
        if table is None:
            table = self.module.imports.child()
            for child in ast.walk(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    add_import(table, child)
            self._import_tables[node] = table
        return table

    def _bind_entry_parameters(self, node: FunctionNode) -> dict[str, Expr]:
        env: dict[str, Expr] = {}
        args = node.args
        defaulted = _parameters_with_literal_defaults(args)
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if arg.arg in defaulted:
                # `def broadcast(obj, *, rank: int = 0)`: a rank chosen by the caller, not this rank.
                env[arg.arg] = self._annotated_type(arg) or Atom(f"param:{arg.arg}@{_where(node)}", "shared")
                continue
            env[arg.arg] = self._annotated_type(arg) or self._parameter_value(arg.arg, node)
        for rest in (args.vararg, args.kwarg):
            if rest is not None:
                env[rest.arg] = Atom(f"param:{rest.arg}", "shared")
        return env

    def _annotated_type(self, arg: ast.arg) -> Expr | None:
        """`accelerator: Accelerator` makes method calls on it resolve through the catalog."""
        if arg.annotation is None:
            return None
        annotation = arg.annotation
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return None
        name = qualified_name(annotation, self.local_imports)
        if name is None:
            return None
        known_types = set(self.catalog.types.values()) | set(self.catalog.types)
        for method in self.catalog.methods:
            known_types.update(method.receivers)
        if name in known_types:
            return Atom(f"type:{self.catalog.types.get(name) or name}@param:{arg.arg}", "shared")
        return None

    def _parameter_value(self, name: str, node: ast.AST) -> Expr:
        spec = self.catalog.rank_parameters.get(name)
        if spec is not None:
            return value_from_spec(spec, f"param:{name}")
        return Atom(f"param:{name}@{_where(node)}", "shared")

    # ------------------------------------------------------------------ statements

    def exec_block(self, body: Sequence[ast.stmt], states: list[State], frame: Frame) -> list[State]:
        for stmt in body:
            live = [state for state in states if state.exit is None]
            if not live:
                break
            finished = [state for state in states if state.exit is not None]
            produced: list[State] = []
            for state in live:
                produced.extend(self.exec_stmt(stmt, state, frame))
            states = finished + produced
            if len(states) > self.max_paths:
                raise PathLimitExceeded(f"more than {self.max_paths} paths")
        return states

    def exec_stmt(self, stmt: ast.stmt, state: State, frame: Frame) -> list[State]:
        self.steps += 1
        check_active()  # the file's wall-clock budget (budget.py)
        if self.steps > self.max_steps:
            # A bound on work, not only on paths: inlining can make a few paths very expensive.
            raise PathLimitExceeded(f"more than {self.max_steps} statements executed")
        handler = getattr(self, f"_stmt_{type(stmt).__name__}", None)
        if handler is None:
            return self._stmt_generic(stmt, state, frame)
        result: list[State] = handler(stmt, state, frame)
        return result

    def _stmt_generic(self, stmt: ast.stmt, state: State, frame: Frame) -> list[State]:
        # Statements without control flow of interest: evaluate their calls for effects.
        states = [state]
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.expr):
                states = [s for current in states for s, _ in self.eval(child, current, frame)]
        return states

    def _stmt_Pass(self, stmt: ast.Pass, state: State, frame: Frame) -> list[State]:
        return [state]

    def _stmt_Expr(self, stmt: ast.Expr, state: State, frame: Frame) -> list[State]:
        return [s for s, _ in self.eval(stmt.value, state, frame)]

    def _stmt_Assign(self, stmt: ast.Assign, state: State, frame: Frame) -> list[State]:
        results = []
        for current, value in self.eval(stmt.value, state, frame):
            for target in stmt.targets:
                self.bind(target, value, current, stmt.value)
            results.append(current)
        return results

    def _stmt_AnnAssign(self, stmt: ast.AnnAssign, state: State, frame: Frame) -> list[State]:
        if stmt.value is None:
            return [state]
        results = []
        for current, value in self.eval(stmt.value, state, frame):
            self.bind(stmt.target, value, current, stmt.value)
            results.append(current)
        return results

    def _stmt_AugAssign(self, stmt: ast.AugAssign, state: State, frame: Frame) -> list[State]:
        results = []
        for current, value in self.eval(stmt.value, state, frame):
            old = self.pure(stmt.target, current, frame)
            op = _BIN_OPS.get(type(stmt.op))
            new = BinOp(op, old, value) if op else opaque(f"aug@{_where(stmt)}", (old, value))
            self.bind(stmt.target, new, current, stmt.value)
            results.append(current)
        return results

    def _stmt_Return(self, stmt: ast.Return, state: State, frame: Frame) -> list[State]:
        pairs = self.eval(stmt.value, state, frame) if stmt.value is not None else [(state, Const(None))]
        for current, value in pairs:
            current.exit = Exit("return", self.module.path, stmt.lineno, stmt.col_offset, frame.chain)
            current.returned = value
        return [current for current, _ in pairs]

    def _stmt_Raise(self, stmt: ast.Raise, state: State, frame: Frame) -> list[State]:
        state.exit = Exit("raise", self.module.path, stmt.lineno, stmt.col_offset, frame.chain)
        return [state]

    def _stmt_Break(self, stmt: ast.Break, state: State, frame: Frame) -> list[State]:
        state.exit = Exit("break", self.module.path, stmt.lineno, stmt.col_offset, frame.chain)
        return [state]

    def _stmt_Continue(self, stmt: ast.Continue, state: State, frame: Frame) -> list[State]:
        state.exit = Exit("continue", self.module.path, stmt.lineno, stmt.col_offset, frame.chain)
        return [state]

    def _stmt_FunctionDef(self, stmt: FunctionNode, state: State, frame: Frame) -> list[State]:
        self.nested[stmt.name] = stmt
        state.env.pop(stmt.name, None)
        return [state]

    _stmt_AsyncFunctionDef = _stmt_FunctionDef

    def _stmt_ClassDef(self, stmt: ast.ClassDef, state: State, frame: Frame) -> list[State]:
        return [state]

    def _stmt_Import(self, stmt: ast.Import, state: State, frame: Frame) -> list[State]:
        return [state]

    _stmt_ImportFrom = _stmt_Import
    _stmt_Global = _stmt_Import
    _stmt_Nonlocal = _stmt_Import

    def _stmt_If(self, stmt: ast.If, state: State, frame: Frame) -> list[State]:
        if _lazy_initialisation(stmt, self.module.mutable_globals):
            # `if _GROUP is None: _GROUP = new_group(...)` creates once per process, normally on
            # the first, uniform call: later calls (perhaps on some ranks only) take the cached path.
            return self.exec_block(stmt.orelse, [state], frame)
        if _memo_lookup(stmt):
            # `if key in cache: return cache[key]`: a per-process memo, filled the same way on
            # every rank, even when the key is rank-dependent (each rank's own group).
            return self._branch(Atom(f"memo@{stmt.lineno}", "shared"), stmt.body, stmt.orelse, state, frame)
        results: list[State] = []
        for current, test in self.eval(stmt.test, state, frame):
            results.extend(self._branch(test, stmt.body, stmt.orelse, current, frame))
        return results

    def _branch(
        self, test: Expr, body: Sequence[ast.stmt], orelse: Sequence[ast.stmt], state: State, frame: Frame
    ) -> list[State]:
        truth = constant_truth(test)
        if truth is None and test in state.conds:
            truth = True  # the same test already taken on this path (`if rank == 0:` twice)
        elif truth is None and negate(test) in state.conds:
            truth = False
        if self.summaries.recordings and constant_truth(test) is None:
            self._note_query(test, truth, state.conds)
        if truth is True:
            return self.exec_block(body, [state], frame)
        if truth is False:
            return self.exec_block(orelse, [state], frame)
        then_states = self.exec_block(body, [state.fork(test)], frame)
        else_states = self.exec_block(orelse, [state.fork(negate(test))], frame)
        merged = _merge_branches(state, test, then_states, else_states)
        return merged if merged is not None else then_states + else_states

    def _stmt_Match(self, stmt: ast.Match, state: State, frame: Frame) -> list[State]:
        results: list[State] = []
        for current, subject in self.eval(stmt.subject, state, frame):
            choice = opaque(f"match@{_where(stmt)}", (subject,))
            for index, case in enumerate(stmt.cases):
                branch = current.fork(Compare("==", choice, Const(index)))
                results.extend(self.exec_block(case.body, [branch], frame))
            results.append(current.fork(Compare(">=", choice, Const(len(stmt.cases)))))
        return results

    def _stmt_With(self, stmt: ast.With | ast.AsyncWith, state: State, frame: Frame) -> list[State]:
        states = [state]
        for item in stmt.items:
            next_states = []
            for current in states:
                for after, value in self.eval(item.context_expr, current, frame):
                    if item.optional_vars is not None:
                        self.bind(
                            item.optional_vars, opaque(f"with@{_where(item.context_expr)}", (value,)), after
                        )
                    next_states.append(after)
            states = next_states
        return self.exec_block(stmt.body, states, frame)

    _stmt_AsyncWith = _stmt_With

    def _stmt_Try(self, stmt: ast.Try, state: State, frame: Frame) -> list[State]:
        body_states = self.exec_block(stmt.body, [state.fork()], frame)
        normal = [s for s in body_states if s.exit is None or s.exit.kind != "raise"]
        raised = [s for s in body_states if s.exit is not None and s.exit.kind == "raise"]
        results = self.exec_block(stmt.orelse, normal, frame) if stmt.orelse else normal
        for handler in stmt.handlers:
            results.extend(self._handler(stmt, handler, state, raised, frame))
        if not stmt.handlers:
            results.extend(raised)
        if stmt.finalbody:
            results = self._finally(stmt.finalbody, results, frame)
        return results

    _stmt_TryStar = _stmt_Try

    def _handler(
        self, stmt: ast.Try, handler: ast.ExceptHandler, entry: State, raised: list[State], frame: Frame
    ) -> list[State]:
        starts = []
        for state in raised:  # an explicit raise inside the body lands here
            start = state.fork()
            start.exit = None
            starts.append(start)
        if (
            _exits(handler.body)
            and _catches_data_errors(handler, self.module.classes)
            and any(isinstance(n, ast.Call) for s in stmt.body for n in ast.walk(s))
        ):
            # Any call may raise on some ranks only (bad data, I/O): a handler that leaves the
            # loop or function then skips what the other ranks still do.
            flag = Atom(f"exception@{_where(handler)}", "nondet", why="an exception")
            start = entry.fork(flag)
            starts.append(start)
        if handler.name:
            for start in starts:
                start.env[handler.name] = Atom(f"exc@{_where(handler)}", "shared")
        if not starts:
            return []
        return self.exec_block(handler.body, starts, frame)

    def _finally(self, body: list[ast.stmt], states: list[State], frame: Frame) -> list[State]:
        results = []
        for state in states:
            pending = state.exit
            resumed = state.fork()
            resumed.exit = None
            for after in self.exec_block(body, [resumed], frame):
                if after.exit is None:
                    after.exit = pending
                results.append(after)
        return results

    # ------------------------------------------------------------------ loops

    def _stmt_For(self, stmt: ast.For | ast.AsyncFor, state: State, frame: Frame) -> list[State]:
        results: list[State] = []
        for current, iterable in self.eval(stmt.iter, state, frame):
            trip = self.trip_count(stmt.iter, iterable, current, frame)
            over_set = _is_set_expr(stmt.iter, self.set_names)
            element = opaque(f"item@{_where(stmt)}", (iterable,))
            body_start = State(dict(current.env), (*current.conds, Compare(">=", trip, Const(1))), ())
            self.bind(stmt.target, element, body_start)
            loop_range = self._loop_range(stmt, element, current, frame)
            after = self._loop(
                stmt,
                body_start,
                current,
                trip,
                frame,
                over_set=over_set,
                inputs=(iterable,),
                loop_range=loop_range,
            )
            results.extend(self.exec_block(stmt.orelse, after, frame) if stmt.orelse else after)
        return results

    _stmt_AsyncFor = _stmt_For

    def _stmt_While(self, stmt: ast.While, state: State, frame: Frame) -> list[State]:
        results: list[State] = []
        for current, test in self.eval(stmt.test, state, frame):
            if constant_truth(test) is False:
                results.extend(self.exec_block(stmt.orelse, [current], frame))
                continue
            body_start = State(dict(current.env), current.conds, ())
            after = self._loop(stmt, body_start, current, None, frame, over_set=False, inputs=(test,))
            results.extend(self.exec_block(stmt.orelse, after, frame) if stmt.orelse else after)
        return results

    def _loop(
        self,
        stmt: ast.For | ast.AsyncFor | ast.While,
        body_start: State,
        outer: State,
        trip: Expr | None,
        frame: Frame,
        *,
        over_set: bool,
        inputs: tuple[Expr, ...],
        loop_range: LoopRange | None = None,
    ) -> list[State]:
        body_states = self.exec_block(stmt.body, [body_start], frame)
        changed = assigned_names(stmt.body)
        if trip is None:  # while: the trip count depends on the test and what the body changes
            test_names = (
                {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}
                if isinstance(stmt, ast.While)
                else set()
            )
            feeding = [s.env.get(name, Const(None)) for s in body_states for name in test_names & changed]
            trip = opaque(f"trips@{_where(stmt)}", (*inputs, *feeding))
            trip = Atom(trip.name, trip.kind, trip.why, lower=0)
        after = outer.fork()
        for name in changed:
            values = [s.env[name] for s in body_states if name in s.env]
            if values:
                after.env[name] = opaque(f"{name}@loop{_where(stmt)}", (*values, trip, *inputs))
        events = [e for s in body_states for e in s.events]
        if not events:
            return [after]
        unrolled = _unroll(trip, body_states, outer, after, self.record_events)
        if unrolled is not None:
            return unrolled
        body_paths = [Path(s.conds, s.events, s.exit) for s in body_states]
        if loop_range is not None and not _iterations_alike(stmt, body_states, frame):
            loop_range = None
        self._loop_region(
            LoopOp(self, stmt, frame.chain, frame.function, over_set, loop_range, tuple(body_paths))
        )
        first_path = next(s for s in body_states if s.events)
        first = next((e for e in first_path.events if isinstance(e, CommEvent)), None)
        if first is None:
            inner = next(e for e in first_path.events if isinstance(e, LoopEvent))
            first = inner.first
        order = _text(stmt.iter) if isinstance(stmt, (ast.For, ast.AsyncFor)) else "while"
        loop = LoopEvent(
            self.module.path,
            stmt.lineno,
            stmt.col_offset,
            trip,
            tuple(e.op for e in first_path.events),
            order,
            first,
            frame.chain,
            over_set,
            tuple(s.conds for s in body_states if s.events),
        )
        if self.record_events:
            after.events = (*outer.events, loop)
        return [after]

    def _loop_region(self, op: LoopOp, note: bool = True) -> None:
        if note and self.summaries.recordings:
            self.summaries.recordings[-1].loops.append(op)
        # One region per loop, whatever outer path reached it: ranks on different outer paths
        # still run the same iterations against each other.
        key = (id(op.stmt), op.chain)
        region = self.loop_regions.get(key)
        if region is None:
            region = Region(
                op.function,
                "loop",
                [],
                op.stmt.lineno,
                over_set=op.over_set,
                path_name=self.module.path,
                loop_range=op.loop_range,
            )
            self.loop_regions[key] = region
            self.regions.append(region)
        elif region.loop_range != op.loop_range:
            region.loop_range = None  # reached from outer paths that disagree on it: no counting
        region.paths.extend(p for p in op.paths if p not in region.paths)

    def _loop_range(
        self, stmt: ast.For | ast.AsyncFor, var: Expr, state: State, frame: Frame
    ) -> LoopRange | None:
        """`for name in range(...)` over bounds that are the same on every rank."""
        node = stmt.iter
        if not (
            isinstance(stmt, ast.For)
            and isinstance(stmt.target, ast.Name)
            and isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "range"
            and not node.keywords
            and 1 <= len(node.args) <= 3
            and not any(isinstance(a, ast.Starred) for a in node.args)
        ):
            return None
        if self.local_imports.lookup("range") is not None or "range" in self.module.functions:
            return None
        if not isinstance(var, Atom) or var.kind != "shared":
            return None
        values = [self.pure(a, state, frame) for a in node.args]
        start, stop = (Const(0), values[0]) if len(values) == 1 else (values[0], values[1])
        step = values[2] if len(values) == 3 else Const(1)
        if not (isinstance(step, Const) and type(step.value) is int and step.value > 0):
            return None
        if is_rank_dependent(start) or is_rank_dependent(stop):
            return None
        return LoopRange(var, start, stop, step.value)

    def trip_count(self, node: ast.expr, iterable: Expr, state: State, frame: Frame) -> Expr:
        if isinstance(iterable, TupleVal):
            return Const(len(iterable.items))
        if isinstance(iterable, Sized):
            return iterable.length
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name == "range" and not node.keywords:
                return self._range_trip([self.pure(a, state, frame) for a in node.args], node)
            if name in ("enumerate", "reversed", "sorted", "list", "tuple") and node.args:
                return self.trip_count(node.args[0], self.pure(node.args[0], state, frame), state, frame)
            if name == "zip" and node.args:
                trips = [self.trip_count(a, self.pure(a, state, frame), state, frame) for a in node.args]
                result = trips[0]
                for other in trips[1:]:
                    result = BinOp("min", result, other)
                return result
        return self._length(iterable, node)  # the same collection has the same length in every loop

    def _range_trip(self, args: list[Expr], node: ast.AST) -> Expr:
        start: Expr
        stop: Expr
        if len(args) == 1:
            start, stop, step = Const(0), args[0], 1
        elif len(args) in (2, 3):
            start, stop = args[0], args[1]
            raw_step = args[2] if len(args) == 3 else Const(1)
            if not isinstance(raw_step, Const) or not isinstance(raw_step.value, int) or raw_step.value == 0:
                return opaque(f"trips@{_where(node)}", tuple(args))
            step = raw_step.value
        else:
            return opaque(f"trips@{_where(node)}", tuple(args))
        if step < 0:
            start, stop, step = stop, start, -step
        span = BinOp("-", stop, start)
        count = span if step == 1 else BinOp("ceildiv", span, Const(step))
        return BinOp("max", Const(0), count)

    def _slice(
        self, node: ast.Subscript, base: Expr, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        """`items[start:stop:step]`: unknown contents, but a length z3 can reason about."""
        assert isinstance(node.slice, ast.Slice)
        length = self._length(base, node)
        part = node.slice
        start = self.pure(part.lower, state, frame, known) if part.lower is not None else Const(0)
        stop = (
            BinOp("min", self.pure(part.upper, state, frame, known), length)
            if part.upper is not None
            else length
        )
        step = self.pure(part.step, state, frame, known) if part.step is not None else Const(1)
        name = f"slice:{_text(node)}@{_where(node)}"
        negative = any(
            isinstance(v, Const) and isinstance(v.value, int) and v.value < 0 for v in (start, step)
        )
        if negative or isinstance(part.upper, ast.UnaryOp):
            return opaque(name, (base, start, step, stop))
        start = BinOp("min", start, length)
        span = BinOp("-", stop, start)
        return Sized(name, BinOp("max", Const(0), BinOp("ceildiv", span, step)))

    def _length(self, value: Expr, node: ast.AST) -> Expr:
        if isinstance(value, TupleVal):
            return Const(len(value.items))
        if isinstance(value, Sized):
            return value.length
        bound = opaque(f"len({value})", (value,))  # same value, same length, wherever it is asked
        return Atom(bound.name, bound.kind, bound.why, lower=0)

    # ------------------------------------------------------------------ binding

    def bind(self, target: ast.expr, value: Expr, state: State, source: ast.expr | None = None) -> None:
        if isinstance(target, ast.Name):
            state.env[target.id] = value
            if source is not None and _is_set_expr(source, self.set_names):
                self.set_names.add(target.id)
            elif source is not None:
                self.set_names.discard(target.id)
            return
        if isinstance(target, ast.Starred):
            self.bind(target.value, opaque(f"star@{_where(target)}", (value,)), state)
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, Atom) and value.name.startswith("type:") and target.elts:
                # `engine, *_ = deepspeed.initialize(...)`: the first element is the typed object.
                self.bind(target.elts[0], value, state)
                for index, element in enumerate(target.elts[1:], start=1):
                    self.bind(element, Atom(f"unpack{index}:{value.name}", "shared"), state)
                return
            items = (
                value.items if isinstance(value, TupleVal) and len(value.items) == len(target.elts) else None
            )
            for index, element in enumerate(target.elts):
                part = (
                    items[index] if items is not None else opaque(f"unpack{index}@{_where(target)}", (value,))
                )
                self.bind(element, part, state)
            return
        if isinstance(target, ast.Attribute):
            parts = dotted(target)
            if parts:
                state.env[".".join(parts)] = value

    # ------------------------------------------------------------------ expressions with effects

    def eval(self, node: ast.expr | None, state: State, frame: Frame) -> list[tuple[State, Expr]]:
        """Evaluate, running the calls that communicate or may (helpers); may fork the state."""
        if node is None:
            return [(state, Const(None))]
        calls = [n for n in _calls_in_order(node) if self._has_effect(n, frame, state)]
        if not calls:
            return [(state, self.pure(node, state, frame))]
        pending: list[tuple[State, dict[int, Expr]]] = [(state, {})]
        for call in calls:
            advanced: list[tuple[State, dict[int, Expr]]] = []
            for current, known in pending:
                for after, value in self.eval_call(call, current, frame, known):
                    advanced.append((after, {**known, id(call): value}))
            pending = advanced
            if len(pending) > self.max_paths:
                raise PathLimitExceeded(f"more than {self.max_paths} paths")
        return [(current, self.pure(node, current, frame, known)) for current, known in pending]

    def _has_effect(self, call: ast.Call, frame: Frame, state: State | None = None) -> bool:
        if self._op_spec(call, state, frame.class_name) is not None:
            return True
        if self._exit_call(call):
            return True
        if qualified_name(call.func, self.local_imports) in self.catalog.types_in_place:
            return True  # `fully_shard(model)` changes what `model` is
        target = self._local_target(call, frame)
        return target is not None or self._passes_communicating_callback(call, frame)

    def _exit_call(self, call: ast.Call) -> bool:
        name = qualified_name(call.func, self.local_imports)
        if name is None and isinstance(call.func, ast.Name):
            name = call.func.id
        return name in EXIT_CALLS

    def eval_call(
        self, call: ast.Call, state: State, frame: Frame, known: dict[int, Expr]
    ) -> list[tuple[State, Expr]]:
        if self._exit_call(call):
            state.exit = Exit("exit", self.module.path, call.lineno, call.col_offset, frame.chain)
            return [(state, Const(None))]
        spec = self._op_spec(call, state, frame.class_name)
        if spec is not None:
            return [self._communicate(call, spec, state, frame, known)]
        self._type_in_place(call, state)
        target = self._local_target(call, frame)
        if target is None:
            if self.record_events and self._passes_communicating_callback(call, frame):
                state.events = (*state.events, _callback_event(call, self.module.path, frame))
            return [(state, self.pure(call, state, frame, known))]
        function, class_name, bound_self = target
        return self.inline(call, function, class_name, bound_self, state, frame, known)

    def _passes_communicating_callback(self, call: ast.Call, frame: Frame) -> bool:
        """`study.optimize(objective)`, `pool.submit(sync)`: unknown code receives a function that
        communicates and may call it any number of times."""
        for argument in [*call.args, *(keyword.value for keyword in call.keywords)]:
            function: FunctionNode | None = None
            if isinstance(argument, ast.Name):
                function = self.nested.get(argument.id) or self.module.functions.get(argument.id)
            elif (
                isinstance(argument, ast.Attribute)
                and isinstance(argument.value, ast.Name)
                and argument.value.id in ("self", "cls")
                and frame.class_name
            ):
                function = self._find_method(frame.class_name, argument.attr)
            if function is not None and self._communicates(function):
                return True
        return False

    def _communicates(self, function: FunctionNode) -> bool:
        known = self._callback_communicates.get(function)
        if known is None:
            known = function in self.module.communicating or self._body_communicates(function)
            self._callback_communicates[function] = known
        return known

    # ------------------------------------------------------------------ collectives

    def _op_spec(self, call: ast.Call, state: State | None, class_name: str | None = None) -> OpSpec | None:
        name = qualified_name(call.func, self.local_imports)
        if name is not None and name in self.catalog.functions:
            return self.catalog.functions[name]
        inherited = self._inherited_framework_method(call, class_name)
        if inherited is not None:
            return inherited
        if isinstance(call.func, (ast.Name, ast.Attribute)):
            # `model(x)` on a wrapped module: the object itself is the receiver of `__call__`.
            for method in self.catalog.method_specs("__call__"):
                if self._receiver_matches(call.func, method.receivers, state):
                    return method.spec
        if isinstance(call.func, ast.Attribute):
            for method in self.catalog.method_specs(call.func.attr):
                if method.any_receiver or self._receiver_matches(call.func.value, method.receivers, state):
                    return method.spec
        return None

    def _inherited_framework_method(self, call: ast.Call, class_name: str | None) -> OpSpec | None:
        """`self.all_gather(x)` in a subclass of a catalogued class (a LightningModule): the method
        it inherits, unless the class (or a base of this module) defines its own."""
        func = call.func
        if not (
            class_name
            and isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
        ):
            return None
        if self._find_method(class_name, func.attr) is not None:
            return None
        types = self._framework_bases(class_name)
        for method in self.catalog.method_specs(func.attr):
            if not method.any_receiver and types & set(method.receivers):
                return method.spec
        return None

    def _framework_bases(self, class_name: str, depth: int = 0) -> set[str]:
        """The catalogued types a class of this module derives from (directly or through its bases)."""
        info = self.module.classes.get(class_name)
        if info is None or depth > 8:
            return set()
        found: set[str] = set()
        for base in info.node.bases:
            name = qualified_name(base, self.module.imports)
            if name is not None:
                found.add(self.catalog.types.get(name) or name)
            if isinstance(base, ast.Name) and base.id in self.module.classes:
                found |= self._framework_bases(base.id, depth + 1)
        return found

    def _type_in_place(self, call: ast.Call, state: State) -> None:
        """`fully_shard(model)`: from here on `model` is the wrapped type."""
        name = qualified_name(call.func, self.local_imports)
        if name is None or name not in self.catalog.types_in_place or not call.args:
            return
        target = call.args[0]
        if isinstance(target, (ast.Name, ast.Attribute)) and dotted(target):
            type_name = self.catalog.types_in_place[name] or name
            self.bind(target, Atom(f"type:{type_name}@{_where(call)}", "shared"), state)

    def _passes_typed_object(self, call: ast.Call, state: State) -> bool:
        """The call hands a helper an object whose methods communicate (a wrapped model, an
        engine): the helper may communicate through it even if its own text names nothing."""
        receivers = {receiver for method in self.catalog.methods for receiver in method.receivers}
        for argument in [*call.args, *(keyword.value for keyword in call.keywords)]:
            if isinstance(argument, (ast.Name, ast.Attribute)):
                type_name = self._type_of(argument, state)
                if type_name is not None and type_name in receivers:
                    return True
        return False

    def _receiver_matches(self, receiver: ast.expr, types: tuple[str, ...], state: State | None) -> bool:
        if not types:
            return False
        type_name = self._type_of(receiver, state)
        return type_name is not None and type_name in types

    def _type_of(self, node: ast.expr, state: State | None) -> str | None:
        if state is not None:
            parts = dotted(node)
            if parts:
                value = state.env.get(".".join(parts))
                if value is None and parts[0] == "self" and len(parts) == 2:
                    value = next(
                        (
                            c.attributes[parts[1]]
                            for c in self.module.classes.values()
                            if parts[1] in c.attributes
                        ),
                        None,
                    )
                if isinstance(value, Atom) and value.name.startswith("type:"):
                    type_name, _, where = value.name[5:].partition("@")
                    # `model.module` of a typed `model` is another object (the unwrapped module).
                    return None if "." in where else type_name
                if isinstance(value, GroupVal) and value.type_name:
                    return value.type_name
        if isinstance(node, ast.Call):
            name = qualified_name(node.func, self.local_imports)
            if name is not None and name in self.catalog.types:
                return self.catalog.types[name] or name
        return None

    def _communicate(
        self, call: ast.Call, spec: OpSpec, state: State, frame: Frame, known: dict[int, Expr]
    ) -> tuple[State, Expr]:
        args = _map_arguments(call, spec)

        def value(param: str | None) -> Expr | None:
            if param is None or param not in args:
                return None
            return self.pure(args[param], state, frame, known)

        group_node = args.get(spec.group) if spec.group else None
        group = self._group(group_node, state, frame, known)
        group_term = None
        if group is not None and group.per_rank and group.members is None and group_node is not None:
            chosen = self.pure(group_node, state, frame, known)
            group_term = chosen if _group_choice(chosen) else None
        if group is None and spec.default_group is not None and spec.default_group != "world":
            group = groups.unknown_group(spec.default_group)
        if group is None and group_node is None and spec.group is None and self._is_method_call(call):
            assert isinstance(call.func, ast.Attribute)
            receiver = self.pure(call.func.value, state, frame, known)
            if isinstance(receiver, GroupVal):  # a coordinator object that is its own group
                group = receiver
        reduce_op = value(spec.reduce_op)
        if spec.reduce_op is not None:
            reduce_op = _normalise_reduce_op(reduce_op)
        root = value(spec.root)
        if root is None and spec.group_root is not None:
            root = value(spec.group_root)
        event = CommEvent(
            op=spec.op,
            kind=spec.kind,
            path=self.module.path,
            line=call.lineno,
            column=call.col_offset,
            end_line=call.end_lineno or call.lineno,
            end_column=call.end_col_offset or call.col_offset,
            chain=frame.chain,
            group=group,
            root=root,
            reduce_op=reduce_op,
            peer=value(spec.peer),
            ranks_arg=value(spec.ranks),
            operands=tuple(_text(args[name]) for name in spec.operands if name in args),
            group_term=group_term,
        )
        if self.record_events and spec.kind != "p2p_nonblocking":
            state.events = (*state.events, event)
        for name in spec.uniform_after:
            if name in args:
                target = args[name]
                fresh = Atom(f"uniform:{_text(target)}@{_where(call)}", "shared")
                if isinstance(target, (ast.Name, ast.Attribute)):
                    self.bind(target, fresh, state)
        return state, self._op_result(call, spec, args, state, frame, known)

    def _is_method_call(self, call: ast.Call) -> bool:
        if not isinstance(call.func, ast.Attribute):
            return False
        name = qualified_name(call.func, self.local_imports)
        return name is None or name not in self.catalog.functions

    def _op_result(
        self,
        call: ast.Call,
        spec: OpSpec,
        args: dict[str, ast.expr],
        state: State,
        frame: Frame,
        known: dict[int, Expr],
    ) -> Expr:
        if spec.kind != "group_create":
            return Atom(f"result:{spec.op}@{_where(call)}", "shared")
        ranks_node = args.get(spec.ranks) if spec.ranks else None
        key = f"{spec.op}@{self.module.path}:{_where(call)}"
        if spec.op.startswith("new_subgroups"):
            current = self._current_subgroup(spec.op, key, args, state, frame, known)
            return TupleVal((current, Atom(f"subgroups@{_where(call)}", "shared")))
        if spec.op != "new_group":
            return GroupVal(key, None, per_rank=False, created=True)
        ranks_value = self.pure(ranks_node, state, frame, known) if ranks_node is not None else None
        per_rank = ranks_value is not None and is_rank_dependent(ranks_value)
        members = None if ranks_node is None else self._membership(ranks_node, state, frame, known)
        if ranks_node is None:
            members = TRUE  # new_group() with no ranks is the whole world
        return GroupVal(key, members, per_rank=per_rank, created=True)

    def _current_subgroup(
        self, op: str, key: str, args: dict[str, ast.expr], state: State, frame: Frame, known: dict[int, Expr]
    ) -> GroupVal:
        """The first result of `new_subgroups`/`new_subgroups_by_enumeration`: the one subgroup of the
        partition that holds this rank. Two ranks share it exactly when their colors are equal."""
        unknown = GroupVal(key, None, per_rank=True, created=True)
        if op == "new_subgroups":
            parent = args.get("group")
            if parent is not None and not (isinstance(parent, ast.Constant) and parent.value is None):
                return unknown  # subgroups of another group: ranks are numbered within it
            size_node = args.get("group_size")
            # Without a size, torch uses the number of devices per host: unknown, the same everywhere.
            size = (
                self.pure(size_node, state, frame, known)
                if size_node is not None
                else Atom(f"group_size@{key}", "shared", lower=1)
            )
            positive = not isinstance(size, Const) or (isinstance(size.value, int) and size.value > 0)
            if is_rank_dependent(size) or not positive:
                return unknown
            # torch raises unless the world size is a multiple of group_size; then every rank has one.
            whole = Compare("==", BinOp("%", WORLD, size), Const(0))
            return GroupVal(key, whole, color=BinOp("//", RANK, size), created=True)
        listed = args.get("ranks_per_subgroup_list")
        value = self.pure(listed, state, frame, known) if listed is not None else None
        if not isinstance(value, TupleVal) or not all(
            isinstance(part, TupleVal)
            and all(isinstance(r, Const) and type(r.value) is int for r in part.items)
            for part in value.items
        ):
            return unknown
        color: Expr = Const(-1)  # a rank in no subgroup gets None (the world): compared nowhere here
        members: list[Expr] = []
        for index in reversed(range(len(value.items))):
            part = value.items[index]
            assert isinstance(part, TupleVal)
            color = IfExp(Member(RANK, part.items), Const(index), color)
            members.extend(part.items)
        return GroupVal(key, Member(MEMBER, tuple(members)), color=color, created=True)

    def _membership(self, node: ast.expr, state: State, frame: Frame, known: dict[int, Expr]) -> Expr | None:
        """A predicate over MEMBER, for literal lists, ranges and comprehensions over ranges."""
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return Member(MEMBER, tuple(self.pure(e, state, frame, known) for e in node.elts))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("list", "tuple", "sorted", "set") and len(node.args) == 1:
                return self._membership(node.args[0], state, frame, known)
            if node.func.id == "range" and 1 <= len(node.args) <= 3:
                values = [self.pure(a, state, frame, known) for a in node.args]
                start, stop = (Const(0), values[0]) if len(values) == 1 else (values[0], values[1])
                step = values[2] if len(values) == 3 else Const(1)
                if isinstance(step, Const) and isinstance(step.value, int) and step.value > 0:
                    return InRange(MEMBER, start, stop, step.value)
            return None
        if isinstance(node, ast.ListComp) and len(node.generators) == 1:
            gen = node.generators[0]
            if not (isinstance(node.elt, ast.Name) and isinstance(gen.target, ast.Name)):
                return None
            if node.elt.id != gen.target.id:
                return None
            domain = self._membership(gen.iter, state, frame, known)
            if domain is None:
                return None
            scoped = State(dict(state.env))
            scoped.env[gen.target.id] = MEMBER
            conditions = [self.pure(test, scoped, frame, known) for test in gen.ifs]
            return conjoin((domain, *conditions))
        value = self.pure(node, state, frame, known)
        if isinstance(value, TupleVal):
            return Member(MEMBER, value.items)
        return None

    def _group(
        self, node: ast.expr | None, state: State, frame: Frame, known: dict[int, Expr]
    ) -> GroupVal | None:
        if node is None or (isinstance(node, ast.Constant) and node.value is None):
            return None
        name = qualified_name(node, self.local_imports)
        if name is not None and name.endswith((".group.WORLD", ".GroupMember.WORLD")):
            return None
        value = self.pure(node, state, frame, known)
        if isinstance(value, GroupVal):
            return value
        if isinstance(value, Const) and value.value is None:
            return None
        return GroupVal(_group_key(value, node), None, per_rank=is_rank_dependent(value))

    # ------------------------------------------------------------------ helpers (inlining)

    def _local_target(self, call: ast.Call, frame: Frame) -> tuple[FunctionNode, str | None, bool] | None:
        func = call.func
        module = self.module
        if isinstance(func, ast.Name):
            if func.id in self.nested:
                return self.nested[func.id], frame.class_name, False
            if func.id in module.functions and self.local_imports.lookup(func.id) is None:
                return module.functions[func.id], None, False
            return self._remote_target(func)
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and self.local_imports.lookup(func.value.id)
        ):
            return self._remote_target(func)
        if not isinstance(func, ast.Attribute):
            return None
        receiver = func.value
        class_name: str | None = None
        if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
            class_name = frame.class_name
        elif (
            isinstance(receiver, ast.Call)
            and isinstance(receiver.func, ast.Name)
            and receiver.func.id == "super"
            and frame.class_name
        ):
            info = module.classes.get(frame.class_name)
            for base in info.bases if info else []:
                method = self._find_method(base, func.attr)
                if method is not None:
                    return method, base, True
            return None
        elif isinstance(receiver, ast.Name) and receiver.id in module.classes:
            method = self._find_method(receiver.id, func.attr)
            return (method, receiver.id, False) if method is not None else None
        if class_name is None:
            return None
        method = self._find_method(class_name, func.attr)
        return (method, class_name, True) if method is not None else None

    def _remote_target(self, func: ast.expr) -> tuple[FunctionNode, str | None, bool] | None:
        if self.module.project is None:
            return None
        name = qualified_name(func, self.local_imports)
        if name is None or not self.module.project.may_follow(name.rsplit(".", 1)[-1]):
            return None
        from collcheck.static.engine import remote_function  # the engine owns module loading

        found = remote_function(self.module, name, communicating_only=False)
        if found is None:
            return None
        other, function = found
        self.remote_modules[function] = other
        return function, None, False

    def _find_method(self, class_name: str, name: str) -> FunctionNode | None:
        found: FunctionNode | None = self._inherited(class_name, name, lambda info: info.methods)
        return found

    def _inherited(
        self,
        class_name: str,
        name: str,
        table: Callable[[ClassInfo], Mapping[str, Any]],
        seen: frozenset[str] = frozenset(),
    ) -> Any:
        """`name` in the class or, failing that, its bases of this module (methods, attributes)."""
        info = self.module.classes.get(class_name)
        if info is None or class_name in seen:
            return None
        if name in table(info):
            return table(info)[name]
        for base in info.bases:
            found = self._inherited(base, name, table, seen | {class_name})
            if found is not None:
                return found
        return None

    def _owner_class(self, function: FunctionNode, default: str | None) -> str | None:
        if self._owners is None:
            self._owners = {
                m: name for name, info in self.module.classes.items() for m in info.methods.values()
            }
        return self._owners.get(function, default)

    def inline(
        self,
        call: ast.Call,
        function: FunctionNode,
        class_name: str | None,
        bound_self: bool,
        state: State,
        frame: Frame,
        known: dict[int, Expr],
    ) -> list[tuple[State, Expr]]:
        if frame.depth >= self.max_depth:
            return [(state, self.pure(call, state, frame, known))]
        if self.summaries.recordings:
            self._note_recursion(function, frame)
        if frame.stack.count(function) >= MAX_RECURSION:
            # Bounded: deeper levels are not followed (their collectives are not seen).
            return [(state, self.pure(call, state, frame, known))]
        owner_module = self.remote_modules.get(function, self.module)
        communicates = (
            function in owner_module.communicating
            or (function in self.nested.values() and self._body_communicates(function))
            or self._passes_typed_object(call, state)
        )
        if not communicates and not self._returns_matter(function, owner_module):
            return [(state, self.pure(call, state, frame, known))]
        env = self._bind_call_arguments(call, function, bound_self, state, frame, known)
        site = Site(
            frame.function, function.name, self.module.path, call.lineno, call.col_offset, owner_module.path
        )
        owner = self._owner_class(function, class_name)
        inner = Frame(function.name, owner, (*frame.chain, site), frame.depth + 1, (*frame.stack, function))
        declared = _global_names(function)
        for name in declared & set(state.env):
            env[name] = state.env[name]  # module state as the caller last left it
        start = State(env, state.conds, state.events)
        condition = self._decorator_condition(function, owner_module)
        skipped: list[tuple[State, Expr]] = []
        if condition is not None:
            skipped = [(state.fork(negate(condition)), Const(None))]
            start = State(env, (*state.conds, condition), state.events)
        runner = self._runner_for(function)
        finals = self._run_helper(runner, function, start, inner, state, frame, bound_self, declared)
        results = []
        for final in finals:
            resumed = State(dict(state.env), final.conds, final.events)
            for key, value in final.env.items():
                if (key.startswith("self.") and bound_self) or key in declared:
                    resumed.env[key] = value  # attribute and `global` writes outlive the call
            if final.exit is not None and final.exit.kind in ("raise", "exit"):
                resumed.exit = final.exit
            results.append((resumed, final.returned if final.returned is not None else Const(None)))
        collapsed = _collapse_returns(state, results)
        return [*collapsed, *skipped]

    def _run_helper(
        self,
        runner: Extractor,
        function: FunctionNode,
        start: State,
        inner: Frame,
        caller: State,
        frame: Frame,
        bound_self: bool,
        declared: frozenset[str],
    ) -> list[State]:
        """The helper's final states: from a summary that holds here, or by running its body once
        (and keeping the run as a summary for the next call that agrees on what it read)."""
        summaries = self.summaries
        key = _summary_key(function, inner, bound_self, start.env, runner.record_events)
        if key is not None and summaries.enabled:
            for summary in summaries.entries.get(key, ()):
                if _summary_holds(summary, caller, frame):
                    summaries.reused += 1
                    return self._apply_summary(summary, caller, inner, frame)
        else:
            key = None
        summaries.executions[function] += 1
        if key is None:
            _touch(summaries.recordings, runner)
            return self._execute_helper(runner, function, start, inner)
        recording = Recording(len(caller.conds), len(frame.stack))
        summaries.recordings.append(recording)
        steps = self.steps
        try:
            _touch(summaries.recordings, runner)
            finals = self._execute_helper(runner, function, start, inner)
        finally:
            summaries.recordings.pop()
        summary = _summarise(recording, finals, caller, inner, self.steps - steps, bound_self, declared)
        if summaries.recordings:  # a helper run being recorded around this call read it all too
            _pass_on(summary, summaries.recordings[-1], caller, frame, summary.loops)
        stored = summaries.entries.setdefault(key, [])
        if len(stored) < MAX_SUMMARIES_PER_KEY:
            stored.append(summary)
        return finals

    def _execute_helper(
        self, runner: Extractor, function: FunctionNode, start: State, inner: Frame
    ) -> list[State]:
        saved_imports = runner.local_imports
        runner.local_imports = runner._function_imports(function)
        runner.steps = self.steps  # one work budget for the whole analysed function
        try:
            return runner.exec_block(function.body, [start], inner)
        finally:
            runner.local_imports = saved_imports
            self.steps = runner.steps

    def _apply_summary(self, summary: Summary, caller: State, inner: Frame, frame: Frame) -> list[State]:
        """Replay a recorded helper run at this call: its work, the dependencies it passes on to
        helper runs being recorded around this call, its loop regions and its final states."""
        self.steps += summary.steps
        if self.steps > self.max_steps:
            raise PathLimitExceeded(f"more than {self.max_steps} statements executed")
        rebase = Rebase(summary.chain, inner.chain, summary.conds, caller.conds)
        loops = tuple(op.rebased(rebase) for op in summary.loops)
        if self.summaries.recordings:
            _pass_on(summary, self.summaries.recordings[-1], caller, frame, loops)
        for runner, _, after in summary.touched:
            runner.nested = dict(after[0])
            runner.set_names = set(after[1])
        for op in loops:
            op.runner._loop_region(op, note=False)  # passed on above
        finals = []
        for result in summary.results:
            events = result.events if rebase.identity else tuple(rebase.element(e) for e in result.events)
            final = State(dict(result.env), (*caller.conds, *result.conds), (*caller.events, *events))
            final.exit = rebase.exit(result.exit)
            final.returned = result.returned
            finals.append(final)
        return finals

    def _note_query(self, test: Expr, truth: bool | None, conds: tuple[Expr, ...]) -> None:
        """A branch test looked up in the path condition: the answer may come from a caller."""
        # Only the innermost recording: it passes what it read on to the enclosing one when done.
        recording = self.summaries.recordings[-1]
        own = conds[recording.prefix :]
        if test not in own:
            recording.queries.append((test, negate(test) in own, truth))

    def _note_recursion(self, function: FunctionNode, frame: Frame) -> None:
        """How deep `function` already is outside the run being recorded decides how far its
        recursion is followed inside: the summary holds only for the same depth."""
        recording = self.summaries.recordings[-1]
        recording.recursion.append((function, frame.stack[: recording.outer_stack].count(function)))

    def _helper_for(self, call: ast.Call, owner: ModuleInfo) -> tuple[ModuleInfo, FunctionNode] | None:
        """A function of the run that `call` (written in `owner`) reaches by its plain name."""
        if isinstance(call.func, ast.Name) and call.func.id in owner.functions:
            return owner, owner.functions[call.func.id]
        if owner.project is None:
            return None
        name = qualified_name(call.func, owner.imports)
        if name is None:
            return None
        from collcheck.static.engine import remote_function

        return remote_function(owner, name, communicating_only=False)

    def _runner_for(self, function: FunctionNode) -> Extractor:
        """The extractor of the module that defines `function` (another file for imported helpers)."""
        other = self.remote_modules.get(function)
        if other is None:
            return self
        child = self.children.get(other.path)
        if child is None:
            child = Extractor(other, self.max_paths, self.max_depth, self.max_steps)
            child.record_events = self.record_events
            child.summaries = self.summaries  # one cache and one set of recordings per analysis
            self.children[other.path] = child
        return child

    def _body_communicates(self, function: FunctionNode) -> bool:
        names = {f.name for f in self.module.communicating}
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                if self._op_spec(node, None) is not None:
                    return True
                if isinstance(node.func, ast.Name) and node.func.id in names:
                    return True
        return False

    def _returns_matter(
        self, function: FunctionNode, owner: ModuleInfo | None = None, depth: int = 0
    ) -> bool:
        """Inline a quiet helper only if what it returns may depend on the rank (directly, or
        through another helper of the run that does)."""
        owner = owner or self.module
        if depth == 0 and function in self._returns:
            return self._returns[function]
        result = self._returns_matter_uncached(function, owner, depth)
        if depth == 0:
            self._returns[function] = result
        return result

    def _returns_matter_uncached(self, function: FunctionNode, owner: ModuleInfo, depth: int) -> bool:
        imports = owner.imports
        for node in ast.walk(function):
            if isinstance(node, ast.Return) and node.value is not None and depth < 3:
                for call in (n for n in ast.walk(node.value) if isinstance(n, ast.Call)):
                    helper = self._helper_for(call, owner)
                    nested = helper is not None and helper[1] is not function
                    if nested and self._returns_matter(helper[1], helper[0], depth + 1):  # type: ignore[index]
                        return True
            if isinstance(node, ast.Call):
                name = qualified_name(node.func, imports)
                if name in self.catalog.rank_functions:
                    return True
                if isinstance(node.func, ast.Attribute) and node.func.attr in self.catalog.rank_methods:
                    return True
            if isinstance(node, ast.Attribute) and node.attr in self.catalog.rank_attributes:
                return True
            if isinstance(node, ast.Constant) and node.value in self.catalog.rank_env:
                return True
        return any(arg.arg in self.catalog.rank_parameters for arg in function.args.args)

    def _decorator_condition(self, function: FunctionNode, owner: ModuleInfo) -> Expr | None:
        for decorator in function.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = qualified_name(target, owner.imports)
            if name is None and isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                bound = owner.globals.get(target.value.id)  # `@accelerator.on_main_process`
                if isinstance(bound, Atom) and bound.name.startswith("type:"):
                    name = bound.name[5:].split("@", 1)[0] + "." + target.attr
            if name is not None and name in self.catalog.rank_decorators:
                return value_from_spec(self.catalog.rank_decorators[name], f"decorator@{_where(decorator)}")
        return None

    def _bind_call_arguments(
        self,
        call: ast.Call,
        function: FunctionNode,
        bound_self: bool,
        state: State,
        frame: Frame,
        known: dict[int, Expr],
    ) -> dict[str, Expr]:
        params = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        env: dict[str, Expr] = {}
        if bound_self and params:
            env[params[0]] = Atom("self", "shared")
            for key, value in state.env.items():
                if key.startswith("self."):
                    env[key] = value
            params = params[1:]
        defaults = function.args.defaults
        offset = len(params) - len(defaults)
        for index, name in enumerate(params):
            if index >= offset:
                env[name] = self.pure(defaults[index - offset], State({}), frame)
            else:
                env[name] = Atom(f"param:{name}@{_where(call)}", "shared")
        for kwarg, default in zip(function.args.kwonlyargs, function.args.kw_defaults, strict=False):
            env[kwarg.arg] = (
                self.pure(default, State({}), frame) if default is not None else Atom(kwarg.arg, "shared")
            )
        for index, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break
            if index < len(params):
                env[params[index]] = self.pure(arg, state, frame, known)
        for keyword in call.keywords:
            if keyword.arg is not None:
                env[keyword.arg] = self.pure(keyword.value, state, frame, known)
        return env

    # ------------------------------------------------------------------ pure evaluation

    def pure(
        self, node: ast.expr | None, state: State, frame: Frame, known: dict[int, Expr] | None = None
    ) -> Expr:
        if node is None:
            return Const(None)
        if known and id(node) in known:
            return known[id(node)]
        handler = getattr(self, f"_pure_{type(node).__name__}", None)
        if handler is None:
            inputs = tuple(self.pure(child, state, frame, known) for child in _value_children(node))
            return opaque(f"{type(node).__name__.lower()}@{_where(node)}", inputs)
        result: Expr = handler(node, state, frame, known)
        return result

    def _pure_Constant(
        self, node: ast.Constant, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        if isinstance(node.value, (bool, int, str)) or node.value is None:
            return Const(node.value)
        return Atom(f"const:{node.value!r}", "shared")

    def _pure_Name(self, node: ast.Name, state: State, frame: Frame, known: dict[int, Expr] | None) -> Expr:
        if node.id in state.env:
            return state.env[node.id]
        if node.id in self.module.globals:
            return self.module.globals[node.id]
        if node.id in ("True", "False", "None"):
            return Const({"True": True, "False": False, "None": None}[node.id])
        qualified = self.local_imports.lookup(node.id)
        if qualified is not None:
            imported = self._imported_value(qualified)
            if imported is not None:
                return imported
        return Atom(f"global:{node.id}", "shared")

    def _imported_value(self, qualified: str) -> Expr | None:
        """A module-level value of another file of the run (`from .env import RANK`, `env.RANK`)
        when it depends on the rank or the process; None otherwise (then the name stays opaque)."""
        if qualified in self._imported_values:
            return self._imported_values[qualified]
        self._imported_values[qualified] = None  # a cycle of imports sees "unknown"
        value = None
        if self.module.project is not None:
            from collcheck.static.engine import remote_value  # the engine owns module loading

            found = remote_value(self.module, qualified)
            if found is not None and any(atom.kind in PER_RANK_KINDS for atom in atoms(found)):
                value = found
        self._imported_values[qualified] = value
        return value

    def _pure_Attribute(
        self, node: ast.Attribute, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        parts = dotted(node)
        if parts:
            key = ".".join(parts)
            if key in state.env:
                return state.env[key]
            if parts[0] == "self" and len(parts) == 2 and frame.class_name:
                attribute = self._class_attribute(frame.class_name, parts[1])
                if attribute is not None:
                    return attribute
            name = qualified_name(node, self.local_imports)
            if name is not None and name.endswith((".group.WORLD", ".GroupMember.WORLD")):
                return Const(None)
            if name is not None and ".ReduceOp." in f".{name}":
                return Const(name.rsplit(".", 1)[-1].upper())
            if name is not None and self.local_imports.lookup(parts[0]) is not None:
                imported = self._imported_value(name)  # `env.RANK` of an imported module
                if imported is not None:
                    return imported
        if node.attr in self.catalog.rank_attributes:
            spec = self.catalog.rank_attributes[node.attr]
            if spec == "group_rank":  # the rank inside the group the attribute is read from
                owner = self.pure(node.value, state, frame, known)
                return groups.local_rank(_group_key(owner, node.value))
            return value_from_spec(spec, f"attr:{node.attr}")
        base = self.pure(node.value, state, frame, known)
        if isinstance(base, Atom) and base.name.startswith("type:"):
            return Atom(f"{base.name}.{node.attr}", "shared")
        if isinstance(base, Atom):
            # Named after the object, not the place it is read: `self.remote` read in two
            # branches is one value (an assignment in between is in `state.env`).
            holder = "self" if base.name.startswith("param:self@") else base.name
            return opaque(f"{holder}.{node.attr}", (base,))
        return opaque(f"{_text(node)}@{_where(node)}", (base,))

    def _class_attribute(self, class_name: str, attribute: str) -> Expr | None:
        found: Expr | None = self._inherited(class_name, attribute, lambda info: info.attributes)
        return found

    def _pure_Subscript(
        self, node: ast.Subscript, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        env_key = _environ_key(node, self.local_imports)
        if env_key is not None:
            return self._environment_value(env_key, node)
        base = self.pure(node.value, state, frame, known)
        if isinstance(node.slice, ast.Slice):
            return self._slice(node, base, state, frame, known)
        index = self.pure(node.slice, state, frame, known)
        if (
            isinstance(base, TupleVal)
            and isinstance(index, Const)
            and isinstance(index.value, int)
            and -len(base.items) <= index.value < len(base.items)
        ):
            return base.items[index.value]
        if (
            isinstance(base, Atom)
            and base.name.startswith(groups.RANKS_PREFIX)
            and isinstance(index, Const)
            and type(index.value) is int
        ):  # get_process_group_ranks(g)[0]: the member whose local rank is 0
            return groups.global_rank_of(base.name[len(groups.RANKS_PREFIX) :], index.value)
        if isinstance(base, GroupVal) and isinstance(index, Const) and isinstance(index.value, str):
            return groups.unknown_group(groups.mesh_dimension_key(base.key, index.value))  # mesh["tp"]
        if isinstance(base, Atom) and isinstance(index, Const) and isinstance(index.value, (str, int)):
            # `cfg["sync"]` read in two branches is one value, like an attribute (see above).
            return opaque(f"item:{base.name}[{index.value!r}]", (base,))
        inputs = [base, *(self.pure(c, state, frame, known) for c in _value_children(node.slice))]
        if index is not None:
            inputs.append(index)
        return opaque(f"item:{_text(node)}@{_where(node)}", tuple(inputs))

    def _environment_value(self, key: str, node: ast.AST) -> Expr:
        spec = self.catalog.rank_env.get(key)
        if spec is not None:
            return value_from_spec(spec, f"env:{key}")
        return Atom(f"env:{key}", "shared")

    def _pure_BinOp(self, node: ast.BinOp, state: State, frame: Frame, known: dict[int, Expr] | None) -> Expr:
        left, right = self.pure(node.left, state, frame, known), self.pure(node.right, state, frame, known)
        op = _BIN_OPS.get(type(node.op))
        if op is None or _is_text(left) or _is_text(right):
            return opaque(f"binop@{_where(node)}", (left, right))
        if isinstance(left, TupleVal) or isinstance(right, TupleVal):
            if op == "+" and isinstance(left, TupleVal) and isinstance(right, TupleVal):
                return TupleVal(left.items + right.items)
            return opaque(f"binop@{_where(node)}", (left, right))
        return BinOp(op, left, right)

    def _pure_UnaryOp(
        self, node: ast.UnaryOp, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        operand = self.pure(node.operand, state, frame, known)
        if isinstance(node.op, ast.Not):
            return negate(operand)
        if isinstance(node.op, ast.USub):
            if isinstance(operand, Const) and isinstance(operand.value, int):
                return Const(-operand.value)
            return BinOp("-", Const(0), operand)
        if isinstance(node.op, ast.UAdd):
            return operand
        return opaque(f"unary@{_where(node)}", (operand,))

    def _pure_BoolOp(
        self, node: ast.BoolOp, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        values = tuple(self.pure(v, state, frame, known) for v in node.values)
        return BoolOp("and" if isinstance(node.op, ast.And) else "or", values)

    def _pure_Compare(
        self, node: ast.Compare, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        parts: list[Expr] = []
        left_node = node.left
        left = self.pure(left_node, state, frame, known)
        for op, right_node in zip(node.ops, node.comparators, strict=False):
            right = self.pure(right_node, state, frame, known)
            parts.append(self._compare(op, left, right, right_node, state, frame, known))
            left = right
        return parts[0] if len(parts) == 1 else BoolOp("and", tuple(parts))

    def _compare(
        self,
        op: ast.cmpop,
        left: Expr,
        right: Expr,
        right_node: ast.expr,
        state: State,
        frame: Frame,
        known: dict[int, Expr] | None,
    ) -> Expr:
        if isinstance(op, (ast.In, ast.NotIn)):
            test = self._membership_test(left, right, right_node, state, frame, known)
            return negate(test) if isinstance(op, ast.NotIn) else test
        name = _COMPARE_OPS.get(type(op))
        if name is None:
            return opaque(f"compare@{_where(right_node)}", (left, right))
        left, right = _numeric_text(left, right), _numeric_text(right, left)
        if isinstance(op, (ast.Is, ast.IsNot)) and right == Const(None):
            left = _none_or_not(left)
        return Compare(name, left, right)

    def _membership_test(
        self,
        item: Expr,
        container: Expr,
        node: ast.expr,
        state: State,
        frame: Frame,
        known: dict[int, Expr] | None,
    ) -> Expr:
        if isinstance(container, TupleVal):
            return Member(item, container.items)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            values = [self.pure(a, state, frame, known) for a in node.args]
            if len(values) == 1:
                return InRange(item, Const(0), values[0])
            if len(values) == 2:
                return InRange(item, values[0], values[1])
        if isinstance(container, GroupVal) and container.members is not None:
            inside = substitute(container.members, {MEMBER: item})
            if container.color is not None:  # this rank's subgroup: same color as the rank
                same = Compare("==", substitute(container.color, {RANK: item}), container.color)
                return conjoin((inside, same))
            return inside
        if item == RANK and not is_rank_dependent(container):
            # `rank in self.ranks`: a membership test, the same atom wherever that collection is read.
            return groups.membership(_group_key(container, node))
        return opaque(f"in@{_where(node)}", (item, container))

    def _pure_IfExp(self, node: ast.IfExp, state: State, frame: Frame, known: dict[int, Expr] | None) -> Expr:
        test = self.pure(node.test, state, frame, known)
        then, orelse = self.pure(node.body, state, frame, known), self.pure(node.orelse, state, frame, known)
        truth = constant_truth(test)
        if truth is not None:
            return then if truth else orelse
        return IfExp(test, then, orelse)

    def _pure_Tuple(
        self, node: ast.Tuple | ast.List, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        if any(isinstance(e, ast.Starred) for e in node.elts):
            return opaque(f"seq@{_where(node)}", tuple(self.pure(e, state, frame, known) for e in node.elts))
        return TupleVal(tuple(self.pure(e, state, frame, known) for e in node.elts))

    _pure_List = _pure_Tuple

    def _pure_NamedExpr(
        self, node: ast.NamedExpr, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        value = self.pure(node.value, state, frame, known)
        state.env[node.target.id] = value
        return value

    def _pure_Call(self, node: ast.Call, state: State, frame: Frame, known: dict[int, Expr] | None) -> Expr:
        name = qualified_name(node.func, self.local_imports)
        args = [self.pure(a, state, frame, known) for a in node.args]
        where = _where(node)
        if name is not None:
            special = self._known_call(name, node, args, state, frame, known)
            if special is not None:
                return special
        if isinstance(node.func, ast.Name):
            builtin = self._builtin_call(node.func.id, node, args, state, frame, known)
            if builtin is not None:
                return builtin
        if isinstance(node.func, ast.Attribute):
            method = node.func.attr
            on_group = self._group_method(node, state, frame, known)
            if on_group is not None:
                return on_group
            receiver_type = self._type_of(node.func.value, state)
            produced = self.catalog.types.get(f"{receiver_type}.{method}") if receiver_type else None
            if produced is not None:  # `accelerator.prepare(model)`: a catalogued method's result type
                return Atom(f"type:{produced or receiver_type}@{where}", "shared")
            if method in self.catalog.rank_methods and not node.args:
                return value_from_spec(self.catalog.rank_methods[method], f"method:{method}@{where}")
            receiver = self.pure(node.func.value, state, frame, known)
            if method == "get" and isinstance(node.func.value, ast.Attribute):
                env_name = qualified_name(node.func.value, self.local_imports)
                if (
                    env_name == "os.environ"
                    and args
                    and isinstance(args[0], Const)
                    and isinstance(args[0].value, str)
                ):
                    return self._environment_value(args[0].value, node)
            if method in VALUE_METHODS:
                inputs = (receiver, *args, *(self.pure(k.value, state, frame, known) for k in node.keywords))
                return opaque(f"call:{_text(node)}", inputs)
        # Any other call is a black box whose result is taken to be the same on every rank: a rank
        # passed as an argument (a sampler, a device, a constructor) does not make it per-rank.
        # Equal text, equal value: the same helper asked twice answers the same.
        return Atom(f"call:{_text(node)}", "shared")

    def _group_method(
        self, node: ast.Call, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr | None:
        """`group.rank()`, `group.size()`, `mesh.get_local_rank("tp")`, `mesh["tp"].get_group()`:
        a rank's place in a group, the group's size, or a device-mesh dimension's group, all keyed
        by the group so that a condition on them is tied to collectives on that group."""
        assert isinstance(node.func, ast.Attribute)
        method = node.func.attr
        if method not in GROUP_METHODS or self._names_module(node.func.value):
            return None
        receiver = self.pure(node.func.value, state, frame, known)
        if isinstance(receiver, Atom) and receiver.name.startswith("type:"):
            return None  # a catalogued object (an Accelerator, a Trainer): its own rank methods
        key = _group_key(receiver, node.func.value)
        if method in ("rank", "get_rank", "size", "get_world_size"):
            if node.args or node.keywords:
                return None
            return groups.local_rank(key) if method in ("rank", "get_rank") else groups.group_size(key)
        named, dimension = _mesh_dimension(node)
        if not named:
            return None
        mesh_key = groups.mesh_dimension_key(key, dimension)
        if method == "get_group":
            return groups.unknown_group(mesh_key)
        return groups.local_rank(mesh_key)

    def _names_module(self, node: ast.expr) -> bool:
        """`dist.get_rank()` spelled through a module: a function, not a method on a group."""
        parts = dotted(node)
        return parts is not None and self.local_imports.lookup(parts[0]) is not None

    def _known_call(
        self,
        name: str,
        node: ast.Call,
        args: list[Expr],
        state: State,
        frame: Frame,
        known: dict[int, Expr] | None,
    ) -> Expr | None:
        where = _where(node)
        catalog = self.catalog
        if name in catalog.rank_functions:
            spec = catalog.rank_functions[name]
            has_group = any(k.arg == "group" for k in node.keywords) or (
                node.args and spec in ("rank", "world")
            )
            if has_group:
                group = (
                    node.args[0] if node.args else next(k.value for k in node.keywords if k.arg == "group")
                )
                if not (isinstance(group, ast.Constant) and group.value is None):
                    value = self._group(group, state, frame, known or {})
                    if value is None:  # the default (world) group, spelled out
                        return value_from_spec(spec, where)
                    if spec == "rank":
                        return groups.local_rank(value.key)
                    return groups.group_size(value.key)
            return value_from_spec(spec, where)
        if name in GROUP_RANK_TRANSLATORS and len(node.args) == 2 and args[1] == RANK:
            # get_group_rank(group, dist.get_rank()): this rank's rank inside the group.
            value = self._group(node.args[0], state, frame, known or {})
            return RANK if value is None else groups.local_rank(value.key)
        if name in catalog.groups:
            return _catalog_group(catalog.groups[name], catalog.types.get(name, ""))
        if name in GROUP_RANK_LISTS and len(node.args) == 1:
            value = self._group(node.args[0], state, frame, known or {})
            return groups.member_ranks("world" if value is None else value.key)
        if name in catalog.nondeterministic:
            return Atom(f"{name}()@{where}", "nondet", why=catalog.nondeterministic[name])
        if name in ENV_READERS and args and isinstance(args[0], Const) and isinstance(args[0].value, str):
            return self._environment_value(args[0].value, node)
        if name in catalog.types:
            return Atom(f"type:{catalog.types[name] or name}@{where}", "shared")
        return None

    def _builtin_call(
        self,
        name: str,
        node: ast.Call,
        args: list[Expr],
        state: State,
        frame: Frame,
        known: dict[int, Expr] | None,
    ) -> Expr | None:
        if self.local_imports.lookup(name) is not None or name in self.module.functions:
            return None
        if name in PASS_THROUGH and len(args) == 1 and not node.keywords:
            value = args[0]
            if (
                isinstance(value, Const)
                and isinstance(value.value, str)
                and value.value.lstrip("-").isdigit()
            ):
                return Const(int(value.value))
            if name == "bool":
                return Compare("!=", value, Const(0)) if not _is_boolean(value) else value
            return value
        if name in ("min", "max") and len(args) >= 2 and not node.keywords:
            result = args[0]
            for other in args[1:]:
                result = BinOp(name, result, other)
            return result
        if name == "len" and len(args) == 1:
            return self._length(args[0], node)
        if name in ("tuple", "list") and len(args) == 1 and isinstance(args[0], TupleVal):
            return args[0]
        if name in VALUE_BUILTINS:
            keywords = [self.pure(k.value, state, frame, known) for k in node.keywords]
            return opaque(f"call:{_text(node)}", (*args, *keywords))
        return None


# ----------------------------------------------------------------------------- summaries


def _small(value: Expr, limit: int = MAX_KEY_NODES) -> bool:
    """Few enough nodes to hash and compare cheaply (values are DAGs: a tree walk may explode)."""
    stack: list[Expr] = [value]
    seen = 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > limit:
            return False
        if isinstance(node, GroupVal):
            stack.extend(part for part in (node.members, node.color) if part is not None)
        else:
            stack.extend(children(node))
    return True


def _summary_key(
    function: FunctionNode, inner: Frame, bound_self: bool, env: dict[str, Expr], record_events: bool
) -> tuple[Any, ...] | None:
    if not all(_small(value) for value in env.values()):
        return None
    return (function, inner.class_name, bound_self, inner.depth, tuple(env.items()), record_events)


def _snapshot(runner: Extractor) -> Snapshot:
    return frozenset(runner.nested.items()), frozenset(runner.set_names)


def _touch(recordings: list[Recording], runner: Extractor) -> None:
    """`runner` is about to run a helper body: its state is an input of the innermost recording
    (which passes it on to the enclosing ones when done)."""
    if recordings and id(runner) not in recordings[-1].touched:
        recordings[-1].touched[id(runner)] = (runner, _snapshot(runner))


def _branch_answer(test: Expr, negated_own: bool, conds: tuple[Expr, ...]) -> bool | None:
    """What `Extractor._branch` decides for `test` under the caller's condition `conds`, when the
    helper's own conditions hold the test's negation or not (they never hold the test itself)."""
    if test in conds:
        return True
    if negated_own or negate(test) in conds:
        return False
    return None


def _summary_holds(summary: Summary, caller: State, frame: Frame) -> bool:
    """The recorded run would come out the same if run at this call."""
    for runner, before, _ in summary.touched:
        if _snapshot(runner) != before:
            return False
    for function, outside in summary.recursion:
        if frame.stack.count(function) != outside:
            return False
    return all(
        _branch_answer(test, negated_own, caller.conds) == truth
        for test, negated_own, truth in summary.queries
    )


def _pass_on(
    summary: Summary, recording: Recording, caller: State, frame: Frame, loops: tuple[LoopOp, ...]
) -> None:
    """A summary applied inside a run being recorded: what the summary read from outside its call
    is read from outside the recorded run too, unless the recorded run itself decides it."""
    for runner, before, _ in summary.touched:
        recording.touched.setdefault(id(runner), (runner, before))
    own_stack = frame.stack[recording.outer_stack :]
    recording.recursion.extend(
        (function, outside - own_stack.count(function)) for function, outside in summary.recursion
    )
    own = caller.conds[recording.prefix :]
    for test, negated_own, truth in summary.queries:
        if test not in own:
            recording.queries.append((test, negated_own or negate(test) in own, truth))
    recording.loops.extend(loops)  # in this call's terms (rebased when the summary is reused)


def _summarise(
    recording: Recording,
    finals: list[State],
    caller: State,
    inner: Frame,
    steps: int,
    bound_self: bool,
    declared: frozenset[str],
) -> Summary:
    prefix, events = len(caller.conds), len(caller.events)
    results = tuple(
        HelperResult(
            final.conds[prefix:],
            final.events[events:],
            final.exit,
            final.returned,
            tuple(
                (name, value)
                for name, value in final.env.items()
                if (name.startswith("self.") and bound_self) or name in declared
            ),
        )
        for final in finals
    )
    return Summary(
        caller.conds,
        inner.chain,
        results,
        steps,
        tuple(recording.queries),
        tuple(recording.recursion),
        tuple((runner, before, _snapshot(runner)) for runner, before in recording.touched.values()),
        tuple(recording.loops),
    )


# ----------------------------------------------------------------------------- small helpers


# Calls that always return a tensor: `x = torch.empty(n) if not src else t; if x is not None`.
TENSOR_FACTORIES = frozenset(
    f"call:torch.{name}("
    for name in (
        "empty",
        "zeros",
        "ones",
        "full",
        "tensor",
        "as_tensor",
        "rand",
        "randn",
        "arange",
        "empty_like",
        "zeros_like",
        "ones_like",
        "full_like",
        "cat",
        "stack",
    )
)
NOT_NONE = Const("<object>")


def _none_or_not(value: Expr) -> Expr:
    """A value compared with `is None`: a tensor made by a factory is never None (keep None itself,
    and unknowns, as they are)."""
    if isinstance(value, Atom) and value.name.startswith(tuple(TENSOR_FACTORIES)):
        return NOT_NONE
    if isinstance(value, IfExp):
        then, orelse = _none_or_not(value.then), _none_or_not(value.orelse)
        return value if (then, orelse) == (value.then, value.orelse) else IfExp(value.test, then, orelse)
    return value


def _is_text(value: Expr) -> bool:
    return isinstance(value, Const) and isinstance(value.value, str)


def _is_boolean(value: Expr) -> bool:
    return isinstance(value, (Compare, BoolOp, Not, Member, InRange)) or (
        isinstance(value, Const) and isinstance(value.value, bool)
    )


def _numeric_text(value: Expr, other: Expr) -> Expr:
    """`os.environ["RANK"] == "0"`: compare the rank with the number the string spells."""
    if (
        isinstance(value, Const)
        and isinstance(value.value, str)
        and value.value.lstrip("-").isdigit()
        and is_rank_dependent(other)
    ):
        return Const(int(value.value))
    return value


def _environ_key(node: ast.Subscript, imports: ImportTable) -> str | None:
    name = qualified_name(node.value, imports)
    if name != "os.environ":
        return None
    if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    return None


def _value_children(node: ast.AST) -> list[ast.expr]:
    return [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr)]


@lru_cache(maxsize=4096)
def _global_names(function: FunctionNode) -> frozenset[str]:
    return frozenset(
        name for node in ast.walk(function) if isinstance(node, ast.Global) for name in node.names
    )


@lru_cache(maxsize=65536)
def _calls_in_order(node: ast.expr) -> tuple[ast.Call, ...]:
    """Calls in evaluation order (arguments before the call), skipping lambdas and comprehensions."""
    order: list[ast.Call] = []

    def visit(current: ast.AST) -> None:
        if isinstance(current, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        for child in ast.iter_child_nodes(current):
            visit(child)
        if isinstance(current, ast.Call):
            order.append(current)

    visit(node)
    return tuple(order)


def _map_arguments(call: ast.Call, spec: OpSpec) -> dict[str, ast.expr]:
    args: dict[str, ast.expr] = {}
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if index < len(spec.params):
            args[spec.params[index]] = arg
    for keyword in call.keywords:
        if keyword.arg is not None:
            args[keyword.arg] = keyword.value
    return args


def _group_choice(value: Expr) -> bool:
    """A group argument chosen among the default group (None) and group values by conditions."""
    if isinstance(value, IfExp):
        return _group_choice(value.then) and _group_choice(value.orelse)
    return isinstance(value, GroupVal) or (isinstance(value, Const) and value.value is None)


def _normalise_reduce_op(value: Expr | None) -> Expr:
    if value is None:
        return Const("SUM")
    if isinstance(value, Const) and isinstance(value.value, str):
        return Const(value.value.upper())
    return value


# Errors that come from a rank's own data or files, and so can happen on some ranks only. Control
# flow exceptions (StopIteration), bare `except:` and `Exception` are not taken as such: they mostly
# guard code that behaves the same everywhere, and reporting them would bury real findings.
DATA_ERRORS = frozenset(
    {
        "OSError",
        "IOError",
        "FileNotFoundError",
        "PermissionError",
        "EOFError",
        "UnicodeDecodeError",
        "JSONDecodeError",
        "ValueError",
        "KeyError",
        "IndexError",
        "UnidentifiedImageError",
        "DecompressionBombError",
        "ConnectionError",
        "TimeoutError",
        "CorruptedDataError",
        # Memory runs out on one rank first: a longer sequence, a fuller cache, another process.
        "OutOfMemoryError",
        "MemoryError",
    }
)
# The text a handler checks to single out an out-of-memory RuntimeError (`"out of memory" in str(e)`).
OUT_OF_MEMORY_TEXT = re.compile(r"out\s*of\s*memory|\boom\b", re.IGNORECASE)


def _catches_data_errors(handler: ast.ExceptHandler, classes: Mapping[str, ClassInfo]) -> bool:
    """The handler catches an error one rank can hit alone: a data or I/O error (or a class of the
    module derived from one), running out of memory, or a RuntimeError whose text it checks for
    "out of memory"."""
    if handler.type is None:
        return False
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    for item in types:
        parts = dotted(item)
        if not parts:
            continue
        if _is_data_error(parts[-1], classes, depth=0):
            return True
        if parts[-1] == "RuntimeError" and _checks_out_of_memory(handler):
            return True
    return False


def _is_data_error(name: str, classes: Mapping[str, ClassInfo], depth: int) -> bool:
    if name in DATA_ERRORS:
        return True
    info = classes.get(name)
    if info is None or depth > 8:
        return False
    return any(_is_data_error(base.rsplit(".", 1)[-1], classes, depth + 1) for base in info.bases)


def _checks_out_of_memory(handler: ast.ExceptHandler) -> bool:
    return any(
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and OUT_OF_MEMORY_TEXT.search(node.value)
        for node in ast.walk(handler)
    )


def _exits(body: Sequence[ast.stmt]) -> bool:
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Continue, ast.Break, ast.Return)):
                return True
    return False


def _iterations_alike(stmt: ast.For | ast.AsyncFor | ast.While, body: list[State], frame: Frame) -> bool:
    """Every iteration that communicates issues the same collectives with the same arguments: one
    sequence of plain collectives, whose calls in the loop body mention neither the loop variable
    nor anything the body reassigns (a `src=peer`, a `chunks[i]`, a counter carried over)."""
    sequences = [state.events for state in body if state.events]
    if not sequences or any(events != sequences[0] for events in sequences):
        return False
    variant = _loop_variant_names(stmt)
    calls = {
        (n.lineno, n.col_offset): n for part in stmt.body for n in ast.walk(part) if isinstance(n, ast.Call)
    }
    depth = len(frame.chain)
    for event in sequences[0]:
        if not isinstance(event, CommEvent) or event.kind != "collective":
            return False
        if event.chain[:depth] != frame.chain:
            return False
        direct = len(event.chain) == depth
        line, column = (
            (event.line, event.column) if direct else (event.chain[depth].line, event.chain[depth].column)
        )
        call = calls.get((line, column))
        if call is None or _mentions(call, variant):
            return False
        if not direct and not _fixed_arguments(event, variant):
            return False
    return True


def _fixed_arguments(event: CommEvent, variant: set[str]) -> bool:
    """A collective issued by a helper: its root, op and group are literals or groups created
    somewhere, and the loop changes no attribute the helper could read."""
    if any("." in name for name in variant):
        return False
    terms = (event.root, event.reduce_op, event.peer, event.ranks_arg, event.group_term)
    if not all(term is None or isinstance(term, Const) for term in terms):
        return False
    return event.group is None or event.group.created


def _loop_variant_names(stmt: ast.For | ast.AsyncFor | ast.While) -> set[str]:
    """Names whose value may change from one iteration to the next: the loop targets and what the
    body assigns, except a name assigned once, unconditionally, from loop-invariant names and not
    read before that assignment (`buf = torch.zeros(n)`)."""
    variant = set(assigned_names([stmt.target])) if isinstance(stmt, (ast.For, ast.AsyncFor)) else set()
    stores: dict[str, int] = {}
    for part in stmt.body:
        for node in ast.walk(part):
            for name in _stored_names(node):
                stores[name] = stores.get(name, 0) + 1
    read: set[str] = set()
    for part in stmt.body:
        target = part.targets[0] if isinstance(part, ast.Assign) and len(part.targets) == 1 else None
        if isinstance(part, ast.Assign) and isinstance(target, ast.Name):
            carried = target.id in read or target.id in _read_names(part.value)  # `x = x + 1`
            once = stores.get(target.id) == 1 and not carried
            if not once or _mentions(part.value, variant):
                variant.add(target.id)
        else:
            variant.update(name for node in ast.walk(part) for name in _stored_names(node))
        read.update(_read_names(part))
    return variant


def _stored_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return [node.id]
    if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
        parts = dotted(node) if isinstance(node, ast.Attribute) else dotted(node.value)
        return [".".join(parts)] if parts else []
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        # Dotted like an attribute: state that a helper called from the body could read.
        return [*node.names, *(f"<global>.{name}" for name in node.names)]
    return []


def _read_names(node: ast.AST) -> set[str]:
    names: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            names.add(child.id)
        elif isinstance(child, ast.Attribute):
            parts = dotted(child)
            if parts:
                names.add(".".join(parts))
    return names


def _mentions(node: ast.AST, names: set[str]) -> bool:
    """`node` reads one of `names`, or an attribute of one (`x` covers `x.grad`)."""
    for read in _read_names(node):
        parts = read.split(".")
        if any(".".join(parts[: i + 1]) in names for i in range(len(parts))):
            return True
    return False


def _unroll(trip: Expr, body: list[State], outer: State, after: State, record: bool) -> list[State] | None:
    """`for _ in range(2): barrier()` is two barriers: unroll short constant loops with one path."""
    count = fold(trip)
    if not isinstance(count, Const) or not isinstance(count.value, int) or count.value > 8:
        return None
    if len(body) != 1 or body[0].exit is not None:
        return None
    if record:
        after.events = (*outer.events, *(body[0].events * count.value))
    return [after]


def _merge_envs(states: list[State]) -> dict[str, Expr]:
    merged = dict(states[0].env)
    for state in states[1:]:
        for key, value in state.env.items():
            if merged.get(key) != value:
                merged[key] = opaque(f"merged:{key}", (merged.get(key, Const(None)), value))
    return merged


def _merge_branches(
    state: State, test: Expr, then_states: list[State], else_states: list[State]
) -> list[State] | None:
    """Join two arms that did not communicate or exit: variables become `a if test else b`."""
    if len(then_states) != 1 or len(else_states) != 1:
        return None
    then, orelse = then_states[0], else_states[0]
    if then.exit is not None or orelse.exit is not None:
        return None
    if then.events != state.events or orelse.events != state.events:
        return None
    merged = State(dict(state.env), state.conds, state.events)
    for key in set(then.env) | set(orelse.env):
        a, b = then.env.get(key), orelse.env.get(key)
        if a == b and a is not None:
            merged.env[key] = a
        elif a is not None and b is not None:
            merged.env[key] = IfExp(test, a, b)
        else:
            merged.env[key] = opaque(f"maybe:{key}", (test, a or b or Const(None)))
    return [merged]


def _collapse_returns(caller: State, results: list[tuple[State, Expr]]) -> list[tuple[State, Expr]]:
    """A helper whose paths did not communicate differently is one result: `r1 if c1 else r2`."""
    if len(results) <= 1:
        return results
    if any(state.events != caller.events or state.exit is not None for state, _ in results):
        return results
    value = results[-1][1]
    for state, returned in reversed(results[:-1]):
        extra = state.conds[len(caller.conds) :]
        value = IfExp(conjoin(extra), returned, value) if extra else returned
    merged = caller.fork()
    return [(merged, value)]


CALLBACK_OP = "callback"


def _callback_event(call: ast.Call, path: str, frame: Frame) -> CommEvent:
    """A call into unknown code with a communicating callback: what it issues, and how often,
    is unknown (an `opaque` event; divergences at or after it are not reported)."""
    return CommEvent(
        op=CALLBACK_OP,
        kind="opaque",
        path=path,
        line=call.lineno,
        column=call.col_offset,
        end_line=call.end_lineno or call.lineno,
        end_column=call.end_col_offset or call.col_offset,
        chain=frame.chain,
    )


def _lazy_initialisation(stmt: ast.If, mutable_globals: set[str]) -> bool:
    """`if X is None:` (or `if not X:`) whose body assigns X, X a module global that functions
    rebind or an attribute of `self`: a value created on first use and cached."""
    test = stmt.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is):
        right = test.comparators[0]
        if not (isinstance(right, ast.Constant) and right.value is None):
            return False
        target = test.left
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        target = test.operand
    else:
        return False
    wanted = _cached_name(target)
    if wanted is None or (not wanted.startswith("self.") and wanted not in mutable_globals):
        return False
    return any(
        isinstance(node, ast.Assign) and any(_cached_name(t) == wanted for t in node.targets)
        for statement in stmt.body
        for node in ast.walk(statement)
    )


def _cached_name(node: ast.expr) -> str | None:
    """`X` or `self.x`: where a lazily created value is kept."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    return None


def _memo_lookup(stmt: ast.If) -> bool:
    """`if key in cache: return cache[key]` or `if key not in cache: cache[key] = ...` (also as
    the last part of an `and`: `if cache is not None and key in cache:`)."""
    test = stmt.test
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        test = test.values[-1]
    if not (
        isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.In, ast.NotIn))
    ):
        return False
    cache = test.comparators[0]
    if not isinstance(cache, (ast.Name, ast.Attribute)) or not stmt.body:
        return False
    entry = f"{ast.unparse(cache)}[{ast.unparse(test.left)}]"
    if isinstance(test.ops[0], ast.In):
        last = stmt.body[-1]
        return isinstance(last, ast.Return) and last.value is not None and ast.unparse(last.value) == entry
    return any(
        isinstance(node, ast.Assign) and any(ast.unparse(target) == entry for target in node.targets)
        for node in stmt.body
    )
