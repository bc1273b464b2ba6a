"""The streaming analysis (stream.py) against the in-memory one (analyze.analyze): the same
findings, text, JSON and Perfetto document on every kind of folder, in memory that does not grow
with the number of events."""

from __future__ import annotations

import io
import json
import random
import tracemalloc
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import REPO, bench_module

from collcheck.cli import main
from collcheck.runtime import fr_read, stream
from collcheck.runtime.analyze import analyze
from collcheck.runtime.perfetto import to_perfetto, write_perfetto
from collcheck.runtime.record import (
    CallSite,
    CollectiveEncoder,
    CollectiveEvent,
    DoneEvent,
    TraceWriter,
    trace_file_name,
)
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.trace_model import Analysis, Problem
from collcheck.runtime.trace_read import TraceError
from collcheck.runtime.trace_render import render_text, to_json

DATA = REPO / "tests" / "runtime" / "data"


def _bench(name: str) -> ModuleType:
    return bench_module(name)


def _event(rank: int, seq: int, numel: int = 4, line: int = 10, **changes: Any) -> CollectiveEvent:
    event = CollectiveEvent(
        rank=rank,
        group="0",
        group_ranks=(0, 1, 2),
        seq=seq,
        op="all_reduce",
        shapes=((numel,),),
        dtypes=("float32",),
        reduce_op="sum",
        site=CallSite("train.py", line, "main", operand=f"x{line}"),
        t_start=100.0 + seq + rank / 10,
    )
    for name, value in changes.items():
        setattr(event, name, value)
    return event


FORMATS = ("schema 1", "schema 2", "mixed")  # member lists on each line, in group lines, both


def _write(
    folder: Path,
    rank: int,
    events: list[CollectiveEvent],
    name: str = "",
    exited: bool = True,
    trace_format: str = FORMATS[1],
) -> None:
    """A trace as the tracer writes it: `schema 2` (group lines, by the tracer's encoder),
    `schema 1` (each line holding its member list) or `mixed` (every other line of each)."""
    folder.mkdir(parents=True, exist_ok=True)
    writer = TraceWriter(str(folder / (name or trace_file_name(rank))))
    encoder = CollectiveEncoder(rank)
    writer.write({"ev": "header", "rank": rank})
    for index, event in enumerate(events):
        if trace_format == "schema 1" or (trace_format == "mixed" and index % 2):
            writer.write(event.to_json())
        else:
            writer.write_coll(*encoder.coll(event))
        if event.seq % 3:  # some collectives never complete
            writer.write(DoneEvent(event.group, event.seq, event.t_start + 0.01).to_json())
    if exited:
        writer.write({"ev": "exit"})
    writer.close()


def _same(folder: Path) -> Analysis:
    """Both analyses of `folder`, checked equal; the streaming one."""
    memory_problems: list[Problem] = []
    in_memory = analyze(load_dir(str(folder), memory_problems), memory_problems)
    streamed = stream.analyze_dir(str(folder))
    assert streamed == in_memory
    assert render_text(streamed) == render_text(in_memory)
    assert to_json(streamed) == to_json(in_memory)
    assert streamed.exit_code() == in_memory.exit_code()
    document = io.StringIO()
    write_perfetto(streamed, document)
    assert document.getvalue() == json.dumps(to_perfetto(in_memory))
    return streamed


