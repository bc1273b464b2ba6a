"""Collectives through a PyNccl-style communicator, which never reaches the c10d dispatcher.

The communicator is the stand-in vLLM package the test writes to FAKE_VLLM (same module path and
class as vLLM's, running on gloo), imported after the tracer has started. Prints the results.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from common import join

rank = join()
sys.path.insert(0, os.environ["FAKE_VLLM"])
from vllm.distributed.device_communicators.pynccl import BAD_ROOT, PyNcclCommunicator  # noqa: E402

comm = PyNcclCommunicator(dist.new_group([0, 1]), device="cpu")
results = {}
out = comm.all_reduce(torch.arange(4, dtype=torch.float32) + rank)  # PN_ALL_REDUCE
results["all_reduce"] = out.tolist()
results["same_object"] = out is comm.last_out
peak = comm.all_reduce(in_tensor=torch.tensor([float(rank), 5.0 - rank]), op=dist.ReduceOp.MAX)  # PN_MAX
results["max"] = peak.tolist()
gathered = torch.zeros(4)
comm.all_gather(gathered, torch.full((2,), float(rank)))  # PN_ALL_GATHER
results["all_gather"] = gathered.tolist()
uneven = torch.zeros(3)
comm.all_gatherv(uneven, torch.full((rank + 1,), float(rank + 1)), [1, 2])  # PN_ALL_GATHERV
results["all_gatherv"] = uneven.tolist()
scattered = torch.zeros(2)
comm.reduce_scatter(scattered, torch.arange(4, dtype=torch.float32))  # PN_REDUCE_SCATTER
results["reduce_scatter"] = scattered.tolist()
value = torch.full((3,), float(rank))
comm.broadcast(value, 1)  # PN_BROADCAST
results["broadcast"] = value.tolist()
if rank == 0:
    comm.send(torch.full((2,), 7.0), 1)  # PN_SEND
else:
    received = torch.zeros(2)
    comm.recv(received, 0)  # PN_RECV
    results["recv"] = received.tolist()
try:
    comm.broadcast(torch.zeros(1), 5)  # PN_RAISES
except ValueError as error:
    results["same_error"] = error is BAD_ROOT
comm.disabled = True
results["disabled"] = comm.all_reduce(torch.ones(1)) is None  # PN_DISABLED
print("RESULT " + json.dumps(results), flush=True)
dist.destroy_process_group()
