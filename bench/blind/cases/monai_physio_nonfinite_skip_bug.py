"""
Source: https://github.com/Project-MONAI/monai-physio/pull/137
Project: monai-physio (PhysicsNeMo-based trainer, DDP)
Reported: 2026-09
Backend: NCCL
Hang: The trainer added a guard that `continue`s past a batch whose loss is non-finite, to keep
Adam's moments from being poisoned. Under DDP each rank gets disjoint samples from
`_iter_batches`, so the loss can be NaN/inf on one rank and finite on the others. The skipping rank
never calls `loss.backward()` (no DDP gradient all-reduce) and moves to its next batch, while the
other ranks block in the all-reduce of the current one; the later `_reduce_sums` cannot realign them.
Fix: Decide the skip collectively (the review's proposed fix): all-reduce a non-finite flag across
ranks and skip the batch on every rank if any rank saw a non-finite loss.
"""
import torch
import torch.distributed as dist


class PhysicsNemoBaseTrainer:
    def __init__(self, model, optimizer, loss_fn, distributed=True):
        self.model = model  # DistributedDataParallel in distributed runs
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.distributed = distributed

    def log_warning(self, msg, *args):
        print(msg % args)

    def _iter_batches(self, loader):
        # DistributedSampler: each rank sees different samples.
        for batch in loader:
            yield batch

    def _reduce_sums(self, total, count):
        t = torch.tensor([total, count], device=next(self.model.parameters()).device)
        if self.distributed:
            dist.all_reduce(t)
        return (t[0] / t[1].clamp(min=1)).item()

    def train_epoch(self, epoch, loader):
        self.model.train()
        total, count = 0.0, 0
        for pred_in, tgt, batch_len, target_scale, indices in self._iter_batches(loader):
            self.optimizer.zero_grad(set_to_none=True)
            pred = self.model(pred_in)
            loss = self.loss_fn(pred, tgt, batch_len, target_scale, indices)
            if not torch.isfinite(loss):  # DIVERGES
                self.log_warning(
                    "Epoch %d: non-finite loss (%s); skipping this batch.", epoch + 1, float(loss.detach())
                )
                continue  # DIVERGES: this rank skips backward and its DDP all-reduce
            loss.backward()
            self.optimizer.step()
            total += float(loss.detach())
            count += 1
        return self._reduce_sums(total, count)
