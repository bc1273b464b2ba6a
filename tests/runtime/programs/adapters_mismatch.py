"""Rank 0 all_reduces 4 elements and rank 1 8 through a PyNccl-style communicator (FAKE_VLLM)."""

import os
import sys

import torch
import torch.distributed as dist
from common import join

rank = join()
sys.path.insert(0, os.environ["FAKE_VLLM"])
from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator  # noqa: E402

comm = PyNcclCommunicator(dist.group.WORLD, device="cpu")
if rank == 0:
    comm.all_reduce(torch.ones(4))  # MISMATCH_0
else:
    comm.all_reduce(torch.ones(8))  # MISMATCH_1
dist.destroy_process_group()
