"""Findings people can act on (issue 12): counterexamples say why the ranks part, group-local
findings name the group and its local ranks, one root cause gives one finding, CC007 says where
the per-process value is read, and every path of the JSON report is relative to one root."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from collcheck.api import analyze_text, check_paths
from collcheck.cache import result_from_json, result_to_json
from collcheck.config import load_settings
from collcheck.findings import ConditionKind, Finding, Reason, RunResult
from collcheck.report.json import render_json
from collcheck.report.sarif import sarif_log
from collcheck.report.text import render_text

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def _run(*paths: Path) -> RunResult:
    settings = load_settings(list(paths)).with_overrides(jobs=1, cache=False)
    return check_paths(list(paths), settings)


def _only(result: RunResult, code: str) -> Finding:
    found = [finding for finding in result.findings if finding.code == code]
    assert len(found) == 1, [f.message for f in result.findings]
    return found[0]


def _why(finding: Finding) -> tuple[Reason, ...]:
    assert finding.counterexample is not None
    return finding.counterexample.why


# --- why the ranks part -----------------------------------------------------------------------------


def test_a_rank_guard_is_named_with_its_value_and_the_rank_on_each_side() -> None:
    finding = _only(_run(FIXTURES / "CC001" / "barrier_rank0_bug.py"), "CC001")
    (reason,) = _why(finding)
    assert (reason.condition, Path(reason.path).name, reason.line) == ("rank == 0", "barrier_rank0_bug.py", 9)
    assert [(item.rank, item.holds, item.reads) for item in reason.ranks] == [
        (0, True, (("rank", "0"),)),
        (1, False, (("rank", "1"),)),
    ]


def test_a_group_local_finding_names_the_group_and_the_local_ranks() -> None:
    finding = _only(_run(FIXTURES / "groups" / "device_mesh_local_rank_bug.py"), "CC001")
    example = finding.counterexample
    assert example is not None
    assert example.group == "tp_mesh.get_group()"
    assert example.local_ranks == ((0, 0), (1, 1))
    assert "local rank 0 but not by local rank 1 in `tp_mesh.get_group()`" in finding.message
    (reason,) = example.why
    assert reason.condition == "tp_mesh.get_local_rank() == 0" and reason.line == 9
    assert [dict(item.reads) for item in reason.ranks] == [
        {"local rank in `mesh['tp']`": "0"},
        {"local rank in `mesh['tp']`": "1"},
    ]
    text = render_text(_run(FIXTURES / "groups" / "device_mesh_local_rank_bug.py"))
    assert "    why: `tp_mesh.get_local_rank() == 0` at device_mesh_local_rank_bug.py:9" in text
    assert "      rank 1: false (local rank in `mesh['tp']` = 1)" in text


def test_a_global_rank_guard_on_a_group_keeps_global_ranks_in_the_message() -> None:
    finding = _only(_run(FIXTURES / "groups" / "global_rank_on_subgroup_bug.py"), "CC001")
    assert "by rank 0 but not by rank 1" in finding.message
    assert finding.counterexample is not None and finding.counterexample.local_ranks == ()
    assert finding.counterexample.group == "self.dp_group"


def test_a_test_only_one_rank_reaches_is_not_a_reason(tmp_path: Path) -> None:
    source = tmp_path / "nested.py"
    source.write_text(
        "import torch.distributed as dist\n\n\n"
        "def step(t, table):\n"
        "    rank = dist.get_rank()\n"
        "    if rank == 0:\n"
        "        if table[rank] > 3:\n"
        "            dist.all_reduce(t)\n",
        encoding="utf-8",
    )
    # Rank 1 never evaluates `table[rank] > 3`: its value there is whatever the solver left free.
    assert [reason.condition for reason in _why(_only(_run(source), "CC001"))] == ["rank == 0"]


def test_a_match_case_reads_as_taken_or_not(tmp_path: Path) -> None:
    source = tmp_path / "match.py"
    source.write_text(
        "import torch.distributed as dist\n\n\n"
        "def step(t):\n"
        "    match dist.get_rank():\n"
        "        case 0:\n"
        "            dist.all_reduce(t)\n"
        "        case _:\n"
        "            pass\n",
        encoding="utf-8",
    )
    first = _why(_only(_run(source), "CC001"))[0]
    assert (first.condition, first.kind, first.line) == ("case 0", ConditionKind.CASE, 6)
    assert [(item.rank, first.word(item.holds), item.reads) for item in first.ranks] == [
        (0, "taken", (("case index", "0"),)),
        (1, "not taken", (("case index", "1"),)),
    ]


def test_a_caught_exception_reads_as_raised_on_one_rank() -> None:
    finding = _only(_run(FIXTURES / "CC003" / "oom_skip_batch_bug.py"), "CC003")
    (reason,) = _why(finding)
    assert reason.kind is ConditionKind.EXCEPTION and reason.condition == "except torch.cuda.OutOfMemoryError"
    assert sorted(reason.word(item.holds) for item in reason.ranks) == ["does not raise", "raises"]


def test_the_why_lines_survive_the_cache() -> None:
    result = _run(FIXTURES / "groups" / "device_mesh_local_rank_bug.py")
    (file_result,) = [r for r in result.files if r.findings]
    again = result_from_json(json.loads(json.dumps(result_to_json(file_result))))
    assert again.findings == file_result.findings


# --- report formats ---------------------------------------------------------------------------------


def test_json_has_a_structured_why_list() -> None:
    data = json.loads(render_json(_run(FIXTURES / "CC001" / "barrier_rank0_bug.py"), ROOT))
    example = data["findings"][0]["counterexample"]
    assert example["why"] == [
        {
            "condition": "rank == 0",
            "kind": "test",
            "path": "fixtures/CC001/barrier_rank0_bug.py",
            "line": 9,
            "ranks": {
                "0": {"value": True, "reads": {"rank": "0"}},
                "1": {"value": False, "reads": {"rank": "1"}},
            },
        }
    ]


def _paths(data: Any) -> list[str]:
    if isinstance(data, dict):
        return [v for k, v in data.items() if k == "path" and isinstance(v, str)] + [
            p for v in data.values() for p in _paths(v)
        ]
    if isinstance(data, list):
        return [p for item in data for p in _paths(item)]
    return []


def test_every_json_path_is_relative_to_the_root_the_findings_use(monkeypatch: pytest.MonkeyPatch) -> None:
    # Checked alone, train.py reaches comm_utils.py through an import: its module path was absolute.
    monkeypatch.chdir(ROOT)
    unit = Path("fixtures/deep/cross_module/synchronize_rank0_bug/train.py")
    data = json.loads(render_json(_run(unit)))
    paths = _paths(data)
    assert any(path.endswith("comm_utils.py") for path in paths)
    assert paths and not [path for path in paths if os.path.isabs(path)]
    assert all((ROOT / path).exists() for path in paths)


def test_sarif_carries_the_why_in_the_message_and_as_a_related_location(tmp_path: Path) -> None:
    log = sarif_log(_run(FIXTURES / "CC001" / "barrier_rank0_bug.py"), ROOT)
    (result,) = log["runs"][0]["results"]
    assert (
        "why: `rank == 0` is true on rank 0 (rank = 0), false on rank 1 (rank = 1)"
        in result["message"]["text"]
    )
    related = [entry for entry in result["relatedLocations"] if entry["message"]["text"].startswith("why:")]
    assert [entry["physicalLocation"]["region"]["startLine"] for entry in related] == [9]


# --- one root cause, one finding --------------------------------------------------------------------


def test_an_early_exit_in_a_helper_is_reported_once_not_again_at_its_callers() -> None:
    result = _run(FIXTURES / "CC003" / "helper_early_return_bug.py")
    assert [(f.code, f.location.line) for f in result.findings] == [("CC003", 8)]


def test_an_early_exit_in_a_helper_of_another_file_is_reported_there_only() -> None:
    folder = FIXTURES / "deep" / "cross_module" / "helper_early_return_bug"
    assert [(Path(f.location.path).name, f.code) for f in _run(folder).findings] == [("stats.py", "CC003")]
    assert _run(folder / "train.py").findings == []  # reported in stats.py when that is checked


def test_a_rank_branch_of_the_caller_is_still_reported(tmp_path: Path) -> None:
    source = tmp_path / "both.py"
    source.write_text(
        "import torch.distributed as dist\n\n\n"
        "def sync(t):\n"
        "    if dist.get_rank() != 0:\n"
        "        return\n"
        "    dist.all_reduce(t)\n\n\n"
        "def step(t, u):\n"
        "    if dist.get_rank() == 1:\n"
        "        dist.barrier()\n"
        "    sync(t)\n",
        encoding="utf-8",
    )
    codes = sorted((f.code, f.location.line) for f in _run(source).findings)
    assert ("CC003", 6) in codes and any(code == "CC001" for code, _ in codes)


# --- CC007 --------------------------------------------------------------------------------------------


def test_cc007_names_the_monotonic_clock_and_where_it_is_read() -> None:
    finding = _only(_run(FIXTURES / "CC007" / "monotonic_deadline_bug.py"), "CC007")
    assert "depends on monotonic clock (" in finding.message and "wall-clock" not in finding.message
    assert "`time.monotonic()` at line 10" in finding.message
    assert "tested at monotonic_deadline_bug.py:10" in finding.message
    assert finding.cause is not None and finding.cause.line == 10


def test_cc007_on_wall_clock_time_names_the_call_and_the_guard() -> None:
    finding = _only(_run(FIXTURES / "CC007" / "time_deadline_bug.py"), "CC007")
    assert "wall-clock time (`time.time()` at line 8, `time.time()` at line 14, tested at " in finding.message


def test_a_suppression_on_the_guard_covers_the_cc007_finding(tmp_path: Path) -> None:
    text = (FIXTURES / "CC007" / "ckpt_exists_bug.py").read_text(encoding="utf-8")
    guarded = text.replace(
        "    if os.path.exists(ckpt):  # expect: CC007\n",
        "    if os.path.exists(ckpt):  # collcheck: ignore[CC007]\n",
    )
    assert guarded != text
    source = tmp_path / "ckpt.py"
    source.write_text(guarded.replace("  # expect: CC007", ""), encoding="utf-8")
    result = _run(source)
    assert result.findings == [] and result.unused_suppressions == []


def test_cc007_is_shown_at_the_guard_that_reads_the_value_and_names_what_it_decides() -> None:
    result = _run(FIXTURES / "CC007" / "isfile_return_bug.py")
    [finding] = result.findings
    assert (finding.code, finding.location.line, finding.location.column) == ("CC007", 8, 7)
    assert "whether `return` at isfile_return_bug.py:10 is taken" in finding.message
    assert finding.cause == finding.location


def test_a_set_loop_whose_collectives_sit_under_a_rank_branch_gets_no_set_order_advice() -> None:
    result = _run(FIXTURES / "CC001" / "set_loop_rank_branch_bug.py")
    assert [(f.code, f.location.line) for f in result.findings] == [("CC001", 8)]
    assert "hash seed" not in result.findings[0].message


def test_rank_derived_values_are_named_without_internal_places() -> None:
    from collcheck.static.symbolic import Atom
    from collcheck.static.why import group_label, quantity

    assert group_label("item:param:mesh@6:0['tp']") == "mesh['tp']"
    assert group_label("init_device_mesh@fixtures/groups/x.py:7:11['dp']") == "init_device_mesh['dp']"
    assert quantity(Atom("counts[rank]@10:7", "perrank")) == "`counts[rank]`"
    assert quantity(Atom("in@12:7", "perrank")) == "a value computed from the rank"
    assert quantity(Atom("time.monotonic()@7:14", "nondet", why="monotonic clock")) == (
        "time.monotonic() at line 7 (monotonic clock)"
    )
    assert quantity(Atom("param:flag@3:0", "shared")) is None  # the same on every rank: not shown


def test_a_per_process_value_read_is_typed_as_it_is_shown() -> None:
    """The rules read a condition's per-process values as `ProcessRead`s (the call, the line, what
    varies), not by taking apart the words a counterexample shows; both say the same."""
    from collcheck.static.symbolic import Atom
    from collcheck.static.why import ProcessRead, process_read, quantity

    clock = Atom("time.monotonic()@7:14", "nondet", why="monotonic clock")
    assert process_read(clock) == ProcessRead("time.monotonic()", 7, "monotonic clock")
    assert quantity(clock) == process_read(clock).shown  # type: ignore[union-attr]
    unplaced = Atom("seed", "nondet", why="random numbers")
    assert process_read(unplaced) == ProcessRead("seed", None, "random numbers")
    assert quantity(unplaced) == "seed (random numbers)"
    assert process_read(Atom("counts[rank]@10:7", "perrank")) is None


def test_a_read_of_a_roots_parameter_keeps_its_whole_expression() -> None:
    """A root's parameter is own data from the function's entry (`batch@entry:40`): the place mark
    inside `len(...)` is dropped, not the text after it (`len(batch` was shown before)."""
    from collcheck.static.symbolic import Atom
    from collcheck.static.why import ProcessRead, process_read, quantity

    own = "this process's own data"
    entry = Atom("len(batch@entry:40)", "nondet", why=own)
    assert process_read(entry) == ProcessRead("len(batch)", None, own)
    nested = Atom("sum(len(x@entry:3) for x in parts@7:12)", "nondet", why=own)
    assert process_read(nested) == ProcessRead("sum(len(x) for x in parts)", None, own)  # no line of its own
    assert quantity(entry) == f"len(batch) ({own})"
    shape = Atom("item:logits@entry:16.shape[-1]", "nondet", why=own)
    assert process_read(shape) == ProcessRead("logits.shape[-1]", None, own)
    held = Atom("self.last@ThroughputMeter", "nondet", why="wall-clock time")  # an object's attribute
    assert process_read(held) == ProcessRead("self.last", None, "wall-clock time")
    findings = _run(FIXTURES / "CC008/kept_function_bug.py").findings
    messages = [f.message for f in findings if f.location.line == 41]
    assert len(messages) == 1 and "(`len(batch)`, tested at kept_function_bug.py:41)" in messages[0], messages


def test_a_per_process_guard_is_found_from_the_typed_reads() -> None:
    """CC007 names the guard and the call read there from the divergence's `process_reads`."""
    text = (
        "import time\nimport torch.distributed as dist\n\n\ndef f(start):\n"
        "    now = time.time()\n    if now - start > 30:\n        dist.barrier()\n"
    )
    result = analyze_text(text, "clock.py")
    messages = [f.message for f in result.findings if f.code == "CC007"]
    assert messages and "(`time.time()` at line 6, tested at clock.py:7)" in messages[0], messages


