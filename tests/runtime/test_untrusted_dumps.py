"""Trace folders are untrusted input: a crafted pickle must never run code (fr_read.py, fr_pickle.py)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, base_env
from test_analyze import _event, _fr_dump, _fr_entry, _write

from collcheck.cli import main
from collcheck.runtime import fr_read
from collcheck.runtime.analyze import analyze
from collcheck.runtime.record import trace_file_name
from collcheck.runtime.stream import analyze_dir
from collcheck.runtime.trace_binary import binary_name, convert_to_binary
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.trace_model import Problem


class _RunsCommand:
    """Unpickling this runs `os.system(touch MARKER)`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


class _Execs:
    """Unpickling this runs `builtins.exec`, which creates MARKER."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


def _crafted_files(folder: Path, marker: Path) -> list[str]:
    """Crafted pickles: bare payloads, and ones shaped like a dump (a dict first, protocols 2 and
    4, so that they pass the header check and reach the unpickler) holding a payload."""
    names = []
    for protocol in (2, 4, 5):
        for index, payload in enumerate((_RunsCommand(marker), _Execs(marker))):
            bare = f"fr_evil_bare_{protocol}_{index}"
            (folder / bare).write_bytes(pickle.dumps(payload, protocol=protocol))
            shaped = f"nccl_trace_rank_{protocol}{index}"
            dump = {"entries": [payload], "pg_config": {}, "rank": 7}
            (folder / shaped).write_bytes(pickle.dumps(dump, protocol=protocol))
            names += [bare, shaped]
    return names


def test_crafted_pickles_are_refused_and_the_other_traces_still_analysed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    folder = tmp_path / "traces"
    folder.mkdir()
    _write(folder, 0, [_event(0, 1, 4, 10)])
    _write(folder, 1, [_event(1, 1, 8, 12)])
    _crafted_files(folder, marker)
    problems: list[Problem] = []
    analysis = analyze(load_dir(str(folder), problems), problems)
    assert not marker.exists()
    assert analysis.ranks == (0, 1) and analysis.mismatches  # the real traces were analysed
    refused = {Path(p.path).name: p.text for p in problems}
    assert all(name.startswith("nccl_trace_rank_") for name in refused)  # bare ones never unpickled
    assert len(refused) == 6
    assert any("posix.system" in text for text in refused.values())
    assert any("builtins.exec" in text for text in refused.values())


def test_trace_cli_refuses_a_crafted_pickle_with_a_clear_message(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    folder = tmp_path / "traces"
    folder.mkdir()
    _crafted_files(folder, marker)
    done = subprocess.run(
        [sys.executable, "-m", "collcheck", "trace", str(folder)],
        env=base_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert not marker.exists()
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "refers to posix.system" in done.stderr and "not unpickled" in done.stderr


def test_a_legitimate_dump_shaped_like_torchs_still_reads(tmp_path: Path) -> None:
    for protocol in (2, 4, 5):  # torch writes protocol 2; Python's pickle.dump defaults to 4 or 5
        folder = tmp_path / str(protocol)
        folder.mkdir()
        for rank in (0, 1):
            dump = _fr_dump(
                [_fr_entry(1, "all_reduce", [[8]], 5), _fr_entry(2, "all_reduce", [[3 + rank]], 6)]
            )
            (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=protocol))
        problems: list[Problem] = []
        analysis = analyze(load_dir(str(folder), problems), problems)
        assert not problems
        assert [s.source for s in analysis.summaries] == ["flight-recorder"] * 2
        assert analysis.mismatches[0].seq == 2


def test_an_oversized_dump_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fr_read, "MAX_DUMP_BYTES", 1000)
    dump = _fr_dump([_fr_entry(seq, "all_reduce", [[8]], 5) for seq in range(1, 40)])
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(dump, protocol=2))
    _write(tmp_path, 1, [_event(1, 1, 8, 12)])
    problems: list[Problem] = []
    analysis = analyze(load_dir(str(tmp_path), problems), problems)
    assert analysis.ranks == (1,)
    assert len(problems) == 1 and "more than the 1000" in problems[0].text


def test_trace_cli_lists_refused_files_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "pwned"
    _write(tmp_path, 0, [_event(0, 1, 4, 10)])
    (tmp_path / "nccl_trace_rank_9").write_bytes(
        pickle.dumps({"entries": [_RunsCommand(marker)]}, protocol=2)
    )
    main(["trace", str(tmp_path)])
    out = capsys.readouterr().out
    assert not marker.exists()
    assert "could not read:" in out and "nccl_trace_rank_9: pickle refers to posix.system" in out


def _two_rank_dumps(folder: Path, protocol: int, entries: int = 5) -> bytes:
    """Dumps of ranks 0 and 1 that agree; rank 0's bytes are returned (for a test to damage)."""
    folder.mkdir(exist_ok=True)
    for rank in (0, 1):
        dump = {
            **_fr_dump([_fr_entry(seq, "all_reduce", [[8]], 5) for seq in range(1, entries + 1)]),
            "rank": rank,
        }
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=protocol))
    return (folder / "nccl_trace_rank_0").read_bytes()


