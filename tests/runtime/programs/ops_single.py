"""One process (world size 1): many collective kinds, to check what the dispatcher hook records."""

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from common import join

join()
x = torch.arange(6, dtype=torch.float64)
dist.all_reduce(x, op=dist.ReduceOp.MAX)  # OP_ALL_REDUCE
dist.broadcast(x, src=0)  # OP_BROADCAST
out = torch.empty(6, dtype=torch.float64)
dist.all_gather_into_tensor(out, x)  # OP_ALL_GATHER_INTO
dist.reduce_scatter_tensor(torch.empty(6, dtype=torch.float64), x)  # OP_REDUCE_SCATTER
dist.all_gather([torch.empty(2, 3, dtype=torch.int32)], torch.ones(2, 3, dtype=torch.int32))  # OP_ALL_GATHER
dist.barrier()  # OP_BARRIER
fc.wait_tensor(fc.all_reduce(torch.ones(5), "sum", dist.group.WORLD))  # OP_FUNCTIONAL


@torch.compile(backend="eager")
def compiled(t: torch.Tensor) -> torch.Tensor:
    return fc.all_reduce(t, "sum", dist.group.WORLD) * 2


compiled(torch.ones(7))  # OP_COMPILED
dist.destroy_process_group()
