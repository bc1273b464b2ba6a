"""Differently shaped all_reduces at the same step: gloo aborts the process on a size mismatch."""

import torch
import torch.distributed as dist
from common import join

rank = join()
dist.all_reduce(torch.ones(4))
if rank == 0:
    dist.all_reduce(torch.ones(1024))  # DIFF_0
else:
    dist.all_reduce(torch.ones(4096))  # DIFF_1
dist.barrier()
dist.destroy_process_group()
