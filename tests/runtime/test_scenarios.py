"""Real multi-process gloo jobs: what the tracer reports for each way ranks can diverge.

The programs in programs/ contain no collcheck code; the tracer is switched on through the
environment exactly as `collcheck run` does. Each job has a hard timeout (conftest.run_job).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from conftest import Job, line_of, run_job, run_job_past_teardown_aborts

from collcheck.runtime.analyze import analyze
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.trace_model import Analysis
from collcheck.runtime.tracer import TraceConfig
from collcheck.runtime.verify import ABORT_EXIT_CODE

pytestmark = pytest.mark.multirank

RECORD = TraceConfig(timeout_s=3.0)
RECORD_PYTHON = TraceConfig(timeout_s=3.0, native=False)  # the Python kernel (COLLCHECK_NATIVE=0)
ASYNC = TraceConfig(verify=True, timeout_s=3.0)
STRICT = TraceConfig(verify=True, strict=True, timeout_s=3.0)


def _swap_text() -> str:
    a0, b0 = line_of("swap_same.py", "SWAP_A0"), line_of("swap_same.py", "SWAP_B0")
    b1, a1 = line_of("swap_same.py", "SWAP_B1"), line_of("swap_same.py", "SWAP_A1")
    return (
        f"swapped collectives in group 0: rank 0 issued all_reduce(float32[4]) on `a` at swap_same.py:{a0} "
        f"(#1), then on `b` at swap_same.py:{b0} (#2); rank 1 on `b` at swap_same.py:{b1} (#1), then on "
        f"`a` at swap_same.py:{a1} (#2)"
    )


def _swap_found(analysis: Analysis) -> list[list[tuple[int, int, str, int]]]:
    """Each swap's four uses as (rank, seq, operand, line)."""
    return [
        [(use.rank, use.seq, use.operand, int(use.site.rsplit(":", 1)[1])) for use in swap.uses]
        for swap in analysis.swaps
    ]


def _swap_uses() -> list[list[tuple[int, int, str, int]]]:
    line = functools.partial(line_of, "swap_same.py")
    return [
        [
            (0, 1, "a", line("SWAP_A0")),
            (1, 1, "b", line("SWAP_B1")),
            (0, 2, "b", line("SWAP_B0")),
            (1, 2, "a", line("SWAP_A1")),
        ]
    ]


def test_swapped_same_shape_pair_ends_an_async_run_before_the_second_all_reduce(tmp_path: Path) -> None:
    job = run_job("swap_same.py", tmp_path, trace=ASYNC)
    assert job.returncodes == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr
    assert f"collcheck: rank 1: {_swap_text()}" in job.ranks[1].stderr  # all four call sites
    # Found by the first-seen check of #2, before it was issued: no rank printed a (wrong) result.
    assert all("a=" not in rank.stdout for rank in job.ranks)
    analysis = analyze(load_dir(str(job.trace_dir)))
    assert _swap_found(analysis) == _swap_uses()
    assert analysis.diverged and analysis.exit_code() == 1


def test_a_recorded_swapped_pair_fails_the_analysis_and_flight_recorder_agrees(tmp_path: Path) -> None:
    fr_dir = tmp_path / "fr"
    fr_dir.mkdir()
    job = run_job(
        "swap_same.py",
        tmp_path,
        trace=RECORD,
        extra_env={"FR_DIR": str(fr_dir), "TORCH_FR_BUFFER_SIZE": "64"},
    )
    assert job.returncodes == [0, 0], job.stderr  # record mode: the job "succeeds" with wrong sums
    analysis = analyze(load_dir(str(job.trace_dir)))  # the operands came through the native kernel
    assert _swap_found(analysis) == _swap_uses()
    assert [(d.kind, d.seq) for d in analysis.divergences] == [("callsite", 1)]
    assert analysis.exit_code() == 1
    # The call-site divergence from PyTorch's own Flight Recorder dumps, using their stack frames
    # (they carry no operands: a warning there).
    recorded = analyze(load_dir(str(fr_dir)))
    assert {s.source for s in recorded.summaries} == {"flight-recorder"}
    warning = recorded.divergences[0]
    assert (warning.kind, warning.seq) == ("callsite", 1)
    a0, b1 = line_of("swap_same.py", "SWAP_A0"), line_of("swap_same.py", "SWAP_B1")
    assert {side.site.rsplit(":", 1)[1] for side in warning.sides} == {str(a0), str(b1)}


