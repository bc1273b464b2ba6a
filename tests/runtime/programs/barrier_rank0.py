"""A barrier only on rank 0 while rank 1 is busy elsewhere: a hang until the PG timeout."""

import time

import torch
import torch.distributed as dist
from common import join

rank = join()
dist.all_reduce(torch.ones(4))  # FIRST
if rank == 0:
    dist.barrier()  # ONLY_RANK0
else:
    time.sleep(120)  # e.g. evaluating, never reaching the barrier
dist.destroy_process_group()
