"""Slicing (collcheck/static/slicing.py): statements that call nothing that needs running, cannot
exit, and write nothing a kept statement reads are stepped over, one step a path for each run of
them, so long main loops fit in the full analysis; what they leave out changes no finding."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from collcheck.api import check_paths
from collcheck.config import load_settings
from collcheck.findings import RunResult
from collcheck.static import interpret
from collcheck.static.over_budget import budget_counts
from collcheck.static.slicing import sliced_statements

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _check(path: Path) -> RunResult:
    settings = load_settings([path]).with_overrides(
        jobs=1, cache=False, project_context=False, file_timeout=0
    )
    return check_paths([path], settings)


def _sliced_lines(source: str, properties: frozenset[str] = frozenset(), calls: bool = False) -> list[int]:
    """The lines of the statements sliced away for good, or (`calls`) of those stepped over only
    where none of their calls needs running (a collective always does)."""
    function = ast.parse(source).body[-1]
    assert isinstance(function, ast.FunctionDef)
    sliced = sliced_statements(function, properties)
    return sorted(stmt.lineno for stmt, held in sliced.items() if bool(held) == calls)


@pytest.mark.parametrize(("name", "line"), [("sliced_main_loop", 216), ("sliced_epoch_logging", 200)])
def test_main_loop_fixtures_are_analysed_in_full_and_their_helper_decided_hang_found(
    name: str, line: int
) -> None:
    """fixtures/budget/sliced_*: 32 live paths times the bookkeeping went over the step budget (the
    reduced mode then dropped the hang, decided in the helper's lines); sliced, the full analysis
    fits: the hang is found and the fixed twin is quiet."""
    bug = _check(FIXTURES / "budget" / f"{name}_bug.py")
    assert [(f.code, f.location.line) for f in bug.findings] == [("CC001", line)]
    assert budget_counts(bug.notes) == (0, 0), bug.notes
    fixed = _check(FIXTURES / "budget" / f"{name}_fixed.py")
    assert fixed.findings == [] and budget_counts(fixed.notes) == (0, 0), fixed.notes


SOURCE = '''
def fit(self, loader, cfg):
    """Docstring."""
    seen = 0
    best = None
    rank = dist.get_rank()
    for batch in loader:
        seen += 1
        if best is None or seen < best:
            best = seen
        logger.info("step")
        total = seen * 2
        width = total + 1
        if rank == 0:
            dist.all_reduce(batch)
'''


def test_bookkeeping_nothing_kept_reads_is_sliced() -> None:
    """The docstring, the counter, the best-so-far `if` (and what it holds), the log call and the
    chain that feeds nothing kept; the rank, the loop and the guarded collective are kept."""
    assert _sliced_lines(SOURCE) == [3, 4, 5, 8, 9, 10, 12, 13]
    assert _sliced_lines(SOURCE, calls=True) == [11, 15]


def test_what_a_kept_statement_reads_is_kept_with_its_writers() -> None:
    """The collective reads `width`: the chain `seen` -> `total` -> `width` is kept (a fixpoint);
    a call's arguments are read where the call might run (`logger.info(best)` keeps `best`, and
    is itself stepped over where it calls nothing that needs running)."""
    source = SOURCE.replace("dist.all_reduce(batch)", "dist.all_reduce(width)").replace(
        'logger.info("step")', "logger.info(best)"
    )
    assert _sliced_lines(source) == [3]
    assert _sliced_lines(source, calls=True) == [11, 15]


@pytest.mark.parametrize(
    ("statement", "why"),
    [
        ("self.count = 1", "an attribute of a parameter outlives the call"),
        ("flags.append(1)", "a container method changes the container"),
        ("raise_now = exit_code", "kept below: read by the return"),
        ("(w := 3)", "an assignment expression"),
        ("leak = lambda: seen", "code of its own"),
        ("value = self.ready", "a property getter runs code"),
    ],
)
def test_what_is_never_sliced(statement: str, why: str) -> None:
    source = f"""
def step(self, flags, exit_code):
    seen = 1
    {statement}
    if flags:
        dist.barrier()
    return raise_now if False else None
"""
    everything = _sliced_lines(source, frozenset({"ready"})) + _sliced_lines(
        source, frozenset({"ready"}), True
    )
    assert 4 not in everything, why


def test_a_function_that_reads_its_namespace_by_name_is_not_sliced() -> None:
    source = "def f(x):\n    unused = 1\n    dist.all_reduce(locals()['x'])\n"
    assert _sliced_lines(source) == [] and _sliced_lines(source, calls=True) == []


def test_exits_and_forks_are_never_sliced() -> None:
    source = """
def f(cfg):
    if cfg:
        return
    for item in cfg:
        break
    while cfg:
        continue
"""
    assert _sliced_lines(source) == []


@pytest.mark.parametrize(
    "name",
    [
        "CC001/barrier_rank0_bug.py",
        "CC001/config_flag_both_branches_bug.py",
        "budget/many_ifs_trainer_bug.py",
        "budget/long_loop_body_bug.py",
    ],
)
def test_slicing_changes_no_finding_or_note(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same findings (counterexamples included) and notes with slicing turned off."""
    path = FIXTURES / name
    sliced = _check(path)
    monkeypatch.setattr(interpret, "sliced_statements", lambda function, properties: {})
    unsliced = _check(path)
    assert sliced.findings and sliced.findings == unsliced.findings
    assert sliced.notes == unsliced.notes
