"""
Source: https://github.com/vllm-project/vllm-ascend/pull/4362
Project: vLLM Ascend (NPUModelRunner, FULL_DECODE_ONLY ACL graph, multimodal models)
Reported: 2025-11
Backend: HCCL
Hang: With DP>1 and cudagraph_mode FULL_DECODE_ONLY, idle DP ranks run _dummy_run so they keep joining
the MoE/DP collectives of the busy ranks. The dummy path refreshes the captured graph's attention
parameters with num_tokens taken from positions.shape[0]. Multimodal models use mRoPE, whose positions
tensor is [3, num_tokens], so on idle ranks num_tokens becomes 3 and the replayed graph runs with
parameters for the wrong size; the idle rank's replay no longer matches what busy ranks execute and the
DP group hangs.
Fix: Pass the dummy run's real num_tokens to update_attn_params instead of positions.shape[0].
"""
import torch
from vllm.config import CUDAGraphMode
from vllm.forward_context import get_forward_context

from vllm_ascend.ascend_forward_context import set_ascend_forward_context
from vllm_ascend.compilation.acl_graph import update_attn_dcp_pcp_params, update_attn_params


class NPUModelRunner:
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        self.device = device
        self.uses_mrope = vllm_config.model_config.uses_mrope
        self.pcp_size = vllm_config.parallel_config.prefill_context_parallel_size
        self.dcp_size = vllm_config.parallel_config.decode_context_parallel_size
        self.update_stream = torch.npu.Stream()
        self.model = None
        self.max_num_tokens = vllm_config.scheduler_config.max_num_batched_tokens
        if self.uses_mrope:
            self.mrope_positions = torch.zeros(3, self.max_num_tokens + 1, dtype=torch.int64, device=device)
        self.positions = torch.zeros(self.max_num_tokens, dtype=torch.int64, device=device)

    def _get_positions(self, num_tokens: int) -> torch.Tensor:
        if self.uses_mrope:
            return self.mrope_positions[:, :num_tokens]
        return self.positions[:num_tokens]

    def _generate_dummy_run_hidden_states(self, input_ids, positions, num_tokens, aclgraph_runtime_mode):
        hidden_states = self.model(input_ids=input_ids, positions=positions)
        forward_context = get_forward_context()
        if aclgraph_runtime_mode == CUDAGraphMode.FULL:
            if self.pcp_size * self.dcp_size > 1:
                update_attn_dcp_pcp_params(self.update_stream, forward_context, num_tokens)
            else:
                update_attn_params(self.update_stream, forward_context, num_tokens)
        return hidden_states

    @torch.inference_mode()
    def _dummy_run(self, num_tokens: int, aclgraph_runtime_mode: CUDAGraphMode = CUDAGraphMode.NONE):
        input_ids = torch.zeros(num_tokens, dtype=torch.int32, device=self.device)
        positions = self._get_positions(num_tokens)
        with set_ascend_forward_context(
            None, self.vllm_config, num_tokens=num_tokens, aclgraph_runtime_mode=aclgraph_runtime_mode
        ):
            return self._generate_dummy_run_hidden_states(input_ids, positions, num_tokens, aclgraph_runtime_mode)

    def execute_dummy_batch(self):
        # idle DP rank keeps stepping with the busy ranks
        self._dummy_run(1, aclgraph_runtime_mode=CUDAGraphMode.FULL)
