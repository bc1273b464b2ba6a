"""Flight Recorder dumps through the agreed-prefix path (fr_prefix.py): the entries every member
issued alike are counted from columns, and the streaming analysis gives the in-memory one's
findings, text, JSON and Perfetto export, whatever the dumps hold."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import bench_module

from collcheck.runtime import fr_prefix, stream, stream_sources
from collcheck.runtime.analyze import analyze
from collcheck.runtime.fr_read import FlightRecorderDump
from collcheck.runtime.perfetto import to_perfetto, write_perfetto
from collcheck.runtime.record import CollectiveEvent
from collcheck.runtime.stream_sources import DumpSource, find_sources
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.trace_model import Analysis, Problem
from collcheck.runtime.trace_render import render_text, to_json

RANKS = 3
ENTRIES = 400


def _bench() -> ModuleType:
    return bench_module("flight_recorder_read")


def _write(folder: Path, dumps: dict[int, dict[str, Any]]) -> Path:
    bench = _bench()
    folder.mkdir()
    for rank, dump in dumps.items():
        (folder / f"rank_{rank}").write_bytes(bytes(bench.torch_pickle(dump)))
    return folder


def _dumps(entries: int = ENTRIES, diverge: bool = False) -> dict[int, dict[str, Any]]:
    bench = _bench()
    return {rank: bench.dump_of(rank, RANKS, entries, diverge and rank == RANKS - 1) for rank in range(RANKS)}


def _same(folder: Path, perfetto: bool = True) -> Analysis:
    """Both analyses of `folder`, checked equal in every output; the streaming one."""
    problems: list[Problem] = []
    in_memory = analyze(load_dir(str(folder), problems), problems)
    streamed = stream.analyze_dir(str(folder))
    assert streamed == in_memory
    assert render_text(streamed) == render_text(in_memory)
    assert to_json(streamed) == to_json(in_memory)
    if perfetto:
        document = io.StringIO()
        write_perfetto(streamed, document)
        assert document.getvalue() == json.dumps(to_perfetto(in_memory))
    return streamed


def _prefixes(folder: Path) -> fr_prefix.DumpPrefixes | None:
    sources = find_sources(str(folder), [])
    dumps = {one.key: one.opened for one in sources if isinstance(one, DumpSource)}
    return fr_prefix.scan(frozenset(dumps), dumps)


def test_a_divergence_at_the_end_is_found_past_an_agreed_prefix_of_everything_before_it(
    tmp_path: Path,
) -> None:
    folder = _write(tmp_path / "end", _dumps(diverge=True))
    found = _prefixes(folder)
    assert found is not None
    assert found.agreed == {"0": ENTRIES - 1}  # every collective but the last one counted from columns
    assert all(found.start(rank) == ENTRIES - 1 for rank in range(RANKS))
    streamed = _same(folder)
    assert [(d.group, d.seq, d.kind) for d in streamed.divergences] == [("0", ENTRIES, "mismatch")]


def test_a_difference_in_the_middle_stops_the_prefix_there(tmp_path: Path) -> None:
    dumps = _dumps()
    middle = dumps[1]["entries"][150]  # collective #151 of rank 1 is another shape
    middle["input_sizes"] = [[7]]
    folder = _write(tmp_path / "middle", dumps)
    found = _prefixes(folder)
    assert found is not None and found.agreed == {"0": 150}
    assert _same(folder).divergences[0].seq == 151


def test_a_call_site_difference_stops_the_prefix_and_is_reported(tmp_path: Path) -> None:
    dumps = _dumps()
    entry = dumps[2]["entries"][200]
    entry["frames"] = [*entry["frames"][:2], {"name": "step", "filename": "/job/train.py", "line": 77}]
    folder = _write(tmp_path / "site", dumps)
    found = _prefixes(folder)
    assert found is not None and found.agreed == {"0": 200}
    assert [d.kind for d in _same(folder).divergences] == ["callsite"]


def test_ring_buffers_that_start_at_other_sequence_numbers(tmp_path: Path) -> None:
    alike = _dumps()
    for dump in alike.values():  # every rank's ring dropped the same oldest entries
        dump["entries"] = dump["entries"][40:]
    folder = _write(tmp_path / "alike", alike)
    found = _prefixes(folder)
    assert found is not None and found.agreed == {"0": ENTRIES}
    _same(folder)
    apart = _dumps(diverge=True)
    apart[0]["entries"] = apart[0]["entries"][7:]  # rank 0's ring holds fewer
    folder = _write(tmp_path / "apart", apart)
    found = _prefixes(folder)
    assert found is not None and found.agreed == {}
    _same(folder)


def test_a_short_dump_a_missing_collective_and_unusable_entries(tmp_path: Path) -> None:
    dumps = _dumps()
    dumps[0]["entries"] = dumps[0]["entries"][:300]  # rank 0 stopped early: collective #301 missing
    dumps[1]["entries"][250]["collective_seq_id"] = 0  # no collective
    dumps[2]["entries"][260]["input_sizes"] = "not sizes"  # unusable
    folder = _write(tmp_path / "short", dumps)
    found = _prefixes(folder)
    assert found is not None
    assert found.limit[1] == 250 and found.limit[2] == 260 and found.agreed == {"0": 250}
    # The Perfetto export streamed from such dumps differs from the in-memory one's before fr_prefix.py
    # too (an entry's slice past an unusable one): not compared here.
    streamed = _same(folder, perfetto=False)
    assert [m.seq for m in streamed.missing] == [301]


def test_a_rank_outside_its_groups_member_list_is_compared_event_by_event(tmp_path: Path) -> None:
    dumps = _dumps(diverge=True)
    dumps[2]["pg_config"]["0"]["ranks"] = json.dumps([0, 1])
    folder = _write(tmp_path / "outside", dumps)
    assert _prefixes(folder) is None
    _same(folder)


def test_a_rank_that_may_join_a_group_past_its_columns_leaves_every_dump_event_by_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dumps = _dumps(entries=120)
    for rank, dump in dumps.items():
        dump["pg_config"]["1"] = {"name": "1", "desc": "pair", "ranks": json.dumps([0, 1])}
        if rank == 2:  # an entry unusable: its columns stop there; it issues in "1" last
            dump["entries"][60]["input_sizes"] = "not sizes"
            stray = dict(dump["entries"][-1], process_group=("1", "pair"), collective_seq_id=5)
            stray["profiling_name"] = "gloo:broadcast"
            dump["entries"].append(stray)
            continue
        pair = [dict(entry, process_group=("1", "pair")) for entry in dump["entries"]]
        dump["entries"] = [entry for both in zip(dump["entries"], pair, strict=True) for entry in both]
    folder = _write(tmp_path / "late", dumps)
    found = _prefixes(folder)
    assert found is None
    # The streaming analysis differs from the in-memory one on such a folder before fr_prefix.py
    # too (a rank issuing in a group its member list leaves out): it is compared with itself,
    # every dump event by event.
    streamed = stream.analyze_dir(str(folder))
    monkeypatch.setattr(fr_prefix, "scan", lambda traced, dumps: None)
    alone = stream.analyze_dir(str(folder))
    assert render_text(streamed) == render_text(alone) and to_json(streamed) == to_json(alone)


def _mutate(rng: random.Random, dumps: dict[int, dict[str, Any]]) -> None:
    """One random change to a random entry: a shape, a call site, a dump cut before or after it,
    a sequence number, an unusable entry, a subgroup from there on, a send, a repeated entry."""
    rank = rng.randrange(len(dumps))
    entries = dumps[rank]["entries"]
    if not entries:
        return
    at = rng.randrange(len(entries))
    entry, change = entries[at], rng.randrange(9)
    if change == 0:
        entry["input_sizes"] = [[rng.randint(1, 9)]]
    elif change == 1:
        entry["frames"] = [
            *entry["frames"][:2],
            {"name": "f", "filename": "/j.py", "line": rng.randint(1, 99)},
        ]
    elif change == 2:
        dumps[rank]["entries"] = entries[:at]
    elif change == 3:
        dumps[rank]["entries"] = entries[at:]
    elif change == 4:
        entry["collective_seq_id"] = rng.choice([0, -1, 2**62, entry["collective_seq_id"] + 3])
    elif change == 5:
        entry["input_sizes"] = "not sizes"
    elif change == 6:
        for later in entries[at:]:
            later["process_group"] = ("1", "sub")
        members = rng.sample(range(len(dumps)), rng.randint(1, len(dumps)))
        dumps[rank]["pg_config"]["1"] = {"ranks": json.dumps(members)}
    elif change == 7:
        entry.update(is_p2p=True, p2p_seq_id=rng.randint(0, 3), profiling_name="gloo:send 0")
    else:
        entries.insert(at, dict(entry, time_created_ns=rng.randint(0, 2**62)))


def test_random_dumps_give_what_the_event_by_event_pass_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench, scan = _bench(), fr_prefix.scan
    with_prefix = 0
    for case in range(40):
        rng = random.Random(case)
        ranks = rng.randint(2, 4)
        dumps = {rank: bench.dump_of(rank, ranks, rng.randint(20, 120), False) for rank in range(ranks)}
        for _ in range(rng.randint(0, 4)):
            _mutate(rng, dumps)
        folder = _write(tmp_path / str(case), dumps)
        monkeypatch.setattr(fr_prefix, "scan", scan)
        found = _prefixes(folder)
        with_prefix += bool(found is not None and found.agreed)
        streamed = stream.analyze_dir(str(folder))
        monkeypatch.setattr(fr_prefix, "scan", lambda traced, dumps: None)
        alone = stream.analyze_dir(str(folder))
        assert (render_text(streamed), to_json(streamed)) == (render_text(alone), to_json(alone)), case
    assert with_prefix >= 20


def _first(folder: Path, monkeypatch: pytest.MonkeyPatch, prefixes: bool) -> tuple[str, str, int]:
    """`--first`'s text and JSON on `folder`, and the dump entries made into events on the way;
    without `prefixes`, event by event (as before fr_prefix.py served `--first`)."""
    made = 0
    events = FlightRecorderDump.events

    def counted(dump: FlightRecorderDump, start: int = 0) -> Iterator[tuple[int, CollectiveEvent]]:
        nonlocal made
        for item in events(dump, start):
            made += 1
            yield item

    with monkeypatch.context() as patch:
        patch.setattr(FlightRecorderDump, "events", counted)
        if not prefixes:
            patch.setattr(fr_prefix, "scan", lambda traced, dumps: None)
        analysis = stream.analyze_dir(str(folder), until=stream.Until.FIRST_MISMATCH)
    return render_text(analysis), json.dumps(to_json(analysis)), made


@pytest.mark.parametrize("at", [30, 150, 399, ENTRIES])
def test_first_stops_at_the_divergence_through_the_agreed_prefix_and_prints_what_it_printed(
    at: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`trace --first` on a folder of dumps: the agreed prefix is counted from columns, events are
    made from the last whole turn before it ends, and the text and JSON (counts of what was read
    included) are those of the event-by-event pass."""
    dumps = _dumps()
    dumps[1]["entries"][at - 1]["input_sizes"] = [[7]]  # rank 1's collective #at differs
    folder = _write(tmp_path / str(at), dumps)
    text, document, made = _first(folder, monkeypatch, prefixes=True)
    old_text, old_document, old_made = _first(folder, monkeypatch, prefixes=False)
    assert (text, document) == (old_text, old_document)
    assert f"(group 0, #{at})" in text and text.startswith("collcheck trace: 3 ranks, stopped at the first")
    resume = (at - 1) // stream_sources.LINES_PER_TURN * stream_sources.LINES_PER_TURN
    assert old_made >= RANKS * (at - 1)  # every entry up to the divergence, on every rank
    assert made <= RANKS * (at - resume + 2 * stream_sources.LINES_PER_TURN)
    assert made < old_made or at <= stream_sources.LINES_PER_TURN
