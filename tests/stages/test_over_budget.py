"""Stage `over_budget`: a function over the work budget — the full analysis, its second try with the
paths settings alone part joined, then the reduced mode, then the reduced mode with its
communicating helpers opaque (`run_within_budget` -> regions and the `Mode` that made them, or
None with a note and a `BudgetCut`); which findings the second try keeps (`decided_on_chain`);
which reduced regions are worth solving (`owning_a_split`) and the notes counted for `-v`
(`budget_counts`)."""

from __future__ import annotations

import ast

from collcheck.findings import (
    Budget,
    BudgetCut,
    ConditionKind,
    Counterexample,
    Finding,
    Location,
    Reason,
    Severity,
    TraceStep,
)
from collcheck.static.interpret import Interpreter
from collcheck.static.over_budget import (
    Mode,
    Place,
    budget_counts,
    decided_on_chain,
    lines_of,
    owning_a_split,
    run_within_budget,
)
from collcheck.static.program import Region
from collcheck.static.state import PathLimitExceeded

from .conftest import module_of

# Many plain assignments (inert: a sixteenth of a step each in the reduced mode), then a rank test.
# They store on a parameter's object, so slicing (static/slicing.py) keeps them: the caller reads it.
WIDE = (
    "def f(t, a):\n"
    + "".join(f"    t.y{i} = a + {i}\n" for i in range(120))
    + ("    if dist.get_rank() == 0:\n        dist.barrier()\n")
)


def run(
    body: str, max_steps: int
) -> tuple[tuple[list[Region], Mode] | None, list[str], list[BudgetCut], Interpreter]:
    module = module_of(body, complete=True)
    interpreter = Interpreter(module, max_steps=max_steps)
    function = module.functions["f"]
    notes: list[str] = []
    cuts: list[BudgetCut] = []
    result = run_within_budget(
        interpreter,
        lambda: interpreter.run_function(function, None, "f"),
        Place("m.py", function.lineno, "f"),
        notes,
        cuts,
        function,
    )
    return result, notes, cuts, interpreter


def test_a_function_within_the_budget_is_analysed_in_full() -> None:
    result, notes, cuts, _ = run(WIDE, max_steps=10_000)
    assert result is not None and result[1] is Mode.FULL
    assert notes == [] and cuts == []


def test_over_the_full_budget_the_reduced_mode_runs_and_says_so() -> None:
    result, notes, cuts, interpreter = run(WIDE, max_steps=60)
    assert result is not None
    regions, mode = result
    assert mode is Mode.REDUCED and cuts == []
    assert budget_counts(notes) == (1, 0)
    assert interpreter.reduced is False  # put back for the next root
    assert len(interpreter.summaries.over_budget) == 1  # a later caller gives up at a call to it
    assert [len(p.conds) for p in regions[0].paths] == [1, 1]  # the rank test's two arms


def test_over_every_budget_the_function_is_skipped_with_a_cut() -> None:
    result, notes, cuts, _ = run(WIDE, max_steps=2)
    assert result is None and budget_counts(notes) == (0, 1)
    (cut,) = cuts
    assert (cut.path, cut.function, cut.budget, cut.limit) == ("m.py", "f", Budget.STEPS, 2)


def test_only_regions_parted_by_the_functions_own_rank_tests_are_solved() -> None:
    module = module_of(WIDE, complete=True)
    interpreter = Interpreter(module)
    function = module.functions["f"]
    regions = interpreter.run_function(function, None, "f")
    assert owning_a_split(regions, interpreter.conditions, "m.py", lines_of(function)) == regions
    assert owning_a_split(regions, interpreter.conditions, "m.py", (1, 2)) == []  # tests outside those lines


