"""The verdict says what happened (issue 27, item 11): a swap reported at run time whose trace line
a full disk lost, a stall after which the launcher stopped the waiting rank, and the status of a
`collcheck run` that was itself sent SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import base_env
from test_analyze import _event, _write

from collcheck.runtime import liveline
from collcheck.runtime.analyze import analyze
from collcheck.runtime.liveline import LiveReport
from collcheck.runtime.record import TraceWriter, trace_file_name
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.verdict import JobEnd, Status, decide

SWAP = "collective swap: rank 0 all_reduce(a) then all_reduce(b) at train.py:12 vs rank 1 ... (group 0, #31)"


def _lost_tail(folder: Path) -> None:
    """Two ranks whose traces stop after 30 matching collectives: the full disk took the rest."""
    folder.mkdir()
    for rank in (0, 1):
        _write(folder, rank, [_event(rank, seq, 4, 10) for seq in range(1, 31)], exited=False)


def test_a_live_swap_report_is_the_verdict_when_its_trace_line_was_lost(tmp_path: Path) -> None:
    _lost_tail(tmp_path / "full")
    analysis = analyze(load_dir(str(tmp_path / "full")))
    before = decide(analysis, JobEnd(1), {})
    assert before.status == Status.RANK_DIED  # what the verdict said: "rank 0 died"
    live = [LiveReport(0, "swap", SWAP + "\n  details")]
    found = decide(analysis, JobEnd(1), {}, live=live)
    assert (found.status, found.text) == (Status.MISMATCH, SWAP)


def test_a_stall_then_sigterm_by_the_launcher_is_a_stall(tmp_path: Path) -> None:
    stalled = tmp_path / "stalled"
    stalled.mkdir()
    writer = TraceWriter(str(stalled / trace_file_name(0)))
    writer.write({"ev": "header", "rank": 0})
    writer.write({"ev": "coll", **_event(0, 1, 4, 10).to_json()})
    text = "stall: rank 0 has waited 3.0s in all_reduce(float32[4]) at train.py:10 (group 0, #1)"
    writer.write({"ev": "report", "kind": "stall", "severity": "error", "text": text, "rank": 0, "t": 1.0})
    writer.close()
    _write(stalled, 1, [], exited=False)
    # rank 0 stopped itself after its report; torchrun then stopped rank 1, which never issued #1
    found = decide(analyze(load_dir(str(stalled))), JobEnd(1), {0: 86, 1: -signal.SIGTERM})
    assert found.status == Status.STALL
    assert found.text == text + "; then the launcher stopped rank 1 (SIGTERM)"
    # a rank that died of something else is still the cause
    crashed = decide(analyze(load_dir(str(stalled))), JobEnd(1), {0: 86, 1: -signal.SIGKILL})
    assert crashed.status == Status.RANK_DIED


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)]
)
def test_an_interrupted_verdict_prints_the_status_it_exits_with(
    tmp_path: Path, signum: int, status: int
) -> None:
    folder = tmp_path / "ok"
    folder.mkdir()
    for rank in (0, 1):
        _write(folder, rank, [_event(rank, 1, 4, 10)])
    found = decide(analyze(load_dir(str(folder))), JobEnd(status, interrupted=True, exit_status=status), {})
    assert found.status == Status.INTERRUPTED and found.code == status
    assert f"[exit status {status}: interrupted]" in found.paragraph
    assert signal.Signals(signum).name in found.text


@pytest.mark.skipif(not liveline.supported(), reason="Linux abstract sockets")
def test_live_reports_reach_the_listener_and_strangers_are_bounded() -> None:
    listener = liveline.Listener()
    name = listener.env()[liveline.ENV_SOCKET]
    liveline.send(name, 1, "mismatch", "collective mismatch: ...")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as raw:
        raw.sendto(b"not json", "\0" + name)
        raw.sendto(b'{"rank": -4, "kind": "x", "text": "y"}', "\0" + name)
    for index in range(liveline.MAX_REPORTS + 10):
        liveline.send(name, 0, "stall", f"stall {index}")
    time.sleep(0.2)
    reports = listener.close()
    assert reports[0] == LiveReport(1, "mismatch", "collective mismatch: ...")
    assert len(reports) == liveline.MAX_REPORTS
    liveline.send(name, 0, "stall", "after close")  # nobody listens: never raises


def test_sigterm_to_collcheck_run_prints_143_and_exits_143(tmp_path: Path) -> None:
    program = tmp_path / "sleeper.py"
    program.write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "collcheck",
            "run",
            "--trace-dir",
            str(tmp_path / "t"),
            "--",
            sys.executable,
            str(program),
        ],
        env=base_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert run.stdout is not None and run.stdout.readline().strip() == "started"
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 143, err
    assert "[exit status 130" not in err
