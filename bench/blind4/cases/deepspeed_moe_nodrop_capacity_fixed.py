"""
Source: https://github.com/deepspeedai/DeepSpeed/issues/6809
Project: DeepSpeed
Reported: 2024-12
Backend: NCCL
Hang: With drop_tokens=False the MoE gate sizes the expert buffers from a capacity computed at run time: the
largest per-expert token count, MAX-reduced over the expert-parallel group, but then clamped to the number of
tokens this rank holds. During inference the ranks carry different token counts, so the clamp gives rank 0 a
capacity of 4 and rank 1 a capacity of 3; the dispatched tensors handed to the expert all-to-all differ in shape
across ranks and the all-to-all never completes (the thread's debug output shows [4, 3, 32] vs [4, 4, 32]).
Fix: The issue has no merged fix; the obvious one (same shape as DeepSpeed PR #8155 for the drop branches) is
to keep the group-agreed capacity for the buffer shape and bound only the k passed to torch.topk by the local
token count.
"""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from deepspeed import comm as dist
from deepspeed.moe.sharded_moe import _AllToAll, _capacity, _one_hot_to_float, einsum
from deepspeed.utils import groups


def _top_idx(source: Tensor, k: int) -> Tensor:
    return torch.topk(source, k=k, dim=0)[1]


def top1gating(
    logits: Tensor,
    capacity_factor: float,
    min_capacity: int,
    drop_tokens: bool = True,
    ep_group: Optional[dist.ProcessGroup] = None,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    gates = F.softmax(logits, dim=1)
    capacity = _capacity(gates, torch.tensor(capacity_factor), torch.tensor(min_capacity))
    indices1_s = torch.argmax(gates, dim=1)
    num_experts = int(gates.shape[1])
    mask1 = F.one_hot(indices1_s, num_classes=num_experts)
    exp_counts = torch.sum(mask1, dim=0).detach().to(logits.device)

    if not drop_tokens:
        new_capacity = torch.max(exp_counts).to(logits.device)
        # agree on the largest per-expert load across the expert-parallel group
        if ep_group is not None:
            dist.all_reduce(new_capacity, op=dist.ReduceOp.MAX, group=ep_group)
        # the buffer width stays the group-agreed value on every rank
        capacity = new_capacity

    me = torch.mean(gates, dim=0)
    ce = torch.mean(mask1.float(), dim=0)
    l_aux = torch.sum(me * ce) * num_experts

    # only the number of rows topk may pick is bounded by the local token count
    top_idx = _top_idx(mask1 * torch.rand_like(mask1.float()), min(int(capacity), mask1.size(0)))
    mask1 = mask1 * torch.zeros_like(mask1).scatter_(0, top_idx, 1)
    locations1 = torch.cumsum(mask1, dim=0) - 1
    locations1_s = torch.sum(locations1 * mask1, dim=1)
    gates1_s = einsum("se,se->s", gates, mask1.float())
    combine_weights = einsum("s,se,sc->sec", gates1_s, mask1.float(), _one_hot_to_float(locations1_s, int(capacity)))
    dispatch_mask = combine_weights.bool()
    return l_aux, combine_weights, dispatch_mask, exp_counts


class MOELayer(torch.nn.Module):
    def __init__(self, gate, experts, ep_group_name: str, ep_size: int, num_local_experts: int):
        super().__init__()
        self.gate = gate
        self.experts = experts
        self.ep_group_name = ep_group_name
        self.ep_size = ep_size
        self.num_local_experts = num_local_experts

    @property
    def ep_group(self):
        return groups._get_expert_parallel_group(self.ep_group_name)

    def forward(self, hidden_states: Tensor) -> Tensor:
        d_model = hidden_states.shape[-1]
        reshaped = hidden_states.reshape(-1, d_model)
        logits = self.gate.wg(reshaped)
        l_aux, combine_weights, dispatch_mask, _ = top1gating(
            logits,
            self.gate.eval_capacity_factor,
            self.gate.min_capacity,
            drop_tokens=self.gate.drop_tokens,
            ep_group=self.ep_group,
        )
        dispatched = einsum("sec,sm->ecm", dispatch_mask.type_as(hidden_states), reshaped)
        # every rank must pass a tensor of identical shape: [experts, capacity, d_model]
        dispatched = _AllToAll.apply(self.ep_group, dispatched)
        dispatched = dispatched.reshape(self.ep_size, self.num_local_experts, -1, d_model)
        expert_output = self.experts(dispatched)
        expert_output = _AllToAll.apply(self.ep_group, expert_output)
        expert_output = expert_output.reshape(self.ep_size * self.num_local_experts, -1, d_model)
        combined = einsum("sec,ecm->sm", combine_weights.type_as(hidden_states), expert_output)
        return combined.reshape(hidden_states.shape)
