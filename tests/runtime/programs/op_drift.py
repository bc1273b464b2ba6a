"""One call site, used every step; from step 20 rank 1 reduces with MAX instead of SUM there. Gloo
runs it without complaint (wrong sums): only a comparison of a site already used can find it."""

import time

import torch
import torch.distributed as dist
from common import join

rank = join()
for step in range(400):
    op = dist.ReduceOp.MAX if rank == 1 and step >= 20 else dist.ReduceOp.SUM
    values = torch.ones(4)
    dist.all_reduce(values, op=op)  # DRIFT
    time.sleep(0.01)
print(f"rank {rank} finished", flush=True)
dist.destroy_process_group()
