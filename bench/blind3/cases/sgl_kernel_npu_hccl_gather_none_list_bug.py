"""
Source: https://github.com/sgl-project/sgl-kernel-npu/pull/655 (issue: https://github.com/sgl-project/sgl-kernel-npu/issues/669)
Project: sgl-kernel-npu (DeepEP for Ascend, test/diagnose utilities)
Reported: 2026-08
Backend: HCCL
Hang: The diagnose step of the internode/intranode DeepEP tests gathers per-rank stats to rank 0 with
dist.gather, allocating the gather list only on the destination rank (None elsewhere). HCCL has no gather;
torch_npu emulates it with all_gather, which needs an output list on every rank. The non-destination ranks
therefore do not take part in the same all_gather as rank 0 (they fail before it with gather_list=None),
and rank 0 is left waiting in the collective. (The thread states the HCCL incompatibility and the fix; the
exact failure mode on the non-root ranks is my reading.)
Fix: Replace dist.gather with dist.all_gather so every rank allocates the buffer list and joins the same
collective; only rank 0 uses the result.
"""
import torch
import torch.distributed as dist
import torch_npu  # noqa: F401

from deep_ep import Buffer


def test_diagnose(buffer: Buffer, group: dist.ProcessGroup, rank: int, num_ranks: int, stats_list):
    for name, stats in stats_list:
        if stats is None:
            continue
        gather_list = (
            [torch.zeros_like(stats) for _ in range(group.size())]
            if rank == 0
            else None
        )
        dist.gather(stats, gather_list=gather_list, group=group, dst=0)  # DIVERGES  (HCCL: all_gather under the hood)
        if rank == 0:
            merged = torch.stack(gather_list)
            print(f"[diagnose] {name}: max={merged.max().item()} mean={merged.float().mean().item():.2f}")


def run_internode_test(local_rank: int, num_local_ranks: int):
    dist.init_process_group(backend="hccl")
    rank, num_ranks = dist.get_rank(), dist.get_world_size()
    group = dist.new_group(list(range(num_ranks)))
    buffer = Buffer(group, num_nvl_bytes=int(2e9), num_rdma_bytes=int(1e9))
    stats_list = buffer.collect_diagnose_stats()
    test_diagnose(buffer, group, rank, num_ranks, stats_list)
    dist.barrier()
    dist.destroy_process_group()
