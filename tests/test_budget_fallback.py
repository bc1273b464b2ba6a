"""A function over the work budget (`max_steps` statements, `max_paths` paths) is analysed in the
reduced mode (collcheck/static/fallback.py) instead of skipped: paths that issued the same
collectives and took the same rank decisions are joined, and statements that call nothing that
communicates cost a fraction of a step. Its findings are those the function itself decides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_support import run

from collcheck.api import check_paths
from collcheck.config import Settings, load_settings
from collcheck.findings import RunResult
from collcheck.static import interpret
from collcheck.static.fallback import RankedConditions, join_paths, join_raised
from collcheck.static.over_budget import budget_counts, decided_in
from collcheck.static.program import Exit, ExitKind
from collcheck.static.state import State
from collcheck.static.symbolic import RANK, Atom, BoolOp, Compare, Const, IfExp, negate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

SHARED = Atom("cfg.flag", "shared")
OTHER = Atom("cfg.other", "shared")
IS_ZERO = Compare("==", RANK, Const(0))


def _check(path: Path) -> RunResult:
    """No safety clock: only the work budgets (they count work, not time) bound the run."""
    settings = load_settings([path]).with_overrides(
        jobs=1, cache=False, project_context=False, file_timeout=0
    )
    return check_paths([path], settings)


def _straight_line_trainer(statements: int, fixed: bool) -> str:
    """A generated-looking trainer method: `statements` lines of bookkeeping that the all_reduce
    reads (so slicing keeps them: slicing.py), then a barrier that only rank 0 issues (or, fixed,
    every rank)."""
    lines = [
        "import torch.distributed as dist",
        "",
        "",
        "class Trainer:",
        "    def fit(self, loss, step):",
        "        rank = dist.get_rank()",
        "        m0 = loss * 1.0",
    ]
    lines.extend(f"        m{i} = m{i - 1} * 0.5 + step" for i in range(1, statements))
    lines.append(f"        dist.all_reduce(loss + m{statements - 1})")
    if fixed:
        lines.extend(["        if rank == 0:", "            print(m0)", "        dist.barrier()"])
    else:
        lines.extend(["        if rank == 0:", "            dist.barrier()"])
    return "\n".join(lines) + "\n"


def test_a_long_straight_line_method_is_analysed_not_skipped(tmp_path: Path) -> None:
    """6,000 executed statements, over the 5,000-step budget: the barrier only rank 0 issues is
    found (it used to be skipped), and the fixed twin is quiet."""
    statements = Settings().max_steps + 1000
    bug = tmp_path / "long_bug.py"
    bug.write_text(_straight_line_trainer(statements, fixed=False), encoding="utf-8")
    fixed = tmp_path / "long_fixed.py"
    fixed.write_text(_straight_line_trainer(statements, fixed=True), encoding="utf-8")
    found = _check(bug)
    barrier_line = statements + 9
    assert [(f.code, f.location.line) for f in found.findings] == [("CC001", barrier_line)]
    assert budget_counts(found.notes) == (1, 0), found.notes
    quiet = _check(fixed)
    assert quiet.findings == [] and budget_counts(quiet.notes) == (1, 0)


@pytest.mark.parametrize("name", ["many_ifs_trainer", "long_loop_body", "settings_arms_main_loop"])
def test_the_budget_fixtures_fit_the_full_analysis_once_settings_paths_are_joined(name: str) -> None:
    """The fixtures under fixtures/budget/ go over the plain full analysis (independent settings
    checks double its paths) and used to run in the reduced mode; its second try joins the paths
    settings alone part (fallback.join_after) and fits: no note (test_fixtures checks what they
    report; settings_arms_main_loop's hang, decided in a helper, only the full analysis finds)."""
    for suffix in ("bug", "fixed"):
        result = _check(FIXTURES / "budget" / f"{name}_{suffix}.py")
        assert budget_counts(result.notes) == (0, 0), result.notes


def test_a_function_over_the_budget_of_the_reduced_mode_too_is_still_skipped(tmp_path: Path) -> None:
    """Paths that part on the rank are never joined: nine independent rank tests, each issuing a
    barrier, make 512 paths in both modes, and the function is skipped with a note (bounded)."""
    tests = "".join(f"    if dist.get_rank() == {i}:\n        dist.barrier()\n" for i in range(9))
    source = tmp_path / "exploding.py"
    source.write_text(f"import torch.distributed as dist\n\n\ndef f():\n{tests}", encoding="utf-8")
    result = _check(source)
    assert result.findings == []
    assert budget_counts(result.notes) == (0, 1), result.notes
    assert "in the reduced mode too" in result.notes[0]


def test_join_paths_joins_paths_that_differ_in_data_decisions_only() -> None:
    """Two live paths with the same (no) events, parted by a test alike on every rank, become one
    path under their common condition; each variable picks its value by that test."""
    start = State({"x": Const(0)}, (IS_ZERO,))
    then, orelse = start.fork(SHARED), start.fork(negate(SHARED))
    then.env["x"] = Const(1)
    joined = join_paths([then, orelse], RankedConditions())
    assert len(joined) == 1
    assert joined[0].conds == (IS_ZERO,)  # flag or not flag: nothing left to require
    assert joined[0].env["x"] == IfExp(SHARED, Const(1), Const(0))


def test_join_paths_keeps_the_disjunction_of_partial_data_decisions() -> None:
    a = State({}, (SHARED, OTHER))
    b = State({}, (negate(SHARED),))
    joined = join_paths([a, b], RankedConditions())
    assert len(joined) == 1
    assert joined[0].conds == (BoolOp("or", (BoolOp("and", (SHARED, OTHER)), negate(SHARED))),)


def test_join_paths_never_joins_rank_decisions_or_ended_paths() -> None:
    rank0, others = State({}, (IS_ZERO,)), State({}, (negate(IS_ZERO),))
    assert join_paths([rank0, others], RankedConditions()) == [rank0, others]
    ended = State({}, (SHARED,))
    ended.exit = object()  # type: ignore[assignment]
    live = State({}, (negate(SHARED),))
    assert join_paths([ended, live], RankedConditions()) == [ended, live]


def _force_reduced_mode(patch: pytest.MonkeyPatch) -> None:
    """Every function runs in the reduced mode, whatever its size."""
    original = interpret.Interpreter.run_function

    def forced(self: interpret.Interpreter, *args: Any, **kwargs: Any) -> Any:
        self.reduced = True
        try:
            return original(self, *args, **kwargs)
        finally:
            self.reduced = False

    patch.setattr(interpret.Interpreter, "run_function", forced)


RULE_FIXTURES = sorted(p for folder in sorted(FIXTURES.glob("CC00*")) for p in folder.glob("*.py"))


def _found(path: Path) -> set[tuple[str, int, str]]:
    return {(f.code, f.location.line, f.message) for f in _check(path).findings}


def test_the_reduced_mode_finds_what_the_full_analysis_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    """On every single-file rule fixture, the reduced mode (forced) reports exactly the findings
    of the full analysis: joining paths loses none and adds none."""
    full = {path: _found(path) for path in RULE_FIXTURES}
    _force_reduced_mode(monkeypatch)
    reduced = {path: _found(path) for path in RULE_FIXTURES}
    assert len(RULE_FIXTURES) >= 60
    assert {p.name: r for p, r in reduced.items() if r != full[p]} == {}


def test_verbose_counts_the_reduced_and_skipped_functions(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bug = tmp_path / "long_bug.py"
    bug.write_text(_straight_line_trainer(Settings().max_steps + 1000, fixed=False), encoding="utf-8")
    code, out, err = run(capsys, "check", str(bug), "--no-cache", "-j", "1", "-v")
    assert code == 1
    assert "budget: 1 functions over the work budget analysed in the reduced mode, 0 skipped" in err
    assert "analysed in the reduced mode: more than" in out
    _, _, quiet = run(capsys, "check", str(bug), "--no-cache", "-j", "1")
    assert "budget:" not in quiet


def _long_function(name: str, statements: int) -> str:
    """A function of `statements` bookkeeping lines that its all_reduce reads (slicing keeps them)."""
    lines = [f"def {name}(cfg, t):", "    m0 = t * 1.0"]
    lines += [f"    m{i} = m{i - 1} * 0.5 + cfg" for i in range(1, statements)]
    return "\n".join([*lines, f"    dist.all_reduce(t + m{statements - 1})"]) + "\n"


def test_a_later_root_calling_a_root_over_the_budget_gives_up_at_the_call(tmp_path: Path) -> None:
    """`caller` alone fits, but the helper it calls went over the budget as a root (its statements,
    which no join shortens): its full analysis stops at the call (it would go over too) and the
    reduced mode runs at once."""
    source = tmp_path / "calls_big.py"
    source.write_text(
        "import torch.distributed as dist\n\n\n"
        + _long_function("big", Settings().max_steps + 100)
        + "\n\ndef caller(cfg, t):\n    big(cfg, t)\n",
        encoding="utf-8",
    )
    notes = _check(source).notes
    assert budget_counts(notes) == (2, 0), notes
    assert any("caller analysed in the reduced mode: calls big, itself over the budget" in n for n in notes)


@pytest.mark.parametrize("fixed", [False, True])
def test_a_caller_of_a_root_that_needed_the_joins_is_analysed_in_full(tmp_path: Path, fixed: bool) -> None:
    """`big` goes over the plain full analysis (ten settings checks that may raise) and fits once its
    settings paths are joined; `caller` gives up at the call in its plain run and inlines `big` in
    its second try: both in full, and the all_reduce `big` issues when the flag `caller` passes says
    so (rank 0 only) is found at the call, a hang decided in `big`'s lines that the reduced mode
    (`decided_in`) dropped. The fixed twin passes a setting: quiet."""
    checks = "".join(
        f"    if cfg[{i}]:\n        if cfg[{i + 100}]:\n            raise ValueError({i})\n"
        for i in range(10)
    )
    flag = "cfg[200]" if fixed else "dist.get_rank() == 0"
    source = tmp_path / "calls_joined.py"
    source.write_text(
        "import torch.distributed as dist\n\n\n"
        f"def big(cfg, t, flag):\n{checks}    if flag:\n        dist.all_reduce(t)\n\n\n"
        f"def caller(cfg, t):\n    big(cfg, t, {flag})\n",
        encoding="utf-8",
    )
    result = _check(source)
    assert budget_counts(result.notes) == (0, 0), result.notes
    assert [(f.code, f.function) for f in result.findings] == ([] if fixed else [("CC001", "caller")])


def test_reduced_mode_findings_are_those_the_function_decides(tmp_path: Path) -> None:
    """`decided_in` keeps a finding for a function when every condition that parts the ranks is
    in its lines: the helper's own finding is decided in the helper, not in a caller."""
    source = tmp_path / "helper.py"
    source.write_text(
        "import torch.distributed as dist\n\n\ndef sync(t):\n    if dist.get_rank() == 0:\n"
        "        dist.barrier()\n    dist.all_reduce(t)\n\n\ndef caller(t):\n    sync(t)\n",
        encoding="utf-8",
    )
    findings = [f for f in _check(source).findings if f.function == "sync"]
    assert len(findings) == 1
    assert decided_in(findings[0], str(source), (4, 7))  # sync's lines
    assert not decided_in(findings[0], str(source), (10, 11))  # caller's lines


def test_over_the_reduced_budget_too_helpers_become_unknown_collectives(tmp_path: Path) -> None:
    """`heavy` parts its paths on the rank at every test, over the path budget in both modes, and
    is skipped; `train` calls it, so it goes over too, and is analysed last with its communicating
    helpers taken as unknown collectives: the barrier only rank 0 issues before the call is found."""
    tests = "".join(f"    if dist.get_rank() == {i}:\n        dist.barrier()\n" for i in range(9))
    source = tmp_path / "heavy_helper.py"
    source.write_text(
        "import torch.distributed as dist\n\n\n"
        f"def heavy(t):\n{tests}\n\n"
        "def train(t):\n    if dist.get_rank() == 0:\n        dist.barrier()\n"
        "    dist.all_reduce(t)\n    heavy(t)\n    dist.all_reduce(t)\n",
        encoding="utf-8",
    )
    result = _check(source)
    lines = source.read_text(encoding="utf-8").splitlines()
    barrier = lines.index("def train(t):") + 3  # the barrier under `if dist.get_rank() == 0:`
    assert [(f.code, f.function, f.location.line) for f in result.findings] == [("CC001", "train", barrier)]
    assert budget_counts(result.notes) == (1, 1), result.notes
    assert any("train analysed in the reduced mode" in n and "unknown collectives" in n for n in result.notes)


def _guarded_configuration(settings: int, fixed: bool) -> str:
    """A trainer's setup: `settings` optional settings, each checked and applied when given (an arm
    that may raise is not merged with the other: the live paths double) and followed by two checks
    that raise on a bad value (every `raise` ends one path for each live path that reaches it),
    then an all_reduce of what the settings made that only rank 0 issues (or, fixed, every rank)."""
    lines = ["import torch.distributed as dist", "", "", "def fit(cfg):", "    size = 1"]
    for i in range(settings):
        lines += [
            f"    if cfg.option{i} is not None:",
            f"        if cfg.option{i} < 0:",
            f"            raise ValueError('option{i}')",
            f"        size = size + cfg.option{i}",
            f"    if cfg.low{i} > cfg.high{i}:",
            f"        raise ValueError('low{i} over high{i}')",
            f"    if cfg.mode{i} not in ('a', 'b'):",
            f"        raise ValueError('mode{i}')",
        ]
    lines += (
        ["    dist.all_reduce(size)"]
        if fixed
        else ["    if dist.get_rank() == 0:", "        dist.all_reduce(size)"]
    )
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("fixed", [False, True])
def test_paths_ended_by_one_raise_are_one_path_in_the_full_analysis(tmp_path: Path, fixed: bool) -> None:
    """Six optional settings make 64 live paths and, before the join, hundreds of paths ended by the
    18 raises (over `max-paths`: the function ran in the reduced mode). A `raise` reached from
    several paths that differ in settings alone ends one path: 18 of them, and the function is
    analysed in full; the all_reduce only rank 0 issues is found, the fixed twin is clean."""
    path = tmp_path / "setup.py"
    path.write_text(_guarded_configuration(6, fixed), encoding="utf-8")
    result = _check(path)
    assert budget_counts(result.notes) == (0, 0), result.notes
    assert [f.code for f in result.findings] == ([] if fixed else ["CC001"])


def test_join_raised_joins_one_raise_after_data_decisions_only() -> None:
    """Ended by the same raise after the same (no) events: one path under the disjunction of the
    settings tests; parted by the rank, or ended by another raise: kept apart; live paths untouched."""
    where = Exit(ExitKind.RAISE, "m.py", 5, 4, raised="ValueError")
    elsewhere = Exit(ExitKind.RAISE, "m.py", 9, 4, raised="ValueError")
    a, b = State({}, (OTHER, SHARED)), State({}, (OTHER, negate(SHARED)))
    ranked_a, ranked_b = State({}, (IS_ZERO,)), State({}, (negate(IS_ZERO),))
    other = State({}, (negate(OTHER),))
    live = State({}, ())
    for state in (a, b, ranked_a, ranked_b):
        state.exit = where
    other.exit = elsewhere
    joined = join_raised([a, live, b, ranked_a, ranked_b, other], RankedConditions())
    assert len(joined) == 5
    assert joined[0].exit == where and joined[0].conds == (OTHER,)  # flag or not flag
    assert joined[1:] == [live, ranked_a, ranked_b, other]
