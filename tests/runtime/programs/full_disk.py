"""Thirty matching all_reduces, then one whose size differs per rank (FULL_DISK_MISMATCH), unless
FULL_DISK_MATCH=1."""

import os

import torch
import torch.distributed as dist
from common import join

rank = join()
steady = torch.ones(256)
for _ in range(30):
    dist.all_reduce(steady)
wrong = torch.ones(4 if os.environ.get("FULL_DISK_MATCH") == "1" else 4 + rank)
dist.all_reduce(wrong)  # FULL_DISK_MISMATCH
print(f"rank {rank} ran the mismatched all_reduce", flush=True)
dist.destroy_process_group()
