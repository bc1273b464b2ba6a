"""
Source: https://github.com/vllm-project/vllm/pull/49027
Project: vLLM (V1 GPUModelRunner, MTP speculative decoding)
Reported: 2026-07
Backend: NCCL
Hang: Under TP>1 every rank decides by itself, in sample_tokens, whether the drafter pass fits
(max_seq_len + num_spec_tokens <= max_model_len). max_seq_len comes from this rank's own rejection
sampling, so near the context ceiling a bit-level difference in per-rank compute gives one TP rank a
different accepted-token count: rank A launches the drafter's TP collectives, rank B skips them. NCCL
pairs by issue order, so the group either blocks at the next shape-unequal collective or runs misaligned
(mixed activations) until it wedges.
Fix: Reduce the gate across the TP group (MIN over the CPU group) before launching the drafter, so all
TP ranks take the same branch.
"""
import torch
import torch.distributed as dist
from vllm.distributed.parallel_state import get_tp_group


class GPUModelRunner:
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        self.device = device
        self.max_model_len = vllm_config.model_config.max_model_len
        self.num_spec_tokens = vllm_config.speculative_config.num_speculative_tokens
        self.drafter = None
        self.input_batch = None
        self._draft_token_ids = None

    def _input_fits_in_drafter(self, spec_decode_metadata) -> bool:
        max_seq_len = int(self.input_batch.num_tokens_no_spec[: self.input_batch.num_reqs].max())
        return max_seq_len + self.num_spec_tokens <= self.max_model_len

    def _update_states_after_sampling(self, sampler_output):
        # accepted counts come from this rank's local rejection sampling
        accepted = sampler_output.num_accepted_tokens.cpu()
        for i in range(self.input_batch.num_reqs):
            self.input_batch.num_tokens_no_spec[i] += int(accepted[i]) + 1

    def propose_draft_token_ids(self, sampled_token_ids, hidden_states, spec_decode_metadata):
        # drafter forward: vocab-parallel embedding, TP all-reduces, logits all-gather
        return self.drafter.propose(
            target_token_ids=sampled_token_ids,
            target_hidden_states=hidden_states,
            common_attn_metadata=spec_decode_metadata,
        )

    @torch.inference_mode()
    def sample_tokens(self, logits, hidden_states, spec_decode_metadata, sampler):
        sampler_output = sampler(logits=logits, spec_decode_metadata=spec_decode_metadata)
        self._update_states_after_sampling(sampler_output)
        input_fits_in_drafter = self._input_fits_in_drafter(spec_decode_metadata)
        if input_fits_in_drafter:  # DIVERGES: per-rank gate, TP ranks can disagree at the ceiling
            self._draft_token_ids = self.propose_draft_token_ids(
                sampler_output.sampled_token_ids, hidden_states, spec_decode_metadata
            )
        else:
            self._draft_token_ids = None
        return sampler_output
