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

    @staticmethod
    def _sync(value, group=None):
        value = value.clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM, group=group)
        return value / dist.get_world_size(group)

    def __init__(self):
        self.values = {}
        self._pending_sync = {}

    def log(self, key, value, sync_dist=False):
        if sync_dist and dist.is_initialized():
            self._pending_sync[key] = value  # deferred to sync_on_step_metrics()
        else:
            self.values[key] = value

    def _assert_sync_dist_metric_keys_consistency(self):
        keys = sorted(self._pending_sync)
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, keys)
        if any(k != keys for k in gathered):
            raise RuntimeError(f"ranks logged different sync_dist keys: {gathered}")

    def sync_on_step_metrics(self):
        if not dist.is_initialized():
            return
        self._assert_sync_dist_metric_keys_consistency()
        for key in sorted(self._pending_sync):
            self.values[key] = self._sync(self._pending_sync[key])
        self._pending_sync.clear()


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
            if mask.any():
                acc_c = (preds[mask] == c).float().mean()
                self.log(f"val_acc_class_{c}", acc_c, sync_dist=True)
        self.log("val_loss", loss, sync_dist=True)
        return loss

    def on_validation_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):
        # Loop hook point: validate keys, then reduce in a deterministic order.
        self._results.sync_on_step_metrics()
