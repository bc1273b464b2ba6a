"""Launch small real gloo jobs (2-4 ranks on 127.0.0.1) in subprocesses, each with a hard timeout."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from collcheck.runtime.launch import tracing_env
from collcheck.runtime.tracer import TraceConfig, config_to_env

PROGRAMS = Path(__file__).parent / "programs"
REPO = Path(__file__).resolve().parents[2]
JOB_TIMEOUT_S = 60.0


@dataclass
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str


@dataclass
class Job:
    ranks: list[RankResult]
    trace_dir: Path
    seconds: float

    @property
    def stderr(self) -> str:
        return "\n".join(r.stderr for r in self.ranks)

    @property
    def returncodes(self) -> list[int]:
        return [r.returncode for r in self.ranks]


def bench_module(name: str) -> ModuleType:
    """`bench/<name>.py` loaded as a module (the benches are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def line_of(program: str, marker: str) -> int:
    """The line of a `# MARKER` comment in a test program, so tests never hard-code line numbers."""
    for number, text in enumerate((PROGRAMS / program).read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# {marker}"):
            return number
    raise AssertionError(f"{marker} not in {program}")


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLLCHECK_", "TORCH_DISTRIBUTED"))}
    env["PYTHONPATH"] = os.pathsep.join([str(PROGRAMS), str(REPO)])
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_job(
    program: str,
    tmp_path: Path,
    nranks: int = 2,
    trace: TraceConfig | None = None,
    args: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
    timeout: float = JOB_TIMEOUT_S,
    pythonpath: tuple[str, ...] = (),
) -> Job:
    """Start `nranks` processes of `program` (env:// rendezvous) and wait for all, killing on timeout.

    With `trace`, the tracer is switched on exactly as `collcheck run` does it (boot dir on
    PYTHONPATH plus COLLCHECK_* variables): the programs themselves contain no collcheck code.
    `pythonpath` folders come first on the ranks' PYTHONPATH (after collcheck's boot folder); a
    `program` given as an absolute path is run from there.
    """
    env = base_env()
    env["PYTHONPATH"] = os.pathsep.join([*pythonpath, env["PYTHONPATH"]])
    trace_dir = tmp_path / "trace"
    if trace is not None:
        trace = dataclasses.replace(trace, trace_dir=str(trace_dir))
        env = tracing_env(env, config_to_env(trace))
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(nranks))
    env.update(extra_env or {})
    started = time.monotonic()
    processes = []
    for rank in range(nranks):
        rank_env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
        processes.append(
            subprocess.Popen(
                [sys.executable, str(PROGRAMS / program), *args],
                env=rank_env,
                cwd=str(PROGRAMS),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        )
    results = [_wait(rank, process, started + timeout) for rank, process in enumerate(processes)]
    return Job(results, trace_dir, time.monotonic() - started)


TEARDOWN_ABORT = "terminate called without an active exception"


def run_job_past_teardown_aborts(program: str, folder: Path, **options: Any) -> Job:
    """torch 2.13 on gloo sometimes aborts a rank at interpreter exit, after its work is done, with
    or without collcheck (about 1 run in 10 of the plain DDP program, about 1 in 60 of
    mixed_groups.py): such a run is repeated, up to twice; any other failure is returned as it is."""
    job = run_job(program, folder / "0", **options)
    for attempt in range(1, 3):
        torn_down = [r for r in job.ranks if r.returncode == -signal.SIGABRT and TEARDOWN_ABORT in r.stderr]
        if not torn_down or len(torn_down) + job.returncodes.count(0) != len(job.ranks):
            return job
        job = run_job(program, folder / str(attempt), **options)
    return job


def _wait(rank: int, process: subprocess.Popen[str], deadline: float) -> RankResult:
    try:
        out, err = process.communicate(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        err += "\n<killed by the test timeout>"
    return RankResult(rank, process.returncode, out, err)


@pytest.fixture(scope="session", autouse=True)
def native_recorder_built() -> None:
    """Build record mode's native kernel once, before any job: a rank that had to build it would
    spend most of its timeout compiling. Where it cannot be built, ranks use the Python kernel."""
    from collcheck.runtime import native_recorder as native

    native.load(build=True, quiet=True)


@pytest.fixture
def job_tmp(tmp_path: Path) -> Path:
    return tmp_path
