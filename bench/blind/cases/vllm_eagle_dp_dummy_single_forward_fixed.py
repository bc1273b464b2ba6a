"""
Source: https://github.com/vllm-project/vllm/pull/26217
Project: vLLM (v1/spec_decode/eagle.py)
Reported: 2025-10
Backend: NCCL
Hang: With EAGLE speculative decoding and DP, set_forward_context all-reduces the token counts across
  the DP group each time it is entered. propose() enters it once for the first draft token and then
  num_speculative_tokens-1 more times, but dummy_run (used by idle DP ranks) enters it only once. Ranks
  doing real proposals and ranks doing dummy runs issue different numbers of DP all_reduces, fall out of
  step, and hang.
Fix: Make dummy_run perform the same number of forward passes (one per speculative token) as propose.
"""
import torch

from vllm.config import VllmConfig
from vllm.forward_context import set_forward_context


class EagleProposer:
    def __init__(self, vllm_config: VllmConfig, device: torch.device, runner=None):
        self.vllm_config = vllm_config
        self.device = device
        self.runner = runner
        self.num_speculative_tokens = vllm_config.speculative_config.num_speculative_tokens
        max_tokens = vllm_config.scheduler_config.max_num_batched_tokens
        self.input_ids = torch.zeros(max_tokens, dtype=torch.int32, device=device)
        self.positions = torch.zeros(max_tokens, dtype=torch.int64, device=device)
        self.hidden_states = torch.zeros(
            (max_tokens, vllm_config.model_config.get_hidden_size()), device=device)

    def propose(self, target_token_ids, target_positions, target_hidden_states,
                next_token_ids, common_attn_metadata, sampling_metadata):
        num_tokens = target_token_ids.shape[0]
        self.input_ids[:num_tokens] = target_token_ids
        self.positions[:num_tokens] = target_positions
        self.hidden_states[:num_tokens] = target_hidden_states
        attn_metadata = self._build_attn_metadata(common_attn_metadata)
        with set_forward_context(attn_metadata, self.vllm_config, num_tokens=num_tokens):
            last_hidden_states, hidden_states = self.model(
                input_ids=self.input_ids[:num_tokens],
                positions=self.positions[:num_tokens],
                hidden_states=self.hidden_states[:num_tokens])
        draft = self.model.compute_logits(last_hidden_states).argmax(dim=-1)
        drafts = [draft]
        batch_size = draft.shape[0]
        for token_index in range(self.num_speculative_tokens - 1):
            self.input_ids[:batch_size] = draft
            with set_forward_context(attn_metadata, self.vllm_config, num_tokens=batch_size):
                last_hidden_states, hidden_states = self.model(
                    input_ids=self.input_ids[:batch_size],
                    positions=self.positions[:batch_size],
                    hidden_states=hidden_states[:batch_size])
            draft = self.model.compute_logits(last_hidden_states).argmax(dim=-1)
            drafts.append(draft)
        return torch.stack(drafts, dim=1)

    @torch.inference_mode()
    def dummy_run(self, num_tokens: int) -> None:
        # Mirror propose(): one forward (and one DP sync) per speculative token.
        for _ in range(self.num_speculative_tokens):
            with set_forward_context(None, self.vllm_config, num_tokens=num_tokens):
                self.model(input_ids=self.input_ids[:num_tokens],
                           positions=self.positions[:num_tokens],
                           hidden_states=self.hidden_states[:num_tokens])
