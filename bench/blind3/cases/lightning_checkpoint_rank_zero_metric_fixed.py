"""
Source: https://github.com/Lightning-AI/pytorch-lightning/issues/19045
Project: PyTorch Lightning
Reported: 2023-11
Backend: NCCL
Hang: The monitored validation metric is logged with self.log(..., rank_zero_only=True), so it only appears in
callback_metrics on rank 0. ModelCheckpoint's top-k check returns False on the other ranks (current is None) and
they skip saving, while rank 0 goes into _update_best_and_save: it broadcasts the file-exists check and enters the
barrier in Trainer.save_checkpoint. The other ranks are already in the next collective, so the broadcast /
barrier sequence no longer matches and training hangs (the debug wrapper reports mismatched BROADCASTs).
Fix: Do not use rank_zero_only for a metric that a callback monitors; log it on every rank (with sync_dist) so
every rank takes the same checkpoint decision (Lightning PR #19056 documents this rule).
"""
import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint


class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        val_loss = torch.nn.functional.mse_loss(self.net(x), y)
        # monitored by ModelCheckpoint: must exist on every rank
        self.log("val_loss", val_loss, on_epoch=True, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class TopKCheckpoint(ModelCheckpoint):
    """Same decision path as ModelCheckpoint._save_monitor_checkpoint."""

    def _save_monitor_checkpoint(self, trainer, monitor_candidates):
        current = monitor_candidates.get(self.monitor)
        if self.check_monitor_top_k(trainer, current):
            # file_exists() broadcasts, _save_checkpoint() -> trainer.save_checkpoint() barriers
            self._update_best_and_save(current, trainer, monitor_candidates)


def main(train_loader, val_loader):
    checkpoint = TopKCheckpoint(monitor="val_loss", mode="min", save_top_k=2, dirpath="ckpts")
    trainer = pl.Trainer(accelerator="gpu", devices=4, strategy="ddp", max_epochs=10, callbacks=[checkpoint])
    trainer.fit(Regressor(), train_loader, val_loader)