def test_the_barrier_trick_and_one_operand_on_two_lines_stay_warnings(tmp_path: Path) -> None:
    job = run_job("barrier_trick.py", tmp_path, trace=ASYNC)
    assert job.returncodes == [0, 0], job.stderr
    assert [rank.stdout.strip() for rank in job.ranks] == ["rank 0 x=9.0", "rank 1 x=9.0"]
    trick0, trick1 = line_of("barrier_trick.py", "TRICK_0"), line_of("barrier_trick.py", "TRICK_1")
    assert f"call-site divergence: rank 0 barrier() at barrier_trick.py:{trick0} vs rank 1 barrier() at " in (
        job.ranks[1].stderr
    )
    assert f"barrier_trick.py:{trick1}" in job.ranks[1].stderr and "swapped collectives" not in job.stderr
    analysis = analyze(load_dir(str(job.trace_dir)))
    assert not analysis.swaps and not analysis.diverged and analysis.warnings
    assert analysis.exit_code() == 0


def test_swapped_same_shape_pair_is_an_error_in_strict_mode(tmp_path: Path) -> None:
    job = run_job("swap_same.py", tmp_path, trace=STRICT)
    assert job.returncodes == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr
    assert "call-site divergence (strict)" in job.stderr
    # Caught before the first all_reduce ran: no rank printed a (wrong) result.
    assert all("a=" not in rank.stdout for rank in job.ranks)


@pytest.mark.parametrize("mode", [STRICT, ASYNC], ids=["strict", "async"])
def test_swapped_different_shapes_are_reported_before_gloo_aborts(tmp_path: Path, mode: TraceConfig) -> None:
    # Gloo aborts a process within milliseconds of a size mismatch, faster than a background
    # checker: async mode agrees on the first collective of each call site before issuing it,
    # as strict mode does for every collective.
    job = run_job("swap_diff.py", tmp_path, trace=mode)
    diff0, diff1 = line_of("swap_diff.py", "DIFF_0"), line_of("swap_diff.py", "DIFF_1")
    assert job.returncodes == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr
    assert (
        f"collective mismatch: rank 0 all_reduce(float32[1024]) at swap_diff.py:{diff0} vs rank 1 "
        f"all_reduce(float32[4096]) at swap_diff.py:{diff1} (group 0, #2)"
    ) in job.stderr
    assert "Received data size doesn't match" not in job.stderr  # gloo never saw the mismatch
    # The streamed traces name both sides too (what `collcheck run` prints at the end).
    mismatch = analyze(load_dir(str(job.trace_dir))).mismatches[0]
    assert mismatch.seq == 2
    assert {side.describe for side in mismatch.sides} == {
        "all_reduce(float32[1024])",
        "all_reduce(float32[4096])",
    }


def test_a_steady_loop_with_changing_shapes_runs_unchanged_in_async_mode(tmp_path: Path) -> None:
    # Only the first collective of each call site is agreed before it is issued: the loop's
    # changing shapes do not make it new again, and its results are unchanged.
    job = run_job("steady_loop.py", tmp_path, trace=ASYNC)
    assert job.returncodes == [0, 0], job.stderr
    total = float(sum(3 * (1 + step % 7) for step in range(300)))
    assert [rank.stdout.strip() for rank in job.ranks] == [f"rank {r} total {total}" for r in (0, 1)]
    assert "collcheck:" not in job.stderr
    analysis = analyze(load_dir(str(job.trace_dir)))
    assert not analysis.diverged and not analysis.warnings
    assert [s.collectives for s in analysis.summaries] == [304, 304]


