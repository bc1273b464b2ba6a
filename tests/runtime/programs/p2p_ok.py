"""Matching point-to-point exchanges: blocking with a tag, non-blocking and batched with every rank
posting its receive before its send (legal: the sends are issued without waiting)."""

import json

import torch
import torch.distributed as dist
from common import join

rank = join()
peer = 1 - rank
got = {}
if rank == 0:
    dist.send(torch.arange(4, dtype=torch.float32), 1, tag=7)  # SEND_TAGGED
    back = torch.zeros(3, dtype=torch.int64)
    dist.recv(back, 1)
    got["back"] = back.tolist()
else:
    first = torch.zeros(4)
    dist.recv(first, 0, tag=7)  # RECV_TAGGED
    dist.send(first[:3].long() * 10, 0)
    got["first"] = first.tolist()
dist.all_reduce(torch.ones(2))
for step in range(3):
    inbox = torch.zeros(5)
    receive = dist.irecv(inbox, peer)  # IRECV_FIRST
    send = dist.isend(torch.full((5,), float(10 * rank + step)), peer)
    receive.wait()
    send.wait()
    got[f"irecv{step}"] = inbox.tolist()
ring = torch.zeros(2, dtype=torch.float64)
ops = [
    dist.P2POp(dist.irecv, ring, peer),
    dist.P2POp(dist.isend, torch.full((2,), rank + 0.5, dtype=torch.float64), peer),
]
for request in dist.batch_isend_irecv(ops):
    request.wait()
got["batch"] = ring.tolist()
dist.barrier()
print("RESULT " + json.dumps(got), flush=True)
dist.destroy_process_group()
