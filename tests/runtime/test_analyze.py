"""Offline analysis on hand-built traces (no torch): divergence, missing ranks, FR dumps, CLI."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace
from pathlib import Path

from collcheck.cli import main
from collcheck.runtime.analyze import analyze
from collcheck.runtime.perfetto import to_perfetto
from collcheck.runtime.record import CallSite, CollectiveEvent, DoneEvent, TraceWriter, trace_file_name
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.trace_render import render_text, to_json


def _event(
    rank: int,
    seq: int,
    numel: int,
    line: int,
    op: str = "all_reduce",
    group: str = "0",
    ranks: tuple[int, ...] = (0, 1),
) -> CollectiveEvent:
    return CollectiveEvent(
        rank=rank,
        group=group,
        group_ranks=ranks,
        seq=seq,
        op=op,
        shapes=((numel,),),
        dtypes=("float32",),
        reduce_op="sum",
        site=CallSite("train.py", line, "main"),
        t_start=100.0 + seq + rank / 10,
    )


def _write(directory: Path, rank: int, events: list[CollectiveEvent], exited: bool = True) -> None:
    writer = TraceWriter(str(directory / trace_file_name(rank)))
    writer.write({"ev": "header", "rank": rank})
    for event in events:
        writer.write(event.to_json())
        writer.write(DoneEvent(event.group, event.seq, event.t_start + 0.01).to_json())
    if exited:
        writer.write({"ev": "exit"})
    writer.close()


def test_first_mismatch_names_both_sides(tmp_path: Path) -> None:
    _write(tmp_path, 0, [_event(0, 1, 4, 10), _event(0, 2, 1024, 13)])
    _write(tmp_path, 1, [_event(1, 1, 4, 10), _event(1, 2, 4096, 16)])
    analysis = analyze(load_dir(str(tmp_path)))
    assert [d.text for d in analysis.mismatches] == [
        "rank 0 all_reduce(float32[1024]) at train.py:13 vs rank 1 all_reduce(float32[4096]) at train.py:16 "
        "(group 0, #2)"
    ]
    assert analysis.diverged and analysis.exit_code() == 1


def test_the_majority_is_the_reference_not_rank_0(tmp_path: Path) -> None:
    ranks = (0, 1, 2)
    _write(tmp_path, 0, [_event(0, 1, 8, 20, ranks=ranks)])
    for rank in (1, 2):
        _write(tmp_path, rank, [_event(rank, 1, 4, 20, ranks=ranks)])
    divergence = analyze(load_dir(str(tmp_path))).mismatches[0]
    assert divergence.ranks == ((1, 2), (0,))
    assert divergence.sides[0].describe == "all_reduce(float32[4])"


def test_callsite_only_divergence_is_a_warning(tmp_path: Path) -> None:
    _write(tmp_path, 0, [_event(0, 1, 4, 10), _event(0, 2, 4, 11)])
    _write(tmp_path, 1, [_event(1, 1, 4, 11), _event(1, 2, 4, 10)])
    analysis = analyze(load_dir(str(tmp_path)))
    assert [(d.kind, d.seq) for d in analysis.divergences] == [("callsite", 1)]
    assert analysis.exit_code() == 0 and analysis.exit_code(strict=True) == 1


def test_rank_that_never_joined_and_killed_rank(tmp_path: Path) -> None:
    _write(tmp_path, 0, [_event(0, 1, 4, 10), _event(0, 2, 4, 11, op="barrier")])
    _write(tmp_path, 1, [_event(1, 1, 4, 10)], exited=False)
    analysis = analyze(load_dir(str(tmp_path)))
    (missing,) = analysis.missing
    assert (missing.ranks, missing.seq, missing.issued_by.site) == ((1,), 2, "train.py:11")
    assert analysis.summaries[1].exited is False
    assert "without an exit record" in analysis.summaries[1].text


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    _write(tmp_path, 0, [_event(0, 1, 4, 10)])
    _write(tmp_path, 1, [_event(1, 1, 4, 10)], exited=False)
    with open(tmp_path / trace_file_name(1), "a") as handle:
        handle.write('{"ev":"coll","rank":1,"gro')  # killed mid-write
    assert not analyze(load_dir(str(tmp_path))).diverged


def _fr_entry(seq: int, name: str, sizes: list[list[int]], line: int) -> dict[str, object]:
    # The shape of a real torch 2.13 gloo dump (`_dump_fr_trace()`), frames innermost first.
    return {
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "is_p2p": False,
        "pg_id": 0,
        "op_id": seq,
        "process_group": ("0", "default_pg"),
        "profiling_name": f"gloo:{name}",
        "record_id": seq - 1,
        "input_sizes": sizes,
        "input_dtypes": ["Float"] * len(sizes),
        "output_sizes": sizes,
        "output_dtypes": ["Float"] * len(sizes),
        "state": "scheduled",
        "retired": True,
        "time_created_ns": 10**18 + seq,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "timeout_ms": 1800000,
        "thread_name": "python",
        "frames": [
            {
                "filename": "/x/site-packages/torch/distributed/distributed_c10d.py",
                "line": 3245,
                "name": "all_reduce",
            },
            {"filename": "/job/train.py", "line": line, "name": "<module>"},
        ],
    }


def _fr_dump(entries: list[dict[str, object]]) -> dict[str, object]:
    # Raw gloo dumps key pg_config by "" while entries say group "0" (FR's own analyzer trips on it).
    return {
        "version": "2.10",
        "pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1]"}},
        "pg_status": {},
        "entries": entries,
    }


def test_flight_recorder_pickle_and_json_dumps(tmp_path: Path) -> None:
    with open(tmp_path / "nccl_trace_rank_0", "wb") as handle:
        pickle.dump(
            _fr_dump([_fr_entry(1, "all_reduce", [[8]], 5), _fr_entry(2, "all_reduce", [[3]], 6)]), handle
        )
    with open(tmp_path / "nccl_trace_rank_1.json", "w") as handle:
        json.dump(
            _fr_dump([_fr_entry(1, "all_reduce", [[8]], 5), _fr_entry(2, "broadcast", [[3]], 9)]), handle
        )
    analysis = analyze(load_dir(str(tmp_path)))
    assert [s.source for s in analysis.summaries] == ["flight-recorder"] * 2
    assert analysis.mismatches[0].text == (
        "rank 0 all_reduce(float32[3]) at /job/train.py:6 vs "
        "rank 1 broadcast(float32[3]) at /job/train.py:9 (group 0, #2)"
    )


def test_perfetto_has_one_track_per_rank_and_marks_divergence(tmp_path: Path) -> None:
    _write(tmp_path, 0, [_event(0, 1, 4, 10)])
    _write(tmp_path, 1, [_event(1, 1, 8, 12)])
    trace = to_perfetto(analyze(load_dir(str(tmp_path))))
    events = trace["traceEvents"]
    assert {e["args"]["name"] for e in events if e.get("name") == "process_name"} == {"rank 0", "rank 1"}
    assert sorted(e["pid"] for e in events if e["ph"] == "X") == [0, 1]
    assert {e["pid"] for e in events if e["ph"] == "i"} == {0, 1}
    json.dumps(trace)


def test_trace_cli_exit_codes_and_formats(tmp_path: Path, capsys: object) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    for rank in (0, 1):
        _write(good, rank, [_event(rank, 1, 4, 10)])
        _write(bad, rank, [_event(rank, 1, 4 * (rank + 1), 10)])
    assert main(["trace", str(good)]) == 0
    assert main(["trace", str(bad), "--format", "json"]) == 1
    assert main(["trace", str(bad), "--format", "perfetto", "-o", str(tmp_path / "p.json")]) == 1
    assert json.loads((tmp_path / "p.json").read_text())["traceEvents"]
    assert main(["trace", str(tmp_path / "missing")]) == 2
    assert main(["trace", str(good), "--format", "xml"]) == 2


def _p2p(rank: int, seq: int, op: str, peer: int, numel: int, line: int) -> CollectiveEvent:
    return CollectiveEvent(
        rank=rank,
        group="0:p2p",
        group_ranks=tuple(sorted((rank, peer))),
        seq=seq,
        op=op,
        shapes=((numel,),),
        dtypes=("float32",),
        root=peer,
        site=CallSite("train.py", line, "main"),
        t_start=100.0 + seq + rank / 10,
        tag=0,
    )


def test_sends_and_recvs_that_pair_up_are_consistent(tmp_path: Path) -> None:
    _write(tmp_path, 0, [_p2p(0, 1, "send", 1, 4, 12), _p2p(0, 2, "recv", 1, 3, 13)])
    _write(tmp_path, 1, [_p2p(1, 1, "recv", 0, 4, 15), _p2p(1, 2, "send", 0, 3, 16)])
    analysis = analyze(load_dir(str(tmp_path)))
    assert not analysis.p2p and not analysis.diverged


def test_the_first_p2p_mismatch_of_each_channel_names_both_call_sites(tmp_path: Path) -> None:
    sends = [_p2p(0, seq, "send", 1, 4, 12) for seq in (1, 2, 3)]
    recvs = [_p2p(1, 1, "recv", 0, 4, 15), _p2p(1, 2, "recv", 0, 8, 15), _p2p(1, 3, "recv", 0, 8, 15)]
    _write(tmp_path, 0, sends)
    _write(tmp_path, 1, recvs)
    analysis = analyze(load_dir(str(tmp_path)))
    text = (
        "rank 0 send(float32[4], peer=1) at train.py:12 vs rank 1 recv(float32[8], peer=0) at train.py:15 "
        "(group 0, send #2 0->1)"
    )
    assert [(f.kind, f.text) for f in analysis.p2p] == [("mismatch", text)]  # the first one only
    assert analysis.diverged and analysis.exit_code() == 1
    assert f"  first mismatch: {text}" in render_text(analysis).splitlines()
    assert to_json(analysis)["p2p"][0]["where"] == "group 0, send #2 0->1"
    marks = [e for e in to_perfetto(analysis)["traceEvents"] if e["ph"] == "i"]
    assert sorted(e["pid"] for e in marks) == [0, 1]


def test_a_send_never_received_is_reported_when_the_receiver_was_traced(tmp_path: Path) -> None:
    _write(tmp_path, 0, [_p2p(0, 1, "send", 1, 4, 12), _p2p(0, 2, "send", 1, 4, 13)])
    _write(tmp_path, 1, [_p2p(1, 1, "recv", 0, 4, 15)])
    (finding,) = analyze(load_dir(str(tmp_path))).p2p
    assert (finding.kind, finding.text) == (
        "unmatched",
        "rank 1 never issued the recv for rank 0 send(float32[4], peer=1) at train.py:13 "
        "(group 0, send #2 0->1)",
    )
    (tmp_path / trace_file_name(1)).unlink()  # rank 1 untraced: its recvs are unknown, not missing
    assert not analyze(load_dir(str(tmp_path))).p2p


def test_a_recv_never_sent_and_any_source_receivers(tmp_path: Path) -> None:
    _write(tmp_path, 0, [_event(0, 1, 4, 10)])
    _write(tmp_path, 1, [_event(1, 1, 4, 10), _p2p(1, 1, "recv", 0, 4, 15)])
    (finding,) = analyze(load_dir(str(tmp_path))).p2p
    assert finding.text == (
        "rank 0 never issued the send for rank 1 recv(float32[4], peer=0) at train.py:15 "
        "(group 0, send #1 0->1)"
    )
    any_source = replace(_p2p(1, 1, "recv_any_source", 0, 8, 14), root=None)
    _write(tmp_path, 0, [_p2p(0, 1, "send", 1, 8, 12), _p2p(0, 2, "send", 1, 8, 12)])
    _write(tmp_path, 1, [any_source, _p2p(1, 2, "recv", 0, 4, 15)])
    assert not analyze(load_dir(str(tmp_path))).p2p  # which send each recv took cannot be told


def _at(event: CollectiveEvent, operand: str) -> CollectiveEvent:
    return replace(event, site=replace(event.site, operand=operand))


def test_a_swapped_pair_fails_the_trace_and_names_all_four_call_sites(tmp_path: Path) -> None:
    _write(tmp_path, 0, [_at(_event(0, 1, 4, 12), "a"), _at(_event(0, 2, 4, 13), "b")])
    _write(tmp_path, 1, [_at(_event(1, 1, 4, 16), "b"), _at(_event(1, 2, 4, 17), "a")])
    analysis = analyze(load_dir(str(tmp_path)))
    assert [swap.text for swap in analysis.swaps] == [
        "swapped collectives in group 0: rank 0 issued all_reduce(float32[4]) on `a` at train.py:12 (#1), "
        "then on `b` at train.py:13 (#2); rank 1 on `b` at train.py:16 (#1), then on `a` at train.py:17 "
        "(#2): the same collectives in opposite orders (gloo returns wrong results, NCCL and HCCL may hang)"
    ]
    assert analysis.diverged and "swapped collectives in group 0" in render_text(analysis)
    assert to_json(analysis)["swaps"][0]["seqs"] == [1, 2]
    assert main(["trace", str(tmp_path)]) == 1


def test_the_barrier_trick_and_one_operand_on_two_lines_pass_the_trace_with_a_warning(tmp_path: Path) -> None:
    barrier = replace(_event(0, 1, 4, 12, op="barrier"), shapes=(), dtypes=())
    _write(tmp_path, 0, [barrier, _at(_event(0, 2, 4, 13), "x"), _at(_event(0, 3, 4, 14), "y")])
    _write(
        tmp_path,
        1,
        [
            replace(barrier, rank=1, site=CallSite("train.py", 20)),
            _at(_event(1, 2, 4, 21), "x"),
            _at(_event(1, 3, 4, 22), "y"),
        ],
    )
    analysis = analyze(load_dir(str(tmp_path)))
    assert not analysis.swaps and not analysis.diverged and analysis.warnings
    assert main(["trace", str(tmp_path)]) == 0


def test_perfetto_goes_to_stdout_with_dash_and_status_lines_to_stderr(tmp_path: Path) -> None:
    import subprocess
    import sys

    for rank in (0, 1):
        _write(tmp_path, rank, [_event(rank, 1, 4, 10)])
    done = subprocess.run(
        [sys.executable, "-m", "collcheck", "trace", str(tmp_path), "--format", "perfetto", "-o", "-"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["traceEvents"]  # stdout is the JSON document and nothing else
    assert "ui.perfetto.dev" in done.stderr and not (tmp_path / "trace.perfetto.json").exists()


def test_the_verdict_names_one_cause_and_its_status(tmp_path: Path) -> None:
    from collcheck.runtime.verdict import JobEnd, Status, decide

    ok, bad, killed = tmp_path / "ok", tmp_path / "bad", tmp_path / "killed"
    for folder in (ok, bad, killed):
        folder.mkdir()
    for rank in (0, 1):
        _write(ok, rank, [_event(rank, 1, 4, 10)])
        _write(bad, rank, [_event(rank, 1, 4 * (rank + 1), 10)])
    _write(killed, 0, [_event(0, 1, 4, 10), _event(0, 2, 4, 11)], exited=False)
    _write(killed, 1, [_event(1, 1, 4, 10)], exited=False)
    assert decide(analyze(load_dir(str(ok))), JobEnd(0), {}).status == Status.OK
    mismatch = decide(analyze(load_dir(str(bad))), JobEnd(1), {1: -6})  # gloo aborted rank 1 after it
    assert mismatch.status == Status.MISMATCH and mismatch.text.startswith("rank 0 all_reduce(float32[4])")
    died = decide(analyze(load_dir(str(killed))), JobEnd(1), {0: -15, 1: -9})
    assert died.status == Status.RANK_DIED
    assert died.text == (
        "rank 1 died at #1 (signal 9 SIGKILL): last all_reduce(float32[4]) at train.py:10 (group 0, #1), "
        "completed; then the launcher stopped rank 0 (SIGTERM)"
    )
    unknown = decide(analyze(load_dir(str(killed))), JobEnd(1), {})  # no exit codes: both traces stop
    assert unknown.status == Status.RANK_DIED and "exit status unknown" in unknown.text
    assert decide(analyze(load_dir(str(killed))), JobEnd(1, hung=True), {}).status == Status.STALL
    assert decide(analyze(load_dir(str(ok))), JobEnd(130, interrupted=True), {}).status == Status.INTERRUPTED
    stalled = tmp_path / "stalled"
    stalled.mkdir()
    writer = TraceWriter(str(stalled / trace_file_name(0)))
    writer.write({"ev": "header", "rank": 0})
    writer.write({"ev": "coll", **_event(0, 1, 4, 10).to_json()})
    text = "stall: rank 0 has waited 3.0s in all_reduce(float32[4]) at train.py:10 (group 0, #1)\n  ..."
    writer.write({"ev": "report", "kind": "stall", "severity": "error", "text": text, "rank": 0, "t": 1.0})
    writer.close()
    _write(stalled, 1, [], exited=False)
    stall = decide(analyze(load_dir(str(stalled))), JobEnd(1), {0: 86, 1: 86})  # both stopped by collcheck
    assert (stall.status, stall.text) == (Status.STALL, text.splitlines()[0])
