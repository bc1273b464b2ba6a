"""collcheck.runtime.enable() called after init_process_group on the torch_npu stand-in: the backend
object was created before the tracer, and its direct calls are recorded all the same."""

import os
import sys
from datetime import timedelta

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "npu_standin"))

import torch
import torch.distributed as dist
import torch_npu  # noqa: F401
import torch_npu.distributed as npu_dist

import collcheck.runtime

dist.init_process_group("hccl", timeout=timedelta(seconds=60))
collcheck.runtime.enable(sys.argv[1], verify=True, timeout=5.0)
out = torch.zeros(2)
npu_dist.reduce_scatter_tensor_uneven(out, torch.ones(4))  # LATE
print(f"rank {dist.get_rank()} out={out.tolist()}", flush=True)
dist.destroy_process_group()
