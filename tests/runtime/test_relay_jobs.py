"""Node relays in real jobs: 4 gloo ranks as 2 simulated nodes of 2 (COLLCHECK_RANKS_PER_NODE=2),
async verify, the tracer's job-store client counted by bench/runtime_scale.py's wrapper."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from conftest import Job, line_of, run_job

pytestmark = pytest.mark.multirank

NODES_OF_2 = {"COLLCHECK_RANKS_PER_NODE": "2"}
TIMEOUT_S = 180.0


def _run(tmp_path: Path, how: str, env: dict[str, str]) -> Job:
    args = (str(tmp_path / "trace"), how)
    return run_job("relay_loop.py", tmp_path, nranks=4, args=args, extra_env=env, timeout=TIMEOUT_S)


def _chain_reads(job: Job) -> list[int]:
    """Each rank's reads of a rolling hash from the job store, during its loop."""
    results = []
    for rank in job.ranks:
        line = next(line for line in rank.stdout.splitlines() if line.startswith("RESULT "))
        results.append(int(json.loads(line[len("RESULT ") :])["chain_reads"]))
    return results


def _divergence() -> str:
    a, b = line_of("relay_loop.py", "SITE_A"), line_of("relay_loop.py", "SITE_B")
    return (
        f"call-site divergence: rank 0 all_reduce(float32[4]) at relay_loop.py:{b} vs rank 3 "
        f"all_reduce(float32[4]) at relay_loop.py:{a} (group 0, #62)"
    )


def test_a_clean_job_on_two_nodes_reads_rolling_hashes_once_per_node(tmp_path: Path) -> None:
    job = _run(tmp_path, "clean", NODES_OF_2)
    assert job.returncodes == [0, 0, 0, 0], job.stderr
    assert "collcheck:" not in job.stderr
    reads = _chain_reads(job)
    # One reader per node (its relay); the other follower of each node reads its node's store.
    # Without relays the three followers (ranks 1-3) each read rh/0 at every tick.
    assert sum(1 for count in reads if count > 0) <= 2, reads
    assert reads.count(0) >= 2, reads


def test_a_divergence_is_found_through_the_relay_with_both_call_sites(tmp_path: Path) -> None:
    job = _run(tmp_path, "diverge", NODES_OF_2)
    assert job.returncodes == [0, 0, 0, 0], job.stderr
    assert _divergence() in job.ranks[3].stderr
    reads = _chain_reads(job)
    assert sum(1 for count in reads if count > 0) <= 2, reads


def test_a_relay_that_cannot_start_is_said_and_the_job_still_compares(tmp_path: Path) -> None:
    with socket.socket() as taken:  # the relays' port is in use: neither node's relay starts
        taken.bind(("", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        job = _run(tmp_path, "diverge", dict(NODES_OF_2, COLLCHECK_RELAY_PORT=port))
    assert job.returncodes == [0, 0, 0, 0], job.stderr
    for rank in job.ranks:
        said = [line for line in rank.stderr.splitlines() if "node relay unavailable" in line]
        assert len(said) == 1 and "still comparing" in said[0], rank.stderr
    assert "address already in use" in job.ranks[0].stderr.lower()
    assert _divergence() in job.ranks[3].stderr
    reads = _chain_reads(job)
    assert all(count > 0 for count in reads[1:]), reads  # every follower reads the job store
