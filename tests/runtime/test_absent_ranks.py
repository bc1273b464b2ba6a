"""A rank that left no trace or dump at all is named, never silent (issue 28).

The other ranks' files say which ranks must exist: a collcheck trace's header (`world_size`), the
member lists of the groups its collectives name, a Flight Recorder dump's `pg_config`. A rank they
name that wrote nothing is listed under `could not read:`, counted as an unreadable dump is, and
the folder is never called consistent: exit status 3 as for an unreadable dump, 1 when the ranks
that are there diverged. Every format (JSON lines, binary traces, dumps), every output (text, JSON,
`--first`), and the streaming pass and the in-memory analysis alike.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from test_analyze import _fr_entry

from collcheck.cli import main
from collcheck.runtime.analyze import absent_ranks, analyze
from collcheck.runtime.record import CallSite, CollectiveEvent, DoneEvent, TraceWriter, trace_file_name
from collcheck.runtime.stream import Until, analyze_dir
from collcheck.runtime.trace_binary import binary_name, convert_to_binary
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.trace_model import Problem, RankTrace
from collcheck.runtime.trace_render import render_text, to_json
from collcheck.runtime.verdict import JobEnd, Status, decide


def _event(rank: int, seq: int, numel: int, members: tuple[int, ...]) -> CollectiveEvent:
    return CollectiveEvent(
        rank=rank,
        group="0",
        group_ranks=members,
        seq=seq,
        op="all_reduce",
        shapes=((numel,),),
        dtypes=("float32",),
        reduce_op="sum",
        site=CallSite("train.py", 10 + seq, "main"),
        t_start=100.0 + seq + rank / 10,
    )


def _traces(folder: Path, ranks: list[int], world: int | None, diverge: bool = False) -> None:
    """JSON lines of `ranks` out of a job of `world` ranks (None: a header without `world_size`,
    the group's member list naming them instead); the last rank's third collective differs if
    `diverge`."""
    folder.mkdir(parents=True, exist_ok=True)
    members = tuple(range(world if world is not None else 4))
    for rank in ranks:
        writer = TraceWriter(str(folder / trace_file_name(rank)))
        header: dict[str, Any] = {"ev": "header", "schema": 2, "rank": rank}
        if world is not None:
            header["world_size"] = world
        writer.write(header)
        for seq in range(1, 5):
            numel = 99 if diverge and rank == ranks[-1] and seq == 3 else 8
            event = _event(rank, seq, numel, members)
            writer.write(event.to_json())
            writer.write(DoneEvent(event.group, seq, event.t_start + 0.01).to_json())
        writer.write({"ev": "exit"})
        writer.close()


def _binary(folder: Path, target: Path) -> None:
    target.mkdir()
    for path in sorted(folder.iterdir()):
        rank = int(path.name.removeprefix("collcheck-rank").removesuffix(".jsonl"))
        convert_to_binary(str(path), str(target / binary_name(rank)))


def _dumps(folder: Path, ranks: list[int], world: int, diverge: bool = False, pickled: bool = True) -> None:
    """Flight Recorder dumps of `ranks`, their pg_config naming `world` ranks (a raw gloo dump's,
    keyed by "")."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"": {"name": "", "desc": "", "ranks": json.dumps(list(range(world)))}}
    for rank in ranks:
        sizes = [[99 if diverge and rank == ranks[-1] and seq == 3 else 8] for seq in range(1, 5)]
        entries = [_fr_entry(seq, "all_reduce", [size], 10 + seq) for seq, size in enumerate(sizes, 1)]
        dump = {"version": "2.10", "pg_config": config, "pg_status": {}, "rank": rank, "entries": entries}
        if pickled:
            (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))
        else:
            (folder / f"nccl_trace_rank_{rank}.json").write_text(json.dumps(dump))


def _cli(folder: Path, capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, str]:
    code = main(["trace", str(folder), *options])
    return code, capsys.readouterr().out


def _both(folder: Path) -> tuple[Any, Any]:
    """The streaming pass's analysis and the in-memory one, which must agree."""
    problems: list[Problem] = []
    in_memory = analyze(load_dir(str(folder), problems), problems)
    streamed = analyze_dir(str(folder))
    assert render_text(streamed) == render_text(in_memory)
    assert to_json(streamed) == to_json(in_memory)
    return streamed, in_memory


FOLDERS = {
    "json lines": lambda folder, ranks, world, diverge=False: _traces(folder, ranks, world, diverge),
    "pickled dumps": lambda folder, ranks, world, diverge=False: _dumps(folder, ranks, world, diverge),
    "json dumps": lambda folder, ranks, world, diverge=False: _dumps(folder, ranks, world, diverge, False),
}


def _folder(kind: str, folder: Path, ranks: list[int], world: int, diverge: bool = False) -> Path:
    if kind == "binary":
        _traces(folder / "lines", ranks, world, diverge)
        _binary(folder / "lines", folder / "binary")
        return folder / "binary"
    FOLDERS[kind](folder, ranks, world, diverge)
    return folder


