"""
Source: https://github.com/vllm-project/vllm-ascend/pull/10147 (upstream report: https://github.com/vllm-project/vllm/issues/44185)
Project: vllm-ascend
Reported: 2026-06
Backend: HCCL
Hang: With DP + EP and MTP speculative decoding, after sampling each DP rank decides locally whether to run the
MTP drafter: if a request's length plus num_speculative_tokens would exceed max_model_len, input_fits_in_drafter
is False and the rank skips propose_draft_token_ids. Peers whose requests are shorter run the drafter forward,
whose MoE layers issue EP dispatch/combine collectives, so the rank near max length is missing from those
collectives and the DP group hangs after the client already got its response.
Fix: Drop the rank-local input_fits_in_drafter gate so every DP rank always runs the drafter step (the draft
positions beyond the limit are masked instead).
"""
import torch
import torch_npu  # noqa: F401

from vllm.config import VllmConfig
from vllm_ascend.spec_decode.mtp_proposer import MtpProposer
from vllm_ascend.worker.model_runner_v1 import NPUModelRunner as _BaseRunner


class NPUModelRunner(_BaseRunner):
    def __init__(self, vllm_config: VllmConfig, device):
        super().__init__(vllm_config, device)
        self.max_model_len = vllm_config.model_config.max_model_len
        self.num_spec_tokens = vllm_config.speculative_config.num_speculative_tokens
        self.drafter = MtpProposer(vllm_config, device, self)

    def _input_fits_in_drafter(self, spec_decode_metadata) -> bool:
        # longest sequence on THIS dp rank
        max_seq_len = int(self.seq_lens_cpu[: self.input_batch.num_reqs].max())
        return max_seq_len + self.num_spec_tokens <= self.max_model_len

    def propose_draft_token_ids(self, valid_sampled_token_ids, sampling_metadata, hidden_states,
                                spec_decode_metadata, attn_metadata):
        # drafter forward: MTP layer is a MoE block -> EP all_to_all dispatch/combine over HCCL
        return self.drafter.generate_token_ids(
            valid_sampled_token_ids, sampling_metadata, hidden_states, spec_decode_metadata, attn_metadata
        )

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        if not scheduler_output.total_num_scheduled_tokens:
            # idle DP rank: keeps the collectives aligned with a dummy forward (+ dummy drafter)
            self._dummy_run(1)
            self.drafter.dummy_run(1)
            return None

        hidden_states, attn_metadata, spec_decode_metadata = self._run_target_model(scheduler_output)
        valid_sampled_token_ids, sampling_metadata = self._sample(hidden_states, spec_decode_metadata)

        draft_token_ids = None
        input_fits_in_drafter = self._input_fits_in_drafter(spec_decode_metadata)
        if input_fits_in_drafter:  # DIVERGES  (per-rank sequence lengths)
            draft_token_ids = self.propose_draft_token_ids(
                valid_sampled_token_ids, sampling_metadata, hidden_states, spec_decode_metadata, attn_metadata
            )
        return self._build_output(valid_sampled_token_ids, draft_token_ids)
