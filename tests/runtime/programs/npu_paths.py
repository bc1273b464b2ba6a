"""Every way torch_npu reaches HCCL past the c10d operators, on the stand-in (npu_standin/).

With the argument `swap`, the ranks issue two same-shaped reduce_scatter_tensor_uneven calls in
opposite orders instead.
"""

import json
import os
import sys
from datetime import timedelta

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "npu_standin"))

import torch
import torch.distributed as dist
import torch_npu  # noqa: F401
import torch_npu.distributed as npu_dist
from torch_npu import npu

dist.init_process_group("hccl", timeout=timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "60"))))
rank, peer = dist.get_rank(), 1 - dist.get_rank()
if sys.argv[1:] == ["swap"]:
    out = torch.zeros(2)
    a, b = torch.full((4,), 1.0 + rank), torch.full((4,), 10.0 * (rank + 1))
    if rank == 0:
        npu_dist.reduce_scatter_tensor_uneven(out, a)  # A0
        npu_dist.reduce_scatter_tensor_uneven(out, b)  # B0
    else:
        npu_dist.reduce_scatter_tensor_uneven(out, b)  # B1
        npu_dist.reduce_scatter_tensor_uneven(out, a)  # A1
    print(f"rank {rank} out={out.tolist()}", flush=True)
    dist.destroy_process_group()
    sys.exit(0)

result: dict[str, object] = {}
mine = torch.full((2,), float(rank))
gathered = [torch.zeros(2) for _ in range(2)]
dist.gather(mine, gathered if rank == 0 else None, dst=0)  # GATHER
result["gather"] = [t.tolist() for t in gathered] if rank == 0 else None
npu.set_compatible_impl(True)
compatible = [torch.zeros(2) for _ in range(2)]
dist.gather(mine + 1, compatible if rank == 0 else None, dst=0)  # GATHER_COMPAT
npu.set_compatible_impl(False)
result["gather_compat"] = [t.tolist() for t in compatible] if rank == 0 else None
objects: list[object] = [None, None]
dist.gather_object({"rank": rank}, objects if rank == 0 else None, dst=0)  # GATHER_OBJECT
result["gather_object"] = objects if rank == 0 else None
received = torch.zeros(3)
ops = [dist.P2POp(dist.isend, torch.full((3,), 5.0 + rank), peer), dist.P2POp(dist.irecv, received, peer)]
for work in dist.batch_isend_irecv(ops):  # BATCH
    work.wait()
result["batch"] = received.tolist()
scattered = torch.zeros(3 if rank == 0 else 1)
npu_dist.reduce_scatter_tensor_uneven(scattered, torch.arange(4.0), [3, 1])  # RS_UNEVEN
result["rs_uneven"] = scattered.tolist()
together = torch.zeros(4)
piece = torch.full((3 if rank == 0 else 1,), float(rank))
npu_dist.all_gather_into_tensor_uneven(together, piece, [3, 1])  # AG_UNEVEN
result["ag_uneven"] = together.tolist()
counts = [[1, 2], [3, 1]]  # rank i sends counts[i][j] elements to rank j
outgoing = torch.full((sum(counts[rank]),), float(rank))
incoming = torch.zeros(counts[0][rank] + counts[1][rank])
npu_dist.all_to_all_vc(incoming, outgoing, counts)  # A2A_VC
result["a2a_vc"] = incoming.tolist()
print("RESULT " + json.dumps(result), flush=True)
dist.destroy_process_group()
