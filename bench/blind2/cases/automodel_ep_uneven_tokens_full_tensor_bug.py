"""
Source: https://github.com/NVIDIA-NeMo/Automodel/pull/1365
Project: NVIDIA NeMo Automodel
Reported: 2026-02
Backend: NCCL
Hang: In the expert-parallel MoE path each EP rank holds a different number of tokens
(variable-length batches). The experts gather all tokens with
DTensor.from_local(x, [Shard(0)]).full_tensor(), which assumes every rank holds an
equally sized shard, so each rank posts an all_gather whose per-peer chunk size
disagrees with what the peers send and the collective deadlocks. In addition, a rank
whose local experts receive no tokens skips the expert compute entirely, so it never
joins the backward collectives that the other EP ranks issue.
Fix: all_gather the per-rank lengths first, pad to the max, all_gather, trim the padding,
and add a zero-valued gradient anchor so every rank takes part in backward collectives.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard


class MoEConfig:
    def __init__(self, n_routed_experts: int = 64, dim: int = 2048, moe_inter_dim: int = 1408):
        self.n_routed_experts = n_routed_experts
        self.dim = dim
        self.moe_inter_dim = moe_inter_dim


class GroupedExperts(nn.Module):
    def __init__(self, config: MoEConfig, ep_mesh: DeviceMesh):
        super().__init__()
        self.config = config
        self.ep_mesh = ep_mesh
        self.ep_size = ep_mesh.size()
        self.ep_rank = ep_mesh.get_local_rank()
        self.n_local_experts = config.n_routed_experts // self.ep_size
        self.gate_up = nn.Parameter(torch.empty(self.n_local_experts, config.dim, 2 * config.moe_inter_dim))
        self.down = nn.Parameter(torch.empty(self.n_local_experts, config.moe_inter_dim, config.dim))

    def _gather_tokens(self, x: torch.Tensor) -> torch.Tensor:
        # x has a different number of rows on every EP rank.
        return DTensor.from_local(x, self.ep_mesh, [Shard(0)]).full_tensor()  # DIVERGES

    def _reduce_back(self, y: torch.Tensor, num_local: int) -> torch.Tensor:
        dist.all_reduce(y, group=self.ep_mesh.get_group())
        start = self.ep_rank * num_local
        return y.narrow(0, start, num_local)

    def forward(self, x: torch.Tensor, token_mask: torch.Tensor, weights: torch.Tensor,
                indices: torch.Tensor) -> torch.Tensor:
        num_local = x.shape[0]
        global_x = self._gather_tokens(x)
        global_idx = self._gather_tokens(indices)
        global_w = self._gather_tokens(weights)

        y = torch.zeros_like(global_x)
        expert_start = self.ep_rank * self.n_local_experts
        for i in range(self.n_local_experts):
            rows, slot = torch.where(global_idx == expert_start + i)
            if rows.numel() == 0:
                continue
            h = global_x[rows] @ self.gate_up[i]
            g, u = h.chunk(2, dim=-1)
            out = (torch.nn.functional.silu(g) * u) @ self.down[i]
            y.index_add_(0, rows, out * global_w[rows, slot, None])
        return self._reduce_back(y, num_local)


class MoE(nn.Module):
    def __init__(self, config: MoEConfig, ep_mesh: DeviceMesh):
        super().__init__()
        self.gate = nn.Linear(config.dim, config.n_routed_experts, bias=False)
        self.experts = GroupedExperts(config, ep_mesh)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        scores = self.gate(x).softmax(dim=-1)
        weights, indices = scores.topk(6, dim=-1)
        return self.experts(x, padding_mask, weights, indices)
