"""
Source: https://github.com/cornstarch-org/Cornstarch/pull/76
Project: Cornstarch (multimodal distributed training; disaggregated per-modality meshes)
Reported: 2026-06
Backend: NCCL
Hang: ParallelizationPlan.materialize() builds one ModalProcessGroupMesh per modality. Building the
mesh creates a DeviceMesh, and DeviceMesh creation calls new_group, which is a collective over the
whole world: every rank must call it, in the same order, even ranks that are not members. The plan
skipped modalities whose ranks did not include the current rank before constructing the mesh, so
with disjoint modalities (vision on rank 0, language model on ranks 1-2) each rank issued a different
sequence of new_group calls and process-group creation deadlocked (intermittently, ~1 in 4 runs).
Fix: construct every modality's mesh on every rank; non-members build it as a no-op participant
(is_member False, no pipeline stage) and discard it.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh


class ModalProcessGroupMesh:
    def __init__(self, modality: str, ranks: List[int], tp_size: int, pp_size: int):
        self.modality = modality
        self.ranks = ranks
        self.is_member = dist.get_rank() in ranks
        mesh_shape = (pp_size, len(ranks) // (pp_size * tp_size), tp_size)
        import torch
        layout = torch.tensor(ranks).reshape(mesh_shape)
        # DeviceMesh.__init__ -> new_group for every mesh dimension (world-wide collective)
        self.mesh = DeviceMesh("cuda", layout, mesh_dim_names=("pp", "dp", "tp"))

    def stage_index(self) -> Optional[int]:
        if not self.is_member:
            return None
        return self.mesh.get_local_rank("pp")


@dataclass
class ModalityPlan:
    ranks: List[int]
    tp_size: int = 1
    pp_size: int = 1


@dataclass
class ParallelizationPlan:
    modality_plans: Dict[str, ModalityPlan] = field(default_factory=dict)

    def materialize(self) -> Dict[str, ModalProcessGroupMesh]:
        my_rank = dist.get_rank()
        meshes: Dict[str, ModalProcessGroupMesh] = {}
        for name, plan in self.modality_plans.items():
            # every rank builds every mesh so new_group is called identically everywhere
            mesh = ModalProcessGroupMesh(name, plan.ranks, plan.tp_size, plan.pp_size)
            if my_rank in plan.ranks:
                meshes[name] = mesh
        return meshes


def build_vlm_pipeline(world_size: int) -> Dict[str, ModalProcessGroupMesh]:
    plan = ParallelizationPlan({
        "vision": ModalityPlan(ranks=[0]),
        "language": ModalityPlan(ranks=list(range(1, world_size)), pp_size=world_size - 1),
    })
    return plan.materialize()
