"""Adapters for communicators that bypass c10d (vLLM's PyNccl, vllm-ascend's PyHccl).

The multi-rank tests write a stand-in vLLM package to a temp dir: the same dotted path and class
as vLLM's `PyNcclCommunicator`, with collectives that run on gloo. The programs import it after
the tracer started (through the import hook); the in-process tests cover the wrapping itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import PROGRAMS, REPO, Job, line_of, run_job

from collcheck.runtime import adapters
from collcheck.runtime.adapters import AdapterSpec
from collcheck.runtime.analyze import analyze
from collcheck.runtime.record import CollectiveEncoder, TraceWriter, read_trace
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.tracer import TraceConfig
from collcheck.runtime.verify import ABORT_EXIT_CODE

FAKE_PYNCCL = '''
"""Stand-in for vLLM's PyNcclCommunicator: vLLM's names, gloo underneath, CPU tensors."""
import torch.distributed as dist
from torch.distributed import ReduceOp

BAD_ROOT = ValueError("no such root")


class PyNcclCommunicator:
    def __init__(self, group, device="cpu"):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.ranks = dist.get_process_group_ranks(group)
        self.disabled = False
        self.last_out = None
        import torch

        self.all_reduce(torch.zeros(1))  # vLLM's warm-up, while constructing

    def all_reduce(self, in_tensor, out_tensor=None, op=ReduceOp.SUM, stream=None):
        if self.disabled:
            return None
        out = in_tensor.clone() if out_tensor is None else out_tensor.copy_(in_tensor)
        dist.all_reduce(out, op=op, group=self.group)
        self.last_out = out
        return out

    def all_gather(self, output_tensor, input_tensor, stream=None):
        dist.all_gather_into_tensor(output_tensor, input_tensor, group=self.group)

    def all_gatherv(self, output_tensor, input_tensor, sizes, stream=None):
        offset = 0
        for root, size in enumerate(sizes):  # one broadcast per rank, as vLLM does in an NCCL group
            part = output_tensor[offset : offset + size]
            if root == self.rank:
                part.copy_(input_tensor)
            self.broadcast(part, root)
            offset += size

    def reduce_scatter(self, output_tensor, input_tensor, op=ReduceOp.SUM, stream=None):
        dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=self.group)

    def broadcast(self, tensor, src, stream=None):
        if src >= self.world_size:
            raise BAD_ROOT
        dist.broadcast(tensor, src=self.ranks[src], group=self.group)

    def send(self, tensor, dst, stream=None):
        dist.send(tensor, dst=self.ranks[dst], group=self.group)

    def recv(self, tensor, src, stream=None):
        dist.recv(tensor, src=self.ranks[src], group=self.group)
'''

ASYNC = TraceConfig(verify=True, timeout_s=10.0)
STRICT = TraceConfig(verify=True, strict=True, timeout_s=10.0)
ADAPTER_JOB_TIMEOUT_S = 18.0


def fake_vllm(root: Path) -> Path:
    """vllm/distributed/device_communicators/pynccl.py under `root`."""
    package = root / "vllm" / "distributed" / "device_communicators"
    package.mkdir(parents=True)
    for directory in (root / "vllm", root / "vllm" / "distributed", package):
        (directory / "__init__.py").write_text("")
    (package / "pynccl.py").write_text(FAKE_PYNCCL)
    return root


def _results(stdout: str) -> dict[str, Any]:
    line = next(line for line in stdout.splitlines() if line.startswith("RESULT "))
    return dict(json.loads(line.removeprefix("RESULT ")))


# ---------------------------------------------------------------------------------------------
# Real 2-rank gloo jobs


def run_adapter_job(program: str, tmp_path: Path, trace: TraceConfig, **env: str) -> Job:
    """A job whose programs import the stand-in vLLM package written under tmp_path."""
    extra = {"FAKE_VLLM": str(fake_vllm(tmp_path / "fake")), **env}
    return run_job(program, tmp_path, trace=trace, extra_env=extra, timeout=ADAPTER_JOB_TIMEOUT_S)


@pytest.mark.multirank
def test_pynccl_collectives_are_recorded_and_verified_without_changing_results(tmp_path: Path) -> None:
    job = run_adapter_job("adapters_pynccl.py", tmp_path, ASYNC)
    assert job.returncodes == [0, 0], job.stderr
    results = [_results(rank.stdout) for rank in job.ranks]
    for rank, got in enumerate(results):
        assert got["all_reduce"] == [1.0, 3.0, 5.0, 7.0]
        assert got["max"] == [1.0, 5.0]
        assert got["all_gather"] == [0.0, 0.0, 1.0, 1.0]
        assert got["all_gatherv"] == [1.0, 2.0, 2.0]
        assert got["reduce_scatter"] == [[0.0, 2.0], [4.0, 6.0]][rank]
        assert got["broadcast"] == [1.0, 1.0, 1.0]
        assert got["same_object"] and got["same_error"] and got["disabled"]
    assert results[1]["recv"] == [7.0, 7.0]

    analysis = analyze(load_dir(str(job.trace_dir)))
    assert not analysis.divergences and not analysis.diverged, analysis.divergences
    assert "mismatch" not in job.stderr
    line = {marker: line_of("adapters_pynccl.py", marker) for marker in _MARKERS}
    for rank in (0, 1):
        events = [e for e in analysis.events[rank] if e.group.startswith("pynccl:")]
        collectives = [e for e in events if not e.group.endswith(":p2p")]
        # The warm-up inside __init__ is #1; all_gatherv's inner broadcasts are not recorded again,
        # and the call made while `disabled` (no communication) is not recorded at all.
        assert [e.seq for e in collectives] == list(range(1, 9))
        assert {e.group_ranks for e in collectives} == {(0, 1)}
        assert {e.group_desc for e in collectives} == {"PyNcclCommunicator"}
        assert collectives[0].describe == "all_reduce(float32[1])"
        by_line = {e.site.line: e for e in events if e.site.file.endswith("adapters_pynccl.py")}
        expected = dict(_EXPECTED, PN_SEND="send(float32[2], peer=1)", PN_RECV="recv(float32[2], peer=0)")
        for marker, describe in expected.items():
            if marker == ("PN_RECV" if rank == 0 else "PN_SEND"):
                continue
            assert by_line[line[marker]].describe == describe, marker
        # Host tensors: the call's return is its completion; the raising call failed.
        raised = by_line[line["PN_RAISES"]]
        assert raised.t_end is None and all(e.t_end is not None for e in events if e is not raised)
        assert line["PN_DISABLED"] not in by_line


_EXPECTED = {
    "PN_ALL_REDUCE": "all_reduce(float32[4])",
    "PN_MAX": "all_reduce(float32[2], op=max)",
    "PN_ALL_GATHER": "all_gather_into_tensor(float32[4])",
    "PN_ALL_GATHERV": "all_gatherv(float32[3])",
    "PN_REDUCE_SCATTER": "reduce_scatter_tensor(float32[4])",
    "PN_BROADCAST": "broadcast(float32[3], root=1)",
    "PN_RAISES": "broadcast(float32[1], root=5)",
}
_MARKERS = (*_EXPECTED, "PN_SEND", "PN_RECV", "PN_DISABLED")


@pytest.mark.multirank
def test_pynccl_shape_mismatch_is_caught_and_named_by_the_analyzer(tmp_path: Path) -> None:
    job = run_adapter_job("adapters_mismatch.py", tmp_path, STRICT)
    line0, line1 = (
        line_of("adapters_mismatch.py", "MISMATCH_0"),
        line_of("adapters_mismatch.py", "MISMATCH_1"),
    )
    expected = (
        f"rank 0 all_reduce(float32[4]) at adapters_mismatch.py:{line0} vs rank 1 all_reduce(float32[8]) "
        f"at adapters_mismatch.py:{line1} (group pynccl:0, #2)"
    )
    # Strict mode: reported before the communicator ran on rank 1, and the job ends.
    assert job.returncodes == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr
    assert f"collective mismatch: {expected}" in job.stderr
    cli = subprocess.run(
        [sys.executable, "-m", "collcheck", "trace", str(job.trace_dir)],
        cwd=str(PROGRAMS),
        env={"PYTHONPATH": str(REPO), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert cli.returncode == 1, cli.stderr
    assert f"first divergence: {expected}" in cli.stdout
    assert f"adapters_mismatch.py:{line0} in <module>" in cli.stdout
    assert f"adapters_mismatch.py:{line1} in <module>" in cli.stdout


@pytest.mark.multirank
def test_adapters_can_be_switched_off(tmp_path: Path) -> None:
    job = run_adapter_job("adapters_pynccl.py", tmp_path, TraceConfig(timeout_s=10.0), COLLCHECK_ADAPTERS="0")
    assert job.returncodes == [0, 0], job.stderr
    assert _results(job.ranks[0].stdout)["all_reduce"] == [1.0, 3.0, 5.0, 7.0]
    groups = {row.get("group") for row in read_trace(str(job.trace_dir / "collcheck-rank0.jsonl"))}
    assert groups and not any(str(group).startswith("pynccl") for group in groups)


# ---------------------------------------------------------------------------------------------
# In process: wrapping, call-through, events (a stub tracer; no torch.distributed)


class _Tensor:
    def __init__(self, *shape: int, dtype: str = "torch.float32", device: str = "cpu") -> None:
        self.shape = shape
        self.dtype = dtype
        self.device = types.SimpleNamespace(type=device)


class _StubMonitor:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.done: list[tuple[str, int]] = []
        self.failed = 0

    def issued(self, event: Any) -> None:
        self.events.append(event)

    def completed(self, group: str, seq: int) -> None:
        self.done.append((group, seq))

    def collective_failed(self) -> None:
        self.failed += 1


class _StubTracer:
    """What the adapters use of the Tracer: rank, writer, encoder, monitor."""

    def __init__(self, path: Path) -> None:
        self.rank = 0
        self.writer = TraceWriter(str(path))
        self.encoder = CollectiveEncoder(0)
        self.monitor = _StubMonitor()


COMM_SOURCE = """
class Comm:
    def __init__(self):
        self.rank, self.world_size, self.group, self.disabled = 0, 2, object(), False
        self.out = object()

    def all_reduce(self, in_tensor, op=None, stream=None):
        return self.out

    def all_gatherv(self, output_tensor, input_tensor, sizes, stream=None):
        self.broadcast(output_tensor, 0)

    def broadcast(self, tensor, src, stream=None):
        if src < 0:
            raise KeyError(src)

    def send(self, tensor, dst, stream=None):
        pass
