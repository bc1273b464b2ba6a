"""
Source: https://github.com/PrimeIntellect-ai/prime-rl/pull/2636
Project: prime-rl (SFT trainer validation loop, FSDP2)
Reported: 2026-05
Backend: NCCL
Hang: run_eval_loop iterates each rank's validation dataloader until it is exhausted. The packing
dataset drops the trailing partial chunk, so with variable-length samples the ranks end up with
different numbers of packed batches (e.g. 327 vs 338). Every forward of the FSDP model is a collective
(parameter all-gather on the dp_shard group), so the rank that runs out first reaches the post-loop
all_reduce of the loss sum while the others are still inside an FSDP all-gather: NCCL watchdog timeout.
Fix: coordinate the loop exit: before each batch every rank all-reduces a has_data flag with MIN, and
as soon as any rank is out of data all ranks leave the loop together (fixes issue #2515).
"""
from typing import Iterable

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

from prime_rl.trainer.sft.loss import compute_loss
from prime_rl.utils.logger import get_logger


def run_eval_loop(model: FSDPModule, val_dataloader: Iterable, device: torch.device) -> dict:
    logger = get_logger()
    model.eval()
    total_loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    total_tokens = torch.zeros((), device=device, dtype=torch.float64)
    nan_count = torch.zeros((), device=device, dtype=torch.int64)
    num_batches = 0

    with torch.no_grad():
        for micro_batches in val_dataloader:  # DIVERGES
            for mb in micro_batches:
                input_ids = mb["input_ids"].to(device)
                position_ids = mb["position_ids"].to(device)
                loss_mask = mb["loss_mask"].to(device)
                # FSDP forward: all-gathers the sharded parameters on every call
                logits = model(input_ids=input_ids, position_ids=position_ids).logits
                loss_sum, n_tok = compute_loss(logits, mb["target_ids"].to(device), loss_mask)
                if torch.isnan(loss_sum):
                    nan_count += 1
                    continue
                total_loss_sum += loss_sum.double()
                total_tokens += n_tok
            num_batches += 1

    dist.all_reduce(total_loss_sum)
    dist.all_reduce(total_tokens)
    dist.all_reduce(nan_count)
    model.train()
    logger.info(f"val: {num_batches} batches on this rank")
    return {
        "val/loss": (total_loss_sum / total_tokens.clamp(min=1)).item(),
        "val/nan_batches": int(nan_count.item()),
    }