def test_the_rank_that_raised_is_the_one_that_went_through_the_handler() -> None:
    # The handler of per_rank_error_handler_reduces_bug.py issues the all_reduce: the rank shown
    # with it is the rank that raised (the paths through the body carry the flag negated).
    finding = _only(_run(FIXTURES / "deep/try_except/per_rank_error_handler_reduces_bug.py"), "CC007")
    assert finding.counterexample is not None
    issued = {rank: bool(steps) for rank, steps in finding.counterexample.ranks}
    (reason,) = _why(finding)
    assert {value.rank: value.holds for value in reason.ranks} == issued


def test_an_exception_finding_is_shown_at_the_collective_it_decides_on() -> None:
    # The `except` line is where the per-process value is tested, but not where a reader looks: the
    # finding is shown at the barrier the exception skips (in the `try`, after the call that
    # raised), not the one after the `try` that both ranks reach, and names the `except` line.
    finding = _only(_run(FIXTURES / "deep/caught_failure/skipped_sync_bug.py"), "CC007")
    assert finding.location.line == 13
    assert "barrier at skipped_sync_bug.py:13" in finding.message
    assert "caught at skipped_sync_bug.py:15" in finding.message
    assert finding.cause is not None and finding.cause.line == 15  # a suppression there still covers it
    handled = _only(_run(FIXTURES / "deep/try_except/per_rank_error_handler_reduces_bug.py"), "CC007")
    assert handled.location.line == 12  # the all_reduce only the handler issues