@pytest.mark.parametrize("mode", [ASYNC, STRICT], ids=["async", "strict"])
def test_matching_sends_and_recvs_stay_quiet_with_correct_results(tmp_path: Path, mode: TraceConfig) -> None:
    # Blocking with a tag, then irecv-before-isend and batch_isend_irecv on both ranks: strict
    # mode's recvs, each waiting for its send's fingerprint, must give way instead of hanging.
    job = run_job("p2p_ok.py", tmp_path, trace=mode)
    assert job.returncodes == [0, 0], job.stderr
    results = [json.loads(rank.stdout.split("RESULT ", 1)[1]) for rank in job.ranks]
    assert results[0] == {
        "back": [0, 10, 20],
        **{f"irecv{step}": [10.0 + step] * 5 for step in range(3)},
        "batch": [1.5, 1.5],
    }
    assert results[1] == {
        "first": [0.0, 1.0, 2.0, 3.0],
        **{f"irecv{step}": [float(step)] * 5 for step in range(3)},
        "batch": [0.5, 0.5],
    }
    assert "collcheck:" not in job.stderr
    analysis = analyze(load_dir(str(job.trace_dir)))
    assert not analysis.diverged and not analysis.p2p
    events = {e.site.line: e for e in analysis.events[0] + analysis.events[1]}
    assert events[line_of("p2p_ok.py", "SEND_TAGGED")].describe == "send(float32[4], peer=1, tag=7)"
    assert events[line_of("p2p_ok.py", "RECV_TAGGED")].describe == "recv(float32[4], peer=0, tag=7)"
    # gloo's send/recv Works have no future: their completion is seen when wait() returns.
    assert all(e.t_end is not None for rank in (0, 1) for e in analysis.events[rank])


@pytest.mark.parametrize("mode", [STRICT, ASYNC], ids=["strict", "async"])
def test_a_send_received_into_a_bigger_buffer_is_a_p2p_mismatch(tmp_path: Path, mode: TraceConfig) -> None:
    job = run_job("p2p_bad.py", tmp_path, trace=mode)
    send, recv = line_of("p2p_bad.py", "SEND_4"), line_of("p2p_bad.py", "RECV_8")
    assert job.returncodes == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr
    text = (
        f"point-to-point mismatch: rank 0 send(float32[4], peer=1) at p2p_bad.py:{send} vs rank 1 "
        f"recv(float32[8], peer=0) at p2p_bad.py:{recv} (group 0, send #1 0->1)"
    )
    assert f"collcheck: rank 1: {text}" in job.ranks[1].stderr
    if mode is STRICT:  # caught before the recv was issued: gloo never filled half the buffer
        assert "received" not in job.ranks[1].stdout
    (finding, *_) = analyze(load_dir(str(job.trace_dir))).p2p
    assert (finding.kind, finding.where) == ("mismatch", "group 0, send #1 0->1")


@pytest.mark.parametrize("mode", [ASYNC, STRICT, RECORD], ids=["async", "strict", "record"])
def test_a_recv_whose_send_never_comes_is_reported_as_a_stall(tmp_path: Path, mode: TraceConfig) -> None:
    job = run_job("p2p_stall.py", tmp_path, trace=mode, extra_env={"PG_TIMEOUT": "120"})
    assert job.returncodes == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr
    assert job.seconds < 30  # the process-group timeout is 120 s; the tracer's is 3 s
    recv, first = line_of("p2p_stall.py", "NO_SEND"), line_of("p2p_stall.py", "FIRST")
    report = job.ranks[1].stderr
    assert (
        f"in recv(float32[4], peer=0) at p2p_stall.py:{recv} (group 0, send #1 0->1)\n"
        "  matching send not issued by: rank 0\n"
        f"  rank 0: last all_reduce(float32[4]) at p2p_stall.py:{first} (group 0, #1), completed\n"
    ) in report
    assert report.count("stall: rank 1 has waited") == 1


