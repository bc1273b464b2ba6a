"""
Source: https://github.com/alan-turing-institute/autocast/pull/386
Project: autocast (alan-turing-institute), Lightning DDP training entry point
Reported: 2026-05
Backend: NCCL
Hang: After trainer.fit() the script saves a final checkpoint inside an `if trainer.is_global_zero:`
block, but Lightning's Trainer.save_checkpoint is itself collective (it ends with strategy.barrier()).
Rank 0 therefore issues two barriers (the one inside save_checkpoint and the later
"checkpoint-alias-finalize" barrier) while the other ranks issue only the second. NCCL pairs rank 0's
first barrier with the others' only barrier, the other ranks leave, and rank 0's second barrier has
no partner until the watchdog kills the job.
Fix: call trainer.save_checkpoint() on every rank (Lightning writes the file from rank 0 only) and keep
only the pure file-system work under is_global_zero.
"""
import os
from pathlib import Path
from typing import Optional

import lightning as L
import torch


def _alias_latest(ckpt_path: Path, alias: str = "last.ckpt") -> None:
    link = ckpt_path.parent / alias
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(ckpt_path.name, link)


def _finalize_checkpoint_alias(trainer: L.Trainer, ckpt_path: Path) -> None:
    if trainer.is_global_zero:
        _alias_latest(ckpt_path)
    # make sure no rank starts evaluation before the alias exists
    trainer.strategy.barrier("checkpoint-alias-finalize")


def run_training(cfg, model: L.LightningModule, datamodule: L.LightningDataModule,
                 output_dir: Path) -> Optional[Path]:
    trainer = L.Trainer(
        accelerator="gpu",
        devices=cfg.devices,
        strategy="ddp",
        max_epochs=cfg.max_epochs,
        max_time=cfg.max_time,
        default_root_dir=str(output_dir),
    )
    trainer.fit(model, datamodule=datamodule)

    final_ckpt = output_dir / "checkpoints" / "final.ckpt"
    if trainer.is_global_zero:
        final_ckpt.parent.mkdir(parents=True, exist_ok=True)
        # save_checkpoint ends in strategy.barrier(): only rank 0 reaches it here
        trainer.save_checkpoint(str(final_ckpt))  # DIVERGES
        torch.save({"config": dict(cfg)}, output_dir / "run_config.pt")

    _finalize_checkpoint_alias(trainer, final_ckpt)
    return final_ckpt


def train_autoencoder(cfg, ae: L.LightningModule, datamodule: L.LightningDataModule,
                      output_dir: Path) -> Path:
    ckpt = run_training(cfg, ae, datamodule, output_dir / "autoencoder")
    return ckpt
