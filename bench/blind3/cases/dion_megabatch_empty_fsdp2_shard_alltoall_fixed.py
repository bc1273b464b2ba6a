"""
Source: https://github.com/microsoft/dion/pull/74
Project: microsoft/dion (Dion2 / NorMuon optimizers, megabatch orthogonalization under FSDP2)
Reported: 2026-05
Backend: NCCL
Hang: With FSDP2 contiguous chunking some ranks hold empty (0, D) shards while others hold (3, D); the
all_to_all chunks were sized from the local shard, so per-pair sizes differed and the all_to_all deadlocked.
Fix: pad every rank's shard to the same padded_local_size = ceil(global_dim / world_size) (rank-consistent,
computed from the global DTensor shape as in PR #75) before the all_to_all, and narrow the padding off after
the reverse all_to_all. All ranks now exchange identically shaped chunks.
"""
import math
from typing import List

import torch
import torch.distributed as dist
import torch.nn.functional as F


def _pad_to(t: torch.Tensor, size: int, dim: int) -> torch.Tensor:
    missing = size - t.size(dim)
    if missing == 0:
        return t
    pad = [0, 0] * (t.dim() - 1 - (dim % t.dim())) + [0, missing]
    return F.pad(t, pad)


def megabatch_orthogonalize_async(
    U_work: List[torch.Tensor],
    process_group: dist.ProcessGroup,
    comm_dim: int,
    global_comm_dim_size: int,
    orthogonalize,
):
    world_size = dist.get_world_size(process_group)
    per_rank = len(U_work) // world_size
    local_size = U_work[0].size(comm_dim)
    padded_local_size = math.ceil(global_comm_dim_size / world_size)  # identical on every rank
    padded = [_pad_to(u, padded_local_size, comm_dim) for u in U_work]
    input_chunks = [
        torch.stack(padded[r * per_rank:(r + 1) * per_rank]) for r in range(world_size)
    ]
    output_chunks = [torch.empty_like(input_chunks[0]) for _ in range(world_size)]
    dist.all_to_all(output_chunks, input_chunks, group=process_group)
    full = torch.cat(output_chunks, dim=comm_dim + 1)
    ortho = orthogonalize(full)
    back_in = list(ortho.split(padded_local_size, dim=comm_dim + 1))
    back_out = [torch.empty_like(input_chunks[0]) for _ in range(world_size)]
    dist.all_to_all(back_out, back_in, group=process_group)
    result = [c for chunk in back_out for c in chunk.unbind(0)]
    return [r.narrow(comm_dim, 0, local_size) for r in result]
