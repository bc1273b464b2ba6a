"""
Source: https://github.com/lifeiteng/vall-e/pull/93
Project: vall-e (lifeiteng, icefall-style trainer)
Reported: 2023-04
Backend: NCCL
Hang: With the dynamic bucketing sampler each rank gets a different number of training batches per epoch. On 8
GPUs one rank exhausts its train dataloader first, leaves the batch loop and runs the end-of-epoch validation,
where MetricsTracker.reduce() issues an all_reduce. The other ranks are still training the next batch and wait
in DDP's gradient all_reduce, so the two groups of ranks sit in different collectives forever.
Fix: Every iteration, all_gather each rank's "dataloader exhausted" flag; as soon as any rank has run out, all
ranks stop the epoch together before validation.
"""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from icefall.utils import MetricsTracker


def compute_validation_loss(params, model, valid_dl, world_size: int) -> MetricsTracker:
    model.eval()
    tot_loss = MetricsTracker()
    with torch.no_grad():
        for batch in valid_dl:
            loss, loss_info = model(batch)
            tot_loss = tot_loss + loss_info
    if world_size > 1:
        tot_loss.reduce(loss.device)  # all_reduce of every tracked metric
    model.train()
    return tot_loss


def train_one_epoch(params, model: DDP, optimizer, scheduler, train_dl, valid_dl, rank: int, world_size: int):
    model.train()
    tot_loss = MetricsTracker()
    dl_iter = iter(train_dl)
    batch_idx = 0
    while True:
        try:
            batch = next(dl_iter)  # per-rank: number of batches differs across ranks
        except StopIteration:
            break  # DIVERGES  (this rank leaves while others keep training)
        batch_idx += 1
        params.batch_idx_train += 1
        loss, loss_info = model(batch)
        optimizer.zero_grad()
        loss.backward()  # DDP gradient all_reduce
        optimizer.step()
        scheduler.step_batch(params.batch_idx_train)
        tot_loss = (tot_loss * (1 - 1 / params.reset_interval)) + loss_info / params.reset_interval

        if batch_idx % params.valid_interval == 0:
            compute_validation_loss(params, model, valid_dl, world_size)

    # end-of-epoch validation
    valid_info = compute_validation_loss(params, model, valid_dl, world_size)  # DIVERGES
    return tot_loss, valid_info
