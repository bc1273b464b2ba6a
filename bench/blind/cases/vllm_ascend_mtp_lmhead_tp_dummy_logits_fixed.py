"""
Source: https://github.com/vllm-project/vllm-ascend/pull/4360
Project: vllm-ascend (worker/model_runner_v1.py + spec_decode/mtp_proposer.py)
Reported: 2025-11
Backend: HCCL
Hang: With MTP (num_speculative_tokens > 1) and LM-head tensor parallelism > 1, every compute_logits is
  an all_gather/all_to_all in the lmhead TP group (built across DP ranks). A busy rank calls
  compute_logits once for the target model and once per speculative token in the MTP proposer; an idle
  rank's _dummy_run called the dummy compute_logits only once, regardless of num_speculative_tokens, so
  the busy rank's later compute_logits calls have no partner and execute_model hangs.
Fix: Build dummy_compute_logits unconditionally and hand it to the drafter's dummy_run, which calls it
  once per speculative token, matching the real path.
"""
import torch

from vllm_ascend.ascend_forward_context import set_ascend_forward_context
from vllm_ascend.utils import lmhead_tp_enable


class MtpProposer:
    def __init__(self, vllm_config, device, runner):
        self.vllm_config = vllm_config
        self.runner = runner
        self.num_speculative_tokens = vllm_config.speculative_config.num_speculative_tokens

    def dummy_run(self, num_tokens: int, with_prefill: bool = False,
                  num_tokens_across_dp=None, dummy_compute_logits=None):
        with set_ascend_forward_context(None, self.vllm_config, num_tokens=num_tokens,
                                        num_tokens_across_dp=num_tokens_across_dp,
                                        with_prefill=with_prefill):
            self.model(input_ids=self.input_ids[:num_tokens],
                       positions=self.positions[:num_tokens],
                       previous_hidden_states=self.hidden_states[:num_tokens])
        if dummy_compute_logits is not None:
            for _ in range(self.num_speculative_tokens):
                dummy_compute_logits(self.hidden_states)

    def propose(self, hidden_states, num_tokens: int, attn_metadata):
        drafts = []
        for _ in range(self.num_speculative_tokens):
            with set_ascend_forward_context(attn_metadata, self.vllm_config, num_tokens=num_tokens):
                hidden_states = self.model(input_ids=self.input_ids[:num_tokens],
                                           positions=self.positions[:num_tokens],
                                           previous_hidden_states=hidden_states)
            logits = self.model.compute_logits(hidden_states[self.logits_indices])  # lmhead TP collective
            drafts.append(logits.argmax(dim=-1))
        return torch.stack(drafts, dim=1)


class NPUModelRunner:
    def _dummy_run(self, num_tokens: int, with_prefill: bool = False):
        hidden_states = self._dummy_forward(num_tokens, with_prefill)
        need_dummy_logits = (not self.in_profile_run and lmhead_tp_enable())
        max_num_reqs_across_dp = num_tokens if not with_prefill else self.max_num_reqs
        dummy_indices = torch.zeros(max_num_reqs_across_dp, dtype=torch.int32)

        def dummy_compute_logits(hidden_states):
            if not need_dummy_logits:
                return None
            return self.model.compute_logits(hidden_states[dummy_indices])

        dummy_compute_logits(hidden_states)  # target model
        if self.drafter is not None:
            # drafter calls it once per speculative token
            self.drafter.dummy_run(num_tokens, with_prefill=with_prefill,
                                   dummy_compute_logits=dummy_compute_logits)
        return hidden_states

    def execute_model(self, scheduler_output):
        if scheduler_output.total_num_scheduled_tokens == 0:
            return self._dummy_run(1)
        hidden_states, attn_metadata, num_tokens = self._forward(scheduler_output)
        sampled = self._sample(self.model.compute_logits(hidden_states[self.logits_indices]))
        if self.drafter is not None:
            self.drafter.propose(hidden_states, num_tokens, attn_metadata)
        return sampled
