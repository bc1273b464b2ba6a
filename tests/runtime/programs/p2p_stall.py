"""Rank 1 waits for a send that rank 0 never makes: a hang until the process-group timeout."""

import time

import torch
import torch.distributed as dist
from common import join

rank = join()
dist.all_reduce(torch.ones(4))  # FIRST
if rank == 1:
    dist.recv(torch.zeros(4), 0)  # NO_SEND
else:
    time.sleep(120)  # e.g. evaluating; the send was forgotten
dist.destroy_process_group()
