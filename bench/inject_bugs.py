"""Recall of `collcheck check` on bugs injected into real code nobody here wrote.

    python bench/inject_bugs.py [--packages torch,accelerate,...] [--per-kind 4] [--seed 0]
                                [--time-budget 900] [--out results.json] [--corpus PATH ...]

Corpora: the installed torch tree (found with `importlib.util.find_spec`, never imported) and
accelerate, lightning, deepspeed, megatron-core and transformers, fetched with
`pip download --no-deps` into `~/.cache/collcheck-bench/inject/` and unpacked there (wheels are
zips, sdists tarballs; only `*.py` members with safe relative names are written). `--corpus PATH`
adds a local folder instead (the tests use it). Nothing third-party is ever imported or run here
(but note: for a package with no wheel on PyPI, deepspeed today, `pip download` itself runs the
package's build backend to read its metadata).

For each package:

  1. its `*.py` files are copied into a scratch folder with a `pyproject.toml` that puts
     collcheck's cache inside that folder; a baseline run fills the cache and gives the findings
     on unmodified code;
  2. collective call sites are found with `ast`: expression statements and plain assignments in a
     function body whose value calls a torch.distributed collective (`dist.X`,
     `torch.distributed.X`, an imported name) or a framework wrapper (deepspeed.comm, accelerate,
     lightning strategies/fabric, megatron's tensor-parallel mappings, transformers' helpers);
     each is classified as direct or wrapper and as passing a process group or not. Statements
     already under a rank-dependent condition (`if rank == 0:` ...) are left out: there a guard
     may be a no-op and an early return dead code;
  3. sites are sampled with a fixed seed (`--per-kind` per package and mutation kind, spread over
     the direct/wrapper x group/no-group strata) and each mutation is written as a text edit at
     the statement's lines (indentation kept; the mutated file must still parse):
        rank_guard      `if torch.distributed.get_rank() == 0:` around the statement
        early_return    `if torch.distributed.get_rank() == 1: return` before it
        rank_loop       `for _cc_i in range(torch.distributed.get_rank() + 1):` around it
        swap            two adjacent different collective statements A; B become
                        `if get_rank() == 0: A; B` / `else: B; A`
        raise_on_rank   `if torch.distributed.get_rank() == 1: raise RuntimeError(...)` before it
        helper_guard    `if _cc_first_of(torch.distributed.get_rank()):` around it, with
                        `def _cc_first_of(worker_id): return worker_id % 4 == 0` appended
        helper_loop     `for _cc_i in range(_cc_share_of(torch.distributed.get_rank())):` around
                        it, the helper computing the count from its argument with math.ceil
        *_group         rank_guard / early_return / rank_loop with the call's own group rank,
                        `torch.distributed.get_rank(group=<the call's group>)`, at calls that
                        pass a group
        object_method, object_parameter, init_attribute_guard
                        the collective reached through a method of a local object or of a
                        helper's annotated parameter, or guarded by an attribute an injected
                        class's `__init__` stores from the rank (bench/object_mutants.py)
     (`import torch.distributed` is added after the module's docstring and `__future__` imports
     when the module does not already `import torch` or `import torch.distributed`);
  4. `collcheck check <package> --format json -j 2` runs on the scratch copy with only the mutated
     file changed (warm cache: only that file and its dependents are analysed again; the file is
     restored, with its modification time, afterwards). `--verify-cache K` re-runs the first K
     mutants of each package with `--no-cache` and reports any difference;
  5. a bug is FOUND when a finding that is not in the baseline (compared as code, path, function
     and message with the numbers taken out) lies in the mutated function's lines; new findings
     elsewhere are recorded as collateral. For a miss the reason is taken from collcheck's own
     notes (what `-v` prints: a function skipped at a path limit, a solver that gave up, a file
     error) and, failing those, from collcheck's model of the mutated file (the file ruled out by
     the cross-file index, the function not seen as communicating, or analysed with no divergence),
     with what about the site may explain it (an `except` handler, a function-local import).

The time budget bounds the mutant runs, shared equally by the packages that are left; fetching
and each package's cold baseline come on top.

Output: a table of recall per mutation kind, per package, direct vs wrapper and group vs no
group, then the misses (file:line, kind, reason); `--out` writes everything as JSON.
Not a test: exit status 0 whatever the recall (1 only when nothing could be measured).
"""

from __future__ import annotations

import argparse
import ast
import datetime
import itertools
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import CACHE, PackageSpec, copy_python_files, fetch, python_files
from measured_checkout import source_state
from object_mutants import object_edit

REPO = Path(__file__).resolve().parents[1]
MAX_PARSE_BYTES = 2 * 1024 * 1024  # a file larger than this is not searched for sites
RUN_TIMEOUT_S = 600.0


# --- packages --------------------------------------------------------------------------------------


PACKAGES: dict[str, PackageSpec] = {
    spec.name: spec
    for spec in (
        PackageSpec("torch", None, "torch"),
        PackageSpec("accelerate", "accelerate", "accelerate"),
        PackageSpec("lightning", "lightning", "lightning"),
        PackageSpec("deepspeed", "deepspeed", "deepspeed"),
        PackageSpec("megatron-core", "megatron-core", "megatron"),
        PackageSpec("transformers", "transformers", "transformers"),
    )
}


# --- call sites ------------------------------------------------------------------------------------

# torch.distributed collectives and point-to-point calls, with the position of their `group`
# argument (torch's signatures; deepspeed.comm keeps the same order).
TORCH_GROUP_POSITION: dict[str, int] = {
    "all_reduce": 2,
    "all_reduce_coalesced": 2,
    "all_gather": 2,
    "all_gather_coalesced": 2,
    "all_gather_into_tensor": 2,
    "_all_gather_base": 2,
    "all_gather_object": 2,
    "reduce_scatter": 3,
    "reduce_scatter_tensor": 3,
    "_reduce_scatter_base": 3,
    "broadcast": 2,
    "broadcast_object_list": 2,
    "reduce": 3,
    "gather": 3,
    "gather_object": 3,
    "scatter": 3,
    "scatter_object_list": 3,
    "all_to_all": 2,
    "all_to_all_single": 4,
    "barrier": 0,
    "monitored_barrier": 0,
    "send": 2,
    "recv": 2,
    "isend": 2,
    "irecv": 2,
    "send_object_list": 2,
    "recv_object_list": 2,
    "batch_isend_irecv": 99,  # takes P2POp objects; their groups are not visible at the call
}
TORCH_MODULES = ("torch.distributed", "torch.distributed.distributed_c10d")
DEEPSPEED_MODULES = ("deepspeed.comm", "deepspeed.comm.comm")
DEEPSPEED_EXTRA = ("inference_all_reduce", "allgather_fn", "reduce_scatter_fn")

