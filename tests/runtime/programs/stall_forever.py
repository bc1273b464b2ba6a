"""Rank 0 issues an all_reduce that rank 1 never joins (STALL), then both ranks hold the GIL
forever inside a C call, so no in-process watchdog can run: only `collcheck run`'s backstop can
see the hang. The rank named by IGNORE_SIGTERM ignores SIGTERM."""

import ctypes
import os
import signal
import time

import torch
import torch.distributed as dist
from common import join

rank = join()
if os.environ.get("IGNORE_SIGTERM") == str(rank):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if rank == 0:
    dist.all_reduce(torch.ones(4), async_op=True)  # STALL
time.sleep(1.0)
print(f"rank {rank} holds the GIL", flush=True)
ctypes.PyDLL(None).pause()  # a PyDLL call keeps the GIL
