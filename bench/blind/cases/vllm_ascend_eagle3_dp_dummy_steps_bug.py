"""
Source: https://github.com/vllm-project/vllm-ascend/pull/5105
Project: vllm-ascend (spec_decode/eagle_proposer.py)
Reported: 2025-12
Backend: HCCL
Hang: With eagle3 speculative decoding and DP > 1, a DP rank with requests runs _propose, which enters
  the draft model once for the first token and then num_speculative_tokens-1 more times, each inside
  set_ascend_forward_context (which all-reduces the token counts over the DP group). An idle DP rank
  runs dummy_run, which enters the draft model only once. The DP ranks thus issue a different number of
  DP all_reduce calls per step and drift out of phase until they block on each other.
Fix: Make dummy_run loop num_speculative_tokens times, opening a forward context (and its DP sync) and
  running the draft model and dummy logits in each iteration, like _propose.
"""
from typing import Optional

import torch

from vllm.config import VllmConfig

from vllm_ascend.ascend_forward_context import set_ascend_forward_context
from vllm_ascend.spec_decode.interface import Proposer


class EagleProposer(Proposer):
    def __init__(self, vllm_config: VllmConfig, device: torch.device, runner=None):
        self.vllm_config = vllm_config
        self.device = device
        self.runner = runner
        self.num_speculative_tokens = vllm_config.speculative_config.num_speculative_tokens
        max_tokens = vllm_config.scheduler_config.max_num_batched_tokens
        hidden = vllm_config.model_config.get_hidden_size()
        self.input_ids = torch.zeros(max_tokens, dtype=torch.int32, device=device)
        self.positions = torch.zeros(max_tokens, dtype=torch.int64, device=device)
        self.hidden_states = torch.zeros((max_tokens, hidden), device=device)

    @torch.inference_mode()
    def dummy_run(self, num_tokens: int, with_prefill: bool = False,
                  num_tokens_across_dp: Optional[torch.Tensor] = None,
                  dummy_compute_logits=lambda hidden_states: None):
        with set_ascend_forward_context(None, self.vllm_config,
                                        num_tokens=num_tokens,
                                        num_tokens_across_dp=num_tokens_across_dp):  # DIVERGES
            self.model(input_ids=self.input_ids[:num_tokens],
                       positions=self.positions[:num_tokens],
                       hidden_states=self.hidden_states[:num_tokens])
            dummy_compute_logits(self.hidden_states)

    def _propose(self, target_token_ids, target_positions, target_hidden_states,
                 next_token_ids, attn_metadata, num_tokens: int):
        self.input_ids[:num_tokens] = target_token_ids
        self.positions[:num_tokens] = target_positions
        self.hidden_states[:num_tokens] = target_hidden_states
        with set_ascend_forward_context(attn_metadata, self.vllm_config, num_tokens=num_tokens):
            last_hidden, hidden = self.model(input_ids=self.input_ids[:num_tokens],
                                             positions=self.positions[:num_tokens],
                                             hidden_states=self.hidden_states[:num_tokens])
        draft_token_ids = self.model.compute_logits(last_hidden).argmax(dim=-1)
        drafts = [draft_token_ids]
        batch_size = draft_token_ids.shape[0]
        for _ in range(self.num_speculative_tokens - 1):
            self.input_ids[:batch_size] = draft_token_ids
            with set_ascend_forward_context(attn_metadata, self.vllm_config, num_tokens=batch_size):
                last_hidden, hidden = self.model(input_ids=self.input_ids[:batch_size],
                                                 positions=self.positions[:batch_size],
                                                 hidden_states=hidden[:batch_size])
            draft_token_ids = self.model.compute_logits(last_hidden).argmax(dim=-1)
            drafts.append(draft_token_ids)
        return torch.stack(drafts, dim=1)