def _scenarios(root: Path, trace_format: str = FORMATS[1]) -> dict[str, Path]:
    """Folders with each kind of finding, written as the tracer writes traces."""
    built: dict[str, Path] = {}

    def make(name: str, ranks: dict[int, list[CollectiveEvent]], **options: bool) -> None:
        built[name] = root / name
        for rank, events in ranks.items():
            exited = options.get("exited", True) or rank != 2
            _write(built[name], rank, events, exited=exited, trace_format=trace_format)

    same = {rank: [_event(rank, seq) for seq in range(1, 40)] for rank in range(3)}
    make("consistent", same)
    make("mismatch", {**same, 1: [*same[1][:20], _event(1, 21, numel=8), *same[1][21:]]})
    make(
        "callsite",
        {**same, 2: [_event(2, seq, line=11) if seq == 5 else _event(2, seq) for seq in range(1, 40)]},
    )
    make("missing", {**same, 2: same[2][:30]}, exited=False)
    make("never joined", {0: same[0], 1: same[1], 2: []})
    swapped = [_event(1, 1, line=12), _event(1, 2, line=10)] + [_event(1, seq) for seq in range(3, 40)]
    first = [_event(0, 1, line=10), _event(0, 2, line=12)] + [_event(0, seq) for seq in range(3, 40)]
    make("swap", {0: first, 1: swapped, 2: [*first[:0], *[_event(2, s) for s in range(1, 40)]]})
    p2p: dict[str, Any] = {"group": "0:p2p", "op": "send", "root": 1}
    recv: dict[str, Any] = {"group": "0:p2p", "op": "recv", "root": 0}
    make(
        "p2p",
        {
            0: [*same[0][:5], *[_event(0, seq, **p2p) for seq in range(1, 6)]],
            1: [
                *same[1][:5],
                *[_event(1, seq, **recv) for seq in range(1, 5)],
                _event(1, 5, numel=9, **recv),
            ],
            2: same[2][:5],
        },
    )
    make("p2p unmatched", {0: [_event(0, 1, **p2p), _event(0, 2, **p2p)], 1: [_event(1, 1, **recv)], 2: []})
    subgroup: dict[str, Any] = {"group": "1", "group_ranks": (0, 2)}
    make(
        "subgroups",
        {
            0: [e for seq in range(1, 30) for e in (_event(0, seq), _event(0, seq, **subgroup))],
            1: same[1][:29],
            2: [
                e
                for seq in range(1, 30)
                for e in (_event(2, seq), _event(2, seq, numel=5 if seq > 20 else 4, **subgroup))
            ],
        },
    )
    make("twice", same)
    # A copy: its header says rank 1.
    _write(built["twice"], 1, same[1][:10], name="collcheck-rank7.jsonl", trace_format=trace_format)
    return built


@pytest.mark.parametrize("trace_format", FORMATS)
def test_streaming_gives_the_in_memory_findings_on_every_kind_of_folder(
    tmp_path: Path, trace_format: str
) -> None:
    found = {name: _same(folder) for name, folder in _scenarios(tmp_path, trace_format).items()}
    for folder in (DATA / "seed_trace", DATA / "seed_fr"):
        _same(folder)
    assert not found["consistent"].diverged and found["consistent"].exit_code() == 0
    assert [d.seq for d in found["mismatch"].mismatches] == [21]
    assert [d.seq for d in found["callsite"].warnings] == [5]
    assert [(m.seq, m.ranks) for m in found["missing"].missing] == [(31, (2,))]
    assert [m.ranks for m in found["never joined"].missing] == [(2,)]
    assert len(found["swap"].swaps) == 1
    assert sorted(f.kind for f in found["p2p"].p2p) == ["mismatch"]
    assert [f.kind for f in found["p2p unmatched"].p2p] == ["unmatched"]
    assert [(d.group, d.seq) for d in found["subgroups"].mismatches] == [("1", 21)]
    assert [s.path.endswith("rank7.jsonl") for s in found["twice"].summaries if s.rank == 1] == [False, True]
    if trace_format != "schema 1":  # every format reads as the member lists on each line read
        older = _scenarios(tmp_path / "schema 1", "schema 1")
        for name, folder in _scenarios(tmp_path / "again", trace_format).items():
            assert _as_text(folder) == _as_text(older[name])


def _as_text(folder: Path) -> str:
    """The JSON report of `folder`'s analysis with the folder's path taken out."""
    return json.dumps(to_json(stream.analyze_dir(str(folder)))).replace(str(folder), "<folder>")


def test_fuzzed_folders_give_the_same_findings_or_name_the_lines_not_compared(tmp_path: Path) -> None:
    """Mutated real traces (bench/fuzz_traces.py): either everything agrees, or the streaming
    analysis names, as problems of the trace, the collectives it could not compare."""
    fuzz = _bench("fuzz_traces")
    agreed = named = 0
    for seed in range(50):
        case = tmp_path / str(seed)
        fuzz.build_case(random.Random(seed), case)
        try:
            memory_problems: list[Problem] = []
            in_memory = analyze(load_dir(str(case), memory_problems), memory_problems)
        except TraceError:  # nothing readable: the streaming analysis says so too
            with pytest.raises(TraceError):
                stream.analyze_dir(str(case))
            continue
        streamed = stream.analyze_dir(str(case))
        if render_text(streamed) == render_text(in_memory) and streamed.exit_code() == in_memory.exit_code():
            agreed += 1
            continue
        named += 1
        assert any("not compared" in problem.text for problem in streamed.problems), render_text(streamed)
    assert agreed >= 40


