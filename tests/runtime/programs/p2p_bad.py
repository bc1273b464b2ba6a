"""Rank 0 sends 4 floats each step and rank 1 receives into 8: gloo silently fills half the buffer."""

import time

import torch
import torch.distributed as dist
from common import join

rank = join()
dist.all_reduce(torch.ones(1))
for step in range(40):
    if rank == 0:
        dist.send(torch.ones(4), 1)  # SEND_4
    else:
        buffer = torch.zeros(8)
        dist.recv(buffer, 0)  # RECV_8
        print(f"step {step}: received {buffer.tolist()}", flush=True)
    time.sleep(0.05)
dist.destroy_process_group()
