"""The per-file safety clock (`file-timeout`): a file the work budgets fail to bound stops with a
per-file error, serially and in worker processes, and the stop is never cached. (The work budgets
themselves, which make the result the same on every machine: test_work_budget.py.)"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

from collcheck import api, workers
from collcheck.api import check_paths
from collcheck.config import ConfigError, Settings, settings_from_table
from collcheck.findings import FileResult, RunResult
from collcheck.static.budget import (
    BoundedSolver,
    BudgetExceeded,
    check_active,
    file_budget,
    track_context,
)

REPO = Path(__file__).resolve().parents[1]

# Rank arithmetic the solver cannot settle quickly for a fixed world of 1024 ranks.
NONLINEAR = """\
import torch.distributed as dist


def mix(x):
    rank = dist.get_rank()
    world = dist.get_world_size()
    a = rank * rank % world
    b = (rank * 7 + rank * rank) % world
    c = (a * b + rank) % world
    if a == b:
        dist.all_reduce(x)
    if c * c % world == rank:
        dist.broadcast(x, src=a)
    if (a * a + b * b) % world == (c * rank) % world:
        dist.barrier()
    if rank * rank * rank % world == 1:
        dist.send(x, dst=(rank * rank + 1) % world)
        dist.recv(x, src=(rank * rank - 1) % world)
    else:
        dist.recv(x, src=(c * c) % world)
        dist.send(x, dst=(a * b) % world)
    for i in range(world):
        if (i * rank) % world == a:
            dist.all_reduce(x)
        if (i * i + rank) % world == b:
            dist.broadcast(x, src=i)
    return x
"""


def _pathological(folder: Path, count: int = 1) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        path = folder / f"nonlinear_{index}.py"
        path.write_text(NONLINEAR, encoding="utf-8")
        paths.append(path)
    return paths


def test_a_pathological_file_stops_at_its_budget(tmp_path: Path) -> None:
    [path] = _pathological(tmp_path)
    settings = Settings(cache=False, jobs=1, world_size=1024, file_timeout=1.0)

    started = time.monotonic()
    result = check_paths([path], settings)
    elapsed = time.monotonic() - started

    [error] = result.errors
    assert error.path == str(path) and error.transient
    assert "safety clock of 1 s" in error.message
    assert result.exit_code == 1
    # Without the budget this file ran for minutes; the budget plus the backstop's grace bounds it.
    assert elapsed < 30, elapsed


def test_the_budget_holds_in_worker_processes(tmp_path: Path) -> None:
    """Nine files so that the run uses worker processes (more than eight cache misses)."""
    _pathological(tmp_path, count=9)
    command = [sys.executable, "-m", "collcheck", "check", "--no-cache", "--format", "json", "-j", "2"]
    command += ["--world-size", "1024", "--file-timeout", "1", str(tmp_path)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=REPO)

    assert completed.returncode == 1, completed.stderr
    data = json.loads(completed.stdout)
    assert sorted(Path(e["path"]).name for e in data["errors"]) == [f"nonlinear_{i}.py" for i in range(9)]
    assert all("safety clock" in e["message"] for e in data["errors"])
    assert "Traceback" not in completed.stderr


def test_a_stopped_file_is_not_cached(tmp_path: Path) -> None:
    [path] = _pathological(tmp_path / "src")
    cache = tmp_path / "src" / ".collcheck_cache"
    settings = Settings(jobs=1, world_size=1024, file_timeout=0.5, root=str(tmp_path / "src"))

    first = check_paths([path], settings)
    assert [error.transient for error in first.errors] == [True]
    # Same file, same settings: the stop is not answered from the content cache or the manifest.
    started = time.monotonic()
    second = check_paths([path], settings)
    assert [error.transient for error in second.errors] == [True]
    assert time.monotonic() - started >= 0.5
    assert not list(cache.glob("v*/**/*.json")), "a transient error was stored"


def test_an_ordinary_file_is_unaffected(tmp_path: Path) -> None:
    bug = tmp_path / "bug.py"
    bug.write_bytes((REPO / "fixtures" / "CC001" / "barrier_rank0_bug.py").read_bytes())

    result = check_paths([bug], Settings(cache=False, jobs=1, file_timeout=10.0))

    assert result.errors == []
    assert [finding.code for finding in result.findings] == ["CC001"]


# --- the budget itself ---------------------------------------------------------------------------


def test_the_backstop_interrupts_a_busy_loop() -> None:
    """Code that never calls check_active() is still stopped shortly after the deadline."""
    started = time.monotonic()
    with pytest.raises(BudgetExceeded), file_budget(0.2, grace=0.2):
        while True:
            sum(range(1000))
    assert time.monotonic() - started < 5


def test_check_active_raises_only_after_the_deadline() -> None:
    check_active()  # no budget: nothing happens
    with file_budget(0.1, grace=5.0) as deadline:
        assert deadline is not None
        check_active()
        time.sleep(0.15)
        with pytest.raises(BudgetExceeded):
            check_active()


def test_no_budget_means_unbounded() -> None:
    with file_budget(0) as deadline:
        assert deadline is None
        check_active()


# --- configuration -------------------------------------------------------------------------------


def test_file_timeout_is_read_from_pyproject(tmp_path: Path) -> None:
    assert settings_from_table({"file-timeout": 2.5}, tmp_path).file_timeout == 2.5
    assert Settings().file_timeout == 100.0


@pytest.mark.parametrize("value", [-1, 0, "10", True, float("nan"), float("inf"), 1001, 10**9])
def test_bad_file_timeout_is_a_config_error(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match="file-timeout"):
        settings_from_table({"file-timeout": value}, tmp_path)


def test_analyze_text_has_the_same_budget() -> None:
    from collcheck.api import analyze_text

    result = analyze_text(NONLINEAR, "mix.py", Settings(cache=False, world_size=1024, file_timeout=0.5))

    assert result.error is not None and result.error.transient
    assert result.error.path == "mix.py"


class _StuckSolver:
    """Stands in for z3 busy in native code: deaf to signals, it ends only when interrupted."""

    def __init__(self) -> None:
        self.interrupted = threading.Event()

    def set(self, *args: object) -> None:
        pass

    def check(self, *assumptions: object) -> str:
        self.interrupted.wait(timeout=30)
        return "unknown"

    def interrupt(self) -> None:
        self.interrupted.set()


def test_the_backstop_interrupts_a_solver_stuck_in_native_code() -> None:
    """Off the main thread no alarm is possible: the timer's interrupt alone must end the check."""
    outcome: list[object] = []

    def analyse() -> None:
        solver = _StuckSolver()
        started = time.monotonic()
        try:
            with file_budget(0.2, grace=0.2):
                BoundedSolver(solver).check()
        except BudgetExceeded as stopped:
            outcome.append(stopped)
        outcome.append(solver.interrupted.is_set())
        outcome.append(time.monotonic() - started)

    worker = threading.Thread(target=analyse)
    worker.start()
    worker.join(timeout=60)

    assert not worker.is_alive()
    stopped, interrupted, elapsed = outcome
    assert isinstance(stopped, BudgetExceeded) and interrupted is True
    assert isinstance(elapsed, float) and elapsed < 10


