"""Async verify on the native kernel (issue 28: verification off the issuing thread). The kernel
records each collective; the monitor's background thread compares them, and a collective from a
call site the rank has not used yet is still agreed on before it is issued (the kernel's gate)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import line_of, run_job

from collcheck.runtime import native_recorder as native
from collcheck.runtime.analyze import analyze
from collcheck.runtime.record import read_trace
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.tracer import TraceConfig
from collcheck.runtime.verify import ABORT_EXIT_CODE

pytestmark = pytest.mark.multirank

ASYNC = TraceConfig(verify=True, timeout_s=3.0)
ASYNC_PYTHON = TraceConfig(verify=True, timeout_s=3.0, native=False)


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    if native.load(build=True, quiet=True) is None:
        pytest.skip("the native recorder cannot be built here")


def _rows(job_dir: Path, rank: int) -> list[dict[str, Any]]:
    return read_trace(str(job_dir / f"collcheck-rank{rank}.jsonl"))


def test_async_verify_issues_collectives_through_the_native_kernel(tmp_path: Path) -> None:
    job = run_job("steady_loop.py", tmp_path, trace=ASYNC)
    assert job.returncodes == [0, 0], job.stderr
    for rank in (0, 1):
        rows = _rows(job.trace_dir, rank)
        assert rows[0]["hook"] == "native" and rows[0]["mode"] == "async"
        colls = [row for row in rows if row["ev"] == "coll"]
        assert len(colls) == 304 and {row["seq"] for row in colls} == set(range(1, 305))
        assert not [row for row in rows if row["ev"] == "report"]  # nothing false, nothing missed
    results = sorted(line for rank in job.ranks for line in rank.stdout.splitlines())
    untraced = run_job("steady_loop.py", tmp_path / "untraced")
    assert results == sorted(line for rank in untraced.ranks for line in rank.stdout.splitlines())


def test_a_divergence_at_a_new_call_site_is_agreed_on_before_it_is_issued(tmp_path: Path) -> None:
    job = run_job("swap_same.py", tmp_path, trace=ASYNC)
    assert job.returncodes == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr
    assert "swapped collectives in group 0" in job.ranks[1].stderr
    assert all("a=" not in rank.stdout for rank in job.ranks)  # the second half never ran
    assert _rows(job.trace_dir, 1)[0]["hook"] == "native"


@pytest.mark.parametrize("trace", [ASYNC, ASYNC_PYTHON], ids=["native", "python"])
def test_a_divergence_at_a_site_already_used_is_found_in_the_background(
    tmp_path: Path, trace: TraceConfig
) -> None:
    job = run_job("op_drift.py", tmp_path, trace=trace)
    assert job.returncodes == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr
    line = line_of("op_drift.py", "DRIFT")
    expected = (
        f"collective mismatch: rank 0 all_reduce(float32[4]) at op_drift.py:{line} vs "
        f"rank 1 all_reduce(float32[4], op=max) at op_drift.py:{line} (group 0, #21)"
    )
    assert f"collcheck: rank 1: {expected}" in job.ranks[1].stderr, job.stderr
    assert all("finished" not in rank.stdout for rank in job.ranks)  # stopped within a few steps


def test_a_rank_killed_under_async_verify_leaves_a_readable_trace(tmp_path: Path) -> None:
    """The native kernel writes the lines the background thread compares: a rank killed between
    two collectives leaves every collective it issued readable (the last one included)."""
    job = run_job("sigkill.py", tmp_path, trace=ASYNC)
    assert job.returncodes[1] == -9, job.stderr
    assert _rows(job.trace_dir, 1)[0]["hook"] == "native"
    analysis = analyze(load_dir(str(job.trace_dir)))
    rank1 = analysis.summaries[1]
    assert rank1.last is not None and rank1.last.site.endswith(
        f"sigkill.py:{line_of('sigkill.py', 'LAST_OF_RANK1')}"
    )
    assert rank1.exited is False
    assert [event.seq for event in analysis.events[1]] == [1, 2]


def test_the_gate_sees_each_group_and_op_of_one_line_once_per_tracer(tmp_path: Path) -> None:
    """The kernel remembers which (group, op) it has gated for a cached call site, so the steady
    state builds no key; a line that issues two ops into two groups still reaches the gate once for
    each pair, and a tracer started again in the process gates them again."""
    job = run_job("gate_sites.py", tmp_path, nranks=1, args=(str(tmp_path / "trace"),))
    assert job.returncodes == [0], job.stderr
    assert _rows(job.trace_dir, 0)[0]["hook"] == "native"
    gated = [tuple(entry) for entry in json.loads(job.ranks[0].stdout.splitlines()[-1])]
    pairs = {(group, op) for _session, group, op in gated}
    assert len(pairs) == 4 and {op for _group, op in pairs} == {"all_reduce", "broadcast"}
    assert sorted(gated) == sorted((session, group, op) for session in (1, 2) for group, op in pairs)
