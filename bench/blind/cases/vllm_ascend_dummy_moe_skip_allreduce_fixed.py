"""
Source: https://github.com/vllm-project/vllm-ascend/pull/710
Project: vllm-ascend (models/deepseek_v2.py, V1 data parallel)
Reported: 2025-04
Backend: HCCL
Hang: With DP on the V1 engine, DP ranks whose requests have a smaller max_tokens finish first and keep
  stepping with execute_dummy_batch(). The dummy forward reaches the MoE block with no attention
  metadata and the MoE returns immediately, before the all_reduce that the busy ranks perform in every
  MoE layer, so the busy ranks wait in that all_reduce for the idle ones and the job errors/hangs.
Fix: Give the dummy path its own forward that still executes the MoE all_reduce (with a zero
  contribution), so idle ranks join the collective in every layer.
"""
import torch
from torch import nn

from vllm.distributed import (get_dp_group, get_tensor_model_parallel_world_size,
                              tensor_model_parallel_all_reduce)
from vllm.forward_context import get_forward_context

from vllm_ascend.ops.fused_moe import AscendFusedMoE


class CustomDeepseekV2MoE(nn.Module):
    def __init__(self, config, quant_config=None, prefix: str = ""):
        super().__init__()
        self.tp_size = get_tensor_model_parallel_world_size()
        self.dp_size = get_dp_group().world_size
        self.gate = nn.Linear(config.hidden_size, config.n_routed_experts, bias=False)
        self.experts = AscendFusedMoE(num_experts=config.n_routed_experts,
                                      top_k=config.num_experts_per_tok,
                                      hidden_size=config.hidden_size,
                                      intermediate_size=config.moe_intermediate_size,
                                      reduce_results=False, prefix=f"{prefix}.experts")

    def _is_dummy(self) -> bool:
        return get_forward_context().attn_metadata is None

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self._is_dummy():
            return self._forward_dummy(hidden_states)
        num_tokens, hidden_size = hidden_states.shape
        router_logits = self.gate(hidden_states)
        final_hidden_states = self.experts(hidden_states=hidden_states,
                                           router_logits=router_logits)
        if self.tp_size > 1:
            final_hidden_states = tensor_model_parallel_all_reduce(final_hidden_states)
        if self.dp_size > 1:
            # sum expert outputs of the EP ranks spread over the DP group
            final_hidden_states = get_dp_group().all_reduce(final_hidden_states)
        return final_hidden_states.view(num_tokens, hidden_size)

    def _forward_dummy(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # Keep in lockstep with busy DP ranks: join the same all_reduce with zeros.
        zeros = torch.zeros_like(hidden_states)
        if self.tp_size > 1:
            zeros = tensor_model_parallel_all_reduce(zeros)
        if self.dp_size > 1:
            zeros = get_dp_group().all_reduce(zeros)
        return hidden_states


class NPUWorker:
    def __init__(self, model_runner):
        self.model_runner = model_runner

    def execute_dummy_batch(self) -> None:
        self.model_runner._dummy_run(1)

    def execute_model(self, scheduler_output):
        return self.model_runner.execute_model(scheduler_output)
