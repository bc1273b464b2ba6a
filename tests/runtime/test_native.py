"""Record mode's native (C++) kernel: same trace as the Python kernel, fallback when unavailable."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Job, run_job, run_job_past_teardown_aborts

from collcheck.runtime import native_recorder as native
from collcheck.runtime.record import read_trace
from collcheck.runtime.tracer import TraceConfig

pytestmark = pytest.mark.multirank

NATIVE = TraceConfig(timeout_s=5.0)
PYTHON = TraceConfig(timeout_s=5.0, native=False)
TIMES = ("t_start", "t_end", "t")


@pytest.fixture(scope="module")
def built() -> None:
    if native.load(build=True, quiet=True) is None:
        failed = native.cache_root() / native.module_name() / native.FAILED_MARKER
        reason = failed.read_text()[-2000:] if failed.exists() else "see stderr"
        pytest.skip(f"the native recorder cannot be built here: {reason}")


KernelJob = Callable[[str, int, TraceConfig], Job]


@pytest.fixture(scope="module")
def kernel_job(built: None, tmp_path_factory: pytest.TempPathFactory) -> KernelJob:
    """`(program, ranks, trace)` -> its job, each run once for the module: the mixed program's
    native trace serves both the comparison with the Python kernel and the check of its content."""
    done: dict[tuple[str, int, TraceConfig], Job] = {}

    def job(program: str, ranks: int, trace: TraceConfig) -> Job:
        key = (program, ranks, trace)
        if key not in done:
            folder = tmp_path_factory.mktemp(f"{Path(program).stem}-{'native' if trace.native else 'python'}")
            done[key] = run_job_past_teardown_aborts(program, folder, nranks=ranks, trace=trace)
        return done[key]

    return job


def traces(job_dir: Path, ranks: int) -> list[list[dict[str, Any]]]:
    return [read_trace(str(job_dir / f"collcheck-rank{rank}.jsonl")) for rank in range(ranks)]


def comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Collective and unobserved lines without their clocks, each `coll` line with the members and
    description of the `group` line its gid names (the gids themselves may be numbered in another
    order); `done` lines as (group, seq, ok)."""
    groups: dict[int, dict[str, Any]] = {}
    kept = []
    for row in rows:
        if row["ev"] == "group":
            assert row["gid"] not in groups, row  # each written once, before the first line naming it
            groups[row["gid"]] = row
        elif row["ev"] in ("coll", "unobserved"):
            line = {k: v for k, v in row.items() if k not in TIMES}
            if row["ev"] == "coll":
                group = groups[line.pop("gid")]
                assert group["group"] == row["group"] and "group_ranks" not in row
                line.update(ranks=group["ranks"], desc=group["desc"])
            kept.append(line)
    done = sorted((row["group"], row["seq"], row["ok"]) for row in rows if row["ev"] == "done")
    return [*kept, {"done": done}]


@pytest.mark.parametrize(("program", "ranks"), [("ops_single.py", 1), ("mixed_groups.py", 2)])
def test_native_kernel_writes_the_lines_the_python_kernel_writes(
    kernel_job: KernelJob, program: str, ranks: int
) -> None:
    fast = kernel_job(program, ranks, NATIVE)
    slow = kernel_job(program, ranks, PYTHON)
    assert fast.returncodes == [0] * ranks, fast.stderr
    assert slow.returncodes == [0] * ranks, slow.stderr
    native_rows, python_rows = traces(fast.trace_dir, ranks), traces(slow.trace_dir, ranks)
    for rank in range(ranks):
        assert native_rows[rank][0]["hook"] == "native"
        assert python_rows[rank][0]["hook"] == "dispatcher"
        assert native_rows[rank][0]["schema"] == python_rows[rank][0]["schema"] == 2
        assert comparable(native_rows[rank]) == comparable(python_rows[rank])
        assert all(row["t_end"] >= 0 for row in native_rows[rank] if row["ev"] == "done")
    assert "UserWarning" not in fast.stderr  # the tracer adds nothing to the program's output


def test_mixed_program_trace_has_what_the_comparison_relies_on(kernel_job: KernelJob) -> None:
    job = kernel_job("mixed_groups.py", 2, NATIVE)
    assert job.returncodes == [0, 0], job.stderr
    rows = [row for row in traces(job.trace_dir, 2)[1] if row["ev"] == "coll"]
    assert rows[0]["op"] == "new_group" and rows[0]["group"] == "0:create"  # the subgroup's creation
    rows = [row for row in rows if row["group"] != "0:create"]
    ops = [(row["op"], row["group"], row["dtypes"]) for row in rows]
    assert ("all_reduce", "1", ["bfloat16"]) in ops  # the subgroup has its own name and sequence
    assert [row["op"] for row in rows if row["group"].endswith(":p2p")] == ["recv", "send", "recv"]
    side = [row for row in rows if row["op"] == "broadcast"]
    assert side and side[0]["thread"] == "side-thread"
    assert rows[0]["reduce_op"] == "min" and rows[0]["shapes"] == [[3, 2]]


def test_a_failed_build_falls_back_to_the_python_kernel(tmp_path: Path) -> None:
    root = tmp_path / "native-cache"
    marker = root / native.module_name() / native.FAILED_MARKER
    marker.parent.mkdir(parents=True)
    marker.write_text("g++: not found\n")
    job = run_job("steady.py", tmp_path, trace=NATIVE, extra_env={native.ENV_NATIVE_DIR: str(root)})
    assert job.returncodes == [0, 0], job.stderr
    assert f"an earlier build failed (see {marker}" in job.stderr
    assert [rows[0]["hook"] for rows in traces(job.trace_dir, 2)] == ["dispatcher", "dispatcher"]


def test_a_missing_build_is_started_in_the_background_and_this_run_uses_the_python_kernel(
    tmp_path: Path,
) -> None:
    root = tmp_path / "empty-cache"
    # No ninja on PATH: the background build fails at once instead of compiling during the tests.
    env = {native.ENV_NATIVE_DIR: str(root), "PATH": str(tmp_path / "no-tools")}
    job = run_job("steady.py", tmp_path, trace=NATIVE, extra_env=env)
    assert job.returncodes == [0, 0], job.stderr
    assert job.stderr.count("the native kernel is being built in the background") == 1  # rank 0 only
    assert [rows[0]["hook"] for rows in traces(job.trace_dir, 2)] == ["dispatcher", "dispatcher"]
    assert job.seconds < 30  # nobody waited for a compiler


def test_collcheck_native_0_keeps_the_python_kernel(tmp_path: Path) -> None:
    job = run_job("steady.py", tmp_path, trace=PYTHON)
    assert job.returncodes == [0, 0], job.stderr
    headers = [rows[0] for rows in traces(job.trace_dir, 2)]
    assert [header["hook"] for header in headers] == ["dispatcher", "dispatcher"]
    assert json.dumps(headers[0]["mode"]) == '"record"'


def test_is_built_looks_in_the_configured_cache(
    built: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert native.is_built()  # the default cache, where the fixture built it
    monkeypatch.setenv(native.ENV_NATIVE_DIR, str(tmp_path))
    assert not native.is_built()  # `collcheck run` then builds before starting the command


def test_a_torch_without_package_metadata_still_gets_its_build(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    expected = native.module_name()

    def no_metadata(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", no_metadata)  # a source checkout on PYTHONPATH
    assert native.module_name() == expected  # torch.__version__ is the same string
