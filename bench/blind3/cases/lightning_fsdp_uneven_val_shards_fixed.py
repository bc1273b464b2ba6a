"""
Source: https://github.com/Lightning-AI/pytorch-lightning/issues/20561
Project: PyTorch Lightning
Reported: 2025-01
Backend: NCCL
Hang: The LLM is trained with FSDPStrategy and each rank reads its own validation shard, so the ranks get
different numbers of validation batches. Lightning's evaluation loop simply runs until the rank's own
dataloader is exhausted; the rank with the shortest shard (rank 5 after batch 50) leaves the loop and goes on
to the epoch-end metric sync, while the other ranks call the FSDP-wrapped model again, whose forward all-gathers
parameters from every rank including the one that already left. The job stalls until the NCCL watchdog fires.
Fix: No fix in the thread (the reply only says every rank must feed the model the same number of batches); the
obvious one is applied: ranks agree on the smallest shard size (all_reduce MIN) and cut their shard to it so every
rank runs the same number of validation steps.
"""
import glob
import json
import os
from typing import Dict, List

import torch
import lightning as L
from lightning.pytorch.strategies import FSDPStrategy
from torch.utils.data import DataLoader, Dataset


class JsonlShardDataset(Dataset):
    def __init__(self, files: List[str]):
        self.records = []
        for path in files:
            with open(path) as fh:
                self.records.extend(json.loads(line) for line in fh)

    def __len__(self):
        return len(self.records)

    def __getitem__(self, idx):
        rec = self.records[idx]
        return {"input_ids": torch.tensor(rec["input_ids"]), "labels": torch.tensor(rec["labels"])}


class ShardedTextDataModule(L.LightningDataModule):
    """Each trainer reads only the files assigned to its global rank (files differ in length)."""

    def __init__(self, data_dir: str, batch_size: int = 8):
        super().__init__()
        self.data_dir = data_dir
        self.batch_size = batch_size
        self.val_ds = None

    def _files_for_this_rank(self, split: str) -> List[str]:
        files = sorted(glob.glob(os.path.join(self.data_dir, split, "*.jsonl")))
        rank, world = self.trainer.global_rank, self.trainer.world_size
        return files[rank::world]

    def setup(self, stage: str):
        self.val_ds = JsonlShardDataset(self._files_for_this_rank("val"))
        # agree on the shortest shard so every rank runs the same number of validation steps
        local_len = torch.tensor([len(self.val_ds)], device=torch.device("cuda", torch.cuda.current_device()))
        torch.distributed.all_reduce(local_len, op=torch.distributed.ReduceOp.MIN)
        self.val_ds.records = self.val_ds.records[: int(local_len.item())]

    def val_dataloader(self):
        # distributed sampler is disabled (use_distributed_sampler=False): the shard is already per rank
        return DataLoader(self.val_ds, batch_size=self.batch_size, shuffle=False)


class CausalLMModule(L.LightningModule):
    def __init__(self, model_factory):
        super().__init__()
        self.model_factory = model_factory
        self.model = None

    def configure_model(self):
        if self.model is None:
            self.model = self.model_factory()

    def validation_step(self, input_dict: Dict, batch_idx: int) -> Dict[str, torch.Tensor]:
        # FSDP forward: all-gather of the sharded parameters over all ranks
        pred_dict = self.model(input_dict)
        loss_dict = self.model.get_loss_dict(gt_dict=input_dict, pred_dict=pred_dict)
        self.log_dict(
            {f"val_loss/{key}": loss for key, loss in loss_dict.items()},
            on_step=False,
            on_epoch=True,
            sync_dist=True,
        )
        return pred_dict

    def training_step(self, batch, batch_idx):
        pred = self.model(batch)
        return self.model.get_loss_dict(gt_dict=batch, pred_dict=pred)["total"]

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


def main(model_factory, data_dir: str):
    trainer = L.Trainer(
        accelerator="gpu",
        devices=8,
        strategy=FSDPStrategy(sharding_strategy="FULL_SHARD"),
        use_distributed_sampler=False,
        val_check_interval=1000,
    )
    trainer.fit(CausalLMModule(model_factory), datamodule=ShardedTextDataModule(data_dir))
