"""
Source: https://github.com/pytorch/torchtitan/issues/1618
Project: torchtitan
Reported: 2025-08
Backend: NCCL
Hang: With validation.steps = -1 the Validator iterates its per-DP-rank validation dataloader until it is
exhausted. Each DP rank gets its own shard of the packed C4 validation stream, so ranks run out of batches at
different counts (e.g. rank 0 after 87 batches, rank 1 after 89). The rank that stops early leaves the loop and
enters the dp_cp all_reduce for the mean loss, while the other rank is still inside the FSDP-sharded forward
issuing parameter all-gathers; the collectives no longer line up and validation hangs.
Fix: Use a finite default number of validation steps (warn when -1 is set) and make the validation dataloader
infinite when steps is positive, so every rank runs exactly `steps` batches (merged PR #1634).
"""
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset

from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.tools.logging import logger


@dataclass
class ValidationConfig:
    enabled: bool = True
    dataset: str = "c4_validation"
    freq: int = 500
    steps: int = -1  # -1: consume the whole validation set


@dataclass
class JobConfig:
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    local_batch_size: int = 8
    seq_len: int = 2048


class HuggingFaceDataset(IterableDataset):
    def __init__(self, dataset_name, tokenizer, seq_len, dp_rank, dp_world_size, infinite=False):
        self.dataset_name = dataset_name
        self._tokenizer = tokenizer
        self.seq_len = seq_len
        self.dp_rank = dp_rank
        self.dp_world_size = dp_world_size
        self.infinite = infinite
        self._data = self._load_shard()

    def _load_shard(self):
        # split_dataset_by_node: every rank holds a different slice of documents
        from datasets.distributed import split_dataset_by_node
        from datasets import load_dataset
        ds = load_dataset("allenai/c4", name="en", split="validation", streaming=True)
        return split_dataset_by_node(ds, self.dp_rank, self.dp_world_size)

    def __iter__(self):
        buffer = []
        while True:
            for sample in self._data:
                buffer.extend(self._tokenizer.encode(sample["text"], bos=True, eos=True))
                while len(buffer) >= self.seq_len + 1:
                    x = torch.LongTensor(buffer[: self.seq_len + 1])
                    buffer = buffer[self.seq_len + 1:]
                    yield {"input": x[:-1]}, x[1:]
            if not self.infinite:
                break


def build_validation_dataloader(job_config, dp_world_size, dp_rank, tokenizer, infinite=False):
    ds = HuggingFaceDataset(job_config.validation.dataset, tokenizer, job_config.seq_len,
                            dp_rank, dp_world_size, infinite=infinite)
    return ParallelAwareDataloader(ds, dp_rank=dp_rank, dp_world_size=dp_world_size,
                                   batch_size=job_config.local_batch_size)


class Validator:
    def __init__(self, job_config, dp_world_size, dp_rank, tokenizer, parallel_dims, loss_fn,
                 metrics_processor):
        self.job_config = job_config
        self.parallel_dims = parallel_dims
        self.loss_fn = loss_fn
        self.metrics_processor = metrics_processor
        self.validation_dataloader = build_validation_dataloader(
            job_config=job_config, dp_world_size=dp_world_size, dp_rank=dp_rank, tokenizer=tokenizer)

    @torch.no_grad()
    def validate(self, model_parts, step):
        model = model_parts[0]
        model.eval()
        accumulated_losses = []
        num_steps = 0
        for input_dict, labels in self.validation_dataloader:  # DIVERGES
            if self.job_config.validation.steps != -1 and num_steps >= self.job_config.validation.steps:
                break
            inputs = input_dict["input"].cuda()
            labels = labels.cuda()
            predictions = model(inputs)  # FSDP all-gathers parameters per block
            accumulated_losses.append(self.loss_fn(predictions, labels).detach())
            num_steps += 1

        loss = torch.sum(torch.stack(accumulated_losses)) / num_steps
        if self.parallel_dims.dp_cp_enabled:
            mesh = self.parallel_dims.world_mesh["dp_cp"]
            dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=mesh.get_group())
        self.metrics_processor.log_validation(loss=loss.item(), step=step)
        model.train()
