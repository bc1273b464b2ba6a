"""Work budgets instead of wall-clock limits (collcheck/static/budget.py): the same file gives the
same findings, notes and exit code however slow the machine; a function a budget cuts short is a
note that names it (exit 0 when nothing else is found) unless `budget-exceeded = "error"`; and a
repository's `[tool.collcheck]` may tune every bound but never lift it past its cap (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_support import FIXTURES, run
from test_file_budget import NONLINEAR  # rank arithmetic z3 works hard on, for 1024 ranks

from collcheck.api import check_paths
from collcheck.config import CAPS, ConfigError, Settings, settings_from_table
from collcheck.findings import Budget, RunResult

# Nine independent rank tests, each issuing a barrier: 512 paths in the full and the reduced mode
# alike (paths that part on the rank are never joined), so the function is cut by `max-paths`.
EXPLODING = "import torch.distributed as dist\n\n\ndef exploding():\n" + "".join(
    f"    if dist.get_rank() == {i}:\n        dist.barrier()\n" for i in range(9)
)


def _project(folder: Path, config: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(f"[tool.collcheck]\n{config}", encoding="utf-8")
    return folder


class FastClock:
    """`time.monotonic` of a machine many times slower than this one: every reading is `step`
    seconds later than the one before, on top of the real clock."""

    def __init__(self, step: float) -> None:
        self.real = time.monotonic
        self.step = step
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return self.real() + self.calls * self.step


def _outcome(result: RunResult) -> tuple[object, ...]:
    findings = [(f.code, Path(f.location.path).name, f.location.line, f.message) for f in result.findings]
    return findings, result.notes, result.budget_cuts, result.errors, result.exit_code


def test_a_slow_machine_gives_the_same_findings_notes_and_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clock made to run fast enough that the analysis reads as about 40 s more than it took:
    past the 10 s a file had under the old wall-clock budget (the file then stopped as an error,
    exit 1, its findings lost), well inside the far-off safety clock. Every output is the same."""
    src = _project(tmp_path / "src")
    (src / "trainer.py").write_bytes((FIXTURES / "budget" / "many_ifs_trainer_bug.py").read_bytes())
    (src / "exploding.py").write_text(EXPLODING, encoding="utf-8")
    # No git subprocess: its timeout reads the same clock and is not what this test is about.
    settings = Settings(cache=False, jobs=1, project_context=False, respect_gitignore=False)

    counting = FastClock(0.0)
    monkeypatch.setattr(time, "monotonic", counting)
    usual = check_paths([src], settings)
    assert counting.calls > 100  # the clock is read as the analysis goes (the safety clock)

    monkeypatch.setattr(time, "monotonic", FastClock(40.0 / counting.calls))
    slow = check_paths([src], settings)
    monkeypatch.undo()

    assert _outcome(slow) == _outcome(usual)
    assert [f.code for f in usual.findings] == ["CC001"] and usual.errors == []
    assert [(cut.function, cut.budget) for cut in usual.budget_cuts] == [("exploding", Budget.PATHS)]


def test_a_function_over_the_step_budget_is_a_note_and_exit_0(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`max-steps = 10`: the communicating function goes over it in the full and the reduced mode
    (where 16 inert statements make a step: 400 make 25); the run names it (file:line, the budget)
    in a note and, with nothing found, exits 0."""
    src = _project(tmp_path / "src", "max-steps = 10\n")
    statements = "".join(f"    value = value + {i}\n" for i in range(400))
    source = src / "long.py"
    source.write_text(
        f"import torch.distributed as dist\n\n\ndef long(value):\n{statements}    dist.barrier()\n",
        encoding="utf-8",
    )

    code, out, err = run(capsys, "check", "--no-cache", str(src))

    assert code == 0, out + err
    assert f"note: {source}:4: long: analysis cut short by the work budget `max-steps` (10)" in out
    assert "1 function cut short by a work budget" in out

    code, out, _ = run(capsys, "check", "--no-cache", "--format", "json", str(src))
    assert code == 0
    data = json.loads(out)
    assert [(c["function"], c["line"], c["budget"], c["limit"]) for c in data["budget_cuts"]] == [
        ("long", 4, "max-steps", 10)
    ]
    assert data["summary"]["budget_cuts"] == 1


def test_budget_exceeded_error_makes_a_cut_fail_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    src = _project(tmp_path / "src")
    (src / "exploding.py").write_text(EXPLODING, encoding="utf-8")

    assert run(capsys, "check", "--no-cache", str(src))[0] == 0
    assert run(capsys, "check", "--no-cache", "--budget-exceeded", "error", str(src))[0] == 1
    _project(src, 'budget-exceeded = "error"\n')
    assert run(capsys, "check", "--no-cache", str(src))[0] == 1
    # The command line has the last word, as for every setting.
    assert run(capsys, "check", "--no-cache", "--budget-exceeded", "note", str(src))[0] == 0
    code, _, err = run(capsys, "check", "--no-cache", "--budget-exceeded", "sometimes", str(src))
    assert code == 2 and "--budget-exceeded" in err


def test_a_cut_read_from_the_cache_is_still_reported_and_still_fails_the_gate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A cut is part of the file's result: a warm run (the cache, then the run's manifest) reports
    it as the cold run did, so `--budget-exceeded error` gives the same exit code."""
    src = _project(tmp_path / "src")
    (src / "exploding.py").write_text(EXPLODING, encoding="utf-8")
    command = ("check", "--format", "json", "--budget-exceeded", "error", str(src))

    runs = [run(capsys, *command) for _ in range(3)]

    assert [code for code, _, _ in runs] == [1, 1, 1]
    cuts = [json.loads(out)["budget_cuts"] for _, out, _ in runs]
    assert cuts[0] == cuts[1] == cuts[2] and [cut["function"] for cut in cuts[0]] == ["exploding"]


def test_a_function_over_its_solver_allowance_is_a_note_naming_it(tmp_path: Path) -> None:
    """`z3-function-rlimit`: the queries of `mix` together spend more than 3 million z3 resource
    units; the function is cut with a note at its line, nothing else breaks."""
    source = tmp_path / "mix.py"
    source.write_text(NONLINEAR, encoding="utf-8")
    settings = Settings(cache=False, jobs=1, world_size=1024, z3_function_rlimit=3_000_000)

    result = check_paths([source], settings)

    assert result.errors == [] and result.exit_code == 0
    cuts = [(cut.function, cut.line, cut.budget, cut.limit) for cut in result.budget_cuts]
    assert ("mix", 4, Budget.Z3_FUNCTION, 3_000_000) in cuts


def test_the_solver_budgets_give_the_same_answer_in_every_process(tmp_path: Path) -> None:
    """z3 counts its resource units deterministically: two processes with different hash seeds
    (the order of sets of strings differs) cut the same function at the same point."""
    source = tmp_path / "mix.py"
    source.write_text(NONLINEAR, encoding="utf-8")
    command = [sys.executable, "-m", "collcheck", "check", "--no-cache", "-j", "1", "-v", "--format", "json"]
    command += ["--world-size", "1024", "--z3-function-rlimit", "3000000", str(source)]
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
        )
        assert completed.returncode == 0, completed.stderr
        outputs.append((completed.stdout, completed.stderr))
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0][0])["budget_cuts"]


