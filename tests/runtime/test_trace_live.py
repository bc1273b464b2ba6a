"""Binary traces written live (`collcheck run --trace-format binary`, trace_live.py): the same
bytes `collcheck convert-trace` makes of the JSON lines, the same reports, intact when a rank is
killed, and a torn last record noted, never a traceback."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import line_of, run_job

from collcheck.cli import main
from collcheck.runtime import stream
from collcheck.runtime.perfetto import write_perfetto
from collcheck.runtime.record import CallSite, CollectiveEncoder, CollectiveEvent, TraceFormat, TraceWriter
from collcheck.runtime.trace_binary import BINARY_SUFFIX, MAGIC, SLOT, convert_to_binary, convert_to_json
from collcheck.runtime.trace_live import BinaryTraceWriter, header_line, open_collectives, trace_format_of
from collcheck.runtime.trace_render import render_text, to_json
from collcheck.runtime.tracer import TraceConfig, config_from_env, config_to_env


def _drive(writer: TraceWriter, groups: int = 2, count: int = 40) -> None:
    """What a tracer writes: a header, collectives on several groups and call sites, completions
    deferred, written at once (a failure), unobserved, a second completion, a report, an exit."""
    encoder = CollectiveEncoder(0)
    writer.write({"ev": "header", "rank": 0, "world_size": 2, "schema": 2})
    for seq in range(1, count + 1):
        for group in range(groups):
            name = str(group)
            event = CollectiveEvent(
                rank=0,
                group=name,
                group_ranks=(0, 1),
                seq=seq,
                op="all_reduce" if seq % 3 else "broadcast",
                shapes=((4, seq % 2 + 1),),
                dtypes=("float32",),
                reduce_op="sum" if seq % 3 else None,
                root=None if seq % 3 else 0,
                site=CallSite("/job/train.py", 10 + seq % 4, "step", ("/job/train.py:10 in step",)),
                thread="MainThread",
                t_start=1000.0 + seq / 7,
            )
            writer.write_coll(*encoder.coll(event))
            if seq % 11 == 0:
                writer.write_line(encoder.done(name, seq, 1001.0 + seq / 7, False))
            elif seq % 13 == 0:
                writer.write({"ev": "unobserved", "group": name, "seq": seq})
            elif seq % 5:
                writer.defer_line(encoder.done(name, seq, 1000.5 + seq / 7, True))
            if seq == 17:  # a second completion of one collective stays a line
                writer.defer_line(encoder.done(name, 16, 1003.0, True))
        if seq == 20:
            writer.flush()
            writer.write(
                {"ev": "report", "kind": "callsite", "severity": "warning", "text": "x", "t": 1.0, "rank": 0}
            )
    writer.write({"ev": "exit", "t": 2000.0})
    writer.close()


def _reports(folder: Path) -> tuple[str, str, str, str]:
    """`collcheck trace` as text and JSON, `--first`, and the Perfetto export of `folder`."""
    analysis = stream.analyze_dir(str(folder))
    first = stream.analyze_dir(str(folder), until=stream.Until.FIRST_MISMATCH)
    document = io.StringIO()
    write_perfetto(analysis, document)

    def alike(text: str) -> str:
        return text.replace(str(folder), "<folder>").replace(BINARY_SUFFIX, ".jsonl")

    text, as_json = alike(render_text(analysis)), alike(json.dumps(to_json(analysis)))
    return text, as_json, alike(render_text(first)), document.getvalue()


def test_live_records_are_the_bytes_convert_trace_makes_of_the_json_lines(tmp_path: Path) -> None:
    (tmp_path / "json").mkdir()
    (tmp_path / "live").mkdir()
    _drive(TraceWriter(str(tmp_path / "json" / "collcheck-rank0.jsonl")))
    _drive(BinaryTraceWriter(str(tmp_path / "live" / "collcheck-rank0.ccbin")))
    convert_to_binary(str(tmp_path / "json" / "collcheck-rank0.jsonl"), str(tmp_path / "converted.ccbin"))
    live = (tmp_path / "live" / "collcheck-rank0.ccbin").read_bytes()
    assert live == (tmp_path / "converted.ccbin").read_bytes()
    assert len(live) < (tmp_path / "json" / "collcheck-rank0.jsonl").stat().st_size / 3
    assert _reports(tmp_path / "live") == _reports(tmp_path / "json")
    assert (
        convert_to_json(str(tmp_path / "live" / "collcheck-rank0.ccbin"), str(tmp_path / "back.jsonl")) == 0
    )


def test_a_torn_last_record_is_a_note_at_every_cut(tmp_path: Path) -> None:
    (tmp_path / "whole").mkdir()
    _drive(BinaryTraceWriter(str(tmp_path / "whole" / "collcheck-rank0.ccbin")), groups=1, count=12)
    data = (tmp_path / "whole" / "collcheck-rank0.ccbin").read_bytes()
    folder = tmp_path / "cut"
    for cut in range(len(MAGIC), len(data)):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        (folder / "collcheck-rank0.ccbin").write_bytes(data[:cut])
        text = render_text(stream.analyze_dir(str(folder)))
        first = render_text(stream.analyze_dir(str(folder), until=stream.Until.FIRST_MISMATCH))
        if (cut - len(MAGIC)) % SLOT:
            assert "the last record is cut short" in text, cut
            assert "the last record is cut short" in first, cut
        assert text.count("cut short") <= 1, cut  # (a cut between two slots may still split a record)
    assert "cut short" not in render_text(stream.analyze_dir(str(tmp_path / "whole")))


def test_a_failed_write_pads_to_a_whole_slot_and_counts_what_was_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = BinaryTraceWriter(str(tmp_path / "collcheck-rank0.ccbin"))
    writer.write({"ev": "header", "rank": 0, "world_size": 1, "schema": 2})
    real_write = os.write
    calls = {"n": 0}

    def short_once(fd: int, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] == 1:  # a short write: part of a record, then the disk is full
            return real_write(fd, bytes(data)[:45])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", short_once)
    writer.write(
        {"ev": "report", "kind": "stall", "severity": "error", "text": "y" * 60, "t": 1.0, "rank": 0}
    )
    monkeypatch.setattr(os, "write", real_write)
    writer.write({"ev": "exit", "t": 2.0})
    writer.close()
    assert (tmp_path / "collcheck-rank0.ccbin").stat().st_size % SLOT == len(MAGIC)
    text = render_text(stream.analyze_dir(str(tmp_path)))
    assert "1 events lost" in text and "without an exit record" not in text, text


def test_the_backstop_sees_open_collectives_until_their_completion_is_patched_in(tmp_path: Path) -> None:
    path = str(tmp_path / "collcheck-rank0.ccbin")
    writer, encoder = BinaryTraceWriter(path), CollectiveEncoder(0)
    writer.write({"ev": "header", "rank": 0, "pid": 4242, "schema": 2})
    assert header_line(path) == b'{"ev":"header","rank":0,"pid":4242,"schema":2}'
    starts = []
    for seq in (1, 2, 3):
        event = CollectiveEvent(0, "0", (0, 1), seq, "all_reduce", ((4,),), ("float32",), t_start=100.0 + seq)
        writer.write_coll(*encoder.coll(event))
        starts.append(100.0 + seq)
        assert [start for _, start in open_collectives(path)] == starts
    writer.defer_line(encoder.done("0", 1, 105.0, True))
    assert [start for _, start in open_collectives(path)] == starts  # deferred: not in the file yet
    writer.flush()
    writer.write({"ev": "unobserved", "group": "0", "seq": 2})
    assert [start for _, start in open_collectives(path)] == [103.0]
    writer.write({"ev": "exit", "t": 200.0})
    assert open_collectives(path) == []
    writer.close()
    assert open_collectives(str(tmp_path / "missing.ccbin")) == [] and header_line(path + ".none") is None


def test_the_format_travels_in_the_environment_and_json_stays_the_default() -> None:
    assert config_from_env({}).trace_format is TraceFormat.JSON
    assert "COLLCHECK_TRACE_FORMAT" not in config_to_env(TraceConfig())
    binary = TraceConfig(trace_format=TraceFormat.BINARY)
    assert config_from_env(config_to_env(binary)).trace_format is TraceFormat.BINARY
    assert binary.uses_native  # the native kernel writes binary records through its own encoder
    assert trace_format_of(" Binary ") is TraceFormat.BINARY and trace_format_of("yaml") is TraceFormat.JSON


def test_run_refuses_an_unknown_trace_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--trace-format", "yaml", "--", "true"]) == 2
    assert "--trace-format 'yaml'" in capsys.readouterr().err


# The same program recorded as JSON lines and as live binary records: the same report, byte for
# byte (text, JSON and `--first`; the Perfetto export holds the times, which differ between runs).
PROGRAMS = [
    ("swap_same.py", 2, 60.0, {}),  # a swapped pair
    ("sigkill.py", 2, 60.0, {}),  # a missing collective: rank 1 killed by SIGKILL
    ("barrier_rank0.py", 2, 12.0, {"PG_TIMEOUT": "60"}),  # a stall: both killed at the test's timeout
    ("groups_ok.py", 2, 60.0, {}),  # every way of creating groups
]
# (Not groups_mismatch.py: its ranks race the store's shutdown, so two runs differ in JSON alone;
# and a problem's place is a line number in a JSON trace, a slot number in a binary one.)


@pytest.mark.multirank
@pytest.mark.parametrize(("program", "ranks", "timeout", "env"), PROGRAMS)
def test_json_and_live_binary_recordings_of_one_program_give_the_same_report(
    tmp_path: Path, program: str, ranks: int, timeout: float, env: dict[str, str]
) -> None:
    record = TraceConfig(timeout_s=3.0, native=False)
    reports = []
    for trace_format in TraceFormat:
        config = dataclasses.replace(record, trace_format=trace_format)
        job = run_job(program, tmp_path / trace_format.value, ranks, config, extra_env=env, timeout=timeout)
        names = sorted(path.name for path in job.trace_dir.iterdir())
        suffix = BINARY_SUFFIX if trace_format is TraceFormat.BINARY else ".jsonl"
        assert names == [f"collcheck-rank{rank}{suffix}" for rank in range(ranks)], names
        reports.append(_reports(job.trace_dir)[:3])  # not Perfetto: its times are the run's
        if trace_format is TraceFormat.BINARY:  # and the live records are what conversion makes
            for path in job.trace_dir.iterdir():
                back, again = tmp_path / "back.jsonl", tmp_path / "again.ccbin"
                assert convert_to_json(str(path), str(back)) == 0
                convert_to_binary(str(back), str(again))
                assert again.read_bytes() == path.read_bytes(), path.name
    assert reports[0] == reports[1]


@pytest.mark.multirank
def test_a_sigkilled_rank_leaves_an_intact_binary_trace(tmp_path: Path) -> None:
    config = TraceConfig(timeout_s=3.0, native=False, trace_format=TraceFormat.BINARY)
    job = run_job("sigkill.py", tmp_path, trace=config)
    assert job.returncodes[1] == -9
    analysis = stream.analyze_dir(str(job.trace_dir))
    rank0, rank1 = analysis.summaries
    assert rank0.last is not None and rank0.last.site.endswith(f"sigkill.py:{line_of('sigkill.py', 'THIRD')}")
    assert rank1.last is not None and rank1.last.site.endswith(
        f"sigkill.py:{line_of('sigkill.py', 'LAST_OF_RANK1')}"
    )
    assert rank1.exited is False and not analysis.problems
    assert analysis.missing[0].ranks == (1,) and analysis.missing[0].seq == 3
