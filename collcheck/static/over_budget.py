"""What the engine does with a function (or module body) over the work budget.

In: the interpreter, a call that runs the function in it, where it is (for the notes and cuts).
Out: its regions, from the full analysis (when its plain run goes over `max_steps`/`max_paths`, a
second run that joins the paths parted by settings alone: `HelperInliner.joining`) or, when that
goes over too, from the reduced mode (`fallback.py`: paths joined, inert statements cheap), or,
over that too, from the reduced mode with its communicating helpers taken as unknown collectives
(`opaque_helpers`: they are roots of their own; what precedes the first of them is still
compared), or None when all go over; then,
for a reduced-mode run, the regions worth solving (`owning_a_split`) and the findings kept
(`decided_in`): those the function itself decides, every condition that parts the ranks in its
own lines. A divergence decided inside a helper is left to the helper, a root of its own that
fits in the full analysis: deep helper chains are where the joined values are least precise
(on torch's `distributed_c10d.py`, `new_group` and its callers would otherwise report the
barrier of `_new_group_with_tag` under conditions on per-rank values the interpreter cannot
follow). Notes say which functions ran reduced or were skipped; `budget_counts` counts them for
`-v`; a skipped function is also a `BudgetCut` (reported without `-v`; `budget-exceeded`). Every
bound here counts work (statements, paths), never time: the same file gives the same answer on
every machine.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from collcheck.findings import Budget, BudgetCut, Finding
from collcheck.static.conditions import ConditionSources
from collcheck.static.fallback import JOIN_SHARE
from collcheck.static.interpret import Interpreter
from collcheck.static.loader import FunctionNode
from collcheck.static.program import Region, RegionKind
from collcheck.static.state import PathLimitExceeded
from collcheck.static.symbolic import Expr, is_rank_dependent

REDUCED_NOTE = "analysed in the reduced mode"  # -v counts the notes with these words
SKIPPED_NOTE = "skipped"


@dataclass(frozen=True)
class Place:
    """Where an analysed function is: its file, the line of its `def` (1 for a module body), and
    its name as the notes give it (`Class.method`, or "module body")."""

    path: str
    line: int
    name: str

    def __str__(self) -> str:
        if self.name == MODULE_BODY:
            return f"{self.path}: {MODULE_BODY}"
        return f"{self.path}:{self.line}: {self.name}"


MODULE_BODY = "module body"


class Mode(Enum):
    """How a function's regions were made: the plain full analysis, its second try with the live
    paths that settings alone part joined (`HelperInliner.joining`), or the reduced mode."""

    FULL = "full"
    JOINED = "full, settings paths joined"
    REDUCED = "reduced"


def run_within_budget(
    extractor: Interpreter,
    run: Callable[[], list[Region]],
    place: Place,
    notes: list[str],
    cuts: list[BudgetCut],
    function: FunctionNode | None = None,
) -> tuple[list[Region], Mode] | None:
    """The regions of `run` (`function`, or the module body when None; at `place`) and the mode
    that made them: the full analysis, its second try with joins when the plain run goes over the
    budget, the reduced mode (fallback.py) when that goes over too; None (a note, and a cut naming
    the budget) when all go over. A function over the budget is remembered: the full analysis of a
    later root gives up at a call to it (inliner.py)."""
    summaries = extractor.summaries
    summaries.widest, summaries.deferred = 0, False
    try:
        return run(), Mode.FULL
    except PathLimitExceeded as limit:
        # Kept past the handler: without its traceback, whose frames (this one among them, which
        # holds it) would make a cycle holding the whole abandoned run until a full collection.
        limit.__traceback__ = None
        first = limit
    # The second try of the full analysis: the live paths that issued the same events under the
    # same rank decisions are joined once a block holds many (settings tests alike on every
    # rank; fallback.join_after). Only now: a function that fits without it keeps its paths as
    # they were, and with them the values its later tests fold (joined values fold less). A
    # plain run whose blocks never held that many, and that did not give up at a call to a
    # root that needed the joins, would run again unchanged: it is not tried.
    if summaries.deferred or summaries.widest > extractor.max_paths // JOIN_SHARE:
        extractor.joining = True
        try:
            regions = run()
        except PathLimitExceeded as limit:
            limit.__traceback__ = None  # as above
        else:
            if function is not None:
                summaries.over_plain_budget.add(function)
            return regions, Mode.JOINED
        finally:
            extractor.joining = False
    if function is not None:
        extractor.summaries.over_budget.add(function)
    note = f"{place} {REDUCED_NOTE}: {first}"
    last = first
    for opaque_helpers in (False, True):
        # The last resort (opaque_helpers): the function's own body, its communicating helpers
        # (roots of their own) taken as unknown collectives: what precedes them is still compared.
        extractor.reduced, extractor.opaque_helpers = True, opaque_helpers
        try:
            regions = run()
        except PathLimitExceeded as limit:
            limit.__traceback__ = None  # as above
            last = limit
            continue
        finally:
            extractor.reduced = extractor.opaque_helpers = False
        if opaque_helpers:
            note += "; over it there too, so its communicating helpers were taken as unknown collectives"
        notes.append(note)
        return regions, Mode.REDUCED
    notes.append(f"{place} {SKIPPED_NOTE}: {first}; in the reduced mode too: {last}")
    limit_value = extractor.max_paths if last.budget is Budget.PATHS else extractor.max_steps
    cuts.append(BudgetCut(place.path, place.line, place.name, last.budget, limit_value))
    return None


def lines_of(function: FunctionNode) -> tuple[int, int]:
    return function.lineno, function.end_lineno or function.lineno


def decided_in(finding: Finding, path: str, lines: tuple[int, int]) -> bool:
    """A finding of the reduced mode is kept when the function (or module body) itself parts the
    ranks: every condition that splits them is in its own `lines` (a region finding: the region
    is). Divergences decided in the helpers it calls are left to those helpers, which are roots of
    their own and analysed in full: deep helper chains are where joined values are least precise."""
    first, last = lines
    example = finding.counterexample
    if example is None:
        return finding.location.path == path and first <= finding.location.line <= last
    return bool(example.why) and all(
        reason.path == path and first <= reason.line <= last for reason in example.why
    )


def decided_on_chain(finding: Finding, path: str, lines: tuple[int, int], tree: ast.Module) -> bool:
    """A finding of the full analysis's second try (`Mode.JOINED`) is kept when every condition that
    parts the ranks is in the function's own `lines` (`decided_in`) or in a function of this file
    through which the diverging collectives are reached (their call chains, or the function that
    issues one): a flag the caller passes a helper that then issues a collective on it.

    A condition decided in a helper that returned before (off every chain) reaches the collective
    only through the values it returned, and those, across helper chains deep enough to need the
    joins, are where joined and inlined values are least precise: torch's `new_group` would
    report the barrier of `_new_group_with_tag` under the membership test of
    `_new_process_group_helper` against a backend test the other rank's path never folded."""
    if decided_in(finding, path, lines):
        return True
    example = finding.counterexample
    if example is None or not example.why:
        return False
    steps = [step for _, trace in example.ranks for step in trace]
    names = {name.rpartition(".")[2] for step in steps for name in step.chain}
    spans = [lines]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            span = lines_of(node)
            issues = any(step.path == path and span[0] <= step.line <= span[1] for step in steps)
            if node.name in names or issues:
                spans.append(span)
    return all(
        reason.path == path and any(first <= reason.line <= last for first, last in spans)
        for reason in example.why
    )


def owning_a_split(
    regions: list[Region], sources: ConditionSources, path: str, lines: tuple[int, int]
) -> list[Region]:
    """The regions of a reduced-mode run that can yield a finding `decided_in` keeps: a loop of the
    function's own body, or a region some path of which takes a rank-dependent test written in the
    function's `lines`. The others are not solved (their divergences would all be dropped)."""
    first, last = lines

    def own(condition: Expr) -> bool:
        hit = sources.lookup(condition)
        return hit is not None and hit[0].path == path and first <= hit[0].line <= last

    def wanted(region: Region) -> bool:
        if region.kind is RegionKind.LOOP and first <= region.line <= last:
            return True
        return any(own(c) and is_rank_dependent(c) for p in region.paths for c in p.conds)

    return [region for region in regions if wanted(region)]


def budget_counts(notes: list[str]) -> tuple[int, int]:
    """How many functions the notes say were analysed in the reduced mode, and how many skipped."""
    reduced = sum(1 for note in notes if f" {REDUCED_NOTE}: " in note)
    skipped = sum(1 for note in notes if f" {SKIPPED_NOTE}: " in note)
    return reduced, skipped
