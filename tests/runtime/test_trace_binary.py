"""collcheck's binary traces (trace_binary.py) and their columnar comparison (trace_prefix.py): the
same findings as the JSON lines they were converted from, on every kind of folder and on real gloo
jobs; agreed prefixes counted without an event per collective; malformed files as problems, never
tracebacks; memory that does not grow with the number of events."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import struct
import tracemalloc
from pathlib import Path

import pytest
import test_stream
from conftest import REPO, run_job

from collcheck.cli import main
from collcheck.runtime import stream, trace_binary, trace_prefix
from collcheck.runtime.analyze import analyze
from collcheck.runtime.launch import clear_old_traces
from collcheck.runtime.perfetto import to_perfetto, write_perfetto
from collcheck.runtime.record import CollectiveEncoder, DoneEvent, TraceWriter, trace_file_name
from collcheck.runtime.trace_binary import (
    BINARY_SUFFIX,
    COLL_SLOT,
    MAGIC,
    SLOT,
    binary_name,
    convert_to_binary,
    convert_to_json,
    text_slots,
)
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.trace_model import Analysis
from collcheck.runtime.trace_read import TraceError
from collcheck.runtime.trace_render import render_text, to_json
from collcheck.runtime.tracer import TraceConfig

DATA = REPO / "tests" / "runtime" / "data"


def _to_binary(folder: Path, into: Path, ranks: set[int] | None = None) -> None:
    """`folder`'s JSON traces as binary ones in `into` (only `ranks` converted, the others copied)."""
    into.mkdir(parents=True, exist_ok=True)
    for path in sorted(folder.iterdir()):
        if not path.name.endswith(".jsonl"):
            shutil.copy(path, into / path.name)
            continue
        if ranks is None or int(path.name[len("collcheck-rank") : -len(".jsonl")]) in ranks:
            convert_to_binary(str(path), str(into / path.name.replace(".jsonl", BINARY_SUFFIX)))
        else:
            shutil.copy(path, into / path.name)


def _reports(folder: Path) -> tuple[str, str, str, int]:
    """Text, JSON and Perfetto reports of `folder` and its exit status, with file names made alike."""
    analysis = stream.analyze_dir(str(folder))
    document = io.StringIO()
    write_perfetto(analysis, document)

    def alike(text: str) -> str:
        return text.replace(str(folder), "<folder>").replace(BINARY_SUFFIX, ".jsonl")

    return (
        alike(render_text(analysis)),
        alike(json.dumps(to_json(analysis))),
        document.getvalue(),
        analysis.exit_code(),
    )


@pytest.mark.parametrize("trace_format", test_stream.FORMATS)
def test_binary_traces_give_the_findings_of_their_json_lines(tmp_path: Path, trace_format: str) -> None:
    folders = test_stream._scenarios(tmp_path / "json", trace_format)
    folders.update({"seed v1": DATA / "seed_trace", "seed v2": DATA / "seed_trace_v2"})
    for name, folder in folders.items():
        binary = tmp_path / "binary" / name
        _to_binary(folder, binary)
        assert _reports(binary) == _reports(folder), name
        mixed = tmp_path / "mixed" / name  # some ranks binary, some JSON lines
        _to_binary(folder, mixed, ranks={0, 2})
        assert _reports(mixed) == _reports(folder), name
        back = tmp_path / "back" / name
        back.mkdir(parents=True)
        for path in binary.glob(f"*{BINARY_SUFFIX}"):
            assert convert_to_json(str(path), str(back / path.name.replace(BINARY_SUFFIX, ".jsonl"))) == 0
        assert _reports(back)[:2] == _reports(folder)[:2], name


