"""Two same-shaped all_reduces issued in opposite orders: gloo happily returns wrong sums."""

import os

import torch
import torch.distributed as dist
from common import join

rank = join()
a = torch.full((4,), float(rank + 1))
b = torch.full((4,), 10.0 * (rank + 1))
if rank == 0:
    dist.all_reduce(a)  # SWAP_A0
    dist.all_reduce(b)  # SWAP_B0
else:
    dist.all_reduce(b)  # SWAP_B1
    dist.all_reduce(a)  # SWAP_A1
dist.barrier()
fr_dir = os.environ.get("FR_DIR")
if fr_dir:  # also dump PyTorch's Flight Recorder, to check the offline reader on real dumps
    from torch._C import _distributed_c10d as c10d

    with open(os.path.join(fr_dir, f"fr_trace_rank_{rank}"), "wb") as handle:
        handle.write(c10d._dump_fr_trace())
print(f"rank {rank} a={a[0].item()} b={b[0].item()}", flush=True)
dist.destroy_process_group()
