"""
Source: https://github.com/NVIDIA/Megatron-LM/pull/4851
Project: Megatron-LM (MoE, TEGroupedMLP with expert parallelism)
Reported: 2026-05
Backend: NCCL
Hang: When the router sends no token to any local expert of a rank (EP imbalance, small global
batch), TEGroupedMLP.forward returns early and never runs linear_fc1/linear_fc2. The expert weights
of that rank then get no gradient hooks fired in backward, so its DDP bucket for the expert-data-
parallel group never becomes ready and its grad reduce-scatter is never issued, while peer ranks that
did run the experts launch theirs and wait: the autograd graphs diverge across ranks and the next
expert DDP / EP collective hangs.
Fix: on zero local tokens, synthesize one zero token per local expert with zero routing probability,
run the normal fc1/act/fc2 path and slice the fake rows off, so backward fires on every rank.
(PR was closed unmerged; its proposed change is used as the fix.)
"""
from typing import List, Optional, Tuple

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.transformer.module import MegatronModule


class TEGroupedMLP(MegatronModule):
    def __init__(self, num_local_experts: int, config, submodules, pg_collection=None):
        super().__init__(config=config)
        self.num_local_experts = num_local_experts
        self.linear_fc1 = submodules.linear_fc1(
            num_local_experts, config.hidden_size, config.moe_ffn_hidden_size * 2,
            config=config, is_expert=True, tp_comm_buffer_name="fc1")
        self.linear_fc2 = submodules.linear_fc2(
            num_local_experts, config.moe_ffn_hidden_size, config.hidden_size,
            config=config, is_expert=True, tp_comm_buffer_name="fc2")
        self.activation_func = config.activation_func

    def forward(self, permuted_local_hidden_states: torch.Tensor,
                tokens_per_expert: torch.Tensor,
                permuted_probs: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        tokens_per_expert: List[int] = tokens_per_expert.tolist()
        num_fake = 0
        if sum(tokens_per_expert) == 0:
            # keep the expert weights in the autograd graph: one zero token per local expert
            num_fake = self.num_local_experts
            permuted_local_hidden_states = permuted_local_hidden_states.new_zeros(
                (num_fake, self.config.hidden_size))
            permuted_probs = permuted_probs.new_zeros((num_fake,))
            tokens_per_expert = [1] * self.num_local_experts

        fc1_out, _ = self.linear_fc1(permuted_local_hidden_states, tokens_per_expert)
        inter = self.activation_func(fc1_out) * permuted_probs.unsqueeze(-1)
        out, out_bias = self.linear_fc2(inter, tokens_per_expert)
        if num_fake:
            out = out[num_fake:]
        return out, out_bias


class ExpertGradBucket:
    """Mirror of the DDP bucket logic: reduce-scatter once every param of the bucket has its grad."""

    def __init__(self, params, data_parallel_group):
        self.params = list(params)
        self.pending = set(self.params)
        self.group = data_parallel_group
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._on_grad)

    def _on_grad(self, param):
        self.pending.discard(param)
        if not self.pending:
            self.start_grad_sync()

    def start_grad_sync(self):
        flat = torch.cat([p.grad.view(-1) for p in self.params])
        out = flat.new_empty(flat.numel() // dist.get_world_size(self.group))
        dist.reduce_scatter_tensor(out, flat, group=self.group)
        self.pending = set(self.params)


def train_step(model_chunk: TEGroupedMLP, batch, tokens_per_expert, probs):
    group = parallel_state.get_expert_data_parallel_group()
    bucket = ExpertGradBucket(model_chunk.parameters(), group)
    out, _ = model_chunk(batch, tokens_per_expert, probs)
    loss = out.float().sum()
    loss.backward()
    return loss, bucket
