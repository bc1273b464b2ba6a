"""
Source: https://github.com/vllm-project/vime/pull/329
Project: vime (RL trainer, Megatron actor -> vLLM rollout)
Reported: 2026-07
Backend: NCCL
Hang: Non-colocated full weight sync marks a trainer rank as a "source" when its DP rank and TP rank are 0.
With pipeline parallelism (PP=2) that is true for one rank per pipeline stage, so two trainer ranks each
create their own trainer->vLLM NCCL transfer group against the same rollout engines and broadcast into it.
The vLLM receiver keeps only one active communicator, so the later initialization replaces the earlier one:
one trainer rank broadcasts on a group nobody on the receiver side is using, and trainer and receiver wait on
different NCCL groups.
Fix: With PP>1 only one source (DP0/TP0/PP0) owns the receiver communicator; the other stages' weights are sent
one pipeline stage at a time inside a single weight-update session (stage ranks hand their shards to PP0).
"""
import torch
import torch.distributed as dist
from megatron.core import parallel_state as mpu

from slime.utils.distributed_utils import init_process_group


class UpdateWeightFromDistributed:
    def __init__(self, args, model, weights_getter):
        self.args = args
        self.model = model
        self.weights_getter = weights_getter
        self._model_update_groups = None
        self._is_src_rank = False

    def connect_rollout_engines(self, rollout_engines, master_address, master_port):
        self._is_stage_head = (
            mpu.get_data_parallel_rank(with_context_parallel=True) == 0
            and mpu.get_tensor_model_parallel_rank() == 0
        )
        # exactly one rank (PP0 stage head) owns the single receiver communicator
        self._is_src_rank = self._is_stage_head and mpu.get_pipeline_model_parallel_rank() == 0
        if not self._is_src_rank:
            return
        group_name = "vime_weight_sync"
        world_size = 1 + sum(e.num_workers for e in rollout_engines)
        for i, engine in enumerate(rollout_engines):
            engine.init_weight_transfer_group.remote(master_address, master_port, group_name, world_size)
        self._model_update_groups = init_process_group(
            backend="nccl", init_method=f"tcp://{master_address}:{master_port}",
            world_size=world_size, rank=0, group_name=group_name,
        )

    @torch.no_grad()
    def update_weights(self, rollout_engines):
        pp_size = mpu.get_pipeline_model_parallel_world_size()
        pp_group = mpu.get_pipeline_model_parallel_group()
        if self._is_src_rank:
            for engine in rollout_engines:
                engine.start_weight_update.remote()
        # one pipeline stage at a time, all inside the same weight-update session
        for stage in range(pp_size):
            if not self._is_stage_head:
                continue
            named = list(self.weights_getter(self.model)) if mpu.get_pipeline_model_parallel_rank() == stage else None
            holder = [named]
            dist.broadcast_object_list(holder, src=dist.get_global_rank(pp_group, stage), group=pp_group)
            if self._is_src_rank:
                for name, tensor in holder[0]:
                    for engine in rollout_engines:
                        engine.update_weights_from_distributed.remote(name, tensor.dtype, tensor.shape)
                    dist.broadcast(tensor.cuda(), src=0, group=self._model_update_groups)
        if self._is_src_rank:
            for engine in rollout_engines:
                engine.finish_weight_update.remote()