KINDS = ("json lines", "binary", "pickled dumps", "json dumps")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("ranks", "absent"), [([0, 1, 2], "rank 3"), ([0, 1, 3], "rank 2"), ([0], "ranks 1-3")]
)
def test_a_rank_without_any_file_is_named_and_the_folder_is_incomplete(
    kind: str, ranks: list[int], absent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(kind, tmp_path / "job", ranks, 4)
    streamed, _ = _both(folder)
    count = 4 - len(ranks)
    assert streamed.absent_count == count and streamed.unreadable == count
    code, text = _cli(folder, capsys)
    assert code == 3  # as for an unreadable dump: nothing diverged in what could be read
    assert f"  {absent}: no trace or dump in the folder" in text
    assert "consistent" not in text
    assert text.rstrip().endswith(
        f"result: incomplete: {count} rank{'s' if count > 1 else ''} without a trace or dump ({absent}); "
        "no divergence in what could be read"
    )
    code, out = _cli(folder, capsys, "--format", "json")
    report = json.loads(out)
    assert code == 3 and report["incomplete"] and report["unreadable"] == count
    missing = [rank for first, last in report["absent"] for rank in range(first, last + 1)]
    assert missing == sorted(set(range(4)) - set(ranks))
    code, first = _cli(folder, capsys, "--first")  # no divergence: read to the end, as without it
    assert code == 3 and first == text


@pytest.mark.parametrize("kind", KINDS)
def test_first_names_the_absent_rank_beside_the_divergence(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(kind, tmp_path / "job", [0, 1, 3], 4, diverge=True)
    code, text = _cli(folder, capsys)
    assert code == 1 and "first divergence" in text and "  rank 2: no trace or dump" in text
    code, first = _cli(folder, capsys, "--first")
    assert code == 1 and "stopped at the first divergence" in first
    assert first.splitlines()[-2:] == ["could not read:", text.splitlines()[-2]]
    code, out = _cli(folder, capsys, "--first", "--format", "json")
    report = json.loads(out)
    assert code == 1 and report["stopped_at_first"] and report["absent"] == [[2, 2]]


def test_an_unreadable_dump_is_counted_once_not_also_as_absent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _dumps(tmp_path, [0, 1, 2], 4)
    (tmp_path / "nccl_trace_rank_2").write_bytes((tmp_path / "nccl_trace_rank_2").read_bytes()[:-40])
    code, text = _cli(tmp_path, capsys)
    assert code == 3
    assert "rank 2's Flight Recorder dump could not be read" in text and "  rank 3: no trace or dump" in text
    assert "result: incomplete: 1 unreadable dump, 1 rank without a trace or dump (rank 3);" in text


def test_a_complete_folder_has_no_absent_rank_and_its_json_is_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for kind in KINDS:
        folder = _folder(kind, tmp_path / kind.replace(" ", "_"), [0, 1, 2, 3], 4)
        code, text = _cli(folder, capsys)
        assert code == 0 and text.rstrip().endswith("result: consistent"), text
        code, out = _cli(folder, capsys, "--format", "json")
        assert code == 0 and "absent" not in json.loads(out)


def test_the_member_lists_name_the_ranks_where_no_header_gives_a_world_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _traces(tmp_path, [0, 2], None)  # the group's members are 0-3
    code, text = _cli(tmp_path, capsys)
    assert code == 3 and "  ranks 1,3: no trace or dump in the folder" in text


def test_a_world_size_that_is_no_count_is_a_problem_of_its_line_not_a_huge_absence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _traces(tmp_path, [0, 1], 2)
    path = tmp_path / trace_file_name(1)
    lines = path.read_text().splitlines()
    lines[0] = lines[0].replace('"world_size":2', '"world_size":1e300')
    path.write_text("\n".join(lines) + "\n")
    code, text = _cli(tmp_path, capsys)
    assert code == 3 and "world_size '1e+300' is not a count of ranks; not used" in text
    assert "no trace or dump" not in text
    assert "result: incomplete: 1 unreadable line skipped; no divergence in what could be read" in text


def test_absent_ranks_are_runs_whatever_the_world_claims() -> None:
    traces = [RankTrace(rank=rank, source="collcheck", path="", world_size=1 << 24) for rank in (0, 5)]
    refused = [Problem("nccl_trace_rank_7", 0, "damaged", True, 7)]
    assert absent_ranks(traces, [1 << 30, (1 << 24) + 1], refused) == (
        (1, 4),
        (6, 6),
        (8, (1 << 24) - 1),
        ((1 << 24) + 1, (1 << 24) + 1),
        (1 << 30, 1 << 30),
    )
    assert absent_ranks(traces, [1 << 24], []) == ((1, 4), (6, 1 << 24))


def test_a_successful_run_whose_folder_lacks_other_nodes_ranks_is_no_tracer_error(tmp_path: Path) -> None:
    """`collcheck run` on one node of several, traces in a node-local folder: the job succeeded and
    what is here agrees; the verdict says which ranks it could not compare."""
    _traces(tmp_path, [0, 1], 4)
    found = decide(analyze_dir(str(tmp_path)), JobEnd(0), {})
    assert found.status is Status.OK
    assert "ranks 2-3 of the job left no trace in this folder" in found.text
    (tmp_path / trace_file_name(1)).write_text((tmp_path / trace_file_name(1)).read_text() + "not json\n")
    assert decide(analyze_dir(str(tmp_path)), JobEnd(0), {}).status is Status.TRACER_ERROR


def test_first_stops_early_and_still_names_the_absent_rank(tmp_path: Path) -> None:
    _traces(tmp_path, [0, 1, 3], 4, diverge=True)
    analysis = analyze_dir(str(tmp_path), until=Until.FIRST_MISMATCH)
    assert analysis.stopped and analysis.absent == ((2, 2),) and analysis.exit_code() == 1