def test_barrier_only_on_rank_0_is_reported_as_a_stall_long_before_the_pg_timeout(tmp_path: Path) -> None:
    job = run_job("barrier_rank0.py", tmp_path, trace=ASYNC, extra_env={"PG_TIMEOUT": "120"})
    barrier = line_of("barrier_rank0.py", "ONLY_RANK0")
    assert job.returncodes == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr
    assert job.seconds < 30  # the process-group timeout is 120 s; the tracer's is 3 s
    report = job.ranks[0].stderr
    assert "rank 0 has waited" in report and f"in barrier() at barrier_rank0.py:{barrier}" in report
    assert "not issued by: rank 1" in report
    assert (
        f"rank 1: last all_reduce(float32[4]) at barrier_rank0.py:{line_of('barrier_rank0.py', 'FIRST')}"
        in report
    )


def test_every_way_of_creating_groups_is_recorded_with_its_call_site(tmp_path: Path) -> None:
    job = run_job("groups_ok.py", tmp_path, trace=ASYNC)
    assert job.returncodes == [0, 0], job.stderr
    assert [rank.stdout.strip() for rank in job.ranks] == ["rank 0 x=4.0", "rank 1 x=4.0"]
    assert "collcheck:" not in job.stderr
    analysis = analyze(load_dir(str(job.trace_dir)))
    assert not analysis.diverged and not analysis.warnings
    line = functools.partial(line_of, "groups_ok.py")
    created = [(e.describe, e.site.line) for e in analysis.events[1] if e.group == "0:create"]
    assert created == [
        ("new_group(ranks=[0, 1])", line("NEW_GROUP")),
        ("new_subgroups(group_size=1)", line("NEW_SUBGROUPS")),
        ("new_subgroups_by_enumeration(ranks_per_subgroup_list=[[0], [1]])", line("ENUMERATION")),
        ("new_group(ranks=[0])", line("MESH")),  # init_device_mesh's own new_group calls
        ("new_group(ranks=[1])", line("MESH")),
    ]
    assert all(e.t_end is not None for e in analysis.events[1])


def test_mismatched_group_creation_on_4_ranks_is_reported_within_the_timeout(tmp_path: Path) -> None:
    # Ranks 0 and 1 create a group lazily that ranks 2 and 3 never create: without collcheck the
    # ranks hang or fail inside group creation, which no collective hook sees.
    job = run_job("groups_mismatch.py", tmp_path, nranks=4, trace=ASYNC, extra_env={"PG_TIMEOUT": "120"})
    assert job.returncodes == [ABORT_EXIT_CODE] * 4, job.stderr
    assert job.seconds < 30  # the process-group timeout is 120 s; the tracer's is 3 s
    lazy, evens = line_of("groups_mismatch.py", "LAZY"), line_of("groups_mismatch.py", "EVENS")
    # Ranks 2 and 3 both create the evens group first: which of them the report names depends on
    # whose record the checking rank read first (a loaded machine gave rank 3).
    reports = [
        f"group creation mismatch: rank 0 new_group(ranks=[0, 1]) at groups_mismatch.py:{lazy} vs rank "
        f"{other} new_group(ranks=[0, 2]) at groups_mismatch.py:{evens} (group 0, group creation #1)"
        for other in (2, 3)
    ]
    assert any(report in job.ranks[2].stderr for report in reports), job.ranks[2].stderr
    analysis = analyze(load_dir(str(job.trace_dir)))
    (divergence,) = analysis.mismatches
    assert (divergence.group, divergence.seq) == ("0:create", 1)
    assert {side.site.rsplit(":", 1)[1] for side in divergence.sides} == {str(lazy), str(evens)}
    assert analysis.exit_code() == 1


