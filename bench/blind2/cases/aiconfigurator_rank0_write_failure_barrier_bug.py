"""
Source: https://github.com/ai-dynamo/aiconfigurator/pull/1542
Project: aiconfigurator (collector/wideep/vllm/collect_moe_a2a.py)
Reported: 2026-08
Backend: NCCL
Hang: After benchmarking, only rank 0 writes the perf rows, finalizes the perf files and writes the
sidecar. If any of those raise, rank 0 sets run_failed, skips the final barrier in `finally` and
destroys its process group; the other ranks reach the same `finally` with run_failed False and wait in
dist.barrier() for a rank that has gone, until the NCCL watchdog fires. (Found in the PR review thread.)
Fix: Broadcast rank 0's publish outcome to all ranks before the barrier so every rank takes the same
branch.
"""
import sys

import torch
import torch.distributed as dist

from collector.common import finalize_perf_files
from collector.wideep.vllm.a2a_bench import run_moe_a2a_sweep


def _write_rows(rows, path):
    with open(path, "a") as f:
        for r in rows:
            f.write(",".join(str(v) for v in r) + "\n")


def _write_sidecar(meta, path):
    with open(path + ".json", "w") as f:
        f.write(repr(meta))


def collect(args):
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    group = dist.new_group(list(range(dist.get_world_size())))
    run_failed = False
    try:
        rows, meta = run_moe_a2a_sweep(args, group=group)
        if rank == 0:
            _write_rows(rows, args.perf_file)
            finalize_perf_files(args.perf_file)
            _write_sidecar(meta, args.perf_file)
    except BaseException as error:
        run_failed = True
        print(f"[vllm moe_a2a] rank {rank} failed: {error}", file=sys.stderr)
        raise
    finally:
        if dist.is_initialized():
            if not run_failed:  # DIVERGES: rank 0's local write failure flips only rank 0
                dist.barrier(group=group)
            try:
                dist.destroy_process_group()
            except Exception as error:
                if not run_failed:
                    raise
                print(f"[vllm moe_a2a] process-group destroy after failure also failed: {error}", file=sys.stderr)
