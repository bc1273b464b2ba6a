"""Rank 3 is busy elsewhere while ranks 0-2 create a group it belongs to: they wait inside new_group."""

import time

import torch
import torch.distributed as dist
from common import join

rank = join()
dist.all_reduce(torch.ones(4))  # FIRST
if rank == 3:
    time.sleep(120)
everyone = dist.new_group([0, 1, 2, 3])  # CREATE
dist.destroy_process_group()