@pytest.mark.parametrize("mode", [RECORD, ASYNC], ids=["record", "async"])
def test_a_rank_waiting_inside_group_creation_is_reported_as_a_stall(
    tmp_path: Path, mode: TraceConfig
) -> None:
    job = run_job("groups_stall.py", tmp_path, nranks=4, trace=mode, extra_env={"PG_TIMEOUT": "120"})
    assert job.returncodes == [ABORT_EXIT_CODE] * 4, job.stderr
    assert job.seconds < 40
    create = line_of("groups_stall.py", "CREATE")
    assert (
        f"in new_group(ranks=[0, 1, 2, 3]) at groups_stall.py:{create} (group 0, group creation #1)\n"
        "  not issued by: rank 3\n"
    ) in job.stderr
    first = line_of("groups_stall.py", "FIRST")
    assert (
        f"rank 3: last all_reduce(float32[4]) at groups_stall.py:{first} (group 0, #1), completed"
        in job.stderr
    )


@pytest.mark.parametrize("mode", [RECORD, ASYNC], ids=["record", "async"])
def test_a_stall_report_names_a_stopped_ranks_real_last_collective(tmp_path: Path, mode: TraceConfig) -> None:
    # Rank 1 stops (SIGSTOP) right after 201 quick collectives: the position it last published, a
    # few times a second, is dozens behind; its trace is not.
    job = run_job("stopped.py", tmp_path, trace=mode, extra_env={"PG_TIMEOUT": "120"})
    assert job.returncodes == [ABORT_EXIT_CODE, -9], job.stderr
    last, blocked = line_of("stopped.py", "LAST_OF_RANK1"), line_of("stopped.py", "BLOCKED")
    report = job.ranks[0].stderr
    assert (
        f"in all_reduce(float32[8]) at stopped.py:{blocked} (group 0, #202)\n  not issued by: rank 1\n"
        in report
    )
    last_of_rank1 = f"all_reduce(float32[2]) at stopped.py:{last} (group 0, #201)"
    if mode is ASYNC and f"  rank 1: blocked in {last_of_rank1} for " in report:
        # In async mode rank 1 can be stopped after #201 returned but before its completion was
        # recorded, so its trace shows #201 started and not finished. The report still names its
        # real last collective, not the position it last published (seen once in about ten runs).
        return
    assert f"  rank 1: last {last_of_rank1}, " in report


def test_cross_group_wait_cycle_is_detected(tmp_path: Path) -> None:
    job = run_job("cycle.py", tmp_path, trace=RECORD)
    assert job.returncodes == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr
    a0, b1 = line_of("cycle.py", "CYCLE_A0"), line_of("cycle.py", "CYCLE_B1")
    assert "wait cycle:" in job.stderr
    cycle_line = next(line for line in job.stderr.splitlines() if "wait cycle:" in line)
    assert f"cycle.py:{a0}" in cycle_line and f"cycle.py:{b1}" in cycle_line


def run_ddp_job(folder: Path, mode: TraceConfig | None, output: Path) -> Job:
    return run_job_past_teardown_aborts("ddp_train.py", folder, trace=mode, args=(str(output),))


@pytest.mark.parametrize("mode", [ASYNC, RECORD, RECORD_PYTHON], ids=["async", "record", "record-python"])
def test_ddp_results_are_bit_identical_and_gradient_all_reduces_are_recorded(
    tmp_path: Path, mode: TraceConfig
) -> None:
    plain, traced = tmp_path / "plain.json", tmp_path / "traced.json"
    first = run_ddp_job(tmp_path / "a", None, plain)
    second = run_ddp_job(tmp_path / "b", mode, traced)
    assert first.returncodes == [0, 0] and second.returncodes == [0, 0], second.stderr
    assert plain.read_text() == traced.read_text()  # float.hex of every parameter
    events = analyze(load_dir(str(second.trace_dir))).events[0]
    backward = line_of("ddp_train.py", "BACKWARD")
    gradients = [e for e in events if e.op == "all_reduce" and e.site.line == backward]
    assert len(gradients) == 5  # one bucket per step, attributed to loss.backward()
    # DDP waits for its buckets in C++: record mode sees them complete by polling their futures.
    assert all(e.t_end is not None for e in events)


