"""
Source: https://github.com/huggingface/trl/issues/3933
Project: TRL (GRPOTrainer, top_entropy_quantile < 1)
Reported: 2025-08
Backend: NCCL
Hang: get_high_entropy_mask computes the entropy threshold over all ranks by accelerator.gather()-ing
each rank's non-padding entropies. The number of non-padding completion tokens differs per rank, so
ranks call the all-gather with different tensor lengths and the job hangs. Additionally a rank whose
completions are all padding returns early, before the gather, and leaves the others waiting in it.
Fix: Pad the local entropies to a common length with accelerator.pad_across_processes (sentinel pad
value), gather on every rank, drop the sentinel, then compute the quantile (#3964, #4041).
"""
import torch
from accelerate import Accelerator
from transformers import Trainer


class GRPOTrainer(Trainer):
    def __init__(self, model, args, accelerator: Accelerator, **kwargs):
        self.model = model
        self.args = args
        self.accelerator = accelerator
        self.top_entropy_quantile = args.top_entropy_quantile

    def get_high_entropy_mask(self, entropies: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
        non_pad_entropies = entropies[mask.bool()].float()
        if non_pad_entropies.numel() == 0:  # DIVERGES: this rank skips the gather below
            return torch.zeros_like(entropies, dtype=torch.bool)
        all_non_pad_entropies = self.accelerator.gather(non_pad_entropies)  # DIVERGES: per-rank length
        entropy_threshold = torch.quantile(all_non_pad_entropies, threshold)
        masked_entropies = entropies * mask.float()
        return (masked_entropies >= entropy_threshold) & mask.bool()

    def _compute_loss(self, model, inputs):
        completion_mask = inputs["completion_mask"]
        per_token_logps, entropies = self._get_per_token_logps_and_entropies(model, inputs)
        if self.top_entropy_quantile < 1.0:
            entropy_mask = self.get_high_entropy_mask(entropies, completion_mask, 1 - self.top_entropy_quantile)
        else:
            entropy_mask = None
        advantages = inputs["advantages"].unsqueeze(1)
        per_token_loss = -torch.exp(per_token_logps - per_token_logps.detach()) * advantages
        if entropy_mask is not None:
            per_token_loss = per_token_loss * entropy_mask
        return (per_token_loss * completion_mask).sum() / completion_mask.sum().clamp(min=1.0)

    def _get_per_token_logps_and_entropies(self, model, inputs):
        logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
        logits = logits[:, -inputs["completion_mask"].shape[1] - 1 : -1]
        logps = torch.log_softmax(logits.float(), dim=-1)
        token_logps = logps.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
        entropies = -(logps.exp() * logps).sum(-1)
        return token_logps, entropies
