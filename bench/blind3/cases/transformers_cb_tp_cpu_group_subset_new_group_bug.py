"""
Source: https://github.com/huggingface/transformers/pull/48302
Project: huggingface/transformers (continuous batching, tensor-parallel manager)
Reported: 2026-08 (part of transformers#48294)
Backend: gloo (CPU control group next to the NCCL TP group)
Hang: DistributedHelper created the TP CPU (gloo) group with a plain dist.new_group(tp_ranks). Plain new_group is a
collective over the whole default group: every rank must call it for every group, with the same rank list, in the
same order. With one CB manager per node and data parallelism across nodes (16 ranks, two 8-rank TP groups),
node 0's ranks call new_group([0..7]) while node 1's ranks call new_group([8..15]) as the "same" (first) group
creation; the two concurrent per-subset calls deadlock in gloo connectFullMesh until the connect timeout.
Fix: when the TP group is a strict subset of the world, pass use_local_synchronization=True so only the member
ranks take part in creating it; the world-spanning case keeps the plain call.
"""
import torch.distributed as dist


class DistributedHelper:
    def __init__(self, tp_size: int, cpu_group_timeout=None):
        self.world_size = dist.get_world_size()
        self.rank = dist.get_rank()
        node = self.rank // tp_size
        # ranks of this node's TP group; differs between nodes when world_size > tp_size
        self.tp_ranks = list(range(node * tp_size, (node + 1) * tp_size))
        self.cpu_group = dist.new_group(  # DIVERGES  (ranks of different nodes pass different rank lists to the same world-collective call)
            self.tp_ranks, backend="gloo", timeout=cpu_group_timeout
        )

    def sync_payload_size(self, size_tensor):
        dist.all_reduce(size_tensor, op=dist.ReduceOp.MAX, group=self.cpu_group)
        return size_tensor
