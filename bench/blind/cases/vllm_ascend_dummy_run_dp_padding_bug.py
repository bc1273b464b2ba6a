"""
Source: https://github.com/vllm-project/vllm-ascend/pull/2454
Project: vllm-ascend (worker/model_runner_v1.py)
Reported: 2025-08
Backend: HCCL
Hang: When there are fewer requests than DP ranks, some DP ranks run _process_reqs while the idle ones
  run _dummy_run. _process_reqs calls get_dp_padding(), which all-reduces the per-rank token counts over
  the DP group, but _dummy_run does not call it, so busy ranks wait in that all_reduce while idle ranks
  go on into the model forward and its MoE collectives; the service hangs.
Fix: Call get_dp_padding(num_tokens) in _dummy_run as well, so both paths issue the same DP all_reduce
  in the same order.
"""
from typing import Optional

import torch

from vllm.distributed.parallel_state import get_dp_group
from vllm.forward_context import DPMetadata

from vllm_ascend.ascend_forward_context import set_ascend_forward_context


class NPUModelRunner:
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        self.device = device
        self.dp_size = vllm_config.parallel_config.data_parallel_size
        self.dp_rank = vllm_config.parallel_config.data_parallel_rank

    def get_dp_padding(self, num_tokens: int) -> tuple[int, Optional[torch.Tensor]]:
        if self.dp_size == 1:
            return 0, None
        # all_reduce over the DP group to learn every rank's token count
        num_tokens_across_dp = DPMetadata.num_tokens_across_dp(num_tokens, self.dp_size, self.dp_rank)
        max_tokens = torch.max(num_tokens_across_dp).item()
        num_tokens_after_padding = torch.tensor([max_tokens] * self.dp_size, device="cpu", dtype=torch.int32)
        return max_tokens - num_tokens, num_tokens_after_padding

    def _process_reqs(self, scheduler_output, intermediate_tensors=None):
        num_input_tokens = scheduler_output.total_num_scheduled_tokens
        attn_metadata, positions, input_ids = self._prepare_inputs(scheduler_output)
        # Padding for DP
        num_pad, num_tokens_across_dp = self.get_dp_padding(num_input_tokens)
        num_input_tokens += num_pad
        with set_ascend_forward_context(attn_metadata, self.vllm_config,
                                        num_tokens=num_input_tokens,
                                        num_tokens_across_dp=num_tokens_across_dp):
            return self.model(input_ids=input_ids[:num_input_tokens],
                              positions=positions[:num_input_tokens])

    @torch.inference_mode()
    def _dummy_run(self, num_tokens: int, is_torchair_compile: bool = False):
        # Padding for DP (torchair path pads on its own, without syncing with other DP ranks)
        num_tokens_across_dp = None  # DIVERGES
        input_ids = torch.zeros(num_tokens, dtype=torch.int32, device=self.device)
        positions = torch.zeros(num_tokens, dtype=torch.int64, device=self.device)
        with set_ascend_forward_context(None, self.vllm_config,
                                        num_tokens=num_tokens,
                                        num_tokens_across_dp=num_tokens_across_dp):
            return self.model(input_ids=input_ids, positions=positions)

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        if not scheduler_output.total_num_scheduled_tokens:
            # idle DP rank keeps the other ranks company
            self._dummy_run(1)
            return None
        return self._process_reqs(scheduler_output, intermediate_tensors)
