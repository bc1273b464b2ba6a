"""
Source: https://github.com/vllm-project/vllm/pull/25906
Project: vLLM (v1 GPUModelRunner._dummy_run, DP + EP)
Reported: 2025-09
Backend: NCCL
Hang: An idle DP rank runs _dummy_run while busy ranks run execute_model. Both compute the DP-synced
  padded token count, and execute_model picks its CUDA graph from that padded count, but _dummy_run
  asks the cudagraph dispatcher with its local, unpadded num_tokens. The idle rank therefore replays a
  graph of a different size (or runs eagerly) while the busy ranks replay the padded graph, so the EP
  all2all / all_gather inside the MoE layers are issued with mismatched shapes and modes and hang.
Fix: Build the BatchDescriptor in _dummy_run from num_tokens_after_padding (the DP-synchronized value).
"""
from typing import Optional

import torch

from vllm.config import CUDAGraphMode
from vllm.forward_context import BatchDescriptor, set_forward_context
from vllm.v1.worker.dp_utils import coordinate_batch_across_dp


class GPUModelRunner:
    def _pad_for_dp(self, num_tokens: int, uniform_decode: bool):
        num_tokens_after_padding, num_tokens_across_dp = coordinate_batch_across_dp(
            num_tokens_unpadded=num_tokens,
            parallel_config=self.parallel_config,
            uniform_decode=uniform_decode,
        )  # all_reduce over the DP group
        return num_tokens_after_padding, num_tokens_across_dp

    @torch.inference_mode()
    def _dummy_run(self, num_tokens: int,
                   cudagraph_runtime_mode: Optional[CUDAGraphMode] = None,
                   uniform_decode: bool = False, is_profile: bool = False):
        num_tokens_after_padding, num_tokens_across_dp = self._pad_for_dp(num_tokens, uniform_decode)
        if cudagraph_runtime_mode is None:
            # filter out the valid batch descriptor
            cudagraph_runtime_mode, batch_descriptor = self.cudagraph_dispatcher.dispatch(
                BatchDescriptor(num_tokens=num_tokens_after_padding,
                                uniform_decode=uniform_decode))
        else:
            batch_descriptor = BatchDescriptor(num_tokens=num_tokens_after_padding,
                                               uniform_decode=uniform_decode)
        with set_forward_context(None, self.vllm_config,
                                 num_tokens=num_tokens_after_padding,
                                 num_tokens_across_dp=num_tokens_across_dp,
                                 cudagraph_runtime_mode=cudagraph_runtime_mode,
                                 batch_descriptor=batch_descriptor):
            return self.model(input_ids=self.input_ids.gpu[:num_tokens_after_padding],
                              positions=self.positions.gpu[:num_tokens_after_padding])

    @torch.inference_mode()
    def execute_model(self, scheduler_output):
        num_scheduled = scheduler_output.total_num_scheduled_tokens
        uniform_decode = self._is_uniform_decode(scheduler_output)
        num_input_tokens, num_tokens_across_dp = self._pad_for_dp(num_scheduled, uniform_decode)
        cudagraph_runtime_mode, batch_descriptor = self.cudagraph_dispatcher.dispatch(
            BatchDescriptor(num_tokens=num_input_tokens, uniform_decode=uniform_decode))
        with set_forward_context(self.attn_metadata, self.vllm_config,
                                 num_tokens=num_input_tokens,
                                 num_tokens_across_dp=num_tokens_across_dp,
                                 cudagraph_runtime_mode=cudagraph_runtime_mode,
                                 batch_descriptor=batch_descriptor):
            hidden = self.model(input_ids=self.input_ids.gpu[:num_input_tokens],
                                positions=self.positions.gpu[:num_input_tokens])
        return self._sample(hidden, scheduler_output)


class Worker:
    def __init__(self, model_runner: GPUModelRunner):
        self.model_runner = model_runner

    def execute_dummy_batch(self) -> None:
        self.model_runner._dummy_run(1, uniform_decode=True)
