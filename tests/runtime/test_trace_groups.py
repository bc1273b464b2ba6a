"""Schema 2 traces: each member list written once, in a `group` line, and named by its `gid` from
the `coll` lines. Round trip, size, a rank killed mid-write, and hostile group lines."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from test_stream import _same  # both analyses, checked equal (text, JSON, Perfetto)

from collcheck.cli import main
from collcheck.runtime import stream, trace_model, trace_read
from collcheck.runtime.record import (
    SCHEMA_VERSION,
    CallSite,
    CollectiveEncoder,
    CollectiveEvent,
    DoneEvent,
    TraceWriter,
    trace_file_name,
)
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.trace_model import EXIT_INCOMPLETE
from collcheck.runtime.trace_render import render_text


def _event(rank: int, seq: int, group: str = "0", members: tuple[int, ...] = (0, 1)) -> CollectiveEvent:
    return CollectiveEvent(
        rank=rank,
        group=group,
        group_ranks=members,
        seq=seq,
        op="all_reduce",
        shapes=((1024,),),
        dtypes=("float32",),
        reduce_op="sum",
        site=CallSite("/job/train.py", 10 + seq % 2, "step", ("/job/train.py:10 in step",)),
        thread="MainThread",
        t_start=1000.0 + seq + rank / 10,
        group_desc="default_pg" if group == "0" else "tp",
    )


def _write(path: Path, rank: int, events: list[CollectiveEvent]) -> None:
    """A trace as the Python tracer writes it (header, `coll` lines through the encoder, `done`)."""
    writer, encoder = TraceWriter(str(path)), CollectiveEncoder(rank)
    writer.write({"ev": "header", "schema": SCHEMA_VERSION, "rank": rank})
    for event in events:
        writer.write_coll(*encoder.coll(event))
        writer.write(DoneEvent(event.group, event.seq, event.t_start + 0.5).to_json())
    writer.write({"ev": "exit"})
    writer.close()


def _job(folder: Path, seqs: int = 12) -> dict[int, list[CollectiveEvent]]:
    """Two ranks: the world group and a subgroup, every third collective on the subgroup."""
    events = {
        rank: [
            _event(rank, index // 3, "1", (0, 1, 5)) if index % 3 == 0 else _event(rank, index - index // 3)
            for index in range(1, seqs + 1)
        ]
        for rank in range(2)
    }
    folder.mkdir(parents=True, exist_ok=True)
    for rank, rank_events in events.items():
        _write(folder / trace_file_name(rank), rank, rank_events)
    return events


def test_members_and_descriptions_come_back_from_the_group_lines(tmp_path: Path) -> None:
    written = _job(tmp_path)
    for trace in load_dir(str(tmp_path)):
        read = [(e.group, e.seq, e.group_ranks, e.group_desc, e.t_end is not None) for e in trace.events]
        expected = [(e.group, e.seq, e.group_ranks, e.group_desc, True) for e in written[trace.rank]]
        assert read == expected
        assert not trace.problems and not trace.unreadable
    rows = [json.loads(line) for line in (tmp_path / trace_file_name(0)).read_text().splitlines()]
    assert rows[0]["schema"] == 2
    assert [row["gid"] for row in rows if row["ev"] == "group"] == [1, 2]  # one line per member list
    assert not any("group_ranks" in row or "group_desc" in row for row in rows)
    assert _same(tmp_path).groups == (("0", (0, 1), 8), ("1", (0, 1, 5), 4))


def test_bytes_per_coll_line_do_not_grow_with_the_group(tmp_path: Path) -> None:
    per_line, per_file = {}, {}
    for members in (2, 1024):
        encoder = CollectiveEncoder(0)
        lines = [encoder.coll(_event(0, seq, members=tuple(range(members))))[1] for seq in range(100, 200)]
        per_line[members] = sum(map(len, lines)) / len(lines)
        path = tmp_path / f"{members}.jsonl"
        _write(path, 0, [_event(0, seq, members=tuple(range(members))) for seq in range(100, 1100)])
        per_file[members] = path.stat().st_size
    assert per_line[2] == per_line[1024] < 400
    # Of a thousand collectives, only the one group line grows with the group (~5 bytes a member).
    assert per_file[1024] - per_file[2] < 5 * 1024


def test_a_rank_killed_mid_write_leaves_no_line_naming_an_undefined_group(tmp_path: Path) -> None:
    """Cut the trace at every byte of its first lines (and some later ones): what remains reads
    without a problem; the torn last line is skipped silently, as before."""
    source = tmp_path / "whole"
    _job(source, seqs=6)
    data = (source / trace_file_name(1)).read_bytes()
    other = (source / trace_file_name(0)).read_bytes()
    cuts = sorted({*range(0, 1400, 7), *range(1400, len(data), 97)})
    for cut in cuts:
        folder = tmp_path / "cut"
        folder.mkdir(exist_ok=True)
        (folder / trace_file_name(0)).write_bytes(other)
        (folder / trace_file_name(1)).write_bytes(data[:cut])
        analysis = stream.analyze_dir(str(folder))
        assert not [p for p in analysis.problems if "no header" not in p.text], (cut, analysis.problems)


GOOD = [
    b'{"ev":"header","schema":2,"rank":1}',
    b'{"ev":"group","gid":1,"group":"0","ranks":[0,1],"desc":"default_pg"}',
]


def _coll(seq: int, gid: int | str = 1, group: str = "0", extra: str = "") -> bytes:
    return (
        f'{{"ev":"coll","rank":1,"group":"{group}","gid":{json.dumps(gid)},{extra}"seq":{seq},'
        f'"op":"all_reduce","shapes":[[1024]],"dtypes":["float32"],"reduce_op":"sum","root":null,'
        f'"site":{{"file":"/job/train.py","line":{10 + seq % 2},"func":"step"}},"t_start":{1000.1 + seq}}}'
    ).encode()


# (bad line, what the problem says); each goes in after rank 1's first collective.
BAD = [
    (_coll(2, gid=9), "group id 9 is not defined by an earlier group line"),
    (b'{"ev":"group","gid":1,"group":"0","ranks":[0,1,2],"desc":"default_pg"}', "group id 1 defined again"),
    (_coll(2, gid=1, group="7"), "named with the id of group '0' (line 2)"),
    (_coll(2, extra='"group_ranks":[0,1],'), "both gid and group_ranks"),
    (b'{"ev":"group","gid":-3,"group":"0","ranks":[0,1],"desc":""}', "negative group id -3"),
    (b'{"ev":"group","gid":' + b"9" * 30 + b',"group":"0","ranks":[0]}', "out of range"),
    (b'{"ev":"group","gid":4,"group":"0","ranks":[0,true]}', "not all integers in range"),
    (b'{"ev":"group","gid":4,"group":"0","ranks":[0,' + b"9" * 25 + b"]}", "not all integers in range"),
    (b'{"ev":"group","gid":4,"group":"0","ranks":"0,1"}', "of the wrong type"),
    (b'{"ev":"group","gid":4,"group":"0"}', "malformed 'group' line"),
    (_coll(2, gid=5), "group id 5 is not defined"),  # defined only on the next line
    (b'{"ev":"group","gid":5,"group":"0","ranks":[0,1],"desc":"default_pg"}', ""),  # a new gid: fine
]


def test_hostile_group_lines_are_named_with_their_line_and_the_rest_analysed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_model, "PROBLEMS_SHOWN", 50)  # see every one (10 per file by default)
    rank1 = [*GOOD, _coll(1), b'{"ev":"group","gid":1,"group":"0","ranks":[0,1],"desc":"default_pg"}']
    rank1 += [line for line, _ in BAD] + [_coll(seq, gid=1 + (seq % 2) * 4) for seq in range(2, 5)]
    folder = tmp_path / "bad"
    folder.mkdir()
    _write(folder / trace_file_name(0), 0, [_event(0, seq) for seq in range(1, 5)])
    (folder / trace_file_name(1)).write_bytes(b"\n".join(rank1) + b"\n")
    analysis = _same(folder)
    found = {problem.line: problem.text for problem in analysis.problems}
    first_bad = len(GOOD) + 3  # after the first collective and a group line repeated unchanged
    for offset, (_, says) in enumerate(BAD):
        if says:
            assert says in found.pop(first_bad + offset), (offset, found)
    assert not found  # the repeat and the late definition are no problems
    assert analysis.exit_code() == EXIT_INCOMPLETE
    assert analysis.groups == (("0", (0, 1), 4),)
    assert not analysis.diverged and not analysis.warnings  # seqs 1-4 of rank 1 all read
    assert analysis.unreadable == sum(1 for _, says in BAD if says)
    text = render_text(analysis)
    assert f"collcheck-rank1.jsonl:{first_bad}: malformed 'coll' line (group id 9 is not defined" in text


def test_collcheck_trace_reports_them_with_status_3_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _job(tmp_path, seqs=4)
    path = tmp_path / trace_file_name(1)
    lines = path.read_bytes().splitlines()
    lines.insert(3, _coll(9, gid=77))
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert main(["trace", str(tmp_path)]) == EXIT_INCOMPLETE
    out = capsys.readouterr().out
    assert f"{path}:4: malformed 'coll' line (group id 77 is not defined" in out
    assert "Traceback" not in out


def test_group_definitions_past_the_bound_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_read, "MAX_GROUP_LINES", 3)
    monkeypatch.setattr(trace_read, "MAX_GROUP_MEMBERS", 40)
    events = [_event(1, 1), *(_event(1, 1, group=f"g{n}", members=(1, n)) for n in range(2, 6))]
    events.append(_event(1, 1, group="big", members=tuple(range(39))))
    path = tmp_path / trace_file_name(1)
    _write(path, 1, [replace(event, seq=1) for event in events])
    analysis = _same(tmp_path)
    refused = [p for p in analysis.problems if "more group definitions than a trace may hold" in p.text]
    undefined = [p for p in analysis.problems if "is not defined by an earlier group line" in p.text]
    assert len(refused) == len(undefined) == 3  # g4, g5 (count) and big (members), each skipped
    assert [name for name, _, _ in analysis.groups] == ["0", "g2", "g3"]


def test_old_and_new_lines_mixed_in_one_trace_read_as_the_old_ones(tmp_path: Path) -> None:
    events = {rank: [_event(rank, seq) for seq in range(1, 9)] for rank in range(2)}
    for name, style in (("old", lambda i: True), ("mixed", lambda i: i % 2 == 0)):
        folder = tmp_path / name
        folder.mkdir()
        for rank, rank_events in events.items():
            writer, encoder = TraceWriter(str(folder / trace_file_name(rank))), CollectiveEncoder(rank)
            writer.write({"ev": "header", "rank": rank})
            for index, event in enumerate(rank_events):
                if style(index):
                    writer.write(event.to_json())  # schema 1: the member list on the line
                else:
                    writer.write_coll(*encoder.coll(event))
            writer.close()
    old, mixed = _same(tmp_path / "old"), _same(tmp_path / "mixed")
    assert old.groups == mixed.groups == (("0", (0, 1), 8),)
    assert render_text(old).replace("/old/", "/x/") == render_text(mixed).replace("/mixed/", "/x/")