# Framework functions that issue collectives, by the module they are imported from.
WRAPPER_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "accelerate.utils": (
        "gather",
        "gather_object",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "pad_across_processes",
        "copy_tensor_to_devices",
        "wait_for_everyone",
    ),
    "megatron.core.tensor_parallel": (
        "reduce_from_tensor_model_parallel_region",
        "gather_from_tensor_model_parallel_region",
        "gather_from_sequence_parallel_region",
        "reduce_scatter_to_sequence_parallel_region",
        "all_gather_last_dim_from_tensor_parallel_region",
        "reduce_scatter_last_dim_to_tensor_parallel_region",
        "all_to_all_sp2hp",
        "all_to_all_hp2sp",
        "all_to_all",
        "broadcast_data",
    ),
    "transformers.trainer_pt_utils": ("distributed_concat", "distributed_broadcast_scalars"),
}
WRAPPER_SUBMODULES = (".operations", ".other", ".mappings", ".data", "")
# Where those functions take their process group positionally (megatron's mappings; the others
# take none, or only by keyword).
WRAPPER_GROUP_POSITION: dict[str, int] = {
    "reduce_from_tensor_model_parallel_region": 1,
    "gather_from_tensor_model_parallel_region": 1,
    "gather_from_sequence_parallel_region": 2,
    "reduce_scatter_to_sequence_parallel_region": 1,
    "all_gather_last_dim_from_tensor_parallel_region": 1,
    "reduce_scatter_last_dim_to_tensor_parallel_region": 1,
    "all_to_all_sp2hp": 1,
    "all_to_all_hp2sp": 1,
    "all_to_all": 0,
    "broadcast_data": 3,
}

# Framework methods that issue collectives: method name -> words one of which the receiver's
# text must contain ("" = any receiver).
WRAPPER_METHODS: dict[str, tuple[str, ...]] = {
    "gather": ("accelerator",),
    "reduce": ("accelerator", "strategy"),
    "pad_across_processes": ("accelerator",),
    "gather_for_metrics": ("",),
    "wait_for_everyone": ("",),
    "barrier": ("strategy", "fabric"),
    "broadcast": ("strategy", "fabric"),
    "all_gather": ("strategy", "fabric", "pl_module", "lightning_module"),
    "all_reduce": ("strategy", "fabric"),
    "reduce_boolean_decision": ("",),
}
# `self.X(...)` counts as a wrapper call inside classes whose name ends with one of these
# (lightning's strategies call their own barrier/broadcast; LightningModule its all_gather).
SELF_WRAPPER_CLASSES = ("Strategy", "Fabric", "LightningModule")
GROUP_KEYWORDS = ("group", "process_group", "tp_group")


@dataclass(frozen=True)
class Site:
    """A collective call statement: `line`..`end_line` (1-based), at indentation `indent`, in the
    function `function` (qualified name) defined at `inner_line`. `function_line`..`function_end`
    is the outermost function around it (collcheck's unit of analysis: a module-level function or
    a method; nested functions are followed where they are called). `group` is the source of the
    call's group argument."""

    package: str
    path: str
    line: int
    end_line: int
    indent: str
    call: str
    wrapper: bool
    group: str | None
    function: str
    function_line: int
    function_end: int
    inner_line: int
    context: str = ""

    @property
    def op(self) -> str:
        return self.call.rpartition(".")[2]

    @property
    def stratum(self) -> tuple[bool, bool]:
        return (self.wrapper, self.group is not None)


@dataclass(frozen=True)
class Pair:
    """Two adjacent collective statements of one block (`first` directly before `second`)."""

    first: Site
    second: Site