def _consistent(folder: Path, ranks: int, events: int, bigger_at: int | None = None) -> None:
    """`ranks` binary traces of `events` all_reduces on two call sites; rank 1's collective
    `bigger_at` reduces a bigger tensor."""
    for rank in range(ranks):
        changed = {bigger_at: {"shapes": ((8,),)}} if rank == 1 and bigger_at else {}
        events_of = [
            test_stream._event(rank, seq, line=10 + seq % 2, **changed.get(seq, {}))
            for seq in range(1, events + 1)
        ]
        for event in events_of:
            event.group_ranks = tuple(range(ranks))
        test_stream._write(folder, rank, events_of)
        path = folder / trace_file_name(rank)
        convert_to_binary(str(path), str(folder / binary_name(rank)))
        path.unlink()


def test_agreed_prefixes_are_counted_without_an_event_per_collective(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _consistent(tmp_path / "same", 3, 3000)
    _consistent(tmp_path / "late", 3, 3000, bigger_at=2990)
    binary = {rank: str(tmp_path / "late" / binary_name(rank)) for rank in range(3)}
    found = trace_prefix.scan(frozenset(range(3)), binary, slots=1024)
    assert found is not None and found.agreed == {"0": 2989}
    decoded = []
    original = trace_binary.BinaryLines.event

    def counted(self: trace_binary.BinaryLines, run: trace_binary.CollRun, index: int) -> object:
        decoded.append(index)
        return original(self, run, index)

    monkeypatch.setattr(trace_binary.BinaryLines, "event", counted)
    same = stream.analyze_dir(str(tmp_path / "same"))
    assert not same.diverged and [s.collectives for s in same.summaries] == [3000] * 3
    assert len(decoded) <= 2 * 3  # the latest collective so far, per run of agreed slots, per rank
    decoded.clear()
    late = stream.analyze_dir(str(tmp_path / "late"))
    assert [(d.seq, d.sides[1].describe) for d in late.mismatches] == [(2990, "all_reduce(float32[8])")]
    assert len(decoded) < 3 * 20  # the ten after the divergence, on each rank


def test_peak_memory_does_not_grow_with_the_number_of_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past a chunk (here 1,024 slots a rank; up to 32,768 by default) memory stays as it is."""
    monkeypatch.setattr(trace_prefix, "chunk_slots", lambda readers: 1024)
    peaks = []
    for events in (2000, 16000):
        folder = tmp_path / str(events)
        _consistent(folder, 4, events, bigger_at=events - 5)
        tracemalloc.start()
        analysis = stream.analyze_dir(str(folder))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert [d.seq for d in analysis.mismatches] == [events - 5]
    assert peaks[1] < 1.5 * peaks[0] + 2**20, peaks


def _binary_trace(folder: Path) -> Path:
    _consistent(folder, 2, 50)
    return folder / binary_name(1)


def _slot(data: bytes, kind: int) -> int:
    """The offset of the first slot of `kind`."""
    for at in range(len(MAGIC), len(data), SLOT):
        if data[at] == kind:
            return at
    raise AssertionError(kind)


def _mutations() -> dict[str, object]:
    def coll(data: bytes, template: int = 0, seq: int = 1, start: float = 1.0, end: float = 1.0) -> bytes:
        at = _slot(data, trace_binary.COLL)
        return data[:at] + COLL_SLOT.pack(1, 0, 0, template, seq, start, end) + data[at + SLOT :]

    return {
        "no magic": lambda data: b"JUNK" + data[4:],
        "cut inside a slot": lambda data: data[: len(data) // 2 + 5],
        "cut inside a text record": lambda data: data[: _slot(data, trace_binary.CONT) + 3 * SLOT],
        "unknown kind": lambda data: data[: SLOT + 8] + b"\x09" + data[SLOT + 9 :],
        "stray continuation": lambda data: data + text_slots(0, b"x" * 200)[SLOT:],
        "absurd text length": lambda data: data + struct.pack("<BBHI", 2, 0, 0, 0xFFFFFFFF) + bytes(24),
        "unknown text kind": lambda data: data + text_slots(7, b"{}"),
        "template out of order": lambda data: (
            data + text_slots(trace_binary.TEMPLATE, struct.pack("<III", 99, 0, 0))
        ),
        "undefined template": lambda data: coll(data, template=10**9),
        "time not finite": lambda data: coll(data, start=float("nan")),
        "sequence number out of range": lambda data: coll(data, seq=2**63),
        "a line that is no JSON": lambda data: data + text_slots(0, b"\xff{not json"),
    }


@pytest.mark.parametrize("mutation", list(_mutations()))
def test_a_malformed_binary_trace_is_a_problem_never_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mutation: str
) -> None:
    path = _binary_trace(tmp_path)
    path.write_bytes(_mutations()[mutation](path.read_bytes()))  # type: ignore[operator]
    status = main(["trace", str(tmp_path)])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    torn = mutation.startswith("cut inside")  # a torn write at the end: noted, never a traceback
    assert status in ((0, 1) if torn else (1, 3)), out.out
    if not torn:
        assert "could not read:" in out.out and binary_name(1) in out.out


def test_random_damage_to_a_binary_trace_never_raises(tmp_path: Path) -> None:
    path = _binary_trace(tmp_path)
    original = path.read_bytes()
    generator = random.Random(7)
    for _ in range(150):
        data = bytearray(original)
        for _ in range(generator.randint(1, 12)):
            data[generator.randrange(len(MAGIC), len(data))] = generator.randrange(256)
        path.write_bytes(bytes(data[: generator.randint(len(MAGIC), len(data))]))
        analysis = stream.analyze_dir(str(tmp_path))
        assert isinstance(analysis, Analysis) and analysis.exit_code() in (0, 1, 3)


def test_the_newer_of_a_binary_trace_and_its_json_lines_is_read(tmp_path: Path) -> None:
    _consistent(tmp_path, 2, 20, bigger_at=5)  # binary traces: rank 1 reduces a bigger tensor at #5
    for rank in range(2):  # and both ranks' consistent JSON lines, older than the binary traces
        events = [test_stream._event(rank, seq, line=10 + seq % 2) for seq in range(1, 21)]
        for event in events:
            event.group_ranks = (0, 1)
        test_stream._write(tmp_path, rank, events)
        os.utime(tmp_path / trace_file_name(rank), (1, 1))
    assert [d.seq for d in stream.analyze_dir(str(tmp_path)).mismatches] == [5]
    os.utime(tmp_path / binary_name(1), (0, 0))  # now rank 1's binary trace is the stale one
    analysis = stream.analyze_dir(str(tmp_path))
    assert not analysis.mismatches
    assert [Path(s.path).name for s in analysis.summaries] == [binary_name(0), trace_file_name(1)]


def test_a_newer_folder_named_like_a_binary_trace_does_not_hide_the_json_lines(tmp_path: Path) -> None:
    """Where a binary trace and JSON lines share a name, the newer is read; something newer that is
    no regular file (a folder, a FIFO) made the JSON lines be left out and was then skipped itself:
    the rank's whole trace vanished from the analysis."""
    _consistent(tmp_path, 2, 20, bigger_at=5)
    assert main(["convert-trace", str(tmp_path), str(tmp_path), "--to", "json"]) == 0
    (tmp_path / binary_name(1)).unlink()
    (tmp_path / binary_name(1)).mkdir()
    analysis = stream.analyze_dir(str(tmp_path))
    assert [d.seq for d in analysis.mismatches] == [5]
    assert [Path(s.path).name for s in analysis.summaries] == [trace_file_name(0), trace_file_name(1)]


def test_convert_trace_reports_what_it_could_not_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["convert-trace", str(tmp_path), str(tmp_path / "out")]) == 2
    assert main(["convert-trace", str(tmp_path), str(tmp_path), "--to", "yaml"]) == 2
    (tmp_path / binary_name(0)).write_bytes(b"not binary")
    assert main(["convert-trace", str(tmp_path), str(tmp_path / "out"), "--to", "json"]) == 3
    assert "not a collcheck binary trace" in capsys.readouterr().err


