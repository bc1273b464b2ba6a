"""
Source: https://github.com/EleutherAI/sparsify/pull/5
Project: EleutherAI sae / sparsify (SaeTrainer, plain torch.distributed DDP)
Reported: 2024-07
Backend: NCCL
Hang: `SaeTrainer.save()` opens with an early `return` for every process that is not rank 0 (when
modules are not distributed), and ends with `dist.barrier()`. Only rank 0 gets to that barrier; the
other ranks return, start the next step and enter the all-reduce of the training metrics, so
rank 0 is in a barrier while the others are in a reduce and training freezes at the save step.
Fix: Drop the early return; guard only the file writing by rank, so every rank reaches
`dist.barrier()` at the end of `save()`.
"""
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor


@dataclass
class TrainConfig:
    run_name: str | None = None
    save_every: int = 1000
    distribute_modules: bool = False
    log_to_wandb: bool = False


class SaeTrainer:
    def __init__(self, cfg: TrainConfig, saes: dict, optimizer):
        self.cfg = cfg
        self.saes = saes
        self.optimizer = optimizer
        self.global_step = 0

    @property
    def _rank_zero(self) -> bool:
        return not dist.is_initialized() or dist.get_rank() == 0

    def maybe_all_reduce(self, x: Tensor, op: str = "mean") -> Tensor:
        if not dist.is_initialized() or self.cfg.distribute_modules:
            return x
        if op == "mean":
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
            x /= dist.get_world_size()
        return x

    def save(self):
        """Save the SAEs to disk."""
        path = self.cfg.run_name or "checkpoints"
        if not self._rank_zero and not self.cfg.distribute_modules:  # DIVERGES
            return  # DIVERGES

        for hook, sae in self.saes.items():
            sae.save_to_disk(f"{path}/{hook}")
        torch.save(self.optimizer.state_dict(), f"{path}/optimizer.pt")

        # Barrier so ranks don't race ahead while rank 0 is writing.
        if dist.is_initialized():
            dist.barrier()

    def step(self, batch_losses: dict):
        avg = {}
        for name, loss in batch_losses.items():
            loss.backward()
            avg[name] = self.maybe_all_reduce(loss.detach()).item()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return avg

    def fit(self, batches):
        for batch_losses in batches:
            metrics = self.step(batch_losses)
            self.global_step += 1
            if self._rank_zero and self.cfg.log_to_wandb:
                print(metrics)
            if self.global_step % self.cfg.save_every == 0:
                self.save()
        self.save()
