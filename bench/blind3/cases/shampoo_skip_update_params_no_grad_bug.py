"""
Source: https://github.com/facebookresearch/optimizers/pull/149
Project: facebookresearch/optimizers (Distributed Shampoo)
Reported: 2025-04
Backend: NCCL
Hang: DistributedShampoo.step() skipped the per-group work, including Distributor.update_params(), on ranks
whose parameter group had no gradients in this step. In the DDP / HSDP distributors update_params() ends with an
all_gather_into_tensor of the updated parameter blocks across the distributed group, so ranks with gradients
block in that all-gather while ranks without gradients never join it and the optimizer step hangs.
Fix: Remove the "no gradients -> skip" shortcut so every rank always calls update_params(); guard the
torch._foreach_* calls against empty lists instead.
"""
from typing import Any, Dict, List

import torch
import torch.distributed as dist
from torch.optim.optimizer import Optimizer

from distributed_shampoo.utils.shampoo_ddp_distributor import DDPDistributor


class DDPDistributorSketch(DDPDistributor):
    def __init__(self, param_group: Dict[str, Any], dist_group: dist.ProcessGroup):
        self._param_group = param_group
        self._dist_group = dist_group
        self._global_buffer = None
        self._local_blocks: List[torch.Tensor] = []

    def update_params(self, masked_blocked_search_directions: List[torch.Tensor]) -> None:
        if masked_blocked_search_directions:
            torch._foreach_add_(self._local_blocks, masked_blocked_search_directions)
        # every rank contributes its shard of blocks; all ranks need the full updated parameters
        dist.all_gather_into_tensor(self._global_buffer, self._local_buffer(), group=self._dist_group)
        self._copy_global_buffer_into_params()


class DistributedShampoo(Optimizer):
    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for state_lists, group in zip(self._per_group_state_lists, self.param_groups):
            distributor = state_lists["distributor"]
            # Skip this param group if there are no gradients on this rank.
            if not distributor.merge_and_block_gradients():
                continue  # DIVERGES  (data-dependent: a rank may have no grads for this group)
            masked_grads = state_lists["masked_blocked_grads"]
            self._update_preconditioners(state_lists, masked_grads, group)
            search_dirs = self._compute_search_directions(state_lists, masked_grads, group)
            torch._foreach_mul_(search_dirs, -group["lr"])
            distributor.update_params(masked_blocked_search_directions=search_dirs)
            state_lists["step"].add_(1)
        return loss
