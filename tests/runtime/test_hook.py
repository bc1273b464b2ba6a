"""What the dispatcher hook records for each kind of collective (one gloo process, world size 1)."""

from __future__ import annotations

import pytest
from conftest import line_of, run_job

from collcheck.runtime.analyze import analyze
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.tracer import TraceConfig

pytestmark = pytest.mark.multirank


@pytest.fixture(scope="module", params=["verify", "record"])
def events(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[int, object]:
    # Both ways of observing completion: future callbacks (verify) and wait()/polling (record).
    tmp = tmp_path_factory.mktemp("ops")
    config = TraceConfig(verify=request.param == "verify", timeout_s=30)
    job = run_job("ops_single.py", tmp, nranks=1, trace=config)
    assert job.returncodes == [0], job.stderr
    by_line: dict[int, object] = {}
    for event in analyze(load_dir(str(job.trace_dir))).events[0]:
        # By every user frame: a compiled function's collective is attributed to the compiled
        # function's frame, with the calling line next in the stack.
        for frame in event.site.stack:
            by_line.setdefault(int(frame.rsplit(" in ", 1)[0].rsplit(":", 1)[1]), event)
    return by_line


@pytest.mark.parametrize(
    ("marker", "op", "describe"),
    [
        ("OP_ALL_REDUCE", "all_reduce", "all_reduce(float64[6], op=max)"),
        ("OP_BROADCAST", "broadcast", "broadcast(float64[6], root=0)"),
        ("OP_ALL_GATHER_INTO", "all_gather_into_tensor", "all_gather_into_tensor(float64[6])"),
        ("OP_REDUCE_SCATTER", "reduce_scatter_tensor", "reduce_scatter_tensor(float64[6])"),
        ("OP_ALL_GATHER", "all_gather", "all_gather(int32[2x3])"),
        ("OP_BARRIER", "barrier", "barrier()"),
        ("OP_FUNCTIONAL", "all_reduce", "all_reduce(float32[5])"),
        ("OP_COMPILED", "all_reduce", "all_reduce(float32[7])"),
    ],
)
def test_each_collective_is_recorded_with_its_call_site(
    events: dict[int, object], marker: str, op: str, describe: str
) -> None:
    event = events[line_of("ops_single.py", marker)]
    assert event.op == op  # type: ignore[attr-defined]
    assert event.describe == describe  # type: ignore[attr-defined]
    assert event.site.file.endswith("ops_single.py")  # type: ignore[attr-defined]
    # Completion comes from the Work (its future, or a returned wait()); gloo's reduce_scatter_tensor
    # has no future and never reports completion, and the trace says so.
    assert (event.t_end is not None) == event.observable  # type: ignore[attr-defined]
    assert event.observable == (op != "reduce_scatter_tensor")  # type: ignore[attr-defined]
