"""
Source: https://github.com/vllm-project/vllm-ascend/pull/1636
Project: vLLM Ascend (TorchAir graph mode, attention_v1_torchair metadata builder)
Reported: 2025-07
Backend: HCCL
Hang: In TorchAir graph mode the metadata builder computed max_num_tokens_across_dp as the DP-wide
maximum of actual tokens plus this rank's own graph_pad_size (the distance from its local token count
to its local graph batch size). graph_pad_size differs per DP rank, so the "across DP" maximum differs
per rank; the MoE path pads its hidden states to that value before the DP/EP all-gather or MC2
dispatch, so ranks enter the collective with different padded sizes (the PR calls it wrong padding).
Fix: Derive max_num_tokens_across_dp from values that are identical on all DP ranks (the padded graph
batch size chosen for the DP-wide maximum), not from the local pad.
"""
import torch
from vllm.distributed import get_dp_group
from vllm.forward_context import get_forward_context

from vllm_ascend.attention.attention_v1 import AscendAttentionState


class AscendAttentionTorchairMetadataBuilder:
    def __init__(self, runner):
        self.runner = runner
        self.torchair_graph_enabled = runner.torchair_graph_enabled

    def build(self, num_reqs: int, num_actual_tokens: int, max_query_len: int, num_tokens_across_dp: torch.Tensor):
        attn_state = self.runner.attn_state
        graph_pad_size = 0
        if self.torchair_graph_enabled and attn_state == AscendAttentionState.DecodeOnly:
            padded_bs = self.runner.select_torchair_padded_batch_size(num_actual_tokens)
            graph_pad_size = padded_bs - num_actual_tokens
        max_tokens = int(num_tokens_across_dp.max().item())
        max_num_tokens_across_dp = max_tokens + graph_pad_size  # DIVERGES: local graph_pad_size differs per DP rank
        return {
            "num_actual_tokens": num_actual_tokens,
            "graph_pad_size": graph_pad_size,
            "max_num_tokens_across_dp": max_num_tokens_across_dp,
            "attn_state": attn_state,
        }


class TorchairFusedMoE(torch.nn.Module):
    def __init__(self, experts, dp_size: int):
        super().__init__()
        self.experts = experts
        self.dp_size = dp_size

    def forward(self, hidden_states: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        attn_metadata = get_forward_context().attn_metadata
        if self.dp_size > 1:
            max_tokens = attn_metadata["max_num_tokens_across_dp"]
            pad = max_tokens - hidden_states.shape[0]
            if pad > 0:
                hidden_states = torch.nn.functional.pad(hidden_states, (0, 0, 0, pad))
                router_logits = torch.nn.functional.pad(router_logits, (0, 0, 0, pad))
            # every DP rank must contribute the same number of rows
            hidden_states = get_dp_group().all_gather(hidden_states, 0)
            router_logits = get_dp_group().all_gather(router_logits, 0)
        return self.experts(hidden_states, router_logits)
