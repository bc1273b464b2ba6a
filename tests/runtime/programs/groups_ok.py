"""Every way of creating groups, in the same order on every rank."""

import torch
import torch.distributed as dist
from common import join
from torch.distributed.device_mesh import init_device_mesh

rank = join()
pair = dist.new_group([0, 1])  # NEW_GROUP
sub, _ = dist.new_subgroups(group_size=1)  # NEW_SUBGROUPS
enum, _ = dist.new_subgroups_by_enumeration([[0], [1]])  # ENUMERATION
mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("dp", "tp"))  # MESH
x = torch.ones(4)
dist.all_reduce(x, group=pair)
dist.all_reduce(x, group=mesh.get_group("dp"))
print(f"rank {rank} x={x[0].item()}", flush=True)
dist.destroy_process_group()
