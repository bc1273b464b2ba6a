"""
Source: https://github.com/Lightning-AI/pytorch-lightning/issues/19780
Project: PyTorch Lightning (Fabric)
Reported: 2024-04
Backend: NCCL
Hang: The user's training script wraps `fabric.save(...)` in `if fabric.global_rank == 0`.
`Fabric.save` is a collective API: the strategy decides which rank writes, and it ends with a
`barrier()`. With the guard, rank 0 enters that barrier alone while the other ranks continue to the
next epoch's gradient all-reduce, so the job hangs after the first checkpoint.
Fix: Remove the `if fabric.global_rank == 0` guard and call `fabric.save` on all ranks (maintainer's
answer in the thread).
"""
import torch
import torch.nn as nn
import lightning as L
import torch.distributed as dist


class DDPLikeStrategy:
    """What Fabric's DDP strategy does for checkpoints: write on global rank zero only."""

    def __init__(self, global_rank):
        self.global_rank = global_rank

    @property
    def is_global_zero(self):
        return self.global_rank == 0

    def save_checkpoint(self, path, state):
        if self.is_global_zero:
            torch.save({k: (v.state_dict() if hasattr(v, "state_dict") else v) for k, v in state.items()}, path)

    def barrier(self, name=None):
        dist.barrier()


class FabricFacade:
    def __init__(self, fabric: L.Fabric):
        self._fabric = fabric
        self._strategy = DDPLikeStrategy(fabric.global_rank)

    @property
    def global_rank(self):
        return self._fabric.global_rank

    def save(self, path, state):
        self._strategy.save_checkpoint(path=path, state=state)
        self.barrier()

    def barrier(self, name=None):
        self._strategy.barrier(name=name)

    def backward(self, loss):
        self._fabric.backward(loss)  # DDP gradient all-reduce


def train(fabric: L.Fabric, model: nn.Module, optimizer, train_loader, num_epochs):
    facade = FabricFacade(fabric)
    for epoch in range(num_epochs):
        model.train()
        for batch in train_loader:
            x, y = batch
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            facade.backward(loss)
            optimizer.step()

        state = {"model": model, "optimizer": optimizer, "epoch": epoch}
        if facade.global_rank == 0:  # DIVERGES
            facade.save("state.pkl", state)  # DIVERGES