# --- what the budget cannot stop: the parent outlasts its workers ----------------------------------

_ANALYZE_JOB = api._analyze_job


def _job_that_never_answers(path: str) -> FileResult:
    """In a worker: `stuck.py` hangs as native code that ignores the budget does (z3's destructor
    of a stopped file's context was seen looping forever): deaf to the alarm, it never returns."""
    if Path(path).name == "stuck.py":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(120)  # bounded, so that a run of the old code leaves no process behind for long
    return _ANALYZE_JOB(path)


def _job_that_dies(path: str) -> FileResult:
    """In a worker: `dies.py` kills its worker (as the kernel's out-of-memory killer would)."""
    if Path(path).name == "dies.py":
        os.kill(os.getpid(), signal.SIGKILL)
    return _ANALYZE_JOB(path)


def _job_that_stops_three(path: str) -> FileResult:
    """In a worker: the first three bug files are stopped at their budget."""
    if Path(path).name in ("bug_0.py", "bug_1.py", "bug_2.py"):
        return FileResult(path=path, error=api.budget_error(path, 1.0))
    return _ANALYZE_JOB(path)


def _buggy_files(folder: Path, special: str) -> None:
    """Nine copies of a CC001 bug (so that the run uses worker processes) and `special`, a tenth."""
    text = (REPO / "fixtures" / "CC001" / "barrier_rank0_bug.py").read_text(encoding="utf-8")
    for index in range(9):
        (folder / f"bug_{index}.py").write_text(text, encoding="utf-8")
    (folder / special).write_text(text, encoding="utf-8")


def _check_within(seconds: float, paths: list[Path], settings: Settings) -> RunResult:
    """check_paths in a thread, so that a run that hangs fails the test instead of hanging it."""
    outcome: list[RunResult] = []
    runner = threading.Thread(target=lambda: outcome.append(check_paths(paths, settings)), daemon=True)
    runner.start()
    runner.join(timeout=seconds)
    assert not runner.is_alive(), f"the run did not end within {seconds} s"
    [result] = outcome
    return result


def _in_workers(monkeypatch: pytest.MonkeyPatch, job: Callable[[str], FileResult]) -> None:
    """Two workers whatever the machine, each running `job` (forked: they see this patch)."""
    monkeypatch.setattr(api, "usable_cores", lambda: 2)
    monkeypatch.setattr(api, "_analyze_job", job)


def _only_the_bugs_found(result: RunResult, special: str) -> None:
    names = sorted(Path(finding.location.path).name for finding in result.findings)
    assert names == [f"bug_{index}.py" for index in range(9)]
    assert {finding.code for finding in result.findings} == {"CC001"}
    [error] = result.errors
    assert Path(error.path).name == special and error.transient


