"""
Source: https://github.com/vllm-project/vllm-ascend/pull/15079
Project: vLLM Ascend (Model Runner V2, lmhead tensor parallel + speculative decoding)
Reported: 2026-08
Backend: HCCL
Hang: With lmhead TP the draft model's LM head is vocab-sharded on the same lmhead-TP group as the
target head, so every member must feed the same rows into the head collectives, in the same order, each
step, including idle DP ranks that replay speculator.propose in their dummy run. On busy ranks the
target head collectives come first and the draft head collectives after sampling; the idle dummy path
ran the draft proposal before the target logits, and sampled the dummy-batch row count instead of the
aligned one. The lmhead-TP group's HCCL collectives are then paired across different heads/shapes and
hang.
Fix: Make the idle path issue target-head collectives before draft-head ones and pad the draft rows
to the same aligned count as the target head.
"""
import torch

from vllm_ascend.distributed.parallel_state import get_lmhead_tp_group
from vllm_ascend.worker.v2.model_runner import AscendModelRunnerBase


class AscendModelRunner(AscendModelRunnerBase):
    def _lmhead_tp_rows(self, num_reqs: int) -> int:
        """Rows every lmhead-TP member must feed: the group max (kept in sync each step)."""
        return self.lmhead_tp_max_reqs

    def _target_logits(self, hidden_states: torch.Tensor, num_reqs: int) -> torch.Tensor:
        rows = self._lmhead_tp_rows(num_reqs)
        idx = self._pad_logits_indices(self.logits_indices[:num_reqs], rows)
        # vocab-parallel head: all_gather over the lmhead-TP group
        return self.model.compute_logits(hidden_states[idx])

    def _pad_logits_indices(self, idx: torch.Tensor, rows: int) -> torch.Tensor:
        if idx.shape[0] >= rows:
            return idx
        pad = idx.new_zeros(rows - idx.shape[0])
        return torch.cat([idx, pad])

    @torch.inference_mode()
    def execute_model(self, scheduler_output, input_ids, positions):
        num_reqs = scheduler_output.num_reqs
        hidden_states = self.model(input_ids=input_ids, positions=positions)
        logits = self._target_logits(hidden_states, num_reqs)  # target-head collectives first
        sampled = self.sampler(logits[:num_reqs])
        # draft head: same lmhead-TP group, rows aligned like the target head
        self.draft_tokens = self.speculator.propose(
            sampled, hidden_states, num_rows=self._lmhead_tp_rows(num_reqs)
        )
        return sampled

    @torch.inference_mode()
    def dummy_run(self, num_tokens: int, num_reqs: int = 1):
        input_ids = torch.zeros(num_tokens, dtype=torch.int32, device=self.device)
        positions = torch.zeros(num_tokens, dtype=torch.int64, device=self.device)
        hidden_states = self.model(input_ids=input_ids, positions=positions)
        # same order and row count as busy ranks: target head first, then draft head
        self._target_logits(hidden_states, num_reqs)
        if self.speculator is not None:
            self.speculator.propose(None, hidden_states, num_rows=self._lmhead_tp_rows(num_reqs))
