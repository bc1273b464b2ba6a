"""Shared by the test programs: join the job the test launched (env://, gloo, short timeout)."""

import os
from datetime import timedelta

import torch.distributed as dist


def join() -> int:
    dist.init_process_group("gloo", timeout=timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "60"))))
    return dist.get_rank()
