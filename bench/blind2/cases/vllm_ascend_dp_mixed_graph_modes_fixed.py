"""
Source: https://github.com/vllm-project/vllm-ascend/pull/5979
Project: vllm-ascend
Reported: 2026-01
Backend: HCCL
Hang: Each DP rank picks its ACL graph runtime mode (FULL / PIECEWISE / NONE) from its
own batch through cudagraph_dispatcher.dispatch (uniform decode or not, LoRA or not).
DP ranks can therefore run the MoE forward in different graph modes in the same step:
one rank replays a captured full graph whose communication (dispatch/combine all-to-all
over the EP group) is baked into the graph, while another runs the same layer eagerly or
piecewise with differently issued communication, so the EP collectives of the two ranks
do not pair up and the step hangs or corrupts data.
Fix: all-reduce (MIN) the locally wanted graph mode across DP ranks together with the
other DP metadata (synced_ag_mode) and disable full-graph dispatch on every rank when
any rank cannot use it.
"""
import torch
import torch.distributed as dist
import torch_npu  # noqa: F401

from vllm.config import CUDAGraphMode
from vllm.distributed.parallel_state import get_dp_group
from vllm.forward_context import set_forward_context


class NPUModelRunner:
    def __init__(self, vllm_config, cudagraph_dispatcher):
        self.vllm_config = vllm_config
        self.dp_size = vllm_config.parallel_config.data_parallel_size
        self.dp_rank = vllm_config.parallel_config.data_parallel_rank
        self.cudagraph_dispatcher = cudagraph_dispatcher
        self.input_batch = None

    def _sync_metadata_across_dp(self, num_tokens: int, with_prefill: bool, ag_mode: int):
        if self.dp_size == 1:
            return num_tokens, None, with_prefill, ag_mode
        meta = torch.zeros(3, self.dp_size, dtype=torch.int32)
        meta[0][self.dp_rank] = num_tokens
        meta[1][self.dp_rank] = int(with_prefill)
        meta[2][self.dp_rank] = ag_mode
        dist.all_reduce(meta, group=get_dp_group().cpu_group)
        # minimum graph mode wanted by any DP rank
        return int(meta[0].max()), meta[0], bool(meta[1].any()), int(meta[2].min())

    def _local_uniform_decode(self, max_query_len: int) -> bool:
        return max_query_len == 1 and self.input_batch.num_reqs > 0

    def execute_model(self, scheduler_output, max_query_len: int):
        num_input_tokens = scheduler_output.total_num_scheduled_tokens
        with_prefill = max_query_len > 1
        uniform_decode = self._local_uniform_decode(max_query_len)
        has_lora = len(self.input_batch.lora_id_to_lora_request) > 0
        local_ag_mode = (CUDAGraphMode.FULL.value if uniform_decode and not has_lora
                         else CUDAGraphMode.PIECEWISE.value)
        num_input_tokens, num_tokens_across_dp, with_prefill, synced_ag_mode = \
            self._sync_metadata_across_dp(num_input_tokens, with_prefill, local_ag_mode)

        # graph mode limited by the agreed minimum across DP ranks
        aclgraph_runtime_mode, batch_descriptor = self.cudagraph_dispatcher.dispatch(
            num_tokens=num_input_tokens, uniform_decode=uniform_decode, has_lora=has_lora,
            disable_full=synced_ag_mode <= CUDAGraphMode.PIECEWISE.value)

        with set_forward_context(None, self.vllm_config,
                                 num_tokens=num_input_tokens,
                                 num_tokens_across_dp=num_tokens_across_dp,
                                 aclgraph_runtime_mode=aclgraph_runtime_mode,
                                 batch_descriptor=batch_descriptor):
            return self._run_model(num_input_tokens, aclgraph_runtime_mode)

    def _run_model(self, num_tokens, mode):
        # FULL: replay a captured graph containing the MoE dispatch/combine all-to-all
        # PIECEWISE/NONE: MoE communication issued eagerly outside the graph
        return torch.empty(num_tokens, 4096)