def test_convert_trace_skips_what_is_not_a_regular_file(tmp_path: Path) -> None:
    """A FIFO (or a folder) named like a trace would block convert-trace's open forever (a FIFO
    nobody writes) or be reported as an output it cannot write: it is skipped, as `trace` skips it."""
    import subprocess
    import sys

    _consistent(tmp_path, 1, 5)
    os.mkfifo(tmp_path / binary_name(1))
    os.mkfifo(tmp_path / trace_file_name(1))
    (tmp_path / binary_name(2)).mkdir()
    for to in ("json", "binary"):
        command = ["convert-trace", str(tmp_path), str(tmp_path / to), "--to", to]
        done = subprocess.run(
            [sys.executable, "-m", "collcheck", *command],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert done.returncode in (0, 2), done.stderr
        assert "Traceback" not in done.stderr and "cannot write" not in done.stderr
    assert (tmp_path / "json" / trace_file_name(0)).is_file()


def test_a_source_that_cannot_be_read_leaves_its_converted_trace_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The target was truncated before the source was opened: an unreadable JSON trace left an
    empty binary trace, newer than its lines, in place of a good one, and was reported as an
    output that cannot be written (exit 2) instead of a file that could not be read (exit 3)."""
    _consistent(tmp_path, 1, 5)
    before = (tmp_path / binary_name(0)).read_bytes()
    assert main(["convert-trace", str(tmp_path), str(tmp_path / "lines"), "--to", "json"]) == 0
    shutil.copy(tmp_path / "lines" / trace_file_name(0), tmp_path / trace_file_name(0))
    real_open = open

    def refused(path: object, *args: object, **kwargs: object) -> object:
        if str(path).endswith(trace_binary.TRACE_SUFFIX):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(trace_binary, "open", refused, raising=False)
    assert main(["convert-trace", str(tmp_path), str(tmp_path)]) == 3
    assert "cannot write" not in capsys.readouterr().err
    assert (tmp_path / binary_name(0)).read_bytes() == before


def test_a_text_record_holding_a_newline_is_not_written_back_as_two_lines(tmp_path: Path) -> None:
    """A binary trace reads a TEXT record as one line (JSON escapes every newline, so one holding
    a raw newline is unreadable); written back as it was, it became two lines that each parse."""
    _consistent(tmp_path, 1, 3)
    path = tmp_path / binary_name(0)
    hidden = b'{"ev":"exit","rank":0,"t":1.0}'
    path.write_bytes(path.read_bytes() + text_slots(trace_binary.LINE, b"{}\n" + hidden))
    assert main(["convert-trace", str(tmp_path), str(tmp_path / "lines"), "--to", "json"]) == 0
    assert hidden not in (tmp_path / "lines" / trace_file_name(0)).read_bytes().splitlines()


@pytest.mark.parametrize("damage", ["overlong line", "unknown record"])
def test_what_cannot_be_written_back_still_reads_as_incomplete(tmp_path: Path, damage: str) -> None:
    """A record converted back to JSON lines that could not be (a line over MAX_LINE_BYTES, a
    damaged record) was left out, so the JSON trace read as complete (exit 0, not 3)."""
    _consistent(tmp_path, 2, 5)
    path = tmp_path / binary_name(1)
    extra = text_slots(trace_binary.OVERLONG, b"") if damage == "overlong line" else b"\x09" + bytes(SLOT - 1)
    path.write_bytes(path.read_bytes() + extra)
    assert main(["trace", str(tmp_path)]) == 3
    assert main(["convert-trace", str(tmp_path), str(tmp_path / "lines"), "--to", "json"]) == 0
    assert main(["trace", str(tmp_path / "lines")]) == 3


def test_a_damaged_text_length_near_the_end_does_not_hide_the_slots_after_it(tmp_path: Path) -> None:
    """A TEXT record whose length runs past the end of the file was taken for a torn last write
    and skipped silently with every slot after it, though those slots are no continuations: a
    damaged length hid the end of a trace (exit 0). It is a problem of its slot, and the
    collectives after it are read."""
    _consistent(tmp_path, 2, 20, bigger_at=19)
    path = tmp_path / binary_name(1)
    data = path.read_bytes()
    colls = [at for at in range(len(MAGIC), len(data), SLOT) if data[at] == trace_binary.COLL]
    at = colls[-3]  # before the last three collectives (the bigger tensor at #19 among them)
    path.write_bytes(data[:at] + struct.pack("<BBHI", 2, 0, 0, 4000) + bytes(24) + data[at:])
    analysis = stream.analyze_dir(str(tmp_path))
    assert [d.seq for d in analysis.mismatches] == [19]
    assert analysis.exit_code() == 1 and analysis.unreadable == 1


@pytest.mark.multirank
def test_real_gloo_traces_read_the_same_as_binary_traces(tmp_path: Path) -> None:
    """Every kind of collective (subgroups, sends and recvs, a second thread), a swapped pair and a
    training loop of 304 collectives, recorded by the tracer on gloo, converted and read again; the
    loop's group is agreed whole by the columnar scan."""
    for program in ("mixed_groups.py", "swap_same.py", "steady_loop.py"):
        job = run_job(program, tmp_path / program, trace=TraceConfig(timeout_s=5.0))
        assert job.returncodes == [0, 0], job.stderr
        binary = tmp_path / program / "binary"
        assert main(["convert-trace", str(job.trace_dir), str(binary)]) == 0
        assert sorted(p.name for p in binary.iterdir()) == [binary_name(0), binary_name(1)]
        assert _reports(binary) == _reports(job.trace_dir), program
    paths = {rank: str(tmp_path / "steady_loop.py" / "binary" / binary_name(rank)) for rank in (0, 1)}
    found = trace_prefix.scan(frozenset((0, 1)), paths)
    assert found is not None and found.agreed["0"] == 304


def test_a_completion_after_a_later_collectives_keeps_its_perfetto_slice_complete(tmp_path: Path) -> None:
    """The streaming Perfetto export let every waiting slice go, incomplete, at any `done` line;
    a collective completed after a later one (two groups, or a send waited for late) lost its end."""
    events = {
        rank: [test_stream._event(rank, 1), test_stream._event(rank, 1, group="1")] for rank in range(2)
    }
    for rank, (first, second) in events.items():
        writer = TraceWriter(str(tmp_path / trace_file_name(rank)))
        encoder = CollectiveEncoder(rank)
        writer.write({"ev": "header", "rank": rank})
        writer.write_coll(*encoder.coll(first))
        writer.write_coll(*encoder.coll(second))
        for event in (second, first):  # the later collective completes first
            writer.write(DoneEvent(event.group, event.seq, event.t_start + 0.5).to_json())
        writer.close()
    document = io.StringIO()
    write_perfetto(stream.analyze_dir(str(tmp_path)), document)
    reference = to_perfetto(analyze(load_dir(str(tmp_path))))
    assert json.loads(document.getvalue()) == reference
    assert all(item["args"]["completed"] for item in reference["traceEvents"] if item["ph"] == "X")


def test_a_new_run_removes_the_previous_runs_binary_traces_too(tmp_path: Path) -> None:
    """A binary trace left from an earlier run of more ranks would be read as one more rank."""
    _consistent(tmp_path, 3, 5)
    (tmp_path / "notes.txt").write_text("kept")
    clear_old_traces(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def _findings(folder: Path, counted: bool = True) -> str:
    """The JSON report without its problems (their `file:line` is a slot number in a binary trace)
    and, unless `counted`, without the number of lines skipped."""
    report = to_json(stream.analyze_dir(str(folder)))
    del report["problems"]
    if not counted:
        del report["unreadable"]
    return json.dumps(report).replace(str(folder), "<folder>").replace(BINARY_SUFFIX, ".jsonl")


def test_mutated_real_traces_give_the_same_findings_converted(tmp_path: Path) -> None:
    """bench/fuzz_traces.py's damaged traces (lines replaced, inserted, shuffled, duplicated,
    fields changed): converted, they read as their JSON lines do, unreadable lines counted alike."""
    fuzz = test_stream._bench("fuzz_traces")
    compared = 0
    for seed in range(40):
        case = tmp_path / str(seed)
        fuzz.build_case(random.Random(seed), case)
        try:
            expected = _findings(case)
        except TraceError:
            continue
        binary = tmp_path / f"{seed} binary"
        _to_binary(case, binary)
        assert _findings(binary) == expected, seed
        compared += 1
    assert compared >= 30


def test_a_header_naming_another_rank_later_and_a_member_list_that_grows(tmp_path: Path) -> None:
    """The cases where the columnar scan cannot be trusted as it ran: it reads every header and
    scans again, or compares every collective one by one (a rank outside its group's member
    lists, a member list that grows); the findings are the JSON lines'."""
    moved = tmp_path / "moved"
    _consistent(moved, 3, 200, bigger_at=150)
    assert main(["convert-trace", str(moved), str(moved), "--to", "json"]) == 0
    for path in moved.glob(f"*{BINARY_SUFFIX}"):
        path.unlink()
    with open(moved / trace_file_name(2), "a", encoding="utf-8") as handle:
        handle.write('{"ev":"header","rank":7}\n')  # the last header wins: this trace is rank 7's
    grows = tmp_path / "grows"
    for rank in range(3):
        events = [test_stream._event(rank, seq) for seq in range(1, 120)]
        for event in events:
            event.group_ranks = (0, 1) if event.seq < 60 else (0, 1, 2)
        test_stream._write(grows, rank, events if rank < 2 else events[70:])
    for folder in (moved, grows):
        binary = tmp_path / f"{folder.name} binary"
        _to_binary(folder, binary)
        # Which of rank 7's collectives came too late to be compared depends on where turns end,
        # and a folded completion moves a line: the findings are the same, the problems nearly.
        assert _findings(binary, counted=False) == _findings(folder, counted=False), folder.name
    assert [s.rank for s in stream.analyze_dir(str(tmp_path / "moved binary")).summaries] == [0, 1, 7]


def test_completions_fold_into_records_already_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The converter writes its output as it goes (here every 4 KiB): a completion that comes
    after its record left the buffer is written into the file in place, with the flags it had."""
    monkeypatch.setattr(trace_binary.BinaryWriter, "FLUSH_BYTES", 4096)
    events = [test_stream._event(0, seq) for seq in range(1, 400)]
    writer = TraceWriter(str(tmp_path / trace_file_name(0)))
    encoder = CollectiveEncoder(0)
    writer.write({"ev": "header", "rank": 0})
    for event in events:
        writer.write_coll(*encoder.coll(event))
    for event in events:  # every completion after every collective: 30 KiB later at most
        if event.seq % 2:
            writer.write({"ev": "unobserved", "group": event.group, "seq": event.seq})
        writer.write(DoneEvent(event.group, event.seq, event.t_start + 0.25).to_json())
    writer.close()
    convert_to_binary(str(tmp_path / trace_file_name(0)), str(tmp_path / binary_name(0)))
    (tmp_path / trace_file_name(0)).rename(tmp_path / "json.txt")
    read = trace_binary.load_binary(str(tmp_path / binary_name(0)))
    assert [(e.t_end, e.observable) for e in read.events] == [
        (e.t_start + 0.25, not e.seq % 2) for e in events
    ]
    assert not read.problems
