"""
Source: https://github.com/microsoft/dion/pull/74
Project: microsoft/dion (Dion2 / NorMuon optimizers, megabatch orthogonalization under FSDP2)
Reported: 2026-05
Backend: NCCL
Hang: With FSDP2 contiguous chunking, a 2D weight whose sharded dim is smaller than world_size (e.g. an
(18, 2304) gate over 8 ranks) leaves ranks 6-7 with (0, 2304) shards while ranks 0-5 hold (3, 2304).
megabatch_orthogonalize_async builds the all_to_all input chunks from each rank's *local* shard size, so
the per-pair sizes that the ranks put on the wire differ ((per_rank, 3, D) vs (per_rank, 0, D)); the
all_to_all never completes and the job deadlocks after the first backward (NCCL watchdog timeout).
Fix: pad every rank's shard to one rank-consistent padded_local_size (first via an all_reduce MAX of the
local size, later computed locally as ceil(global_dim / world_size) in PR #75) before the all_to_all and
narrow the padding off afterwards.
"""
from typing import List

import torch
import torch.distributed as dist


def megabatch_orthogonalize_async(
    U_work: List[torch.Tensor],
    process_group: dist.ProcessGroup,
    comm_dim: int,
    orthogonalize,
):
    world_size = dist.get_world_size(process_group)
    per_rank = len(U_work) // world_size
    # local shard size along the FSDP2-sharded dim; 3 on ranks 0-5, 0 on ranks 6-7
    local_size = U_work[0].size(comm_dim)
    input_chunks = [
        torch.stack(U_work[r * per_rank:(r + 1) * per_rank]) for r in range(world_size)
    ]
    # peers are assumed to send chunks shaped like ours
    output_chunks = [torch.empty_like(input_chunks[0]) for _ in range(world_size)]
    dist.all_to_all(output_chunks, input_chunks, group=process_group)  # DIVERGES  (per-rank chunk sizes differ: 3 rows vs 0 rows)
    full = torch.cat(output_chunks, dim=comm_dim + 1)
    ortho = orthogonalize(full)
    back_in = list(ortho.split(local_size, dim=comm_dim + 1))
    back_out = [torch.empty_like(input_chunks[0]) for _ in range(world_size)]
    dist.all_to_all(back_out, back_in, group=process_group)  # DIVERGES  (same size mismatch on the way back)
    return [c for chunk in back_out for c in chunk.unbind(0)]
