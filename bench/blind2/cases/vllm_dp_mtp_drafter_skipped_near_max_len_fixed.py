"""
Source: https://github.com/vllm-project/vllm/pull/40589
Project: vLLM
Reported: 2026-04
Backend: NCCL
Hang: DeepSeek-R1 served with DP=4, TP=2 and MTP speculative decoding. After the target
forward, each DP rank checks whether its batch still fits in the drafter
(max_seq_len + num_spec_tokens <= max_model_len). On a rank whose longest sequence is
near max_model_len the check fails and the drafter (whose MoE layers run DP/EP
collectives) is skipped, while the other DP ranks run the drafter or its dummy_run and
wait for the missing rank in the expert all-to-all / DP all_reduce.
Fix: when the drafter is skipped on a rank, still call drafter.dummy_run() so it issues
the same collectives as the other DP ranks.
"""
import torch

from vllm.config import VllmConfig
from vllm.v1.spec_decode.eagle import EagleProposer


class CommonAttentionMetadata:
    def __init__(self, max_seq_len: int, num_actual_tokens: int):
        self.max_seq_len = max_seq_len
        self.num_actual_tokens = num_actual_tokens


class GPUModelRunner:
    def __init__(self, vllm_config: VllmConfig):
        self.vllm_config = vllm_config
        self.speculative_config = vllm_config.speculative_config
        self.num_spec_tokens = self.speculative_config.num_speculative_tokens
        self.max_model_len = vllm_config.model_config.max_model_len
        self.dp_size = vllm_config.parallel_config.data_parallel_size
        self.drafter = EagleProposer(vllm_config, torch.device("cuda"), self)

    def _input_fits_in_drafter(self, attn_metadata: CommonAttentionMetadata) -> bool:
        return attn_metadata.max_seq_len + self.num_spec_tokens <= self.max_model_len

    def propose_draft_token_ids(self, sampled_token_ids, hidden_states, attn_metadata):
        return self.drafter.propose(
            target_token_ids=sampled_token_ids,
            target_hidden_states=hidden_states,
            common_attn_metadata=attn_metadata,
        )

    def _model_forward(self, input_ids):
        return torch.empty(input_ids.shape[0], 7168)

    def _sample(self, hidden_states):
        return hidden_states.argmax(dim=-1)

    @torch.inference_mode()
    def execute_model(self, scheduler_output, input_ids, attn_metadata: CommonAttentionMetadata):
        hidden_states = self._model_forward(input_ids)
        sampled = self._sample(hidden_states)

        input_fits_in_drafter = self._input_fits_in_drafter(attn_metadata)
        draft_token_ids = None
        if self.speculative_config is not None and input_fits_in_drafter:
            draft_token_ids = self.propose_draft_token_ids(sampled, hidden_states, attn_metadata)
        elif self.speculative_config is not None and self.dp_size > 1:
            # Skipped on this rank: keep the drafter's DP/EP collectives in step.
            self.drafter.dummy_run(attn_metadata.num_actual_tokens)
        return sampled, draft_token_ids

    def execute_dummy_batch(self, num_tokens: int = 1):
        # Idle DP ranks: run target + drafter dummies to match the busy ranks.
        self._model_forward(torch.zeros(num_tokens, dtype=torch.long))
        if self.speculative_config is not None:
            self.drafter.dummy_run(num_tokens)