def test_a_worker_that_never_answers_is_given_up_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _buggy_files(tmp_path, "stuck.py")
    _in_workers(monkeypatch, _job_that_never_answers)
    monkeypatch.setattr(workers, "ANSWER_MARGIN_S", 6.0)
    settings = Settings(cache=False, jobs=2, file_timeout=1.0)
    limit = workers.answer_limit(settings.file_timeout)
    assert limit is not None

    started = time.monotonic()
    result = _check_within(90, [tmp_path], settings)

    _only_the_bugs_found(result, "stuck.py")
    assert f"no answer within {limit:g} s" in result.errors[0].message
    assert limit <= time.monotonic() - started < 80


def test_a_worker_that_dies_costs_only_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _buggy_files(tmp_path, "dies.py")
    _in_workers(monkeypatch, _job_that_dies)

    result = _check_within(90, [tmp_path], Settings(cache=False, jobs=2, file_timeout=10.0))

    _only_the_bugs_found(result, "dies.py")
    assert "died" in result.errors[0].message


def test_workers_that_stopped_files_are_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stopped file's z3 context is never freed (budget.py): workers that stopped enough files
    make way for fresh ones, whose exit frees them."""
    _buggy_files(tmp_path, "extra.py")
    _in_workers(monkeypatch, _job_that_stops_three)
    monkeypatch.setattr(workers, "RETIRE_AFTER_STOPS", 1)
    pools: list[int] = []

    class CountingPool(futures.ProcessPoolExecutor):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pools.append(len(pools))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(futures, "ProcessPoolExecutor", CountingPool)

    result = _check_within(90, [tmp_path], Settings(cache=False, jobs=2, file_timeout=10.0))

    assert sorted(Path(error.path).name for error in result.errors) == ["bug_0.py", "bug_1.py", "bug_2.py"]
    assert len(result.findings) == 7
    assert len(pools) >= 2


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="resident sizes are read from /proc")
def test_workers_grown_past_the_bound_are_replaced_and_answer_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker larger than `RETIRE_ABOVE_BYTES` between two files makes way, with its pool, for
    fresh ones (its arenas' free space is returned only by its exit): every file is still
    answered once, with the same findings."""
    _buggy_files(tmp_path, "extra.py")
    monkeypatch.setattr(api, "usable_cores", lambda: 2)
    monkeypatch.setattr(workers, "RETIRE_ABOVE_BYTES", 0)  # every worker is over it
    pools: list[int] = []

    class CountingPool(futures.ProcessPoolExecutor):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pools.append(len(pools))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(futures, "ProcessPoolExecutor", CountingPool)

    result = _check_within(300, [tmp_path], Settings(cache=False, jobs=2))

    assert not result.errors
    assert sorted(Path(finding.location.path).name for finding in result.findings) == sorted(
        [f"bug_{index}.py" for index in range(9)] + ["extra.py"]
    )
    assert len(pools) >= 3


def test_no_budget_means_no_limit_on_a_worker() -> None:
    assert workers.answer_limit(0.0) is None
    limit = workers.answer_limit(10.0)
    assert limit is not None and limit > 10.0


class _Context:
    """Stands in for a z3 context: z3py deletes the native context only while `owner` is set."""

    owner = True


def test_a_stopped_files_z3_contexts_are_never_deleted() -> None:
    stopped, finished = _Context(), _Context()
    with pytest.raises(BudgetExceeded), file_budget(0.05, grace=5.0):
        track_context(stopped)
        time.sleep(0.1)
        check_active()
    with file_budget(5.0):
        track_context(finished)

    assert stopped.owner is False
    assert finished.owner is True


def test_the_alarm_waits_for_an_import_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module cut off half-way through its import stays broken for the rest of the process (z3
    was seen losing `is_expr`): the backstop lets the import end, then stops the file."""
    (tmp_path / "slow_to_import.py").write_text(
        "import time\n\nstarted = time.monotonic()\nwhile time.monotonic() - started < 0.6:\n"
        "    pass\ncomplete = True\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_to_import", raising=False)

    with pytest.raises(BudgetExceeded), file_budget(0.05, grace=0.05):
        importlib.import_module("slow_to_import")
        while True:
            sum(range(1000))

    assert sys.modules["slow_to_import"].complete is True
    monkeypatch.delitem(sys.modules, "slow_to_import")


def test_the_engine_keeps_a_stopped_files_z3_contexts_and_frees_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import z3

    from collcheck.api import analyze_text

    created: list[Any] = []
    make = z3.Context.__init__

    def remembered(context: Any, *args: Any, **kwargs: Any) -> None:
        make(context, *args, **kwargs)
        created.append(context)

    monkeypatch.setattr(z3.Context, "__init__", remembered)
    stopped = analyze_text(NONLINEAR, "mix.py", Settings(cache=False, world_size=1024, file_timeout=0.5))
    assert stopped.error is not None and created
    assert all(context.owner is False for context in created)

    created.clear()
    bug = (REPO / "fixtures" / "CC001" / "barrier_rank0_bug.py").read_text(encoding="utf-8")
    finished = analyze_text(bug, "bug.py", Settings(cache=False, file_timeout=10.0))
    assert finished.error is None and finished.findings and created
    assert all(context.owner is True for context in created)
