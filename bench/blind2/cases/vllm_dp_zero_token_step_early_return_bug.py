"""
Source: https://github.com/vllm-project/vllm/issues/28224
Project: vLLM
Reported: 2025-11
Backend: NCCL
Hang: With data parallelism (DP=2) and a dense model, every engine step each DP rank
must join the all_reduce in coordinate_batch_across_dp (the one that agrees on padded
token counts). Near the end of a run one rank gets a scheduler step with zero scheduled
tokens and GPUModelRunner.execute_model returns the empty output early, while the other
rank (running real or dummy batches) enters the DP all_reduce and waits forever.
Fix: before the early return on a zero-token step, run a dummy forward so the rank still
takes part in coordinate_batch_across_dp (the fix in vllm PR #28774).
"""
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from vllm.config import VllmConfig
from vllm.distributed.parallel_state import get_dp_group
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput


def coordinate_batch_across_dp(num_tokens_unpadded: int, parallel_config) -> torch.Tensor:
    """Every DP rank contributes its token count; all ranks pad to the max."""
    dp_size = parallel_config.data_parallel_size
    dp_rank = parallel_config.data_parallel_rank
    counts = torch.zeros(dp_size, dtype=torch.int32)
    counts[dp_rank] = num_tokens_unpadded
    dist.all_reduce(counts, group=get_dp_group().cpu_group)
    return counts


@dataclass
class SchedulerOutput:
    num_scheduled_tokens: dict = field(default_factory=dict)
    total_num_scheduled_tokens: int = 0
    finished_req_ids: set = field(default_factory=set)


class GPUModelRunner:
    def __init__(self, vllm_config: VllmConfig):
        self.vllm_config = vllm_config
        self.parallel_config = vllm_config.parallel_config
        self.requests = {}

    def _update_states(self, scheduler_output: SchedulerOutput) -> None:
        for req_id in scheduler_output.finished_req_ids:
            self.requests.pop(req_id, None)

    def _get_num_input_tokens(self, num_tokens: int) -> int:
        return num_tokens

    def _dummy_run(self, num_tokens: int) -> None:
        num_tokens_across_dp = None
        if self.parallel_config.data_parallel_size > 1:
            num_tokens_across_dp = coordinate_batch_across_dp(num_tokens, self.parallel_config)
        self._run_model(num_tokens, num_tokens_across_dp)

    def _run_model(self, num_tokens, num_tokens_across_dp):
        return torch.empty(num_tokens)

    def _prepare_inputs(self, scheduler_output: SchedulerOutput):
        num_tokens = scheduler_output.total_num_scheduled_tokens
        num_tokens_across_dp = None
        if self.parallel_config.data_parallel_size > 1:
            num_tokens_across_dp = coordinate_batch_across_dp(num_tokens, self.parallel_config)
        return num_tokens, num_tokens_across_dp

    @torch.inference_mode()
    def execute_model(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        self._update_states(scheduler_output)
        if not scheduler_output.total_num_scheduled_tokens:
            # Nothing scheduled on this DP rank this step: return at once.
            return EMPTY_MODEL_RUNNER_OUTPUT  # DIVERGES

        num_tokens, num_tokens_across_dp = self._prepare_inputs(scheduler_output)
        hidden = self._run_model(num_tokens, num_tokens_across_dp)
        return ModelRunnerOutput(req_ids=list(self.requests), sampled_token_ids=[hidden])

    def execute_dummy_batch(self) -> None:
        # Called by the engine core of a DP rank that has no requests at all.
        self._dummy_run(1)


class Worker:
    def __init__(self, vllm_config: VllmConfig):
        self.model_runner = GPUModelRunner(vllm_config)

    def execute_model(self, scheduler_output: SchedulerOutput):
        return self.model_runner.execute_model(scheduler_output)

    def execute_dummy_batch(self):
        self.model_runner.execute_dummy_batch()
