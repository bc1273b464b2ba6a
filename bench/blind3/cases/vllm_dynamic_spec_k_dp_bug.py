"""
Source: https://github.com/vllm-project/vllm/pull/45963
Project: vLLM
Reported: 2026-06
Backend: NCCL
Hang: Dynamic speculative decoding picks the number of draft tokens K per step from the scheduler's *local*
scheduled-request count (num_speculative_tokens_per_batch_size). With data parallelism each DP rank has its
own scheduler and batch size, so ranks choose different K; the EAGLE/draft proposer runs one drafter forward
per extra draft token and each drafter forward takes part in DP collectives (DP batch coordination / MoE
all-to-all), so a rank with larger K issues more collectives than its peers and the DP group deadlocks.
Fix: When data_parallel_size > 1, warn and ignore num_speculative_tokens_per_batch_size, falling back to the
static num_speculative_tokens so every DP rank drafts the same K.
"""
from dataclasses import dataclass, field
from typing import Optional

import torch

from vllm.distributed import get_dp_group
from vllm.logger import init_logger

logger = init_logger(__name__)


@dataclass
class ParallelConfig:
    data_parallel_size: int = 1
    tensor_parallel_size: int = 1


@dataclass
class SpeculativeConfig:
    method: str = "eagle"
    num_speculative_tokens: int = 4
    # e.g. {1: 5, 8: 3, 32: 1}: batch-size thresholds -> K
    num_speculative_tokens_per_batch_size: Optional[dict] = None

    def verify_with_parallel_config(self, parallel_config: ParallelConfig) -> None:
        if self.num_speculative_tokens <= 0:
            raise ValueError("num_speculative_tokens must be positive")

    def k_for_batch(self, num_reqs: int) -> int:
        if not self.num_speculative_tokens_per_batch_size:
            return self.num_speculative_tokens
        k = self.num_speculative_tokens
        for threshold, value in sorted(self.num_speculative_tokens_per_batch_size.items()):
            if num_reqs >= threshold:
                k = value
        return k


def coordinate_batch_across_dp(num_tokens: int) -> int:
    t = torch.tensor([num_tokens], dtype=torch.int32)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX, group=get_dp_group().cpu_group)
    return int(t.item())


class EagleProposer:
    def __init__(self, drafter_model, spec_config: SpeculativeConfig):
        self.model = drafter_model
        self.spec_config = spec_config

    def _run_drafter(self, hidden_states, positions):
        num_tokens = coordinate_batch_across_dp(hidden_states.shape[0])
        return self.model(hidden_states, positions, num_tokens_across_dp=num_tokens)

    def propose(self, hidden_states, positions, num_spec_tokens: int):
        draft_token_ids = []
        hidden = self._run_drafter(hidden_states, positions)
        draft_token_ids.append(hidden.argmax(-1))
        for _ in range(num_spec_tokens - 1):
            positions = positions + 1
            hidden = self._run_drafter(hidden, positions)
            draft_token_ids.append(hidden.argmax(-1))
        return torch.stack(draft_token_ids, dim=1)


class GPUModelRunner:
    def __init__(self, drafter_model, spec_config: SpeculativeConfig, parallel_config: ParallelConfig):
        self.speculative_config = spec_config
        self.parallel_config = parallel_config
        spec_config.verify_with_parallel_config(parallel_config)
        self.drafter = EagleProposer(drafter_model, spec_config)

    def _num_spec_tokens_for_step(self, scheduler_output) -> int:
        # local scheduled-request count of *this* DP rank's scheduler
        return self.speculative_config.k_for_batch(scheduler_output.num_reqs)

    def sample_tokens(self, scheduler_output, hidden_states, positions):
        k = self._num_spec_tokens_for_step(scheduler_output)
        return self.drafter.propose(hidden_states, positions, num_spec_tokens=k)  # DIVERGES
