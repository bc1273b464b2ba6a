"""A consistent little job (used for the unreachable-store and launcher tests)."""

import torch
import torch.distributed as dist
from common import join

rank = join()
for _ in range(3):
    dist.all_reduce(torch.ones(16))
dist.broadcast(torch.ones(2), src=0)
dist.barrier()
print(f"rank {rank} ok", flush=True)
dist.destroy_process_group()
