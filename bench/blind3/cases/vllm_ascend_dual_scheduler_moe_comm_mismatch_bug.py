"""
Source: https://github.com/vllm-project/vllm-ascend/issues/8975 (fix: https://github.com/vllm-project/vllm-ascend/pull/9409)
Project: vllm-ascend
Reported: 2026-05
Backend: HCCL
Hang: On PD-disaggregated decode nodes (kv_consumer) with recompute_scheduler_enable, the model runner skips
the DP all_reduce of num_tokens and assumes every DP rank will pick MC2 for the MoE layers. With the
BalanceScheduler also enabled, a DP rank can receive a batch larger than the MC2 token capacity, so that rank
selects the All2AllV path while its peers select MC2; the EP group then sits in two different AlltoAll
collectives and all 32 ranks hang.
Fix: Reject the configuration: BalanceScheduler and RecomputeScheduler may not be enabled together
(check in NPUPlatform.check_and_update_config), so the "every rank uses MC2" assumption holds again.
"""
from enum import Enum

import torch
import torch.distributed as dist
import torch_npu  # noqa: F401

import vllm_ascend.envs as envs_ascend
from vllm_ascend.ascend_config import get_ascend_config, init_ascend_config
from vllm.distributed import get_dp_group, get_ep_group


class MoECommType(Enum):
    ALLGATHER = 0
    MC2 = 1
    ALLTOALL = 2


def select_moe_comm_method(num_tokens, vllm_config):
    capacity = vllm_config.scheduler_config.mc2_tokens_capacity
    if num_tokens <= capacity:
        return MoECommType.MC2
    return MoECommType.ALLTOALL


class NPUPlatform:
    @classmethod
    def check_and_update_config(cls, vllm_config):
        ascend_config = init_ascend_config(vllm_config)
        if envs_ascend.VLLM_ASCEND_BALANCE_SCHEDULING:
            kv_role = getattr(vllm_config.kv_transfer_config, "kv_role", None)
            vllm_config.scheduler_config.scheduler_cls = "vllm_ascend.core.balance_scheduler.BalanceScheduler"
        if ascend_config.recompute_scheduler_enable:
            vllm_config.scheduler_config.scheduler_cls = "vllm_ascend.core.recompute_scheduler.RecomputeScheduler"


class FusedMoEComm:
    def __init__(self, vllm_config):
        self.vllm_config = vllm_config
        self.ep_group = get_ep_group().device_group

    def dispatch(self, hidden_states, num_tokens):
        method = select_moe_comm_method(num_tokens, self.vllm_config)
        if method == MoECommType.MC2:
            out = torch.empty_like(hidden_states)
            dist.all_to_all_single(out, hidden_states, group=self.ep_group)  # DIVERGES
            return out
        # All2AllV: exchange split sizes first, then the tokens
        splits = torch.tensor([num_tokens], dtype=torch.int64, device=hidden_states.device)
        gathered = [torch.empty_like(splits) for _ in range(dist.get_world_size(self.ep_group))]
        dist.all_gather(gathered, splits, group=self.ep_group)  # DIVERGES
        out = torch.empty_like(hidden_states)
        dist.all_to_all_single(out, hidden_states, group=self.ep_group)
        return out


class NPUModelRunner:
    def __init__(self, vllm_config):
        self.vllm_config = vllm_config
        self.ascend_config = get_ascend_config()
        self.is_kv_consumer = vllm_config.kv_transfer_config.is_kv_consumer
        self.dp_size = vllm_config.parallel_config.data_parallel_size
        self.in_profile_run = False
        self.moe_comm = FusedMoEComm(vllm_config)

    def _skip_dp_sync(self):
        # decode nodes with recompute scheduler are assumed to always stay under the MC2 capacity
        return self.is_kv_consumer and self.ascend_config.recompute_scheduler_enable

    def _sync_metadata_across_dp(self, num_tokens):
        if self._skip_dp_sync() and not self.in_profile_run:
            return num_tokens, torch.tensor([num_tokens] * self.dp_size, dtype=torch.int32)
        t = torch.tensor([num_tokens], dtype=torch.int32)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=get_dp_group().cpu_group)
        return int(t.item()), t.repeat(self.dp_size)

    def execute_model(self, scheduler_output, hidden_states):
        num_tokens = scheduler_output.total_num_scheduled_tokens  # per-rank batch from BalanceScheduler
        num_tokens, _ = self._sync_metadata_across_dp(num_tokens)
        return self.moe_comm.dispatch(hidden_states, num_tokens)
