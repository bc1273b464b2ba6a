"""
Source: https://github.com/huggingface/transformers/pull/48302
Project: huggingface/transformers (continuous batching, tensor-parallel manager)
Reported: 2026-08 (part of transformers#48294)
Backend: gloo (CPU control group next to the NCCL TP group)
Hang: plain dist.new_group(tp_ranks, backend="gloo") was called with a different rank list on each node (two
8-rank TP groups in a 16-rank job), so the world-collective group creation deadlocked in gloo connectFullMesh.
Fix: pass use_local_synchronization=True when the TP group is a strict subset of the world, so group creation is
synchronised only among the member ranks; the world-spanning case is unchanged.
"""
import torch.distributed as dist


class DistributedHelper:
    def __init__(self, tp_size: int, cpu_group_timeout=None):
        self.world_size = dist.get_world_size()
        self.rank = dist.get_rank()
        node = self.rank // tp_size
        self.tp_ranks = list(range(node * tp_size, (node + 1) * tp_size))
        is_subset = len(self.tp_ranks) < self.world_size
        if is_subset:
            self.cpu_group = dist.new_group(
                self.tp_ranks, backend="gloo", timeout=cpu_group_timeout, use_local_synchronization=True
            )
        else:
            self.cpu_group = dist.new_group(self.tp_ranks, backend="gloo", timeout=cpu_group_timeout)

    def sync_payload_size(self, size_tensor):
        dist.all_reduce(size_tensor, op=dist.ReduceOp.MAX, group=self.cpu_group)
        return size_tensor
