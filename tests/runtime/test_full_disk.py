"""A full disk must not turn verification off, nor leave a trace that reads as complete."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROGRAMS, REPO, base_env, free_port, line_of

from collcheck.runtime.analyze import analyze
from collcheck.runtime.record import read_trace, trace_file_name
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.trace_model import EXIT_INCOMPLETE, Problem
from collcheck.runtime.trace_render import render_text

# A real write failure: RLIMIT_FSIZE makes the kernel refuse (EFBIG) every write past the limit,
# as a full disk refuses them (ENOSPC); rewriting bytes inside the file still works, as on a
# full disk.
WRITER = """
import json, resource, signal, sys
from collcheck.runtime.record import TraceWriter
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
writer = TraceWriter(sys.argv[1])
writer.write({"ev": "header", "rank": 0})
for seq in range(1, 41):
    writer.write({"ev": "coll", "rank": 0, "group": "0", "group_ranks": [0], "seq": seq, "op": "all_reduce",
                  "shapes": [[4]], "dtypes": ["float32"], "t_start": 100.0 + seq})
writer.write({"ev": "exit"})
writer.close()
print(writer.lost)
"""


def test_lines_a_full_disk_refused_are_counted_and_the_trace_says_incomplete(tmp_path: Path) -> None:
    path = tmp_path / trace_file_name(0)
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(path), "2000"],
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lost = int(done.stdout)
    written = [row for row in read_trace(str(path)) if row["ev"] == "coll"]
    assert lost > 0 and len(written) + lost == 41  # 40 collectives and the exit line
    assert "cannot write the trace" in done.stderr and f"incomplete: {lost} lines lost" in done.stderr
    problems: list[Problem] = []
    analysis = analyze(load_dir(str(tmp_path), problems), problems)
    assert analysis.lost == lost and analysis.exit_code() == EXIT_INCOMPLETE
    text = render_text(analysis)
    assert f"incomplete: {lost} events lost" in text and "result: consistent" not in text


def test_a_trace_with_nothing_written_is_not_consistent(tmp_path: Path) -> None:
    (tmp_path / trace_file_name(0)).write_bytes(b"")
    analysis = analyze(load_dir(str(tmp_path)))
    assert analysis.exit_code() == EXIT_INCOMPLETE and "no header line" in render_text(analysis)


def _run_on_a_full_disk(
    tmp_path: Path, options: list[str], free_pages: int, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`collcheck run OPTIONS -- torchrun full_disk.py` with its traces on a real full disk: a
    64 KiB tmpfs, filled up but for `free_pages` 4 KiB pages, in a private mount namespace
    (`unshare -rm`); then `collcheck trace --format json` into tmp_path/analysis.json."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) not installed")
    full = tmp_path / "full"
    full.mkdir()
    collcheck = [sys.executable, "-m", "collcheck"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    torchrun += ["--master-port", str(free_port()), str(PROGRAMS / "full_disk.py")]
    run = [*collcheck, "run", *options, "--trace-dir", str(full), "--", *torchrun]
    script = (
        f'mount -t tmpfs -o size=64k tmpfs "{full}" || exit 97\n'
        f'dd if=/dev/zero of="{full}/filler" bs=4k count={16 - free_pages} 2>/dev/null\n'
        '"$@"\necho "RUN_STATUS=$?"\n'
        f'{" ".join(collcheck)} trace --format json "{full}" > "{tmp_path}/analysis.json"\n'
        'echo "TRACE_STATUS=$?"\n'
    )
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", *run],
        cwd=REPO,
        env={**base_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode == 97:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    return done


@pytest.mark.multirank
def test_a_mismatch_still_stops_the_job_when_the_trace_folder_is_full(tmp_path: Path) -> None:
    done = _run_on_a_full_disk(tmp_path, ["--verify", "--timeout", "20"], free_pages=0)
    out = done.stdout + done.stderr
    assert "ran the mismatched all_reduce" not in out  # the job was stopped before it
    assert "RUN_STATUS=0" not in out and "RUN_STATUS=" in out
    line = line_of("full_disk.py", "FULL_DISK_MISMATCH")
    assert "collective mismatch" in done.stderr and f"full_disk.py:{line}" in done.stderr
    assert "cannot write the trace" in done.stderr
    assert "TRACE_STATUS=3" in out or "TRACE_STATUS=1" in out
    analysis = json.loads((tmp_path / "analysis.json").read_text())
    assert analysis["incomplete"] and analysis["problems"]
    # The verdict is the mismatch reported at run time, though its trace line was lost (it said a
    # rank died): liveline.py carries the report to collcheck run.
    assert "RUN_STATUS=3" in out and "verdict: collective mismatch" in done.stderr, done.stderr[-3000:]


@pytest.mark.multirank
def test_record_mode_counts_what_a_full_disk_dropped(tmp_path: Path) -> None:
    """Record mode's default kernel (native, where it is built) and the Python one both count
    the lines they could not write; the analysis says how many and never "consistent"."""
    done = _run_on_a_full_disk(tmp_path, ["--timeout", "20"], free_pages=2, env={"FULL_DISK_MATCH": "1"})
    out = done.stdout + done.stderr
    # `collcheck trace`: 3, incomplete; `collcheck run`'s verdict: 6, a tracer error (incomplete traces).
    assert "TRACE_STATUS=3" in out and "RUN_STATUS=6" in out, out[-3000:]
    assert "traced, consistent" not in out and "result: incomplete:" in done.stderr
    analysis = json.loads((tmp_path / "analysis.json").read_text())
    assert analysis["lost"] > 0 and not analysis["diverged"]
    assert any("events lost" in problem["text"] for problem in analysis["problems"])
