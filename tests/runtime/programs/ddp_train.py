"""A few DDP steps on gloo; rank 0 writes the final parameters as exact float hex strings."""

import json
import sys

import torch
import torch.distributed as dist
from common import join
from torch.nn.parallel import DistributedDataParallel

rank = join()
torch.manual_seed(0)
model = DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(100 + rank)
for _ in range(5):
    batch = torch.randn(8, 16, generator=generator)
    loss = model(batch).square().mean()
    optimizer.zero_grad()
    loss.backward()  # BACKWARD
    optimizer.step()
if rank == 0:
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).double().tolist()
    with open(sys.argv[1], "w") as handle:
        json.dump([value.hex() for value in flat], handle)
# Release DDP's reducer before the process group: torch 2.13 on gloo sometimes aborts at exit
# ("terminate called without an active exception") when the reducer outlives its group.
del model, optimizer
dist.barrier()
dist.destroy_process_group()