def module_name(relative: str) -> str:
    parts = relative[: -len(".py")].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_table(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    """Local name -> dotted name for every import in the file (any depth; relative ones resolved
    against `module`)."""
    table: dict[str, str] = {}
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    table[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    table[head] = head
        elif isinstance(node, ast.ImportFrom):
            base = _import_base(node, package)
            for alias in node.names:
                table[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name
    return table


def _import_base(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".") if package else []
    parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
    return ".".join([*parts, *([node.module] if node.module else [])])


def dotted(node: ast.expr, imports: dict[str, str]) -> str | None:
    """`a.b.c` with `a` replaced by what it was imported as; None when the base is not imported."""
    attributes: list[str] = []
    while isinstance(node, ast.Attribute):
        attributes.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in imports:
        return None
    return ".".join([imports[node.id], *reversed(attributes)])


LINE_BREAK = re.compile(r"\r\n|\r|\n")  # the line ends `ast` counts (str.splitlines knows more)


@dataclass(frozen=True)
class SourceText:
    """A file's lines (split as `ast` numbers them), for cheap source segments: `ast.
    get_source_segment` splits the whole file again at every call."""

    lines: list[str]

    @classmethod
    def of(cls, text: str) -> SourceText:
        return cls(LINE_BREAK.split(text))

    def segment(self, node: ast.expr | ast.stmt) -> str:
        start, end = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        first = self.lines[start].encode()
        if start == end:
            return str(first[node.col_offset : node.end_col_offset].decode(errors="replace"))
        last = self.lines[end].encode()[: node.end_col_offset].decode(errors="replace")
        middle = self.lines[start + 1 : end]
        return "\n".join([first[node.col_offset :].decode(errors="replace"), *middle, last])


@dataclass(frozen=True)
class Callee:
    """A recognised collective call: the callee as written, whether it is a framework wrapper, and
    where a positional group argument would be (None: only a `group=` keyword counts)."""

    written: str
    wrapper: bool
    group_position: int | None


def classify_call(
    call: ast.Call, imports: dict[str, str], text: SourceText, class_name: str
) -> Callee | None:
    """What kind of collective call this is, or None when it is not one."""
    name = dotted(call.func, imports)
    if name is not None:
        written = text.segment(call.func)
        module, _, attribute = name.rpartition(".")
        if module in TORCH_MODULES and attribute in TORCH_GROUP_POSITION:
            return Callee(written, False, TORCH_GROUP_POSITION[attribute])
        if module in DEEPSPEED_MODULES and attribute in TORCH_GROUP_POSITION:
            return Callee(written, True, TORCH_GROUP_POSITION[attribute])
        if module in DEEPSPEED_MODULES and attribute in DEEPSPEED_EXTRA:
            return Callee(written, True, None)
        if any(
            module == base + suffix and attribute in names
            for base, names in WRAPPER_FUNCTIONS.items()
            for suffix in WRAPPER_SUBMODULES
        ):
            position = WRAPPER_GROUP_POSITION.get(attribute) if module.startswith("megatron.") else None
            return Callee(written, True, position)
        return None
    if not isinstance(call.func, ast.Attribute) or call.func.attr not in WRAPPER_METHODS:
        return None
    written = text.segment(call.func)
    receiver = text.segment(call.func.value).lower()
    if receiver == "self":
        return Callee(written, True, None) if class_name.endswith(SELF_WRAPPER_CLASSES) else None
    words = WRAPPER_METHODS[call.func.attr]
    return Callee(written, True, None) if any(word in receiver for word in words) else None


def group_argument(call: ast.Call, callee: Callee, text: SourceText) -> str | None:
    """The source of the call's process-group argument (None when absent or a literal None)."""
    for keyword in call.keywords:
        if keyword.arg in GROUP_KEYWORDS:
            return _not_none(keyword.value, text)
    position = callee.group_position
    if (
        position is None
        or position >= len(call.args)
        or any(isinstance(argument, ast.Starred) for argument in call.args[: position + 1])
    ):
        return None
    return _not_none(call.args[position], text)


def _not_none(node: ast.expr, text: SourceText) -> str | None:
    if isinstance(node, ast.Constant) and node.value is None:
        return None
    return text.segment(node)


def statement_call(statement: ast.stmt) -> ast.Call | None:
    """The call an expression statement or a plain assignment makes, else None."""
    if isinstance(statement, (ast.Expr, ast.Assign, ast.AnnAssign)):
        return statement.value if isinstance(statement.value, ast.Call) else None
    return None


def stands_alone(statement: ast.stmt, lines: list[str]) -> bool:
    """The statement has its lines to itself: only indentation before it, only a comment after."""
    end_line = statement.end_lineno or statement.lineno
    before = lines[statement.lineno - 1][: statement.col_offset]
    after = lines[end_line - 1].encode()[statement.end_col_offset or 0 :].decode(errors="replace")
    return not before.strip() and (not after.strip() or after.strip().startswith("#"))


@dataclass
class Sites:
    """Collective call sites, the adjacent pairs among them, and the collective statements left
    out because they run under a rank-dependent condition already."""

    sites: list[Site] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)
    rank_dependent: list[Site] = field(default_factory=list)

    def extend(self, other: Sites) -> None:
        self.sites += other.sites
        self.pairs += other.pairs
        self.rank_dependent += other.rank_dependent


def find_sites(package: str, relative: str, text: str) -> Sites:
    """The collective call sites of one file."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return Sites()
    module = module_name(relative)
    imports = import_table(tree, module, relative.endswith("__init__.py"))
    finder = _SiteFinder(package, relative, SourceText.of(text), imports)
    finder.visit(tree)
    return Sites(finder.sites, finder.pairs, finder.rank_dependent)


class _SiteFinder(ast.NodeVisitor):
    def __init__(self, package: str, path: str, text: SourceText, imports: dict[str, str]):
        self.package, self.path, self.text, self.imports = package, path, text, imports
        self.lines = text.lines
        self.scope: list[str] = []
        self.classes: list[str] = []
        self.functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        self.sites: list[Site] = []
        self.pairs: list[Pair] = []
        self.rank_dependent: list[Site] = []  # collective statements under a rank-dependent condition
        self.guarded_functions: set[int] = set()  # nested functions defined under such a condition

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.functions.append(node)
        for block in _blocks(node, self.text, id(node) in self.guarded_functions):
            self._block(block)
            if block.rank_dependent:
                # A function defined under `if rank == 0:` runs on those ranks only: a rank
                # guard in it may be a no-op too.
                self.guarded_functions.update(
                    id(item)
                    for item in block.statements
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                )
        self.generic_visit(node)
        self.functions.pop()
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _block(self, block: Block) -> None:
        previous: Site | None = None
        for statement in block.statements:
            site = self._site(statement, block.in_handler)
            if site is not None and block.rank_dependent:
                # Under `if rank == 0:` a rank guard may be a no-op and an early return on rank 1
                # dead code: not an injected bug for sure, so not a site.
                self.rank_dependent.append(site)
                site = None
            if site is not None:
                self.sites.append(site)
            if (
                site is not None
                and previous is not None
                and site.op != previous.op
                and _may_cross(previous, site)
            ):
                self.pairs.append(Pair(previous, site))
            previous = site

    def _site(self, statement: ast.stmt, in_handler: bool) -> Site | None:
        call = statement_call(statement)
        if call is None or not stands_alone(statement, self.lines):
            return None
        callee = classify_call(call, self.imports, self.text, self.classes[-1] if self.classes else "")
        if callee is None:
            return None
        unit = self.functions[0]
        site = Site(
            package=self.package,
            path=self.path,
            line=statement.lineno,
            end_line=statement.end_lineno or statement.lineno,
            indent=self.lines[statement.lineno - 1][: statement.col_offset],
            call=callee.written,
            wrapper=callee.wrapper,
            group=group_argument(call, callee, self.text),
            function=".".join(self.scope),
            function_line=unit.lineno,
            function_end=unit.end_lineno or unit.lineno,
            inner_line=self.functions[-1].lineno,
            context=_context(call, self.functions[0], in_handler),
        )
        return site


def _may_cross(first: Site, second: Site) -> bool:
    """Swapping the two calls can hang: they share a group, or one of them is on the world group
    (every rank of the other's group is in it). Two different groups may share a single rank (a
    pipeline and a data-parallel group of one grid): then either order completes, and the swap is
    a change of the values computed, not a hang, so not a mutant this harness counts."""
    return first.group is None or second.group is None or first.group == second.group


@dataclass(frozen=True)
class Block:
    """A statement list of a function, whether it runs under a rank-dependent condition of the
    function, and whether it is (inside) an `except` handler."""

    statements: list[ast.stmt]
    rank_dependent: bool = False
    in_handler: bool = False


def _blocks(
    function: ast.FunctionDef | ast.AsyncFunctionDef, text: SourceText, guarded: bool = False
) -> Iterator[Block]:
    """The statement lists of a function body, nested compound statements included (but not those
    of nested functions or classes: they are visited as functions of their own). `guarded`: the
    function itself is defined under a rank-dependent condition."""
    stack = [Block(function.body, guarded)]
    while stack:
        block = stack.pop()
        yield block
        for statement in block.statements:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            guarded = block.rank_dependent or _rank_dependent(statement, text)
            for name in ("body", "orelse", "finalbody"):
                inner = getattr(statement, name, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    stack.append(Block(inner, guarded, block.in_handler))
            for handler in getattr(statement, "handlers", []):
                stack.append(Block(handler.body, guarded, True))
            for case in getattr(statement, "cases", []):
                stack.append(Block(case.body, guarded, block.in_handler))


def _context(call: ast.Call, unit: ast.FunctionDef | ast.AsyncFunctionDef, in_handler: bool) -> str:
    """What about the site may explain a miss: an `except` handler, a function-local import."""
    notes = ["in an except handler"] if in_handler else []
    base = call.func
    while isinstance(base, ast.Attribute):
        base = base.value
    local = {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(unit)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    if isinstance(base, ast.Name) and base.id in local:
        notes.append("callee imported inside the function")
    return ", ".join(notes)


# Words of a condition that make the block under it run on some ranks only (as far as a
# text match can tell: `if rank == 0`, `if accelerator.is_main_process`, `if is_pipeline_last_stage()`).
RANK_WORDS = re.compile(
    r"rank|main_process|master|is_main|global_zero|local_zero|first_stage|last_stage|process_index", re.I
)


def _rank_dependent(statement: ast.stmt, text: SourceText) -> bool:
    """The statement's condition, loop bounds, context managers or match subject mention a rank."""
    heads: list[ast.expr] = []
    if isinstance(statement, (ast.If, ast.While)):
        heads.append(statement.test)
    elif isinstance(statement, (ast.For, ast.AsyncFor)):
        heads.append(statement.iter)
    elif isinstance(statement, (ast.With, ast.AsyncWith)):
        heads.extend(item.context_expr for item in statement.items)
    elif isinstance(statement, ast.Match):
        heads.append(statement.subject)
    return any(RANK_WORDS.search(text.segment(head)) for head in heads)


# --- mutations -------------------------------------------------------------------------------------


class Kind(str, Enum):
    RANK_GUARD = "rank_guard"
    EARLY_RETURN = "early_return"
    RANK_LOOP = "rank_loop"
    SWAP = "swap"
    RAISE_ON_RANK = "raise_on_rank"
    RANK_GUARD_GROUP = "rank_guard_group"
    EARLY_RETURN_GROUP = "early_return_group"
    RANK_LOOP_GROUP = "rank_loop_group"
    HELPER_GUARD = "helper_guard"
    HELPER_LOOP = "helper_loop"
    OBJECT_METHOD = "object_method"
    OBJECT_PARAMETER = "object_parameter"
    INIT_ATTRIBUTE_GUARD = "init_attribute_guard"


OBJECT_KINDS = (Kind.OBJECT_METHOD, Kind.OBJECT_PARAMETER, Kind.INIT_ATTRIBUTE_GUARD)  # object_mutants.py
SITE_KINDS = (
    Kind.RANK_GUARD,
    Kind.EARLY_RETURN,
    Kind.RANK_LOOP,
    Kind.RAISE_ON_RANK,
    Kind.HELPER_GUARD,
    Kind.HELPER_LOOP,
    *OBJECT_KINDS,
)
# Kinds whose rank reaches the statement through a helper appended to the module: it is handed
# the rank as an argument (its parameter is not named like one), so only data flow links them.
HELPERS: dict[Kind, tuple[str, ...]] = {
    Kind.HELPER_GUARD: ("def _cc_first_of(worker_id):", "    return worker_id % 4 == 0"),
    Kind.HELPER_LOOP: (
        "def _cc_share_of(worker_id, parts=4):",
        "    return math.ceil((worker_id + 1) / parts) + worker_id",
    ),
}
GROUP_KINDS = (Kind.RANK_GUARD_GROUP, Kind.EARLY_RETURN_GROUP, Kind.RANK_LOOP_GROUP)
RANK = "torch.distributed.get_rank()"


@dataclass(frozen=True)
class Mutant:
    """A mutated file: `text`, and where the mutated function now lies in it."""

    kind: Kind
    site: Site
    text: str
    function_line: int
    function_end: int
    inner_line: int
    partner: Site | None = None


def rank_expression(kind: Kind, site: Site) -> str:
    if kind in GROUP_KINDS:
        return f"torch.distributed.get_rank(group={site.group})"
    return RANK


def _indented(lines: list[str], extra: str = "    ") -> list[str]:
    return [extra + line if line.strip() else line for line in lines]


def edit_lines(kind: Kind, site: Site, statement: list[str], partner: list[str] | None) -> list[str]:
    """The lines that replace the statement's (for a swap: both statements')."""
    indent, rank = site.indent, rank_expression(kind, site)
    if kind in (Kind.RANK_GUARD, Kind.RANK_GUARD_GROUP):
        return [f"{indent}if {rank} == 0:", *_indented(statement)]
    if kind in (Kind.EARLY_RETURN, Kind.EARLY_RETURN_GROUP):
        return [f"{indent}if {rank} == 1:", f"{indent}    return", *statement]
    if kind in (Kind.RANK_LOOP, Kind.RANK_LOOP_GROUP):
        return [f"{indent}for _cc_i in range({rank} + 1):", *_indented(statement)]
    if kind is Kind.RAISE_ON_RANK:
        return [f"{indent}if {rank} == 1:", f'{indent}    raise RuntimeError("injected")', *statement]
    if kind is Kind.HELPER_GUARD:
        return [f"{indent}if _cc_first_of({rank}):", *_indented(statement)]
    if kind is Kind.HELPER_LOOP:
        return [f"{indent}for _cc_i in range(_cc_share_of({rank})):", *_indented(statement)]
    assert partner is not None
    return [
        f"{indent}if {rank} == 0:",
        *_indented(statement),
        *_indented(partner),
        f"{indent}else:",
        *_indented(partner),
        *_indented(statement),
    ]


def import_line(tree: ast.Module) -> int | None:
    """The 0-based line before which `import torch.distributed` goes, or None when the module
    already binds `torch` with `torch.distributed` reachable."""
    for node in tree.body:
        if isinstance(node, ast.Import) and any(
            alias.asname is None and alias.name in ("torch", "torch.distributed") for alias in node.names
        ):
            return None
    after = 0
    for node in tree.body:
        is_docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and after == 0
        is_future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (is_docstring or is_future):
            break
        after = node.end_lineno or node.lineno
    return after


def mutate(kind: Kind, site: Site, text: str, partner: Site | None = None) -> Mutant | None:
    """The mutated file, or None when the result does not parse."""
    lines = LINE_BREAK.split(text)
    statement = lines[site.line - 1 : site.end_line]
    last = partner.end_line if partner is not None else site.end_line
    other = lines[partner.line - 1 : partner.end_line] if partner is not None else None
    try:
        insert_at = import_line(ast.parse(text))
        edited = (
            object_edit(kind.value, statement, site.indent, RANK, text, site.line)
            if kind in OBJECT_KINDS
            else (edit_lines(kind, site, statement, other), [])
        )
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if edited is None:
        return None
    replacement, appended = edited
    added = len(replacement) - (last - site.line + 1)
    new = [*lines[: site.line - 1], *replacement, *lines[last:], *appended]
    shift = 0
    if insert_at is not None:
        new.insert(insert_at, "import torch.distributed  # injected")
        shift = 1 if insert_at < site.function_line else 0
    if kind in HELPERS:  # after everything: the mutated function's lines do not move
        new += ["", "", "import math  # injected", "", "", *HELPERS[kind]]
    mutated = "\n".join(new) + "\n"
    try:
        ast.parse(mutated)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return Mutant(
        kind,
        site,
        mutated,
        site.function_line + shift,
        site.function_end + shift + added,
        site.inner_line + shift,
        partner,
    )


# --- running collcheck -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """What one collcheck run said: findings, file errors and verbose notes (JSON as printed)."""

    findings: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    notes: list[str]
    seconds: float


def run_collcheck(
    target: Path, cwd: Path, jobs: int, no_cache: bool = False, options: tuple[str, ...] = ()
) -> Report:
    """`collcheck check target` as JSON; `options`: more of its command line (`--extend-select CC008`)."""
    output = cwd / "report.json"
    output.unlink(missing_ok=True)
    command = [sys.executable, "-m", "collcheck", "check", str(target), "--format", "json"]
    command += ["-o", str(output), "-j", str(jobs), "--exit-zero"] + (["--no-cache"] if no_cache else [])
    command += list(options)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    seconds = time.perf_counter() - started
    if not output.exists():
        raise RuntimeError(f"collcheck failed ({done.returncode}): {done.stderr[-2000:]}")
    data = json.loads(output.read_text(encoding="utf-8"))
    return Report(data["findings"], data["errors"], [str(note) for note in data["notes"]], seconds)


def finding_key(finding: dict[str, Any]) -> tuple[str, str, str, str]:
    """A finding without its numbers (lines move when the file is edited)."""
    message = re.sub(r"\d+", "#", str(finding.get("message", "")))
    return (str(finding["code"]), str(finding["path"]), str(finding.get("function") or ""), message)


def new_findings(baseline: Report, mutant: Report) -> list[dict[str, Any]]:
    """Findings of the mutant run beyond those of the baseline (as a multiset of keys)."""
    remaining = Counter(finding_key(finding) for finding in baseline.findings)
    extra = []
    for finding in mutant.findings:
        key = finding_key(finding)
        if remaining[key] > 0:
            remaining[key] -= 1
        else:
            extra.append(finding)
    return extra


@dataclass
class Workspace:
    """A scratch copy of one package: `root` holds pyproject.toml and the cache, `target` the
    package folder analysed."""

    name: str
    root: Path
    target: Path
    baseline: Report | None = None


def prepare(name: str, package: Path, scratch: Path, file_timeout: float | None = None) -> Workspace:
    """`file_timeout`: collcheck's per-file safety clock (`file-timeout`; None or 0: its default,
    which a configuration cannot turn off). Results no longer depend on the machine's load (the
    work budgets count work), so only a file the work budgets fail to bound ever reaches it."""
    root = scratch / name
    target = root / package.name
    copy_python_files(package, target)
    settings = '[tool.collcheck]\ncache-dir = ".collcheck_cache"\n'
    if file_timeout:
        settings += f"file-timeout = {file_timeout}\n"
    (root / "pyproject.toml").write_text(settings, encoding="utf-8")
    return Workspace(name, root, target)


def site_path(workspace: Workspace, site: Site) -> Path:
    return workspace.root / site.path


def run_mutant(workspace: Workspace, mutant: Mutant, jobs: int, no_cache: bool = False) -> Report:
    """collcheck on the package with the one file mutated; the file is restored afterwards (its
    modification time too, so that the cross-file index cached for the baseline stays valid)."""
    path = site_path(workspace, mutant.site)
    original = path.read_bytes()
    stat = path.stat()
    try:
        path.write_text(mutant.text, encoding="utf-8")
        return run_collcheck(workspace.target, workspace.root, jobs, no_cache)
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


# --- judging ---------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One mutant's verdict. `reason` explains a miss; `collateral` lists new findings elsewhere."""

    package: str
    kind: str
    path: str
    line: int
    function: str
    call: str
    wrapper: bool
    group: str | None
    found: bool
    codes: list[str] = field(default_factory=list)
    collateral: list[str] = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0
    cache_check: str = ""


def judge(workspace: Workspace, mutant: Mutant, report: Report) -> Outcome:
    assert workspace.baseline is not None
    site = mutant.site
    relative = site.path
    extra = new_findings(workspace.baseline, report)
    inside = [
        finding
        for finding in extra
        if _same_file(str(finding["path"]), relative)
        and mutant.function_line <= int(finding["line"]) <= mutant.function_end
    ]
    outside = [finding for finding in extra if finding not in inside]
    return Outcome(
        package=workspace.name,
        kind=mutant.kind.value,
        path=site.path,
        line=site.line,
        function=site.function,
        call=site.call,
        wrapper=site.wrapper,
        group=site.group,
        found=bool(inside),
        codes=sorted({str(finding["code"]) for finding in inside}),
        collateral=[
            f"{f['code']} {_under(str(f['path']), workspace.root)}:{f['line']} in {f.get('function')}"
            for f in outside
        ],
        seconds=report.seconds,
    )


def _under(path: str, root: Path) -> str:
    """A reported path relative to the workspace (reports name the scratch copy)."""
    prefix = str(root) + os.sep
    return path[len(prefix) :] if path.startswith(prefix) else path


def _same_file(reported: str, relative: str) -> bool:
    return reported == relative or reported.endswith("/" + relative)


def notes_reason(mutant: Mutant, report: Report, relative: str) -> str | None:
    """The miss reason collcheck's own verbose notes and file errors give for the function."""
    for error in report.errors:
        if _same_file(str(error.get("path", "")), relative):
            return f"file error: {_without_numbers(str(error.get('message', '')))}"
    for note in report.notes:
        where = re.match(r"(.+?):(\d+): (.*)", note)
        if where is None or not _same_file(where.group(1), relative):
            continue
        line = int(where.group(2))
        if mutant.function_line <= line <= mutant.function_end:
            return f"note: {_without_numbers(where.group(3)).replace(mutant.site.function, '<function>')}"
    return None


def _without_numbers(text: str) -> str:
    return re.sub(r"\d+", "#", text)


def model_reason(workspace: Workspace, mutant: Mutant) -> str:
    """Why collcheck's model of the mutated file reported nothing in the function, from its cross-
    file index and module model (collcheck internals: if they change, the reason says so)."""
    path = site_path(workspace, mutant.site)
    original = path.read_bytes()
    stat = path.stat()
    try:
        path.write_text(mutant.text, encoding="utf-8")
        return _model_verdict(workspace, path, mutant)
    except Exception as error:  # a diagnostic only: the run goes on
        return f"unknown (model not inspectable: {type(error).__name__})"
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _model_verdict(workspace: Workspace, path: Path, mutant: Mutant) -> str:
    from collcheck import api
    from collcheck.catalog import load_catalog
    from collcheck.config import load_settings
    from collcheck.static import model
    from collcheck.static.module_values import complete_loaded_module

    settings = load_settings([workspace.target], None).with_overrides(jobs=1)
    catalog = load_catalog(Path(p) for p in settings.catalogs)
    files = api.collect_files([workspace.target], settings)
    project = api._project(files, catalog, settings, 1)
    real = os.path.realpath(path)
    if project.indexed(real) and real not in project.selected:
        return "file ruled out by the cross-file index (no collective recognised in it)"
    model._LOADED.clear()
    loader = model.Loader(catalog, project, settings, complete_loaded_module)
    module = loader.load(real)
    if module is None:
        return "file not modelled"
    unit = _function_at(module.tree, mutant.function_line)
    if unit is None or not _is_entry(module, unit):
        return "enclosing function not in collcheck's model (a method of a nested class?)"
    if unit not in module.communicating:
        return "function not seen as communicating (no collective recognised in it)"
    nested = "nested function; " if mutant.inner_line != mutant.function_line else ""
    return f"{nested}analysed, no divergence reported"


def _function_at(tree: ast.Module, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno == line:
            return node
    return None


def _is_entry(module: Any, node: ast.AST) -> bool:
    if node in module.functions.values():
        return True
    return any(node in info.methods.values() for info in module.classes.values())


# --- sampling --------------------------------------------------------------------------------------


def sample(items: Sequence[Any], count: int, rng: random.Random, stratum: Any) -> list[Any]:
    """Up to `count` items, taken in turn from each stratum (shuffled with `rng`), so that a rare
    stratum (wrapper calls with a group, say) is represented."""
    strata: dict[Any, list[Any]] = defaultdict(list)
    for item in items:
        strata[stratum(item)].append(item)
    queues = []
    for key in sorted(strata, key=_stratum_order):
        queue = list(strata[key])
        rng.shuffle(queue)
        queues.append(queue)
    chosen: list[Any] = []
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(queue.pop())
    return chosen


def _stratum_order(key: Any) -> tuple[Any, ...]:
    """(wrapper, group) strata in the order direct, wrapper, direct+group, wrapper+group."""
    return tuple(reversed(key)) if isinstance(key, tuple) else (key,)


def plan(found: Sites, per_kind: int, seed: int, package: str) -> list[tuple[Kind, Site, Site | None]]:
    """The mutants to try for one package: the same sampled sites for every site kind."""
    rng = random.Random(f"{seed}:{package}")
    sites = found.sites
    chosen = sample(sites, per_kind, rng, lambda site: site.stratum)
    grouped = sample([site for site in sites if site.group], per_kind, rng, lambda site: site.wrapper)
    swapped = sample(found.pairs, per_kind, rng, lambda pair: pair.first.wrapper)
    Planned = list[tuple[Kind, Site, Site | None]]
    by_kind: list[Planned] = []
    by_kind += [[(kind, site, None) for site in chosen] for kind in SITE_KINDS]
    by_kind += [[(kind, site, None) for site in grouped] for kind in GROUP_KINDS]
    by_kind.append([(Kind.SWAP, pair.first, pair.second) for pair in swapped])
    # Round-robin over the kinds, so that a time budget that runs out still covers every kind.
    return [entry for row in itertools.zip_longest(*by_kind) for entry in row if entry is not None]


# --- the run ---------------------------------------------------------------------------------------


@dataclass
class PackageResult:
    name: str
    source: str
    files: int
    sites: int
    group_sites: int
    wrapper_sites: int
    pairs: int
    rank_dependent_sites: int
    baseline_findings: int
    baseline_seconds: float
    baseline_by_code: dict[str, int]
    mutant_seconds: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def scan(workspace: Workspace) -> tuple[Sites, int]:
    """The sites of every file of the package and the number of files. Paths are relative to the
    workspace root, so they start with the package folder (`accelerate/utils/operations.py`), as
    module names do. Files over MAX_PARSE_BYTES, or naming no collective, are not parsed."""
    found = Sites()
    files = python_files(workspace.target)
    for path in files:
        if path.stat().st_size > MAX_PARSE_BYTES:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if COLLECTIVE_WORDS.search(text) and CONTEXT_WORDS.search(text):
            found.extend(find_sites(workspace.name, path.relative_to(workspace.root).as_posix(), text))
    return found, len(files)


# A file that names no collective, or no module a collective could come from, cannot hold a site
# (the cheap prefilter before `ast.parse`).
CONTEXT_WORDS = re.compile(
    r"distributed|deepspeed|comm|accelerat|strategy|fabric|megatron|tensor_parallel|trainer_pt"
)
COLLECTIVE_WORDS = re.compile(
    "|".join(
        sorted(
            {*TORCH_GROUP_POSITION, *DEEPSPEED_EXTRA, *WRAPPER_METHODS}
            | {name for names in WRAPPER_FUNCTIONS.values() for name in names}
        )
    )
)


def run_package(
    spec: PackageSpec, args: argparse.Namespace, scratch: Path, seconds: float
) -> PackageResult | None:
    """Fetch, copy, scan and baseline one package, then run its sampled mutants for at most
    `seconds` (the baseline is not counted: on a busy machine it alone can take minutes)."""
    try:
        package, source = fetch(spec, args.cache)
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        log(f"{spec.name}: not fetched: {error}")
        return None
    workspace = prepare(spec.name, package, scratch, args.file_timeout)
    try:
        found, files = scan(workspace)
        workspace.baseline = run_collcheck(workspace.target, workspace.root, args.jobs)
        result = package_result(spec.name, source, files, found, workspace.baseline)
        started = time.monotonic()
        planned = plan(found, args.per_kind, args.seed, spec.name)
        run_mutants(workspace, planned, args, started + seconds, result)
        result.mutant_seconds = round(time.monotonic() - started, 1)
    finally:
        shutil.rmtree(workspace.root, ignore_errors=True)
    return result


def package_result(name: str, source: str, files: int, found: Sites, baseline: Report) -> PackageResult:
    sites = found.sites
    result = PackageResult(
        name=name,
        source=source,
        files=files,
        sites=len(sites),
        group_sites=sum(1 for site in sites if site.group),
        wrapper_sites=sum(1 for site in sites if site.wrapper),
        pairs=len(found.pairs),
        rank_dependent_sites=len(found.rank_dependent),
        baseline_findings=len(baseline.findings),
        baseline_seconds=round(baseline.seconds, 2),
        baseline_by_code=dict(sorted(Counter(str(f["code"]) for f in baseline.findings).items())),
    )
    log(
        f"{name}: {files} files, {len(sites)} sites ({result.group_sites} with a group, "
        f"{result.wrapper_sites} wrappers; {result.rank_dependent_sites} more under a rank condition, "
        f"left out), {result.pairs} pairs; baseline {result.baseline_findings} findings in "
        f"{baseline.seconds:.1f} s"
    )
    return result


def run_mutants(
    workspace: Workspace,
    planned: list[tuple[Kind, Site, Site | None]],
    args: argparse.Namespace,
    deadline: float,
    result: PackageResult,
) -> None:
    verified = 0
    for kind, site, partner in planned:
        if time.monotonic() > deadline:
            result.skipped.append(f"{kind.value} {site.path}:{site.line} (time budget)")
            continue
        outcome = try_mutant(workspace, kind, site, partner, args, verify=verified < args.verify_cache)
        if outcome is None:
            result.skipped.append(f"{kind.value} {site.path}:{site.line} (mutant does not parse)")
            continue
        verified += 1 if outcome.cache_check else 0
        result.outcomes.append(outcome)
        verdict = "FOUND" if outcome.found else "miss "
        where = f"{outcome.path}:{outcome.line}"
        log(f"  {outcome.kind:<19} {where} {verdict} {outcome.seconds:.1f}s {outcome.reason}")


def try_mutant(
    workspace: Workspace, kind: Kind, site: Site, partner: Site | None, args: argparse.Namespace, verify: bool
) -> Outcome | None:
    text = site_path(workspace, site).read_text(encoding="utf-8", errors="replace")
    mutant = mutate(kind, site, text, partner)
    if mutant is None:
        return None
    report = run_mutant(workspace, mutant, args.jobs)
    outcome = judge(workspace, mutant, report)
    if verify:
        cold = judge(workspace, mutant, run_mutant(workspace, mutant, args.jobs, no_cache=True))
        same = (cold.found, cold.codes, sorted(cold.collateral)) == (
            outcome.found,
            outcome.codes,
            sorted(outcome.collateral),
        )
        outcome.cache_check = "same as --no-cache" if same else f"DIFFERS from --no-cache: {asdict(cold)}"
    if not outcome.found:
        relative = site.path
        outcome.reason = (
            notes_reason(mutant, report, relative)
            or ("collateral only: " + "; ".join(outcome.collateral) if outcome.collateral else "")
            or model_reason(workspace, mutant)
        ) + (f" [site {site.context}]" if site.context else "")
    return outcome


# --- the table -------------------------------------------------------------------------------------


def recall(outcomes: Iterable[Outcome]) -> str:
    items = list(outcomes)
    if not items:
        return "-"
    found = sum(1 for outcome in items if outcome.found)
    return f"{found}/{len(items)} ({100 * found / len(items):.0f}%)"


def table(title: str, rows: list[tuple[str, list[Outcome]]]) -> list[str]:
    out = [f"{title:<32} recall"]
    out += [f"  {label:<30} {recall(items)}" for label, items in rows]
    return out


def summary_lines(results: list[PackageResult]) -> list[str]:
    outcomes = [outcome for result in results for outcome in result.outcomes]
    lines = ["package        files  sites  group  wrapper  pairs  rank-cond  baseline findings  baseline s"]
    lines += [
        f"{r.name:<14} {r.files:>5}  {r.sites:>5}  {r.group_sites:>5}  {r.wrapper_sites:>7}  {r.pairs:>5}  "
        f"{r.rank_dependent_sites:>9}  {r.baseline_findings:>17}  {r.baseline_seconds:>10.1f}"
        for r in results
    ]
    lines.append("")
    lines += table("by mutation kind", [(k.value, [o for o in outcomes if o.kind == k.value]) for k in Kind])
    lines += table("by package", [(r.name, r.outcomes) for r in results])
    lines += table(
        "by call",
        [
            ("direct torch.distributed", [o for o in outcomes if not o.wrapper]),
            ("framework wrapper", [o for o in outcomes if o.wrapper]),
            ("passes a group", [o for o in outcomes if o.group]),
            ("no group", [o for o in outcomes if not o.group]),
            ("group, global-rank kinds", [o for o in outcomes if o.group and not o.kind.endswith("_group")]),
            ("group, group-rank kinds", [o for o in outcomes if o.kind.endswith("_group")]),
        ],
    )
    lines += table("all", [("all mutants", outcomes)])
    lines.append("")
    lines += kind_by_package(results)
    return lines


def kind_by_package(results: list[PackageResult]) -> list[str]:
    names = [result.name for result in results]
    lines = ["kind x package".ljust(20) + "".join(f"{name[:13]:>14}" for name in names)]
    for kind in Kind:
        cells = []
        for result in results:
            items = [outcome for outcome in result.outcomes if outcome.kind == kind.value]
            found = sum(1 for outcome in items if outcome.found)
            cells.append(f"{found}/{len(items)}" if items else "-")
        lines.append(f"{kind.value:<20}" + "".join(f"{cell:>14}" for cell in cells))
    return lines


def miss_lines(results: list[PackageResult]) -> list[str]:
    misses = [outcome for result in results for outcome in result.outcomes if not outcome.found]
    lines = [f"misses ({len(misses)}), by reason:"]
    reasons = Counter(_reason_class(outcome.reason) for outcome in misses)
    lines += [f"  {count:>4}  {reason}" for reason, count in reasons.most_common()]
    lines.append("")
    lines.append("misses:")
    for outcome in misses:
        where = "wrapper" if outcome.wrapper else "direct"
        group = f" group={outcome.group}" if outcome.group else ""
        lines.append(
            f"  {outcome.path}:{outcome.line} {outcome.kind} [{where} {outcome.call}{group}] "
            f"in {outcome.function}: {outcome.reason}"
        )
    return lines


def _reason_class(reason: str) -> str:
    return reason.split(": ", 1)[0] if reason.startswith("collateral only") else reason


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--packages", default=None, help=f"comma-separated, from {', '.join(PACKAGES)}")
    parser.add_argument("--corpus", action="append", type=Path, default=[], help="a local package folder")
    parser.add_argument("--per-kind", type=int, default=4, help="mutants per package and kind (default 4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--time-budget",
        type=float,
        default=900.0,
        help="seconds for the mutants, shared by the packages (fetching and baselines not counted)",
    )
    parser.add_argument("--jobs", "-j", type=int, default=2)
    parser.add_argument(
        "--file-timeout",
        type=float,
        default=None,
        help="collcheck's per-file safety clock in seconds (at most 1000; default: collcheck's)",
    )
    parser.add_argument("--verify-cache", type=int, default=1, help="mutants per package also run --no-cache")
    parser.add_argument("--cache", type=Path, default=CACHE, help=f"download folder (default {CACHE})")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    return parser.parse_args(argv)


def selected_specs(args: argparse.Namespace) -> list[PackageSpec]:
    local = [PackageSpec(path.name, None, path.name, local=path) for path in args.corpus]
    if args.packages is None:
        return local or list(PACKAGES.values())
    names = [name.strip() for name in args.packages.split(",") if name.strip()]
    unknown = [name for name in names if name not in PACKAGES]
    if unknown:
        raise SystemExit(f"unknown package(s): {', '.join(unknown)} (known: {', '.join(PACKAGES)})")
    return [PACKAGES[name] for name in names] + local


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    specs = selected_specs(args)
    started = time.monotonic()
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    header = (
        f"collcheck injected-bug recall, {now}, "
        f"seed {args.seed}, per-kind {args.per_kind}, -j {args.jobs}, collcheck {source_state()}"
    )
    if args.file_timeout is not None:
        header += f", file-timeout {args.file_timeout:g}"
    log(header)
    results: list[PackageResult] = []
    with tempfile.TemporaryDirectory(prefix="collcheck-inject-") as scratch:
        left = args.time_budget
        for index, spec in enumerate(specs):
            # Each package gets an equal share of what is left, so the last ones are not starved.
            result = run_package(spec, args, Path(scratch), left / (len(specs) - index))
            if result is not None:
                results.append(result)
                left -= result.mutant_seconds
    lines = [header, "", *summary_lines(results), "", *miss_lines(results)]
    skipped = [item for result in results for item in result.skipped]
    lines.append(f"\nnot run: {len(skipped)} mutants" + (f" ({skipped[0]}, ...)" if skipped else ""))
    lines.append(f"took {time.monotonic() - started:.0f} s")
    print("\n".join(lines))
    if args.out is not None:
        data = {
            "header": header,
            "seed": args.seed,
            "per_kind": args.per_kind,
            "packages": [asdict(r) for r in results],
        }
        args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0 if any(result.outcomes for result in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