# Settings checks that may each raise (two live paths each, with the same events: the arm that
# raises is not merged with the other), interleaved with settings arms that issue their own
# collective (kept apart: their events differ), then a barrier only rank 0 issues. 2**6 checks
# times 2**3 arms: over 256 paths in the plain full analysis.
SETTINGS = (
    "def f(cfg, t):\n"
    + "".join(
        f"    if cfg.check{i}:\n        if cfg.bad{i}:\n            raise ValueError({i})\n"
        + f"        t = t + {i}\n"
        + (f"    if cfg.arm{i}:\n        dist.all_reduce(t)\n" if i % 2 else "")
        for i in range(6)
    )
    + "    if dist.get_rank() == 0:\n        dist.barrier()\n"
)


def test_over_the_plain_budget_a_second_full_run_joins_the_paths_settings_part() -> None:
    """The plain run goes over `max_paths`; the second try joins the live paths that issued the same
    events under the same rank decisions (fallback.join_after) and fits: the regions are the full
    analysis's (not reduced, no note), one path a rank arm and a combination of the arms that
    issue collectives, and later roots inline the function only in their own second try."""
    result, notes, cuts, interpreter = run(SETTINGS, max_steps=5_000)
    assert result is not None
    regions, mode = result
    assert mode is Mode.JOINED and notes == [] and cuts == []
    assert interpreter.joining is False  # put back for the next root
    function = interpreter.module.functions["f"]
    assert interpreter.summaries.over_plain_budget == {function}
    assert interpreter.summaries.over_budget == set()
    assert interpreter.summaries.gives_up_at(function, joining=False)
    assert not interpreter.summaries.gives_up_at(function, joining=True)
    live = [p for p in regions[0].paths if p.exit is None]
    assert len({p.events for p in live}) == 2**3 * 2  # the arms' combinations, barrier or not
    assert len(live) == len({p.events for p in live})  # settings alone part no two of them


def test_without_the_second_try_the_settings_paths_go_over_the_budget() -> None:
    """The same function in one plain run (no joins) goes over the path budget: the join is what
    makes it fit."""
    module = module_of(SETTINGS, complete=True)
    interpreter = Interpreter(module)
    try:
        interpreter.run_function(module.functions["f"], None, "f")
    except PathLimitExceeded as limit:
        assert limit.budget is Budget.PATHS
    else:
        raise AssertionError("the plain run fitted: the fixture no longer needs the joins")


# A root that calls a helper deciding on the rank and returning (`setup`), then one that issues a
# collective on a flag the root passes (`publish`, through `send`).
CHAIN = """def setup(t):
    if t.member:
        return None
    return t


def send(t):
    dist.barrier()


def publish(flag, t):
    if flag:
        send(t)


def root(t):
    setup(t)
    publish(t.first, t)
"""


def _finding(reason_line: int, chain: tuple[str, ...], op_line: int, path: str = "m.py") -> Finding:
    step = TraceStep("barrier", "m.py", op_line, chain)
    why = (Reason("flag", path, reason_line, ConditionKind.TEST, ()),)
    example = Counterexample(2, ((0, (step,)), (1, ())), why=why)
    return Finding("CC001", Severity.ERROR, Location("m.py", 17), "m", (), example)


def test_the_second_try_keeps_divergences_decided_on_the_collectives_call_chain() -> None:
    """Kept: decided in the root's lines, in a function the barrier is reached through (`publish`),
    or in the one that issues it (`send`). Dropped: decided in `setup`, a helper that returned
    before, off every chain; or in another file."""
    tree = ast.parse(CHAIN)
    root = (16, 18)
    chain = ("root", "publish", "send")
    assert decided_on_chain(_finding(17, chain, 8), "m.py", root, tree)  # the root's own line
    assert decided_on_chain(_finding(12, chain, 8), "m.py", root, tree)  # `if flag:` in publish
    assert decided_on_chain(_finding(8, ("root",), 8), "m.py", root, tree)  # in send, which issues it
    assert not decided_on_chain(_finding(2, chain, 8), "m.py", root, tree)  # `if t.member:` in setup
    assert not decided_on_chain(_finding(12, chain, 8, path="other.py"), "m.py", root, tree)
