"""`collcheck run` ends every process of the job: after the hang backstop (torchrun runs each
worker in a session of its own), and when it is itself stopped (a CI timeout's SIGTERM)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PROGRAMS, base_env, free_port

from collcheck.runtime.trace_live import header_line

pytestmark = pytest.mark.multirank

MARK = "COLLCHECK_TEST_JOB"


def _marked(tag: str) -> list[int]:
    """Processes whose environment holds MARK=tag (every process of the job inherits it)."""
    found = []
    needle = f"{MARK}={tag}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
            state = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != b"Z":
            found.append(int(name))
    return found


def _header_pids(trace_dir: Path) -> list[int]:
    pids = []
    for path in trace_dir.glob("collcheck-rank*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("ev") == "header":
                pids.append(int(row["pid"]))
    for path in trace_dir.glob("collcheck-rank*.ccbin"):  # written live (--trace-format binary)
        header = header_line(str(path))
        if header is not None:
            pids.append(int(json.loads(header)["pid"]))
    return pids


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


@pytest.fixture
def tag() -> Iterator[str]:
    """A tag for this test's job; whatever is left of the job is killed afterwards."""
    value = uuid.uuid4().hex
    yield value
    for pid in _marked(value):
        os.kill(pid, signal.SIGKILL)


def _start(
    tmp_path: Path, tag: str, ignore_sigterm: int | None, trace_format: str = "json"
) -> subprocess.Popen[bytes]:
    """`collcheck run -- torchrun stall_forever.py`, its output in files: a process of the job
    left running would hold a pipe open, and reading it to the end would never finish."""
    env = base_env()
    env[MARK] = tag
    env["PG_TIMEOUT"] = "300"
    if ignore_sigterm is not None:
        env["IGNORE_SIGTERM"] = str(ignore_sigterm)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    torchrun += ["--master-port", str(free_port()), str(PROGRAMS / "stall_forever.py")]
    command = [sys.executable, "-m", "collcheck", "run", "--timeout", "1", "--trace-dir", str(tmp_path / "t")]
    command += ["--trace-format", trace_format]
    with open(tmp_path / "run.out", "wb") as out, open(tmp_path / "run.err", "wb") as err:
        return subprocess.Popen([*command, "--", *torchrun], cwd=tmp_path, env=env, stdout=out, stderr=err)


def _stop(run: subprocess.Popen[bytes], tag: str) -> None:
    """After a failed test: the whole job, so that the test itself never hangs on it."""
    for pid in [run.pid, *_marked(tag)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    run.wait(timeout=30)


def _wait_for_headers(trace_dir: Path, deadline: float) -> list[int]:
    while time.monotonic() < deadline:
        if trace_dir.is_dir():
            pids = _header_pids(trace_dir)
            if len(pids) == 2:
                return pids
        time.sleep(0.5)
    raise AssertionError("the ranks never wrote their trace headers")


# binary: the traces written live, whose completions are patched in (trace_live.open_collectives)
@pytest.mark.parametrize(("ignore_sigterm", "trace_format"), [(None, "json"), (1, "json"), (None, "binary")])
def test_the_hang_backstop_ends_every_worker(
    tmp_path: Path, tag: str, ignore_sigterm: int | None, trace_format: str
) -> None:
    run = _start(tmp_path, tag, ignore_sigterm, trace_format)
    try:
        run.wait(timeout=180)
    except subprocess.TimeoutExpired:
        _stop(run, tag)
        raise AssertionError("collcheck run did not stop the hung job") from None
    err = (tmp_path / "run.err").read_text(errors="replace")
    workers = _header_pids(tmp_path / "t")
    assert len(workers) == 2, err[-3000:]
    assert "hung and was stopped" in err and run.returncode != 0
    assert not [pid for pid in workers if _running(pid)]
    assert _marked(tag) == []


@pytest.mark.parametrize("ignore_sigterm", [None, 0])
def test_sigterm_to_collcheck_run_ends_the_whole_job(
    tmp_path: Path, tag: str, ignore_sigterm: int | None
) -> None:
    run = _start(tmp_path, tag, ignore_sigterm)
    try:
        workers = _wait_for_headers(tmp_path / "t", time.monotonic() + 120)
        time.sleep(2.0)  # both ranks are in their endless C call
        assert len(_marked(tag)) >= 4  # collcheck run, torchrun, two workers
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            _stop(run, tag)
    err = (tmp_path / "run.err").read_text(errors="replace")
    assert run.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "SIGTERM received" in err
    assert not [pid for pid in workers if _running(pid)]
    assert _marked(tag) == []


@pytest.mark.parametrize("ignore_sigterm", [None, 0])
def test_sigkill_of_collcheck_run_still_ends_the_whole_job(
    tmp_path: Path, tag: str, ignore_sigterm: int | None
) -> None:
    """SIGKILL cannot be handled: the launcher's parent-death signal ends the job instead (before,
    torchrun and both workers kept running, re-parented to init)."""
    run = _start(tmp_path, tag, ignore_sigterm)
    try:
        workers = _wait_for_headers(tmp_path / "t", time.monotonic() + 120)
        time.sleep(2.0)
        assert len(_marked(tag)) >= 4  # collcheck run, torchrun, two workers
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        deadline = time.monotonic() + 90  # torchrun gives workers that ignore SIGTERM 30 s
        while _marked(tag) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        if run.poll() is None:
            _stop(run, tag)
    assert not [pid for pid in workers if _running(pid)]
    assert _marked(tag) == []
