"""
Source: https://github.com/lightseekorg/TorchSpec/issues/126
Project: TorchSpec (speculative-decoding draft training, FSDP2)
Reported: 2026-06
Backend: NCCL
Hang: `DataFetcher` drops samples on each rank independently via `_should_skip_for_loss_mask`
(all-zero loss mask or fewer than `min_loss_tokens` supervised tokens). With `micro_batch_size=1`,
a rank that drops a sample the others keep runs one micro-batch fewer, hence one FSDP parameter
all-gather fewer; from then on the ranks are one collective apart and the next all-gather blocks
until the watchdog fires (flight recorder: one rank exactly one collective behind).
Fix: The skip decision must be made in lockstep; the fix written here all-reduces the per-sample
skip flag over the DP group (skip only if every rank skips, otherwise all ranks keep the sample
and a rank with nothing to learn contributes a zero-weighted loss).
"""
import torch
import torch.distributed as dist


class DataFetcher:
    def __init__(self, loader, min_loss_tokens=32, dp_group=None):
        self.loader = loader
        self.min_loss_tokens = min_loss_tokens
        self.dp_group = dp_group

    def _should_skip_for_loss_mask(self, sample):
        loss_mask = sample["loss_mask"]
        return loss_mask.sum().item() == 0 or loss_mask.sum().item() < self.min_loss_tokens

    def _all_ranks_skip(self, local_skip):
        if not dist.is_initialized():
            return local_skip
        flag = torch.tensor([0 if local_skip else 1], device=torch.cuda.current_device())
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.dp_group)
        return flag.item() == 0  # skip only if no rank wants to keep the sample

    def __iter__(self):
        for sample in self.loader:
            local_skip = self._should_skip_for_loss_mask(sample)
            if self._all_ranks_skip(local_skip):
                continue
            if local_skip:
                sample["loss_mask"] = torch.zeros_like(sample["loss_mask"])  # zero-weighted
            yield sample


class DFlashTrainer:
    def __init__(self, draft_model, target_model, optimizer, accumulation_steps=2):
        self.draft_model = draft_model  # FSDP2 fully_shard
        self.target_model = target_model
        self.optimizer = optimizer
        self.accumulation_steps = accumulation_steps

    def _micro_step(self, sample):
        with torch.no_grad():
            hidden = self.target_model(sample["input_ids"], output_hidden_states=True).hidden_states
        logits = self.draft_model(sample["input_ids"], hidden)  # FSDP all-gather
        loss = (torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), sample["labels"].flatten(), reduction="none"
        ) * sample["loss_mask"].flatten()).sum() / sample["loss_mask"].sum().clamp(min=1)
        (loss / self.accumulation_steps).backward()  # FSDP reduce-scatter
        return loss.detach()

    def train(self, fetcher: DataFetcher):
        for i, sample in enumerate(fetcher):
            self._micro_step(sample)
            if (i + 1) % self.accumulation_steps == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
