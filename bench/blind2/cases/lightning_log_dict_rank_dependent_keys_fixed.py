"""
Source: https://github.com/Lightning-AI/pytorch-lightning/issues/19106
Project: PyTorch Lightning (user LightningModule)
Reported: 2023-12
Backend: NCCL
Hang: The module builds its metrics dict from the classes present in the local batch and
logs it with self.log_dict(..., sync_dist=True). With sync_dist each logged key triggers
a reduction over all ranks (_sync_ddp -> all_reduce / all_gather_object), once per key in
the local dict order. When ranks see different classes, their dicts have different keys
(and counts), so rank 0 reduces "loss/cat" while rank 1 reduces "loss/dog" or has already
moved on; the collectives mismatch (TORCH_DISTRIBUTED_DEBUG reports BROADCAST vs
ALLREDUCE) and training deadlocks.
Fix: log the same, fixed set of keys on every rank (fill classes absent from the local
batch with a neutral value) so every rank issues the same sequence of reductions. The
issue thread has no merged fix; this is the obvious one.
"""
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule

CLASS_NAMES = ["cat", "dog", "bird", "horse"]


class PerClassLossModule(LightningModule):
    def __init__(self, backbone: torch.nn.Module, lr: float = 1e-3):
        super().__init__()
        self.backbone = backbone
        self.lr = lr

    def _per_class_losses(self, logits: torch.Tensor, targets: torch.Tensor) -> dict:
        losses = F.cross_entropy(logits, targets, reduction="none")
        out = {}
        for cls_idx, name in enumerate(CLASS_NAMES):  # same keys, same order on every rank
            mask = targets == cls_idx
            value = losses[mask].mean() if mask.any() else losses.new_zeros(())
            out[f"train/loss_{name}"] = value
        return out

    def training_step(self, batch, batch_idx):
        images, targets = batch
        logits = self.backbone(images)
        loss = F.cross_entropy(logits, targets)
        metrics = self._per_class_losses(logits.detach(), targets)
        metrics["train/loss"] = loss.detach()
        # sync_dist reduces every key across ranks, in this rank's key order
        self.log_dict(metrics, sync_dist=True, on_step=True, on_epoch=False)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)
