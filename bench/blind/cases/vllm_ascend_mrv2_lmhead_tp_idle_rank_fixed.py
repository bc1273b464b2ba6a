"""
Source: https://github.com/vllm-project/vllm-ascend/pull/14668
Project: vllm-ascend (worker/v2 model runner, lmhead tensor parallel)
Reported: 2026-08
Backend: HCCL
Hang: LM-head TP shards the vocab over a group built along the DP axis; every compute_logits does an
  all_gather of the rows, a sharded GEMM and an all_to_all in that group, so every member must call it
  each engine step with the same row count. In Model Runner V2 a DP rank without requests only runs
  the dummy forward and never calls compute_logits, and busy ranks call it with their own, unpadded
  number of logits rows; the busy ranks block in the LM-head all_gather waiting for the idle rank.
Fix: Pad the real-sampling logits rows to a fixed capacity (trimming after compute_logits) and make
  idle ranks run a dummy compute_logits of the same capacity in their dummy run.
"""
import torch

from vllm.v1.worker.gpu.model_runner import GPUModelRunner

from vllm_ascend.ascend_config import get_ascend_config
from vllm_ascend.distributed.parallel_state import get_lmhead_tp_group


class AscendVocabParallelLMHead(torch.nn.Module):
    def forward_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        group = get_lmhead_tp_group()
        gathered = group.all_gather(hidden_states, dim=0)
        local_logits = torch.matmul(gathered, self.weight.t())
        return group.all_to_all(local_logits, scatter_dim=0, gather_dim=-1)


class NPUModelRunner(GPUModelRunner):
    def __init__(self, vllm_config, device):
        super().__init__(vllm_config, device)
        self.lmhead_tp_size = get_ascend_config().finegrained_tp_config.lmhead_tensor_parallel_size
        self.logits_capacity = vllm_config.scheduler_config.max_num_seqs

    @property
    def lmhead_tp_enable(self) -> bool:
        return self.lmhead_tp_size > 1

    def compute_logits(self, hidden_states, logits_indices):
        if not self.lmhead_tp_enable:
            return self.model.compute_logits(hidden_states[logits_indices])
        num_rows = logits_indices.shape[0]
        padded = torch.zeros(self.logits_capacity, dtype=logits_indices.dtype,
                             device=logits_indices.device)
        padded[:num_rows] = logits_indices
        logits = self.model.compute_logits(hidden_states[padded])
        return logits[:num_rows]

    def sample(self, hidden_states, input_batch):
        logits = self.compute_logits(hidden_states, input_batch.logits_indices)
        return self.sampler(logits, input_batch)

    def _dummy_run(self, num_tokens: int, *, is_profile: bool = False, skip_eplb: bool = False):
        hidden = self._run_dummy_forward(num_tokens)
        if self.lmhead_tp_enable and not is_profile:
            # Join the LM-head TP collectives with the same fixed row count as busy ranks.
            dummy_indices = torch.zeros(self.logits_capacity, dtype=torch.int64, device=hidden.device)
            self.model.compute_logits(hidden[dummy_indices])
        return hidden

    def execute_model(self, scheduler_output):
        if scheduler_output.total_num_scheduled_tokens == 0:
            self._dummy_run(1)
            return None
        input_batch = self.prepare_inputs(scheduler_output)
        hidden = self.model(input_batch.input_ids, input_batch.positions)
        return self.sample(hidden, input_batch)
