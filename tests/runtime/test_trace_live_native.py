"""Binary traces written by the native kernel (native/binary_trace.h, handed the file by
trace_live.BinaryTraceWriter.use_native): the bytes the Python encoder writes for the same lines,
also when the disk refuses writes, and the same reports as the native kernel's JSON lines."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, line_of, run_job
from test_trace_live import _drive, _reports

from collcheck.runtime import native_recorder as native
from collcheck.runtime.record import TraceFormat
from collcheck.runtime.trace_binary import BINARY_SUFFIX, convert_to_binary, convert_to_json
from collcheck.runtime.trace_live import BinaryTraceWriter, header_line
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.tracer import TraceConfig
from collcheck.runtime.verify import ABORT_EXIT_CODE


@pytest.fixture(scope="module")
def module() -> object:
    loaded = native.load(build=True, quiet=True)
    if loaded is None:
        pytest.skip("the native recorder cannot be built here")
    return loaded


class _HandedOver(BinaryTraceWriter):
    """A writer that gives the file to the native encoder after its first line, as the tracer
    does after the header."""

    def __init__(self, path: str, module: object) -> None:
        super().__init__(path)
        self.module = module

    def write_line(self, line: str) -> None:
        super().write_line(line)
        if self._native is None:
            self.use_native(self.module)  # type: ignore[arg-type]


@pytest.mark.parametrize("groups", [1, 3])
def test_the_native_encoder_writes_the_bytes_the_python_encoder_writes(
    tmp_path: Path, module: object, groups: int
) -> None:
    _drive(BinaryTraceWriter(str(tmp_path / "python.ccbin")), groups=groups, count=60)
    _drive(_HandedOver(str(tmp_path / "native.ccbin"), module), groups=groups, count=60)
    assert (tmp_path / "native.ccbin").read_bytes() == (tmp_path / "python.ccbin").read_bytes()


def test_a_handed_over_file_is_never_handed_over_twice(tmp_path: Path, module: object) -> None:
    writer = BinaryTraceWriter(str(tmp_path / "collcheck-rank0.ccbin"))
    writer.write({"ev": "header", "rank": 0})
    writer.use_native(module)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        writer.use_native(module)  # type: ignore[arg-type]
    writer.close()


# Both encoders under RLIMIT_FSIZE (every write past the limit refused, as by a full disk, while
# bytes inside the file can still be rewritten): the same bytes and the same count of lost records.
FULL_DISK = """
import resource, signal, sys
sys.path.insert(0, sys.argv[4])
from test_trace_live import _drive
from collcheck.runtime import native_recorder
from collcheck.runtime.trace_live import BinaryTraceWriter, header_line
from collcheck.runtime.trace_load import load_dir
from test_trace_live_native import _HandedOver
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
module = native_recorder.load(build=False)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), resource.RLIM_INFINITY))
writer = BinaryTraceWriter(sys.argv[1]) if sys.argv[2] == "python" else _HandedOver(sys.argv[1], module)
_drive(writer, groups=2, count=30)
print(writer.lost)
"""


@pytest.mark.parametrize("limit", [1000, 3001, 5000])
def test_on_a_full_disk_both_encoders_write_and_count_alike(
    tmp_path: Path, module: object, limit: int
) -> None:
    results = []
    for encoder in ("python", "native"):
        path = tmp_path / f"{encoder}.ccbin"
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                FULL_DISK,
                str(path),
                encoder,
                str(limit),
                str(REPO / "tests" / "runtime"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert done.returncode == 0, done.stderr
        results.append((path.read_bytes(), int(done.stdout.split()[-1])))
    assert results[0][1] > 0
    assert results[1] == results[0]


# The same program recorded by the native kernel as JSON lines and as binary records: the same
# report, and the binary records are what conversion makes of them.
NATIVE_PROGRAMS = [
    ("swap_same.py", 2, 60.0),  # a swapped pair
    ("sigkill.py", 2, 60.0),  # a missing collective: rank 1 killed by SIGKILL
    ("mixed_groups.py", 2, 90.0),  # subgroups, unobservable collectives, sends and recvs
]


@pytest.mark.multirank
@pytest.mark.parametrize(("program", "ranks", "timeout"), NATIVE_PROGRAMS)
def test_native_json_and_binary_recordings_give_the_same_report(
    tmp_path: Path, module: object, program: str, ranks: int, timeout: float
) -> None:
    record = TraceConfig(timeout_s=3.0, native=True)
    reports = []
    for trace_format in TraceFormat:
        config = dataclasses.replace(record, trace_format=trace_format)
        job = run_job(program, tmp_path / trace_format.value, ranks, config, timeout=timeout)
        suffix = BINARY_SUFFIX if trace_format is TraceFormat.BINARY else ".jsonl"
        names = sorted(path.name for path in job.trace_dir.iterdir())
        assert names == [f"collcheck-rank{rank}{suffix}" for rank in range(ranks)], names
        reports.append(_reports(job.trace_dir)[:3])
        if trace_format is TraceFormat.BINARY:
            for path in job.trace_dir.iterdir():
                back, again = tmp_path / "back.jsonl", tmp_path / "again.ccbin"
                assert convert_to_json(str(path), str(back)) == 0
                assert b'"hook":"native"' in back.read_bytes()  # the native kernel wrote it
                convert_to_binary(str(back), str(again))
                assert again.read_bytes() == path.read_bytes(), path.name
    assert reports[0] == reports[1]


@pytest.mark.multirank
def test_async_verify_on_the_native_kernel_finds_a_drift_and_writes_a_binary_trace(
    tmp_path: Path, module: object
) -> None:
    # The kernel's lines reach the monitor as strings whatever the file's format: a divergence at a
    # call site already used is found in the background, and the trace is binary, read by load_dir.
    config = TraceConfig(verify=True, timeout_s=3.0, trace_format=TraceFormat.BINARY)
    job = run_job("op_drift.py", tmp_path, trace=config)
    assert job.returncodes == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr
    line = line_of("op_drift.py", "DRIFT")
    assert (
        f"rank 1 all_reduce(float32[4], op=max) at op_drift.py:{line} (group 0, #21)" in job.ranks[1].stderr
    )
    names = sorted(path.name for path in job.trace_dir.iterdir())
    assert names == ["collcheck-rank0.ccbin", "collcheck-rank1.ccbin"], names
    header = header_line(str(job.trace_dir / "collcheck-rank1.ccbin"))
    assert header is not None and b'"hook":"native"' in header and b'"mode":"async"' in header
    traces = load_dir(str(job.trace_dir))
    assert [len(trace.events) >= 21 for trace in traces] == [True, True]
    assert not [problem for trace in traces for problem in trace.problems]
