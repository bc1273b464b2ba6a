"""A consistent job for many ranks: a loop of all_reduces, a broadcast and a barrier; each rank
prints its sums so the test can check that the results are unchanged."""

import torch
import torch.distributed as dist
from common import join

rank = join()
world = dist.get_world_size()
total = 0.0
for step in range(100):
    tensor = torch.full((256,), float(rank + step))
    dist.all_reduce(tensor)  # LOOP
    total += float(tensor[0])
dist.broadcast(torch.ones(2), src=0)
dist.barrier()
expected = sum(sum(range(step, step + world)) for step in range(100))
print(f"rank {rank} total {total} expected {expected}", flush=True)
dist.destroy_process_group()
