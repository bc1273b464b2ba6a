"""
Source: https://github.com/vllm-project/vllm-ascend/issues/5219
Project: vLLM Ascend (vllm_ascend/distributed/parallel_state.py)
Reported: 2025-12
Backend: HCCL
Hang: init_ascend_model_parallel builds the MC2 (MoE dispatch/combine) and PCP groups from
all_ranks = arange(world_size).reshape(-1, dp * pcp * tp) and takes its rows as groups, ignoring the
pipeline dimension. vLLM lays ranks out as ExternalDP x DP x PP x PCP x TP, so with PP > 1 a row mixes
ranks of different pipeline stages: stage-0 ranks issue MC2 all-to-all for stage-0 MoE layers while
their group peers are running another stage's layers (or waiting on PP recv), so the MC2 collectives
never pair up (DP2 x PP4 x EP crashes/hangs at start-up).
Fix: Build the MC2 group like vLLM's EP group: reshape with the PP axis explicit and group the ranks
that share a PP stage (PR #7291).
"""
import torch
from vllm.config import ParallelConfig
from vllm.distributed.parallel_state import GroupCoordinator, get_world_group, init_model_parallel_group

_MC2: GroupCoordinator | None = None
_PCP: GroupCoordinator | None = None


def get_mc2_group() -> GroupCoordinator:
    assert _MC2 is not None, "mc2 group is not initialized"
    return _MC2


def init_ascend_model_parallel(parallel_config: ParallelConfig) -> None:
    world_size = torch.distributed.get_world_size()
    backend = torch.distributed.get_backend(get_world_group().device_group)
    global_tp_size = parallel_config.tensor_parallel_size
    global_dp_size = parallel_config.data_parallel_size
    global_pp_size = parallel_config.pipeline_parallel_size
    pcp_size = parallel_config.prefill_context_parallel_size

    # The layout of all ranks: ExternalDP * DP * PP * PCP * TP (same as vLLM)
    all_ranks = torch.arange(world_size).reshape(-1, global_dp_size, global_pp_size, pcp_size, global_tp_size)

    global _MC2
    # like vLLM's EP group: ranks of one PP stage across DP * PCP * TP
    mc2_ranks = all_ranks.transpose(1, 2).reshape(-1, global_dp_size * pcp_size * global_tp_size)
    group_ranks = [row.tolist() for row in mc2_ranks.unbind(0)]
    _MC2 = init_model_parallel_group(group_ranks, get_world_group().local_rank, backend, group_name="mc2")

    global _PCP
    pcp_ranks = all_ranks.transpose(3, 4).reshape(-1, pcp_size)
    _PCP = init_model_parallel_group(
        [r.tolist() for r in pcp_ranks.unbind(0)], get_world_group().local_rank, backend, group_name="pcp"
    )


class TokenDispatcherWithMC2:
    def __init__(self):
        group = get_mc2_group()
        self.ep_world_size = group.world_size
        self.ep_rank_id = group.rank_in_group
        self.moe_all_to_all_group_name = group.device_group._get_backend(
            torch.device("npu")
        ).get_hccl_comm_name(group.rank_in_group)

    def token_dispatch(self, hidden_states, topk_ids, topk_weights):
        import torch_npu

        # MC2 dispatch: HCCL all-to-all inside the fused op over the mc2 group
        return torch_npu.npu_moe_distribute_dispatch(
            x=hidden_states,
            expert_ids=topk_ids,
            group_ep=self.moe_all_to_all_group_name,
            ep_world_size=self.ep_world_size,
            ep_rank_id=self.ep_rank_id,
        )
