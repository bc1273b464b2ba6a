"""
Source: https://github.com/vllm-project/vllm-ascend/pull/14304
Project: vllm-ascend
Reported: 2026-08
Backend: HCCL
Hang: In PD-disaggregated MoE serving, decode (KV consumer) workers skip the DP metadata
all-reduce when the selected MoE communication method is an MC2 variant, because MC2
tolerates per-rank token counts; each DP rank then runs the MoE layer with its own
unpadded num_tokens. CANN MegaMoe (used for FUSED_MC2 when available) requires every
rank of its communication domain to feed the same number of tokens, so ranks enter the
MegaMoe dispatch/combine with different sizes and the collective silently mixes data
(incorrect MoE outputs), the "size mismatch" flavour of a divergent collective.
Fix: when MegaMoe is available and the decode or prefill path resolves to FUSED_MC2, keep
the DP metadata synchronisation so all ranks are padded to a uniform token count.
"""
import torch
import torch.distributed as dist
import torch_npu  # noqa: F401

from vllm.distributed.parallel_state import get_dp_group
from vllm_ascend.ascend_forward_context import MoECommType
from vllm_ascend.utils import is_megamoe_available, select_moe_comm_method


class NPUModelRunner:
    def __init__(self, vllm_config):
        self.vllm_config = vllm_config
        pc = vllm_config.parallel_config
        self.dp_size = pc.data_parallel_size
        self.dp_rank = pc.data_parallel_rank
        kv_cfg = vllm_config.kv_transfer_config
        self.is_kv_consumer = kv_cfg is not None and kv_cfg.kv_role == "kv_consumer"
        sched = vllm_config.scheduler_config
        self.max_num_reqs = sched.max_num_seqs
        self.max_num_batched_tokens = sched.max_num_batched_tokens
        self.uniform_decode_query_len = 1

    def _skip_all_reduce_across_dp_group(self) -> bool:
        if not self.is_kv_consumer:
            return False
        decode_method = select_moe_comm_method(
            self.max_num_reqs * self.uniform_decode_query_len, self.vllm_config)
        prefill_method = select_moe_comm_method(self.max_num_batched_tokens, self.vllm_config)
        mc2_like = {MoECommType.MC2, MoECommType.FUSED_MC2}
        return decode_method in mc2_like and prefill_method in mc2_like

    def _sync_metadata_across_dp(self, num_tokens: int, with_prefill: bool):
        if self.dp_size == 1:
            return num_tokens, None, with_prefill
        if self._skip_all_reduce_across_dp_group():
            # each DP rank keeps its own, unpadded token count
            across = torch.tensor([num_tokens] * self.dp_size, dtype=torch.int32)
            return num_tokens, across, with_prefill  # DIVERGES
        meta = torch.zeros(2, self.dp_size, dtype=torch.int32)
        meta[0][self.dp_rank] = num_tokens
        meta[1][self.dp_rank] = int(with_prefill)
        dist.all_reduce(meta, group=get_dp_group().cpu_group)
        max_tokens = int(meta[0].max())
        return max_tokens, torch.full((self.dp_size,), max_tokens, dtype=torch.int32), \
            bool(meta[1].any())

    def execute_model(self, scheduler_output, with_prefill: bool):
        n = scheduler_output.total_num_scheduled_tokens
        num_input_tokens, across_dp, with_prefill = self._sync_metadata_across_dp(n, with_prefill)
        # MoE layers dispatch/combine num_input_tokens rows through the EP group
        return self._run_model(num_input_tokens, across_dp)

    def _run_model(self, num_tokens, across_dp):
        return torch.empty(num_tokens, 7168)
