"""A training-like loop: the same call sites every step, with shapes that change from step to step."""

import torch
import torch.distributed as dist
from common import join

rank = join()
total = 0.0
for step in range(300):
    grads = torch.ones(1 + step % 7) * (rank + 1)
    dist.all_reduce(grads)  # LOOP_REDUCE
    total += grads.sum().item()
    if step % 100 == 0:
        dist.broadcast(torch.full((3,), float(step)), src=0)  # LOOP_BROADCAST
dist.barrier()
print(f"rank {rank} total {total}", flush=True)
dist.destroy_process_group()
