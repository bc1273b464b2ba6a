"""Collectives that a third-party backend's package issues on its backend object directly, past the
c10d operators: torch_npu's paths to HCCL, on a stand-in over gloo (programs/npu_standin)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import line_of, run_job

from collcheck.runtime.analyze import analyze
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.tracer import TraceConfig
from collcheck.runtime.verify import ABORT_EXIT_CODE

pytestmark = pytest.mark.multirank

ASYNC = TraceConfig(verify=True, timeout_s=5.0)
RECORD = TraceConfig(timeout_s=5.0)

# (sequence, op, line marker): what each path of npu_paths.py must leave in rank 0's trace.
EXPECTED = [
    ("hccl:0", "all_gather", "GATHER"),  # torch_npu's gather: an allgather by default
    ("hccl:0", "gather", "GATHER_COMPAT"),  # the backend's gather in compatibility mode
    ("0", "all_gather", "GATHER_OBJECT"),  # gather_object's sizes, through the c10d operator
    ("hccl:0", "all_gather", "GATHER_OBJECT"),  # and its bytes, through the backend
    ("hccl:0:p2p", "send", "BATCH"),
    ("hccl:0:p2p", "recv", "BATCH"),
    ("hccl:0", "reduce_scatter_tensor_uneven", "RS_UNEVEN"),
    ("hccl:0", "all_gather_into_tensor_uneven", "AG_UNEVEN"),
    ("hccl:0", "all_to_all_vc", "A2A_VC"),
]


@pytest.mark.parametrize("mode", [ASYNC, RECORD], ids=["async", "record"])
def test_every_torch_npu_path_past_the_operators_is_recorded(tmp_path: Path, mode: TraceConfig) -> None:
    job = run_job("npu_paths.py", tmp_path, trace=mode)
    assert job.returncodes == [0, 0], job.stderr
    assert "collcheck:" not in job.stderr
    results = [json.loads(rank.stdout.split("RESULT ", 1)[1]) for rank in job.ranks]
    assert results[0]["gather"] == [[0.0, 0.0], [1.0, 1.0]] and results[0]["gather_compat"] == [
        [1.0, 1.0],
        [2.0, 2.0],
    ]
    assert results[0]["gather_object"] == ["{'rank': 0}", "{'rank': 1}"]
    assert [r["batch"] for r in results] == [[6.0] * 3, [5.0] * 3]
    assert [r["rs_uneven"] for r in results] == [[0.0, 2.0, 4.0], [6.0]]
    assert [r["a2a_vc"] for r in results] == [[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0]]
    analysis = analyze(load_dir(str(job.trace_dir)))
    assert not analysis.diverged and not analysis.warnings  # sends paired with recvs, and so on
    for rank in (0, 1):
        events = [(e.group, e.op, e.site.line) for e in analysis.events[rank]]
        assert events == [(group, op, line_of("npu_paths.py", marker)) for group, op, marker in EXPECTED]
        assert all(e.t_end is not None or not e.observable for e in analysis.events[rank])
    uneven = next(e for e in analysis.events[0] if e.op == "reduce_scatter_tensor_uneven")
    assert uneven.describe == "reduce_scatter_tensor_uneven(float32[4])"  # the full-size input


def test_a_swapped_pair_of_backend_calls_is_caught(tmp_path: Path) -> None:
    job = run_job("npu_paths.py", tmp_path, trace=ASYNC, args=("swap",))
    assert job.returncodes == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr
    assert all("out=" not in rank.stdout for rank in job.ranks)  # stopped before the second call
    at = {marker: f"npu_paths.py:{line_of('npu_paths.py', marker)}" for marker in ("A0", "B0", "B1", "A1")}
    assert (
        "collcheck: rank 1: swapped collectives in group hccl:0: rank 0 issued "
        f"reduce_scatter_tensor_uneven(float32[4]) on `out, a` at {at['A0']} (#1), then on `out, b` at "
        f"{at['B0']} (#2); rank 1 on `out, b` at {at['B1']} (#1), then on `out, a` at {at['A1']} (#2)"
    ) in job.ranks[1].stderr
    assert len(analyze(load_dir(str(job.trace_dir))).swaps) == 1


def test_a_backend_created_before_the_tracer_started_is_recorded_too(tmp_path: Path) -> None:
    trace_dir = tmp_path / "late"
    job = run_job("npu_late.py", tmp_path, args=(str(trace_dir),))  # enable() after init
    assert job.returncodes == [0, 0], job.stderr
    assert [rank.stdout.strip() for rank in job.ranks] == ["rank 0 out=[2.0, 2.0]", "rank 1 out=[2.0, 2.0]"]
    events = analyze(load_dir(str(trace_dir))).events[1]
    assert [(e.group, e.op, e.site.line) for e in events] == [
        ("hccl:0", "reduce_scatter_tensor_uneven", line_of("npu_late.py", "LATE"))
    ]
