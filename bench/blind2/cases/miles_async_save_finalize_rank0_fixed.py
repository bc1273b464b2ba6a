"""
Source: https://github.com/radixark/miles/pull/1763
Project: miles (Megatron backend)
Reported: 2026-07
Backend: NCCL
Hang: With asynchronous Megatron distributed checkpointing and a post-save hook, the actor
finalized the pending async save (a blocking finalize that does distributed coordination
across the training ranks) only on rank 0, right before running the hook there. The
other ranks returned from save_model without finalizing, so rank 0 waits forever inside
the async-call finalization for peers that never join it.
Fix: finalize the async save on every training rank, then keep only the hook itself
restricted to rank 0.
"""
import torch.distributed as dist
from megatron.training.async_utils import maybe_finalize_async_save
from megatron.training.checkpointing import save_checkpoint


class MegatronTrainRayActor:
    def __init__(self, args, model, optimizer, opt_param_scheduler):
        self.args = args
        self.model = model
        self.optimizer = optimizer
        self.opt_param_scheduler = opt_param_scheduler

    @property
    def is_rank_0(self) -> bool:
        return dist.get_rank() == 0

    def _run_post_save_hook(self, iteration: int) -> None:
        hook = self.args.post_save_hook
        if hook is not None:
            hook(self.args.save, iteration)

    def save_model(self, iteration: int) -> None:
        save_checkpoint(
            iteration,
            self.model,
            self.optimizer,
            self.opt_param_scheduler,
            num_floating_point_operations_so_far=0,
        )
        if self.args.post_save_hook is None:
            return
        if self.args.async_save:
            # finalization coordinates all training ranks: run it everywhere
            maybe_finalize_async_save(blocking=True)
        if self.is_rank_0:
            self._run_post_save_hook(iteration)
