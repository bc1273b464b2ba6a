"""
Source: https://github.com/vllm-project/vllm-ascend/pull/6011
Project: vllm-ascend (worker/model_runner_v1.py, ACLGraph + DP)
Reported: 2026-01
Backend: HCCL
Hang: Every DP rank dispatches its ACLGraph runtime mode locally from its own batch (uniform decode,
  token count, LoRA). At a batch tail one DP rank can pick FULL graph replay while another runs
  PIECEWISE/eager (for example an idle rank in _dummy_run). The MoE/EP collectives are then issued
  from inside a captured graph on some ranks and eagerly on others, which HCCL (A2 + AIV) cannot
  match, and the ranks hang in the EP collective.
Fix: Send each rank's dispatched cudagraph_mode through _sync_metadata_across_dp, take the minimum
  across DP ranks (synced_cudagraph_mode) and re-dispatch with disable_full when it is <= PIECEWISE,
  in both execute_model and _dummy_run (also PR #5979 on main).
"""
import torch
import torch.distributed as dist

from vllm.config import CUDAGraphMode
from vllm.distributed.parallel_state import get_dp_group
from vllm.forward_context import BatchDescriptor

from vllm_ascend.ascend_forward_context import set_ascend_forward_context


class NPUModelRunner:
    def _sync_metadata_across_dp(self, num_tokens: int, with_prefill: bool):
        if self.dp_size == 1:
            return num_tokens, None, with_prefill
        packed = torch.zeros(self.dp_size + 1, dtype=torch.int32, device="cpu")
        packed[self.dp_rank] = num_tokens
        packed[-1] = int(with_prefill)
        dist.all_reduce(packed, group=get_dp_group().cpu_group)
        max_tokens = int(packed[:-1].max().item())
        after_pad = torch.tensor([max_tokens] * self.dp_size, device="cpu", dtype=torch.int32)
        return max_tokens, after_pad, bool(packed[-1])

    def _dispatch(self, num_tokens: int, uniform_decode: bool, has_lora: bool):
        return self.cudagraph_dispatcher.dispatch(
            num_tokens=num_tokens, uniform_decode=uniform_decode, has_lora=has_lora)

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        num_input_tokens, with_prefill, uniform_decode = self._prepare_inputs(scheduler_output)
        num_input_tokens, num_tokens_across_dp, with_prefill = self._sync_metadata_across_dp(
            num_input_tokens, with_prefill)
        has_lora = len(self.input_batch.lora_id_to_lora_request) > 0
        aclgraph_runtime_mode, batch_descriptor = self._dispatch(
            num_input_tokens, uniform_decode, has_lora)  # DIVERGES
        with set_ascend_forward_context(self.attn_metadata, self.vllm_config,
                                        num_tokens=num_input_tokens,
                                        num_tokens_across_dp=num_tokens_across_dp,
                                        aclgraph_runtime_mode=aclgraph_runtime_mode,
                                        batch_descriptor=batch_descriptor):
            return self.model(input_ids=self.input_ids[:num_input_tokens],
                              positions=self.positions[:num_input_tokens])

    def _dummy_run(self, num_tokens: int, uniform_decode: bool = False):
        num_tokens, num_tokens_across_dp, _ = self._sync_metadata_across_dp(num_tokens, False)
        aclgraph_runtime_mode, batch_descriptor = self._dispatch(
            num_tokens, uniform_decode, False)  # DIVERGES
        with set_ascend_forward_context(None, self.vllm_config,
                                        num_tokens=num_tokens,
                                        num_tokens_across_dp=num_tokens_across_dp,
                                        aclgraph_runtime_mode=aclgraph_runtime_mode,
                                        batch_descriptor=batch_descriptor):
            return self.model(input_ids=self.input_ids[:num_tokens],
                              positions=self.positions[:num_tokens])
