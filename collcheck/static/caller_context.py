"""Helpers judged where their file calls them: a helper's own finding that none of its callers has.

In: one record per root the engine ran in a file (`RootRun`: the function, whether its run and its
queries were complete, the collectives it reached through each helper it ran inlined, the places
of its candidates' origins), the file's tree, and the candidates. Out: the candidates kept.

Why: every function that reaches a collective is also analysed on its own, its parameters
unknown (a group handed in is a group of unknown membership, whose rank list differs between two
groups of its name). Where the file calls the function, its callers run it inlined with what they
hand it (`interpret._parameter_value` takes a rank-named parameter at its word only when no call
is visible, for the same reason): a group that a caller has established spans the world
(asserted.py), a rank the caller computed. When every caller of the file that reaches the
helper's collective runs it without a divergence there, the divergence of the helper run alone
is one of the unknown parameters only, not of the program, and it is not reported.

What keeps it sound for the file: the helper is private to its file by the language's convention
(`_name`, or the constructor of a `_Class`): a public function is there for callers this file does
not show (another file, another project, a `__main__` self-test), and its own finding stands; the
helper's name is used in the file only as the callee of calls (a name also handed on as a value,
put in a table, mapped over, is called in ways no root shows); at least one other root reached
the origin's collective through a call of it; every root of the file ran in full (no reduced
mode, no work or solver budget cut, no root left out), so a caller that would have found the
divergence did; and none of those callers has a candidate at that place, of any rule. A private
helper imported by another file is used there as that file hands it: such a caller does not
count on the helper's file to report it (engine._standalone_origins).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from collcheck.static.loader import FunctionNode
from collcheck.static.program import CommEvent, LoopEvent, Region
from collcheck.static.rulebook import Candidate
from collcheck.static.syntax import called_names

Place = tuple[str, int]  # (path, line) of a collective


@dataclass(frozen=True)
class RootRun:
    """One root's run: `through` maps each helper it ran inlined, by (name, defining path), to the
    places of the collectives it reached inside that call; `found` holds its candidates."""

    function: FunctionNode | None  # None: the module body
    class_name: str | None
    complete: bool
    through: dict[tuple[str, str], frozenset[Place]]
    found: tuple[Candidate, ...]
    origins: frozenset[Place]  # where `found` arise


def root_run(
    function: FunctionNode | None,
    class_name: str | None,
    complete: bool,
    regions: Iterable[Region],
    found: list[Candidate],
) -> RootRun:
    """The record of one root's run (`complete`: in full, within its budgets)."""
    through: dict[tuple[str, str], set[Place]] = {}
    for region in regions:
        for path in region.paths:
            for event in path.events:
                comm = event.first if isinstance(event, LoopEvent) else event
                if not isinstance(comm, CommEvent):
                    continue
                for site in comm.chain:
                    through.setdefault((site.callee, site.callee_path), set()).add((comm.path, comm.line))
    reached = {helper: frozenset(places) for helper, places in through.items()}
    origins = frozenset((candidate.origin[1], candidate.origin[2]) for candidate in found)
    return RootRun(function, class_name, complete, reached, tuple(found), origins)


def judged_in_callers(
    runs: list[RootRun], every_root_ran: bool, tree: ast.Module, path: str
) -> list[Candidate]:
    """The runs' candidates, less a root's own finding that its file's callers do not have
    (module doc)."""
    if not every_root_ran or not all(run.complete for run in runs):
        return [candidate for run in runs for candidate in run.found]
    called = _only_called_names(tree)
    kept: list[Candidate] = []
    for run in runs:
        if run.function is None or not _called(run.function, run.class_name, called):
            kept.extend(run.found)
            continue
        key = (run.function.name, path)
        for candidate in run.found:
            place = (candidate.origin[1], candidate.origin[2])
            callers = [other for other in runs if other is not run and place in other.through.get(key, ())]
            # A caller that found any divergence may report this one at its own call site (where
            # its ranks part): the helper's own finding then stays, where it arises.
            if not callers or any(place in caller.origins or caller.found for caller in callers):
                kept.append(candidate)
    return kept


def may_be_judged_in_file(function: FunctionNode, qualified_name: str, tree: ast.Module) -> bool:
    """Whether the function's own findings may be left out where it is defined, its file's callers
    judging them (`judged_in_callers`): a caller in another file must then not count on them being
    reported there."""
    parts = qualified_name.split(".")
    class_name = parts[-2] if len(parts) > 1 else None
    return _called(function, class_name, _only_called_names(tree))


def _called(function: FunctionNode, class_name: str | None, called: frozenset[str]) -> bool:
    """The function is private to its file and called there by name only (a constructor through
    its class's name)."""
    if function.name == "__init__":
        return class_name is not None and _private(class_name) and class_name in called
    return _private(function.name) and function.name in called


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def _only_called_names(tree: ast.Module) -> frozenset[str]:
    """The names the module calls (`f(...)`, `obj.f(...)`) and uses in no other way: a name also
    read as a value (`{"k": f}`, `map(f, xs)`, `getattr(obj, "f")`) is called where no root shows."""
    callees: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callees.add(id(node.func))
    other_uses: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in callees:
            other_uses.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and id(node) not in callees:
            other_uses.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            other_uses.add(node.value)  # `getattr(self, "name")`, a dispatch table of names
    return frozenset(name for name in called_names(tree) if name not in other_uses)