def test_dtensor_and_functional_collectives_are_recorded(tmp_path: Path) -> None:
    job = run_job("functional.py", tmp_path, trace=ASYNC)
    assert job.returncodes == [0, 0], job.stderr
    events = analyze(load_dir(str(job.trace_dir))).events[1]
    by_line = {e.site.line: e.op for e in events}
    assert by_line[line_of("functional.py", "DTENSOR_GATHER")].startswith("all_gather_into_tensor")
    assert by_line[line_of("functional.py", "FUNCTIONAL_REDUCE")] == "all_reduce"


def test_sigkilled_rank_leaves_an_intact_trace(tmp_path: Path) -> None:
    job = run_job("sigkill.py", tmp_path, trace=RECORD)
    assert job.returncodes[1] == -9
    analysis = analyze(load_dir(str(job.trace_dir)))
    rank0, rank1 = analysis.summaries
    assert rank1.last is not None and rank1.last.site.endswith(
        f"sigkill.py:{line_of('sigkill.py', 'LAST_OF_RANK1')}"
    )
    assert rank1.exited is False
    assert rank0.last is not None and rank0.last.site.endswith(f"sigkill.py:{line_of('sigkill.py', 'THIRD')}")
    assert analysis.missing[0].ranks == (1,) and analysis.missing[0].seq == 3


def test_unreachable_store_degrades_to_recording_only(tmp_path: Path) -> None:
    from conftest import free_port

    unreachable = TraceConfig(verify=True, timeout_s=3.0, store_address=f"127.0.0.1:{free_port()}")
    job = run_job("steady.py", tmp_path, trace=unreachable)
    assert job.returncodes == [0, 0], job.stderr
    assert "store unreachable" in job.stderr and "recording only" in job.stderr
    analysis = analyze(load_dir(str(job.trace_dir)))
    assert not analysis.diverged and [s.collectives for s in analysis.summaries] == [5, 5]


@pytest.mark.parametrize("mode", [STRICT, ASYNC], ids=["strict", "async"])
def test_an_abort_reaches_every_rank_when_the_store_host_exits_first(
    tmp_path: Path, mode: TraceConfig
) -> None:
    # Rank 0 hosts the store and exits the instant rank 2's abort appears; rank 1, blocked in
    # its all_reduce, learned it through its waiter's blocking wait (woken before the abort key
    # is even set), not from a poll that would find the store gone.
    job = run_job("host_exits_first.py", tmp_path, nranks=3, trace=mode)
    assert job.returncodes[1:] == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr
    assert job.returncodes[0] in (3, ABORT_EXIT_CODE), job.stderr
    assert "collective mismatch" in job.ranks[2].stderr
    assert "collcheck: rank 1: stopping: " in job.ranks[1].stderr, job.ranks[1].stderr
    assert "degraded" not in job.ranks[1].stderr and all("finished" not in r.stdout for r in job.ranks)


@pytest.mark.slow
def test_a_16_rank_strict_job_ends_cleanly_without_a_false_stall(tmp_path: Path) -> None:
    # Every follower of the world group blocks in the store's wait for rank 0's record before
    # each of 102 collectives, on two loaded cores: a slow leader is not a stall (60 s timeout).
    strict = TraceConfig(verify=True, strict=True, timeout_s=60.0)
    job = run_job_past_teardown_aborts("strict_many.py", tmp_path, nranks=16, trace=strict, timeout=900.0)
    assert job.returncodes == [0] * 16, job.stderr[-4000:]
    for rank in job.ranks:
        total, expected = rank.stdout.split()[3], rank.stdout.split()[5]
        assert float(total) == float(expected)
    assert "collcheck:" not in job.stderr, job.stderr[-4000:]  # no stall, degraded or behind line
