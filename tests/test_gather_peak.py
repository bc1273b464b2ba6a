"""The all-gather peak model (collcheck/memory/plan.py `peak_bytes`, what `collcheck estimate`
reports) against real gloo all-gathers.

Each rank runs in its own process (this file, run as a script) on 127.0.0.1. A rank fills an
`s`-byte shard, resets the kernel's peak-RSS mark (`/proc/self/clear_refs` = 5), runs one gather and
reads the peak back (`VmHWM`). glibc is told to `mmap` every large block
(`MALLOC_MMAP_THRESHOLD_`), so freed buffers leave RSS and each measurement starts clean.

Measured on torch 2.13 / gloo: both `all_gather` (list) and `all_gather_into_tensor` peak at
`2 N s` above the shard, i.e. output plus a flat temporary of the same size. The model says
`(2N + 1) s` with the shard; the test allows 3 % of the modelled peak (page-granular RSS and
gloo's own small buffers are the slack).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from collcheck.memory import formulas as f
from collcheck.memory.formulas import CacheLayout
from collcheck.memory.model_shape import ModelShape
from collcheck.memory.plan import GatherPlan, peak_bytes

MIB = 1 << 20
TOLERANCE = 0.03
TIMEOUT_S = 60  # per world; a hung gather fails the test instead of hanging it


def one_gather_peak(shard_bytes: int, world: int, plan: GatherPlan) -> int:
    """The estimator's peak for a cache whose shard on each of `world` ranks is `shard_bytes`,
    gathered in one piece: one layer, one KV head per rank, 128 fp16 elements for K and for V
    (512 bytes a token), so `peak_bytes` is the whole model of one all-gather."""
    model = ModelShape("one-gather", layers=1, attention_heads=world, kv_heads=world, head_dim=128)
    layout = CacheLayout(model=model, tp=world, dtype="fp16")
    tokens, rest = divmod(shard_bytes, f.local_per_token(layout))
    assert rest == 0 and f.local_bytes(tokens, layout) == shard_bytes
    return peak_bytes(tokens, layout, plan)


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def _measure(form: str, shard_bytes: int, world: int) -> int:
    import torch
    import torch.distributed as dist

    shard = torch.full((shard_bytes // 2,), float(dist.get_rank()), dtype=torch.float16)
    dist.barrier()
    Path("/proc/self/clear_refs").write_text("5")  # the peak-RSS mark restarts from here
    baseline = _status("VmRSS:")
    if form == "tensor":
        output = torch.empty(world * shard.numel(), dtype=shard.dtype)
        dist.all_gather_into_tensor(output, shard)
        assert output[-1].item() == world - 1
    else:
        outputs = [torch.empty_like(shard) for _ in range(world)]
        dist.all_gather(outputs, shard)
        assert outputs[-1][0].item() == world - 1
    peak = _status("VmHWM:") - baseline
    dist.barrier()
    return peak


def _rank_main(rank: int, world: int, port: int, shard_mib: int) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    warnings.simplefilter("ignore")  # all_gather_into_tensor's deprecation notice on stderr
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=TIMEOUT_S),
    )
    small = torch.ones(1024, dtype=torch.float16)  # the first collectives set up gloo's connections
    dist.all_gather_into_tensor(torch.empty(1024 * world, dtype=torch.float16), small)
    dist.all_gather([torch.empty_like(small) for _ in range(world)], small)
    result = {form: _measure(form, shard_mib * MIB, world) for form in ("tensor", "list")}
    dist.destroy_process_group()
    print(json.dumps(result), flush=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run_world(world: int, shard_mib: int) -> list[dict[str, int]]:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    port = _free_port()
    ranks = [
        subprocess.Popen(
            [sys.executable, __file__, str(rank), str(world), str(port), str(shard_mib)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for rank in range(world)
    ]
    results = []
    try:
        for process in ranks:
            out, err = process.communicate(timeout=TIMEOUT_S)
            assert process.returncode == 0, err[-2000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


@pytest.mark.multirank
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc peak-RSS reset")
@pytest.mark.parametrize(("world", "shard_mib"), [(2, 16), (3, 16)])
def test_gloo_all_gather_peak_matches_the_model(world: int, shard_mib: int) -> None:
    pytest.importorskip("torch.distributed")
    shard = shard_mib * MIB
    for rank, measured in enumerate(_run_world(world, shard_mib)):
        for form in ("tensor", "list"):
            modelled = one_gather_peak(shard, world, GatherPlan(form=form, backend="gloo"))
            assert modelled == (2 * world + 1) * shard
            actual = measured[form] + shard  # the shard was resident before the mark was reset
            assert abs(actual - modelled) <= TOLERANCE * modelled, (rank, form, actual, modelled)


def test_nccl_tensor_form_has_no_temporary() -> None:
    # NCCL writes straight into the preallocated output: (N + 1) s, as the seed's warning assumes;
    # the list form and gloo add a flat temporary of N s: (2N + 1) s.
    shard = 16 * MIB
    assert one_gather_peak(shard, 8, GatherPlan(form="tensor", backend="nccl")) == 9 * shard
    assert one_gather_peak(shard, 8, GatherPlan(form="list", backend="nccl")) == 17 * shard
    assert one_gather_peak(shard, 4, GatherPlan(form="tensor", backend="gloo")) == 9 * shard
    assert one_gather_peak(shard, 4, GatherPlan(form="list", backend="gloo")) == 9 * shard


if __name__ == "__main__":
    _rank_main(*(int(arg) for arg in sys.argv[1:5]))
