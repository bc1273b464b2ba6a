"""
Source: https://github.com/vllm-project/vllm-ascend/issues/17232
Project: vllm-ascend (worker/v2 model runner)
Reported: 2026-09
Backend: HCCL
Hang: With Model Runner V2, LM-head tensor parallelism and EPLB across external DP ranks, an idle
  decode DP rank runs the dummy batch: the parent _dummy_run is wrapped by the EPLB step decorator, so
  the idle rank enters the EPLB collectives first and only afterwards the LM-head TP all_gather from
  the dummy compute_logits. A busy rank samples through the LM-head TP collective first and steps
  EPLB afterwards. The two groups are entered in opposite order on different ranks, so both sides wait
  on each other until the HCCL timeout.
Fix: Call the parent _dummy_run with skip_eplb=True and put the EPLB-step decorator on the Ascend
  override, so the idle order becomes forward -> dummy LM-head -> EPLB, same as on busy ranks (PR #17233).
"""
import functools

import torch

from vllm.distributed.eplb.eplb_state import EplbState
from vllm.v1.worker.gpu.model_runner import GPUModelRunner

from vllm_ascend.distributed.parallel_state import get_lmhead_tp_group


def step_eplb_after(is_dummy: bool = False):
    """Run one EPLB step (expert-load all_reduce + possible rearrangement) after the wrapped call."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, skip_eplb: bool = False, **kwargs):
            out = fn(self, *args, **kwargs)
            if self.eplb_state is not None and not skip_eplb:
                self.eplb_state.step(is_dummy=is_dummy)  # collectives over the EP group
            return out
        return wrapper
    return deco


class _ParentRunner(GPUModelRunner):
    eplb_state: EplbState

    @step_eplb_after(is_dummy=True)
    def _dummy_run(self, num_tokens: int, *, is_profile: bool = False):
        hidden = self._run_dummy_forward(num_tokens)
        if self.speculator is not None:
            self.speculator.dummy_propose(hidden)
        return hidden

    @step_eplb_after(is_dummy=False)
    def sample_tokens(self, hidden_states, input_batch):
        logits = self.model.compute_logits(hidden_states[input_batch.logits_indices])
        return self.sampler(logits, input_batch)


class NPUModelRunner(_ParentRunner):
    def __init__(self, vllm_config, device):
        super().__init__(vllm_config, device)
        extra = vllm_config.additional_config or {}
        self.lmhead_tp_enabled = extra.get("lmhead_tensor_parallel_size", 1) > 1
        self.max_logits_rows = vllm_config.scheduler_config.max_num_seqs

    @property
    def need_dummy_logits(self) -> bool:
        return self.lmhead_tp_enabled and self.is_last_pp_rank

    def _dummy_compute_logits(self, hidden_states: torch.Tensor):
        # Vocab-parallel LM head: all_gather over lmhead TP group, sharded GEMM, all_to_all back.
        rows = hidden_states[: self.max_logits_rows]
        return self.model.compute_logits(rows)

    @step_eplb_after(is_dummy=True)
    def _dummy_run(self, num_tokens: int, *, is_profile: bool = False):
        # Skip the parent's EPLB step; ours runs after the dummy LM-head, as on busy ranks.
        hidden = super()._dummy_run(num_tokens, is_profile=is_profile, skip_eplb=True)
        if self.need_dummy_logits and not is_profile:
            self._dummy_compute_logits(hidden)
        return hidden

    def execute_dummy_batch(self):
        # Called on a DP rank that has no requests this engine step.
        self._dummy_run(1)

    def execute_model(self, scheduler_output):
        if scheduler_output.total_num_scheduled_tokens == 0:
            return self.execute_dummy_batch()
        input_batch = self.prepare_inputs(scheduler_output)
        hidden = self.model(input_batch.input_ids, input_batch.positions)
        return self.sample_tokens(hidden, input_batch)
