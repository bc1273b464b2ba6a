"""
Source: https://github.com/vllm-project/vllm-ascend/pull/12195
Project: vllm-ascend (worker/v2 model runner, eager mode DP + EP)
Reported: 2026-07
Backend: HCCL
Hang: In eager mode the MoE communication method (MC2 dispatch/combine vs. all-gather / all-to-all)
  was selected from the rank's local num_tokens before the DP token counts were synchronized. DP ranks
  with different batch sizes therefore pick different MoE communication schemes and issue different
  collectives on the shared EP group in the same layer, which never match.
Fix: Select the MoE communication method after max_tokens_across_dp has been computed and base it on
  that synchronized value, so all DP ranks pick the same method.
"""
import torch

from vllm.distributed.parallel_state import get_dp_group

from vllm_ascend.ascend_forward_context import MoECommType, set_ascend_forward_context
from vllm_ascend.utils import get_mc2_tokens_capacity


class NPUModelRunner:
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        self.device = device
        self.dp_size = vllm_config.parallel_config.data_parallel_size
        self.dp_rank = vllm_config.parallel_config.data_parallel_rank
        self.mc2_tokens_capacity = get_mc2_tokens_capacity(vllm_config)

    def _select_moe_comm_method(self, num_tokens: int) -> MoECommType:
        if not self.vllm_config.parallel_config.enable_expert_parallel:
            return MoECommType.ALLGATHER
        if num_tokens <= self.mc2_tokens_capacity:
            return MoECommType.MC2
        return MoECommType.ALLTOALL

    def _sync_num_tokens_across_dp(self, num_tokens: int):
        counts = torch.zeros(self.dp_size, dtype=torch.int32, device="cpu")
        counts[self.dp_rank] = num_tokens
        torch.distributed.all_reduce(counts, group=get_dp_group().cpu_group)
        return int(counts.max().item()), counts

    def execute_model(self, scheduler_output):
        num_tokens = scheduler_output.total_num_scheduled_tokens
        input_ids, positions, attn_metadata = self._prepare_inputs(scheduler_output)
        moe_comm_type = self._select_moe_comm_method(num_tokens)  # DIVERGES
        max_tokens_across_dp, num_tokens_across_dp = self._sync_num_tokens_across_dp(num_tokens)
        with set_ascend_forward_context(attn_metadata, self.vllm_config,
                                        num_tokens=num_tokens,
                                        num_tokens_across_dp=num_tokens_across_dp,
                                        moe_comm_type=moe_comm_type):
            # every MoE layer dispatches/combines through moe_comm_type on the EP group
            return self.model(input_ids=input_ids, positions=positions)
