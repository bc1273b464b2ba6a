"""The library's own test script, run by path from site-packages as an installed test suite is:
`run_loop.py agree` issues one all_reduce on every rank; `run_loop.py diverge` then a broadcast on
rank 0 and a barrier on rank 1 (a hang)."""

import os
import sys
from datetime import timedelta

import torch.distributed as dist
from looplib.loop import agree, synchronize

dist.init_process_group("gloo", timeout=timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "60"))))
rank = dist.get_rank()
agree(rank)
if sys.argv[1:] == ["diverge"]:
    synchronize(rank)
dist.destroy_process_group()
