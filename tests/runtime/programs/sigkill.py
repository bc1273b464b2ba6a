"""Rank 1 dies by SIGKILL after two collectives; rank 0 goes on to a third."""

import os
import signal

import torch
import torch.distributed as dist
from common import join

rank = join()
dist.all_reduce(torch.ones(4))
dist.all_reduce(torch.ones(8))  # LAST_OF_RANK1
if rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
dist.all_reduce(torch.ones(16))  # THIRD
dist.destroy_process_group()
