"""
Source: https://github.com/vllm-project/vllm-ascend/pull/2766
Project: vllm-ascend (worker/model_runner_v1.py)
Reported: 2025-09
Backend: HCCL
Hang: _sync_metadata_across_dp returned immediately when enforce_eager was set (upstream vLLM only
  needs the token count for graph padding). vllm-ascend however also uses the synced with_prefill and
  enable_dbo flags to choose the MoE communication path and micro-batch split. With the early return
  each DP rank keeps its own flags: a rank in prefill takes the all-gather/DBO path, a decode-only rank
  takes MC2 without DBO, so they issue different EP collectives and hang (or mis-communicate).
Fix: Remove the enforce_eager shortcut and always all-reduce num_tokens, with_prefill and enable_dbo
  across DP ranks when dp_size > 1.
"""
from typing import Optional

import torch
import torch.distributed as dist

from vllm.distributed.parallel_state import get_dp_group

from vllm_ascend.ascend_forward_context import set_ascend_forward_context


class NPUModelRunner:
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        self.device = device
        self.dp_size = vllm_config.parallel_config.data_parallel_size
        self.dp_rank = vllm_config.parallel_config.data_parallel_rank

    def _sync_metadata_across_dp(
            self, num_tokens: int, with_prefill: bool, enable_dbo: bool
    ) -> tuple[int, Optional[torch.Tensor], bool, bool]:
        if self.dp_size == 1 or self.vllm_config.model_config.enforce_eager:  # DIVERGES
            return num_tokens, None, with_prefill, enable_dbo
        packed = torch.zeros(self.dp_size + 2, dtype=torch.int32, device="cpu")
        packed[self.dp_rank] = num_tokens
        packed[-2] = int(with_prefill)
        packed[-1] = int(not enable_dbo)
        dist.all_reduce(packed, group=get_dp_group().cpu_group)
        num_tokens_across_dp = packed[:-2]
        max_tokens = int(num_tokens_across_dp.max().item())
        return max_tokens, num_tokens_across_dp, bool(packed[-2]), not bool(packed[-1])

    def _process_reqs(self, scheduler_output):
        num_tokens, with_prefill, enable_dbo, attn_metadata = self._prepare_inputs(scheduler_output)
        num_tokens, num_tokens_across_dp, with_prefill, enable_dbo = self._sync_metadata_across_dp(
            num_tokens, with_prefill, enable_dbo)
        # with_prefill selects all-gather vs MC2 dispatch inside every fused MoE layer,
        # enable_dbo splits the batch into two micro-batches with their own collectives.
        with set_ascend_forward_context(attn_metadata, self.vllm_config,
                                        num_tokens=num_tokens,
                                        num_tokens_across_dp=num_tokens_across_dp,
                                        with_prefill=with_prefill):
            if enable_dbo:
                return self._forward_two_microbatches(num_tokens)
            return self.model(input_ids=self.input_ids[:num_tokens],
                              positions=self.positions[:num_tokens])

    def _dummy_run(self, num_tokens: int, with_prefill: bool = False):
        num_tokens, num_tokens_across_dp, with_prefill, _ = self._sync_metadata_across_dp(
            num_tokens, with_prefill, False)
        with set_ascend_forward_context(None, self.vllm_config, num_tokens=num_tokens,
                                        num_tokens_across_dp=num_tokens_across_dp,
                                        with_prefill=with_prefill):
            return self.model(input_ids=self.input_ids[:num_tokens],
                              positions=self.positions[:num_tokens])
