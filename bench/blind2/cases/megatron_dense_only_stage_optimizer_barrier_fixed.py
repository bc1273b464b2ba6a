"""
Source: https://github.com/NVIDIA/Megatron-LM/issues/1462
Project: Megatron-LM (megatron/core/optimizer/__init__.py, distrib_optimizer.py)
Reported: 2025-03
Backend: NCCL
Hang: get_megatron_optimizer builds one DistributedOptimizer for the dense parameters and, only when
the local model chunk has expert parameters, a second one for the MoE parameters. With a DeepSeek-V3
style layout where the first pipeline stage holds only dense layers, that stage builds one optimizer
while the MoE stages build two. DistributedOptimizer's setup ends its buffer logging with a
torch.distributed.barrier() on the default group, so the dense-only stage issues one barrier fewer
than everybody else and the job hangs during optimizer construction.
Fix (thread proposes it; merged MR not shown): Build the expert optimizer on every rank, empty when
the stage has no expert parameters, so all ranks run the same setup collectives.
"""
import logging

import torch
from megatron.core import parallel_state
from megatron.core.optimizer.optimizer import ChainedOptimizer
from megatron.core.optimizer.optimizer_config import OptimizerConfig

logger = logging.getLogger(__name__)


class DistributedOptimizer:
    def __init__(self, optimizer, config: OptimizerConfig, model_chunks, per_model_buffers, data_parallel_group):
        self.optimizer = optimizer
        self.config = config
        self.model_chunks = model_chunks
        self.buffers = [b for bufs in per_model_buffers.values() for b in bufs]
        self.data_parallel_group = data_parallel_group
        self._log_buffer_info()

    def _log_buffer_info(self):
        if torch.distributed.get_rank() == 0:
            for i, buf in enumerate(self.buffers):
                logger.info(f"Params for bucket {i} ({buf.numel} elements)")
        torch.distributed.barrier()  # every constructed optimizer ends with a world barrier


def _get_param_groups(model_chunks, config, expert: bool):
    groups = []
    for chunk in model_chunks:
        params = [p for n, p in chunk.named_parameters() if getattr(p, "allreduce", True) != expert]
        if params:
            groups.append({"params": params, "is_expert_parallel": expert})
    return groups


def _get_megatron_optimizer_based_on_param_groups(config, model_chunks, param_groups, per_model_buffers, dp_group):
    optimizer = torch.optim.AdamW(param_groups, lr=config.lr, weight_decay=config.weight_decay)
    return DistributedOptimizer(optimizer, config, model_chunks, per_model_buffers, dp_group)


def get_megatron_optimizer(config: OptimizerConfig, model_chunks):
    optimizers = []
    dense_param_groups = _get_param_groups(model_chunks, config, expert=False)
    dense_buffers = {i: chunk.buffers for i, chunk in enumerate(model_chunks)}
    optimizers.append(
        _get_megatron_optimizer_based_on_param_groups(
            config, model_chunks, dense_param_groups, dense_buffers,
            parallel_state.get_data_parallel_group(with_context_parallel=True),
        )
    )
    moe_param_groups = _get_param_groups(model_chunks, config, expert=True)
    # build it on every rank (empty on dense-only stages) so setup collectives match
    if not moe_param_groups:
        moe_param_groups = [{"params": [], "is_expert_parallel": True}]
    expert_buffers = {i: chunk.expert_parallel_buffers for i, chunk in enumerate(model_chunks)}
    optimizers.append(
        _get_megatron_optimizer_based_on_param_groups(
            config, model_chunks, moe_param_groups, expert_buffers,
            parallel_state.get_expert_data_parallel_group(),
        )
    )
    if len(optimizers) == 1:
        return optimizers[0]
    return ChainedOptimizer(optimizers)
