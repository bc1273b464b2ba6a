"""
Source: https://github.com/vllm-project/vllm/pull/51984
Project: vLLM (v1 GPUModelRunner.execute_model)
Reported: 2026-08
Backend: NCCL
Hang: With data_parallel_size > 1 and expert parallelism, a step can give tokens to one DP rank and
  zero tokens to the others. execute_model on a zero-token rank returns early and only runs the dummy
  forward when the executor backend is "external_launcher"; with the multiproc / disaggregated backends
  the idle ranks skip the forward, never enter the per-layer MoE all2all, and the busy rank blocks in
  its all2all forever.
Fix: Run _dummy_run(1) on every zero-token step whenever data_parallel_size > 1, independent of the
  executor backend.
"""
from typing import Optional

import torch

from vllm.config import VllmConfig
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput


class GPUModelRunner:
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        self.vllm_config = vllm_config
        self.parallel_config = vllm_config.parallel_config
        self.device = device

    def _dummy_run(self, num_tokens: int, uniform_decode: bool = False):
        # Runs the full model on a padded dummy batch, including every MoE layer's
        # dispatch/combine all2all over the EP group.
        input_ids = torch.zeros(num_tokens, dtype=torch.long, device=self.device)
        positions = torch.zeros(num_tokens, dtype=torch.long, device=self.device)
        with self.set_forward_context(num_tokens):
            return self.model(input_ids=input_ids, positions=positions)

    def _should_run_dummy_on_idle(self) -> bool:
        return self.parallel_config.data_parallel_size > 1

    @torch.inference_mode()
    def execute_model(self, scheduler_output: SchedulerOutput) -> Optional[ModelRunnerOutput]:
        self._update_states(scheduler_output)
        if not scheduler_output.total_num_scheduled_tokens:
            if self._should_run_dummy_on_idle():
                self._dummy_run(1)
            if not self.has_kv_transfer_group():
                return EMPTY_MODEL_RUNNER_OUTPUT
            return self.kv_connector_no_forward(scheduler_output)

        model_input = self._prepare_inputs(scheduler_output)
        with self.set_forward_context(model_input.num_tokens):
            hidden_states = self.model(input_ids=model_input.input_ids,
                                       positions=model_input.positions)
        return self._sample(hidden_states, model_input)
