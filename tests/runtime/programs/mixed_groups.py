"""Two ranks: collectives on the world and on a subgroup, point-to-point pairs (blocking and
batched), all_to_all and a thread of its own, so two tracer kernels can be compared line by line."""

import threading

import torch
import torch.distributed as dist
from common import join

rank = join()
peer = 1 - rank
pair = dist.new_group([0, 1])
dist.all_reduce(torch.ones(3, 2), op=dist.ReduceOp.MIN)
dist.all_reduce(torch.ones(4, dtype=torch.bfloat16), group=pair)
if rank == 0:
    dist.send(torch.arange(5.0), dst=1)
else:
    dist.recv(torch.empty(5), src=0)
ops = [
    dist.P2POp(dist.isend, torch.full((2,), float(rank)), peer),
    dist.P2POp(dist.irecv, torch.empty(2), peer),
]
for work in dist.batch_isend_irecv(ops):
    work.wait()
dist.all_to_all_single(torch.empty(4), torch.arange(4.0) + rank)
dist.reduce(torch.ones(1, dtype=torch.int64), dst=1, group=pair)
dist.gather(torch.ones(3), [torch.empty(3), torch.empty(3)] if rank == 0 else None, dst=0)
dist.scatter(torch.empty(2), [torch.ones(2), torch.ones(2)] if rank == 1 else None, src=1)
dist.all_to_all([torch.empty(1), torch.empty(1)], [torch.ones(1), torch.ones(1)])
dist.reduce_scatter(torch.empty(2), [torch.ones(2), torch.ones(2)])


def in_a_thread() -> None:
    dist.broadcast(torch.zeros(2, dtype=torch.float16), src=0)


worker = threading.Thread(target=in_a_thread, name="side-thread")
worker.start()
worker.join()
dist.monitored_barrier()  # returns no Work: complete when it returns
dist.barrier()
dist.destroy_process_group()
