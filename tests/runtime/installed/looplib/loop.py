"""The library's collectives: the frames a report must name when no frame is the user's."""

import torch
import torch.distributed as dist


def agree(rank: int) -> None:
    dist.all_reduce(torch.ones(2))  # LIB_ALL_REDUCE


def synchronize(rank: int) -> None:
    if rank == 0:
        dist.broadcast(torch.zeros(3, dtype=torch.int32), src=0)  # LIB_BROADCAST
    else:
        dist.barrier()  # LIB_BARRIER
