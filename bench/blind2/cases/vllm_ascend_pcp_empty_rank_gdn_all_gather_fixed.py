"""
Source: https://github.com/vllm-project/vllm-ascend/pull/12009
Project: vllm-ascend (Qwen3.5-style GDN layers under prefill context parallel)
Reported: 2026-07
Backend: HCCL
Hang: With PCP + chunked prefill, a small prefill chunk (e.g. a 1-token remainder) is
split over the PCP ranks and some ranks receive 0 prefill tokens. The GDN attention layer
returns early on such an empty rank, while the ranks that do have prefill tokens enter
chunk_gated_delta_rule_fwd, which all_gathers the per-chunk states across the PCP group.
The empty rank never joins that all_gather, so the PCP group deadlocks (and the empty
tensors would also crash the AscendC kernels).
Fix: agree across PCP ranks whether every rank has prefill tokens (has_token_flag) and
pass skip_pcp_all_gather to the kernel so that either all ranks run the PCP all_gather or
none do; empty ranks no longer leave before that agreement.
"""
import torch
import torch.distributed as dist
import torch_npu  # noqa: F401

from vllm.distributed import get_pcp_group


def chunk_gated_delta_rule_fwd(q, k, v, g, beta, initial_state, skip_pcp_all_gather=False):
    out = torch.empty_like(v)
    final_state = initial_state
    pcp = get_pcp_group()
    if pcp.world_size > 1 and not skip_pcp_all_gather:
        # gather every PCP rank's chunk-final state to stitch the recurrence
        states = [torch.empty_like(final_state) for _ in range(pcp.world_size)]
        dist.all_gather(states, final_state, group=pcp.device_group)
        final_state = states[-1]
    return out, final_state


class AscendGatedDeltaNet(torch.nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, head_dim: int):
        super().__init__()
        self.qkv = torch.nn.Linear(hidden_size, 3 * num_heads * head_dim, bias=False)
        self.num_heads = num_heads
        self.head_dim = head_dim

    def _prefill(self, mixed_qkv, attn_metadata, state):
        num_prefill_tokens = attn_metadata.num_prefill_tokens  # local to this PCP rank
        pcp = get_pcp_group()
        has_token_flag = torch.tensor([int(num_prefill_tokens > 0)], dtype=torch.int32)
        if pcp.world_size > 1:
            dist.all_reduce(has_token_flag, op=dist.ReduceOp.MIN, group=pcp.cpu_group)
        # all ranks take the same decision about the PCP all_gather
        skip_pcp_all_gather = not bool(has_token_flag.item())
        if num_prefill_tokens == 0:
            return mixed_qkv.new_empty(0, self.num_heads * self.head_dim), state
        q, k, v = mixed_qkv[:num_prefill_tokens].chunk(3, dim=-1)
        g = torch.zeros_like(q)
        beta = torch.ones_like(q)
        out, state = chunk_gated_delta_rule_fwd(q, k, v, g, beta, state,
                                                skip_pcp_all_gather=skip_pcp_all_gather)
        return out, state

    def forward(self, hidden_states, attn_metadata, state):
        mixed_qkv = self.qkv(hidden_states)
        prefill_out, state = self._prefill(mixed_qkv, attn_metadata, state)
        return prefill_out, state
