"""
Source: https://github.com/vllm-project/vllm/pull/35294
Project: vLLM (v1/worker/gpu Model Runner V2, spec decoding with DP + EP)
Reported: 2026-02
Backend: NCCL
Hang: In Model Runner V2 a DP rank that has requests runs the target model and then
  speculator.propose(), whose draft MoE model performs EP dispatch/combine collectives. An idle DP rank
  runs execute_dummy_batch -> _dummy_run, which only runs the target-model forward; the speculator's EP
  collectives on the busy rank have no counterpart and the busy rank hangs.
Fix: Call the speculator's propose on dummy inputs from _dummy_run (and sync num_tokens_across_dp for the
  speculator), so idle ranks join the draft model's collectives too.
"""
import torch

from vllm.v1.worker.gpu.dp_utils import get_cudagraph_and_dp_padding
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator


class GPUModelRunner:
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        self.device = device
        self.speculator: EagleSpeculator | None = None
        if vllm_config.speculative_config is not None:
            self.speculator = EagleSpeculator(vllm_config, device)

    def _forward_target(self, num_tokens, input_batch=None):
        num_tokens_padded, num_tokens_across_dp, cg_mode = get_cudagraph_and_dp_padding(
            num_tokens, self.vllm_config)
        hidden = self.model_forward(num_tokens_padded, num_tokens_across_dp, cg_mode, input_batch)
        return hidden, num_tokens_across_dp

    @torch.inference_mode()
    def _dummy_run(self, num_tokens: int, *, skip_attn: bool = True, is_profile: bool = False):
        hidden, num_tokens_across_dp = self._forward_target(num_tokens)
        if self.speculator is not None and not is_profile:
            # Join the draft model's EP collectives like a busy rank does.
            self.speculator.propose(self.make_dummy_input_batch(num_tokens), hidden, None,
                                    num_tokens_across_dp=num_tokens_across_dp)
        return hidden

    @torch.inference_mode()
    def execute_model(self, scheduler_output):
        if scheduler_output.total_num_scheduled_tokens == 0:
            return self._dummy_run(1)
        input_batch = self.prepare_inputs(scheduler_output)
        hidden, num_tokens_across_dp = self._forward_target(input_batch.num_tokens, input_batch)
        sampled = self.sample(hidden, input_batch)
        if self.speculator is not None:
            self.speculator.propose(input_batch, hidden, sampled,
                                    num_tokens_across_dp=num_tokens_across_dp)
        return sampled

    def execute_dummy_batch(self) -> None:
        self._dummy_run(1)
