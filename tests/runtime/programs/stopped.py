"""Rank 1 stops itself (SIGSTOP) right after a burst of collectives; rank 0 waits for it."""

import os
import signal
import subprocess

import torch
import torch.distributed as dist
from common import join

rank = join()
x = torch.ones(4)
for _ in range(200):
    dist.all_reduce(x)  # LOOP
dist.all_reduce(torch.ones(2))  # LAST_OF_RANK1
if rank == 1:  # a helper ends the stopped rank once the test has its report
    subprocess.Popen(["sh", "-c", f"sleep 12; kill -KILL {os.getpid()}"])
    os.kill(os.getpid(), signal.SIGSTOP)
dist.all_reduce(torch.ones(8))  # BLOCKED
dist.destroy_process_group()
