"""
Source: https://github.com/ai2cm/ace/pull/850
Project: ACE / fme (ai2cm climate emulator trainer)
Reported: 2026-02
Backend: NCCL
Hang: `_validate_loss` raises when the loss is NaN, but the check runs on each rank's local loss.
If only a subset of ranks sees a NaN, those ranks raise and leave the training loop, while the
remaining ranks call `loss.backward()`, whose DDP gradient all-reduce now waits for ranks that are
gone; the job sits there until the NCCL timeout instead of failing fast.
Fix: When training is distributed, shut the process group down inside `_validate_loss` before
raising (the PR's change), so the other ranks' pending collectives fail immediately instead of hanging.
"""
import torch
import torch.distributed as dist


class Distributed:
    """fme's distributed helper, reached through a singleton."""

    _instance = None

    @classmethod
    def get_instance(cls):
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def __init__(self):
        self.world_size = dist.get_world_size() if dist.is_initialized() else 1

    def is_distributed(self):
        return self.world_size > 1

    def shutdown(self):
        if dist.is_initialized():
            dist.destroy_process_group()


def _validate_loss(loss: torch.Tensor):
    if torch.isnan(loss):  # DIVERGES
        raise ValueError("Loss is NaN-valued during training.")  # DIVERGES


class Optimization:
    def __init__(self, parameters, lr=1e-4):
        self.optimizer = torch.optim.AdamW(parameters, lr=lr)

    def step_weights(self, loss: torch.Tensor):
        _validate_loss(loss)
        loss.backward()  # DDP gradient all-reduce
        self.optimizer.step()
        self.optimizer.zero_grad()


class Trainer:
    def __init__(self, stepper, optimization: Optimization, train_data):
        self.stepper = stepper  # wraps a DDP module
        self.optimization = optimization
        self.train_data = train_data

    def train_one_epoch(self):
        for batch in self.train_data:
            loss = self.stepper.compute_loss(batch)
            self.optimization.step_weights(loss)
