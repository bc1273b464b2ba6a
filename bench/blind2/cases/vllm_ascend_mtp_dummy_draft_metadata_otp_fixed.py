"""
Source: https://github.com/vllm-project/vllm-ascend/pull/13386
Project: vLLM Ascend (MTP proposer, speculative decoding on D nodes)
Reported: 2026-08
Backend: HCCL
Hang: On decode nodes some DP ranks have requests and run MtpProposer.propose(), while idle ranks run
MtpProposer.dummy_run(). The dummy path built the multi-step draft attention metadata only when the
ACL graph runtime mode was FULL; the GLM MTP draft runs eager, so idle ranks passed no metadata and the
draft attention took its short path, skipping the o_proj tensor-parallel (OTP) collectives that busy
ranks issue. The OTP group's collective sequence splits and the job later surfaces as a hang / AICore
timeout at the next target graph pre-sync.
Fix: Also build the dummy draft metadata when method == "mtp" and oproj TP is enabled, so idle and busy
ranks run the same draft attention path.
"""
import torch
from vllm.config import CUDAGraphMode
from vllm.forward_context import get_forward_context

from vllm_ascend.ascend_forward_context import set_ascend_forward_context
from vllm_ascend.distributed.parallel_state import get_otp_group
from vllm_ascend.utils import oproj_tp_enable


class AscendDSAAttention(torch.nn.Module):
    def __init__(self, impl, o_proj):
        super().__init__()
        self.impl = impl
        self.o_proj = o_proj

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        attn_metadata = get_forward_context().attn_metadata
        if attn_metadata is None:
            # profiling / dummy shortcut: no attention, no o_proj collectives
            return torch.zeros_like(hidden_states)
        out = self.impl.forward(hidden_states, attn_metadata)
        if oproj_tp_enable():
            out = get_otp_group().all_to_all(out)  # o_proj OTP collective
            out = self.o_proj(out)
            return get_otp_group().all_gather(out, dim=0)
        return self.o_proj(out)


class MtpProposer:
    def __init__(self, vllm_config, device, runner):
        self.vllm_config = vllm_config
        self.device = device
        self.runner = runner
        self.method = vllm_config.speculative_config.method
        self.num_speculative_tokens = vllm_config.speculative_config.num_speculative_tokens
        self.model = None

    def _build_draft_attn_metadata(self, num_reqs: int, num_tokens: int):
        return self.runner.attn_metadata_builder.build_for_drafting(num_reqs=num_reqs, num_tokens=num_tokens)

    def propose(self, input_ids, positions, hidden_states, num_reqs: int):
        attn_metadata = self._build_draft_attn_metadata(num_reqs, input_ids.shape[0])
        for _ in range(self.num_speculative_tokens):
            with set_ascend_forward_context(attn_metadata, self.vllm_config, num_tokens=input_ids.shape[0]):
                hidden_states = self.model(input_ids=input_ids, positions=positions, hidden_states=hidden_states)
        return hidden_states

    @torch.inference_mode()
    def dummy_run(self, num_tokens: int, aclgraph_runtime_mode: CUDAGraphMode = CUDAGraphMode.NONE):
        attn_metadata = None
        if aclgraph_runtime_mode == CUDAGraphMode.FULL or (self.method == "mtp" and oproj_tp_enable()):
            attn_metadata = self._build_draft_attn_metadata(num_reqs=1, num_tokens=num_tokens)
        input_ids = torch.zeros(num_tokens, dtype=torch.int32, device=self.device)
        positions = torch.zeros(num_tokens, dtype=torch.int64, device=self.device)
        hidden = torch.zeros(num_tokens, self.vllm_config.model_config.get_hidden_size(), device=self.device)
        for _ in range(self.num_speculative_tokens):
            with set_ascend_forward_context(attn_metadata, self.vllm_config, num_tokens=num_tokens):
                hidden = self.model(input_ids=input_ids, positions=positions, hidden_states=hidden)
