"""DTensor and functional collectives (what FSDP2 and torch.compile use), on a CPU mesh."""

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from common import join
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

rank = join()
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
sharded = distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)])
full = sharded.full_tensor()  # DTENSOR_GATHER
reduced = fc.wait_tensor(fc.all_reduce(torch.ones(3), "sum", mesh))  # FUNCTIONAL_REDUCE
assert full.shape == (8, 4) and reduced[0].item() == dist.get_world_size()
dist.destroy_process_group()
