"""bench/budget_report.py reads the notes over_budget.py writes: built here from over_budget's own
Place and words, so that a change of their wording fails this test rather than the bench silently."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import budget_report as br  # noqa: E402

from collcheck.static.over_budget import MODULE_BODY, REDUCED_NOTE, SKIPPED_NOTE, Place  # noqa: E402

LOOP = Place("pkg/trainer.py", 40, "Trainer.fit")
STEP = Place("pkg/trainer.py", 90, "Trainer.step")
BODY = Place("pkg/setup.py", 1, MODULE_BODY)
NOTES = [
    f"{LOOP} {REDUCED_NOTE}: more than 5000 statements executed",
    f"{STEP} {REDUCED_NOTE}: calls fit, itself over the budget",
    f"{BODY} {REDUCED_NOTE}: more than 256 paths; over it there too, so its communicating helpers "
    "were taken as unknown collectives",
    "pkg/other.py:7: a z3 note that names no budget",
]


def test_reduced_notes_give_the_function_the_cause_and_opaque_helpers() -> None:
    found = br.reduced_functions(NOTES)
    assert [(str(r.function), r.cause, r.helpers_opaque) for r in found] == [
        ("pkg/trainer.py:40: Trainer.fit", "max-steps", False),
        ("pkg/trainer.py:90: Trainer.step", "a helper over the budget", False),
        ("pkg/setup.py:1: module body", "max-paths", True),
    ]


def test_census_names_reduced_skipped_and_cut_functions() -> None:
    where = Place("pkg/a.py", 3, "f")
    skipped = f"{where} {SKIPPED_NOTE}: more than 1 statements executed; in the reduced mode too"
    cut = {"path": "pkg/b.py", "line": 9, "function": "g", "budget": "max-steps", "limit": 1}
    report = {"notes": [*NOTES, skipped], "budget_cuts": [cut]}
    names = {str(f) for f in br.census(report)}
    assert names == {
        "pkg/trainer.py:40: Trainer.fit",
        "pkg/trainer.py:90: Trainer.step",
        "pkg/setup.py:1: module body",
        "pkg/a.py:3: f",
        "pkg/b.py:9: g",
    }


def test_main_loop_status_cut_reduced_full_or_not_analysed() -> None:
    result = br.PackageBudget("pkg", "pkg.whl", 3, 4, br.reduced_functions(NOTES))
    roots = {br.Function("pkg/trainer.py", 40, "Trainer.fit"), br.Function("pkg/loop.py", 5, "run")}
    assert br.loop_status("pkg/trainer.py", "Trainer.fit", result, roots).startswith(
        "REDUCED (cause: max-steps"
    )
    assert br.loop_status("pkg/loop.py", "run", result, roots) == "FULL"
    assert br.loop_status("pkg/loop.py", "other", result, roots).startswith("NOT ANALYSED")
    result.cuts.append(br.Cut(br.Function("pkg/loop.py", 5, "run"), "max-paths", 256))
    assert br.loop_status("pkg/loop.py", "run", result, roots).startswith("CUT")
    result.cuts[-1] = br.Cut(br.Function("pkg/loop.py", 5, "run"), "z3-function-rlimit", 1)
    assert br.loop_status("pkg/loop.py", "run", result, roots).startswith("FULL; solver budget")
