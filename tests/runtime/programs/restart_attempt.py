"""One attempt of a job that torchrun may restart: with `differ`, rank 1's all_reduce has another
shape than rank 0's (attempt 0 fails with a mismatch); without, every rank's is the same."""

import sys

import torch
import torch.distributed as dist
from common import join

rank = join()
differ = "differ" in sys.argv[1:]
dist.all_reduce(torch.ones(8 if differ and rank == 1 else 4))  # ALL_REDUCE
dist.all_reduce(torch.ones(4))
print("finished", flush=True)
dist.destroy_process_group()
