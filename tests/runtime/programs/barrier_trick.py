"""Legitimate call-site differences: the barrier trick, and one tensor reduced from two lines."""

import torch
import torch.distributed as dist
from common import join

rank = join()
x = torch.full((4,), float(rank + 1))
for _step in range(2):
    if rank == 0:
        x.add_(1.0)  # rank 0 prepares something first
        dist.barrier()  # TRICK_0
        dist.all_reduce(x)  # SAME_0
    else:
        dist.barrier()  # TRICK_1
        dist.all_reduce(x)  # SAME_1
print(f"rank {rank} x={x[0].item()}", flush=True)
dist.destroy_process_group()
