"""
Source: https://github.com/vllm-project/vllm-ascend/pull/12036
Project: vllm-ascend (MTP proposer with decode context parallel + data parallel)
Reported: 2026-07
Backend: HCCL
Hang: With DCP and DP, MTP num_speculative_tokens=3 and a single request, DP rank 0 runs
the prefill step. For a DCP prefill the MTP proposer executes only draft step 0 and fills
steps 1-2 by copying step 0's tokens. DP rank 1 has no request and runs a dummy run, where
is_prefill is False, so it executes all three draft steps. Every draft step is a MoE
forward with DP/EP collectives, so rank 0 issues one step's collectives and rank 1 three;
communication gets stuck.
Fix: make the DCP prefill path also execute the MTP step num_speculative_tokens times,
so prefill ranks and dummy-running ranks issue the same number of draft forwards.
"""
import torch
import torch_npu  # noqa: F401

from vllm_ascend.spec_decode.mtp_proposer import MtpProposer as _BaseMtpProposer


class MtpProposer(_BaseMtpProposer):
    def __init__(self, vllm_config, device, runner):
        super().__init__(vllm_config, device, runner)
        self.num_speculative_tokens = vllm_config.speculative_config.num_speculative_tokens
        self.dcp_size = vllm_config.parallel_config.decode_context_parallel_size

    def _draft_step(self, input_ids, positions, hidden_states, num_tokens):
        # one MoE forward of the MTP layer: DP/EP dispatch + combine inside
        return self.model(input_ids=input_ids[:num_tokens], positions=positions[:num_tokens],
                          hidden_states=hidden_states[:num_tokens])

    def _propose(self, input_ids, positions, hidden_states, num_tokens, is_prefill: bool):
        draft_ids = []
        hidden = self._draft_step(input_ids, positions, hidden_states, num_tokens)
        draft_ids.append(hidden.argmax(dim=-1))
        if is_prefill and self.dcp_size > 1:
            # DCP prefill: later steps are copies of step 0, no further forward
            for _ in range(1, self.num_speculative_tokens):  # DIVERGES
                draft_ids.append(draft_ids[0].clone())
        else:
            for _ in range(1, self.num_speculative_tokens):
                hidden = self._draft_step(draft_ids[-1], positions + 1, hidden, num_tokens)
                draft_ids.append(hidden.argmax(dim=-1))
        return torch.stack(draft_ids, dim=-1)

    def generate_token_ids(self, input_ids, positions, hidden_states, num_tokens, attn_metadata):
        return self._propose(input_ids, positions, hidden_states, num_tokens,
                             is_prefill=attn_metadata.num_prefills > 0)

    def dummy_run(self, num_tokens: int):
        # idle DP rank: no request, treated as decode -> runs every draft step
        ids = torch.zeros(num_tokens, dtype=torch.long, device=self.device)
        pos = torch.zeros(num_tokens, dtype=torch.long, device=self.device)
        hid = torch.zeros(num_tokens, self.hidden_size, device=self.device)
        self._propose(ids, pos, hid, num_tokens, is_prefill=False)
