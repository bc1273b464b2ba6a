"""
Source: https://github.com/Lightning-AI/pytorch-lightning/pull/21434
Project: PyTorch Lightning (self.log with sync_dist=True)
Reported: 2025-12
Backend: NCCL
Hang: `self.log(..., sync_dist=True)` all-reduces the value right away, once per logged key, in the
order the step logs them. When the set of keys depends on per-rank data (here a per-class metric is
logged only if the rank's batch contains that class), ranks issue different numbers of all-reduces
or pair different keys: values of different metrics are silently averaged together, and when the
counts differ a rank is left waiting in an all-reduce that nobody else joins.
Fix: Defer on-step syncs to a controlled point after the step, first all-gather the logged keys to
check that every rank has the same set (raise a clear error otherwise), then reduce in a
deterministic (sorted) key order (the PR's approach).
"""
import torch
import torch.distributed as dist
import lightning.pytorch as pl


class _ResultCollection:
    """Condensed Lightning result store: sync happens inside `log` when sync_dist=True."""

    def __init__(self):
        self.values = {}

    @staticmethod
    def _sync(value, group=None):
        value = value.clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM, group=group)
        return value / dist.get_world_size(group)

    def log(self, key, value, sync_dist=False):
        if sync_dist and dist.is_initialized():
            value = self._sync(value)  # one all-reduce per logged key, in call order
        self.values[key] = value


class SegmentationModule(pl.LightningModule):
    def __init__(self, net, num_classes):
        super().__init__()
        self.net = net
        self.num_classes = num_classes
        self._results = _ResultCollection()

    def log(self, name, value, sync_dist=False, **kwargs):
        self._results.log(name, torch.as_tensor(value, device=self.device, dtype=torch.float32), sync_dist)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        preds = logits.argmax(1)
        for c in range(self.num_classes):
            mask = y == c
            if mask.any():  # DIVERGES
                acc_c = (preds[mask] == c).float().mean()
                self.log(f"val_acc_class_{c}", acc_c, sync_dist=True)  # DIVERGES
        self.log("val_loss", loss, sync_dist=True)
        return loss
