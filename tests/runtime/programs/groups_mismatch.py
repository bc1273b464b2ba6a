"""Ranks 0 and 1 create a group lazily that ranks 2 and 3 never create: every later group is off."""

import torch
import torch.distributed as dist
from common import join

rank = join()
dist.all_reduce(torch.ones(4))  # FIRST
if rank in (0, 1):  # a module that only ranks 0 and 1 use creates its group on first use
    cache_group = dist.new_group([0, 1])  # LAZY
evens = dist.new_group([0, 2])  # EVENS
odds = dist.new_group([1, 3])
mine = evens if rank % 2 == 0 else odds
dist.all_reduce(torch.ones(4), group=mine)
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