# --- caps on what a repository's configuration may set ---------------------------------------------


@pytest.mark.parametrize(
    "key", ["max-steps", "max-paths", "max-inline-depth", "z3-rlimit", "z3-function-rlimit"]
)
def test_a_bound_over_its_cap_is_a_config_error_naming_key_and_cap(tmp_path: Path, key: str) -> None:
    cap = int(CAPS[key])
    assert settings_from_table({key: cap}, tmp_path)  # the cap itself is allowed
    least = 0 if key == "max-inline-depth" else 1  # following no helper is a choice, not unbounded
    assert settings_from_table({key: least}, tmp_path)
    for value in (cap + 1, 10**12, least - 1, True, "5", 2.5):
        with pytest.raises(ConfigError, match=f"'{key}' must be an integer from {least} to {cap:,}"):
            settings_from_table({key: value}, tmp_path)


@pytest.mark.parametrize("value", ["0", "0.0", "1001", "1e9"])
def test_a_repository_cannot_turn_off_or_lift_the_safety_clock(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str
) -> None:
    src = _project(tmp_path / "src", f"file-timeout = {value}\n")
    (src / "ok.py").write_text("x = 1\n", encoding="utf-8")

    code, out, err = run(capsys, "check", "--no-cache", str(src))

    assert code == 2 and out == ""
    assert "'file-timeout' must be more than 0 and at most 1000 seconds" in err


def test_a_hostile_table_of_huge_bounds_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    src = _project(tmp_path / "src", "max-steps = 1000000000\nmax-paths = 1000000000\n")
    (src / "ok.py").write_text("x = 1\n", encoding="utf-8")

    code, _, err = run(capsys, "check", "--no-cache", str(src))

    assert code == 2 and "'max-steps'" in err and "100,000" in err


def test_a_huge_world_size_from_a_repository_is_not_simulated_rank_by_rank() -> None:
    """`world-size = 100000000`: the point-to-point simulation would step through every rank (about
    0.5 ms each); above MAX_SIMULATED_WORLD it leaves the world to the pairwise search, which
    still finds the 1F1B deadlock, in seconds."""
    bug = FIXTURES / "CC005" / "one_f_one_b_combined_bug.py"
    settings = Settings(cache=False, jobs=1, project_context=False, world_size=10**8, file_timeout=30)

    started = time.monotonic()
    result = check_paths([bug], settings)

    assert result.errors == [] and [f.code for f in result.findings] == ["CC005"]
    assert time.monotonic() - started < 30


def test_the_command_line_may_go_further_than_a_repository(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The invoker's own command line may turn the safety clock off (`--file-timeout 0`); the work
    budgets keep their caps there too."""
    src = _project(tmp_path / "src")
    (src / "ok.py").write_text("x = 1\n", encoding="utf-8")

    assert run(capsys, "check", "--no-cache", "--file-timeout", "0", str(src))[0] == 0
    too_many = str(int(CAPS["z3-rlimit"]) + 1)
    assert run(capsys, "check", "--no-cache", "--z3-rlimit", too_many, str(src))[0] == 2
