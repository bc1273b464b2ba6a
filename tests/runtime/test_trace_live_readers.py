"""Every reader takes the binary traces a live run writes (`--trace-format binary`) as it takes JSON
lines: load_dir (trace_load.py), the stall watchdog bringing a stopped peer's position up to date
(verify_stall.caught_up), the Perfetto export; a record cut short at the end is a note, never a
traceback."""

from __future__ import annotations

import dataclasses
import io
import shutil
from pathlib import Path

import pytest
from conftest import line_of, run_job
from test_trace_live import _drive

from collcheck.runtime.perfetto import write_perfetto
from collcheck.runtime.record import TraceFormat, TraceWriter
from collcheck.runtime.stream import analyze_dir
from collcheck.runtime.trace_binary import MAGIC, SLOT
from collcheck.runtime.trace_live import BinaryTraceWriter, tail_rows
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.trace_read import load_json
from collcheck.runtime.tracer import TraceConfig
from collcheck.runtime.verify import ABORT_EXIT_CODE
from collcheck.runtime.verify_protocol import Position
from collcheck.runtime.verify_stall import caught_up


def _both(tmp_path: Path, groups: int = 2, count: int = 40) -> tuple[Path, Path]:
    """The same lines written as JSON lines and as live binary records, each in its own folder."""
    (tmp_path / "json").mkdir()
    (tmp_path / "live").mkdir()
    _drive(TraceWriter(str(tmp_path / "json" / "collcheck-rank0.jsonl")), groups, count)
    _drive(BinaryTraceWriter(str(tmp_path / "live" / "collcheck-rank0.ccbin")), groups, count)
    return tmp_path / "json" / "collcheck-rank0.jsonl", tmp_path / "live" / "collcheck-rank0.ccbin"


def test_load_dir_reads_a_live_binary_trace_as_its_json_lines(tmp_path: Path) -> None:
    json_path, live_path = _both(tmp_path)
    [from_json], [from_live] = load_dir(str(json_path.parent)), load_dir(str(live_path.parent))
    assert from_live.events == from_json.events and len(from_live.events) == 80
    assert (from_live.rank, from_live.exited, from_live.lost) == (from_json.rank, from_json.exited, 0)
    assert not from_live.problems


def test_load_dir_reads_one_form_of_a_rank_with_both(tmp_path: Path) -> None:
    json_path, live_path = _both(tmp_path)
    shutil.copy(json_path, live_path.parent / json_path.name)  # older than nothing: the binary wins
    live_path.touch()
    assert len(load_dir(str(live_path.parent))) == 1


def test_a_torn_binary_trace_is_a_note_for_load_dir_and_perfetto(tmp_path: Path) -> None:
    _, live_path = _both(tmp_path, groups=1, count=12)
    data = live_path.read_bytes()
    for cut in range(len(MAGIC) + 1, len(data), 7):
        live_path.write_bytes(data[:cut])
        [trace] = load_dir(str(live_path.parent))
        notes = " ".join(problem.text for problem in trace.problems)
        if (cut - len(MAGIC)) % SLOT:
            assert "the last record is cut short" in notes, cut
        document = io.StringIO()
        write_perfetto(analyze_dir(str(live_path.parent)), document)
        assert document.getvalue().startswith("{"), cut


def test_the_stall_watchdog_catches_up_from_a_binary_trace_as_from_json(tmp_path: Path) -> None:
    json_path, live_path = _both(tmp_path)
    assert tail_rows(str(live_path), 1 << 20)[0]["ev"] == "header"
    from_json, from_live = caught_up(0, None, str(json_path)), caught_up(0, None, str(live_path))
    assert from_live is not None and from_live == from_json
    assert from_live.issued == {"0": 40, "1": 40} and from_live.exited
    published = Position(0, 1.0, issued={"0": 3, "1": 3}, inflight=[{"g": "0", "n": 5, "ranks": [0, 1]}])
    assert caught_up(0, published, str(live_path)) == caught_up(0, published, str(json_path))


def test_a_narrow_window_still_finds_templates_defined_before_it(tmp_path: Path) -> None:
    _, live_path = _both(tmp_path, groups=1, count=200)
    rows = tail_rows(str(live_path), 4 * SLOT)
    colls = [row for row in rows if row["ev"] == "coll"]
    assert colls and colls[-1]["seq"] == 200 and rows[-1]["ev"] == "exit"
    assert all(row["ev"] != "header" for row in rows)  # only the window
    assert tail_rows(str(tmp_path / "missing.ccbin"), 1024) == []
    (tmp_path / "junk.ccbin").write_bytes(b"not a trace at all")
    assert tail_rows(str(tmp_path / "junk.ccbin"), 1024) == []


def test_load_json_is_what_load_dir_reads_of_json_lines(tmp_path: Path) -> None:
    json_path, _ = _both(tmp_path)
    assert load_json(str(json_path)).events == load_dir(str(json_path.parent))[0].events


STOPPED_MODES = [
    dataclasses.replace(TraceConfig(timeout_s=3.0), trace_format=TraceFormat.BINARY),
    dataclasses.replace(TraceConfig(timeout_s=3.0, native=False), trace_format=TraceFormat.BINARY),
]


@pytest.mark.multirank
@pytest.mark.parametrize("mode", STOPPED_MODES, ids=["native", "python"])
def test_a_stall_report_names_a_stopped_ranks_real_last_collective_from_its_binary_trace(
    tmp_path: Path, mode: TraceConfig
) -> None:
    # As test_scenarios' JSON twin: rank 1 stops (SIGSTOP) after 201 quick collectives; the
    # position it last published is dozens behind, its binary trace is not.
    job = run_job("stopped.py", tmp_path, trace=mode, extra_env={"PG_TIMEOUT": "120"}, timeout=90.0)
    assert job.returncodes == [ABORT_EXIT_CODE, -9], job.stderr
    last, blocked = line_of("stopped.py", "LAST_OF_RANK1"), line_of("stopped.py", "BLOCKED")
    report = job.ranks[0].stderr
    assert f"in all_reduce(float32[8]) at stopped.py:{blocked} (group 0, #202)\n" in report
    assert f"  rank 1: last all_reduce(float32[2]) at stopped.py:{last} (group 0, #201), " in report