def test_a_per_process_read_is_named_as_the_source_spells_it() -> None:
    # The evaluator names a call's result `call:picked.numel()`; what a reader sees is the source.
    path = FIXTURES / "CC008/selected_bug.py"
    settings = load_settings([path]).with_overrides(jobs=1, cache=False, extend_select=("CC008",))
    findings = [f for f in check_paths([path], settings).findings if f.code == "CC008"]
    assert findings and "(`picked.numel()`, tested at selected_bug.py:10)" in findings[0].message
    shown = [read for f in findings for read in _reads_named(f)]
    assert shown and not any("call:" in text for text in [*shown, *(f.message for f in findings)]), shown


def _reads_named(finding: Finding) -> list[str]:
    """The names of the values each rank reads in the finding's counterexample."""
    assert finding.counterexample is not None
    why = finding.counterexample.why
    return [name for reason in why for value in reason.ranks for name, _ in value.reads]


@pytest.mark.parametrize(
    ("fixture", "shown"),
    [
        ("semantics/dataflow/reduce_to_root_decision_bug.py", "`stats[0]` (whole on the reduce's root only)"),
        ("groups/membership_predicate_other_group_bug.py", "member of `self.tie_group`"),
        ("semantics/protocols/property_default_group_bug.py", "local rank in `self._group`"),
    ],
)
def test_values_the_evaluator_marks_are_shown_as_source(fixture: str, shown: str) -> None:
    # `rooted:stats[0]`, `member:group_ranks:self.tie_group`, `maybe:self._group` are the
    # evaluator's names; a reader sees what the source says.
    findings = _run(FIXTURES / fixture).findings
    names = [name for finding in findings for name in _reads_named(finding)]
    assert shown in names, names
    assert not any(mark in name for name in names for mark in ("rooted:", "member:", "maybe:")), names