def _trace(folder: Path, capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str]:
    code = main(["trace", str(folder), *more])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_dump_cut_short_is_named_counted_and_not_called_consistent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], protocol: int
) -> None:
    # Rank 0 killed while writing its dump: its rank is missing, and the trace must say so as it
    # does for a binary trace whose last record is cut short (exit 3: incomplete), and never say
    # "consistent".
    data = _two_rank_dumps(tmp_path / "dumps", protocol)
    lines, binary = tmp_path / "lines", tmp_path / "binary"
    lines.mkdir()
    binary.mkdir()
    _write(lines, 0, [_event(0, 1, 4, 10)])
    _write(binary, 1, [_event(1, 1, 4, 10)])
    convert_to_binary(str(lines / trace_file_name(0)), str(binary / binary_name(0)))
    cut_binary = (binary / binary_name(0)).read_bytes()
    (binary / binary_name(0)).write_bytes(cut_binary[:-5])
    cut_binary_code, cut_binary_text = _trace(binary, capsys)
    assert cut_binary_code == 3 and "cut short" in cut_binary_text
    for cut in (len(data) // 3, len(data) // 2, len(data) - 1):
        (tmp_path / "dumps" / "nccl_trace_rank_0").write_bytes(data[:cut])
        code, text = _trace(tmp_path / "dumps", capsys)
        assert code == cut_binary_code, text
        assert "rank 0's Flight Recorder dump could not be read" in text and "nccl_trace_rank_0" in text
        assert "consistent" not in text and "result: incomplete: 1 unreadable dump;" in text
        code, report = _trace(tmp_path / "dumps", capsys, "--format", "json")
        assert code == cut_binary_code
        found = json.loads(report)
        assert found["unreadable"] == 1 and found["incomplete"] and found["ranks"] == [1]
        assert [Path(problem["path"]).name for problem in found["problems"]] == ["nccl_trace_rank_0"]


def test_a_dump_the_decoder_cannot_read_is_reported_by_both_readers(tmp_path: Path) -> None:
    data = bytearray(_two_rank_dumps(tmp_path, 2))
    data[len(data) // 2] = 0xFF  # no opcode: damage in the middle
    (tmp_path / "nccl_trace_rank_0").write_bytes(bytes(data))
    problems: list[Problem] = []
    analysis = analyze(load_dir(str(tmp_path), problems), problems)
    assert analysis.ranks == (1,) and analysis.unreadable == 1 and analysis.incomplete
    assert [problem.skipped for problem in problems] == [True]
    assert "rank 0's Flight Recorder dump could not be read" in problems[0].text
    streamed = analyze_dir(str(tmp_path), [])
    assert streamed.ranks == (1,) and streamed.unreadable == 1
    assert [problem.text for problem in streamed.problems] == [problem.text for problem in problems]


def test_a_json_dump_cut_short_is_unreadable_and_other_json_is_still_no_dump(tmp_path: Path) -> None:
    _two_rank_dumps(tmp_path, 2)
    text = json.dumps({**_fr_dump([_fr_entry(1, "all_reduce", [[8]], 5)]), "rank": 0})
    (tmp_path / "nccl_trace_rank_0").write_text(text[: len(text) // 2])
    # JSON lines that name entries: no dump, not read (as before)
    (tmp_path / "notes.json").write_text('{"entries": 1}\n{"entries": 2}\n')
    problems: list[Problem] = []
    analysis = analyze(load_dir(str(tmp_path), problems), problems)
    assert [Path(problem.path).name for problem in problems] == ["nccl_trace_rank_0"]
    assert analysis.ranks == (1,) and analysis.unreadable == 1


def test_an_empty_entry_among_others_keeps_its_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A `{}` entry followed by a collective's: the decoder read past the empty one into the next
    # and refused the dump, and its rank was dropped without a word.
    for rank in (0, 1):
        entries: list[dict[str, object]] = [_fr_entry(seq, "all_reduce", [[8]], 5) for seq in range(1, 5)]
        entries.insert(2, {})
        dump = {**_fr_dump(entries), "rank": rank}
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=4))
    code, text = _trace(tmp_path, capsys)
    assert (
        code == 0 and "2 ranks" in text and "rank 0: 4 collectives" in text and "result: consistent" in text
    )