"""

_SPEC = AdapterSpec("collcheck_test_comm", "Comm", "testcomm", adapters.COMMUNICATOR_METHODS)


@pytest.fixture
def comm_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "collcheck_test_comm.py").write_text(COMM_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(adapters, "ADAPTERS", [_SPEC])
    sys.modules.pop("collcheck_test_comm", None)
    adapters._instances_per_key.clear()
    yield tmp_path
    adapters.uninstall()
    sys.modules.pop("collcheck_test_comm", None)


def test_import_hook_and_already_imported_modules_are_both_patched(comm_module: Path) -> None:
    import importlib

    adapters.install()
    adapters.install()  # idempotent
    module = importlib.import_module("collcheck_test_comm")
    wrapped = module.Comm.all_reduce
    assert getattr(wrapped, "__collcheck_adapter__", False)
    assert wrapped.__wrapped__.__name__ == "all_reduce"  # functools.wraps keeps the signature
    assert adapters.patch_module(module) == 0  # never wrapped twice
    adapters.uninstall()
    assert not hasattr(module.Comm.all_reduce, "__collcheck_adapter__")
    # Imported before install: patched in place, so existing instances are covered too.
    comm = module.Comm()
    adapters.install()
    assert getattr(type(comm).all_reduce, "__collcheck_adapter__", False)


def test_calls_go_through_unchanged_without_a_tracer(comm_module: Path) -> None:
    adapters.install()
    import collcheck_test_comm

    comm = collcheck_test_comm.Comm()
    assert comm.all_reduce(_Tensor(4)) is comm.out
    with pytest.raises(KeyError) as raised:
        comm.broadcast(_Tensor(1), -1)
    assert raised.value.args == (-1,)


def test_events_match_the_c10d_format(
    comm_module: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapters.install()
    import collcheck_test_comm

    tracer = _StubTracer(tmp_path / "trace.jsonl")
    monkeypatch.setattr(adapters, "active_tracer", lambda: tracer)
    comm = collcheck_test_comm.Comm()
    assert comm.all_reduce(in_tensor=_Tensor(2, 3), op=4) is comm.out  # EV_ALL_REDUCE
    comm.all_gatherv(_Tensor(6), _Tensor(3), [3, 3])  # EV_GATHERV: its inner broadcast is not recorded
    with pytest.raises(KeyError):
        comm.broadcast(_Tensor(1), -1)  # EV_RAISES
    comm.all_reduce(_Tensor(8, device="cuda"))  # enqueued on a stream: completion unobservable
    comm.send(_Tensor(2), 1)
    comm.disabled = True
    comm.all_reduce(_Tensor(4))  # no communication: not recorded
    tracer.writer.close()

    rows = read_trace(str(tmp_path / "trace.jsonl"))
    colls = [row for row in rows if row["ev"] == "coll"]
    # Group names are prefix + the underlying group (not a c10d group here: members unknown).
    assert [(row["group"], row["seq"], row["op"]) for row in colls] == [
        ("testcomm:object", 1, "all_reduce"),
        ("testcomm:object", 2, "all_gatherv"),
        ("testcomm:object", 3, "broadcast"),
        ("testcomm:object", 4, "all_reduce"),
        ("testcomm:object:p2p", 1, "send"),
    ]
    first = colls[0]
    assert (first["shapes"], first["dtypes"], first["reduce_op"]) == ([[2, 3]], ["float32"], "max")
    assert first["site"]["file"] == __file__ and first["site"]["func"] == "test_events_match_the_c10d_format"
    groups = [row for row in rows if row["ev"] == "group"]  # one per member list, before its first use
    assert [(row["gid"], row["group"], row["ranks"], row["desc"]) for row in groups] == [
        (1, "testcomm:object", [], "Comm"),
        (2, "testcomm:object:p2p", [], "Comm"),
    ]
    assert rows.index(groups[0]) < rows.index(first) and [row["gid"] for row in colls] == [1, 1, 1, 1, 2]
    assert colls[2]["root"] == -1
    ends = [(row["ev"], row["seq"], row.get("ok")) for row in rows if row["ev"] in ("done", "unobserved")]
    assert ends == [
        ("done", 1, True),
        ("done", 2, True),
        ("done", 3, False),
        ("unobserved", 4, None),
        ("done", 1, True),
    ]
    # Members unknown: recorded, never handed to the cross-rank checks (no leader to compare with).
    assert tracer.monitor.events == [] and tracer.monitor.failed == 1
    assert len(tracer.monitor.done) == 5
