"""Two groups used in opposite orders: rank 0 waits in A for rank 1, which waits in B for rank 0."""

import torch
import torch.distributed as dist
from common import join

rank = join()
group_a = dist.new_group([0, 1])
group_b = dist.new_group([0, 1])
x = torch.ones(8)
if rank == 0:
    dist.all_reduce(x, group=group_a)  # CYCLE_A0
    dist.all_reduce(x, group=group_b)
else:
    dist.all_reduce(x, group=group_b)  # CYCLE_B1
    dist.all_reduce(x, group=group_a)
dist.destroy_process_group()
