"""`collcheck trace --first` (stream.Until): the same first divergence as the whole pass, found
without reading the traces past it, on JSON lines (the streaming pass stops) and on binary traces
(the prefix scan stops too)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_stream

from collcheck.cli import main
from collcheck.runtime import stream, stream_sources, trace_binary, trace_prefix
from collcheck.runtime.record import CollectiveEvent, trace_file_name
from collcheck.runtime.stream import Until
from collcheck.runtime.trace_binary import binary_name, convert_to_binary
from collcheck.runtime.trace_model import Divergence
from collcheck.runtime.trace_read import numbered_lines

RANKS = 3


def _job(
    folder: Path,
    events: int,
    binary: bool,
    changes: dict[int, dict[str, Any]],
    then: dict[int, list[CollectiveEvent]] | None = None,
) -> None:
    """`events` collectives per rank in group 0, rank 1's collective #n changed by `changes[n]`;
    then each rank's `then[rank]`."""
    for rank in range(RANKS):
        trace = [
            test_stream._event(rank, seq, line=10 + seq % 2, **(changes.get(seq, {}) if rank == 1 else {}))
            for seq in range(1, events + 1)
        ]
        test_stream._write(folder, rank, trace + (then or {}).get(rank, []))
        if binary:
            path = folder / trace_file_name(rank)
            convert_to_binary(str(path), str(folder / binary_name(rank)))
            path.unlink()


def _shown(divergence: Divergence) -> tuple[object, ...]:
    return (
        divergence.group,
        divergence.seq,
        divergence.kind,
        divergence.ranks,
        tuple((side.describe, side.site) for side in divergence.sides),
    )


class _Reads:
    """How much of the traces a pass reads: JSON lines, binary slots (scan and stream together)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.lines = self.slots = 0
        lines_of = numbered_lines
        chunks_of = trace_binary.BinaryRecords.chunks

        def lines(handle: Any) -> Iterator[Any]:
            for line in lines_of(handle):
                self.lines += 1
                yield line

        def chunks(records: trace_binary.BinaryRecords, slots: int | None = None) -> Iterator[Any]:
            before = records.next_slot
            for chunk in chunks_of(records, slots):
                self.slots += records.next_slot - before
                before = records.next_slot
                yield chunk

        monkeypatch.setattr(stream_sources, "numbered_lines", lines)
        monkeypatch.setattr(trace_binary.BinaryRecords, "chunks", chunks)
        monkeypatch.setattr(trace_prefix, "chunk_slots", lambda readers: 1024)
        monkeypatch.setattr(stream_sources, "CHUNK_SLOTS", 1024)

    def taken(self) -> int:
        taken, self.lines, self.slots = self.lines + self.slots, 0, 0
        return taken


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_the_first_divergence_is_the_whole_passes_and_found_reading_little(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, binary: bool
) -> None:
    # A mismatch at #60 of 12,000 and another at #9,000: --first reports the first, as the whole
    # pass does, having read a small part of the traces.
    _job(tmp_path, 12_000, binary, {60: {"shapes": ((8,),)}, 9_000: {"op": "broadcast"}})
    reads = _Reads(monkeypatch)
    whole = stream.analyze_dir(str(tmp_path))
    read_whole = reads.taken()
    first = stream.analyze_dir(str(tmp_path), until=Until.FIRST_MISMATCH)
    read_first = reads.taken()
    assert [d.seq for d in whole.mismatches] == [60]  # a group's first mismatch only
    assert first.stopped and not whole.stopped
    assert [_shown(d) for d in first.divergences] == [_shown(whole.mismatches[0])]
    assert first.exit_code() == whole.exit_code() == 1
    assert read_first * 10 < read_whole, (read_first, read_whole)
    print("READS", read_first, read_whole)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_a_group_met_only_after_the_scan_stopped_is_still_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, binary: bool
) -> None:
    # #30 differs only in its call site (not a mismatch; the binary scan stops there), and group
    # 1 starts after #6,000 with a mismatch at its #3: slots the scan never read are not "agreed".
    later: dict[str, Any] = {"group": "1", "group_ranks": (0, 1, 2)}
    changes: dict[int, dict[str, Any]] = {30: {"site": test_stream._event(1, 30, line=99).site}}
    then = {
        rank: [
            test_stream._event(rank, seq, t_start=9_000.0 + seq, **later, **_bigger(rank, seq))
            for seq in range(1, 10)
        ]
        for rank in range(RANKS)
    }
    _job(tmp_path, 6_000, binary, changes, then)
    _Reads(monkeypatch)
    whole = stream.analyze_dir(str(tmp_path))
    first = stream.analyze_dir(str(tmp_path), until=Until.FIRST_MISMATCH)
    assert [(d.group, d.seq) for d in whole.mismatches] == [("1", 3)]
    assert [_shown(d) for d in first.divergences] == [_shown(whole.mismatches[0])]
    strict = stream.analyze_dir(str(tmp_path), until=Until.FIRST_DIVERGENCE)
    assert [(d.group, d.seq, d.kind) for d in strict.divergences] == [("0", 30, "callsite")]


def _bigger(rank: int, seq: int) -> dict[str, Any]:
    return {"shapes": ((16,),)} if (rank, seq) == (1, 3) else {}


def test_a_consistent_folder_is_read_whole_and_reported_as_usual(tmp_path: Path) -> None:
    _job(tmp_path, 200, False, {})
    first = stream.analyze_dir(str(tmp_path), until=Until.FIRST_MISMATCH)
    assert not first.stopped and first == stream.analyze_dir(str(tmp_path))


def test_the_cli_prints_the_first_divergence_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _job(tmp_path, 300, False, {20: {"shapes": ((8,),)}})
    assert main(["trace", str(tmp_path), "--first"]) == 1
    text = capsys.readouterr().out
    assert text.splitlines()[0] == "collcheck trace: 3 ranks, stopped at the first divergence"
    assert "group 0: first divergence: " in text and "(group 0, #20)" in text
    assert "per rank:" not in text  # counts and last collectives would be of what was read
    assert main(["trace", str(tmp_path), "--first", "--format", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["stopped_at_first"] and [d["seq"] for d in document["divergences"]] == [20]
    assert main(["trace", str(tmp_path), "--first", "--format", "perfetto"]) == 2
