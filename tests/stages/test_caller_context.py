"""Stage `caller_context`: a root's own finding at a collective that the file's other roots reach
through a call of it without a finding there is left to them; kept when a caller has it, when no
caller reaches it, when the function is not called in its file, and when some run was cut short."""

from __future__ import annotations

import ast

from collcheck.findings import Finding, Location, Severity
from collcheck.static.caller_context import RootRun, judged_in_callers, root_run
from collcheck.static.program import CommEvent, EventKind, Path, Region, RegionKind, Site
from collcheck.static.rulebook import Candidate

SOURCE = """
def _regroup(group):
    return new_group(ranks_of(group))


def build(group):
    return _regroup(group)
"""
TREE = ast.parse(SOURCE)
HELPER, CALLER = (node for node in TREE.body if isinstance(node, ast.FunctionDef))
CREATE_LINE = 3


def _candidate(function: str) -> Candidate:
    finding = Finding(
        "CC004", Severity.ERROR, Location("m.py", CREATE_LINE), "rank-dependent ranks", (), None, function
    )
    return Candidate(finding, ("CC004", "m.py", CREATE_LINE), ())


def _region(chain: tuple[Site, ...]) -> Region:
    event = CommEvent("new_group", EventKind.GROUP_CREATE, "m.py", CREATE_LINE, 11, CREATE_LINE, 40, chain)
    return Region("f", RegionKind.FUNCTION, [Path((), (event,))])


THROUGH_HELPER = (Site("build", "_regroup", "m.py", 7, 11, "m.py"),)


def _runs(caller_found: bool = False, complete: bool = True) -> list[RootRun]:
    helper = root_run(HELPER, None, True, [_region(())], [_candidate("_regroup")])
    found = [_candidate("build")] if caller_found else []
    caller = root_run(CALLER, None, complete, [_region(THROUGH_HELPER)], found)
    return [helper, caller]


def _kept(runs: list[RootRun], every_root_ran: bool = True, tree: ast.Module = TREE) -> set[str]:
    return {candidate.finding.function for candidate in judged_in_callers(runs, every_root_ran, tree, "m.py")}


def test_a_helper_finding_its_callers_do_not_have_is_left_to_them() -> None:
    assert _kept(_runs()) == set()


def test_a_caller_with_the_finding_keeps_the_helpers() -> None:
    assert _kept(_runs(caller_found=True)) == {"_regroup", "build"}


def test_a_run_cut_short_keeps_everything() -> None:
    assert _kept(_runs(complete=False)) == {"_regroup"}
    assert _kept(_runs(), every_root_ran=False) == {"_regroup"}


def test_a_helper_no_other_root_reaches_keeps_its_finding() -> None:
    helper = root_run(HELPER, None, True, [_region(())], [_candidate("_regroup")])
    caller = root_run(CALLER, None, True, [_region(())], [])  # the collective, but not through it
    assert _kept([helper, caller]) == {"_regroup"}


def test_a_function_the_file_does_not_call_keeps_its_finding() -> None:
    uncalled = ast.parse(SOURCE.replace("return _regroup(group)", "return None"))
    assert _kept(_runs(), tree=uncalled) == {"_regroup"}