def test_a_collective_far_out_of_order_is_named_not_silently_dropped(tmp_path: Path) -> None:
    events = {rank: [_event(rank, seq) for seq in range(1, 60)] for rank in range(3)}
    late = _event(1, 3, numel=99)
    _write(tmp_path, 0, events[0])
    _write(tmp_path, 1, [*events[1], late])
    _write(tmp_path, 2, events[2])
    streamed = stream.analyze_dir(str(tmp_path))
    # header, lost line, group line, 59 coll lines with 40 done lines, then the late one
    assert [p.line for p in streamed.problems if "collective #3 of group 0" in p.text] == [
        3 + 2 * 59 - 59 // 3 + 1
    ]
    assert streamed.exit_code() == 3 and "not compared" in render_text(streamed)


def test_member_lists_are_read_from_their_text_once_and_odd_lines_read_whole(tmp_path: Path) -> None:
    """The fast path for `group_ranks` never changes what a line means: a group name holding
    the key's text, a second `group_ranks` key, a list of non-integers are read as JSON reads them."""
    lines = [
        b'{"ev":"header","rank":0}',
        b'{"ev":"coll","rank":0,"group":"0","group_ranks":[0,1],"seq":1,"op":"barrier","shapes":[],'
        b'"dtypes":[],"group_ranks":[0,1,2]}',
        b'{"ev":"coll","rank":0,"group":"g\\",\\"group_ranks\\":[5]","group_ranks":[0,3],"seq":1,"op":"x"}',
        b'{"ev":"coll","rank":0,"group":"h","group_ranks":[0,true],"seq":1,"op":"x"}',
        b'{"ev":"coll","rank":0,"group":"i","group_ranks":[0,01],"seq":1,"op":"x"}',
    ]
    (tmp_path / trace_file_name(0)).write_bytes(b"\n".join(lines) + b"\n")
    streamed = _same(tmp_path)
    assert [(name, members) for name, members, _ in streamed.groups] == [
        ("0", (0, 1, 2)),
        ('g","group_ranks":[5]', (0, 3)),
        ("h", (0, 1)),
    ]
    # The leading zero is not JSON; ranks 1 to 3, which the member lists name, left no trace.
    assert streamed.absent == ((1, 3),) and streamed.unreadable == 1 + 3


def test_peak_memory_does_not_grow_with_the_number_of_events(tmp_path: Path) -> None:
    bench = _bench("trace_scale")
    peaks = []
    for events in (400, 4_000):
        folder = tmp_path / str(events)
        folder.mkdir()
        bench.write_traces(folder, bench.Size(3, events))
        tracemalloc.start()
        analysis = stream.analyze_dir(str(folder))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert analysis.exit_code() == 0 and analysis.summaries[0].collectives == events
    assert peaks[1] < 1.5 * peaks[0], peaks


def test_perfetto_windows_keep_only_the_chosen_ranks_groups_and_time(tmp_path: Path) -> None:
    folder = _scenarios(tmp_path)["subgroups"]
    out = tmp_path / "p.json"

    def slices(*options: str) -> list[dict[str, Any]]:
        assert main(["trace", str(folder), "--format", "perfetto", "-o", str(out), *options]) == 1
        return [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] in ("X", "i")]

    everything = slices()
    assert {e["pid"] for e in slices("--ranks", "0,2")} == {0, 2}
    assert {e["args"]["group"] for e in slices("--groups", "1") if e["ph"] == "X"} == {"1"}
    early = slices("--time", ":5")
    assert 0 < len(early) < len(everything) and all(e["ts"] <= 5e6 for e in early)
    assert main(["trace", str(folder), "--ranks", "x"]) == 2
    assert main(["trace", str(folder), "--ranks", "0"]) == 2  # windows are for --format perfetto


def test_the_perfetto_file_written_into_the_folder_is_not_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rerunning on a folder holding its Perfetto export (gigabytes for a big job, past the size a
    dump may have) neither reads it as a possible JSON dump nor lists it as refused."""
    monkeypatch.setattr(fr_read, "MAX_DUMP_BYTES", 1000)
    _write(tmp_path, 0, [_event(0, seq, group_ranks=(0, 1)) for seq in range(1, 30)])
    _write(tmp_path, 1, [_event(1, seq, group_ranks=(0, 1)) for seq in range(1, 30)])
    assert main(["trace", str(tmp_path), "--format", "perfetto"]) == 0
    assert (tmp_path / "trace.perfetto.json").stat().st_size > 1000
    assert main(["trace", str(tmp_path), "--format", "perfetto"]) == 0
    assert not stream.analyze_dir(str(tmp_path)).problems
